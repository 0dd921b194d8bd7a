"""Host-side NVIDIA objects (as Gluon's ``triton.experimental.gluon.nvidia``)."""
from . import hopper  # noqa: F401


def max_active_clusters(compiled, num_ctas: int, device: int = 0) -> int:
    """Clusters of ``num_ctas`` CTAs of a compiled kernel (``kernel.trace(...).compile()``) that
    the GPU runs at once: the grid of a persistent kernel launched with ``num_ctas``."""
    from ..backends.nvidia.launcher import max_active_clusters as query
    return query(compiled, num_ctas, device)

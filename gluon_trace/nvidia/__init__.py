"""Host-side NVIDIA objects (as Gluon's ``triton.experimental.gluon.nvidia``)."""
from . import hopper  # noqa: F401

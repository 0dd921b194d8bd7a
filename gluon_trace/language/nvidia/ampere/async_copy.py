"""Asynchronous global -> shared copies (cp.async): issue, commit a group, wait for groups."""
from ....errors import TraceError, user_location
from ....tracer import current
from ...memory import _int
from ...tensor import broadcast_pair, to_tensor

__all__ = ["async_load", "async_copy_global_to_shared", "commit_group", "wait_group", "mbarrier_arrive"]


def async_load(smem, pointer, mask=None, cache_modifier="", eviction_policy="", volatile=False) -> None:
    """Copy the elements ``pointer`` addresses into ``smem`` (same shape); masked-off elements
    are written as zeros. The data may be read only after a ``wait_group`` that covers the
    group this copy was committed in."""
    ptr = to_tensor(pointer)
    ops = [smem.value, ptr.value]
    if mask is not None:
        m = to_tensor(mask)
        ptr, m = broadcast_pair(ptr, m)
        ops = [smem.value, ptr.value, m.value]
    if cache_modifier not in ("", ".ca", ".cg", "ca", "cg"):
        raise TraceError(f"cache_modifier must be '', 'ca' or 'cg', got {cache_modifier!r}", user_location())
    current().create("async_copy_load", ops, {"mask": mask is not None,
                                              "cache": cache_modifier.strip(".")})


async_copy_global_to_shared = async_load  # the older Gluon name


def commit_group() -> None:
    current().create("async_copy_commit_group", [])


def wait_group(num_outstanding=0) -> None:
    current().create("async_copy_wait_group", [], {"num_outstanding": _int(num_outstanding, "num_outstanding")})


def mbarrier_arrive(mbarrier, increment_count=True) -> None:
    """Arrive on ``mbarrier`` once this thread's earlier async copies have landed."""
    current().create("async_copy_mbarrier_arrive", [mbarrier.value], {"increment_count": bool(increment_count)})

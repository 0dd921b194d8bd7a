"""mbarriers: shared-memory barriers with an arrival count, a transaction (byte) count and a
phase bit. ``wait(bar, phase)`` blocks until the phase of that parity has completed."""
from .... import dtypes as dt
from ....shared_layouts import MBarrierLayout
from ....tracer import current
from ...memory import _int, allocate_shared_memory
from ...tensor import to_tensor

__all__ = ["MBarrierLayout", "allocate_mbarrier", "init", "invalidate", "expect", "arrive", "wait"]


def allocate_mbarrier(batch=None, two_ctas=False):
    """One mbarrier (an int64 [1] buffer), or ``batch`` of them ([batch, 1]; pick with .index(i))."""
    shape = [1] if batch is None else [_int(batch, "batch"), 1]
    return allocate_shared_memory(dt.int64, shape, MBarrierLayout())


def _pred(pred, ops, attrs):
    if pred is not True:
        p = to_tensor(pred, dt.int1)
        ops.append((p if p.dtype.is_bool else p != 0).value)
        attrs["pred"] = True


def init(mbarrier, count) -> None:
    current().create("mbarrier_init", [mbarrier.value], {"count": _int(count, "count")})


def invalidate(mbarrier) -> None:
    current().create("mbarrier_invalidate", [mbarrier.value], {})


def expect(mbarrier, bytes_per_cta=None, pred=True, nbytes=None) -> None:
    """Arrive once and expect ``bytes`` more to land (TMA loads complete them)."""
    n = bytes_per_cta if bytes_per_cta is not None else nbytes
    ops, attrs = [mbarrier.value], {"bytes": _int(n, "byte count")}
    _pred(pred, ops, attrs)
    current().create("mbarrier_expect", ops, attrs)


def arrive(mbarrier, *, count=1, pred=True, cta=None) -> None:
    """``count`` arrivals on ``mbarrier``; with ``cta`` (a rank in the cluster, sm_90), on the
    same mbarrier of that CTA instead (a consumer releasing a buffer its peer multicasts into)."""
    ops, attrs = [mbarrier.value], {"count": _int(count, "count")}
    _pred(pred, ops, attrs)
    if cta is not None:
        ops.append(to_tensor(cta, dt.int32).value)
        attrs["remote"] = True
    current().create("mbarrier_arrive", ops, attrs)


def wait(mbarrier, phase, pred=True, deps=()) -> None:
    ph = to_tensor(phase, dt.int32)
    ops, attrs = [mbarrier.value, ph.value], {}
    _pred(pred, ops, attrs)
    ops += [d.value for d in deps]
    current().create("mbarrier_wait", ops, attrs)

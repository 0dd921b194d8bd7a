"""TMA: bulk tensor copies between global memory (through a TensorDescriptor) and shared memory."""
from ....errors import TraceError
from ....tracer import current, user_location
from ...memory import _int
from ...tensor import to_tensor
from .... import dtypes as dt

__all__ = ["async_load", "async_store", "store_wait", "async_copy_global_to_shared",
           "async_copy_shared_to_global"]


def _coords(coord):
    return [to_tensor(c, dt.int32).value for c in coord]


EVICTION_POLICIES = ("evict_first", "evict_last", "evict_normal")


def async_load(tensor_desc, coord, barrier, result, pred=True, multicast=0, eviction_policy="") -> None:
    """Copy the block at ``coord`` into ``result``; its bytes complete on ``barrier``
    (pair with ``mbarrier.expect(barrier, desc.block_type.nbytes)``). Out-of-bounds elements
    read as zeros.

    In a cluster (``num_ctas`` > 1), ``multicast`` is a mask of CTA ranks (or True: all of
    them): the block lands in ``result`` in each of those CTAs, and its bytes complete on
    ``barrier`` in each (the same buffers and barrier, allocated alike in every CTA).

    ``eviction_policy`` ("evict_first", "evict_last" or "evict_normal"; default none) is how
    long L2 should keep the block's lines (PTX ``.L2::cache_hint``): e.g. evict_last for an
    operand many CTAs read, evict_first for one streamed once. A hint: results do not change."""
    if eviction_policy not in ("",) + EVICTION_POLICIES:
        raise TraceError(f"eviction_policy={eviction_policy!r}: one of {', '.join(map(repr, EVICTION_POLICIES))} "
                         "(or '' for none)", user_location())
    ops = [tensor_desc.value, *_coords(coord), barrier.value, result.value]
    attrs = {"eviction_policy": eviction_policy} if eviction_policy else {}
    if multicast is not False and multicast != 0:
        n = current().graph.num_ctas
        mask = (1 << n) - 1 if multicast is True else multicast
        if not isinstance(mask, int) or not 0 < mask < (1 << n):
            raise TraceError(f"multicast={multicast!r}: a mask of CTA ranks in a cluster of {n} (an int "
                             f"in [1, {1 << n}), or True for all)", user_location(),
                             notes=("launch with num_ctas=2 (or more) to multicast",) if n == 1 else ())
        if mask != 1 or n > 1:  # a "cluster" of one: an ordinary load
            attrs["multicast"] = mask
    if pred is not True:
        p = to_tensor(pred, dt.int1)
        ops.append((p if p.dtype.is_bool else p != 0).value)
        attrs["pred"] = True
    current().create("tma_load", ops, attrs)


def async_store(tensor_desc, coord, src) -> None:
    """Copy ``src`` to the block at ``coord`` (out-of-bounds elements are skipped); ``src`` may
    be overwritten only after ``store_wait``. Fence first if registers were just stored to it."""
    current().create("tma_store", [tensor_desc.value, *_coords(coord), src.value], {})


def store_wait(pendings=0) -> None:
    current().create("tma_store_wait", [], {"pendings": _int(pendings, "pendings")})


async_copy_global_to_shared = async_load
async_copy_shared_to_global = async_store

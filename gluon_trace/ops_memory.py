"""Op-table entries for the memory hierarchy: shared-memory buffers and their views,
barriers (CTA-wide and mbarriers), Ampere async copies and Hopper TMA.

A shared buffer is a value of :class:`MemDescType`. Views (``smem_index``, ``smem_slice``,
``smem_permute``, ``smem_reshape``, ``smem_reinterpret``) are pure; everything that reads or
writes the bytes is an effect, kept in traced order. The rules here are the only place these
ops are defined; backends and the interpreter register one rule per name.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from . import dtypes as dt
from .errors import LayoutError
from .ir import MemDescType, TensorDescType, Type
from .ops import _check_layout, define


def _is_shared_layout(layout) -> bool:
    return hasattr(layout, "offsets") and hasattr(layout, "alloc_elements")


def layout_rank(layout) -> int:
    """How many trailing dims a shared layout swizzles; leading dims are stacked copies."""
    rank = getattr(layout, "rank", None)
    if isinstance(rank, int):
        return rank
    order = getattr(layout, "order", None)
    if order is not None:
        return len(order)
    shape = getattr(layout, "shape", None)
    return len(shape) if shape is not None else 2


@functools.lru_cache(maxsize=512)
def element_offsets(layout, shape: tuple, bits: int) -> tuple[np.ndarray, int]:
    """Element offset of every coordinate of a buffer of ``shape`` and the elements it spans;
    leading dims beyond the layout's rank stack whole copies of the swizzled tile."""
    r = layout_rank(layout)
    lead, inner = shape[:len(shape) - r], shape[len(shape) - r:]
    tile = np.asarray(layout.offsets(inner, bits), dtype=np.int64)
    span = int(layout.alloc_elements(inner, bits))
    n = math.prod(lead) if lead else 1
    offs = (np.arange(n, dtype=np.int64).reshape(lead + (1,) * r) * span + tile) if lead else tile
    offs = np.ascontiguousarray(np.broadcast_to(offs, shape))
    offs.flags.writeable = False
    return offs, n * span


def check_shared(ctx, layout, shape, dtype, what="shared memory") -> None:
    if not _is_shared_layout(layout):
        raise ctx.error(f"{what} needs a shared layout (gl.SwizzledSharedLayout, gl.NVMMASharedLayout, "
                        f"gl.PaddedSharedLayout), got {layout!r}", LayoutError)
    for s in shape:
        if not isinstance(s, int) or s <= 0:
            raise ctx.error(f"shared buffer shape {list(shape)} must be positive ints")
    r = layout_rank(layout)
    if len(shape) < r:
        raise ctx.error(f"{layout!r} describes {r} dims but the buffer has shape {list(shape)}; "
                        f"give the buffer at least {r} dims (leading dims stack whole copies)",
                        LayoutError)
    inner = tuple(shape[len(shape) - r:])
    for s in inner:
        if s & (s - 1):
            raise ctx.error(f"the swizzled dims {list(inner)} of shared buffer {list(shape)} must be "
                            "powers of two (only the leading, stacked dims may be any size)")
    try:
        layout.verify(inner, dtype.bits, loc=ctx.loc)
    except LayoutError as e:
        raise ctx.error(e.message, LayoutError, notes=e.notes) from None


def _memdesc(ctx, t, what: str) -> MemDescType:
    if not isinstance(t, MemDescType):
        raise ctx.error(f"{what} must be a shared-memory descriptor (from gl.allocate_shared_memory), "
                        f"got {t}")
    return t


def _int_scalar(ctx, t, what: str) -> None:
    if not t.is_scalar or not t.dtype.is_int or t.dtype.is_bool:
        raise ctx.error(f"{what} must be an integer scalar, got {t}")


def _pred(ctx, ts, attrs, i: int) -> int:
    if attrs.get("pred"):
        t = ts[i]
        if not t.is_scalar or not t.dtype.is_bool:
            raise ctx.error(f"pred must be a scalar int1 (a comparison), got {t}")
        return i + 1
    return i


# -- allocation and views ---------------------------------------------------------------------

def _alloc(ctx, ts, attrs, regions):
    dtype, shape, layout = attrs["dtype"], tuple(attrs["shape"]), attrs["layout"]
    if dtype.is_ptr:
        raise ctx.error("shared memory holds numbers, not pointers; store int64 addresses instead")
    check_shared(ctx, layout, shape, dtype)
    if ts:
        (v,) = ts
        if is_tile_like(v) is False:
            raise ctx.error(f"the initial value must be a register tile, got {v}")
        if tuple(v.shape) != shape or v.dtype != dtype:
            raise ctx.error(f"the initial value is {v}, the buffer holds {list(shape)} x {dtype}")
    return [MemDescType(dtype, shape, layout, alloc_shape=shape, mutable=True)]


def is_tile_like(t) -> bool:
    return not isinstance(t, (MemDescType, TensorDescType)) and not t.is_scalar


def _index(ctx, ts, attrs, regions):
    m = _memdesc(ctx, ts[0], "smem.index()")
    _int_scalar(ctx, ts[1], "the buffer index")
    if len(m.shape) - 1 < layout_rank(m.layout):
        sub = _indexed_layout(m)
        if sub is None:
            raise ctx.error(f".index(i) drops the leading dim of {list(m.shape)}, which {m.layout!r} "
                            "swizzles; index only stacked (leading) dims, or slice instead")
        return [dataclasses.replace(m, shape=m.shape[1:], layout=sub)]
    return [dataclasses.replace(m, shape=m.shape[1:])]


def _indexed_layout(m: MemDescType):
    """The layout of ``m.index(i)`` where the layout's own rank covers the dropped dim (a 3-D
    TMA block's NVMMA layout, rank 3): the same layout one rank lower, when each slab lies
    exactly as that layout places a buffer of the slab's shape, at a whole slab's offset (the
    swizzle's period divides a slab); else None."""
    r = getattr(m.layout, "rank", None)
    if not isinstance(r, int) or r < 2 or tuple(m.alloc_shape[len(m.alloc_shape) - len(m.shape):]) != m.shape:
        return None
    try:
        sub = dataclasses.replace(m.layout, rank=r - 1)
        whole, _ = element_offsets(m.layout, tuple(m.shape), m.dtype.bits)
        part, _ = element_offsets(sub, tuple(m.shape[1:]), m.dtype.bits)
    except Exception:  # the lower-rank layout refuses the slab's shape
        return None
    slab = int(np.prod(m.shape[1:]))
    ok = all(np.array_equal(whole[i], part + i * slab) for i in range(m.shape[0]))
    return sub if ok else None


def _slice(ctx, ts, attrs, regions):
    m = _memdesc(ctx, ts[0], "smem.slice()")
    start, length, dim = attrs["start"], attrs["length"], attrs["dim"]
    if not 0 <= dim < len(m.shape):
        raise ctx.error(f"slice dim {dim} is not a dim of {list(m.shape)}")
    if length <= 0 or start < 0 or start + length > m.shape[dim]:
        raise ctx.error(f"slice [{start}, {start + length}) is outside dim {dim} of size {m.shape[dim]}")
    shape = m.shape[:dim] + (length,) + m.shape[dim + 1:]
    r = layout_rank(m.layout)
    if dim >= len(m.shape) - r and length & (length - 1):
        raise ctx.error(f"a slice of a swizzled dim must have a power-of-two length, got {length}")
    return [dataclasses.replace(m, shape=shape)]


def permute_shared_layout(layout, order):
    """The layout a permuted view has: the same bytes, seen with dims reordered."""
    order = tuple(order)
    r = layout_rank(layout)
    lead = len(order) - r
    if tuple(order[:lead]) != tuple(range(lead)):
        return None
    inner = [d - lead for d in order[lead:]]
    if inner == list(range(r)):
        return layout
    if hasattr(layout, "transposed") and r == 2:
        return dataclasses.replace(layout, transposed=not layout.transposed)
    if hasattr(layout, "order"):
        return dataclasses.replace(layout, order=tuple(inner.index(d) for d in layout.order))
    if getattr(layout, "offset_bases", None) is not None and getattr(layout, "shape", None) is not None:
        # a linear (padded) layout: the same offsets, each basis' coordinates reordered
        return dataclasses.replace(layout, offset_bases=tuple(tuple(b[d] for d in inner) for b in layout.offset_bases),
                                   shape=tuple(layout.shape[d] for d in inner))
    return None


def _permute(ctx, ts, attrs, regions):
    m = _memdesc(ctx, ts[0], "smem.permute()")
    order = tuple(attrs["order"])
    if sorted(order) != list(range(len(m.shape))):
        raise ctx.error(f"permute order {list(order)} is not a permutation of {len(m.shape)} dims")
    lay = permute_shared_layout(m.layout, order)
    if lay is None:
        raise ctx.error(f"permute {list(order)} of a buffer in {m.layout!r} moves a stacked dim "
                        "into the swizzled ones; only the swizzled (trailing) dims can be permuted")
    return [dataclasses.replace(m, shape=tuple(m.shape[d] for d in order), layout=lay)]


def _reshape(ctx, ts, attrs, regions):
    m = _memdesc(ctx, ts[0], "smem.reshape()")
    shape = tuple(attrs["shape"])
    if math.prod(shape) != m.numel:
        raise ctx.error(f"cannot reshape {list(m.shape)} ({m.numel} elements) to {list(shape)}")
    r = layout_rank(m.layout)
    if tuple(shape[len(shape) - r:]) != tuple(m.shape[len(m.shape) - r:]):
        # allowed when the layout, applied to the new shape, puts every element where it is
        # (e.g. stacked tiles merged into rows when the swizzle period divides the tile)
        ok = m.shape == m.alloc_shape and len(shape) >= r and all(
            s > 0 and s & (s - 1) == 0 for s in shape[len(shape) - r:])
        if ok:
            try:
                old, _ = element_offsets(m.layout, tuple(m.shape), m.dtype.bits)
                new, _ = element_offsets(m.layout, tuple(shape), m.dtype.bits)
                ok = np.array_equal(old.reshape(shape), new)
            except Exception:  # the layout refuses the new shape
                ok = False
        if not ok:
            raise ctx.error(f"reshape {list(m.shape)} -> {list(shape)} moves elements within "
                            f"{m.layout!r}; reshape only the stacked (leading) dims, or use "
                            "smem.reinterpret(dtype, shape, layout)")
    return [dataclasses.replace(m, shape=shape)]


def _reinterpret(ctx, ts, attrs, regions):
    m = _memdesc(ctx, ts[0], "smem.reinterpret()")
    dtype, shape, layout = attrs["dtype"], tuple(attrs["shape"]), attrs["layout"]
    check_shared(ctx, layout, shape, dtype)
    new = math.prod(shape) * dtype.bits
    old = math.prod(m.alloc_shape) * m.dtype.bits
    if new > old:
        raise ctx.error(f"reinterpret as {list(shape)} x {dtype} needs {new // 8} bytes; the allocation "
                        f"has {old // 8}")
    return [MemDescType(dtype, shape, layout, alloc_shape=shape, mutable=m.mutable)]


define("smem_alloc", _alloc, has_side_effects=True, memory_operands=True,
       doc="a shared-memory buffer (optionally filled from a register tile)")
define("smem_index", _index, memory_operands=True, doc="view: the i-th buffer along the leading dim")
define("smem_slice", _slice, memory_operands=True, doc="view: [start, start + length) along dim")
define("smem_permute", _permute, memory_operands=True, doc="view: dims reordered")
define("smem_reshape", _reshape, memory_operands=True, doc="view: stacked dims regrouped")
define("smem_reinterpret", _reinterpret, memory_operands=True,
       doc="view: the allocation's bytes as another dtype/shape/layout")


def _smem_load(ctx, ts, attrs, regions):
    m = _memdesc(ctx, ts[0], "smem.load()")
    _check_layout(ctx, attrs["layout"], m.shape)
    return [Type(m.dtype, m.shape, attrs["layout"])]


def _smem_store(ctx, ts, attrs, regions):
    m = _memdesc(ctx, ts[0], "smem.store()")
    v = ts[1]
    if not is_tile_like(v):
        raise ctx.error(f"smem.store() takes a register tile, got {v}")
    if tuple(v.shape) != m.shape or v.dtype != m.dtype:
        raise ctx.error(f"storing {v} into a buffer of {list(m.shape)} x {m.dtype}",
                        notes=("convert with .to(dtype) or pick the matching sub-buffer with "
                               ".index(i) / .slice(...)",))
    if not m.mutable:
        raise ctx.error("this shared buffer is read-only")
    return []


define("smem_load", _smem_load, has_side_effects=True, memory_operands=True)
define("smem_store", _smem_store, has_side_effects=True, memory_operands=True)


# -- barriers ---------------------------------------------------------------------------------

def _barrier(ctx, t, what="the barrier") -> None:
    m = _memdesc(ctx, t, what)
    if m.dtype != dt.int64 or m.numel != 1:
        raise ctx.error(f"{what} must be one mbarrier (an int64 [1] buffer from "
                        f"mbarrier.allocate_mbarrier(), or bars.index(i)), got {m}")


def _thread_barrier(ctx, ts, attrs, regions):
    return []


def _mb_init(ctx, ts, attrs, regions):
    _barrier(ctx, ts[0])
    c = attrs["count"]
    if not isinstance(c, int) or c < 1:
        raise ctx.error(f"mbarrier.init count must be a positive int, got {c!r}")
    return []


def _mb_simple(ctx, ts, attrs, regions):
    _barrier(ctx, ts[0])
    _pred(ctx, ts, attrs, 1)
    return []


def _mb_expect(ctx, ts, attrs, regions):
    _barrier(ctx, ts[0])
    n = attrs["bytes"]
    if not isinstance(n, int) or n < 0 or n >= 1 << 20:
        raise ctx.error(f"mbarrier.expect byte count must be an int in [0, 2**20), got {n!r}")
    _pred(ctx, ts, attrs, 1)
    return []


def _mb_arrive(ctx, ts, attrs, regions):
    _barrier(ctx, ts[0])
    if not isinstance(attrs["count"], int) or attrs["count"] < 1:
        raise ctx.error("mbarrier.arrive count must be a positive int")
    i = _pred(ctx, ts, attrs, 1)
    if attrs.get("remote"):
        _require_target(ctx, "an arrival on another CTA's mbarrier", 90)
        _int_scalar(ctx, ts[i], "the CTA rank an arrival goes to")
    return []


def _mb_wait(ctx, ts, attrs, regions):
    _barrier(ctx, ts[0])
    _int_scalar(ctx, ts[1], "the mbarrier phase")
    i = _pred(ctx, ts, attrs, 2)
    for t in ts[i:]:
        _memdesc(ctx, t, "a wait dependency")
    return []


define("thread_barrier", _thread_barrier, has_side_effects=True)
define("mbarrier_init", _mb_init, has_side_effects=True, memory_operands=True)
define("mbarrier_invalidate", _mb_simple, has_side_effects=True, memory_operands=True)
define("mbarrier_expect", _mb_expect, has_side_effects=True, memory_operands=True,
       doc="arrive once and expect `bytes` of transactions (mbarrier.arrive.expect_tx)")
define("mbarrier_arrive", _mb_arrive, has_side_effects=True, memory_operands=True)
define("mbarrier_wait", _mb_wait, has_side_effects=True, memory_operands=True,
       doc="block until the phase with parity `phase` has completed")


# -- Ampere async copies ------------------------------------------------------------------------

def _async_load(ctx, ts, attrs, regions):
    m = _memdesc(ctx, ts[0], "the destination")
    p = ts[1]
    if not p.dtype.is_ptr or p.is_scalar or is_tile_like(p) is False:
        raise ctx.error(f"async_copy needs a tile of pointers, got {p}")
    if tuple(p.shape) != m.shape:
        raise ctx.error(f"the pointer tile {list(p.shape)} and the buffer {list(m.shape)} differ in shape")
    if p.dtype.element != m.dtype:
        raise ctx.error(f"copying {p.dtype.element} into a buffer of {m.dtype}")
    if p.dtype.element.bits < 8 or p.dtype.element.is_bool:
        raise ctx.error("async copies move bytes; int1 buffers are not supported (use int8)")
    if attrs.get("mask"):
        mk = ts[2]
        if not mk.dtype.is_bool:
            raise ctx.error(f"mask must be int1, got {mk.dtype}")
        ctx.check_same_tiles("mask", [p, mk])
    return []


def _no_operands(ctx, ts, attrs, regions):
    return []


def _wait_group(ctx, ts, attrs, regions):
    n = attrs["num_outstanding"]
    if not isinstance(n, int) or n < 0:
        raise ctx.error(f"wait_group takes a non-negative int, got {n!r}")
    return []


def _copy_mb_arrive(ctx, ts, attrs, regions):
    _barrier(ctx, ts[0])
    return []


define("async_copy_load", _async_load, has_side_effects=True, memory_operands=True,
       doc="cp.async: global -> shared, completes at a later wait_group")
define("async_copy_commit_group", _no_operands, has_side_effects=True)
define("async_copy_wait_group", _wait_group, has_side_effects=True)
define("async_copy_mbarrier_arrive", _copy_mb_arrive, has_side_effects=True, memory_operands=True,
       doc="arrive on the barrier once this thread's earlier async copies complete")


# -- TMA ----------------------------------------------------------------------------------------

def _tensordesc(ctx, t) -> TensorDescType:
    if not isinstance(t, TensorDescType):
        raise ctx.error(f"expected a TMA tensor descriptor (a TensorDescriptor kernel argument), got {t}")
    return t


def _tma_common(ctx, d: TensorDescType, coords, smem):
    if len(coords) != d.rank:
        raise ctx.error(f"the descriptor has rank {d.rank}; give {d.rank} coordinates, got {len(coords)}")
    for c in coords:
        _int_scalar(ctx, c, "a TMA coordinate")
    m = _memdesc(ctx, smem, "the shared buffer")
    if m.shape != d.shape or m.dtype != d.dtype:
        swapped = type(m.layout).__name__ == "MBarrierLayout"
        raise ctx.error(f"the shared buffer {list(m.shape)} x {m.dtype} does not match the descriptor's "
                        f"block {list(d.shape)} x {d.dtype}",
                        notes=("it is an mbarrier: tma.async_load(desc, coords, barrier, buffer) takes the "
                               "barrier before the buffer",) if swapped else ())
    if m.layout != d.layout:
        raise ctx.error(f"the shared buffer's layout {m.layout!r} differs from the descriptor's "
                        f"{d.layout!r}; allocate the buffer with desc.layout", LayoutError)


def _count(ctx, ts, want: int, d: TensorDescType) -> None:
    if len(ts) != want:
        raise ctx.error(f"the descriptor has rank {d.rank}; give {d.rank} coordinates, got "
                        f"{len(ts) - (want - d.rank)}")


def _tma_load(ctx, ts, attrs, regions):
    _require_target(ctx, "TMA", 90)
    d = _tensordesc(ctx, ts[0])
    n = d.rank
    _count(ctx, ts, 3 + n + (1 if attrs.get("pred") else 0), d)
    coords, bar, smem = ts[1:1 + n], ts[1 + n], ts[2 + n]
    _tma_common(ctx, d, coords, smem)
    _barrier(ctx, bar)
    _pred(ctx, ts, attrs, 3 + n)
    m = attrs.get("multicast", 0)
    if not isinstance(m, int) or isinstance(m, bool) or not 0 <= m < 256:
        raise ctx.error(f"multicast must be a mask of the cluster's CTA ranks (an int below 256), got {m!r}")
    ev = attrs.get("eviction_policy", "")
    if ev not in ("", "evict_first", "evict_last", "evict_normal"):
        raise ctx.error(f"eviction_policy must be evict_first, evict_last or evict_normal, got {ev!r}")
    return []


def _tma_store(ctx, ts, attrs, regions):
    _require_target(ctx, "TMA", 90)
    d = _tensordesc(ctx, ts[0])
    n = d.rank
    _count(ctx, ts, 2 + n, d)
    _tma_common(ctx, d, ts[1:1 + n], ts[1 + n])
    return []


def _store_wait(ctx, ts, attrs, regions):
    n = attrs["pendings"]
    if not isinstance(n, int) or n < 0:
        raise ctx.error(f"store_wait takes a non-negative int, got {n!r}")
    return []


def sm_version(target: str | None) -> int | None:
    if target and target.startswith("sm_"):
        return int("".join(ch for ch in target[3:] if ch.isdigit()))
    return None


def _require_target(ctx, what: str, sm: int, suffix_a: bool = False) -> None:
    t = ctx.target
    if t is None or t == "interpreter":
        return
    v = sm_version(t)
    if v is None:
        raise ctx.error(f"{what} is an NVIDIA instruction; this kernel is traced for {t}",
                        notes=("trace for an sm_90a target, or use the target's own ops",))
    if v < sm or (suffix_a and not t.endswith("a")):
        need = f"sm_{sm}{'a' if suffix_a else ''}"
        raise ctx.error(f"{what} needs {need} or newer; this kernel is traced for {t}",
                        notes=(f"launch on a GPU that has it or trace with target='{need}'",))


def _cluster_id(ctx, ts, attrs, regions):
    _require_target(ctx, "cluster.cta_rank() (%cluster_ctarank)", 90)
    return [Type(dt.int32)]


def _cluster_barrier(ctx, ts, attrs, regions):
    _require_target(ctx, "gl.cluster_barrier() (barrier.cluster)", 90)
    return []


define("cluster_cta_id", _cluster_id, doc="this CTA's rank in its cluster (0 .. num_ctas - 1)")
define("cluster_barrier", _cluster_barrier, has_side_effects=True,
       doc="every thread of every CTA of the cluster meets; earlier mbarrier inits and shared-memory "
           "writes are visible to the cluster after it")
define("tma_load", _tma_load, has_side_effects=True, memory_operands=True,
       doc="cp.async.bulk.tensor global -> shared; completes bytes on the mbarrier")
define("tma_store", _tma_store, has_side_effects=True, memory_operands=True,
       doc="cp.async.bulk.tensor shared -> global; completes at store_wait")
define("tma_store_wait", _store_wait, has_side_effects=True)
define("fence_async_shared", _no_operands, has_side_effects=True,
       doc="order generic-proxy shared-memory writes before later async-proxy reads")


def _tensordesc_dim(ctx, ts, attrs, regions):
    d = _tensordesc(ctx, ts[0])
    if not 0 <= attrs["dim"] < d.rank:
        raise ctx.error(f"dim {attrs['dim']} is not a dim of a rank-{d.rank} descriptor")
    return [Type(dt.int32)]


define("tensordesc_dim", _tensordesc_dim, memory_operands=True,
       doc="the global tensor's size along dim, from a TMA descriptor argument")


_MEMORY_NAMES = {"smem_alloc", "smem_index", "smem_slice", "smem_permute", "smem_reshape",
                 "smem_reinterpret", "smem_load", "smem_store", "thread_barrier", "mbarrier_init",
                 "mbarrier_invalidate", "mbarrier_expect", "mbarrier_arrive", "mbarrier_wait",
                 "async_copy_load", "async_copy_commit_group", "async_copy_wait_group",
                 "async_copy_mbarrier_arrive", "tma_load", "tma_store", "tma_store_wait",
                 "fence_async_shared", "tensordesc_dim", "mma_v2", "mfma", "wmma", "dot_fma",
                 "wgmma", "wgmma_wait", "warp_specialize"}
MEMORY_OPS = tuple(sorted(_MEMORY_NAMES))  # the ops of the memory-hierarchy / tensor-core phase

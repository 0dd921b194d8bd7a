"""Hopper's asynchronous machinery: mbarriers, the async-proxy fence and TMA copies.

Who issues what. The interpreter counts ONE arrival per ``mbarrier.arrive``/``expect`` call
and one TMA copy per ``tma.async_load``, whatever the number of threads; PTX counts per
executing thread. So every op that changes a barrier's or a copy's state (init, invalidate,
arrive, expect_tx, bulk copies and their groups) runs in one elected thread of the partition
(thread 0: ``owner_pred(None)``); waits run in every thread, each spinning on
``mbarrier.try_wait.parity`` itself.

Ordering with the other threads:
- ``init``: a ``bar.sync`` after it, so no thread arrives on or waits for a barrier that is
  not yet initialised.
- ``arrive`` (a consumer releasing a buffer): a ``bar.sync`` before it, so the one arrival
  stands for every thread's earlier accesses.
- ``invalidate``: a ``bar.sync`` before it (nobody is still waiting).
- ``tma.store_wait``: only the issuing thread's bulk groups are waited for, so a ``bar.sync``
  after it before anyone writes the buffer again.
- Accesses by the other threads before a TMA copy of a buffer: membar's barrier (a TMA load
  writes its buffer, a TMA store reads it), plus the user's ``fence_async_shared`` between
  generic writes and an async-proxy read.

A descriptor argument is a 128-byte CUtensorMap in the kernel's parameter space
(``.param .align 64 .b8 name[128]``), addressed through ``cvta.param``; its global shape
follows as one ``.u32`` parameter per dim (for ``tensordesc_dim``), see :func:`declare_desc`.
"""
from __future__ import annotations

from .emitter import rule
from .rules_smem import Smem, _barrier_if_needed, _view_of
from .tma import box_of


def declare_desc(em, v, pname: str) -> list[str]:
    """The parameter declarations of descriptor argument ``v``; its value is the generic
    address of the CUtensorMap, its dims go to ``em.flags['tma_dims'][v]``."""
    t = v.type
    decls = [f".param .align 64 .b8 {pname}[128]"]
    p = em.reg("b64")
    em.pro(f"mov.b64 {p}, {pname};")
    a = em.reg("b64")
    em.pro(f"cvta.param.u64 {a}, {p};")  # TMA takes a generic address of the param-space map
    dims = []
    for d in range(t.rank):
        decls.append(f".param .u32 {pname}_dim{d}")
        r = em.reg("b32")
        em.pro(f"ld.param.u32 {r}, [{pname}_dim{d}];")
        dims.append(r)
    em.flags.setdefault("tma_dims", {})[v] = dims
    em.flags["tma"] = True
    em.vals[v] = [a]
    return decls


def _addr(em, s: Smem) -> str:
    """The shared address of a view's first element (barriers, TMA boxes, wgmma tiles)."""
    off = s.const + int(s.rel.flat[0])
    if not off:
        return s.base
    key = ("sview", s.base, off)
    r = em.memo_get(key)
    if r is None:
        r = em.ins("b32", f"add.u32 {{d}}, {s.base}, {off};")
        em.memo_put(key, r)
    return r


def _elected(em, op, pred_index: int | None) -> str:
    """Thread 0 of the partition, and the op's own predicate when it has one."""
    p = em.owner_pred(None)
    if pred_index is None or not op.attrs.get("pred"):
        return p
    user = em.vals[op.operands[pred_index]][0]
    return em.ins("pred", f"and.pred {{d}}, {p}, {user};")


def _b32(em, v) -> str:
    r = em.vals[v][0]
    if v.type.dtype.bits == 64:
        return em.ins("b32", f"cvt.u32.u64 {{d}}, {r};")
    return r


# -- mbarriers ----------------------------------------------------------------------------------

@rule("mbarrier_init")
def _mb_init(em, op):
    a = _addr(em, _view_of(em, op.operands[0]))
    em.emit(f"@{em.owner_pred(None)} mbarrier.init.shared::cta.b64 [{a}], {int(op.attrs['count'])};")
    em.barrier()
    return []


@rule("mbarrier_invalidate")
def _mb_invalidate(em, op):
    a = _addr(em, _view_of(em, op.operands[0]))
    em.barrier()
    em.emit(f"@{_elected(em, op, 1)} mbarrier.inval.shared::cta.b64 [{a}];")
    return []


@rule("mbarrier_expect")
def _mb_expect(em, op):
    a = _addr(em, _view_of(em, op.operands[0]))
    em.emit(f"@{_elected(em, op, 1)} mbarrier.arrive.expect_tx.shared::cta.b64 _, [{a}], "
            f"{int(op.attrs['bytes'])};")
    return []


@rule("mbarrier_arrive")
def _mb_arrive(em, op):
    a = _addr(em, _view_of(em, op.operands[0]))
    em.barrier()
    em.emit(f"@{_elected(em, op, 1)} mbarrier.arrive.shared::cta.b64 _, [{a}], {int(op.attrs['count'])};")
    return []


@rule("mbarrier_wait")
def _mb_wait(em, op):
    a = _addr(em, _view_of(em, op.operands[0]))
    phase = em.ins("b32", f"and.b32 {{d}}, {_b32(em, op.operands[1])}, 1;")
    top, done = em.label("MBW"), em.label("MBD")
    if op.attrs.get("pred"):
        em.emit(f"@!{em.vals[op.operands[2]][0]} bra {done};")
    ok = em.reg("pred")
    em.emit(f"{top}:")
    em.emit(f"mbarrier.try_wait.parity.shared::cta.b64 {ok}, [{a}], {phase};")
    em.emit(f"@!{ok} bra {top};")
    em.emit(f"{done}:")
    return []


@rule("fence_async_shared")
def _fence(em, op):
    em.emit("fence.proxy.async.shared::cta;")
    return []


# -- TMA ----------------------------------------------------------------------------------------

def _boxes(em, op, desc_v, coords, s: Smem):
    """(shared address, coordinate list innermost first) of each box of the block."""
    t = desc_v.type
    box = box_of(_Block(t))
    base = _addr(em, s)
    cs = [_b32(em, c) for c in coords][::-1]
    out = []
    for b in range(box.copies):
        c0 = cs[0] if b == 0 else em.ins("b32", f"add.s32 {{d}}, {cs[0]}, {b * box.dims[0]};")
        dst = base if b == 0 else em.ins("b32", f"add.u32 {{d}}, {base}, {b * box.block_bytes};")
        out.append((dst, [c0] + cs[1:]))
    return out


class _Block:
    """What tma.box_of reads of a TensorDescriptor, from its traced type."""

    def __init__(self, t):
        self.dtype, self.layout, self.block_shape = t.dtype, t.layout, list(t.shape)


@rule("tma_load")
def _tma_load(em, op):
    desc_v = op.operands[0]
    t = desc_v.type
    n = t.rank
    coords = op.operands[1:1 + n]
    bar = _addr(em, _view_of(em, op.operands[1 + n]))
    s = _view_of(em, op.operands[2 + n])
    _barrier_if_needed(em, op)
    g = _elected(em, op, 3 + n)
    tmap = em.vals[desc_v][0]
    for dst, cs in _boxes(em, op, desc_v, coords, s):
        em.emit(f"@{g} cp.async.bulk.tensor.{n}d.shared::cluster.global.mbarrier::complete_tx::bytes "
                f"[{dst}], [{tmap}, {{{', '.join(cs)}}}], [{bar}];")
    return []


@rule("tma_store")
def _tma_store(em, op):
    desc_v = op.operands[0]
    t = desc_v.type
    n = t.rank
    s = _view_of(em, op.operands[1 + n])
    _barrier_if_needed(em, op)
    g = em.owner_pred(None)
    tmap = em.vals[desc_v][0]
    for src, cs in _boxes(em, op, desc_v, op.operands[1:1 + n], s):
        em.emit(f"@{g} cp.async.bulk.tensor.{n}d.global.shared::cta.bulk_group "
                f"[{tmap}, {{{', '.join(cs)}}}], [{src}];")
    em.emit(f"@{g} cp.async.bulk.commit_group;")
    return []


@rule("tma_store_wait")
def _store_wait(em, op):
    em.emit(f"@{em.owner_pred(None)} cp.async.bulk.wait_group.read {int(op.attrs['pendings'])};")
    em.barrier()
    return []


@rule("tensordesc_dim")
def _dim(em, op):
    # descriptors are kernel arguments only (the IR has no other way to make one)
    return [[em.flags["tma_dims"][op.operands[0]][op.attrs["dim"]]]]


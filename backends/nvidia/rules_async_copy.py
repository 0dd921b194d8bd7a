"""CTA barriers and cp.async on NVIDIA. An async copy is visible to other threads after the
user's ``wait_group`` and the barrier :mod:`gluon_trace.membar` puts before the first read of
its buffer.
"""
from __future__ import annotations

from .emitter import rule
from .rules_hopper import _addr
from .rules_memory import vec_width
from .rules_smem import _words
from .smem_access import Access
from .smem_view import _barrier_if_needed, _esize, _view_of


@rule("thread_barrier")
def _thread_barrier(em, op):
    em.barrier()
    return []


@rule("async_copy_load")
def _async_load(em, op):
    s = _view_of(em, op.operands[0], start_ok=True)
    ptr_v = op.operands[1]
    mask_v = op.operands[2] if op.attrs.get("mask") else None
    _barrier_if_needed(em, op)
    t = s.dtype
    es = _esize(t)
    lin = em.lin(ptr_v)
    acc = Access(em, s, lin, "async_copy")
    V = acc.vec(vec_width(em, ptr_v, mask_v))
    ptrs = em.vals[ptr_v]
    masks = em.vals[mask_v] if mask_v is not None else None
    owner = em.owner_pred(lin)
    if V * es < 4:
        _sync_copy(em, s, acc, ptr_v, mask_v, owner)
        return []
    g = f"@{owner} " if owner else ""
    nbytes = V * es
    kind = "cg" if nbytes == 16 else "ca"  # .cg (bypass L1) exists for 16-byte copies only
    for r in range(0, lin.num_regs, V):
        p = ptrs[r] if len(ptrs) > 1 else ptrs[0]
        size = ""
        if masks is not None:
            m = masks[r] if len(masks) > 1 else masks[0]
            n = em.ins("b32", f"selp.u32 {{d}}, {nbytes}, 0, {m};")  # 0: write zeros, read nothing
            size = f", {n}"
        em.emit(f"{g}cp.async.{kind}.shared.global {acc.addr(r)}, [{p}], {nbytes}{size};")
    return []


def _sync_copy(em, s, acc, ptr_v, mask_v, owner) -> None:
    """Elements that cannot form 4-byte groups: ld.global + st.shared (complete at once)."""
    from .rules_memory import _load_scalar
    t = s.dtype
    ptrs = em.vals[ptr_v]
    masks = em.vals[mask_v] if mask_v is not None else None
    for r in range(acc.lin.num_regs):
        p = ptrs[r] if len(ptrs) > 1 else ptrs[0]
        m = (masks[r] if len(masks) > 1 else masks[0]) if masks is not None else None
        v = _load_scalar(em, t, p, m, None)
        ty, regs = _words(em, t, [v])
        g = f"@{owner} " if owner else ""
        em.emit(f"{g}st.shared.{ty} {acc.addr(r)}, {regs[0]};")


@rule("async_copy_commit_group")
def _commit(em, op):
    em.emit("cp.async.commit_group;")
    return []


@rule("async_copy_wait_group")
def _wait(em, op):
    em.emit(f"cp.async.wait_group {int(op.attrs['num_outstanding'])};")
    return []


@rule("async_copy_mbarrier_arrive")
def _copy_arrive(em, op):
    """The interpreter counts one arrival per call (net zero with ``increment_count``), made once
    the partition's earlier copies land; PTX tracks each thread's own cp.async. So every thread
    makes the mbarrier track its copies with a net-zero ``cp.async.mbarrier.arrive`` (pending
    count +1 now, -1 when they land), then the partition meets (every thread's +1 is in before
    anything else could complete the phase), and for ``increment_count=False`` one thread adds
    the call's arrival (``.noinc``: -1 once its own copies, already tracked, land)."""
    a = _addr(em, _view_of(em, op.operands[0]))
    em.emit(f"cp.async.mbarrier.arrive.shared::cta.b64 [{a}];")
    em.barrier()
    if not op.attrs["increment_count"]:
        em.emit(f"@{em.owner_pred(None)} cp.async.mbarrier.arrive.noinc.shared::cta.b64 [{a}];")
    return []

"""Async copies (global -> LDS) on AMD: a global load into VGPRs and, later, a ds_write of the same
bytes (masked-off elements written as zeros): see :class:`AsyncCopies` for when. On gfx942, where
each wave's lanes fill consecutive LDS dwords, it is one ``buffer_load_dword ... lds`` a dword
instead, the bytes going straight to LDS (lds_dma.py). The user's ``wait_group`` and the barrier
membar puts before the first read of the buffer make them visible to every wave.
"""
from __future__ import annotations

from . import lds_dma
from .emitter import elem_key
from .layout import _free_reg_mask
from .lds_address import Access
from .lds_views import _membar, _view
from .lds_words import _WRITE
from .memory import ExecMask, _base_key, address, owner_lanes
from .mir import Imm


_GLOAD = {1: "global_load_ubyte", 2: "global_load_ushort", 4: "global_load_dword",
          8: "global_load_dwordx2", 16: "global_load_dwordx4"}



def rule_async_copy(em, op):
    # (a run-time start: each copy's LDS address is made where it is issued, from the loop's or
    # branch's start, and written in the same block; LDS DMA, whose M0 is made at the entry, is not taken)
    v = _view(em, op.operands[0], start_ok=True)
    ptr_v = op.operands[1]
    _membar(em, op)
    es = v.es
    acc = Access(em, v, ptr_v.type)
    lay = acc.lay
    ps = em.elems(ptr_v)
    ms = [em.real(x) for x in em.elems(op.operands[2])] if op.attrs.get("mask") else None
    V = acc.vec()
    groups = lds_dma.plan(em, acc, ps, ms)
    if groups is not None:  # gfx942: each dword straight into LDS (lds_dma.py)
        for token in lds_dma.emit(em, acc, ps, ms, groups):
            async_copies(em).add((None, None, token, 4, None, len(em.code)))
        return

    def contiguous(r, n):
        b0, c0 = _base_key(ps[r])
        mk = elem_key(ms[r]) if ms else None
        for j in range(1, n):
            b, c = _base_key(ps[r + j])
            if b != b0 or c != c0 + j * es or (ms and elem_key(ms[r + j]) != mk):
                return False
        return True
    while V > 1 and not all(contiguous(r, V) for r in range(0, lay.num_regs, V)):
        V //= 2
    free_r = _free_reg_mask(lay)
    owner = owner_lanes(em, lay)
    for r in range(0, lay.num_regs, V):
        if r & free_r:
            continue
        nbytes = V * es
        m = ms[r] if ms else None
        if isinstance(m, Imm):
            m = None if m.bits else m
        nw = max(nbytes // 4, 1)
        reg, imm = acc.addr(r)
        addr, sfx = address(em, ps[r], room=nbytes)
        raw = em.v(nw)
        if isinstance(m, Imm):  # never copied: zeros
            for j in range(nw):
                em.emit("v_mov_b32", [raw if nw == 1 else raw[j]], [Imm(0)], kind="valu")
        else:
            if m is not None:
                for j in range(nw):
                    em.emit("v_mov_b32", [raw if nw == 1 else raw[j]], [Imm(0)], kind="valu")
            with ExecMask(em, m, owner):
                em.emit(_GLOAD[nbytes], [raw], addr, suffix=sfx, kind="vmem_load")
        async_copies(em).add((reg, imm, raw, nbytes, owner, len(em.code)))



class AsyncCopies:
    """The LDS writes of async copies wait in VGPRs until the copy must be complete: a
    ``wait_group`` that covers its group, or the end of the block it was issued in, or the
    next loop/branch (so other work overlaps the global loads' latency, as cp.async's does).
    A barrier emitted between the copy and its writes no longer orders them before the
    readers membar placed no barrier for (it took the copy as written at issue): then one
    more ``s_barrier`` follows the writes. An LDS DMA copy (lds_dma.py) has no writes to place:
    its loads land on their own, and where the writes would go an ``lds_dma_wait`` makes
    waitcnt.py wait for them (the same barrier rule follows)."""

    def __init__(self, em):
        self.em = em
        self.scopes: list = []     # per block being emitted: [uncommitted writes, committed groups]

    def enter(self) -> None:
        self.scopes.append([[], []])

    def leave(self) -> None:
        self.flush()
        self.scopes.pop()

    def add(self, write) -> None:
        self.scopes[-1][0].append(write)

    def commit(self) -> None:
        scope = self.scopes[-1]
        scope[1].append(scope[0])
        scope[0] = []

    def wait(self, n: int) -> None:
        groups = self.scopes[-1][1]
        done = groups[:max(len(groups) - n, 0)]
        del groups[:len(done)]
        self._write([w for g in done for w in g])

    def flush(self) -> None:
        if not self.scopes:
            return
        scope = self.scopes[-1]
        writes = [w for g in scope[1] for w in g] + scope[0]
        scope[0], scope[1] = [], []
        self._write(writes)

    def _write(self, writes) -> None:
        if not writes:
            return
        em = self.em
        first = min(w[5] for w in writes)
        crossed = any(getattr(i, "kind", None) == "barrier" for i in em.code[first:])
        tokens = [w[2] for w in writes if w[0] is None]
        if tokens:  # LDS DMA: waitcnt.py waits until these loads have retired (their bytes landed)
            em.emit("lds_dma_wait", kind="lds_dma_wait", imp=tokens)
        for reg, imm, raw, nbytes, owner, _ in writes:
            if reg is None:
                continue
            with ExecMask(em, None, owner):
                em.emit(_WRITE[nbytes], [], [reg, raw], suffix=f"offset:{imm}" if imm else "",
                        kind="lds_store")
        if crossed:
            em.barrier()



def async_copies(em) -> AsyncCopies:
    if not hasattr(em, "async_copies"):
        em.async_copies = AsyncCopies(em)
    return em.async_copies



def rule_commit(em, op):
    async_copies(em).commit()



def rule_wait(em, op):
    async_copies(em).wait(int(op.attrs["num_outstanding"]))


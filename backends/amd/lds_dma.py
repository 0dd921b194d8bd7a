"""Async copies straight into LDS on gfx942: ``buffer_load_dword ... offen lds`` (LDS DMA).

A MUBUF load with the LDS bit writes no VGPR: lane i's dword lands at LDS byte M0 + 4*i (the
instruction's offset field would move the LDS address too; it is kept 0, so only M0 and the
lane matter). A copy goes this way only where, for every wave and every dword of the tile, the
wave's lanes' destinations are consecutive dwords in lane order, and each lane's dword is one
aligned dword of global memory under one mask: one 32-bit element per lane, or 2 (16-bit) or
4 (8-bit) elements that share a dword in both places. A swizzled buffer breaks the lane order,
a layout whose lanes or waves hold copies of one element repeats destinations, vectors of
several dwords per lane leave gaps: those copies keep the VGPR path of lds_async.py. gfx942 offers
no wider LDS DMA (gfx950 adds dwordx3/x4); gfx90a has the dword form too but only gfx942 is
enabled (the issue's target); gfx11 has none.

Addressing: the load reads resource base + soffset + voffset (the V#: base, stride 0,
num_records, gfx9's raw-buffer dword3 0x27000 as LLVM and Triton build it). One V# serves a
copy: its base is lane 0's pointer (of the first register) minus 2**30 plus the smallest
register constant; voffset is this lane's pointer minus that lane-0 pointer plus 2**30, so it
stays within [0, num_records) while the copy's pointers lie within 1 GiB of it (the liberty
this path takes); each register's constant is its soffset. Masked-off lanes get voffset
0x80000000, past num_records (0x7FFFFFFE; Triton's values): the hardware returns zeros for them
and writes those to LDS -- the copy's zero fill.

Completion: the load counts on vmcnt and its LDS write lands when it retires. Having no
destination register, waitcnt.py could not see who waits for it: each load carries a token (a
``Fixed`` of class "dma" in ``imp``), and the copy's wait (AsyncCopies in lds_async.py) emits an
``lds_dma_wait`` pseudo instruction reading its tokens, which waitcnt.py turns into the exact
``s_waitcnt vmcnt(n)`` and drops; membar's barrier (or AsyncCopies' own) then publishes the
bytes to the other waves, as for the VGPR path.

Hazard: an SALU write of M0 followed by an LDS DMA needs one wait state on gfx9 (LLVM's
GCNHazardRecognizer): M0 is written before the load's voffset is made, and an ``s_nop 0`` comes
between only where nothing else does.
"""
from __future__ import annotations

import numpy as np

from gluon_trace.layouts import free_bits

from .emitter import elem_key
from .layout import _free_reg_mask
from .mir import Aff, Fixed, Imm, is_vgpr

TARGETS = ("gfx942",)
CENTER = 1 << 30          # voffset of lane 0's pointer
NUM_RECORDS = 0x7FFFFFFE
OUT_OF_RANGE = 0x80000000  # a masked-off lane's voffset: reads zeros
DWORD3 = 0x00027000       # data format 32, num format float (required nonzero on gfx9)
M0 = Fixed("m0", "special")


def _split(p):
    return (p.var, p.c) if isinstance(p, Aff) else (p, 0)


def plan(em, acc, ps, ms):
    """The copy's dword groups [(first register, registers)] when every dword it moves can go
    by LDS DMA, else None."""
    v = acc.v
    es = v.es
    if em.t.name not in TARGETS or es > 4 or v.balign % 4 or v.sreg is not None:
        return None   # (a run-time start: the thread's address is made per access, not at the entry)
    lay = acc.lay
    fb = free_bits(lay)
    if fb["lane"] or fb["warp"]:  # copies of an element in other lanes or waves
        return None
    n = 4 // es
    b = acc.bytes                  # (waves, lanes, registers)
    R = b.shape[2]
    if R % n:
        return None
    free_r = _free_reg_mask(lay)
    lane4 = 4 * np.arange(b.shape[1], dtype=np.int64)
    groups = []
    for r in range(0, R, n):
        if r & free_r:  # a copy of registers already moved
            if any(not (r + j) & free_r for j in range(n)):
                return None
            continue
        if any((r + j) & free_r for j in range(n)):
            return None
        first = b[:, :, r]
        for j in range(1, n):
            if not np.array_equal(b[:, :, r + j], first + j * es):
                return None
        if (first[:, 0] % 4).any() or not np.array_equal(first - first[:, :1],
                                                         np.broadcast_to(lane4, first.shape)):
            return None  # not the wave's lanes on consecutive dwords, in lane order
        var, c = _split(ps[r])
        if not is_vgpr(var) or var.size != 2:
            return None
        if es < 4 and (em.mult(ps[r]) < 4):
            return None  # the dword may straddle two in global memory
        mk = elem_key(ms[r]) if ms else None
        for j in range(1, n):
            vj, cj = _split(ps[r + j])
            if elem_key(vj) != elem_key(var) or cj != c + j * es or (ms and elem_key(ms[r + j]) != mk):
                return None
        groups.append((r, n))
    return groups


def emit(em, acc, ps, ms, groups) -> list:
    """The loads of ``groups``; returns their completion tokens."""
    parts = [_split(ps[r]) for r, _ in groups]
    cmin = min(c for _, c in parts)
    rsrc, origin = _resource(em, parts[0][0], cmin)
    offsets: dict = {}
    tokens = []
    for (r, _), (var, c) in zip(groups, parts):
        m = ms[r] if ms else None
        if isinstance(m, Imm) and m.bits:
            m = None
        key = (elem_key(var), elem_key(m) if m is not None else None)
        fresh = key not in offsets and m is not None and not isinstance(m, Imm)
        if fresh:  # the mask's compare first: M0's write and voffset give its vcc the wait states it needs
            from .arith import cond_vcc
            cond_vcc(em, em.real(m))
        m0 = _set_m0(em, acc, r)
        if key not in offsets:
            vo = offsets.get((elem_key(var), None))
            if vo is None:  # this lane's pointer minus lane 0's (of the first), plus CENTER
                vo = offsets[(elem_key(var), None)] = em.valu("v_subrev_u32", em.v(), [origin, var[0]])
            if m is None:
                offsets[key] = vo
            elif isinstance(m, Imm):  # never copied: every lane out of range
                offsets[key] = em.to_v(Imm(OUT_OF_RANGE))
            else:
                offsets[key] = em.valu("v_cndmask_b32", em.v(), [Imm(OUT_OF_RANGE), vo, em.vcc], implicit=1)
        soff = Imm(c - cmin)
        if not soff.is_inline:
            soff = em.to_s(soff, keep_imm=False)
        if em.code[-1] is m0:  # the M0 -> LDS DMA hazard: one wait state
            em.emit("s_nop", uses=["0"], kind="nop")
        em.lds_dma_count = getattr(em, "lds_dma_count", 0) + 1
        token = Fixed(f"lds_dma{em.lds_dma_count}", "dma")
        em.emit("buffer_load_dword", [], [offsets[key], rsrc, soff], suffix="offen lds", kind="vmem_load",
                imp=[M0, token])
        tokens.append(token)
    return tokens


def _resource(em, var, cmin: int):
    """(V#, lane 0's pointer low dword - CENTER): the buffer resource of pointers near lane 0's
    ``var``, and what voffset is counted from."""
    lane0 = em.s(2)
    for k in range(2):
        em.emit("v_readfirstlane_b32", [lane0[k]], [var[k]], kind="valu")
    delta = (cmin - CENTER) & 0xFFFFFFFFFFFFFFFF
    rsrc = em.s(4)
    hi = em.s()
    em.salu("s_add_u32", rsrc[0], [lane0[0], Imm(delta & 0xFFFFFFFF)])
    em.salu("s_addc_u32", hi, [lane0[1], Imm(delta >> 32)])
    em.salu("s_and_b32", rsrc[1], [hi, Imm(0xFFFF)])  # base[47:32]; stride 0
    em.emit("s_mov_b32", [rsrc[2]], [Imm(NUM_RECORDS)])
    em.emit("s_mov_b32", [rsrc[3]], [Imm(DWORD3)])
    origin = em.s()
    em.salu("s_sub_u32", origin, [lane0[0], Imm(CENTER)])
    return rsrc, origin


def _set_m0(em, acc, r):
    """M0 = the LDS byte of lane 0's dword of register r in this wave; returns the instruction."""
    v = acc.v
    lo, imm = acc.where(r)
    reg = acc._thread_reg(lo)
    if isinstance(reg, Imm):
        wave, imm = None, imm + reg.bits
    else:
        key = ("lds_dma_wave", elem_key(reg))
        if key not in em.memo:
            with em.hoisted():  # the thread part is made at the entry, with every lane active
                s = em.s()
                em.emit("v_readfirstlane_b32", [s], [reg], kind="valu")
                em.memo[key] = s
        wave = em.memo[key]
    if v.base is not None:
        key = ("lds_dma_base", elem_key(v.base), elem_key(wave) if wave is not None else None)
        hit = em.cse_get(key)
        if hit is None:
            if wave is None:
                hit = v.base
            else:
                hit = em.s()
                em.salu("s_add_u32", hit, [v.base, wave])
            em.cse_put(key, hit)
        wave = hit
    if wave is None:
        return em.emit("s_mov_b32", [M0], [Imm(imm)])
    if imm:
        em.salu("s_add_u32", M0, [wave, Imm(imm)])
        return em.code[-1]
    return em.emit("s_mov_b32", [M0], [wave])

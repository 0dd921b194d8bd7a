"""Shared-memory loads and stores on NVIDIA: ``ld/st.shared`` of up to 16 bytes where registers
run at consecutive, aligned offsets (the address split: smem_access.py), and ldmatrix/stmatrix
for 16-bit tiles whose layouts pair up as 8x8 fragments.

Barriers come from :mod:`gluon_trace.membar` (a ``bar.sync 0`` right before each access it
names). Buffers and views: rules_smem_views.py; cp.async: rules_async_copy.py.
"""
from __future__ import annotations

import numpy as np

from gluon_trace import dtypes as dt

from . import fp8, ptx
from .emitter import rule
from .rules_memory import _extract8, _extract16, _to16
from .smem_access import Access, _linear_bits, offset_fn
from .smem_view import Smem, _barrier_if_needed, _esize, _view_of


LDMATRIX = True  # 16-bit loads (stores) through ldmatrix (stmatrix) where the layouts allow; a switch for tests


def _words(em, t: dt.dtype, vals: list[str]) -> tuple[str, list[str]]:
    """(st type, registers) of a run of element registers, packed into 32-bit words where narrow."""
    if t.is_fp8:  # stored as its byte: from here on an 8-bit integer
        vals, t = [fp8.encode(em, t, v) for v in vals], dt.uint8
    es = _esize(t)
    if es >= 4:
        return f"b{8 * es}", vals
    if len(vals) == 1:
        return ("b16", [_to16(em, t, vals[0])]) if t.is_floating else (ptx.mem_type(t), vals)
    if es == 2 and t.is_floating:
        return "b32", [em.pack16x2(vals[i], vals[i + 1], t) for i in range(0, len(vals), 2)]
    if es == 2:
        hs = [_to16(em, t, v) for v in vals]
        return "b32", [em.ins("b32", f"mov.b32 {{d}}, {{{hs[i]}, {hs[i + 1]}}};") for i in range(0, len(hs), 2)]
    words = []
    for i in range(0, len(vals), 4):
        w = vals[i]
        for j in range(1, min(4, len(vals) - i)):
            w = em.ins("b32", f"bfi.b32 {{d}}, {vals[i + j]}, {w}, {8 * j}, 8;")
        words.append(w)
    return ("u16" if len(vals) == 2 else "b32"), words


def _store_tile(em, s: Smem, val_v) -> None:
    if LDMATRIX and len(em.vals[val_v]) > 1 and _stmatrix(em, s, val_v):
        return
    lin = em.lin(val_v)
    acc = Access(em, s, lin, "smem.store()")
    V = acc.vec(16)
    vals = em.vals[val_v]
    owner = em.owner_pred(lin)
    g = f"@{owner} " if owner else ""
    for r in range(0, lin.num_regs, V):
        ty, regs = _words(em, s.dtype, [vals[r + i] if len(vals) > 1 else vals[0] for i in range(V)])
        src = regs[0] if len(regs) == 1 else "{" + ", ".join(regs) + "}"
        vs = f".v{len(regs)}" if len(regs) > 1 else ""
        em.emit(f"{g}st.shared{vs}.{ty} {acc.addr(r)}, {src};")


@rule("smem_store")
def _store(em, op):
    s = _view_of(em, op.operands[0], xor_ok=True)
    _barrier_if_needed(em, op)
    _store_tile(em, s, op.operands[1])
    return []


def _unpack(em, t: dt.dtype, words: list[str], n: int) -> list[str]:
    es = _esize(t)
    per = 4 // es
    out = [(_extract16 if es == 2 else _extract8)(em, t, words[i // per], i % per) for i in range(n)]
    if es == 2:  # an MMA packing these pairs again takes the loaded words (rules_mma._pack)
        for i in range(0, n - 1, 2):
            em.memo_put(("mma_pack", t.name, (out[i], out[i + 1])), words[i // 2])
    return out


def _fragments(em, s: Smem, lin, t: dt.dtype, what: str):
    """How a 16-bit tile's registers pair up as ldmatrix/stmatrix 8x8 fragments, or None:
    (trans, matrices per instruction, the access whose lanes address the rows). Thread t holds
    row t // 4, columns 2 * (t % 4) + {0, 1} of each matrix (transposed with .trans), and lane
    l names row l % 8 of matrix l // 8. So the layout must put register bit 0 and lane bits 0-1
    at 2, 4, 8 bytes (rows along lane bits 2-4), or lane bits 2-4 there (.trans: rows along
    register bit 0 and lane bits 0-1); further register bits pick the matrices of one x2/x4."""
    if _esize(t) != 2 or len(lin.lane_bases) != 5 or not lin.reg_bases or s.sreg is not None or \
            s.creg is not None or \
            _linear_bits(tuple(s.rel.shape), np.ascontiguousarray(s.rel).tobytes()) is None:
        return None
    f, rb, lb = offset_fn(em, s, what), lin.reg_bases, lin.lane_bases
    if [f(rb[0]), f(lb[0]), f(lb[1])] == [2, 4, 8]:
        trans, rows = False, [lb[2], lb[3], lb[4]]
    elif [f(lb[2]), f(lb[3]), f(lb[4])] == [2, 4, 8]:
        trans, rows = True, [rb[0], lb[0], lb[1]]
    else:
        return None
    sel = list(rb[1:3])
    nmat = 1 << len(sel)
    lanes = [f(b) for b in rows] + [f(b) for b in sel] + [0] * (2 - len(sel))
    rest = lanes + [f(b) for b in lin.warp_bases] + [f(b) for b in rb[1:]]
    if any(v % 16 for v in rest) or s.align % 16 or s.const % 16 or s.xmask % 16:
        return None
    return trans, nmat, Access(em, s, lin, what, lane_fn=lambda _: lanes)


def _ldmatrix(em, s: Smem, lin, t: dt.dtype) -> list[str] | None:
    frag = _fragments(em, s, lin, t, "smem.load()")
    if frag is None:
        return None
    trans, nmat, acc = frag
    out = []
    for r0 in range(0, lin.num_regs, 2 * nmat):
        words = [em.reg("b32") for _ in range(nmat)]
        dst = "{" + ", ".join(words) + "}"
        em.emit(f"ldmatrix.sync.aligned.m8n8.x{nmat}{'.trans' if trans else ''}.shared.b16 {dst}, "
                f"{acc.addr(r0)};")
        out += _unpack(em, t, words, 2 * nmat)
    return out


def _stmatrix(em, s: Smem, val_v) -> bool:
    """A 16-bit float tile stored by stmatrix (sm_90): a quarter of the st.shared.b32 an
    accumulator layout needs otherwise. False where the layouts do not allow it."""
    t, lin = s.dtype, em.lin(val_v)
    if not t.is_floating or t.is_fp8 or _target_sm(em) < 90 or em.owner_pred(lin):
        return False
    frag = _fragments(em, s, lin, t, "smem.store()")
    if frag is None:
        return False
    trans, nmat, acc = frag
    vals = em.vals[val_v]
    for r0 in range(0, lin.num_regs, 2 * nmat):
        words = [em.pack16x2(vals[r0 + 2 * i], vals[r0 + 2 * i + 1], t) for i in range(nmat)]
        em.emit(f"stmatrix.sync.aligned.m8n8.x{nmat}{'.trans' if trans else ''}.shared.b16 "
                f"{acc.addr(r0)}, {{{', '.join(words)}}};")
    return True


def _target_sm(em) -> int:
    return int("".join(ch for ch in em.target[3:] if ch.isdigit()) or 0)


@rule("smem_load")
def _load(em, op):
    s = _view_of(em, op.operands[0], xor_ok=True)
    _barrier_if_needed(em, op)
    t = s.dtype
    lin = em.lin(op.results[0])
    if LDMATRIX:
        out = _ldmatrix(em, s, lin, t)
        if out is not None:
            return [out]
    acc = Access(em, s, lin, "smem.load()")
    V = acc.vec(16)
    es = _esize(t)
    out = []
    for r in range(0, lin.num_regs, V):
        a = acc.addr(r)
        if es >= 4:
            regs = [em.reg(ptx.rclass(t)) for _ in range(V)]
            dst = regs[0] if V == 1 else "{" + ", ".join(regs) + "}"
            em.emit(f"ld.shared{f'.v{V}' if V > 1 else ''}.b{8 * es} {dst}, {a};")
            out += regs
        elif V == 1:
            if t.is_fp8:
                out.append(fp8.decode(em, t, em.ins("b32", f"ld.shared.u8 {{d}}, {a};")))
            elif t.is_floating:
                h = em.ins("b16", f"ld.shared.b16 {{d}}, {a};")
                out.append(em.widen16(h, t))
            else:
                out.append(em.ins("b32", f"ld.shared.{ptx.mem_type(t)} {{d}}, {a};"))
        else:
            nw = max(V * es // 4, 1)
            words = [em.reg("b32") for _ in range(nw)]
            if V * es == 2:
                em.emit(f"ld.shared.u16 {words[0]}, {a};")
            else:
                dst = words[0] if nw == 1 else "{" + ", ".join(words) + "}"
                em.emit(f"ld.shared{f'.v{nw}' if nw > 1 else ''}.b32 {dst}, {a};")
            out += _unpack(em, t, words, V)
    return [out]

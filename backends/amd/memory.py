"""Global memory: loads and stores, masked through the EXEC mask (atomics: atomics.py).

A masked access of one register index is ``v_cmp`` (mask != 0) ->
``s_and_saveexec`` -> the access -> ``s_mov exec`` back, so masked-off lanes never touch
memory. Masked loads start from ``other`` (or 0), which the inactive lanes keep.
"""
from __future__ import annotations

import numpy as np

from gluon_trace.layouts import copy_bits

from . import arith
from .emitter import WAVE_LOG, dwords, elem_key
from .layout import _as_vgpr_hoisted
from .mir import Aff, Imm, is_vgpr


def address(em, p, room: int = 0):
    """(operands, suffix) of a global_* instruction for pointer element p: a VGPR pair
    with ``off``, or an SGPR pair with a zero VGPR offset; a constant part of p goes in
    the 13-bit immediate when it fits (``room`` bytes past it must fit too)."""
    off = 0
    if isinstance(p, Aff) and -4096 <= p.c and p.c + room < 4096:
        p, off = p.var, p.c
    p = em.real(p)
    suffix = f"offset:{off}" if off else ""
    if is_vgpr(p):
        return [p, "off"], suffix
    return [_as_vgpr_hoisted(em, Imm(0)), em.to_s(p, keep_imm=False)], suffix


def _base_key(p):
    if isinstance(p, Aff):
        return elem_key(p.var), p.c
    return elem_key(p), 0


def _load_insn(d):
    if d.bits == 64:
        return "global_load_dwordx2"
    if d.bits == 32:
        return "global_load_dword"
    if d.bits == 16:
        return "global_load_sshort" if d.name == "int16" else "global_load_ushort"
    return "global_load_sbyte" if d.name == "int8" else "global_load_ubyte"


def _store_insn(d):
    return {64: "global_store_dwordx2", 32: "global_store_dword", 16: "global_store_short"}.get(
        d.bits, "global_store_byte")


def _needs_fixup(d) -> bool:
    return d.name in ("float16", "bfloat16") or d.is_bool


def _from_memory(em, d, raw):
    if d.name == "float16":
        return em.valu("v_cvt_f32_f16", em.v(), [raw], form="vop1")
    if d.name == "bfloat16":
        return em.valu("v_lshlrev_b32", em.v(), [Imm(16), raw])
    if d.is_bool:
        return em.valu("v_min_u32", em.v(), [Imm(1), raw])
    return raw


def _to_memory(em, d, x):
    if d.name == "float16":
        return em.valu("v_cvt_f16_f32", em.v(), [x], form="vop1")
    if d.name == "bfloat16":
        return em.valu("v_lshrrev_b32", em.v(), [Imm(16), x])
    return em.to_v(x)


class ExecMask:
    """``with ExecMask(em, cond)``: run only the lanes whose 0/1 element is set."""

    def __init__(self, em, cond=None, lane_mask=None):
        self.em, self.cond, self.lane_mask = em, cond, lane_mask

    def __enter__(self):
        em = self.em
        if self.cond is None and self.lane_mask is None:
            self.save = None
            return self
        sfx = em.t.mask_suffix
        if self.cond is not None:
            arith.cond_vcc(em, self.cond)
            src = em.vcc
            if self.lane_mask is not None:
                both = em.mask_reg()
                em.emit(f"s_and_{sfx}", [both], [em.vcc, self.lane_mask])
                src = both
        else:
            src = self.lane_mask
        self.save = em.mask_reg()
        em.emit(f"s_and_saveexec_{sfx}", [self.save], [src])
        return self

    def __exit__(self, *exc):
        if self.save is not None:
            self.em.emit(f"s_mov_{self.em.t.mask_suffix}", [self.em.exec], [self.save])
        return False


# -- load / store --------------------------------------------------------------------------------

def _vector_groups(em, d, ps, ms, kinds):
    """Runs of registers a single dwordx2/x3/x4 access can serve: 32-bit elements at
    consecutive addresses from one base, under one mask."""
    n = len(ps)
    out, r = [], 0
    while r < n:
        k = 1
        if d.bits == 32 and not _needs_fixup(d):
            b0, c0 = _base_key(ps[r])
            mk = elem_key(ms[r]) if ms else None
            while k < 4 and r + k < n:
                b, c = _base_key(ps[r + k])
                if b != b0 or c != c0 + 4 * k or (ms and elem_key(ms[r + k]) != mk) \
                        or kinds[r + k] != "new":
                    break
                k += 1
        out.append((r, k))
        r += k
    return out


def rule_load(em, op):
    ptr = op.operands[0]
    d = ptr.type.dtype.element
    ps = em.elems(ptr)
    k = 1
    ms = os_ = None
    if op.attrs.get("mask"):
        ms = [em.real(x) for x in em.elems(op.operands[k])]
        k += 1
    if op.attrs.get("other"):
        os_ = [em.real(x) for x in em.elems(op.operands[k])]
    out = [None] * len(ps)
    first, kinds = {}, []
    for i, p in enumerate(ps):  # registers holding the same element share one load
        key = (elem_key(p), ms is not None and elem_key(ms[i]), os_ is not None and elem_key(os_[i]))
        kinds.append("new" if key not in first else first[key])
        first.setdefault(key, i)
    groups = _packed_groups(em, d, ps, ms, os_, kinds) if _packs(d) else \
        _vector_groups(em, d, ps, ms, kinds)
    for r, n in groups:
        if kinds[r] != "new":
            continue
        others = [os_[r + j] for j in range(n)] if os_ else None
        if _packs(d) and n > 1:
            vals = load_packed(em, d, ps[r], ms[r] if ms else None, others, n)
        else:
            vals = load_group(em, d, ps[r], ms[r] if ms else None, others, n)
        for j, x in enumerate(vals):
            out[r + j] = x
    for i, kd in enumerate(kinds):
        if kd != "new":
            out[i] = out[kd]
    em.vals[op.result] = out if not op.result.type.is_scalar else out[0]


_LOAD_N = {2: "global_load_dwordx2", 3: "global_load_dwordx3", 4: "global_load_dwordx4"}
_STORE_N = {2: "global_store_dwordx2", 3: "global_store_dwordx3", 4: "global_store_dwordx4"}


def load_group(em, d, p, m=None, others=None, n=1):
    """n consecutive 32-bit elements (or one element of any type) at p."""
    if n == 1:
        return [load_one(em, d, p, m, others[0] if others else None)]
    if isinstance(m, Imm):
        if not m.bits:
            return list(others) if others else [Imm(0)] * n
        m = None
    dst = em.v(n)
    if m is not None:  # masked-off lanes keep `other`
        for j in range(n):
            em.emit("v_mov_b32", [dst[j]], [em.real(others[j]) if others else Imm(0)], kind="valu")
    addr, suffix = address(em, p, room=4 * (n - 1))
    with ExecMask(em, m):
        em.emit(_LOAD_N[n], [dst], addr, suffix=suffix, kind="vmem_load")
    return [dst[j] for j in range(n)]


def _memory_bits(d, x):
    """The memory bits (16 or 8) of a constant element as registers hold it (None unless exact)."""
    if not isinstance(x, Imm):
        return None
    if d.bits == 8:  # int8, uint8 and fp8 hold their byte (fp8.const), sign- or zero-extended
        return x.bits & 0xFF
    if d.name == "bfloat16":
        return x.bits >> 16 if not x.bits & 0xFFFF else None
    if d.name == "float16":
        f = np.array([x.bits], np.uint32).view(np.float32)
        h = f.astype(np.float16)
        return int(h.view(np.uint16)[0]) if h.astype(np.float32)[0] == f[0] or np.isnan(f[0]) else None
    return x.bits & 0xFFFF


def _packs(d) -> bool:
    """Elements that load several a dword: 16-bit ones and bytes (not bools, which are fixed up)."""
    return d.bits in (8, 16) and not d.is_bool


def _packed_groups(em, d, ps, ms, os_, kinds):
    """Runs of 16, 8 or 4 bytes of 16- or 8-bit elements at consecutive addresses from one
    base, under one mask, aligned to the run's bytes: one dwordx4/x2/dword load (their dwords
    go to LDS and MMA operands as loaded; the widened elements are made too and dropped where
    unused)."""
    es = d.bits // 8
    n, out, r = len(ps), [], 0
    while r < n:
        b0, c0 = _base_key(ps[r])
        var = ps[r].var if isinstance(ps[r], Aff) else ps[r]
        size = 1
        for nbytes in (16, 8, 4):
            k = nbytes // es
            if r + k > n or (c0 % nbytes) or em.mult(var) % nbytes:
                continue
            if all(_base_key(ps[r + j]) == (b0, c0 + es * j) and kinds[r + j] == "new"
                   and (not ms or elem_key(ms[r + j]) == elem_key(ms[r]))
                   and (not os_ or _memory_bits(d, em.real(os_[r + j])) is not None) for j in range(k)):
                size = k
                break
        out.append((r, size))
        r += size
    return out


def load_packed(em, d, p, m=None, others=None, n=2):
    """n consecutive 16-bit (2, 4, 8) or 8-bit (4, 8, 16) elements at p in 1, 2 or 4 dwords;
    masked-off lanes hold ``other``'s bits. No wait here: the dwords are read where they are used."""
    from .lds_words import unpack
    if isinstance(m, Imm):
        if not m.bits:
            return list(others) if others else [Imm(0)] * n
        m = None
    es = d.bits // 8
    per = 4 // es
    nd = n // per
    dst = em.v(nd)
    words = [dst] if nd == 1 else [dst[j] for j in range(nd)]
    if m is not None:
        for j, w in enumerate(words):
            bits = 0
            for i in range(per):
                b = _memory_bits(d, em.real(others[per * j + i])) if others else 0
                bits |= b << (8 * es * i)
            em.emit("v_mov_b32", [w], [Imm(bits)], kind="valu")
    addr, suffix = address(em, p, room=es * (n - 1))
    with ExecMask(em, m):
        em.emit(_LOAD_N.get(nd, "global_load_dword"), [dst], addr, suffix=suffix, kind="vmem_load")
    vals = [unpack(em, d, words[j // per], j % per) for j in range(n)]
    for j in range(0, n, per):  # an LDS store or MMA operand takes the loaded dword
        em.cse_put(("lds_word", d.name) + tuple(elem_key(x) for x in vals[j:j + per]), words[j // per])
    for j in range(n):  # and a narrow LDS store its half (ds_write_b16 / _d16_hi) or byte
        key = ("lds_half" if es == 2 else "lds_byte", d.name, elem_key(vals[j]))
        em.cse_put(key, (words[j // per], j % per))
    return vals


def load_one(em, d, p, m=None, other=None):
    n = dwords(d)
    if isinstance(m, Imm):
        if not m.bits:
            return other if other is not None else Imm(0, n)
        m = None
    insn = _load_insn(d)
    addr, suffix = address(em, p)
    if m is None:
        raw = em.v(n)
        em.emit(insn, [raw], addr, suffix=suffix, kind="vmem_load")
        return _from_memory(em, d, raw)
    raw = em.v(n)
    init = other if (other is not None and not _needs_fixup(d)) else Imm(0, n)
    em.copy_into(raw, init)
    with ExecMask(em, m):
        em.emit(insn, [raw], addr, suffix=suffix, kind="vmem_load")
    val = _from_memory(em, d, raw)
    if other is not None and _needs_fixup(d):
        val = arith.where(em, d, m, val, other)
    return val


def rule_store(em, op):
    ptr, val = op.operands[:2]
    d = ptr.type.dtype.element
    ps, vs = em.elems(ptr), [em.real(x) for x in em.elems(val)]
    ms = [em.real(x) for x in em.elems(op.operands[2])] if op.attrs.get("mask") else None
    first, kinds = {}, []
    for i, p in enumerate(ps):
        key = (elem_key(p), elem_key(vs[i]), ms is not None and elem_key(ms[i]))
        kinds.append("new" if key not in first else "dup")  # the same store again: skip it
        first.setdefault(key, i)
    groups = _packed_groups(em, d, ps, ms, None, kinds) if _packs(d) else _vector_groups(em, d, ps, ms, kinds)
    for r, n in groups:
        if kinds[r] != "new":
            continue
        if _packs(d) and n > 1:
            store_packed(em, d, ps[r], vs[r:r + n], ms[r] if ms else None)
        else:
            store_group(em, d, ps[r], vs[r:r + n], ms[r] if ms else None)


def store_packed(em, d, p, xs, m=None):
    """A run of 16/8/4 bytes of 16- or 8-bit elements as one dwordx4/x2/dword store: the dwords
    they were loaded in when that load is in scope (lds.packed), else packed here."""
    from .lds_words import _gather, packed
    if isinstance(m, Imm):
        if not m.bits:
            return
        m = None
    words = packed(em, d, xs)
    data = _gather(em, words)
    addr, suffix = address(em, p, room=d.bits // 8 * (len(xs) - 1))
    with ExecMask(em, m):
        em.emit(_STORE_N.get(len(words), "global_store_dword"), [], [addr[0], data, addr[1]], suffix=suffix,
                kind="vmem_store")


def store_group(em, d, p, xs, m=None):
    if isinstance(m, Imm):
        if not m.bits:
            return
        m = None
    n = len(xs)
    if n == 1:
        data = _to_memory(em, d, xs[0])
        insn = _store_insn(d)
    else:
        data = em.v(n)
        for j, x in enumerate(xs):
            em.emit("v_mov_b32", [data[j]], [em.real(x)], kind="valu")
        insn = _STORE_N[n]
    addr, suffix = address(em, p, room=4 * (n - 1))
    with ExecMask(em, m):
        em.emit(insn, [], [addr[0], data, addr[1]], suffix=suffix, kind="vmem_store")


# -- the lanes that own their elements (atomics and printing act once per element) ----------

def owner_lanes(em, lin, lanes: bool = True):
    """SGPR lane mask of the threads that own (not merely copy) their elements, or None.
    ``lanes=False``: of the one wave of each set of wave copies (every lane of it) -- for LDS
    scratch writes, where lanes of one wave may store one value to one byte but two waves
    may not without a barrier between them."""
    if lin is None:
        m = 0x3FF  # a scalar: only work-item 0
    else:
        fb = copy_bits(lin)  # zero bases and bases repeating earlier ones (fuzz seed 15100172)
        m = (fb["lane"] if lanes else 0) | (fb["warp"] << WAVE_LOG[em.wave])
    if m == 0:
        return None
    key = ("owner", m)
    if key not in em.memo:
        with em.hoisted():
            t = em.valu("v_and_b32", em.v(), [Imm(m), em.tid])
            em.valu("v_cmp_eq_u32", em.vcc, [Imm(0), t], form="vopc")
            r = em.mask_reg()
            em.emit(f"s_mov_{em.t.mask_suffix}", [r], [em.vcc])
            em.memo[key] = r
    return em.memo[key]


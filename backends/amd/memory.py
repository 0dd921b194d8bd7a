"""Global memory: loads, stores and atomics, masked through the EXEC mask.

A masked access of one register index is ``v_cmp`` (mask != 0) ->
``s_and_saveexec`` -> the access -> ``s_mov exec`` back, so masked-off lanes never touch
memory. Masked loads start from ``other`` (or 0), which the inactive lanes keep.
Atomics run once per element: threads holding a copy of an element (broadcast lanes or
warps in the layout, or every thread for a scalar) are left out but the owner, and
the returned old value reaches the copies through LDS.
"""
from __future__ import annotations

from gluon_trace.layouts import free_bits

from . import arith
from .emitter import WAVE_LOG, dwords, elem_key
from .layout import _as_vgpr_hoisted, byte_addresses, lds_load, lds_store, row_major
from .mir import Aff, Imm, Reg, is_vgpr


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
    for r, n in _vector_groups(em, d, ps, ms, kinds):
        if kinds[r] != "new":
            continue
        vals = load_group(em, d, ps[r], ms[r] if ms else None,
                          [os_[r + j] for j in range(n)] if os_ else None, n)
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
    for r, n in _vector_groups(em, d, ps, ms, kinds):
        if kinds[r] != "new":
            continue
        store_group(em, d, ps[r], vs[r:r + n], ms[r] if ms else None)


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


# -- atomics -------------------------------------------------------------------------------------

def _atomic_insn(em, kind, d):
    """The native returning atomic, or None where a compare-and-swap loop is needed."""
    x2 = "_x2" if d.bits == 64 else ""
    if d.is_floating:
        if kind == "xchg":
            return "global_atomic_swap" + x2
        if d.bits == 32 and kind == "add":
            return "global_atomic_add_f32"
        if d.bits == 64 and kind == "add" and em.t.gfx9:
            return "global_atomic_add_f64"
        if d.bits == 64 and kind in ("max", "min") and em.t.gfx9:
            return f"global_atomic_{kind}_f64"
        if d.bits == 32 and kind in ("max", "min") and not em.t.gfx9:
            return f"global_atomic_{kind}_f32"
        return None
    signed = d.is_signed
    base = {"add": "add", "max": "smax" if signed else "umax", "min": "smin" if signed else "umin",
            "xchg": "swap", "and": "and", "or": "or", "xor": "xor"}[kind]
    return f"global_atomic_{base}{x2}"


def _check_atomic_type(em, d):
    if d.bits not in (32, 64) or d.name in ("float16", "bfloat16"):
        raise em.error(f"atomics on {d} are not supported on AMD (use 32- or 64-bit types)")


def owner_lanes(em, lin):
    """SGPR lane mask of the threads that own (not merely copy) their elements, or None."""
    if lin is None:
        m = 0x3FF  # a scalar: only work-item 0
    else:
        fb = free_bits(lin)
        m = fb["lane"] | (fb["warp"] << WAVE_LOG[em.wave])
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


def rule_atomic_rmw(em, op):
    _atomic_rule(em, op, op.attrs["kind"])


def rule_atomic_cas(em, op):
    _atomic_rule(em, op, "cas")


def _atomic_rule(em, op, kind):
    ptr = op.operands[0]
    d = ptr.type.dtype.element
    _check_atomic_type(em, d)
    scalar = op.result.type.is_scalar
    lin = None if scalar else em.linear(ptr.type)
    ps = em.elems(ptr)

    def real(v):
        return [em.real(x) for x in em.elems(v)]
    if kind == "cas":
        cs, vs, ms = real(op.operands[1]), real(op.operands[2]), None
    else:
        cs, vs = None, real(op.operands[1])
        ms = real(op.operands[2]) if op.attrs.get("mask") else None
    owner = owner_lanes(em, lin)
    free_r = free_bits(lin)["reg"] if lin is not None else 0
    out = [None] * len(ps)
    for i in range(len(ps)):
        if i & free_r:
            continue
        m = ms[i] if ms else None
        if isinstance(m, Imm) and not m.bits:
            out[i] = Imm(0, dwords(d))
            continue
        out[i] = _atomic_one(em, kind, d, ps[i], vs[i], cs[i] if cs else None,
                             None if isinstance(m, Imm) else m, owner)
    for i in range(len(ps)):
        if out[i] is None:
            out[i] = out[i & ~free_r]
    if owner is not None and op.result in em.used:
        out = _broadcast_from_owners(em, d, out, lin, owner)
    em.vals[op.result] = out[0] if scalar else out


def _atomic_one(em, kind, d, p, x, cmp, m, owner):
    n = dwords(d)
    ret = em.v(n)
    em.copy_into(ret, Imm(0, n))  # masked-off lanes read 0, as in the interpreter
    addr, sfx = address(em, p)
    glc = f"{sfx} {em.t.glc}".strip()
    insn = "global_atomic_cmpswap" + ("_x2" if n == 2 else "") if kind == "cas" else \
        _atomic_insn(em, kind, d)
    with ExecMask(em, m, owner):
        if kind == "cas":
            data = em.v(2 * n)
            _pack(em, data, [x, cmp], n)
            em.emit(insn, [ret], [addr[0], data, addr[1]], suffix=glc, kind="vmem_atomic")
        elif insn is not None:
            em.emit(insn, [ret], [addr[0], em.to_v(x), addr[1]], suffix=glc, kind="vmem_atomic")
        else:
            _cas_loop(em, kind, d, addr, sfx, x, ret)
    return ret


def _pack(em, data: Reg, parts, n):
    for j, x in enumerate(parts):
        for k in range(n):
            src = x if n == 1 else (arith.lo(x) if k == 0 else arith.hi(x))
            em.emit("v_mov_b32", [data[j * n + k]], [src], kind="valu")


def _cas_loop(em, kind, d, addr, off, x, ret):
    """old = load; loop { new = old <op> x; swap if memory still holds old; retry the
    lanes that lost }. The lanes finish one by one: EXEC shrinks until it is empty."""
    n = dwords(d)
    sfx = em.t.mask_suffix
    em.emit(_load_insn(d), [ret], addr, suffix=off, kind="vmem_load")
    head = em.label("cas")
    em.place(head)
    name = {"add": "add", "max": "maximum", "min": "minimum"}[kind]
    new = arith.binary(em, name, d, ret, x)
    data = em.v(2 * n)
    _pack(em, data, [new, ret], n)
    got = em.v(n)
    em.emit("global_atomic_cmpswap" + ("_x2" if n == 2 else ""), [got], [addr[0], data, addr[1]],
            suffix=f"{off} {em.t.glc}".strip(), kind="vmem_atomic")
    done = em.mask_reg()
    em.valu("v_cmp_eq_u64" if n == 2 else "v_cmp_eq_u32", done, [got, ret], form="vop3")
    em.copy_into(ret, got)
    em.emit(f"s_andn2_{sfx}", [em.exec], [em.exec, done])
    back = em.emit("s_cbranch_execnz", kind="cbranch", target=head.name)
    em.loops.append((head, back))


def _broadcast_from_owners(em, d, vals, lin, owner):
    """Copies of an element get the owner's old value through LDS."""
    n = dwords(d)
    es = 4 * n
    if lin is None:  # a scalar: thread 0 did the work
        em.use_lds(es)
        em.lds_begin()
        z = _as_vgpr_hoisted(em, Imm(0))
        with ExecMask(em, None, owner):
            lds_store(em, z, 0, vals[0], n)
        em.barrier()
        r = lds_load(em, z, 0, n)
        em.lds_end()
        return [r]
    import numpy as np
    em.use_lds(int(np.prod(lin.shape)) * es)
    fn = row_major(lin.shape)
    addrs = byte_addresses(em, lin, fn, es, range(len(vals)))
    em.lds_begin()
    with ExecMask(em, None, owner):
        for (a, off), v in zip(addrs, vals):
            lds_store(em, a, off, v, n)
    em.barrier()
    out = [lds_load(em, a, off, n) for a, off in addrs]
    em.lds_end()
    return out

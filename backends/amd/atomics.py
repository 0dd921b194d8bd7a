"""Atomics: one returning global atomic per element, masked through EXEC.

Threads holding a copy of an element (broadcast lanes or warps in the layout, or every
thread for a scalar) are left out but the owner, and the returned old value reaches the
copies through LDS.

What the hardware lacks becomes a compare-and-swap loop on the aligned dword (or
qword) holding the element: read it, compute the new word, ``global_atomic_cmpswap``
it in, and retry the lanes whose swap lost to another write. The loop runs under EXEC:
every iteration drops the lanes whose swap landed (``s_andn2 exec``), and at least one
lane per contended word lands each time, so the loop ends. 8- and 16-bit elements (and
int1, float16, bfloat16) replace only their own byte/halfword of the word
(``v_bfi_b32``), so neighbours written at the same time by other lanes all land.
Arithmetic runs on the widened element exactly as the rest of the backend computes
(f16/bf16 in f32, rounded back; maximum/minimum keep the non-NaN operand), which is
the interpreter's semantics. ``atomic_cas`` compares bit patterns, like the hardware's
32/64-bit cmpswap (so float -0.0 and NaN compare by their bits).
8/16-bit and/or/xor need no loop: a dword and/or/xor whose other bits are the
identity (1s for and, 0s for or/xor) changes only the element.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace.layouts import first_copy_regs

from . import arith
from .emitter import dwords
from .layout import _as_vgpr_hoisted, byte_addresses, lds_load, lds_store, row_major
from .memory import ExecMask, _from_memory, _load_insn, _to_memory, address, owner_lanes
from .mir import Aff, Imm, hi, is_vgpr, lo

_RMW_NAME = {"add": "add", "max": "maximum", "min": "minimum", "and": "and", "or": "or",
             "xor": "xor"}


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


def rule_atomic_rmw(em, op):
    _atomic_rule(em, op, op.attrs["kind"])


def rule_atomic_cas(em, op):
    _atomic_rule(em, op, "cas")


def _atomic_rule(em, op, kind):
    ptr = op.operands[0]
    d = ptr.type.dtype.element
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
    first = first_copy_regs(lin) if lin is not None and len(ps) == 1 << len(lin.reg_bases) else range(len(ps))
    out = [None] * len(ps)
    for i in range(len(ps)):
        if first[i] != i:  # a copy of an earlier register's element: its atomic runs there
            continue
        m = ms[i] if ms else None
        if isinstance(m, Imm) and not m.bits:
            out[i] = Imm(0, dwords(d))
            continue
        m = None if isinstance(m, Imm) else m
        with em.scope():  # values made under a partial EXEC must not be reused outside it
            out[i] = _atomic_one(em, kind, d, ps[i], vs[i], cs[i] if cs else None, m, owner)
        em.vcc_holds = None
    for i in range(len(ps)):
        if out[i] is None:
            out[i] = out[first[i]]
    if owner is not None and op.result in em.used:
        out = _broadcast_from_owners(em, d, out, lin, owner)
    em.vals[op.result] = out[0] if scalar else out


def _atomic_one(em, kind, d, p, x, cmp, m, owner):
    if d.bits < 32:
        return _subword(em, kind, d, p, x, cmp, m, owner)
    n = dwords(d)
    ret = em.v(n)
    em.copy_into(ret, Imm(0, n))  # masked-off lanes read 0, as in the interpreter
    addr, sfx = address(em, p)
    glc = f"{sfx} {em.t.glc}".strip()
    insn = None if kind == "cas" else _atomic_insn(em, kind, d)
    if kind == "cas":
        data = _packed(em, [x, cmp], n)
    elif insn is not None:
        data = em.to_v(x)
    with ExecMask(em, m, owner):
        if insn is not None or kind == "cas":
            em.emit(insn or _cmpswap(n), [ret], [addr[0], data, addr[1]], suffix=glc,
                    kind="vmem_atomic")
        else:
            with _unless_exec_empty(em, m is not None or owner is not None):
                em.emit(_load_insn(d), [ret], addr, suffix=sfx, kind="vmem_load")
                name = _RMW_NAME[kind]
                _cas_loop(em, addr, sfx, ret, lambda: arith.binary(em, name, d, ret, x))
    return ret


def _cmpswap(n):
    return "global_atomic_cmpswap" + ("_x2" if n == 2 else "")


def _packed(em, parts, n):
    """The data register of a cmpswap: the new value, then the expected one."""
    data = em.v(len(parts) * n)
    for j, x in enumerate(parts):
        x = em.real(x)
        for k in range(n):
            src = x if n == 1 else (lo(x) if k == 0 else hi(x))
            em.emit("v_mov_b32", [data[j * n + k]], [src], kind="valu")
    return data


def _cas_loop(em, addr, off, old, new_of):
    """Swap ``new_of()`` (computed from ``old``) in while memory still holds ``old``;
    the lanes that lose retry with what they found. On exit ``old`` holds, per lane,
    the memory's value just before its own swap. EXEC is restored."""
    sfx, n = em.t.mask_suffix, old.size
    saved = em.mask_reg()
    em.emit(f"s_mov_{sfx}", [saved], [em.exec])
    head = em.label("cas")
    em.place(head)
    data = _packed(em, [new_of(), old], n)
    got = em.v(n)
    em.emit(_cmpswap(n), [got], [addr[0], data, addr[1]], suffix=f"{off} {em.t.glc}".strip(),
            kind="vmem_atomic")
    done = em.mask_reg()
    em.valu("v_cmp_eq_u64" if n == 2 else "v_cmp_eq_u32", done, [got, old], form="vop3")
    em.copy_into(old, got)
    em.emit(f"s_andn2_{sfx}", [em.exec], [em.exec, done])
    back = em.emit("s_cbranch_execnz", kind="cbranch", target=head.name)
    em.loops.append((head, back))  # regalloc keeps what the loop reads live to the back edge
    em.emit(f"s_mov_{sfx}", [em.exec], [saved])
    em.vcc_holds = None


# -- 8- and 16-bit elements -------------------------------------------------------------------

def _shl(em, x, sh):
    """x << sh (a 32-bit element)."""
    if isinstance(x, Imm) and isinstance(sh, Imm):
        return Imm((x.bits << sh.bits) & 0xFFFFFFFF)
    if isinstance(sh, Imm) and sh.bits == 0:
        return x
    if em.uniform(x, sh):
        return em.salu("s_lshl_b32", em.s(), [x, sh])
    return em.valu("v_lshlrev_b32", em.v(), [sh, x])


def _word(em, p):
    """(address of the aligned dword holding element p, bit offset of p in it)."""
    if isinstance(p, Aff) and em.mult(p.var) >= 4:  # the shift is known now
        return Aff(p.var, p.c & ~3, 2), Imm(8 * (p.c & 3))
    p = em.real(p)
    if em.mult(p) >= 4:
        return p, Imm(0)
    if em.uniform(p):
        w = em.s(2)
        em.salu("s_and_b32", w[0], [lo(p), Imm(0xFFFFFFFC)])
        em.salu("s_mov_b32", w[1], [hi(p)])
        t = em.salu("s_and_b32", em.s(), [lo(p), Imm(3)])
        return w, em.salu("s_lshl_b32", em.s(), [t, Imm(3)])
    w = em.v(2)
    em.valu("v_and_b32", w[0], [Imm(0xFFFFFFFC), lo(p)])
    em.valu("v_mov_b32", w[1], [hi(p)], form="vop1")
    t = em.valu("v_lshlrev_b32", em.v(), [Imm(3), lo(p)])
    return w, em.valu("v_and_b32", em.v(), [Imm(24), t])


def _bits_of(em, d, x):
    """The element's memory bits in the low bits of a dword (higher bits: anything)."""
    if d.is_bool and not isinstance(x, Imm):
        return x  # kept as 0/1
    if isinstance(x, Imm):
        if d.name == "float16":
            return Imm(int(np.float16(np.uint32(x.bits).view(np.float32)).view(np.uint16)))
        if d.name == "bfloat16":
            return Imm(x.bits >> 16)
        return Imm(x.bits & 0xFF if d.is_bool or d.bits == 8 else x.bits & 0xFFFF)
    return _to_memory(em, d, x)


def _field(em, d, word, sh):
    """The element at bit ``sh`` of ``word``, widened the way the emitter keeps d."""
    width = Imm(8 * d.itemsize)
    if d.is_signed:
        return em.valu("v_bfe_i32", em.v(), [word, sh, width], form="vop3")
    raw = em.valu("v_bfe_u32", em.v(), [word, sh, width], form="vop3")
    return _from_memory(em, d, raw)


def _subword(em, kind, d, p, x, cmp, m, owner):
    ret = em.v()
    em.copy_into(ret, Imm(0))  # masked-off lanes read 0, as in the interpreter
    w, sh = _word(em, p)
    addr, off = address(em, w)
    fmask = _shl(em, Imm((1 << (8 * d.itemsize)) - 1), sh)
    native = kind in ("and", "or", "xor") and not d.is_bool
    in_word = native or kind == "xchg" or (kind == "cas" and not d.is_bool) or \
        (kind == "add" and d.is_int and not d.is_bool)
    xs = cs = None
    if in_word:  # x's bits in place: the loop works on the word itself
        xs = _shl(em, _bits_of(em, d, x), sh)
    if native:  # the other bits of the word are the op's identity
        ident = Imm(0xFFFFFFFF) if kind == "and" else Imm(0)
        if isinstance(fmask, Imm) and isinstance(xs, Imm):
            data = em.to_v(Imm((fmask.bits & xs.bits) | (~fmask.bits & ident.bits)))
        else:
            data = em.valu("v_bfi_b32", em.v(), [fmask, xs, ident], form="vop3")
    elif kind == "cas" and xs is not None:
        cs = _shl(em, _bits_of(em, d, cmp), sh)
        if isinstance(cs, Imm) and isinstance(fmask, Imm):
            cs = Imm(cs.bits & fmask.bits)
        else:
            cs = em.valu("v_and_b32", em.v(), [fmask, cs], comm=True)
    if not native:  # SGPRs and literals the loop's VOP3s would otherwise move in each time
        fmask, xs, cs = (v if v is None or is_vgpr(v) or isinstance(v, Imm) and v.is_inline
                         else em.to_v(v) for v in (fmask, xs, cs))
    old = em.v()
    with ExecMask(em, m, owner):
        if native:
            em.emit(f"global_atomic_{kind}", [old], [addr[0], data, addr[1]],
                    suffix=f"{off} {em.t.glc}".strip(), kind="vmem_atomic")
            em.copy_into(ret, _field(em, d, old, sh))
        else:
            with _unless_exec_empty(em, m is not None or owner is not None):
                em.emit("global_load_dword", [old], addr, suffix=off, kind="vmem_load")
                _cas_loop(em, addr, off, old,
                          lambda: _new_word(em, kind, d, old, sh, fmask, x, xs, cmp, cs))
                em.copy_into(ret, _field(em, d, old, sh))
    return ret


@contextmanager
def _unless_exec_empty(em, masked: bool):
    """Branch over a loop when a mask left no lane active (nothing to wait for)."""
    if not masked:
        yield
        return
    skip = em.label("noatomic")
    em.emit("s_cbranch_execz", kind="cbranch", target=skip.name)
    yield
    em.place(skip)


def _new_word(em, kind, d, old, sh, fmask, x, xs, cmp, cs):
    """The word with the element replaced by ``old_element <kind> x``."""
    def insert(bits):  # the element's bits, in place, into old
        return em.valu("v_bfi_b32", em.v(), [fmask, bits, old], form="vop3")
    if kind == "xchg":
        return insert(xs)
    if kind == "cas" and cs is not None:  # compare bit patterns
        cur = em.valu("v_and_b32", em.v(), [fmask, old], comm=True)
        em.valu("v_cmp_eq_u32", em.vcc, [cs, cur], form="vopc")
        swapped = insert(xs)
        return em.valu("v_cndmask_b32", em.v(), [old, swapped, em.vcc], implicit=1)
    if xs is not None:  # integer add: carries stay above the element and bfi drops them
        return insert(em.valu("v_add_u32", em.v(), [xs, old], comm=True))
    cur = _field(em, d, old, sh)
    if kind == "cas":  # int1 compares values (any nonzero byte is true) and stores 0/1
        em.valu("v_cmp_eq_u32", em.vcc, [cmp, cur], form="vopc")
        new = em.valu("v_cndmask_b32", em.v(), [cur, x, em.vcc], implicit=1)
    else:
        if d.name == "float16":
            calc = dt.float32  # rounded once, by the f32 -> f16 conversion to memory bits
        elif d.is_int and not d.is_bool:
            calc = dt.int32 if d.is_signed else dt.uint32  # bfi drops what overflows
        else:
            calc = d
        new = arith.binary(em, _RMW_NAME[kind], calc, cur, x)
    return insert(_shl(em, em.to_v(_bits_of(em, d, new)), sh))


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

"""Element-level instruction selection: arithmetic, comparisons, selects and casts.

Each function takes and returns *elements* (see ``emitter``). When every operand is
on the scalar side and the scalar ALU has the operation (integer arithmetic), it
emits SALU code into SGPRs; otherwise VALU code into VGPRs. After every op a narrow
type is brought back to its canonical widened form (``norm``): 8/16-bit integers
sign/zero-extended, float16/bfloat16 rounded to nearest-even, as the interpreter does.
"""
from __future__ import annotations

import struct

import numpy as np

from gluon_trace import dtypes as dt

from . import fmath
from .emitter import dwords
from .mir import Imm, Neg, hi, is_vgpr, lo

SWAP_CMP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
S_CMP = {"lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "eq": "eq", "ne": "lg"}
V_FCMP = {"lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "eq": "eq", "ne": "neq"}


def f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def const_elem(value, d: dt.dtype) -> Imm:
    """The element of a constant, in the widened form the emitter keeps values in."""
    if d.is_fp8:  # held as its byte (fp8.py)
        from . import fp8
        return fp8.const(value, d)
    if d.is_floating:
        if d.bits == 64:
            return Imm.f64(float(value))
        v = np.float32(value) if d.bits == 32 else np.float32(
            np.float16(value) if d.name == "float16" else dt.round_bf16(np.float32(value)))
        return Imm(int(np.asarray(v, np.float32).view(np.uint32)), 1, "f32")
    v = int(value)
    if d.bits == 64:
        return Imm(v & (2**64 - 1), 2)
    if d.is_bool:
        return Imm(1 if v else 0)
    v &= (1 << d.bits) - 1
    if d.is_signed and v >> (d.bits - 1):
        v -= 1 << d.bits
    return Imm(v & 0xFFFFFFFF)


# -- normalization ------------------------------------------------------------------------------

def norm(em, d: dt.dtype, x):
    """Bring a 32-bit result back to d's canonical form."""
    if d.bits in (32, 64) and d.kind != "float" or d.name in ("float32", "float64"):
        return x
    if isinstance(x, Imm):
        if d.is_floating:
            return const_elem(struct.unpack("<f", struct.pack("<I", x.bits))[0], d)
        return const_elem(x.signed if d.is_signed else x.bits, d)
    if d.name == "float16":
        t = em.valu("v_cvt_f16_f32", em.v(), [x], form="vop1")
        return em.valu("v_cvt_f32_f16", em.v(), [t], form="vop1")
    if d.name == "bfloat16":
        return round_bf16(em, x)
    if d.is_bool:
        mask = 1
    else:
        mask = (1 << d.bits) - 1
    if em.uniform(x):
        r = em.s()
        if d.is_signed:
            em.salu(f"s_sext_i32_i{d.bits}", r, [x])
        else:
            em.salu("s_and_b32", r, [x, Imm(mask)])
        return r
    if d.is_signed:
        return em.valu("v_bfe_i32", em.v(), [x, Imm(0), Imm(d.bits)], form="vop3")
    return em.valu("v_and_b32", em.v(), [Imm(mask), x], comm=True)


def round_bf16(em, x):
    """float32 -> nearest bfloat16 (ties to even), kept as float32; NaN stays NaN."""
    x = em.to_v(x)
    lsb = em.valu("v_bfe_u32", em.v(), [x, Imm(16), Imm(1)], form="vop3")
    t = em.valu("v_add3_u32", em.v(), [x, lsb, Imm(0x7FFF)], form="vop3")
    t = em.valu("v_and_b32", em.v(), [Imm(0xFFFF0000), t])
    em.valu("v_cmp_u_f32", em.vcc, [x, x], form="vopc")
    return em.valu("v_cndmask_b32", em.v(), [t, Imm(0x7FC00000), em.vcc], implicit=1)


# -- conditions ------------------------------------------------------------------------------

def cond_vcc(em, c) -> None:
    """vcc = (c != 0) for a 0/1 element."""
    from .emitter import elem_key
    if em.vcc_holds is not None and em.vcc_holds == elem_key(c):
        return  # the compare that made c left its mask in vcc
    if is_vgpr(c):
        em.valu("v_cmp_ne_u32", em.vcc, [Imm(0), c], form="vopc")
    else:
        em.valu("v_cmp_ne_u32", em.vcc, [c, Imm(0)], form="vopc")
    em.note_vcc(c)


def bool_from_vcc(em):
    b = em.valu("v_cndmask_b32", em.v(), [Imm(0), Imm(1), em.vcc], implicit=1)
    em.note_vcc(b)
    return b


def scc_of(em, c) -> None:
    """SCC = (c != 0) for a uniform 0/1 element."""
    c = em.to_s(c)
    em.emit("s_cmp_lg_u32", [], [c, Imm(0)])


# -- binary ops ------------------------------------------------------------------------------

def binary(em, name: str, d: dt.dtype, a, b):
    if d.is_floating:
        return fbinary(em, name, d, a, b)
    if d.bits == 64:
        return ibinary64(em, name, d, a, b)
    return ibinary32(em, name, d, a, b)


INT_S = {"add": "s_add_u32", "sub": "s_sub_u32", "mul": "s_mul_i32", "and": "s_and_b32",
         "or": "s_or_b32", "xor": "s_xor_b32"}
INT_V = {"add": ("v_add_u32", "vop2"), "sub": ("v_sub_u32", "vop2"),
         "mul": ("v_mul_lo_u32", "vop3"), "and": ("v_and_b32", "vop2"),
         "or": ("v_or_b32", "vop2"), "xor": ("v_xor_b32", "vop2")}


def _fold_int(name, d, a: int, b: int):
    """Python reference for two integer constants (C semantics, wrap-around)."""
    nd = d.np
    x, y = np.array(a).astype(nd), np.array(b).astype(nd)
    with np.errstate(all="ignore"):
        if name == "add":
            r = x + y if not d.is_bool else (x | y)
        elif name == "sub":
            r = x - y
        elif name == "mul":
            r = x * y if not d.is_bool else (x & y)
        elif name in ("and", "or", "xor"):
            r = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[name](x, y)
        elif name == "maximum":
            r = np.maximum(x, y)
        elif name == "minimum":
            r = np.minimum(x, y)
        elif name in SWAP_CMP:
            r = {"lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y, "eq": x == y,
                 "ne": x != y}[name]
            return const_elem(int(r), dt.int1)
        else:
            return None
    return const_elem(int(r), d)


def _by_zero(em, name, d, a, b, r):
    """Integer division by 0 gives all bits set and a remainder of a (the interpreter's rule)."""
    wide = d.bits == 64
    if isinstance(b, Imm):
        if b.bits:
            return r
        return a if name == "mod" else Imm((1 << 64) - 1, 2) if wide else Imm(0xFFFFFFFF)
    z = compare(em, "eq", d, b, Imm(0, 2) if wide else Imm(0))
    alt = a if name == "mod" else Imm((1 << 64) - 1, 2) if wide else Imm(0xFFFFFFFF)
    return where(em, d, z, alt, r)


def _as_int(x: Imm, d):
    return x.signed if d.is_signed else x.bits


def ibinary32(em, name, d, a, b):
    if isinstance(a, Imm) and isinstance(b, Imm):
        r = _fold_int(name, d, _as_int(a, d), _as_int(b, d))
        if r is not None:
            return r
    if name in ("floordiv", "mod"):
        return norm(em, d, _by_zero(em, name, d, a, b, fmath.idiv32(em, d, a, b, rem=name == "mod")))
    if name in ("shl", "shr"):
        return shift32(em, name, d, a, b)
    if d.is_bool and name in ("add", "mul"):
        name = "or" if name == "add" else "and"
    if name in ("maximum", "minimum"):
        sfx = "i32" if d.is_signed else "u32"
        op = "max" if name == "maximum" else "min"
        if em.uniform(a, b):
            return em.salu(f"s_{op}_{sfx}", em.s(), [a, b])
        return em.valu(f"v_{op}_{sfx}", em.v(), [a, b], comm=True)
    if em.uniform(a, b):
        r = em.salu(INT_S[name], em.s(), [a, b])
    else:
        op, form = INT_V[name]
        rev = "v_subrev_u32" if name == "sub" else None
        r = em.valu(op, em.v(), [a, b], form=form, comm=name != "sub", rev=rev)
    return norm(em, d, r) if name in ("add", "sub", "mul") else r


def shift32(em, name, d, a, b):
    """Shifts by >= the width give 0 (or the sign for signed >>), as the interpreter."""
    bits = 32
    if isinstance(b, Imm):
        s = b.bits if not d.is_signed else b.signed
        if s < 0 or s >= d.bits:
            if name == "shl" or not d.is_signed:
                return Imm(0)
            s = 31
        op = {"shl": "lshl", "shr": "ashr" if d.is_signed else "lshr"}[name]
        if em.uniform(a):
            r = em.salu(f"s_{op}_b32" if op != "ashr" else "s_ashr_i32", em.s(), [a, Imm(s)])
        else:
            vop = {"lshl": "v_lshlrev_b32", "lshr": "v_lshrrev_b32", "ashr": "v_ashrrev_i32"}[op]
            r = em.valu(vop, em.v(), [Imm(s), a])
        return norm(em, d, r)
    if name == "shr" and d.is_signed:
        if em.uniform(a, b):
            amt = em.salu("s_min_u32", em.s(), [b, Imm(31)])
            return em.salu("s_ashr_i32", em.s(), [a, amt])
        amt = em.valu("v_min_u32", em.v(), [Imm(31), b], comm=True)
        return em.valu("v_ashrrev_i32", em.v(), [amt, a])
    if em.uniform(a, b):
        raw = em.salu("s_lshl_b32" if name == "shl" else "s_lshr_b32", em.s(), [a, b])
        em.emit("s_cmp_lt_u32", [], [b, Imm(bits)])
        r = em.salu("s_cselect_b32", em.s(), [raw, Imm(0)])
    else:
        raw = em.valu("v_lshlrev_b32" if name == "shl" else "v_lshrrev_b32", em.v(), [b, a])
        em.valu("v_cmp_gt_u32", em.vcc, [Imm(bits), b], form="vopc")
        r = em.valu("v_cndmask_b32", em.v(), [Imm(0), raw, em.vcc], implicit=1)
    return norm(em, d, r)


def compare(em, name, d: dt.dtype, a, b):
    """0/1 element for ``a <name> b``."""
    if d.is_floating:
        suffix = "f64" if d.bits == 64 else "f32"
        return _vcmp(em, f"v_cmp_{{}}_{suffix}", V_FCMP, name, a, b)
    signed = d.is_signed
    if d.bits == 64:
        if isinstance(a, Imm) and isinstance(b, Imm):
            return _fold_int(name, d, _as_int(a, d), _as_int(b, d))
        if name in ("eq", "ne") and em.uniform(a, b):
            em.emit(f"s_cmp_{S_CMP[name]}_u64", [], [em.to_s(a, keep_imm=False) if isinstance(a, Imm)
                                                     and not a.is_inline else a, b])
            return em.salu("s_cselect_b32", em.s(), [Imm(1), Imm(0)])
        sfx = "i64" if signed else "u64"
        return _vcmp(em, f"v_cmp_{{}}_{sfx}", V_FCMP | {"ne": "ne"}, name, a, b)
    if isinstance(a, Imm) and isinstance(b, Imm):
        return _fold_int(name, d, _as_int(a, d), _as_int(b, d))
    sfx = "i32" if signed else "u32"
    if em.uniform(a, b):
        x = S_CMP[name]
        if x in ("eq", "lg"):
            sfx = "u32"
        em.emit(f"s_cmp_{x}_{sfx}", [], [a, b])
        return em.salu("s_cselect_b32", em.s(), [Imm(1), Imm(0)])
    return _vcmp(em, f"v_cmp_{{}}_{sfx}", {**V_FCMP, "ne": "ne"}, name, a, b)


def _vcmp(em, pattern, names, name, a, b):
    if is_vgpr(a) and not is_vgpr(b):
        a, b, name = b, a, SWAP_CMP[name]
    em.valu(pattern.format(names[name]), em.vcc, [a, b], form="vopc")
    return bool_from_vcc(em)


def ibinary64(em, name, d, a, b):
    if isinstance(a, Imm) and isinstance(b, Imm) and name not in ("floordiv", "mod"):
        r = _fold_int(name, d, _as_int(a, d), _as_int(b, d))
        if r is not None and name not in ("shl", "shr"):
            return r
    if name in ("floordiv", "mod"):
        return _by_zero(em, name, d, a, b, fmath.idiv64(em, d, a, b, rem=name == "mod"))
    if name in ("add", "sub"):
        return add64(em, a, b, sub=name == "sub")
    if name in ("and", "or", "xor"):
        if em.uniform(a, b):
            return em.salu(f"s_{name}_b64", em.s(2), [a, b])
        r = em.v(2)
        for k, f in ((0, lo), (1, hi)):
            em.valu(f"v_{name}_b32", r[k], [f(a), f(b)], comm=True)
        return r
    if name == "mul":
        return mul64(em, a, b)
    if name in ("maximum", "minimum"):
        return select64_cmp(em, "gt" if name == "maximum" else "lt", d, a, b)
    if name in ("shl", "shr"):
        return shift64(em, name, d, a, b)
    raise em.error(f"no 64-bit lowering for {name}")


def add64(em, a, b, sub=False):
    if em.uniform(a, b):
        r = em.s(2)
        em.salu("s_sub_u32" if sub else "s_add_u32", r[0], [lo(a), lo(b)])
        em.salu("s_subb_u32" if sub else "s_addc_u32", r[1], [hi(a), hi(b)])
        return r
    r = em.v(2)
    if sub:
        em.valu("v_sub_co_u32", r[0], [lo(a), lo(b)], extra_defs=[em.vcc], rev="v_subrev_co_u32")
        # the borrow chain needs a VGPR in src1 and vcc counts against the constant bus
        em.valu(em.t.subb, r[1], [hi(a), em.to_v(hi(b)), em.vcc], extra_defs=[em.vcc], implicit=1)
    else:
        em.valu("v_add_co_u32", r[0], [lo(a), lo(b)], extra_defs=[em.vcc], comm=True)
        x, y = hi(a), hi(b)
        if is_vgpr(x) and not is_vgpr(y):
            x, y = y, x
        em.valu(em.t.addc, r[1], [x, em.to_v(y), em.vcc], extra_defs=[em.vcc], implicit=1)
    return r


def add_const(em, x, c: int, size: int):
    """x + c (wrapping), for materializing a ``var + c`` element."""
    if size == 2:
        return add64(em, x, Imm(c & (2**64 - 1), 2))
    k = Imm(c & 0xFFFFFFFF)
    if em.uniform(x):
        return em.salu("s_add_u32", em.s(), [x, k])
    return em.valu("v_add_u32", em.v(), [k, x])


def mul64(em, a, b):
    if em.uniform(a, b):
        r = em.s(2)
        em.salu("s_mul_i32", r[0], [lo(a), lo(b)])
        h1 = em.salu("s_mul_hi_u32", em.s(), [lo(a), lo(b)])
        h2 = em.salu("s_mul_i32", em.s(), [lo(a), hi(b)])
        h3 = em.salu("s_mul_i32", em.s(), [hi(a), lo(b)])
        t = em.salu("s_add_u32", em.s(), [h1, h2])
        em.salu("s_add_u32", r[1], [t, h3])
        return r
    r = em.v(2)
    em.valu("v_mul_lo_u32", r[0], [lo(a), lo(b)], form="vop3")
    h1 = em.valu("v_mul_hi_u32", em.v(), [lo(a), lo(b)], form="vop3")
    h2 = em.valu("v_mul_lo_u32", em.v(), [lo(a), hi(b)], form="vop3")
    h3 = em.valu("v_mul_lo_u32", em.v(), [hi(a), lo(b)], form="vop3")
    em.valu("v_add3_u32", r[1], [h1, h2, h3], form="vop3")
    return r


def select64_cmp(em, pred, d, a, b):
    """(a pred b) ? a : b on 64-bit integers."""
    c = compare(em, pred, d, a, b)
    return where(em, d, c, a, b)


def shift64(em, name, d, a, b):
    if isinstance(b, Imm):
        s = b.signed if d.is_signed else b.bits
        if s < 0 or s >= 64:
            if name == "shl" or not d.is_signed:
                return Imm(0, 2)
            s = 63
        if em.uniform(a):
            op = {"shl": "s_lshl_b64", "shr": "s_ashr_i64" if d.is_signed else "s_lshr_b64"}[name]
            return em.salu(op, em.s(2), [em.to_s(a, keep_imm=False) if isinstance(a, Imm) else a,
                                         Imm(s)])
        op = {"shl": "v_lshlrev_b64", "shr": "v_ashrrev_i64" if d.is_signed else "v_lshrrev_b64"}[name]
        return em.valu(op, em.v(2), [Imm(s), a], form="vop3")
    bv = em.to_v(b) if not is_vgpr(b) else b
    if name == "shr" and d.is_signed:
        em.valu("v_cmp_gt_u64", em.vcc, [Imm(63, 2), bv], form="vopc")
        amt = em.valu("v_cndmask_b32", em.v(), [Imm(63), lo(bv), em.vcc], implicit=1)
        return em.valu("v_ashrrev_i64", em.v(2), [amt, a], form="vop3")
    op = "v_lshlrev_b64" if name == "shl" else "v_lshrrev_b64"
    raw = em.valu(op, em.v(2), [lo(bv), a], form="vop3")
    em.valu("v_cmp_gt_u64", em.vcc, [Imm(64, 2), bv], form="vopc")
    r = em.v(2)
    em.valu("v_cndmask_b32", r[0], [Imm(0), raw[0], em.vcc], implicit=1)
    em.valu("v_cndmask_b32", r[1], [Imm(0), raw[1], em.vcc], implicit=1)
    return r


# -- floats --------------------------------------------------------------------------------------

F32_OPS = {"add": ("v_add_f32", True, None), "sub": ("v_sub_f32", False, "v_subrev_f32"),
           "mul": ("v_mul_f32", True, None), "maximum": ("v_max_f32", True, None),
           "minimum": ("v_min_f32", True, None)}


def fbinary(em, name, d, a, b):
    if name == "div":
        return norm(em, d, fmath.fdiv(em, d, a, b, approx=False))
    if name == "mod":
        return norm(em, d, fmath.fmod(em, d, a, b))
    if d.bits == 64:
        if name == "sub":
            b = Imm.f64(-_f64_of(b)) if isinstance(b, Imm) else Neg(b)
            name = "add"
        op = {"add": "v_add_f64", "mul": "v_mul_f64", "maximum": "v_max_f64",
              "minimum": "v_min_f64"}.get(name)
        if op is None:
            raise em.error(f"{name} is not defined on float64")
        return em.valu(op, em.v(2), [a, b], form="vop3")
    op = F32_OPS.get(name)
    if op is None:
        raise em.error(f"{name} is not defined on {d}")
    r = em.valu(op[0], em.v(), [a, b], comm=op[1], rev=op[2])
    return r if name in ("maximum", "minimum") else norm(em, d, r)


def _f64_of(x: Imm) -> float:
    return struct.unpack("<d", struct.pack("<Q", x.bits))[0]


def fma(em, d, a, b, c):
    if d.bits == 64:
        return em.valu("v_fma_f64", em.v(2), [a, b, c], form="vop3")
    if d.bits == 16:
        return norm(em, d, _fma16(em, a, b, c))
    return norm(em, d, em.valu("v_fma_f32", em.v(), [a, b, c], form="vop3"))


def _fma16(em, a, b, c):
    """float16/bfloat16 fma rounded once: v_fma_f32 then f16 rounds twice (1 in ~25k random
    cases off by an ulp). Instead: the exact product in float64 plus c, with the sum's exact
    error (TwoSum), narrowed to float32 rounded to odd (toward zero, last bit set when inexact),
    which ``norm`` then rounds to 16 bits as one rounding would (24 >= 2*11 + 2; Boldo &
    Melquiond). The error matters where c is too small for float64 to keep beside the product
    (bfloat16's range: a product near 2^60 on a bfloat16 tie, plus or minus 1, went to even)."""
    x, y, z = (em.valu("v_cvt_f64_f32", em.v(2), [v], form="vop1") for v in (a, b, c))
    p = em.valu("v_mul_f64", em.v(2), [x, y], form="vop3")      # exact: at most 2 x 11 bits
    s = binary(em, "add", dt.float64, p, z)
    bb = binary(em, "sub", dt.float64, s, p)
    err = binary(em, "add", dt.float64, binary(em, "sub", dt.float64, p, binary(em, "sub", dt.float64, s, bb)),
                 binary(em, "sub", dt.float64, z, bb))
    return f32_round_odd(em, s, err)


def f32_round_odd(em, r, err=None):
    """A float64 narrowed to float32 rounded to odd: then rounding that to 16 bits is one
    rounding of the float64 (24 >= 2*11 + 2), where v_cvt_f32_f64's nearest would be two.
    ``err``: the value is r + err (|err| below half r's ulp, 0 where r is 0, NaN where r is
    not finite), so an r that is a float32 is still inexact, and toward zero is below it
    where err's sign is r's opposite."""
    f = em.valu("v_cvt_f32_f64", em.v(), [r], form="vop1")
    back = em.valu("v_cvt_f64_f32", em.v(2), [f], form="vop1")
    away = compare(em, "gt", dt.float64, fmath._fabs64(em, back), fmath._fabs64(em, r))
    if err is not None:
        pos = compare(em, "gt", dt.float64, err, Imm(0, 2))
        neg = compare(em, "lt", dt.float64, err, Imm(0, 2))       # both false for NaN
        opposite = where(em, dt.int1, compare(em, "lt", dt.float64, r, Imm(0, 2)), pos, neg)
        same = compare(em, "eq", dt.float64, back, r)
        away = binary(em, "or", dt.int1, away, binary(em, "and", dt.int1, same, opposite))
    f = where(em, dt.int32, away, em.valu("v_sub_u32", em.v(), [f, Imm(1)]), f)
    inexact = compare(em, "ne", dt.float64, back, r)
    if err is not None:
        inexact = binary(em, "or", dt.int1, inexact, binary(em, "or", dt.int1, pos, neg))
    return where(em, dt.int32, inexact, em.valu("v_or_b32", em.v(), [Imm(1), f], comm=True), f)


# -- unary ---------------------------------------------------------------------------------------

def unary(em, name, d, a):
    if d.is_floating:
        return funary(em, name, d, a)
    if name == "neg":
        return binary(em, "sub", d, Imm(0, dwords(d)), a)
    if name == "not":
        if d.is_bool:
            return binary(em, "xor", d, a, Imm(1))
        if d.bits < 32 and not d.is_signed:  # zero-extended in its register: flip its own bits only
            return binary(em, "xor", d, a, Imm((1 << d.bits) - 1))
        return binary(em, "xor", d, a, Imm(-1 & (2**64 - 1), dwords(d)) if d.bits == 64 else Imm(-1))
    if name == "abs":
        if not d.is_signed:
            return a
        if d.bits == 64:
            neg = binary(em, "sub", d, Imm(0, 2), a)
            c = compare(em, "lt", d, a, Imm(0, 2))
            return where(em, d, c, neg, a)
        if isinstance(a, Imm):
            return const_elem(abs(a.signed), d)
        if em.uniform(a):
            return norm(em, d, em.salu("s_abs_i32", em.s(), [a]))
        neg = em.valu("v_sub_u32", em.v(), [Imm(0), a])
        return norm(em, d, em.valu("v_max_i32", em.v(), [a, neg], comm=True))
    raise em.error(f"{name} is not defined on {d}")


def exp2_ftz(em, d, a):
    """2**x with results below float32's normals flushed: v_exp_f32 without the rescaling that
    keeps subnormal results (exp2_32), and an explicit flush, so that the answer does not hang
    on the denormal mode or on whether the unit itself flushes."""
    r = em.valu("v_exp_f32", em.v(), [em.to_v(a)], form="vop1")
    em.valu("v_cmp_gt_f32", em.vcc, [Imm(0x00800000, 1, "f32"), r], form="vopc")
    return norm(em, d, fmath.cndmask(em, r, Imm(0)))


def funary(em, name, d, a):
    if d.bits == 64:
        return fmath.funary64(em, name, a)
    if name == "neg":
        if isinstance(a, Imm):
            return Imm(a.bits ^ 0x80000000, 1, "f32")
        return em.valu("v_xor_b32", em.v(), [Imm(0x80000000), a], comm=True)
    if name == "abs":
        if isinstance(a, Imm):
            return Imm(a.bits & 0x7FFFFFFF, 1, "f32")
        return em.valu("v_and_b32", em.v(), [Imm(0x7FFFFFFF), a], comm=True)
    if name in ("floor", "ceil"):
        return em.valu(f"v_{name}_f32", em.v(), [a], form="vop1")
    return norm(em, d, fmath.funary32(em, name, a))


# -- select ---------------------------------------------------------------------------------------

def where(em, d, c, a, b):
    if isinstance(c, Imm):
        return a if c.bits else b
    n = dwords(d)
    if em.uniform(c, a, b):
        scc_of(em, c)
        if n == 1:
            return em.salu("s_cselect_b32", em.s(), [a, b])
        aa = em.to_s(a, keep_imm=False) if isinstance(a, Imm) and not a.is_inline else a
        bb = em.to_s(b, keep_imm=False) if isinstance(b, Imm) and not b.is_inline else b
        return em.salu("s_cselect_b64", em.s(2), [aa, bb])
    cond_vcc(em, c)
    if n == 1:
        return em.valu("v_cndmask_b32", em.v(), [b, a, em.vcc], implicit=1)
    r = em.v(2)
    em.valu("v_cndmask_b32", r[0], [lo(b), lo(a), em.vcc], implicit=1)
    em.valu("v_cndmask_b32", r[1], [hi(b), hi(a), em.vcc], implicit=1)
    return r


# -- casts --------------------------------------------------------------------------------------

def cast(em, src: dt.dtype, to: dt.dtype, x, bitcast=False):
    if src == to:
        return x
    if src.is_fp8 or to.is_fp8:
        from . import fp8
        return fp8.cast(em, src, to, x, bitcast)
    if bitcast:
        return _bitcast(em, src, to, x)
    if src.is_ptr or to.is_ptr:
        return x  # pointer <-> (u)int64 keep their bits
    if to.is_bool:
        zero = Imm.f64(0.0) if src.name == "float64" else (Imm(0, 2) if src.bits == 64 else Imm(0))
        return compare(em, "ne", src, x, zero)
    if src.is_floating and to.is_floating:
        return _fcast(em, src, to, x)
    if not src.is_floating and not to.is_floating:
        return _icast(em, src, to, x)
    if src.is_floating:
        return _f2i(em, src, to, x)
    return _i2f(em, src, to, x)


def _icast(em, src, to, x):
    if src.bits == 64 and to.bits == 64:
        return x
    if src.bits == 64:
        return norm(em, to, lo(x))
    if to.bits == 64:
        signed = src.is_signed
        if isinstance(x, Imm):
            return Imm(x.signed if signed else x.bits, 2)
        if em.uniform(x):
            r = em.s(2)
            em.emit("s_mov_b32", [r[0]], [x])
            if signed:
                em.salu("s_ashr_i32", r[1], [x, Imm(31)])
            else:
                em.emit("s_mov_b32", [r[1]], [Imm(0)])
            return r
        r = em.v(2)
        em.emit("v_mov_b32", [r[0]], [x], kind="valu")
        if signed:
            em.valu("v_ashrrev_i32", r[1], [Imm(31), x])
        else:
            em.emit("v_mov_b32", [r[1]], [Imm(0)], kind="valu")
        return r
    return norm(em, to, x)


def _fcast(em, src, to, x):
    if src.bits == 64:
        if to.bits == 16:
            return norm(em, to, f32_round_odd(em, x))
        f = em.valu("v_cvt_f32_f64", em.v(), [x], form="vop1")
        return norm(em, to, f)
    if to.bits == 64:
        return em.valu("v_cvt_f64_f32", em.v(2), [x], form="vop1")
    return norm(em, to, x)  # f32/f16/bf16 all held as f32


def _i2f(em, src, to, x):
    signed = src.is_signed
    if src.bits == 64 and to.bits < 64:
        x = _sticky53(em, x, signed)
    if src.bits == 64:
        hf = em.valu("v_cvt_f64_i32" if signed else "v_cvt_f64_u32", em.v(2), [hi(x)], form="vop1")
        hf = em.valu("v_ldexp_f64", em.v(2), [hf, Imm(32)], form="vop3")
        lf = em.valu("v_cvt_f64_u32", em.v(2), [lo(x)], form="vop1")
        f = em.valu("v_add_f64", em.v(2), [hf, lf], form="vop3")
        return f if to.bits == 64 else _fcast(em, dt.float64, to, f)
    if to.bits == 64:
        return em.valu("v_cvt_f64_i32" if signed else "v_cvt_f64_u32", em.v(2), [x], form="vop1")
    if to.name == "bfloat16" and src.bits == 32:  # exact in float64; then one rounding
        f = em.valu("v_cvt_f64_i32" if signed else "v_cvt_f64_u32", em.v(2), [x], form="vop1")
        return norm(em, to, f32_round_odd(em, f))
    f = em.valu("v_cvt_f32_i32" if signed else "v_cvt_f32_u32", em.v(), [x], form="vop1")
    return norm(em, to, f)


def _sticky53(em, x, signed):
    """A 64-bit integer with at most 53 significant bits that rounds to float32 as x does:
    past 2**53 in magnitude the low 12 bits become one sticky bit (bit 11), so the float64
    sum of the halves is exact and its narrowing to float32 is the only rounding (without
    this, float64 then float32 rounded twice)."""
    if isinstance(x, Imm):
        v = x.bits - (1 << 64) if signed and x.bits >> 63 else x.bits
        if abs(v) >= 1 << 53 and v & 0xFFF:
            v = (v & ~0xFFF) | 0x800
        return Imm(v & (2 ** 64 - 1), 2)
    h, l_ = hi(x), lo(x)
    if signed:  # |x| >= 2**53 <=> hi outside [-2**21, 2**21)
        h = em.valu("v_add_u32", em.v(), [Imm(0x200000), h], comm=True)
    big = compare(em, "ge", dt.uint32, h, Imm(0x400000 if signed else 0x200000))
    low = em.valu("v_and_b32", em.v(), [Imm(0xFFF), l_], comm=True)
    nz = compare(em, "ne", dt.uint32, low, Imm(0))
    top = em.valu("v_and_b32", em.v(), [Imm(0xFFFFF000), l_], comm=True)
    top = where(em, dt.uint32, nz, em.valu("v_or_b32", em.v(), [Imm(0x800), top], comm=True), top)
    out = em.v(2)
    em.emit("v_mov_b32", [out[0]], [where(em, dt.uint32, big, top, l_)], kind="valu")
    em.emit("v_mov_b32", [out[1]], [hi(x)], kind="valu")
    return out


def _f2i(em, src, to, x):
    """Truncate, saturate at ``to``'s range, NaN -> 0 (the interpreter's rule, PTX cvt.rzi)."""
    if isinstance(x, Imm) and to.bits <= 32:  # a constant (an integer load's float `other`): folded
        v = struct.unpack("<d", struct.pack("<Q", x.bits))[0] if src.bits == 64 else \
            struct.unpack("<f", struct.pack("<I", x.bits & 0xFFFFFFFF))[0]
        top = (1 << (to.bits - 1)) - 1 if to.is_signed else (1 << to.bits) - 1
        return const_elem(0 if v != v else int(min(max(v, -top - 1 if to.is_signed else 0), top)), to)
    if to.bits == 64:
        f = x if src.bits == 64 else em.valu("v_cvt_f64_f32", em.v(2), [x], form="vop1")
        t = em.valu("v_trunc_f64", em.v(2), [f], form="vop1")
        # split an in-range value into 32-bit halves; the ends are selected afterwards
        top = 2.0 ** 63 if to.is_signed else 2.0 ** 64
        lo_f = -top if to.is_signed else 0.0
        c = em.valu("v_max_f64", em.v(2), [t, Imm.f64(lo_f)], form="vop3")  # NaN -> lo_f
        c = em.valu("v_min_f64", em.v(2), [c, Imm.f64(float(np.nextafter(top, 0.0)))], form="vop3")
        r = _f2i64_in_range(em, to, c)
        big = compare(em, "ge", dt.float64, t, Imm.f64(top))
        r = where(em, to, big, Imm((1 << 63) - 1 if to.is_signed else (1 << 64) - 1, 2), r)
        nan = compare(em, "ne", dt.float64, t, t)  # v_max_f64 quiets a signaling NaN: select
        return where(em, to, nan, Imm(0, 2), r)
    sfx = "f64" if src.bits == 64 else "f32"
    if to.is_signed:
        r = em.valu(f"v_cvt_i32_{sfx}", em.v(), [x], form="vop1")
        if to.bits < 32:
            hi = (1 << (to.bits - 1)) - 1
            r = em.valu("v_max_i32", em.v(), [Imm(-hi - 1 & 0xFFFFFFFF), r], comm=True)
            r = em.valu("v_min_i32", em.v(), [Imm(hi), r], comm=True)
        return r
    r = em.valu(f"v_cvt_u32_{sfx}", em.v(), [x], form="vop1")
    if to.bits < 32:
        r = em.valu("v_min_u32", em.v(), [Imm((1 << to.bits) - 1), r], comm=True)
    return r


def _f2i64_in_range(em, to, t):
    """A truncated float64 in ``to``'s range, as two 32-bit halves."""
    h = em.valu("v_ldexp_f64", em.v(2), [t, Imm(-32)], form="vop3")
    h = em.valu("v_floor_f64", em.v(2), [h], form="vop1")
    hs = em.valu("v_ldexp_f64", em.v(2), [h, Imm(32)], form="vop3")
    lf = em.valu("v_add_f64", em.v(2), [t, Neg(hs)], form="vop3")
    r = em.v(2)
    em.valu("v_cvt_u32_f64", r[0], [lf], form="vop1")
    em.valu("v_cvt_i32_f64" if to.is_signed else "v_cvt_u32_f64", r[1], [h], form="vop1")
    return r


def _bitcast(em, src, to, x):
    if src.bits in (32, 64) or (src.is_int and to.is_int):
        if src.is_int and to.is_int:
            return norm(em, to, x)
        return x
    # 16-bit float <-> 16-bit integer: float16/bfloat16 are held widened as float32
    if src.is_floating:
        if isinstance(x, Imm):
            f = struct.unpack("<f", struct.pack("<I", x.bits))[0]
            raw = int(np.float16(f).view(np.uint16)) if src.name == "float16" else x.bits >> 16
            return const_elem(raw if not to.is_signed else (raw - 65536 if raw >> 15 else raw), to)
        if src.name == "float16":
            bits = em.valu("v_cvt_f16_f32", em.v(), [x], form="vop1")
        else:
            bits = em.valu("v_lshrrev_b32", em.v(), [Imm(16), x])
        return norm(em, to, bits)
    xv = x
    if to.name == "float16":
        m = em.valu("v_and_b32", em.v(), [Imm(0xFFFF), xv], comm=True)
        return em.valu("v_cvt_f32_f16", em.v(), [m], form="vop1")
    if isinstance(x, Imm):
        return Imm((x.bits & 0xFFFF) << 16, 1, "f32")
    return em.valu("v_lshlrev_b32", em.v(), [Imm(16), xv])


# -- pointers -----------------------------------------------------------------------------------

def ptr_add(em, esize: int, p, off, odt: dt.dtype):
    """p + off * esize with off sign- (or zero-) extended to 64 bits."""
    if isinstance(off, Imm):
        k = (off.signed if odt.is_signed or off.size == 2 else off.bits) * esize
        if k == 0:
            return p
        imm = Imm(k & (2**64 - 1), 2)
        return add64(em, p, imm)
    sh = {1: 0, 2: 1, 4: 2, 8: 3}[esize]
    if odt.bits < 64 and not em.uniform(p, off):
        # one VOP3 multiply-add: 32x32 -> 64 bits, plus the pointer
        op = "v_mad_i64_i32" if odt.is_signed else "v_mad_u64_u32"
        return em.valu(op, em.v(2), [off, Imm(esize), p], form="vop3", extra_defs=[em.vcc])
    off64 = off if odt.bits == 64 else _icast(em, odt, dt.int64 if odt.is_signed else dt.uint64, off)
    if sh:
        off64 = shift64(em, "shl", dt.int64, off64, Imm(sh))
    return add64(em, p, off64)

"""Instruction sequences for float math and integer division.

The hardware gives approximations (v_rcp, v_sqrt, v_exp, v_log are ~1 ulp and flush
or mishandle some ranges); these sequences follow the LLVM AMDGPU expansions so that
division and square root are correctly rounded and exp/log/exp2 keep denormals and
their range. float64 exp/exp2/log/log2/sin/cos/erf are not here: ``compiler.lower``
expands them into core ops (``gluon_trace.decompose``) before instruction selection.
"""
from __future__ import annotations

import math
import struct


from .mir import Imm, Neg


def _f(x: float) -> Imm:
    return Imm.f32(x)


def _bits(b: int) -> Imm:
    return Imm(b, 1, "f32")


LOG2E = 0x3FB8AA3B          # log2(e) rounded to f32
LOG2E_LO = 0x32A5705F       # log2(e) - LOG2E
LN2 = 0x3F317218
EXP_UNDERFLOW = struct.unpack("<I", struct.pack("<f", -103.97208))[0]  # below: exp(x) rounds to 0
EXP_OVERFLOW = struct.unpack("<I", struct.pack("<f", 88.72284))[0]     # above: inf
CLASS_ZERO_PINF = 0x260  # v_cmp_class mask: -0, +0, +inf
CLASS_INF = 0x204        # -inf, +inf
CLASS_NAN_ZERO = 0x063   # NaNs, -0, +0


def cndmask(em, if_false, if_true):
    return em.valu("v_cndmask_b32", em.v(), [if_false, if_true, em.vcc], implicit=1)


def cndmask64(em, if_false, if_true):
    r = em.v(2)
    for k in range(2):
        em.valu("v_cndmask_b32", r[k], [_half(if_false, k), _half(if_true, k), em.vcc], implicit=1)
    return r


def _half(x, k):
    from .mir import hi, lo
    return lo(x) if k == 0 else hi(x)


# -- division ---------------------------------------------------------------------------------

def fdiv(em, d, a, b, approx=False):
    if d.bits == 64:
        return _fdiv64(em, a, b)
    if approx:
        r = em.valu("v_rcp_f32", em.v(), [b], form="vop1")
        return em.valu("v_mul_f32", em.v(), [a, r], comm=True)
    a, b = em.to_v(a), em.to_v(b)
    vcc = em.vcc
    den = em.valu("v_div_scale_f32", em.v(), [b, b, a], form="vop3", extra_defs=[vcc])
    num = em.valu("v_div_scale_f32", em.v(), [a, b, a], form="vop3", extra_defs=[vcc])
    rcp = em.valu("v_rcp_f32", em.v(), [den], form="vop1")
    t = em.valu("v_fma_f32", em.v(), [Neg(den), rcp, _f(1.0)], form="vop3")
    rcp = em.valu("v_fma_f32", em.v(), [t, rcp, rcp], form="vop3")
    q = em.valu("v_mul_f32", em.v(), [num, rcp])
    t = em.valu("v_fma_f32", em.v(), [Neg(den), q, num], form="vop3")
    q = em.valu("v_fma_f32", em.v(), [t, rcp, q], form="vop3")
    t = em.valu("v_fma_f32", em.v(), [Neg(den), q, num], form="vop3")
    q = em.valu("v_div_fmas_f32", em.v(), [t, rcp, q], form="vop3", implicit=1,
                imp=[vcc])
    return em.valu("v_div_fixup_f32", em.v(), [q, b, a], form="vop3")


def _fdiv64(em, a, b):
    a, b = em.to_v(a), em.to_v(b)
    vcc = em.vcc
    one = Imm.f64(1.0)
    den = em.valu("v_div_scale_f64", em.v(2), [b, b, a], form="vop3", extra_defs=[vcc])
    rcp = em.valu("v_rcp_f64", em.v(2), [den], form="vop1")
    f0 = em.valu("v_fma_f64", em.v(2), [Neg(den), rcp, one], form="vop3")
    f1 = em.valu("v_fma_f64", em.v(2), [rcp, f0, rcp], form="vop3")
    f2 = em.valu("v_fma_f64", em.v(2), [Neg(den), f1, one], form="vop3")
    num = em.valu("v_div_scale_f64", em.v(2), [a, b, a], form="vop3", extra_defs=[vcc])
    f3 = em.valu("v_fma_f64", em.v(2), [f1, f2, f1], form="vop3")
    mul = em.valu("v_mul_f64", em.v(2), [num, f3], form="vop3")
    f4 = em.valu("v_fma_f64", em.v(2), [Neg(den), mul, num], form="vop3")
    q = em.valu("v_div_fmas_f64", em.v(2), [f4, f3, mul], form="vop3",
                implicit=1, imp=[vcc])
    return em.valu("v_div_fixup_f64", em.v(2), [q, b, a], form="vop3")


def fmod(em, d, a, b):
    """fmod with a's sign; NaN where a is inf or NaN, b is NaN or 0; a where b is inf.
    float32/16 (held as f32): exact for every input, as C's fmod and the interpreter:
    |a| is reduced in float64 by |b| * 2**s for s = 250, 200, ..., 0; each quotient is
    below 2**50 (f32 values span 2**277), so trunc(q) is exact and the fma leaves the exact
    remainder. float64 (spanning 2**2098) runs the same reduction as a loop."""
    if d.bits == 64:
        a, b = em.to_v(a), em.to_v(b)
        r = _fmod64_magnitude(em, _fabs64(em, a), _fabs64(em, b))
        em.valu("v_cmp_class_f64", em.vcc, [b, Imm(CLASS_INF)], form="vopc")
        r = cndmask64(em, r, a)
        em.valu("v_cmp_class_f64", em.vcc, [a, Imm(CLASS_INF)], form="vopc")
        r = cndmask64(em, r, Imm.f64(float("nan")))
        em.valu("v_cmp_class_f64", em.vcc, [b, Imm(CLASS_NAN_ZERO)], form="vopc")
        r = cndmask64(em, r, Imm.f64(float("nan")))
        hi_r = em.valu("v_bfi_b32", em.v(), [Imm(0x7FFFFFFF), _half(r, 1), _half(a, 1)], form="vop3")
        out = em.v(2)
        em.emit("v_mov_b32", [out[0]], [_half(r, 0)], kind="valu")
        em.emit("v_mov_b32", [out[1]], [hi_r], kind="valu")
        return out
    x = em.valu("v_cvt_f64_f32", em.v(2), [a], form="vop1")
    y = em.valu("v_cvt_f64_f32", em.v(2), [b], form="vop1")
    ax, ay = _fabs64(em, x), _fabs64(em, y)
    for s in (250, 200, 150, 100, 50, 0):
        yk = em.valu("v_ldexp_f64", em.v(2), [ay, Imm(s)], form="vop3") if s else ay
        q = em.valu("v_trunc_f64", em.v(2), [_fdiv64(em, ax, yk)], form="vop1")
        r = em.valu("v_fma_f64", em.v(2), [Neg(q), yk, ax], form="vop3")
        em.valu("v_cmp_gt_f64", em.vcc, [Imm.f64(0.0), r], form="vopc")  # q was 1 too big
        ax = cndmask64(em, r, em.valu("v_add_f64", em.v(2), [r, yk], form="vop3"))
    r = em.valu("v_cvt_f32_f64", em.v(), [ax], form="vop1")
    em.valu("v_cmp_class_f32", em.vcc, [b, Imm(CLASS_INF)], form="vopc")
    r = cndmask(em, r, a)
    em.valu("v_cmp_class_f32", em.vcc, [a, Imm(CLASS_INF)], form="vopc")
    r = cndmask(em, r, Imm(0x7FC00000))
    return em.valu("v_bfi_b32", em.v(), [Imm(0x7FFFFFFF), r, a], form="vop3")


def _fmod64_magnitude(em, ax, ay):
    """|a| mod |b| for float64, exact: as the NVIDIA backend, |b| is scaled up by 2**50 while
    it stays below |a| (a per-lane loop under EXEC), then |a| is reduced by each scale on
    the way down; every quotient is below 2**50, so trunc and the fma are exact. Lanes with
    |a| < |b|, or an inf/NaN/zero operand, keep |a| (the caller selects NaN or a)."""
    sfx = em.t.mask_suffix
    x = em.v(2)
    em.copy_into(x, ax)
    yk = em.v(2)
    em.copy_into(yk, ay)
    saved, go, more = em.mask_reg(), em.mask_reg(), em.mask_reg()
    em.emit(f"s_mov_{sfx}", [saved], [em.exec])
    fin = em.mask_reg()
    em.valu("v_cmp_le_f64", go, [ay, x], form="vop3")          # |b| <= |a|, neither NaN
    em.valu("v_cmp_gt_f64", fin, [Imm.f64(float("inf")), x], form="vop3")
    em.emit(f"s_and_{sfx}", [go], [go, fin])
    em.valu("v_cmp_lt_f64", fin, [Imm.f64(0.0), ay], form="vop3")
    em.emit(f"s_and_{sfx}", [go], [go, fin])
    em.emit(f"s_and_{sfx}", [em.exec], [em.exec, go])
    done = em.label("fmod_done")
    em.emit("s_cbranch_execz", kind="cbranch", target=done.name)
    up = em.label("fmod_up")
    em.place(up)
    t2 = em.valu("v_mul_f64", em.v(2), [yk, Imm.f64(2.0 ** 50)], form="vop3")
    em.valu("v_cmp_le_f64", more, [t2, x], form="vop3")
    em.emit(f"s_and_{sfx}", [em.exec], [em.exec, more])
    em.copy_into(yk, t2)  # only the lanes still scaling
    back = em.emit("s_cbranch_execnz", kind="cbranch", target=up.name)
    em.loops.append((up, back))
    em.emit(f"s_and_{sfx}", [em.exec], [saved, go])
    down = em.label("fmod_down")
    em.place(down)
    q = em.valu("v_trunc_f64", em.v(2), [_fdiv64(em, x, yk)], form="vop1")
    r = em.valu("v_fma_f64", em.v(2), [Neg(q), yk, x], form="vop3")
    em.valu("v_cmp_gt_f64", em.vcc, [Imm.f64(0.0), r], form="vopc")  # q was 1 too big
    em.copy_into(x, cndmask64(em, r, em.valu("v_add_f64", em.v(2), [r, yk], form="vop3")))
    last = em.mask_reg()
    em.valu("v_cmp_eq_f64", last, [yk, ay], form="vop3")
    em.copy_into(yk, em.valu("v_mul_f64", em.v(2), [yk, Imm.f64(2.0 ** -50)], form="vop3"))
    em.emit(f"s_andn2_{sfx}", [em.exec], [em.exec, last])
    back = em.emit("s_cbranch_execnz", kind="cbranch", target=down.name)
    em.loops.append((down, back))
    em.place(done)
    em.emit(f"s_mov_{sfx}", [em.exec], [saved])
    em.vcc_holds = None
    return x


def _fabs64(em, x):
    out = em.v(2)
    em.emit("v_mov_b32", [out[0]], [_half(x, 0)], kind="valu")
    em.valu("v_and_b32", out[1], [Imm(0x7FFFFFFF), _half(x, 1)], comm=True)
    return out


# -- float32 unary functions -----------------------------------------------------------------------

def funary32(em, name, x):
    fn = {"exp": exp32, "exp2": exp2_32, "log": lambda e, v: log32(e, v, natural=True),
          "log2": lambda e, v: log32(e, v, natural=False), "sqrt": sqrt32, "rsqrt": rsqrt32,
          "sin": lambda e, v: sincos32(e, v, "sin"), "cos": lambda e, v: sincos32(e, v, "cos"),
          "erf": erf32}.get(name)
    if fn is None:
        raise em.error(f"{name} is not defined on floats")
    return fn(em, x)


def exp32(em, x):
    """exp(x) = 2**(x*log2e) with x*log2e split in two (fma) so large |x| keeps its
    accuracy; ldexp by the rounded integer part keeps denormal results."""
    x = em.to_v(x)
    ph = em.valu("v_mul_f32", em.v(), [_bits(LOG2E), x])
    pl = em.valu("v_fma_f32", em.v(), [x, _bits(LOG2E), Neg(ph)], form="vop3")
    pl = em.valu("v_fma_f32", em.v(), [x, _bits(LOG2E_LO), pl], form="vop3")
    e = em.valu("v_rndne_f32", em.v(), [ph], form="vop1")
    a = em.valu("v_sub_f32", em.v(), [ph, e])
    a = em.valu("v_add_f32", em.v(), [a, pl])
    r = em.valu("v_exp_f32", em.v(), [a], form="vop1")
    ei = em.valu("v_cvt_i32_f32", em.v(), [e], form="vop1")
    r = em.valu("v_ldexp_f32", em.v(), [r, ei], form="vop3")
    em.valu("v_cmp_gt_f32", em.vcc, [_bits(EXP_UNDERFLOW), x], form="vopc")
    r = cndmask(em, r, Imm(0))
    em.valu("v_cmp_lt_f32", em.vcc, [_bits(EXP_OVERFLOW), x], form="vopc")
    return cndmask(em, r, _bits(0x7F800000))


def exp2_32(em, x):
    """v_exp_f32 flushes denormal results: shift small inputs up by 64 and scale back."""
    x = em.to_v(x)
    em.valu("v_cmp_gt_f32", em.vcc, [_f(-126.0), x], form="vopc")
    s = cndmask(em, Imm(0), _f(64.0))
    m = cndmask(em, _f(1.0), _f(2.0 ** -64))
    a = em.valu("v_add_f32", em.v(), [x, s])
    r = em.valu("v_exp_f32", em.v(), [a], form="vop1")
    return em.valu("v_mul_f32", em.v(), [r, m])


def log32(em, x, natural: bool):
    """v_log_f32 is log2 and flushes denormal inputs: scale them by 2**32 first."""
    x = em.to_v(x)
    em.valu("v_cmp_gt_f32", em.vcc, [_bits(0x00800000), x], form="vopc")
    sc = cndmask(em, _f(1.0), _f(2.0 ** 32))
    off = cndmask(em, Imm(0), _f(32.0))
    xs = em.valu("v_mul_f32", em.v(), [x, sc])
    l2 = em.valu("v_log_f32", em.v(), [xs], form="vop1")
    l2 = em.valu("v_sub_f32", em.v(), [l2, off])
    if not natural:
        return l2
    return em.valu("v_mul_f32", em.v(), [_bits(LN2), l2])


def sqrt32(em, x):
    """Correctly rounded: v_sqrt then test the neighbours with an fma residual."""
    x = em.to_v(x)
    em.valu("v_cmp_gt_f32", em.vcc, [_f(2.0 ** -96), x], form="vopc")
    scale = em.mask_reg()
    em.emit(f"s_mov_{em.t.mask_suffix}", [scale], [em.vcc])
    sc = cndmask(em, _f(1.0), _f(2.0 ** 32))
    xs = em.valu("v_mul_f32", em.v(), [x, sc])
    s = em.valu("v_sqrt_f32", em.v(), [xs], form="vop1")
    sd = em.valu("v_add_u32", em.v(), [Imm(-1), s])
    rd = em.valu("v_fma_f32", em.v(), [Neg(sd), s, xs], form="vop3")
    su = em.valu("v_add_u32", em.v(), [Imm(1), s])
    ru = em.valu("v_fma_f32", em.v(), [Neg(su), s, xs], form="vop3")
    em.valu("v_cmp_ge_f32", em.vcc, [Imm(0), rd], form="vopc")
    s = cndmask(em, s, sd)
    em.valu("v_cmp_lt_f32", em.vcc, [Imm(0), ru], form="vopc")
    s = cndmask(em, s, su)
    down = em.valu("v_mul_f32", em.v(), [_f(2.0 ** -16), s])
    s = em.valu("v_cndmask_b32", em.v(), [s, down, scale], form="vop3")
    em.valu("v_cmp_class_f32", em.vcc, [xs, Imm(CLASS_ZERO_PINF)], form="vopc")
    return cndmask(em, s, xs)


def rsqrt32(em, x):
    return em.valu("v_rsq_f32", em.v(), [x], form="vop1")


def sincos32(em, x, which):
    """v_sin/v_cos take revolutions: scale by 1/(2 pi) and keep the fraction."""
    t = em.valu("v_mul_f32", em.v(), [_f(1.0 / (2.0 * math.pi)), x], comm=True)
    t = em.valu("v_fract_f32", em.v(), [t], form="vop1")
    return em.valu(f"v_{which}_f32", em.v(), [t], form="vop1")


_ERF_TAYLOR = [2.0 / math.sqrt(math.pi) * (-1) ** k / (math.factorial(k) * (2 * k + 1))
               for k in range(7)]
_AS = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf32(em, x):
    """|x| < 0.5: Taylor series; else Abramowitz & Stegun 7.1.26 (abs error < 1.5e-7)."""
    x = em.to_v(x)
    ax = em.valu("v_and_b32", em.v(), [Imm(0x7FFFFFFF), x])
    x2 = em.valu("v_mul_f32", em.v(), [x, x])
    p = _f(_ERF_TAYLOR[-1])
    for c in reversed(_ERF_TAYLOR[:-1]):
        p = em.valu("v_fma_f32", em.v(), [p, x2, _f(c)], form="vop3")
    small = em.valu("v_mul_f32", em.v(), [p, x])
    den = em.valu("v_fma_f32", em.v(), [_f(0.3275911), ax, _f(1.0)], form="vop3")
    t = em.valu("v_rcp_f32", em.v(), [den], form="vop1")
    q = _f(_AS[-1])
    for c in reversed(_AS[:-1]):
        q = em.valu("v_fma_f32", em.v(), [q, t, _f(c)], form="vop3")
    q = em.valu("v_mul_f32", em.v(), [q, t])
    nx2 = em.valu("v_xor_b32", em.v(), [Imm(0x80000000), x2])
    e = exp32(em, nx2)
    y = em.valu("v_fma_f32", em.v(), [Neg(q), e, _f(1.0)], form="vop3")
    big = em.valu("v_bfi_b32", em.v(), [Imm(0x7FFFFFFF), y, x], form="vop3")
    em.valu("v_cmp_gt_f32", em.vcc, [_f(0.5), ax], form="vopc")
    return cndmask(em, big, small)


# -- float64 ---------------------------------------------------------------------------------------

def funary64(em, name, x):
    from .mir import hi, lo
    if name in ("neg", "abs"):
        r = em.v(2)
        em.emit("v_mov_b32", [r[0]], [lo(x)], kind="valu")
        if name == "neg":
            em.valu("v_xor_b32", r[1], [Imm(0x80000000), hi(x)], comm=True)
        else:
            em.valu("v_and_b32", r[1], [Imm(0x7FFFFFFF), hi(x)], comm=True)
        return r
    if name in ("floor", "ceil"):
        return em.valu(f"v_{name}_f64", em.v(2), [x], form="vop1")
    if name == "rsqrt":
        return em.valu("v_rsq_f64", em.v(2), [x], form="vop1")
    if name == "sqrt":
        return sqrt64(em, x)
    # exp, exp2, log, log2, sin, cos and erf never get here: compiler.lower expands them into
    # core ops first (gluon_trace.decompose), the same code the NVIDIA backend emits
    raise em.error(f"float64 {name} reached the AMD emitter unexpanded "
                   "(lower() expands it with gluon_trace.decompose.expand_math)")


def sqrt64(em, x):
    """rsq estimate refined with Goldschmidt steps (as LLVM); scaled for tiny inputs."""
    x = em.to_v(x)
    half = Imm.f64(0.5)
    em.valu("v_cmp_gt_f64", em.vcc, [em.to_v(Imm.f64(2.0 ** -767)), x], form="vopc")
    scale = em.mask_reg()
    em.emit(f"s_mov_{em.t.mask_suffix}", [scale], [em.vcc])
    k = cndmask(em, Imm(0), Imm(256))
    xs = em.valu("v_ldexp_f64", em.v(2), [x, k], form="vop3")
    y = em.valu("v_rsq_f64", em.v(2), [xs], form="vop1")
    s0 = em.valu("v_mul_f64", em.v(2), [xs, y], form="vop3")
    h0 = em.valu("v_mul_f64", em.v(2), [y, half], form="vop3")
    r0 = em.valu("v_fma_f64", em.v(2), [Neg(h0), s0, half], form="vop3")
    h1 = em.valu("v_fma_f64", em.v(2), [h0, r0, h0], form="vop3")
    s1 = em.valu("v_fma_f64", em.v(2), [s0, r0, s0], form="vop3")
    d0 = em.valu("v_fma_f64", em.v(2), [Neg(s1), s1, xs], form="vop3")
    s2 = em.valu("v_fma_f64", em.v(2), [d0, h1, s1], form="vop3")
    d1 = em.valu("v_fma_f64", em.v(2), [Neg(s2), s2, xs], form="vop3")
    r = em.valu("v_fma_f64", em.v(2), [d1, h1, s2], form="vop3")
    k2 = em.valu("v_cndmask_b32", em.v(), [Imm(0), Imm(-128), scale], form="vop3")
    r = em.valu("v_ldexp_f64", em.v(2), [r, k2], form="vop3")
    em.valu("v_cmp_class_f64", em.vcc, [xs, Imm(CLASS_ZERO_PINF)], form="vopc")
    return cndmask64(em, r, xs)


# -- integer division ---------------------------------------------------------------------------

def _udivrem(em, n, d):
    """32-bit unsigned n / d and n % d: float reciprocal, one Newton step, two fixups."""
    fd = em.valu("v_cvt_f32_u32", em.v(), [d], form="vop1")
    r = em.valu("v_rcp_iflag_f32", em.v(), [fd], form="vop1")
    r = em.valu("v_mul_f32", em.v(), [_bits(0x4F7FFFFE), r])
    z = em.valu("v_cvt_u32_f32", em.v(), [r], form="vop1")
    nd = em.valu("v_sub_u32", em.v(), [Imm(0), d])
    e = em.valu("v_mul_lo_u32", em.v(), [nd, z], form="vop3")
    e = em.valu("v_mul_hi_u32", em.v(), [z, e], form="vop3")
    z = em.valu("v_add_u32", em.v(), [z, e], comm=True)
    q = em.valu("v_mul_hi_u32", em.v(), [n, z], form="vop3")
    t = em.valu("v_mul_lo_u32", em.v(), [q, d], form="vop3")
    rem = em.valu("v_sub_u32", em.v(), [n, t], rev="v_subrev_u32")
    dv = em.to_v(d)
    for _ in range(2):
        em.valu("v_cmp_ge_u32", em.vcc, [rem, dv], form="vopc")
        q1 = em.valu("v_add_u32", em.v(), [Imm(1), q])
        r1 = em.valu("v_sub_u32", em.v(), [rem, dv])
        q = cndmask(em, q, q1)
        rem = cndmask(em, rem, r1)
    return q, rem


def idiv32(em, d, a, b, rem: bool):
    """C semantics: the quotient truncates toward zero, the remainder takes a's sign."""
    if not d.is_signed:
        q, r = _udivrem(em, a, b)
        return r if rem else q
    sa = em.valu("v_ashrrev_i32", em.v(), [Imm(31), em.to_v(a)])
    sb = em.valu("v_ashrrev_i32", em.v(), [Imm(31), em.to_v(b)])
    ua = em.valu("v_xor_b32", em.v(), [em.valu("v_add_u32", em.v(), [a, sa]), sa])
    ub = em.valu("v_xor_b32", em.v(), [em.valu("v_add_u32", em.v(), [b, sb]), sb])
    q, r = _udivrem(em, ua, ub)
    if rem:
        r = em.valu("v_xor_b32", em.v(), [r, sa])
        return em.valu("v_sub_u32", em.v(), [r, sa])
    s = em.valu("v_xor_b32", em.v(), [sa, sb])
    q = em.valu("v_xor_b32", em.v(), [q, s])
    return em.valu("v_sub_u32", em.v(), [q, s])


def idiv64(em, d, a, b, rem: bool):
    """64-bit quotient/remainder by binary long division: 64 rounds of shift, compare,
    subtract in a loop with a scalar counter (no 64-bit divide on the GPU; rare in
    kernels, so short code beats fast code)."""
    from . import arith
    from .mir import Sub
    signed = d.is_signed
    a, b = em.to_v(a), em.to_v(b)
    if signed:
        sa = em.valu("v_ashrrev_i32", em.v(), [Imm(31), Sub(a, 1)])
        sb = em.valu("v_ashrrev_i32", em.v(), [Imm(31), Sub(b, 1)])
        a = _abs64(em, a, sa)
        b = _abs64(em, b, sb)
    q, r, i = em.v(2), em.v(2), em.s()
    for reg in (q, r):
        em.emit("v_mov_b32", [reg[0]], [Imm(0)], kind="valu")
        em.emit("v_mov_b32", [reg[1]], [Imm(0)], kind="valu")
    em.emit("s_mov_b32", [i], [Imm(63)])
    head = em.label("div64")
    em.place(head)
    bit = em.valu("v_lshrrev_b64", em.v(2), [i, a], form="vop3")
    bit0 = em.valu("v_and_b32", em.v(), [Imm(1), Sub(bit, 0)])
    r2 = em.valu("v_lshlrev_b64", em.v(2), [Imm(1), r], form="vop3")
    lo = em.valu("v_or_b32", em.v(), [Sub(r2, 0), bit0])
    r3 = em.v(2)
    em.emit("v_mov_b32", [r3[0]], [lo], kind="valu")
    em.emit("v_mov_b32", [r3[1]], [Sub(r2, 1)], kind="valu")
    diff = arith.add64(em, r3, b, sub=True)
    em.valu("v_cmp_ge_u64", em.vcc, [r3, b], form="vopc")
    for k in range(2):
        em.valu("v_cndmask_b32", r[k], [Sub(r3, k), Sub(diff, k), em.vcc], implicit=1)
    qb = em.valu("v_cndmask_b32", em.v(), [Imm(0), Imm(1), em.vcc], implicit=1)
    q2 = em.valu("v_lshlrev_b64", em.v(2), [Imm(1), q], form="vop3")
    em.valu("v_or_b32", q[0], [Sub(q2, 0), qb])
    em.emit("v_mov_b32", [q[1]], [Sub(q2, 1)], kind="valu")
    em.salu("s_sub_u32", i, [i, Imm(1)])
    em.emit("s_cmp_ge_i32", [], [i, Imm(0)])
    back = em.emit("s_cbranch_scc1", kind="cbranch", target=head.name)
    em.loops.append((head, back))
    if not signed:
        return r if rem else q
    if rem:
        return _abs64(em, r, sa)  # (r ^ s) - s: the remainder takes a's sign
    s_ = em.valu("v_xor_b32", em.v(), [sa, sb])
    return _abs64(em, q, s_)


def _abs64(em, x, s):
    """(x ^ s) - s for a sign mask s (0 or -1 in each half): |x| or its negation."""
    from . import arith
    from .mir import Sub
    t = em.v(2)
    for k in range(2):
        em.valu("v_xor_b32", t[k], [Sub(x, k), s])
    m = em.v(2)
    em.emit("v_mov_b32", [m[0]], [s], kind="valu")
    em.emit("v_mov_b32", [m[1]], [s], kind="valu")
    return arith.add64(em, t, m, sub=True)

"""v_div_scale and v_div_fmas (f32/f64) for amdsim (test helper), the same on gfx90a, gfx942 and
gfx1100.

v_div_scale_{f32,f64} D, vcc, S0, S1 = denominator, S2 = numerator (S0 is S1 or S2) follows
the ISA's decision chain (RDNA3 and CDNA3 ISA guides, V_DIV_SCALE_F32/F64), its tests taken on
the operands' biased exponents (a gap is numerator's minus denominator's) as AMD's own RDNA4
instruction model takes them ("pre-scaling decisions adapted from rocjitsu shared/division.h");
K is 2**64 for f32 and 2**128 for f64, G is 96 for f32 and 768 for f64:

1. a zero numerator or denominator: NaN (v_div_fixup makes the answer), no flag;
2. the quotient near the largest float (gap >= G): the denominator times K, flag;
3. a subnormal denominator: both times K;
4. a denominator whose reciprocal is subnormal (exponent >= 2*bias - 1): both times 1/K, unless
   the quotient is subnormal too (gap <= -G): then the denominator alone times 1/K and the
   flag. The guides print ldexp(S0, +64) for that last case, which would overflow the
   denominator (>= 2**126) to infinity and turn x / FLT_MAX with a subnormal quotient into
   NaN in the sequence LLVM emits for every IEEE division, so we read it as 1/K, as AMD's
   model has it;
5. a subnormal quotient (gap <= -G): the numerator alone times K, flag;
6. a tiny numerator (exponent <= fraction bits + 1): both times K.

v_div_fmas D, S0, S1, S2 is fma(S0, S1, S2), and where VCC is set the exact fma times K when
S2 (the scaled quotient) has a biased exponent above the bias, times 1/K otherwise, rounded
once. The guides print a fixed 2**32 (f32) / 2**64 (f64) there, which undoes neither K: a
flagged v_div_scale leaves the scaled quotient K times too small (case 2, quotient huge) or K
times too large (cases 4 and 5, quotient tiny), and S2's exponent tells them apart (AMD's model: "+64/+128 when C's encoded
exponent exceeds its bias, and -64/-128 otherwise"). The one rounding matters: a subnormal
quotient is rounded only after the scale.

Without this (both instructions were identity and a plain fma), the Newton steps ran on a
subnormal reciprocal and x / +-FLT_MAX, x / +-DBL_MAX came out 1 ulp off.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from gluon_trace import dtypes
from gluon_trace.backends.interpreter.interpreter import fma as _fma


class _Fmt:
    def __init__(self, wide: bool):
        self.wide = wide
        self.frac, self.bias, self.gap, self.k = (52, 1023, 768, 128) if wide else (23, 127, 96, 64)
        self.emask = np.uint64(0x7FF if wide else 0xFF)
        self.mag = np.uint64((1 << 63) - 1 if wide else (1 << 31) - 1)
        self.nan = np.uint64(0xFFF8000000000000 if wide else 0xFFC00000)
        self.np = np.float64 if wide else np.float32
        self.ubits = np.uint64 if wide else np.uint32

    def exponent(self, bits):
        return ((bits >> np.uint64(self.frac)) & self.emask).astype(np.int64)

    def value(self, bits):
        return bits.astype(self.ubits).view(self.np)

    def bits(self, x):
        return np.asarray(x, self.np).view(self.ubits).astype(np.uint64)


def div_scale(a, b, c, wide: bool):
    """(D bits, flag lanes) from S0, S1, S2 bits (modifiers applied)."""
    f = _Fmt(wide)
    de, ne = f.exponent(b), f.exponent(c)
    gap = ne - de
    is_den = a == b
    k = f.k
    huge_q, sub_d, sub_rcp = gap >= f.gap, de == 0, de >= 2 * f.bias - 1
    tiny_q, tiny_n = gap <= -f.gap, ne <= f.frac + 1
    adj = np.select(
        [huge_q, sub_d, sub_rcp, tiny_q, tiny_n],
        [np.where(is_den, k, 0), k, np.where(tiny_q & ~is_den, 0, -k), np.where(is_den, 0, k), k], 0)
    flag = np.select([huge_q, sub_d, sub_rcp, tiny_q], [True, False, tiny_q, True], False)
    zero = ((b & f.mag) == 0) | ((c & f.mag) == 0)
    with np.errstate(all="ignore"):
        # exact in float64 for an f32 S0; np.ldexp rounds an f64 once (an f32 one cannot go subnormal)
        scaled = np.ldexp(f.value(a).astype(np.float64), adj.astype(np.int32))
    d = np.where(zero, f.nan, f.bits(scaled))
    return d, flag & ~zero


def div_fmas(a, b, c, vcc, wide: bool):
    """D bits from S0, S1, S2 bits (modifiers applied) and the per-lane VCC bits."""
    f = _Fmt(wide)
    x, y, z = f.value(a), f.value(b), f.value(c)
    t = dtypes.float64 if wide else dtypes.float32
    out = np.asarray(_fma(x, y, z, t), f.np).copy()
    up = f.exponent(c) > f.bias
    with np.errstate(all="ignore"):
        for i in np.nonzero(vcc & np.isfinite(x) & np.isfinite(y) & np.isfinite(z))[0]:
            exact = Fraction(float(x[i])) * Fraction(float(y[i])) + Fraction(float(z[i]))
            out[i] = _round(exact * Fraction(2) ** (f.k if up[i] else -f.k), f)
        odd = vcc & ~(np.isfinite(x) & np.isfinite(y) & np.isfinite(z))
        out[odd] = out[odd] * f.np(2.0) ** np.where(up[odd], f.k, -f.k).astype(f.np)
    return f.bits(out)


def _round(q: Fraction, f: _Fmt) -> float:
    """q rounded to nearest even in f's format, subnormals included."""
    if q == 0:
        return 0.0
    if f.wide:
        try:
            return float(q)  # CPython's int / int rounds correctly, subnormals included
        except OverflowError:
            return float("inf") if q > 0 else float("-inf")
    # float32: the quantum of q's binade (or the subnormal one), then ties-to-even on integers
    mag = abs(q)
    e = mag.numerator.bit_length() - mag.denominator.bit_length()  # floor(log2 mag) or one more
    if Fraction(2) ** e > mag:
        e -= 1
    e = max(e, -126)
    quantum = Fraction(2) ** (e - 23)
    n, r = divmod(mag, quantum)
    if r * 2 > quantum or (r * 2 == quantum and n % 2):
        n += 1
    v = float(n * quantum)
    if v > float(np.finfo(np.float32).max):
        v = float("inf")
    return -v if q < 0 else v

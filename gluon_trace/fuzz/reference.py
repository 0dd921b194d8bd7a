"""The numpy meaning of a random program, computed from its description (never from IR).

Semantics are those the interpreter's docstring (backends/interpreter/interpreter.py) and
gluon_trace/dtypes.py document, restated here:

- integers wrap; ``//`` and ``%`` truncate toward zero (``%`` takes the dividend's sign);
  ``x // 0`` has all bits set and ``x % 0`` is x; float ``%`` is ``fmod`` and float ``//`` is
  ``floor(a / b)`` (the division rounded in the operands' type);
- int1 ``+ - * // % << >>``, ``-x`` and ``abs`` compute in int32 (as Python's bool);
- shifts by a negative amount or by the width or more give 0 (``<<``, unsigned ``>>``) or
  the sign (signed ``>>``);
- float16 rounds after every op; bfloat16 is kept in float32 and rounded (to nearest even)
  after every op; ``fma`` rounds once;
- ``maximum``/``minimum`` return the non-NaN operand; comparisons are IEEE (``!=`` is true
  for NaN);
- float -> int truncates toward zero and saturates (NaN gives 0), as ``cvt.rzi.sat``;
  int -> float and float -> float round to nearest even; -> int1 is ``!= 0``;
- math functions are numpy's in the operand's dtype (bfloat16 computes them in float32),
  ``rsqrt(x)`` is ``1 / sqrt(x)`` there and ``erf`` is computed in float64;
- reductions combine adjacent pairs in a tree, in operand order; ``argmax``/``argmin``
  combine (value, index) pairs keeping the first index of equal values.

Each value carries an error bound ``err`` beside it (0: exact; inf: unknown, not compared).
Where the order of a float computation is not defined (a scan; any float reduction in
``bounded`` mode, which is how a GPU is checked), the reference picks one order and bounds
how far another order can land: ``2 (n - 1) u sum|x|`` for a sum of n terms in a type of
unit roundoff u. Bounds then propagate through later ops; an op whose result a bound cannot
decide (a comparison of overlapping intervals, a floor, an int conversion across an integer)
gives unknown elements, which are skipped in the comparison.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .ops import _BITS, is_bool, is_float, literal_dtype, promote
from .program import Program

_NP = {"int1": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
       "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
       "float16": np.float16, "bfloat16": np.float32, "float32": np.float32, "float64": np.float64}
UNIT_ROUNDOFF = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": 2.0 ** -24,
                 "float64": 2.0 ** -53}
_TINY = {"float16": 2.0 ** -24, "bfloat16": 2.0 ** -133, "float32": 2.0 ** -149, "float64": 5e-324}
FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38,
             "float32": float(np.finfo(np.float32).max), "float64": float(np.finfo(np.float64).max)}
# How far a GPU's math instruction may land from numpy's, in units of u|x| (bounded mode):
# the approximate ex2/lg2/sin/cos/rsqrt/sqrt the backends emit are within a few ulp.
MATH_ULPS = 8


def math_error(fn: str, x, v, t: str):
    """What a float32 math instruction may add to MATH_ULPS ulps of the result ``v`` for
    an exact operand ``x`` (bounded mode), from the instructions' documented accuracy:

    - ``exp`` is ``ex2(x * log2(e))`` in float32 (NVIDIA's ex2.approx, AMD's v_exp_f32):
      log2(e) and the product are each rounded (2**-24 relative), an argument off by
      |x log2 e| 2**-23 makes 2**arg off by ln 2 times that, relative: |x| 2**-23 of |v|
      (CUDA documents __expf as 2 + 1.17|x| ulp, the same growth), plus ex2's own 2 ulp.
      At x = -85 that is 85 ulp, past any fixed ulp count: the H100 fuzz run saw 9.
    - ``log``/``log2`` (lg2.approx, v_log_f32) are accurate in absolute terms near
      x = 1, where the result goes to 0: 2**-22 absolute (PTX documents 2**-22.6 for
      lg2.approx.f32 on [0.5, 2]), plus 2 ulp relative elsewhere; log multiplies by
      ln 2 < 1 after, which keeps the bound.
    - exp2, rsqrt, sin, cos: within MATH_ULPS (sin/cos get their own absolute term in
      evaluate._unary). No instruction flushes subnormals: NVIDIA's exp/exp2 use
      ex2.approx.f32 without .ftz, AMD's scale around v_exp/v_log's flushing.

    float64 math is decomposed into core ops on both backends (within MATH_ULPS); float16
    and bfloat16 compute in float32 and round, so the float32 terms hold for them too."""
    if t == "float64":
        return 0.0
    x = np.abs(np.asarray(x, np.float64))
    av = np.abs(np.asarray(v, np.float64))
    if fn == "exp":
        return (2.0 ** -22 + x * 2.0 ** -23) * av
    if fn in ("exp2", "rsqrt", "sin", "cos"):
        return 2.0 ** -22 * av
    if fn in ("log", "log2"):
        return 2.0 ** -22 + 2.0 ** -22 * av
    return 0.0


def np_dtype(d: str):
    return np.dtype(_NP[d])


def round_bf16(x) -> np.ndarray:
    """float32/float64 values to the nearest bfloat16 (ties to even), held in float32."""
    x = np.asarray(x, np.float64)
    m, e = np.frexp(x)                         # x = m * 2**e, 0.5 <= |m| < 1
    q = np.maximum(e - 8, -133).astype(np.float64)  # spacing of bf16 near x (subnormals: 2**-133)
    r = np.rint(np.ldexp(x, (-q).astype(np.int64))) * np.exp2(q)
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.where(np.abs(r) > FLOAT_MAX["bfloat16"], np.copysign(np.inf, x), r)
        r = np.where(np.isfinite(x), r, x)
    return r.astype(np.float32)


def fix(x, d: str) -> np.ndarray:
    """A computed array back into dtype ``d``'s value set (bf16 rounded, others cast)."""
    x = np.asarray(x)
    if d == "bfloat16":
        return round_bf16(x)
    return x.astype(_NP[d])


def cast(x: np.ndarray, src: str, to: str) -> np.ndarray:
    x = np.asarray(x)
    if to == "int1":
        return x != 0
    if is_float(src) and not is_float(to):
        lo, hi = (0, 2 ** _BITS[to] - 1) if to.startswith("uint") else \
            (-2 ** (_BITS[to] - 1), 2 ** (_BITS[to] - 1) - 1)
        t = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf))
        out = np.clip(t, float(lo), float(hi))
        res = np.empty(x.shape, _NP[to])
        flat, src_flat = res.reshape(-1), out.reshape(-1)
        for i, v in enumerate(src_flat):  # float(hi) may round up past hi: saturate exactly
            flat[i] = hi if v >= hi else lo if v <= lo else int(v)
        return res
    if is_bool(src):
        x = x.astype(np.uint8)
    if to == "bfloat16":
        return round_bf16(x.astype(np.float64) if x.dtype.kind in "iu" else x)
    with np.errstate(all="ignore"):
        return x.astype(_NP[to])


def _trunc_div(a, b):
    safe = np.where(b == 0, np.ones((), b.dtype), b)
    q = np.floor_divide(a, safe)
    if a.dtype.kind == "i":
        q = q + ((np.remainder(a, safe) != 0) & ((a < 0) != (safe < 0))).astype(q.dtype)
    return np.where(b == 0, np.array(-1).astype(a.dtype), q)


def _shift(fn, a, b, t: str):
    bits = _BITS[t]
    big = (b < 0) | (b >= bits) if np.asarray(b).dtype.kind == "i" else (b >= bits)
    amt = np.where(big, 0, b).astype(a.dtype)
    if fn == "shl":
        return np.where(big, 0, np.left_shift(a, amt)).astype(a.dtype)
    fill = np.right_shift(a, bits - 1) if t.startswith("int") else np.zeros_like(a)
    return np.where(big, fill, np.right_shift(a, amt)).astype(a.dtype)


_ARITH = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
          "floordiv": _trunc_div, "and": np.bitwise_and, "or": np.bitwise_or,
          "xor": np.bitwise_xor, "lt": np.less, "le": np.less_equal, "gt": np.greater,
          "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal}


def binary(fn: str, a, b, t: str) -> np.ndarray:
    """``a fn b`` with both already in the promoted type ``t``."""
    with np.errstate(all="ignore"):
        if fn in ("shl", "shr"):
            return _shift(fn, a, b, t)
        if fn == "maximum":
            out = np.fmax(a, b) if is_float(t) else np.maximum(a, b)
        elif fn == "minimum":
            out = np.fmin(a, b) if is_float(t) else np.minimum(a, b)
        elif fn == "floordiv" and is_float(t):  # floor of the quotient rounded in t
            out = np.floor(fix(np.true_divide(a, b), t))
        elif fn == "mod":
            out = np.fmod(a, b) if np.asarray(a).dtype.kind == "f" else \
                np.where(b == 0, a, np.fmod(a, np.where(b == 0, np.ones((), np.asarray(b).dtype), b)))
        else:
            out = _ARITH[fn](a, b)
    return out if fn in ("lt", "le", "gt", "ge", "eq", "ne") else fix(out, t)


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(np.asarray(x, np.float64))


_MATH = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sqrt": np.sqrt,
         "rsqrt": lambda x: 1.0 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "floor": np.floor,
         "ceil": np.ceil}


def unary(fn: str, a, t: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        if fn == "neg":
            return fix(np.negative(a), t)
        if fn == "abs":
            return fix(np.abs(a), t)
        if fn == "not":
            return np.logical_not(a) if t == "int1" else np.invert(a)
        if fn == "erf":
            return fix(_erf(a), t)
        return fix(_MATH[fn](a), t)


def _to_exact(x) -> Fraction:
    return Fraction(float(x))


def _round_fraction(s: Fraction, t: str, approx: float):
    """The value of dtype ``t`` nearest ``s`` (ties to even), given ``approx``, the float64
    nearest ``s`` (rounding it to ``t`` can be one step off: double rounding)."""
    c = fix(np.array(approx), t).astype(np.float64)
    if not np.isfinite(c):
        return c
    best = None
    for cand in _neighbours(float(c), t):
        if not math.isfinite(cand):
            continue
        d = abs(Fraction(cand) - s)
        key = (d, _odd(cand, t))
        if best is None or key < best[0]:
            best = (key, cand)
    return best[1]


def _neighbours(c: float, t: str):
    if t == "bfloat16":
        bits = int(np.array(c, np.float32).view(np.uint32))
        out = [c]
        for step in (-0x10000, 0x10000):
            nb = (bits + step) & 0xFFFFFFFF
            out.append(float(np.array(nb, np.uint32).view(np.float32)))
        return out
    ty = _NP[t]
    cc = ty(c)
    return [c, float(np.nextafter(cc, ty(-np.inf))), float(np.nextafter(cc, ty(np.inf)))]


def _odd(v: float, t: str) -> bool:
    if t == "bfloat16":
        return bool(int(np.array(v, np.float32).view(np.uint32)) >> 16 & 1)
    raw = np.array(v, _NP[t]).view({2: np.uint16, 4: np.uint32, 8: np.uint64}[np_dtype(t).itemsize])
    return bool(int(raw) & 1)


def fma(a, b, c, t: str) -> np.ndarray:
    """a * b + c with one rounding: exact rationals, then the nearest value of ``t``."""
    a, b, c = (np.asarray(v, np.float64) for v in (a, b, c))
    a, b, c = np.broadcast_arrays(a, b, c)
    with np.errstate(all="ignore"):
        approx = a * b + c
    out = np.empty(a.shape, np.float64)
    for i in np.ndindex(a.shape):
        if not (np.isfinite(a[i]) and np.isfinite(b[i])):
            out[i] = approx[i]  # an inf or NaN factor: the product is inf or NaN exactly
            continue
        if not np.isfinite(c[i]):
            out[i] = c[i]  # a finite product never overflows inside fma: c decides
            continue
        s = _to_exact(a[i]) * _to_exact(b[i]) + _to_exact(c[i])
        if s == 0:
            out[i] = approx[i]  # the sign of an exact zero, as IEEE's a*b+c gives it
            continue
        try:
            near = float(s)  # the nearest float64: the nearest value of t is it or a neighbour
        except OverflowError:
            out[i] = math.inf if s > 0 else -math.inf
            continue
        out[i] = _round_fraction(s, t, near)
    return fix(out, t)

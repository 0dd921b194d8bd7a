"""Inputs, references and ulp distances for the float64 math expansions of
gluon_trace.decompose, shared by tests/test_decompose.py and the backend tests."""
from __future__ import annotations

import math

import numpy as np

from gluon_trace import decompose

OPS = ("exp", "exp2", "log", "log2", "sin", "cos", "erf")
# the promise, in ulp of the float64 result, against numpy (math.erf for erf)
BOUND = {"exp": 2, "exp2": 2, "log": 2, "log2": 2, "sin": 2, "cos": 2, "erf": 4}

_erf = np.vectorize(math.erf, otypes=[np.float64])
_NP = {"exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "sin": np.sin, "cos": np.cos}

TINY = 5e-324               # the smallest subnormal
MIN_NORMAL = 2.2250738585072014e-308
MAX = 1.7976931348623157e308


def reference(op: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _erf(x) if op == "erf" else _NP[op](x)


def _ordered(a: np.ndarray) -> np.ndarray:
    i = np.asarray(a, np.float64).view(np.int64)
    return np.where(i < 0, np.int64(-2**63) - i, i)  # monotone in the float order; -0 == +0


def ulps(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """How many doubles lie between got and ref (0 when equal or both NaN; huge when one
    is NaN)."""
    d = np.abs(_ordered(got) - _ordered(ref))
    d = np.where(np.isnan(got) & np.isnan(ref), 0, d)
    return np.where(np.isnan(got) != np.isnan(ref), np.int64(2**62), d)


def log_uniform(rng, n: int, lo_exp: int, hi_exp: int, signed: bool = True) -> np.ndarray:
    """Doubles with exponents uniform in [lo_exp, hi_exp] and random mantissas
    (lo_exp < -1022 reaches the subnormals)."""
    x = np.ldexp(rng.uniform(1.0, 2.0, n), rng.integers(lo_exp, hi_exp + 1, n))
    return x * rng.choice([-1.0, 1.0], n) if signed else x


def _near(rng, xs, n: int, spread: int = 4) -> np.ndarray:
    """n doubles within ``spread`` ulp of points in xs."""
    x = np.asarray(xs, np.float64)[rng.integers(0, len(xs), n)]
    steps = rng.integers(-spread, spread + 1, n)
    with np.errstate(all="ignore"):
        for j in range(spread):
            x = np.where(steps > j, np.nextafter(x, np.inf), x)
            x = np.where(steps < -j, np.nextafter(x, -np.inf), x)
    return x


def inputs(op: str, rng, n: int) -> np.ndarray:
    """Fresh inputs for ``op``: the whole exponent range with both signs, the interesting
    region densely, the edges (overflow, underflow, subnormal results, multiples of pi/2,
    the erf piece boundaries) and the special values."""
    q = n // 4
    parts = [log_uniform(rng, q, -1074, 1023)]
    if op == "exp":
        parts += [rng.uniform(-746, 710, q), rng.uniform(-745.2, -708, q // 2),
                  _near(rng, [709.782712893384, -745.1332191019411, -708.3964185322641,
                              -744.44007192138126], q // 8), rng.uniform(-1, 1, q // 4)]
    elif op == "exp2":
        parts += [rng.uniform(-1080, 1030, q), rng.uniform(-1075, -1020, q // 2),
                  _near(rng, [1024.0, -1074.0, -1075.0, -1022.0, 1023.0], q // 8),
                  rng.uniform(-1, 1, q // 4)]
    elif op in ("log", "log2"):
        parts[0] = np.abs(parts[0])
        parts += [rng.uniform(0.5, 2.0, q), 1.0 + log_uniform(rng, q // 2, -60, -1),
                  log_uniform(rng, q // 2, -1074, -1023, signed=False),
                  _near(rng, [1.0, 2.0, 0.5, MIN_NORMAL, MAX, TINY * 8, 0.7071067811865476,
                              1.4142135623730951], q // 8), -log_uniform(rng, q // 8, -10, 10, False)]
    elif op in ("sin", "cos"):
        k = np.ldexp(rng.uniform(1, 2, q), rng.integers(0, 60, q)).round() * rng.choice([-1, 1], q)
        parts += [rng.uniform(-10, 10, q), _near(rng, k * (math.pi / 2), q, 3),
                  log_uniform(rng, q // 2, -40, 2),
                  rng.uniform(-decompose.SINCOS_BIG * 2, decompose.SINCOS_BIG * 2, q // 2)]
    else:
        parts += [rng.uniform(-7, 7, q), log_uniform(rng, q // 2, -40, 3),
                  _near(rng, [0.84375, 1.25, 2.25, 6.0, -0.84375, -1.25, -2.25, -6.0, 5.9], q // 4)]
    specials = [0.0, -0.0, math.inf, -math.inf, math.nan, TINY, -TINY, MIN_NORMAL, MAX, -MAX, 1.0, -1.0]
    x = np.concatenate(parts + [np.array(specials)])
    return x[rng.permutation(x.size)]


# exact results every expansion must give
SPECIALS = {
    "exp": [(0.0, 1.0), (-0.0, 1.0), (math.inf, math.inf), (-math.inf, 0.0), (math.nan, math.nan),
            (710.0, math.inf), (MAX, math.inf), (-746.0, 0.0), (-MAX, 0.0), (TINY, 1.0)],
    "exp2": [(0.0, 1.0), (math.inf, math.inf), (-math.inf, 0.0), (math.nan, math.nan), (1.0, 2.0),
             (10.0, 1024.0), (-1074.0, TINY), (-1022.0, MIN_NORMAL), (1024.0, math.inf),
             (-1076.0, 0.0), (-3.0, 0.125), (1023.0, 2.0 ** 1023)],
    "log": [(1.0, 0.0), (0.0, -math.inf), (-0.0, -math.inf), (-1.0, math.nan), (-math.inf, math.nan),
            (math.inf, math.inf), (math.nan, math.nan), (-TINY, math.nan)],
    "log2": [(1.0, 0.0), (2.0, 1.0), (0.5, -1.0), (1024.0, 10.0), (TINY, -1074.0),
             (MIN_NORMAL, -1022.0), (2.0 ** 1023, 1023.0), (0.0, -math.inf), (-2.0, math.nan),
             (math.inf, math.inf), (math.nan, math.nan)],
    "sin": [(0.0, 0.0), (-0.0, -0.0), (math.inf, math.nan), (-math.inf, math.nan), (math.nan, math.nan),
            (TINY, TINY), (-TINY, -TINY), (1e-300, 1e-300), (-2.0 ** -30, -2.0 ** -30)],
    "cos": [(0.0, 1.0), (-0.0, 1.0), (math.inf, math.nan), (-math.inf, math.nan), (math.nan, math.nan),
            (TINY, 1.0), (1e-10, 1.0)],
    "erf": [(0.0, 0.0), (-0.0, -0.0), (math.inf, 1.0), (-math.inf, -1.0), (math.nan, math.nan),
            (6.0, 1.0), (-6.0, -1.0), (MAX, 1.0), (-MAX, -1.0), (TINY, TINY), (-TINY, -TINY)],
}

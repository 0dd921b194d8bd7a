"""The two 8-bit float formats of NVIDIA's tensor cores, exactly, without extra packages.

``float8e4nv`` is OCP E4M3 ("fn": no infinities, one NaN pattern per sign, max 448) and
``float8e5`` is E5M2 (IEEE-like, max 57344). Conversions into them round to nearest, ties to
even, and saturate out-of-range values (infinities included) to the largest finite value with
their sign, as PTX ``cvt.rn.satfinite.{e4m3,e5m2}x2`` does; NaN stays NaN. Values are kept as
float32 arrays (every fp8 value is one) and stored as their bits.
"""
from __future__ import annotations

import functools

import numpy as np

# name -> (mantissa bits, exponent bias, max finite, has infinities)
FORMATS = {"float8e4nv": (3, 7, 448.0, False), "float8e5": (2, 15, 57344.0, True)}


def round_to(x, name: str) -> np.ndarray:
    """float32 values rounded to the nearest ``name`` value (saturating)."""
    mant, bias, top, _ = FORMATS[name]
    x = np.asarray(x, dtype=np.float64)
    nan = np.isnan(x)
    a = np.minimum(np.abs(np.where(nan, 0.0, x)), top)
    _, e = np.frexp(a)                     # a = m * 2**e with m in [0.5, 1)
    e = np.maximum(e - 1, 1 - bias)        # the exponent of a's binade (subnormals share the lowest)
    ulp = np.ldexp(1.0, e - mant)
    r = np.minimum(np.rint(a / ulp) * ulp, top)   # rint: ties to even
    out = np.copysign(r, x).astype(np.float32)
    return np.where(nan, np.float32(np.nan), out)


@functools.lru_cache(maxsize=None)
def _table(name: str) -> np.ndarray:
    """float32 value of each of the 256 bit patterns."""
    mant, bias, _, inf = FORMATS[name]
    out = np.zeros(256, np.float32)
    emax = (1 << (7 - mant)) - 1
    for b in range(256):
        s, e, m = b >> 7, (b >> mant) & emax, b & ((1 << mant) - 1)
        if inf and e == emax:
            v = np.inf if m == 0 else np.nan
        elif not inf and e == emax and m == (1 << mant) - 1:
            v = np.nan
        elif e == 0:
            v = m * 2.0 ** (1 - bias - mant)
        else:
            v = (1 + m / (1 << mant)) * 2.0 ** (e - bias)
        out[b] = -v if s else v
    return out


def decode(bits, name: str) -> np.ndarray:
    return _table(name)[np.asarray(bits, dtype=np.uint8)]


def encode(x, name: str) -> np.ndarray:
    """Bits of ``round_to(x)``: looked up among the format's non-negative values."""
    r = round_to(x, name)
    table = _table(name)[:128]
    finite = np.isfinite(table)
    values, codes = table[finite], np.nonzero(finite)[0].astype(np.uint8)
    order = np.argsort(values)
    mag = np.abs(np.where(np.isnan(r), 0, r))
    code = codes[order][np.searchsorted(values[order], mag)]
    nan_code = np.uint8(0x7F if not FORMATS[name][3] else 0x7E)
    code = np.where(np.isnan(r), nan_code, code)
    return (code | np.where(np.signbit(r), np.uint8(0x80), np.uint8(0))).astype(np.uint8)

"""The 8-bit float formats of the tensor cores, exactly, without extra packages.

NVIDIA (OCP formats): ``float8e4nv`` is E4M3 ("fn": no infinities, one NaN pattern per sign, max
448) and ``float8e5`` is E5M2 (IEEE-like, max 57344). Conversions into them round to nearest,
ties to even, and saturate out-of-range values (infinities included) to the largest finite value
with their sign, as PTX ``cvt.rn.satfinite.{e4m3,e5m2}x2`` does; NaN stays NaN.

AMD CDNA3 (gfx942, the "FNUZ" formats): ``float8e4b8`` is E4M3 with bias 8 (max 240) and
``float8e5b16`` is E5M2 with bias 16 (max 57344). Neither has infinities or a negative zero:
0x80 is the only NaN. Conversions into them round to nearest, ties to even, as gfx942's
``v_cvt_pk_fp8_f32`` / ``v_cvt_pk_bf8_f32`` do without their clamp: a value whose rounded
magnitude exceeds the maximum (infinities included) becomes NaN, not the maximum (AMD's own
libraries clamp in f32 with v_med3_f32 before converting when they want saturation; write
``gl.clamp(x, -240.0, 240.0)`` for that). A negative value that rounds to zero is +0. This is
also what ml_dtypes' float8_e4m3fnuz / float8_e5m2fnuz casts do.

Values are kept as float32 arrays (every fp8 value is one) and stored as their bits.
"""
from __future__ import annotations

import functools

import numpy as np

# name -> (mantissa bits, exponent bias, max finite, encoding family)
#   "fn":   no infinities, S.1111.111 is NaN (OCP E4M3)
#   "ieee": the top exponent holds infinities and NaNs (OCP E5M2)
#   "fnuz": no infinities, no -0; 0x80 is the only NaN (AMD/Graphcore formats)
FORMATS = {"float8e4nv": (3, 7, 448.0, "fn"), "float8e5": (2, 15, 57344.0, "ieee"),
           "float8e4b8": (3, 8, 240.0, "fnuz"), "float8e5b16": (2, 16, 57344.0, "fnuz")}
NAN_CODE = {"fn": 0x7F, "ieee": 0x7E, "fnuz": 0x80}
# the targets whose instructions take each format (the MMAs, the conversions)
FAMILY_TARGETS = {"float8e4nv": "NVIDIA (sm_89+)", "float8e5": "NVIDIA (sm_89+)",
                  "float8e4b8": "AMD gfx942", "float8e5b16": "AMD gfx942"}
AMD_NAME = {"float8e4nv": "float8e4b8", "float8e5": "float8e5b16"}
NVIDIA_NAME = {v: k for k, v in AMD_NAME.items()}


def is_fnuz(name: str) -> bool:
    return FORMATS[name][3] == "fnuz"


def round_to(x, name: str) -> np.ndarray:
    """float32 values rounded to the nearest ``name`` value (overflow as the module says)."""
    mant, bias, top, fam = FORMATS[name]
    x = np.asarray(x, dtype=np.float64)
    nan = np.isnan(x)
    a = np.abs(np.where(nan, 0.0, x))
    big = np.isinf(a)
    a = np.where(big, 0.0, a)
    _, e = np.frexp(a)                     # a = m * 2**e with m in [0.5, 1)
    e = np.maximum(e - 1, 1 - bias)        # the exponent of a's binade (subnormals share the lowest)
    ulp = np.ldexp(1.0, e - mant)
    r = np.rint(a / ulp) * ulp             # rint: ties to even; may round past the top
    if fam == "fnuz":
        nan = nan | big | (r > top)
        out = np.where(x < 0, -r, r).astype(np.float32) + np.float32(0)  # -0 -> +0
    else:
        r = np.where(big, top, np.minimum(r, top))
        out = np.copysign(r, x).astype(np.float32)
    return np.where(nan, np.float32(np.nan), out)


@functools.lru_cache(maxsize=None)
def _table(name: str) -> np.ndarray:
    """float32 value of each of the 256 bit patterns."""
    mant, bias, _, fam = FORMATS[name]
    out = np.zeros(256, np.float32)
    emax = (1 << (7 - mant)) - 1
    for b in range(256):
        s, e, m = b >> 7, (b >> mant) & emax, b & ((1 << mant) - 1)
        if fam == "fnuz" and b == 0x80:
            out[b] = np.nan    # its sign bit is what makes it NaN: read as a positive NaN
            continue
        elif fam == "ieee" and e == emax:
            v = np.inf if m == 0 else np.nan
        elif fam == "fn" and e == emax and m == (1 << mant) - 1:
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
    fam = FORMATS[name][3]
    code = np.where(np.isnan(r), np.uint8(NAN_CODE[fam]), code)
    sign = np.signbit(r) & ~np.isnan(r) if fam == "fnuz" else np.signbit(r)
    return (code | np.where(sign, np.uint8(0x80), np.uint8(0))).astype(np.uint8)

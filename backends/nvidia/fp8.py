"""fp8 (``float8e4nv`` = E4M3, ``float8e5`` = E5M2) on NVIDIA.

An fp8 value lives in an f32 register as the float32 of its value (every fp8 value is one),
as float16/bfloat16 do: memory holds its byte. Decoding widens the byte through
``cvt.rn.f16x2.e4m3x2`` (exact); encoding is ``cvt.rn.satfinite.e4m3x2.f32``: round to nearest
even, out-of-range values (infinities too) saturated to the largest finite value, NaN kept, the
rule gluon_trace.fp8 gives the interpreter. Both instructions need sm_89.
"""
from __future__ import annotations

from gluon_trace import dtypes as dt

PTX_NAME = {"float8e4nv": "e4m3", "float8e5": "e5m2"}
MIN_SM = 89


def decode(em, t: dt.dtype, byte: str) -> str:
    """The f32 value of the fp8 byte in the low 8 bits of b32 register ``byte`` (upper bits 0)."""
    h = em.ins("b16", f"cvt.u16.u32 {{d}}, {byte};")
    w = em.ins("b32", f"cvt.rn.f16x2.{PTX_NAME[t.name]}x2 {{d}}, {h};")
    lo, hi = em.reg("b16"), em.reg("b16")
    em.emit(f"mov.b32 {{{lo}, {hi}}}, {w};")
    return em.ins("f32", f"cvt.f32.f16 {{d}}, {lo};")


def encode(em, t: dt.dtype, f: str) -> str:
    """A b32 register holding, in its low 8 bits, the fp8 byte nearest f32 register ``f``."""
    h = em.ins("b16", f"cvt.rn.satfinite.{PTX_NAME[t.name]}x2.f32 {{d}}, {f}, {f};")
    x = em.ins("b32", f"cvt.u32.u16 {{d}}, {h};")
    return em.ins("b32", f"and.b32 {{d}}, {x}, 255;")


def round_to(em, t: dt.dtype, f: str) -> str:
    """f32 register ``f`` rounded to an fp8 value, kept as f32."""
    return decode(em, t, encode(em, t, f))


def convert(em, src: dt.dtype, to: dt.dtype, r: str, convert_other, f32_round_odd) -> str:
    """``x.to(to)`` where ``src`` or ``to`` is fp8. Into fp8 the value is rounded once: a float64
    (or an integer, widened to float64) is first narrowed to float32 rounded to odd, which the
    fp8 rounding then rounds exactly as from the original (24 >= 2 * 3 + 2 bits)."""
    if to.is_fp8:
        if src == to:
            return r
        if src.is_fp8 or (src.is_floating and src.bits <= 32):
            return round_to(em, to, r)            # the register holds the exact float32 value
        wide = r if src.is_floating else convert_other(em, src, dt.float64, r)
        return round_to(em, to, f32_round_odd(em, wide))
    return convert_other(em, dt.float32, to, r)   # from fp8: its value is an exact float32

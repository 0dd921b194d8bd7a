"""fp8 on AMD: gfx942's FNUZ formats, ``float8e4b8`` (E4M3, bias 8) and ``float8e5b16`` (E5M2,
bias 16), the ones its conversions and MFMAs take (CDNA3 ISA: "fp8" and "bf8").

An fp8 element lives in a VGPR as its byte, zero-extended, as a uint8 does: loads, stores, LDS,
layout conversions and MMA operand packing move it as 8-bit data, so dwords read from LDS feed
the fp8 MFMAs as they are. Conversions (gluon_trace/fp8.py gives the interpreter the same rule):

- fp8 -> f32: ``v_cvt_f32_fp8`` / ``v_cvt_f32_bf8`` (VOP1: byte 0 of the source), exact; bytes of
  an LDS dword two at a time by ``v_cvt_pk_f32_fp8/bf8`` (SDWA ``WORD_1`` for the high two). f16 and
  bf16 hold every FNUZ value exactly, and are kept widened as f32, so they are the same value.
- f32 (f16, bf16) -> fp8: ``v_cvt_pk_fp8_f32`` / ``v_cvt_pk_bf8_f32`` with the other source 0:
  round to nearest even; a magnitude past the maximum (infinities too) and NaN give 0x80 (NaN).
  gfx942 has no clamp for these (its assembler refuses the bit); saturating is the program's
  choice (gl.clamp first). The instruction writes the low word and keeps the destination's high
  word, so ``v_and_b32 0xFF`` makes the byte.
- f64 -> fp8: through f32 rounded to odd (one rounding: 24 bits >= 4 + 2).
- integers -> fp8: through f32; every integer a format holds is exact in f32, and the rest overflow.
- fp8 -> integers, bool, f64, the other fp8: through its exact f32.

NVIDIA's OCP formats (float8e4nv, float8e5) mean other bits, and other targets have no fp8
instructions: both are refused at the user's line, naming what to write instead.
"""
from __future__ import annotations

import struct

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace import fp8 as formats

from .emitter import elem_key
from .mir import Imm

CVT_TO = {"float8e4b8": "v_cvt_pk_fp8_f32", "float8e5b16": "v_cvt_pk_bf8_f32"}
CVT_FROM = {"float8e4b8": "v_cvt_f32_fp8", "float8e5b16": "v_cvt_f32_bf8"}
CVT_PK_FROM = {"float8e4b8": "v_cvt_pk_f32_fp8", "float8e5b16": "v_cvt_pk_f32_bf8"}
TARGETS = ("gfx942",)


def refuse_unlowered(graph, target: str) -> None:
    """The first op (or argument) with an fp8 type this target cannot lower, at the user's line."""
    from gluon_trace.backend import refuse_types
    if target in TARGETS:
        refuse_types(graph, "amd", lambda d: d.is_fp8 and not formats.is_fnuz(d.name),
                     "NVIDIA's OCP fp8 format; gfx942 converts and multiplies the FNUZ formats: use "
                     + " or ".join(f"gl.{a} (for {n})" for n, a in formats.AMD_NAME.items()))
    else:
        refuse_types(graph, "amd", lambda d: d.is_fp8,
                     f"fp8 needs gfx942 (CDNA3: v_cvt_*_fp8/bf8 and the fp8 MFMAs); this kernel is "
                     f"compiled for {target}")


def const(value, d: dt.dtype) -> Imm:
    """A constant fp8 element: its byte."""
    return Imm(int(formats.encode(np.float32(value), d.name)))


def _f32_of_imm(x: Imm) -> float:
    return struct.unpack("<f", struct.pack("<I", x.bits & 0xFFFFFFFF))[0]


def to_f32(em, d: dt.dtype, x):
    """The f32 value of fp8 element x (exact). A byte unpacked from a dword LDS gave (lds.unpack)
    is widened from that dword, with its neighbour: ``v_cvt_pk_f32_fp8`` takes the low two bytes,
    its SDWA form ``src0_sel:WORD_1`` the high two, so a dword costs two instructions, not eight."""
    if isinstance(x, Imm):
        return Imm.f32(float(formats.decode(np.uint8(x.bits & 0xFF), d.name)))
    hit = em.cse_get(("fp8_in_word", elem_key(x)))
    if hit is not None:
        word, k = hit
        key = ("fp8_pair", d.name, elem_key(word), k // 2)
        pair = em.cse_get(key)
        if pair is None:
            op = CVT_PK_FROM[d.name] + ("_sdwa" if k >= 2 else "")
            pair = em.cse_put(key, em.valu(op, em.v(2), [word], form="vop1",
                                           suffix="src0_sel:WORD_1" if k >= 2 else ""))
        return pair[k % 2]
    return em.valu(CVT_FROM[d.name], em.v(), [x], form="vop1")


def from_f32(em, d: dt.dtype, x):
    """fp8 element (zero-extended byte) nearest f32 element x."""
    if isinstance(x, Imm):
        return const(_f32_of_imm(x), d)
    word = em.valu(CVT_TO[d.name], em.v(), [x, Imm(0)], form="vop3")
    r = em.valu("v_and_b32", em.v(), [Imm(0xFF), word], comm=True)
    em.cse_put(("fp8_of_f32", d.name, elem_key(r)), x)   # for packing MFMA operands from x
    return r


def cast(em, src: dt.dtype, to: dt.dtype, x, bitcast: bool = False):
    """``x.to(to)`` where src or to is fp8 (arith.cast hands these here)."""
    from . import arith
    if bitcast:  # fp8 <-> 8-bit integers keep the byte
        if to.is_fp8:
            return x if src.is_fp8 else arith.norm(em, dt.uint8, x)
        return arith.norm(em, to, x)
    if src.is_fp8:
        f = to_f32(em, src, x)
        if to.is_fp8:
            return from_f32(em, to, f)
        if to.name in ("float32", "float16", "bfloat16"):
            return f       # exact in all three, and 16-bit floats are held as their f32
        return arith.cast(em, dt.float32, to, f)
    if src.name == "float64":
        if isinstance(x, Imm):  # rounded here, once, from the float64 value
            v = struct.unpack("<d", struct.pack("<Q", x.bits))[0]
            return const(float(formats.round_to(np.float64(v), to.name)), to)
        x = arith.f32_round_odd(em, x)
    elif not src.is_floating:
        x = arith.cast(em, src, dt.float32, x)
    return from_f32(em, to, x)


def operand_words(em, d: dt.dtype, xs, fallback):
    """Dwords holding fp8 elements xs (four a dword, lowest first), for an MFMA source or an LDS
    write. When every element was just rounded from an f32 value (from_f32), they are packed
    from those values: two ``v_cvt_pk`` (two bytes each) and one ``v_perm_b32`` a dword, not four
    converts, four masks and three permutes, into one register the instruction reads whole.
    Anything else (loaded bytes, LDS dwords) goes to ``fallback``."""
    from .lds_words import _perm
    groups = [xs[i:i + 4] for i in range(0, len(xs), 4)]
    srcs = [[em.cse_get(("fp8_of_f32", d.name, elem_key(x))) for x in g] for g in groups]
    if not all(len(g) == 4 and all(s is not None for s in ss) for g, ss in zip(groups, srcs)):
        return fallback(xs)
    key = ("fp8_words", d.name) + tuple(elem_key(x) for x in xs)
    hit = em.cse_get(key)
    if hit is None:
        r = em.v(len(groups))
        for k, ss in enumerate(srcs):
            lo = em.valu(CVT_TO[d.name], em.v(), [ss[0], ss[1]], form="vop3")
            hi = em.valu(CVT_TO[d.name], em.v(), [ss[2], ss[3]], form="vop3")
            _perm(em, hi, lo, 0x05040100, r[k] if len(groups) > 1 else r)
        hit = em.cse_put(key, [r[k] for k in range(len(groups))] if len(groups) > 1 else [r])
    return hit

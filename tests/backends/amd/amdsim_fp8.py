"""gfx942's fp8 instructions for amdsim (test helper), written from the CDNA3 ISA and decoded
with ml_dtypes' FNUZ types, not with gluon_trace.fp8, so that a misreading of the formats in the
emitter or the interpreter shows up as a wrong result.

- ``v_cvt_pk_fp8_f32 / v_cvt_pk_bf8_f32 D, S0, S1 [op_sel:[0,0,w]]``: S0 and S1 rounded to
  nearest even into FNUZ E4M3 ("fp8") / E5M2 ("bf8"), S0 the low byte, written to word w of D
  (the other word of D kept). No clamp on gfx942: overflow, infinities and NaN give 0x80.
- ``v_cvt_f32_fp8 / v_cvt_f32_bf8 D, S [src0_sel:BYTE_n]``: byte n (0 without SDWA) widened.
- ``v_cvt_pk_f32_fp8 / v_cvt_pk_f32_bf8 D[0:1], S [src0_sel:WORD_1]``: bytes 0, 1 (2, 3 with
  SDWA WORD_1) widened into D[0] and D[1].
- ``v_mfma_f32_{32x32x16,16x16x32}_{fp8,bf8}_{fp8,bf8}``: srcA's format first; 8 bytes a lane,
  lowest k first; 8 (32x32) or 4 (16x16) passes (AMD's Matrix Instruction Calculator: 32 and 16
  cycles).
"""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np

FORMATS = {"fp8": ml_dtypes.float8_e4m3fnuz, "bf8": ml_dtypes.float8_e5m2fnuz}
SHAPES = {}
PASSES = {}
for _a, _b in itertools.product(FORMATS, FORMATS):
    for _m, _k, _p in ((32, 16, 8), (16, 32, 4)):
        _name = f"{_m}x{_m}x{_k}_{_a}_{_b}"
        SHAPES[_name] = (_m, _k, f"{_a}_{_b}")
        PASSES[_name] = _p


def elements(words: np.ndarray, kind: str) -> np.ndarray:
    """(lanes, bytes) float64 of fp8/bf8 dwords, lowest byte first."""
    raw = np.ascontiguousarray(words.astype(np.uint32)).view(np.uint8).reshape(words.shape[0], -1)
    return raw.view(FORMATS[kind]).astype(np.float64)


def _encode(x: np.ndarray, kind: str) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(np.float32).astype(FORMATS[kind]).view(np.uint8).astype(np.uint64)


def _op_sel(suffix: str) -> list[int]:
    if "op_sel:[" not in suffix:
        return [0, 0, 0]
    return [int(c) for c in suffix.split("op_sel:[")[1].split("]")[0].split(",")]


def vector_op(op, U, F, old_dst, suffix):
    """The result (uint64 per lane) of one of these VALU ops, or None when ``op`` is not one."""
    from amdsim import SimError
    if op in ("v_cvt_pk_fp8_f32", "v_cvt_pk_bf8_f32"):
        kind = op.split("_")[3]
        sel = _op_sel(suffix)
        if sel[0] or sel[1]:
            raise SimError(f"{op}: source op_sel {sel} not simulated")
        word = _encode(F(0), kind) | (_encode(F(1), kind) << np.uint64(8))
        if sel[2]:
            return (old_dst & np.uint64(0xFFFF)) | (word << np.uint64(16))
        return (old_dst & np.uint64(0xFFFF0000)) | word
    if op.removesuffix("_sdwa") in ("v_cvt_pk_f32_fp8", "v_cvt_pk_f32_bf8"):
        kind = op.split("_")[4]
        word = 1 if "src0_sel:WORD_1" in suffix else 0
        if suffix.strip() and "src0_sel:WORD_" not in suffix:
            raise SimError(f"{op}: modifiers {suffix!r} not simulated")
        raw = ((U(0) >> np.uint64(16 * word)) & np.uint64(0xFFFF)).astype(np.uint16)
        pair = raw.view(np.uint8).reshape(-1, 2).view(FORMATS[kind]).astype(np.float32).view(np.uint32)
        return pair[:, 0].astype(np.uint64) | (pair[:, 1].astype(np.uint64) << np.uint64(32))
    if op.removesuffix("_sdwa") in ("v_cvt_f32_fp8", "v_cvt_f32_bf8"):
        kind = op.split("_")[3]
        byte = 0
        if "src0_sel:BYTE_" in suffix:
            byte = int(suffix.split("src0_sel:BYTE_")[1][0])
        elif suffix.strip():
            raise SimError(f"{op}: modifiers {suffix!r} not simulated")
        raw = ((U(0) >> np.uint64(8 * byte)) & np.uint64(0xFF)).astype(np.uint8)
        return raw.view(FORMATS[kind]).astype(np.float32).view(np.uint32).astype(np.uint64)
    return None

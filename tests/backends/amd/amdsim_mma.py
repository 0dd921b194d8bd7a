"""Matrix instructions for amdsim (test helper): v_mfma_* (CDNA2/CDNA3, wave64) and
v_wmma_f32_16x16x16_{f16,bf16} (RDNA3, wave32), written from the ISA documents' operand tables,
not from gluon_trace's layouts, so that a misunderstanding shared by the layouts and the emitter
shows up as a wrong result.

MFMA (AMD "CDNA3 ISA", 7.1 "Matrix fused multiply-add"; CDNA2 the same for these shapes), an
MxNxK block with 64 lanes: lane l holds row l % M of A and column l % N of B, K/(64/M) consecutive
k per lane starting at (K/(64/M)) * (l // M), packed low half (byte) first in its dwords. D/C
(M*N/64 dwords): 32x32: register r of lane l is D[8*(r//4) + 4*(l//32) + r%4][l % 32];
16x16: D[4*(l//16) + r][l % 16].
WMMA (AMD "RDNA3 ISA", 7.9 "Wave Matrix Multiply Accumulate"), 32 lanes: lane l holds row l % 16
of A (column l % 16 of B), all 16 k in 8 dwords (k = 2*v + half); lanes 16-31 must hold what lanes
0-15 hold. D/C: register v of lane l is D[2*v + l//16][l % 16]. Both need EXEC all ones.

Latency: the hardware does not interlock MFMA results. Every instruction advances the wave's
clock by one wait state (s_nop N by N+1); reading or writing an MFMA's D before its wait states
have passed, or overwriting its srcC while it may still read it, is a SimError. The required
counts (CDNA3 ISA 7.6 "Dependency Resolution: Required Independent Instructions"):
  MFMA (P passes) writes D -> VALU/VMEM/LDS reads or writes D: P + 3
  -> another MFMA reads it as srcA/srcB: P + 3; as srcC, the very same registers: 0,
     overlapping ones: P (gfx90a) or P + 1 (gfx942)
  VALU writes a VGPR -> MFMA reads it: 2
  MFMA reads srcC -> a later instruction writes those VGPRs: P - 1
  WMMA writes D -> the next WMMA reads it as srcA/srcB: 1 (RDNA3)
"""
from __future__ import annotations

import numpy as np

import amdsim_fp8
from gluon_trace.backends.amd.mir import Imm, Inst, Reg, Sub

# mnemonic -> (M, K, operand kind, passes) per target family
_SHAPES = {
    "32x32x8f16": (32, 8, "f16"), "16x16x16f16": (16, 16, "f16"),
    "32x32x8bf16_1k": (32, 8, "bf16"), "16x16x16bf16_1k": (16, 16, "bf16"),
    "32x32x8i8": (32, 8, "i8"), "16x16x16i8": (16, 16, "i8"),
    "32x32x2f32": (32, 2, "f32"), "16x16x4f32": (16, 4, "f32"),
    "32x32x8_f16": (32, 8, "f16"), "16x16x16_f16": (16, 16, "f16"),
    "32x32x8_bf16": (32, 8, "bf16"), "16x16x16_bf16": (16, 16, "bf16"),
    "32x32x16_i8": (32, 16, "i8"), "16x16x32_i8": (16, 32, "i8"),
    "32x32x2_f32": (32, 2, "f32"), "16x16x4_f32": (16, 4, "f32"),
}
# passes = cycles / 4, the cycles of AMD's Matrix Instruction Calculator (CDNA2: 64 for 32x32,
# 32 for 16x16; CDNA3: half that for 16/8-bit inputs, the same for f32)
_GFX90A = {"32x32x8f16": 16, "16x16x16f16": 8, "32x32x8bf16_1k": 16, "16x16x16bf16_1k": 8,
           "32x32x8i8": 16, "16x16x16i8": 8, "32x32x2f32": 16, "16x16x4f32": 8}
_GFX942 = {"32x32x8_f16": 8, "16x16x16_f16": 4, "32x32x8_bf16": 8, "16x16x16_bf16": 4,
           "32x32x16_i8": 8, "16x16x32_i8": 4, "32x32x2_f32": 16, "16x16x4_f32": 8}
_KINDS = ("f16", "bf16", "i8", "f32")  # the fp8 MFMAs of gfx942: amdsim_fp8.py


class _State:
    def __init__(self):
        self.clock = 0
        self.ready = {}      # VGPR -> (clock from which it may be touched, producer, srcA/B wait, D range)
        self.valu_w = {}     # VGPR -> clock of its last VALU write
        self.srcc = {}       # VGPR -> clock until which an MFMA may still read it
        self.wmma_d = (None, ())


def _st(w) -> _State:
    s = w.__dict__.get("_mma")
    if s is None:
        s = w._mma = _State()
    return s


def _vunits(x) -> list:
    """[(file, index)] of the VGPRs / AGPRs an operand names."""
    if isinstance(x, Reg) and x.cls in ("v", "a"):
        return [(x.cls, x.phys + k) for k in range(x.size)]
    if isinstance(x, Sub) and x.reg.cls in ("v", "a"):
        return [(x.reg.cls, x.reg.phys + x.index)]
    return []


def _file(w, cls):
    if cls == "v":
        return w.v
    a = w.__dict__.get("_agprs")
    if a is None:
        a = w._agprs = np.full((256, w.W), 0xDEADBEEF, np.uint32)  # AGPRs start as garbage
    return a


def step(sim, w, i: Inst) -> bool:
    """Called before every instruction: checks the wait states, runs the matrix instructions
    (True when it ran ``i``), and advances the wave's clock."""
    from amdsim import SimError
    s = _st(w)
    t = s.clock
    mma = i.op.startswith(("v_mfma", "v_wmma"))
    acc = i.op.startswith("v_accvgpr_")
    uses = [u for x in i.uses for u in _vunits(x)]
    defs = [u for x in i.defs for u in _vunits(x)]
    where = f"`{sim.text(w.pc - 1)}` (pc {w.pc - 1})"
    if i.op.startswith("v_mfma"):
        src_ab = _vunits(i.uses[0]) + _vunits(i.uses[1])
        src_c = _vunits(i.uses[2])
        for u in src_ab + src_c:
            if u in s.valu_w and t - s.valu_w[u] - 1 < 2:
                raise SimError(f"{u[0]}{u[1]} written by a VALU {t - s.valu_w[u] - 1} wait states before the "
                               f"MFMA {where} reads it (2 needed)")
        for u in set(src_ab + src_c):
            r = s.ready.get(u)
            if r is None:
                continue
            ready_rw, prod, p, d_range = r
            if u in src_ab:
                need = p + 3
            elif d_range == tuple(src_c):
                need = 0
            else:
                need = p + (1 if sim.t.gfx940 else 0)
            if t - prod - 1 < need:
                raise SimError(f"{u[0]}{u[1]}, the result of the MFMA at clock {prod}, is read by {where} after "
                               f"{t - prod - 1} wait states ({need} needed)")
    elif i.op.startswith("v_wmma"):
        prod, d = s.wmma_d
        if prod is not None and t - prod - 1 < 1 and set(d) & set(_vunits(i.uses[0]) + _vunits(i.uses[1])):
            raise SimError(f"{where} reads the previous WMMA's D as srcA/srcB with no wait state between")
    else:
        for u in uses + defs:
            r = s.ready.get(u)
            if r is not None and t < r[0]:
                raise SimError(f"{u[0]}{u[1]}, the result of the MFMA at clock {r[1]}, is touched by {where} after "
                               f"{t - r[1] - 1} wait states ({r[0] - r[1] - 1} needed)")
    for u in defs if not mma else ():  # the matrix pipe runs in order: MFMA after MFMA is safe
        if t < s.srcc.get(u, -1):
            raise SimError(f"{where} overwrites v{u} while the MFMA that reads it as srcC may still read it")
    ran = i.op == "v_nop"
    if not (mma or acc) and any(u[0] == "a" for u in uses + defs):
        raise SimError(f"{where} names an AGPR (only MFMA, v_accvgpr_* and memory instructions may)")
    if acc:
        w.check(i.uses + i.defs)
        _accvgpr(w, i)
        ran = True
    if mma:
        w.check(i.uses + i.defs)
        if w.exec != (1 << w.W) - 1:
            raise SimError(f"{where}: matrix instructions need EXEC all ones, got {w.exec:#x}")
        if i.op.startswith("v_mfma"):
            _mfma(sim, w, i, s, t)
        else:
            _wmma(w, i)
            s.wmma_d = (t, tuple(defs))
        ran = True
    if i.kind == "valu" and not i.op.startswith("v_mfma"):
        for u in defs:
            s.valu_w[u] = t
    for u in defs:
        if not i.op.startswith("v_mfma"):
            s.ready.pop(u, None)
    s.clock = t + (int(i.uses[0]) + 1 if i.op == "s_nop" else 1)
    return ran


# -- operand access -------------------------------------------------------------------------------

def _dwords(w, x) -> np.ndarray:
    """(lanes, dwords) uint32 of a VGPR/AGPR range."""
    return np.stack([_file(w, c)[k] for c, k in _vunits(x)], axis=1)


def _elements(words: np.ndarray, kind: str) -> np.ndarray:
    """(lanes, elements per lane) float64/int64, low half or byte first."""
    if kind == "f32":
        return words.view(np.float32).astype(np.float64)
    if kind == "i8":
        return words.view(np.uint8).view(np.int8).reshape(words.shape[0], -1).astype(np.int64)
    halves = words.view(np.uint16).reshape(words.shape[0], -1)
    if kind == "f16":
        return halves.view(np.float16).astype(np.float64)
    return (halves.astype(np.uint32) << 16).view(np.float32).astype(np.float64)  # bf16


def _write(w, x, vals: np.ndarray, lanes=None) -> None:
    for j, (c, k) in enumerate(_vunits(x)):
        f = _file(w, c)
        f[k] = vals[:, j] if lanes is None else np.where(lanes, vals[:, j], f[k])


def _accvgpr(w, i) -> None:
    """v_accvgpr_read_b32 (AGPR -> VGPR), _write_b32 (VGPR or inline constant -> AGPR), _mov_b32
    (AGPR -> AGPR), under EXEC like any VALU."""
    from amdsim import SimError
    want = {"v_accvgpr_read_b32": ("v", "a"), "v_accvgpr_write_b32": ("a", "v"),
            "v_accvgpr_mov_b32": ("a", "a")}.get(i.op)
    d, s = i.defs[0], i.uses[0]
    if want is None:
        raise SimError(f"unknown {i.op}")
    du = _vunits(d)
    if len(du) != 1 or du[0][0] != want[0]:
        raise SimError(f"{i.op}: its destination must be one {'VGPR' if want[0] == 'v' else 'AGPR'}")
    if isinstance(s, Imm):
        if want[1] != "v" or not s.is_inline:
            raise SimError(f"{i.op}: a constant source must be inline, into an AGPR")
        vals = np.full((w.W, 1), s.bits & 0xFFFFFFFF, np.uint32)
    else:
        su = _vunits(s)
        if len(su) != 1 or su[0][0] != want[1]:
            raise SimError(f"{i.op}: its source must be one {'VGPR' if want[1] == 'v' else 'AGPR'}")
        vals = _dwords(w, s)
    _write(w, d, vals, w.mask_lanes(w.exec))


def _mfma(sim, w, i, s: _State, t: int) -> None:
    from amdsim import SimError
    name = i.op[len("v_mfma_"):]
    out, shape = name.split("_", 1)
    table = (_GFX942 | amdsim_fp8.PASSES) if sim.t.gfx940 else _GFX90A
    shapes = _SHAPES | amdsim_fp8.SHAPES
    if shape not in shapes or shape not in table:
        raise SimError(f"{i.op} is not an MFMA of {sim.t.name}")
    M, K, kind = shapes[shape]
    P = table[shape]
    N = M
    kpl = K // (64 // M)
    if kind in _KINDS:
        a = _elements(_dwords(w, i.uses[0]), kind)
        b = _elements(_dwords(w, i.uses[1]), kind)
    else:  # fp8/bf8: srcA's format, then srcB's
        ka, kb = kind.split("_")
        a = amdsim_fp8.elements(_dwords(w, i.uses[0]), ka)
        b = amdsim_fp8.elements(_dwords(w, i.uses[1]), kb)
    if a.shape[1] != kpl or b.shape[1] != kpl:
        raise SimError(f"{i.op}: srcA/srcB hold {a.shape[1]}/{b.shape[1]} elements per lane, not {kpl}")
    A = np.zeros((M, K), a.dtype)
    B = np.zeros((K, N), b.dtype)
    for lane in range(64):
        row, g = lane % M, lane // M
        A[row, kpl * g:kpl * (g + 1)] = a[lane]
        B[kpl * g:kpl * (g + 1), row] = b[lane]
    nreg = M * N // 64
    if {c for c, _ in _vunits(i.defs[0])} != {c for c, _ in _vunits(i.uses[2])}:
        raise SimError(f"{i.op}: C and D must both be VGPRs or both AGPRs (one acc_cd bit)")
    cw = _dwords(w, i.uses[2])
    if cw.shape[1] != nreg or len(_vunits(i.defs[0])) != nreg:
        raise SimError(f"{i.op}: C/D are {nreg} dwords")
    rows, cols = _d_map(M)
    integer = out == "i32"
    C = np.zeros((M, N), np.int64 if integer else np.float64)
    cv = cw.view(np.int32).astype(np.int64) if integer else cw.view(np.float32).astype(np.float64)
    C[rows, cols] = cv
    if integer:
        D = ((C + A @ B + 2**31) % 2**32 - 2**31).astype(np.int32).view(np.uint32)
    else:
        D = (C + A @ B).astype(np.float32).view(np.uint32)
    _write(w, i.defs[0], D[rows, cols])
    d_units = tuple(_vunits(i.defs[0]))
    for u in d_units:
        s.ready[u] = (t + P + 3 + 1, t, P, d_units)
    for u in _vunits(i.uses[2]):
        s.srcc[u] = max(s.srcc.get(u, -1), t + P - 1 + 1)


def _d_map(M: int):
    """Index arrays (lanes, registers) -> row, column of D."""
    lanes = np.arange(64)[:, None]
    r = np.arange(M * M // 64)[None, :]
    if M == 32:
        rows = 8 * (r // 4) + 4 * (lanes // 32) + r % 4
        cols = np.broadcast_to(lanes % 32, rows.shape)
    else:
        rows = 4 * (lanes // 16) + r
        cols = np.broadcast_to(lanes % 16, rows.shape)
    return rows, cols


def _wmma(w, i) -> None:
    from amdsim import SimError
    kind = {"v_wmma_f32_16x16x16_f16": "f16", "v_wmma_f32_16x16x16_bf16": "bf16"}.get(i.op)
    if kind is None or w.W != 32:
        raise SimError(f"{i.op} is not an RDNA3 wave32 WMMA this simulator knows")
    aw, bw = _dwords(w, i.uses[0]), _dwords(w, i.uses[1])
    for what, x in (("srcA", aw), ("srcB", bw)):
        if x.shape[1] != 8:
            raise SimError(f"{i.op}: {what} is 8 dwords")
        if not np.array_equal(x[:16], x[16:]):
            bad = int(np.nonzero((x[:16] != x[16:]).any(axis=1))[0][0])
            raise SimError(f"{i.op}: {what} of lane {bad + 16} differs from lane {bad}'s (WMMA operands "
                           "are replicated in both halves of the wave)")
    a, b = _elements(aw, kind), _elements(bw, kind)
    A, B = a[:16], b[:16].T              # A[row][k], B[k][col]
    lanes = np.arange(32)[:, None]
    v = np.arange(8)[None, :]
    rows, cols = 2 * v + lanes // 16, np.broadcast_to(lanes % 16, (32, 8))
    C = np.zeros((16, 16))
    C[rows, cols] = _dwords(w, i.uses[2]).view(np.float32)
    D = (C + A @ B).astype(np.float32).view(np.uint32)
    _write(w, i.defs[0], D[rows, cols])

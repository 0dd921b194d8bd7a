"""Property testing for MMA kernels: strategies for what a tensor-core kernel is built from,
valid for a target, and tolerances that follow the accumulation.

Strategies (hypothesis, imported when first used): :func:`mma_instrs` (an MMA instruction:
accumulator layout, operand layouts, instruction shape, dtype), :func:`wgmma_pieces` (a
``warpgroup_mma`` over P column pieces: tiles whose N is not a power of two), :func:`k_widths` (the
dot-operand k_widths an accumulator accepts), :func:`shared_layouts` (Swizzled and NVMMA
shared layouts valid for a shape and dtype) and :func:`pipeline_depths` (ring depths whose
buffers fit the target's shared memory).

:func:`mma_tolerance` bounds the error of ``C = A @ B`` computed from low-precision inputs
with a wider accumulator; pass it to ``assert_kernel_matches(..., tolerance=...)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import dtypes as dt

__all__ = ["MMAInstr", "mma_instrs", "WgmmaPieces", "wgmma_pieces", "k_widths", "shared_layouts", "pipeline_depths", "smem_limit",
           "Tolerance", "mma_tolerance", "UNIT_ROUNDOFF"]


def _st():
    from .testing import _st as st
    return st()


def _sm(target: str) -> int | None:
    return int(target[3:].rstrip("a")) if target.startswith("sm_") else None


# ------------------------------------------------------------------------ MMA instructions
@dataclass(frozen=True)
class MMAInstr:
    """One MMA instruction as a kernel uses it: ``op`` ("mma_v2", "wgmma", "mfma", "wmma"),
    the operand ``dtype``, the accumulator layout ``acc``, the operand layouts ``a``/``b``
    (DotOperandLayouts of ``acc``; ``b`` is None for wgmma, which reads B from shared memory), ``instr`` = (M, N, K) of one instruction and ``tile`` =
    (M, N) the warps cover together (a tensor's M and N must be multiples of it)."""
    target: str
    op: str
    dtype: dt.dtype
    acc: object
    a: object
    b: object
    instr: tuple
    tile: tuple
    num_warps: int

    @property
    def k_width(self) -> int:
        return self.a.k_width


def _ops_for(target: str) -> list[tuple[str, tuple[str, ...]]]:
    """(op, operand dtypes) the target has."""
    sm = _sm(target)
    if sm is not None:
        nv = ("float16", "bfloat16", "float32") + (("float8e4nv", "float8e5") if sm >= 89 else ())
        return [("mma_v2", nv)] + ([("wgmma", nv)] if sm >= 90 else [])
    if target in ("gfx90a", "gfx942"):
        return [("mfma", ("float16", "bfloat16", "float32")
                 + (("float8e4b8", "float8e5b16") if target == "gfx942" else ()))]
    if target == "gfx1100":
        return [("wmma", ("float16", "bfloat16"))]
    raise ValueError(f"no MMA instructions on {target!r}: use sm_80/sm_89/sm_90a, gfx90a/gfx942 or gfx1100")


def mma_instrs(target: str = "sm_90a", num_warps: int = 4, dtypes=None, ops=None):
    """MMA instructions valid on ``target`` with ``num_warps`` warps: the op, an operand
    dtype it takes there (``dtypes`` narrows by name), an accumulator layout (warps split any
    way the instruction allows; wgmma N from 8 to 256, MFMA 32x32 or 16x16, transposed or
    not) and operand layouts with the k_width the instruction needs."""
    st = _st()
    from . import language as gl
    from .mma_layouts import expected_k_width, mma_instr_shape
    choices = [(op, d) for op, ds in _ops_for(target) for d in ds
               if (dtypes is None or d in dtypes) and (ops is None or op in ops)
               and not (op == "wgmma" and num_warps % 4)]
    if not choices:
        raise ValueError(f"no MMA on {target} for dtypes={dtypes}, ops={ops}, num_warps={num_warps}")
    w_bits = int(math.log2(num_warps))

    @st.composite
    def draw(draw):
        op, name = draw(st.sampled_from(choices))
        t = getattr(dt, name)
        split = draw(st.integers(0, w_bits))
        wpc = [1 << split, 1 << (w_bits - split)]
        if op == "mma_v2":
            acc = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=wpc, instr_shape=[16, 8])
        elif op == "wgmma":
            n = draw(st.sampled_from([8, 16, 32, 64, 128, 256]))
            acc = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                            instr_shape=[16, n, 256 // t.bits])
        elif op == "mfma":
            m = draw(st.sampled_from([32, 16]))
            from .mma_layouts import _MFMA_K
            ver = 3 if target == "gfx942" else 2
            k = _MFMA_K[ver][(m, t.bits)][0]
            acc = gl.AMDMFMALayout(version=ver, instr_shape=[m, m, k], transposed=draw(st.booleans()),
                                   warps_per_cta=wpc)
        else:
            acc = gl.AMDWMMALayout(version=1, transposed=draw(st.booleans()), warps_per_cta=wpc)
        kw = expected_k_width(acc, t.bits)
        instr = mma_instr_shape(acc, t.bits)
        b = None if op == "wgmma" else gl.DotOperandLayout(1, acc, k_width=kw)  # wgmma: B from shared memory
        return MMAInstr(target, op, t, acc, gl.DotOperandLayout(0, acc, k_width=kw), b, instr,
                        tuple(acc.tile_shape), num_warps)

    return draw()


@dataclass(frozen=True)
class WgmmaPieces:
    """A ``warpgroup_mma`` over ``pieces`` column pieces of ``width`` columns each (a tile of
    ``pieces * width`` columns, which need not be a power of two): each accumulator is [M,
    width] in ``instr.acc``, B a stack of shared slots [pieces, K, width] (or K-major [pieces,
    width, K] when ``b_kmajor``, which 8-bit operands need), A in shared memory or, with
    ``a_regs``, in registers in ``instr.a``. With ``k_pieces`` > 1, A is that many operands along K
    (a list) and B stacked once more, [k_pieces, pieces, K, width]: one group summing the terms."""
    instr: MMAInstr
    pieces: int
    width: int
    b_kmajor: bool
    a_regs: bool
    k_pieces: int = 1

    @property
    def columns(self) -> int:
        return self.pieces * self.width


def wgmma_pieces(target: str = "sm_90a", num_warps: int = 4, dtypes=None, max_columns: int = 256):
    """warpgroup_mma over pieces valid on ``target``: an accumulator layout from
    :func:`mma_instrs` whose instruction N is at most 64, a piece width (a power of two, a
    multiple of the layout's N) and a count of 2 or more whose columns stay within
    ``max_columns``; the backend issues one wide instruction where the pieces lie as one operand.
    Tiles like 160 = 5 x 32 or 192 = 3 x 64 come out of it."""
    st = _st()

    @st.composite
    def draw(draw):
        instr = draw(mma_instrs(target, num_warps, dtypes, ops=("wgmma",))
                     .filter(lambda i: i.instr[1] <= 64))
        widths = [w for w in (8, 16, 32, 64, 128) if w % instr.tile[1] == 0 and 2 * w <= max_columns]
        width = draw(st.sampled_from(widths))
        pieces = draw(st.integers(2, max_columns // width))
        # wgmma reads an MN-major B for 16-bit types only (tf32 and fp8: K-major)
        b_kmajor = True if instr.dtype.bits != 16 else draw(st.booleans())
        return WgmmaPieces(instr, pieces, width, b_kmajor, draw(st.booleans()), draw(st.integers(1, 3)))

    return draw()


def k_widths(acc, dtype):
    """The k_widths a DotOperandLayout over ``acc`` may have for ``dtype`` operands: the
    instruction's (MFMA also takes twice it: two instructions' K per register group)."""
    st = _st()
    from .mma_layouts import AMDMFMALayout, expected_k_width
    bits = dt.from_numpy(dtype).bits if not isinstance(dtype, dt.dtype) else dtype.bits
    kw = expected_k_width(acc, bits)
    return st.sampled_from([kw, 2 * kw] if isinstance(acc, AMDMFMALayout) else [kw])


# ------------------------------------------------------------------------- shared memory
def shared_layouts(shape, dtype, kinds=("nvmma", "swizzled")):
    """Shared layouts valid for a buffer of ``shape`` and ``dtype``: NVMMA layouts whose
    swizzle width divides the contiguous dim's bytes (a swizzle needs 8 rows; 0 = none), and
    swizzled layouts whose vector and phase count fit the contiguous dim, any order."""
    st = _st()
    from . import language as gl
    t = dtype if isinstance(dtype, dt.dtype) else dt.from_numpy(dtype)
    shape = tuple(int(s) for s in shape)
    rank = len(shape)
    options = []
    if "nvmma" in kinds:
        nvmma = []  # built here, so a falsifying example prints the layouts themselves
        for transposed in ((False, True) if rank >= 2 else (False,)):
            contig = shape[rank - 2 if transposed else rank - 1]
            rows = math.prod(shape) // contig
            nbytes = contig * t.bits // 8
            widths = [0] + [w for w in (32, 64, 128) if rows >= 8 and nbytes % w == 0]
            nvmma += [gl.NVMMASharedLayout(w, t.bits, rank=rank, transposed=transposed) for w in widths]
        options.append(st.sampled_from(nvmma))
    if "swizzled" in kinds:
        @st.composite
        def swizzled(draw):
            order = list(draw(st.permutations(list(range(rank)))))
            contig = shape[order[0]]
            vec = 1 << draw(st.integers(0, int(math.log2(contig))))
            max_phase = 1 << draw(st.integers(0, int(math.log2(contig // vec))))
            per_phase = 1 << draw(st.integers(0, 3))
            return gl.SwizzledSharedLayout(vec, per_phase, max_phase, order)
        options.append(swizzled())
    if not options:
        raise ValueError(f"kinds={kinds}: name 'nvmma' and/or 'swizzled'")
    return st.one_of(*options)


def smem_limit(target: str) -> int:
    """Bytes of shared memory one program may use on ``target``."""
    from .smem_plan import LIMITS
    return LIMITS.get(target, LIMITS["interpreter"])


def pipeline_depths(target: str, stage_bytes: int, reserved: int = 0, min_stages: int = 1,
                    max_stages: int = 8):
    """Ring depths (STAGES) for a pipeline whose one stage takes ``stage_bytes`` of shared
    memory, with ``reserved`` bytes used elsewhere (the epilogue's tile, barriers): from
    ``min_stages`` up to what fits ``target`` (and ``max_stages``)."""
    st = _st()
    fit = (smem_limit(target) - reserved) // max(1, stage_bytes)
    top = min(max_stages, fit)
    if top < min_stages:
        raise ValueError(f"{min_stages} stages of {stage_bytes} bytes (+{reserved} reserved) do not fit the "
                         f"{smem_limit(target)} bytes of shared memory on {target}")
    return st.integers(min_stages, top)


# ------------------------------------------------------------------------------ tolerances
# unit roundoff u = 2^-(mantissa bits + 1) of each accumulator / output format
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float64": 2.0 ** -53}


@dataclass
class Tolerance:
    """An elementwise bound: |got - expected| <= atol (an array) + rtol * |expected|."""
    atol: object
    rtol: float
    why: str

    def __str__(self) -> str:
        return self.why


def mma_tolerance(a, b, acc: str = "float32", out: str | None = None, acc_bits: int | None = None) -> Tolerance:
    """The error bound of ``C = A @ B`` for a kernel that multiplies the (already rounded)
    inputs ``a`` [M, K] and ``b`` [K, N] exactly and adds the K products in ``acc``.

    Why: products of bf16, f16 and fp8 values are exact in f32 (at most 2 x 11 significand
    bits), so every rounding is in the K - 1 additions, in whatever order the MMA tiles and
    the K loop perform them. The classic bound for a sum of K terms in any order is
    ``|err| <= gamma(K-1) * sum|a_i b_i|`` with ``gamma(n) = n u / (1 - n u)`` and ``u`` the
    accumulator's unit roundoff (2^-24 for f32); ``sum|a_i b_i|`` is ``(|A| @ |B|)``, so the
    bound is per element and holds even where C cancels to near zero (a plain rtol would
    not). An output stored in a narrower ``out`` dtype adds one rounding: ``u_out |C|``.
    ``acc_bits`` overrides the accumulator's significand bits: Hopper's fp8 wgmma keeps
    about 14 (DeepSeek-V3 report, section 3.3.2), so pass ``acc_bits=14`` for fp8 on an H100;
    the interpreter accumulates in full f32. The reference must use the same rounded inputs.
    """
    a64 = np.abs(np.asarray(a, dtype=np.float64))
    b64 = np.abs(np.asarray(b, dtype=np.float64))
    if a64.ndim < 2 or b64.ndim < 2 or a64.shape[-1] != b64.shape[-2]:
        from .errors import ArgumentError, user_location
        raise ArgumentError(f"mma_tolerance(a, b) takes A [M, K] and B [K, N]; got shapes {a64.shape} and "
                            f"{b64.shape}", user_location())
    if acc not in UNIT_ROUNDOFF or (out is not None and out not in UNIT_ROUNDOFF):
        from .errors import ArgumentError, user_location
        raise ArgumentError(f"mma_tolerance: acc and out are dtype names among {', '.join(UNIT_ROUNDOFF)}; "
                            f"got acc={acc!r}, out={out!r}", user_location())
    k = a64.shape[-1]
    u = 2.0 ** -acc_bits if acc_bits else UNIT_ROUNDOFF[acc]
    n = max(k - 1, 1)
    gamma = n * u / (1 - n * u)
    atol = gamma * (a64 @ b64)
    rtol = UNIT_ROUNDOFF[out] if out and out != acc else 0.0
    why = (f"{acc} accumulation of K={k} exact products: |err| <= gamma({n}) * (|A| @ |B|), "
           f"u = 2^{int(round(math.log2(u)))}" + (f", + one rounding to {out} (rtol {rtol:.3g})" if rtol else ""))
    return Tolerance(atol, rtol, why)

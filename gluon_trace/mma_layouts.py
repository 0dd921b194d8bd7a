"""Register layouts of the matrix instructions, as linear layouts.

Each layout is built from its instruction's fragment map (one warp's tile), then tiled over
warps and repeated over registers to cover the tensor, in the order Triton's linear-layout
conversion uses (so a Gluon user gets the same register numbering). Where each map comes from:

- ``NVMMADistributedLayout`` version [2, 0]: the ``mma.sync.m16n8k*`` accumulator (PTX ISA,
  "Warp-level matrix fragment mma.m16n8k16", figure "MMA .m16n8k16 fragment layout for
  accumulator matrix C/D": c0/c1 at row groupID, columns 2*threadID_in_group + {0, 1}; c2/c3
  eight rows below). Warps are numbered N first; larger tensors repeat the warps' tile in
  registers, N repetitions first, then M.
  Version [3, 0]: the ``wgmma.mma_async`` accumulator (PTX ISA, "Asynchronous Warpgroup Level
  Matrix Register Fragment", "WGMMA .m64nNk16 register fragment layout for accumulator
  matrix D"): warp w of a warpgroup owns rows 16*(w % 4).., each thread N/2 values (d_i at
  row groupID + 8*(i//2 % 2), column 8*(i//4) + 2*threadID_in_group + i % 2). Warps are
  numbered M first (the instruction fixes 4 warps along M); further warpgroups tile on.
- ``DotOperandLayout`` over an NVIDIA parent: the A [M, K] and B [K, N] fragments of
  mma.m16n8k16 (16-bit, k_width 2), m16n8k8 (tf32, k_width 1) and m16n8k32 (8-bit, k_width 4)
  (PTX ISA figures "fragment layout for matrix A/B" of each shape); the wgmma A register
  fragment is the same per warp. Warps of the parent along N hold copies of A (along M, of B).
- ``AMDMFMALayout``: ``v_mfma_*`` (AMD "CDNA3 Instruction Set Architecture", section "Matrix
  fused multiply-add (MFMA)", and the layouts the AMD matrix instruction calculator prints):
  32x32 output: column lane % 32, row 8*(r // 4) + 4*(lane // 32) + r % 4; 16x16 output:
  column lane % 16, row 4*(lane // 16) + r. ``transposed`` swaps rows and columns. A (B) input:
  row (column) lane % M, k = k_width * (lane // M) + r.
- ``AMDWMMALayout``: RDNA3 ``v_wmma_f32_16x16x16_{f16,bf16}`` (AMD "RDNA3 Instruction Set
  Architecture", section "Wave Matrix Multiply Accumulate (WMMA)"): output column lane % 16,
  row 2*r + lane // 16; inputs: lane % 16 is the row of A (column of B), all 16 K in its
  registers, and lanes 16..31 hold copies of lanes 0..15 (the instruction reads both halves).
- ``DotOperandLayout`` over a ``BlockedLayout`` (what ``gl.dot_fma`` takes): the parent's
  threads along the operand's own dim (M for A, N for B), every K element in each thread's
  registers; threads of the parent along the other dim hold copies. ``k_width`` plays no role
  there (any positive power of two is accepted).

Multi-CTA clusters (``cga_layout``) are not supported: one CTA per program.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from .errors import LayoutError, user_location
from .layouts import BlockedLayout, DistributedLayout, LinearLayout, _add_to_basis, _int_tuple, _pack

__all__ = ["NVMMADistributedLayout", "DotOperandLayout", "AMDMFMALayout", "AMDWMMALayout",
           "mma_instr_shape", "expected_k_width", "warp_tile"]


def _log2(x: int) -> int:
    return x.bit_length() - 1


def _unit(d: int, v: int) -> tuple[int, int]:
    return (v, 0) if d == 0 else (0, v)


def _bits(d, start, count):
    """``count`` bases along ``d`` doubling from ``start``."""
    return [_unit(d, start << i) for i in range(count)]


def _repeat(regs, d, start, size):
    """Register bases repeating a block of extent ``start`` along ``d`` up to ``size``."""
    pos = start
    while pos < size:
        regs.append(_unit(d, pos))
        pos <<= 1


def _fit(shape, tile, regs, lanes, warps, rep_order) -> LinearLayout:
    """Tile bases (covering ``tile``) made to fit ``shape``: repeated in registers along the
    dims in ``rep_order`` where the shape is bigger; cut where it is smaller (lanes and warps
    past the shape hold copies, registers past it are dropped so no thread holds an element
    twice)."""
    regs = list(regs)
    for d in rep_order:
        _repeat(regs, d, tile[d], shape[d])

    def cut(b):
        return tuple(c if c < s else 0 for c, s in zip(b, shape))
    kept, basis = [], {}
    for b in map(cut, regs):
        if any(b) and _add_to_basis(_pack(b, shape), basis):
            kept.append(b)
    return LinearLayout(tuple(shape), tuple(kept), tuple(map(cut, lanes)), tuple(map(cut, warps)))


def _pow2(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0 and v & (v - 1) == 0


def _two_pow2(self, value, what):
    """A 2-entry list of powers of two ([M, N]), stored as a tuple."""
    value = _int_tuple(value, what, self.loc)
    if len(value) != 2:
        raise LayoutError(f"{what}={list(value)} needs 2 entries [M, N]", self.loc)
    if not all(_pow2(v) for v in value):
        raise LayoutError(f"{what}={list(value)} must hold powers of two (1, 2, 4, ...)", self.loc)
    return value


def _single_cta(self, name):
    """Accept the cluster arguments only where they describe one CTA."""
    cga = getattr(self, "cga_layout", ())
    try:
        cga = tuple(tuple(int(c) for c in b) for b in (cga or ()))
    except TypeError:
        raise LayoutError(f"{name} cga_layout must be a list of bases, got {cga!r}", self.loc) from None
    if cga:
        raise LayoutError(f"{name} cga_layout={[list(b) for b in cga]}: multi-CTA clusters are not supported; "
                          "pass cga_layout=[] (one CTA per program)", self.loc)
    object.__setattr__(self, "cga_layout", ())
    for field_name, trivial in (("ctas_per_cga", 1), ("cta_split_num", 1), ("cta_order", None)):
        if getattr(self, field_name, None) is None:
            continue
        value = _int_tuple(getattr(self, field_name), f"{name} {field_name}", self.loc)
        if trivial is not None and any(v != trivial for v in value):
            raise LayoutError(f"{name} {field_name}={list(value)}: multi-CTA clusters are not supported; "
                              f"pass {field_name}=None or all ones", self.loc)
        object.__setattr__(self, field_name, value)


class _MatrixLayout(DistributedLayout):
    rank = property(lambda self: 2)
    num_warps = property(lambda self: math.prod(self.warps_per_cta))

    def _warps_desc(self):
        return f"{type(self).__name__} warps_per_cta={list(self.warps_per_cta)}"


# ------------------------------------------------------------------------- NVIDIA
@dataclass(frozen=True)
class NVMMADistributedLayout(_MatrixLayout):
    """Accumulator of mma.sync (version [2, 0], instr_shape [16, 8]) or wgmma (version
    [3, 0], instr_shape [16, N, K]). ``ctas_per_cga``, ``cta_split_num`` and ``cta_order`` are
    the older spelling of ``cga_layout``; all must describe a single CTA."""
    version: tuple = (2, 0)
    warps_per_cta: tuple = (4, 1)
    instr_shape: tuple = (16, 8)
    cga_layout: tuple = ()
    ctas_per_cga: tuple | None = None
    cta_split_num: tuple | None = None
    cta_order: tuple | None = None

    def __post_init__(self):
        super().__post_init__()
        name = "NVMMADistributedLayout"
        version = _int_tuple(self.version, f"{name} version", self.loc)
        if version not in ((2, 0), (3, 0)):
            raise LayoutError(f"{name} version={list(version)}: write version=[2, 0] (mma.sync, Ampere) or "
                              "[3, 0] (wgmma, Hopper)", self.loc)
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "warps_per_cta", _two_pow2(self, self.warps_per_cta, f"{name} warps_per_cta"))
        instr = _int_tuple(self.instr_shape, f"{name} instr_shape", self.loc)
        object.__setattr__(self, "instr_shape", instr)
        _single_cta(self, name)
        if version[0] == 2 and instr != (16, 8):
            raise LayoutError(f"mma.sync's accumulator tile is instr_shape=[16, 8], got {list(instr)}", self.loc)
        if version[0] == 3:
            if len(instr) != 3 or instr[0] != 16 or instr[2] not in (8, 16, 32):
                raise LayoutError(f"wgmma's instr_shape is [16, N, K] with K = 16 (16-bit inputs), 8 (tf32) or "
                                  f"32 (8-bit), got {list(instr)}", self.loc)
            n = instr[1]
            if not 8 <= n <= 256 or n % 8:
                raise LayoutError(f"wgmma's N = {n}: N must be a multiple of 8 in [8, 256]", self.loc)
            if not _pow2(n):
                raise LayoutError(f"wgmma's N = {n} is legal for the instruction, but register tiles here are "
                                  "powers of two: use N = 8, 16, 32, 64, 128 or 256", self.loc)
            if self.num_warps % 4:
                raise LayoutError(f"a wgmma layout needs whole warpgroups: warps_per_cta="
                                  f"{list(self.warps_per_cta)} has {self.num_warps} warps, not a multiple of 4; "
                                  "write e.g. [4, 1] or [8, 1]", self.loc)
            if self.warps_per_cta[0] < 4:
                raise LayoutError(f"wgmma stacks each warpgroup's 4 warps along M: warps_per_cta="
                                  f"{list(self.warps_per_cta)} has {self.warps_per_cta[0]} along M, not a "
                                  f"multiple of 4; write [{self.num_warps}, 1] (or [4 * k, n])", self.loc)

    num_lanes = property(lambda self: 32)

    @property
    def is_wgmma(self) -> bool:
        return self.version[0] == 3

    @property
    def warp_tile_shape(self) -> tuple[int, int]:
        """The [M, N] block one warp's instruction covers."""
        return (16, self.instr_shape[1] if self.is_wgmma else 8)

    @property
    def tile_shape(self):
        m, n = self.warp_tile_shape
        return (m * self.warps_per_cta[0], n * self.warps_per_cta[1])

    def warp_order(self) -> tuple[int, int]:
        """Dims in the order warp-id bits walk them (first fastest)."""
        return (0, 1) if self.is_wgmma else (1, 0)

    def _build_linear(self, shape):
        m, n = self.warp_tile_shape
        regs, lanes = _nvidia_tile((m, n), 2, inner=1, outer=0)
        warps = []
        for d in self.warp_order():
            warps += _bits(d, (m, n)[d], _log2(self.warps_per_cta[d]))
        return _fit(shape, self.tile_shape, regs, lanes, warps, (1, 0))


def _nvidia_tile(tile, k_width, inner, outer):
    """One warp's mma fragment: k_width registers then 4 lanes along ``inner``, 8 lanes
    along ``outer``, then registers repeating along ``outer`` and then ``inner``."""
    m, n = tile[outer], tile[inner]
    regs = _bits(inner, 1, _log2(k_width))
    lanes = _bits(inner, k_width, 2) + _bits(outer, 1, 3)
    regs += _bits(outer, 8, _log2(m // 8))
    regs += _bits(inner, 4 * k_width, _log2(n // (4 * k_width)))
    return regs, lanes


# ----------------------------------------------------------------------------- AMD
# version -> (M, element bits) -> the K of the MFMAs there are, the default first
# (CDNA3 doubled the 8-bit K of CDNA2; CDNA4 adds 16-bit MFMAs of twice the K)
_MFMA_K = {2: {(32, 16): (8,), (16, 16): (16,), (32, 8): (8,), (16, 8): (16,), (32, 32): (2,), (16, 32): (4,)},
           3: {(32, 16): (8,), (16, 16): (16,), (32, 8): (16,), (16, 8): (32,), (32, 32): (2,), (16, 32): (4,)}}
_MFMA_K[4] = _MFMA_K[3] | {(32, 16): (8, 16), (16, 16): (16, 32)}


def _amd_accumulator(shape, tile_regs, lanes, instr, tiles_per_warp, warps_per_cta) -> LinearLayout:
    """An AMD instruction tile grown as Triton grows it: tiles_per_warp along N, the warps
    along N, repeats along N over the whole tensor, then the same along M."""
    regs, warps = list(tile_regs), []
    for d in (1, 0):
        regs += _bits(d, instr[d], _log2(tiles_per_warp[d]))
        step = instr[d] * tiles_per_warp[d]
        warps += _bits(d, step, _log2(warps_per_cta[d]))
        _repeat(regs, d, step * warps_per_cta[d], shape[d])
    return _fit(shape, shape, regs, lanes, warps, ())


class _AMDLayout(_MatrixLayout):
    def _common_checks(self, name):
        object.__setattr__(self, "warps_per_cta", _two_pow2(self, self.warps_per_cta, f"{name} warps_per_cta"))
        object.__setattr__(self, "transposed", bool(self.transposed))
        tpw = (1, 1) if self.tiles_per_warp is None else self.tiles_per_warp
        object.__setattr__(self, "tiles_per_warp", _two_pow2(self, tpw, f"{name} tiles_per_warp"))
        _single_cta(self, name)

    @property
    def tile_shape(self):
        return tuple(i * t * w for i, t, w in zip(self.instr_shape[:2], self.tiles_per_warp, self.warps_per_cta))


@dataclass(frozen=True)
class AMDMFMALayout(_AMDLayout):
    """Accumulator of v_mfma: version 2 = CDNA2 (gfx90a), 3 = CDNA3 (gfx942), 4 = CDNA4;
    instr_shape [32, 32, K] or [16, 16, K]. ``element_bitwidth`` is the accumulator's element
    width (32; f64 MFMA is not supported). ``tiles_per_warp`` [tM, tN]: each warp computes
    tM x tN neighbouring instruction tiles before the next warp's."""
    version: int = 3
    instr_shape: tuple = (32, 32, 8)
    transposed: bool = False
    warps_per_cta: tuple = (2, 2)
    element_bitwidth: int | None = None
    tiles_per_warp: tuple | None = None
    cga_layout: tuple = ()

    def __post_init__(self):
        super().__post_init__()
        name = "AMDMFMALayout"
        if self.version not in (2, 3, 4) or isinstance(self.version, bool):
            raise LayoutError(f"{name} version={self.version!r}: write 2 (CDNA2, gfx90a), 3 (CDNA3, gfx942) "
                              "or 4 (CDNA4, gfx950)", self.loc)
        instr = _int_tuple(self.instr_shape, f"{name} instr_shape", self.loc)
        if len(instr) not in (2, 3) or instr[:2] not in ((32, 32), (16, 16)) \
                or (len(instr) == 3 and not _pow2(instr[2])):
            raise LayoutError(f"{name} instr_shape={list(instr)}: write [32, 32, K] or [16, 16, K] with K the "
                              "instruction's (e.g. [32, 32, 8] or [16, 16, 16] for f16 on CDNA3)", self.loc)
        object.__setattr__(self, "instr_shape", instr)
        if self.element_bitwidth not in (None, 32):
            what = "f64 MFMA is not supported" if self.element_bitwidth == 64 else "use 32"
            raise LayoutError(f"{name} element_bitwidth={self.element_bitwidth!r} (the accumulator's): {what}; "
                              "pass element_bitwidth=None or 32", self.loc)
        self._common_checks(name)

    num_lanes = property(lambda self: 64)

    def _build_linear(self, shape):
        row, col = (1, 0) if self.transposed else (0, 1)
        if self.instr_shape[0] == 32:
            regs = _bits(row, 1, 2) + _bits(row, 8, 2)
            lanes = _bits(col, 1, 5) + [_unit(row, 4)]
        else:
            regs = _bits(row, 1, 2)
            lanes = _bits(col, 1, 4) + _bits(row, 4, 2)
        return _amd_accumulator(shape, regs, lanes, self.instr_shape[:2], self.tiles_per_warp, self.warps_per_cta)


@dataclass(frozen=True)
class AMDWMMALayout(_AMDLayout):
    """Accumulator of RDNA3 (version 1, gfx1100, wave32) v_wmma_f32_16x16x16_{f16,bf16}."""
    version: int = 1
    transposed: bool = False
    warps_per_cta: tuple = (2, 2)
    instr_shape: tuple | None = None
    tiles_per_warp: tuple | None = None
    cga_layout: tuple = ()

    def __post_init__(self):
        super().__post_init__()
        name = "AMDWMMALayout"
        if self.version != 1 or isinstance(self.version, bool):
            raise LayoutError(f"{name} version={self.version!r}: only 1 (RDNA3, gfx1100) is supported; write "
                              "version=1", self.loc)
        instr = _int_tuple((16, 16, 16) if self.instr_shape is None else self.instr_shape,
                           f"{name} instr_shape", self.loc)
        if instr != (16, 16, 16):
            raise LayoutError(f"{name} instr_shape={list(instr)}: RDNA3 WMMA is 16x16x16; write "
                              "instr_shape=[16, 16, 16]", self.loc)
        object.__setattr__(self, "instr_shape", instr)
        self._common_checks(name)

    num_lanes = property(lambda self: 32)

    def _build_linear(self, shape):
        row, col = (1, 0) if self.transposed else (0, 1)
        regs = _bits(row, 2, 3)
        lanes = _bits(col, 1, 4) + [_unit(row, 1)]
        return _amd_accumulator(shape, regs, lanes, (16, 16), self.tiles_per_warp, self.warps_per_cta)


# ---------------------------------------------------------------------- operands
@dataclass(frozen=True)
class DotOperandLayout(DistributedLayout):
    """Operand ``operand_index`` (0: A [M, K], 1: B [K, N]) of the MMA whose accumulator
    layout is ``parent``; ``k_width`` consecutive K elements a thread holds per instruction
    (see ``expected_k_width``). Over a BlockedLayout parent (gl.dot_fma) k_width is unused."""
    operand_index: int = 0
    parent: DistributedLayout | None = None
    k_width: int = 1

    def __post_init__(self):
        super().__post_init__()
        if self.operand_index not in (0, 1) or isinstance(self.operand_index, bool):
            raise LayoutError(f"DotOperandLayout operand_index={self.operand_index!r}: write 0 (A, [M, K]) or "
                              "1 (B, [K, N])", self.loc)
        if not isinstance(self.parent, DistributedLayout) or self.parent.rank != 2:
            raise LayoutError(f"DotOperandLayout parent must be the accumulator's 2-D distributed layout "
                              f"(e.g. a gl.NVMMADistributedLayout), got {self.parent!r}", self.loc)
        if not _pow2(self.k_width):
            raise LayoutError(f"DotOperandLayout k_width={self.k_width!r} must be a power of two (1, 2, 4, ...)",
                              self.loc)
        object.__setattr__(self, "k_width", int(self.k_width))
        object.__setattr__(self, "operand_index", int(self.operand_index))
        p = self.parent
        if isinstance(p, NVMMADistributedLayout) and p.is_wgmma and self.operand_index == 1:
            raise LayoutError("wgmma reads B from shared memory: there is no register layout for it; allocate B "
                              "with gl.allocate_shared_memory(dtype, [K, N], gl.NVMMASharedLayout."
                              "get_default_for([K, N], dtype)) and pass the buffer", self.loc)

    rank = property(lambda self: 2)
    num_warps = property(lambda self: self.parent.num_warps)
    num_lanes = property(lambda self: self.parent.num_lanes)

    @property
    def tile_shape(self):
        m, n = self.parent.tile_shape
        k = self._k_tile()
        return (m, k) if self.operand_index == 0 else (k, n)

    def _k_tile(self) -> int:
        """K one register group of the operand covers."""
        p = self.parent
        if isinstance(p, NVMMADistributedLayout):
            return 8 * self.k_width
        if isinstance(p, AMDMFMALayout):
            return self.k_width * (64 // p.instr_shape[0])
        if isinstance(p, AMDWMMALayout):
            return self.k_width
        return 1

    def _lanes_desc(self):
        return f"DotOperandLayout of {self.parent._lanes_desc()}"

    def _warps_desc(self):
        return f"DotOperandLayout of {self.parent._warps_desc()}"

    def _build_linear(self, shape):
        p, kw = self.parent, self.k_width
        kdim, other = (1, 0) if self.operand_index == 0 else (0, 1)
        if isinstance(p, NVMMADistributedLayout):
            tile = (16, 8 * kw) if kdim == 1 else (8 * kw, 8)
            regs, lanes = _nvidia_tile(tile, kw, inner=kdim, outer=other)
            warps = []
            for d in p.warp_order():  # the parent's warp numbering; warps along K hold copies
                n = _log2(p.warps_per_cta[d])
                warps += [(0, 0)] * n if d == kdim else _bits(d, tile[d], n)
            full = list(tile)
            full[other] *= p.warps_per_cta[other]
            return _fit(shape, full, regs, lanes, warps, (kdim, other))
        if isinstance(p, (AMDMFMALayout, AMDWMMALayout)):
            nonk = p.instr_shape[other]
            regs = _bits(kdim, 1, _log2(kw))
            if isinstance(p, AMDWMMALayout):
                lanes = _bits(other, 1, 4) + [(0, 0)]  # lanes 16..31 hold copies of 0..15
            else:
                lanes = _bits(other, 1, _log2(nonk)) + _bits(kdim, kw, _log2(64 // nonk))
            _repeat(regs, kdim, self._k_tile(), shape[kdim])
            regs += _bits(other, nonk, _log2(p.tiles_per_warp[other]))
            step = nonk * p.tiles_per_warp[other]
            warps = []
            for d in (1, 0):
                n = _log2(p.warps_per_cta[d])
                warps += [(0, 0)] * n if d == kdim else _bits(d, step, n)
            full = [0, 0]
            full[kdim], full[other] = shape[kdim], step * p.warps_per_cta[other]
            return _fit(shape, full, regs, lanes, warps, (other,))
        if isinstance(p, BlockedLayout):  # gl.dot_fma: numbered as Triton numbers it
            return _fma_operand(p, shape, kdim)
        # any other parent: the parent's threads along the operand's own dim, every K element
        # in each thread's registers
        along = (shape[0], 1) if kdim == 1 else (1, shape[1])
        base = p._linear_cached(along)
        kregs = _bits(kdim, 1, _log2(shape[kdim]))
        return LinearLayout(tuple(shape), tuple(kregs) + base.reg_bases, base.lane_bases, base.warp_bases)


def _fma_operand(p: BlockedLayout, shape, kdim) -> LinearLayout:
    """The parent's blocks with the whole K in each thread: registers walk the parent's
    order (K's block being all of K), lanes and warps along K hold copies, then the blocks
    repeat along the other dim."""
    regs, lanes, warps = [], [], []
    for d in p.order:
        regs += _bits(d, 1, _log2(shape[d] if d == kdim else p.size_per_thread[d]))
    for d in p.order:
        n = _log2(p.threads_per_warp[d])
        lanes += [(0, 0)] * n if d == kdim else _bits(d, p.size_per_thread[d], n)
    for d in p.order:
        n = _log2(p.warps_per_cta[d])
        warps += [(0, 0)] * n if d == kdim else _bits(d, p.size_per_thread[d] * p.threads_per_warp[d], n)
    tile = list(p.tile_shape)
    tile[kdim] = shape[kdim]
    return _fit(shape, tile, regs, lanes, warps, [d for d in p.order if d != kdim])


# ------------------------------------------------------------------ for op rules
def mma_instr_shape(parent, element_bits: int) -> tuple[int, int, int]:
    """(M, N, K) of one instruction of the MMA whose accumulator layout is ``parent``, for
    operands of ``element_bits`` bits: mma.sync m16n8k{8,16,32}, wgmma m64nNk{8,16,32}, MFMA
    per the CDNA2/CDNA3 tables (the layout's instr_shape K where it names one, which must be
    an MFMA of that width), WMMA 16x16x16. (1, 1, 1) for other parents (FMA dots)."""
    loc = user_location()
    if isinstance(parent, NVMMADistributedLayout):
        k = {8: 32, 16: 16, 32: 8}.get(element_bits)
        if k is None:
            raise LayoutError(f"no NVIDIA MMA takes {element_bits}-bit operands; use 16-bit (f16, bf16), "
                              "32-bit (tf32) or 8-bit (int8, fp8) inputs", loc)
        return (64, parent.instr_shape[1], k) if parent.is_wgmma else (16, 8, k)
    if isinstance(parent, AMDMFMALayout):
        m = parent.instr_shape[0]
        ks = _MFMA_K[parent.version].get((m, element_bits))
        if ks is None:
            raise LayoutError(f"no {m}x{m} MFMA takes {element_bits}-bit operands; use 16-bit (f16, bf16), "
                              "32-bit (f32) or 8-bit (int8, fp8) inputs", loc)
        k = parent.instr_shape[2] if len(parent.instr_shape) == 3 else ks[0]
        if k not in ks:
            raise LayoutError(f"AMDMFMALayout instr_shape={list(parent.instr_shape)}: version {parent.version} "
                              f"has no {m}x{m}x{k} MFMA for {element_bits}-bit operands; write instr_shape="
                              f"[{m}, {m}, {ks[0]}]", loc, notes=(f"layout written at {parent.loc}",)
                              if parent.loc else ())
        return (m, m, k)
    if isinstance(parent, AMDWMMALayout):
        if element_bits != 16:
            raise LayoutError(f"RDNA3 WMMA takes 16-bit operands (f16, bf16), not {element_bits}-bit ones", loc)
        return (16, 16, 16)
    return (1, 1, 1)


def expected_k_width(parent, element_bits: int) -> int:
    """The k_width a DotOperandLayout over ``parent`` needs for operands of ``element_bits``:
    the consecutive K elements one thread holds per instruction.

    - mma.sync / wgmma: 32 bits' worth, 32 // bits: 2 for f16/bf16, 1 for tf32, 4 for 8-bit.
    - MFMA: the instruction's K split over the lane groups: K // 2 for 32x32 (f16: 4,
      CDNA3 int8/fp8: 8, f32: 1), K // 4 for 16x16 (the same values).
    - RDNA3 WMMA: 16 (each lane holds its row's whole K).
    - any other parent (gl.dot_fma): 1, though any positive power of two is accepted."""
    if isinstance(parent, NVMMADistributedLayout):
        mma_instr_shape(parent, element_bits)
        return 32 // element_bits
    if isinstance(parent, AMDMFMALayout):
        m, _, k = mma_instr_shape(parent, element_bits)
        return k // (64 // m)
    if isinstance(parent, AMDWMMALayout):
        mma_instr_shape(parent, element_bits)
        return 16
    return 1


def warp_tile(parent) -> tuple[int, int]:
    """The [M, N] block one repetition of the accumulator layout covers (all warps, one
    register group): tensor shapes must be multiples of it, or the layout broadcasts."""
    return tuple(parent.tile_shape)

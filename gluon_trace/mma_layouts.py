"""Register layouts of the matrix instructions, as linear layouts.

Each layout is built from its instruction's fragment map (one warp's tile) and then tiled
over warps and repeated over registers to cover the tensor, in the order Triton uses (so a
Gluon user gets the same register numbering):

- ``NVMMADistributedLayout`` version [2, 0]: the accumulator of ``mma.sync.m16n8k*`` (PTX ISA,
  "Matrix Fragments for mma.m16n8k16": c0/c1 at row groupID, columns 2*threadID_in_group + {0,1};
  c2/c3 eight rows below). Version [3, 0]: the ``wgmma.mma_async`` accumulator ("Matrix
  Fragments for wgmma .m64nNk16"): each warp of a warpgroup owns 16 rows, a thread N/2 values.
  Warps of an mma.sync layout are numbered row-major (N first), those of a wgmma layout M first
  (the instruction fixes it).
- ``DotOperandLayout``: the A ([M, K]) and B ([K, N]) fragments of the MMA whose accumulator is
  ``parent``; ``k_width`` consecutive K elements per register group (32 // bits for mma.sync;
  4 for 16-bit MFMA, 16 for RDNA3 WMMA). Warps along the other operand's dim hold copies. For a
  ``BlockedLayout`` parent (``gl.dot_fma``) each thread holds all of K.
- ``AMDMFMALayout``: ``v_mfma_*`` accumulators (CDNA3 ISA, "Matrix fused multiply-add
  outputs"): 32x32: lane % 32 is the column, rows 8*(r // 4) + 4*(lane // 32) + r % 4; 16x16:
  lane % 16 the column, rows 4*(lane // 16) + r. ``transposed`` swaps rows and columns.
- ``AMDWMMALayout``: RDNA3 ``v_wmma_f32_16x16x16_*`` (wave32): lane % 16 the column, rows
  2*r + lane // 16; A and B are replicated in lanes 16..31.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import LayoutError
from .layouts import DistributedLayout, LinearLayout, _add_to_basis, _int_tuple, _pack

__all__ = ["NVMMADistributedLayout", "DotOperandLayout", "AMDMFMALayout", "AMDWMMALayout",
           "mma_instr_shape", "expected_k_width", "warp_tile"]


def _log2(x: int) -> int:
    return x.bit_length() - 1


def _unit(rank: int, d: int, v: int) -> tuple[int, ...]:
    return tuple(v if e == d else 0 for e in range(rank))


def _bits(rank, d, start, count):
    """``count`` bases along ``d`` doubling from ``start``."""
    return [_unit(rank, d, start << i) for i in range(count)]


def _fit(shape, tile, regs, lanes, warps, rep_order) -> LinearLayout:
    """Tile bases (covering ``tile``) made to fit ``shape``: repeated in registers along the
    dims in ``rep_order`` where the shape is bigger; cut (broadcast lanes/warps, dropped
    registers) where it is smaller."""
    rank = len(shape)
    regs = list(regs)
    for d in rep_order:
        pos = tile[d]
        while pos < shape[d]:
            regs.append(_unit(rank, d, pos))
            pos <<= 1
    mask = [s - 1 for s in shape]

    def cut(b):
        return tuple(c & m if c < s else 0 for c, m, s in zip(b, mask, shape))
    kept, basis = [], {}
    for b in map(cut, regs):
        if any(b) and _add_to_basis(_pack(b, shape), basis):
            kept.append(b)
    return LinearLayout(tuple(shape), tuple(kept), tuple(map(cut, lanes)), tuple(map(cut, warps)))


def _warp_bases(rank, warps_per_cta, order, step):
    """Warp bases: warp-id bits along ``order`` (first dim fastest), each dim stepping by
    ``step[d]`` (the warp tile)."""
    out = []
    for d in order:
        out += _bits(rank, d, step[d], _log2(warps_per_cta[d]))
    return out


def _check_pow2_list(values, what, loc):
    for v in values:
        if v <= 0 or v & (v - 1):
            raise LayoutError(f"{what}={list(values)} must hold powers of two", loc)


# ------------------------------------------------------------------------- NVIDIA
@dataclass(frozen=True)
class NVMMADistributedLayout(DistributedLayout):
    version: tuple = (2, 0)
    warps_per_cta: tuple = (4, 1)
    instr_shape: tuple = (16, 8)
    cga_layout: tuple = ()
    ctas_per_cga: tuple | None = None
    cta_split_num: tuple | None = None
    cta_order: tuple | None = None

    def __post_init__(self):
        super().__post_init__()
        for n in ("version", "warps_per_cta", "instr_shape"):
            object.__setattr__(self, n, _int_tuple(getattr(self, n), f"NVMMADistributedLayout {n}", self.loc))
        object.__setattr__(self, "cga_layout", tuple(tuple(b) for b in self.cga_layout))
        if self.version[0] not in (2, 3):
            raise LayoutError(f"NVMMADistributedLayout version={list(self.version)}: use [2, 0] (mma.sync) "
                              "or [3, 0] (wgmma)", self.loc)
        if len(self.warps_per_cta) != 2:
            raise LayoutError("NVMMADistributedLayout warps_per_cta must have 2 entries [M, N]", self.loc)
        _check_pow2_list(self.warps_per_cta, "NVMMADistributedLayout warps_per_cta", self.loc)
        if self.version[0] == 2 and self.instr_shape != (16, 8):
            raise LayoutError(f"mma.sync's accumulator tile is instr_shape=[16, 8], got {list(self.instr_shape)}",
                              self.loc)
        if self.version[0] == 3:
            if len(self.instr_shape) != 3 or self.instr_shape[0] != 16:
                raise LayoutError(f"wgmma's instr_shape is [16, N, K], got {list(self.instr_shape)}", self.loc)
            n = self.instr_shape[1]
            if n % 8 or not 8 <= n <= 256 or n & (n - 1):
                raise LayoutError(f"wgmma's N = {n} must be a power of two in [8, 256] here", self.loc)
            if self.num_warps % 4:
                raise LayoutError(f"a wgmma layout needs whole warpgroups: warps_per_cta="
                                  f"{list(self.warps_per_cta)} has {self.num_warps} warps, not a multiple of 4",
                                  self.loc)
            if self.warps_per_cta[0] % 4:
                raise LayoutError("wgmma splits each warpgroup along M: warps_per_cta[0] must be a multiple "
                                  "of 4", self.loc)

    rank = property(lambda self: 2)
    num_warps = property(lambda self: math.prod(self.warps_per_cta))
    num_lanes = property(lambda self: 32)

    @property
    def is_wgmma(self) -> bool:
        return self.version[0] == 3

    @property
    def warp_tile_shape(self) -> tuple[int, int]:
        return (16, self.instr_shape[1] if self.is_wgmma else 8)

    @property
    def tile_shape(self):
        m, n = self.warp_tile_shape
        return (m * self.warps_per_cta[0], n * self.warps_per_cta[1])

    def warp_order(self):
        return (0, 1) if self.is_wgmma else (1, 0)

    def _build_linear(self, shape):
        m, n = self.warp_tile_shape
        regs, lanes = _nvidia_tile(2, (m, n), 2, inner=1, outer=0)
        warps = _warp_bases(2, self.warps_per_cta, self.warp_order(), (m, n))
        return _fit(shape, self.tile_shape, regs, lanes, warps, (1, 0))


def _nvidia_tile(rank, tile, k_width, inner, outer):
    """One warp's fragment: k_width registers and 4 lanes along ``inner``, 8 lanes along
    ``outer``, then registers repeating along ``outer`` and ``inner``."""
    m, n = tile[outer], tile[inner]
    regs = _bits(rank, inner, 1, _log2(k_width))
    lanes = _bits(rank, inner, k_width, 2) + _bits(rank, outer, 1, 3)
    regs += _bits(rank, outer, 8, _log2(m // 8))
    regs += _bits(rank, inner, 4 * k_width, _log2(n // (4 * k_width)))
    return regs, lanes


# ----------------------------------------------------------------------------- AMD
_MFMA_K = {  # (M, element bits) -> K of the instruction, CDNA3 (gfx942)
    (32, 16): 8, (16, 16): 16, (32, 8): 16, (16, 8): 32, (32, 32): 2, (16, 32): 4,
}
_MFMA_K_CDNA2 = {(32, 16): 8, (16, 16): 16, (32, 8): 8, (16, 8): 16, (32, 32): 2, (16, 32): 4}


@dataclass(frozen=True)
class AMDMFMALayout(DistributedLayout):
    version: int = 3
    instr_shape: tuple = (32, 32, 8)
    transposed: bool = False
    warps_per_cta: tuple = (2, 2)
    element_bitwidth: int | None = None
    tiles_per_warp: tuple | None = None
    cga_layout: tuple = ()

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "instr_shape", _int_tuple(self.instr_shape, "AMDMFMALayout instr_shape", self.loc))
        object.__setattr__(self, "warps_per_cta", _int_tuple(self.warps_per_cta, "AMDMFMALayout warps_per_cta",
                                                             self.loc))
        object.__setattr__(self, "transposed", bool(self.transposed))
        object.__setattr__(self, "cga_layout", tuple(tuple(b) for b in self.cga_layout))
        if self.tiles_per_warp is not None:
            object.__setattr__(self, "tiles_per_warp", _int_tuple(self.tiles_per_warp, "tiles_per_warp", self.loc))
        if self.version not in (2, 3, 4):
            raise LayoutError(f"AMDMFMALayout version={self.version!r}: 2 (CDNA2, gfx90a), 3 (CDNA3, gfx942) "
                              "or 4 (CDNA4)", self.loc)
        if len(self.instr_shape) < 2 or self.instr_shape[:2] not in ((32, 32), (16, 16)):
            raise LayoutError(f"AMDMFMALayout instr_shape={list(self.instr_shape)}: [32, 32, K] or [16, 16, K]",
                              self.loc)
        if len(self.warps_per_cta) != 2:
            raise LayoutError("AMDMFMALayout warps_per_cta must have 2 entries [M, N]", self.loc)
        _check_pow2_list(self.warps_per_cta, "AMDMFMALayout warps_per_cta", self.loc)

    rank = property(lambda self: 2)
    num_warps = property(lambda self: math.prod(self.warps_per_cta))
    num_lanes = property(lambda self: 64)
    tile_shape = property(lambda self: (self.instr_shape[0] * self.warps_per_cta[0],
                                        self.instr_shape[1] * self.warps_per_cta[1]))

    def _build_linear(self, shape):
        mdim = self.instr_shape[0]
        row, col = (1, 0) if self.transposed else (0, 1)
        if mdim == 32:
            regs = _bits(2, row, 1, 2) + _bits(2, row, 8, 2)
            lanes = _bits(2, col, 1, 5) + [_unit(2, row, 4)]
        else:
            regs = _bits(2, row, 1, 2)
            lanes = _bits(2, col, 1, 4) + _bits(2, row, 4, 2)
        warps = _warp_bases(2, self.warps_per_cta, (1, 0), (mdim, mdim))
        return _fit(shape, self.tile_shape, regs, lanes, warps, (1, 0))


@dataclass(frozen=True)
class AMDWMMALayout(DistributedLayout):
    version: int = 1
    transposed: bool = False
    warps_per_cta: tuple = (2, 2)
    instr_shape: tuple = (16, 16, 16)
    cga_layout: tuple = ()

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "warps_per_cta", _int_tuple(self.warps_per_cta, "AMDWMMALayout warps_per_cta",
                                                             self.loc))
        object.__setattr__(self, "instr_shape", _int_tuple(self.instr_shape, "AMDWMMALayout instr_shape", self.loc))
        object.__setattr__(self, "transposed", bool(self.transposed))
        object.__setattr__(self, "cga_layout", tuple(tuple(b) for b in self.cga_layout))
        if self.version != 1:
            raise LayoutError(f"AMDWMMALayout version={self.version!r}: only 1 (RDNA3, gfx1100) is supported",
                              self.loc)
        if self.instr_shape != (16, 16, 16):
            raise LayoutError("RDNA3 WMMA is 16x16x16: instr_shape=[16, 16, 16]", self.loc)
        if len(self.warps_per_cta) != 2:
            raise LayoutError("AMDWMMALayout warps_per_cta must have 2 entries [M, N]", self.loc)
        _check_pow2_list(self.warps_per_cta, "AMDWMMALayout warps_per_cta", self.loc)

    rank = property(lambda self: 2)
    num_warps = property(lambda self: math.prod(self.warps_per_cta))
    num_lanes = property(lambda self: 32)
    tile_shape = property(lambda self: (16 * self.warps_per_cta[0], 16 * self.warps_per_cta[1]))

    def _build_linear(self, shape):
        row, col = (1, 0) if self.transposed else (0, 1)
        regs = _bits(2, row, 2, 3)
        lanes = _bits(2, col, 1, 4) + [_unit(2, row, 1)]
        warps = _warp_bases(2, self.warps_per_cta, (1, 0), (16, 16))
        return _fit(shape, self.tile_shape, regs, lanes, warps, (1, 0))


# ---------------------------------------------------------------------- operands
@dataclass(frozen=True)
class DotOperandLayout(DistributedLayout):
    operand_index: int = 0
    parent: DistributedLayout | None = None
    k_width: int = 1

    def __post_init__(self):
        super().__post_init__()
        if self.operand_index not in (0, 1):
            raise LayoutError(f"DotOperandLayout operand_index={self.operand_index!r}: 0 (A) or 1 (B)", self.loc)
        if not isinstance(self.parent, DistributedLayout) or self.parent.rank != 2:
            raise LayoutError(f"DotOperandLayout parent must be a 2-D distributed layout (the accumulator's), "
                              f"got {self.parent!r}", self.loc)
        if isinstance(self.k_width, bool) or not isinstance(self.k_width, int) or self.k_width <= 0 \
                or self.k_width & (self.k_width - 1):
            raise LayoutError(f"DotOperandLayout k_width={self.k_width!r} must be a power of two", self.loc)
        p = self.parent
        if isinstance(p, NVMMADistributedLayout) and p.is_wgmma and self.operand_index == 1:
            raise LayoutError("wgmma reads B from shared memory: there is no register layout for it; allocate B "
                              "with gl.NVMMASharedLayout and pass the buffer", self.loc)

    rank = property(lambda self: 2)
    num_warps = property(lambda self: self.parent.num_warps)
    num_lanes = property(lambda self: self.parent.num_lanes)

    @property
    def tile_shape(self):
        m, n = self.parent.tile_shape
        k = self._instr_k()
        return (m, k) if self.operand_index == 0 else (k, n)

    def _instr_k(self) -> int:
        p = self.parent
        if isinstance(p, NVMMADistributedLayout):
            return 8 * self.k_width
        if isinstance(p, AMDMFMALayout):
            return self.k_width * (2 if p.instr_shape[0] == 32 else 4)
        if isinstance(p, AMDWMMALayout):
            return 16
        return 1

    def _lanes_desc(self):
        return f"DotOperandLayout of {self.parent._lanes_desc()}"

    def _warps_desc(self):
        return f"DotOperandLayout of {self.parent._warps_desc()}"

    def _build_linear(self, shape):
        p, op, kw = self.parent, self.operand_index, self.k_width
        kdim, other = (1, 0) if op == 0 else (0, 1)
        if isinstance(p, NVMMADistributedLayout):
            # A: [16, 8 * kw] per warp; B: [8 * kw, 8] (mma.sync only)
            tile = (16, 8 * kw) if op == 0 else (8 * kw, 8)
            regs, lanes = _nvidia_tile(2, tile, kw, inner=kdim, outer=other)
            step = (16, 8 * kw) if op == 0 else (8 * kw, 8)
            warps = []
            for d in p.warp_order():
                n = _log2(p.warps_per_cta[d])
                warps += [(0, 0)] * n if d == kdim else _bits(2, d, step[d], n)
            full = (tile[0] * (p.warps_per_cta[0] if op == 0 else 1),
                    tile[1] * (p.warps_per_cta[1] if op == 1 else 1))
            return _fit(shape, full, regs, lanes, warps, (kdim, other))
        if isinstance(p, AMDMFMALayout):
            mdim = p.instr_shape[0]
            regs = _bits(2, kdim, 1, _log2(kw))
            if mdim == 32:
                lanes = _bits(2, other, 1, 5) + [_unit(2, kdim, kw)]
                k = 2 * kw
            else:
                lanes = _bits(2, other, 1, 4) + _bits(2, kdim, kw, 2)
                k = 4 * kw
            warps = []
            for d in (1, 0):
                n = _log2(p.warps_per_cta[d])
                warps += [(0, 0)] * n if d == kdim else _bits(2, d, mdim, n)
            full = (mdim * p.warps_per_cta[0], k) if op == 0 else (k, mdim * p.warps_per_cta[1])
            return _fit(shape, full, regs, lanes, warps, (kdim, other))
        if isinstance(p, AMDWMMALayout):
            regs = _bits(2, kdim, 1, _log2(kw))
            lanes = _bits(2, other, 1, 4) + [(0, 0)]  # lanes 16..31 repeat 0..15 (RDNA3 needs both halves)
            warps = []
            for d in (1, 0):
                n = _log2(p.warps_per_cta[d])
                warps += [(0, 0)] * n if d == kdim else _bits(2, d, 16, n)
            full = (16 * p.warps_per_cta[0], kw) if op == 0 else (kw, 16 * p.warps_per_cta[1])
            return _fit(shape, full, regs, lanes, warps, (kdim, other))
        # any other parent (a BlockedLayout for gl.dot_fma): the parent's threads along the
        # operand's own dim, every K element in each thread's registers
        along = (shape[0], 1) if op == 0 else (1, shape[1])
        base = p._linear_cached(along)
        kregs = _bits(2, kdim, 1, _log2(shape[kdim]))
        return LinearLayout(tuple(shape), tuple(kregs) + base.reg_bases, base.lane_bases, base.warp_bases)


# ------------------------------------------------------------------ for op rules
def mma_instr_shape(parent, element_bits: int) -> tuple[int, int, int]:
    """(M, N, K) of one instruction of the MMA whose accumulator layout is ``parent``."""
    if isinstance(parent, NVMMADistributedLayout):
        k = 256 // element_bits if element_bits in (8, 16) else 8 if element_bits == 32 else None
        if k is None:
            raise LayoutError(f"no NVIDIA MMA takes {element_bits}-bit operands")
        if parent.is_wgmma:
            return (64, parent.instr_shape[1], k)
        return (16, 8, k)
    if isinstance(parent, AMDMFMALayout):
        table = _MFMA_K if parent.version >= 3 else _MFMA_K_CDNA2
        k = table.get((parent.instr_shape[0], element_bits))
        if k is None:
            raise LayoutError(f"no {parent.instr_shape[0]}x{parent.instr_shape[0]} MFMA takes {element_bits}-bit "
                              "operands")
        return (parent.instr_shape[0], parent.instr_shape[1], k)
    if isinstance(parent, AMDWMMALayout):
        if element_bits != 16:
            raise LayoutError("RDNA3 WMMA takes 16-bit operands (f16, bf16)")
        return (16, 16, 16)
    return (1, 1, 1)


def expected_k_width(parent, element_bits: int) -> int:
    """The k_width a DotOperandLayout over ``parent`` needs for operands of ``element_bits``:
    consecutive K elements one thread holds per instruction (32 bits' worth for mma.sync/wgmma,
    the whole per-lane K slice for MFMA, all 16 for RDNA3 WMMA)."""
    if isinstance(parent, NVMMADistributedLayout):
        return max(32 // element_bits, 1)
    if isinstance(parent, AMDMFMALayout):
        m, _, k = mma_instr_shape(parent, element_bits)
        return k // (2 if m == 32 else 4)
    if isinstance(parent, AMDWMMALayout):
        return 16
    return 1


def warp_tile(parent) -> tuple[int, int]:
    """The [M, N] block one repetition of the accumulator layout covers."""
    return tuple(parent.tile_shape)

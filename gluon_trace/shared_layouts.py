"""Shared-memory layouts: where each element of a buffer lives in the allocation.

Every shared layout answers one question, ``offsets(shape, element_bits)``: the element
offset of each logical coordinate (a numpy array of ``shape``). The interpreter addresses
buffers through it, the allocator sizes them with ``alloc_elements``, and the pictures (which
bank each element lands in) come from it. Swizzles are XORs of offset bits with row bits, so
for the unpadded layouts the map is GF(2)-linear in the coordinate bits, like the distributed
layouts (``to_linear`` gives offset bit -> coordinate bases).

- ``SwizzledSharedLayout(vec, per_phase, max_phase, order)``: Triton's swizzled encoding.
  Within a row (dim ``order[1]``) of the contiguous dim (``order[0]``), groups of ``vec``
  elements are XORed with ``(row // per_phase) % max_phase``.
- ``NVMMASharedLayout(swizzle_byte_width, element_bitwidth, rank, transposed)``: the layout
  TMA writes and wgmma reads: the contiguous dim is cut into column blocks of the swizzle
  width (16 bytes without swizzle); within a block, rows of that width, and the 16-byte chunk
  ``c`` of row ``r`` is stored at chunk ``c ^ ((r // (128 // W)) % (W // 16))`` (the
  CUTLASS ``Swizzle<log2(W/16), 4, 3>`` pattern of the PTX ISA's swizzling modes).
- ``PaddedSharedLayout``: a linear order plus ``padding`` elements after every ``interval``.
- ``MBarrierLayout()``: the trivial layout of an mbarrier array.
"""
from __future__ import annotations

import functools
import html
import math
from dataclasses import dataclass, field

import numpy as np

from .errors import LayoutError, SourceLoc, user_location

__all__ = ["SharedLayout", "SwizzledSharedLayout", "NVMMASharedLayout", "PaddedSharedLayout",
           "MBarrierLayout"]


def _ints(value, what, loc) -> tuple[int, ...]:
    try:
        items = tuple(value)
    except TypeError:
        raise LayoutError(f"{what} must be a list of ints, got {value!r}", loc) from None
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise LayoutError(f"{what} must be a list of ints, got {list(items)!r}", loc)
    return tuple(int(v) for v in items)


def _pow2(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x > 0 and x & (x - 1) == 0


def _row_major(shape, order) -> np.ndarray:
    """Linear index of each coordinate when dim order[0] varies fastest."""
    idx = np.indices(shape, dtype=np.int64) if shape else np.zeros((0,), np.int64)
    out = np.zeros(shape, np.int64)
    stride = 1
    for d in order:
        out += idx[d] * stride
        stride *= shape[d]
    return out


@dataclass(frozen=True)
class SharedLayout:
    """Base of shared layouts; ``loc`` (where it was written) is not part of equality."""
    loc: SourceLoc | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "loc", user_location(2))

    @property
    def rank(self) -> int:
        raise NotImplementedError

    def verify(self, shape, element_bits: int, loc=None) -> None:
        loc = loc if loc is not None else user_location(2)
        shape = _ints(shape, "shape", loc)
        if len(shape) != self.rank:
            raise LayoutError(f"{self!r} has rank {self.rank}, the buffer's swizzled dims are {list(shape)}",
                              loc)
        if not all(_pow2(s) for s in shape):
            raise LayoutError(f"shared tile {list(shape)} must have power-of-two dims", loc)

    def offsets(self, shape, element_bits: int) -> np.ndarray:
        return self._offsets(tuple(int(s) for s in shape), int(element_bits))

    @functools.lru_cache(maxsize=256)
    def _offsets(self, shape: tuple, bits: int) -> np.ndarray:
        out = np.ascontiguousarray(self._build(shape, bits), dtype=np.int64)
        out.flags.writeable = False
        return out

    def _build(self, shape, bits) -> np.ndarray:
        raise NotImplementedError

    def alloc_elements(self, shape, element_bits: int) -> int:
        return int(self.offsets(shape, element_bits).max()) + 1 if math.prod(shape) else 0

    def banks(self, shape, element_bits: int) -> np.ndarray:
        """The 4-byte bank (0..31) of each element's first byte."""
        return (self.offsets(shape, element_bits) * max(element_bits // 8, 1) // 4) % 32

    def to_linear(self, shape, element_bits: int) -> tuple[tuple[int, ...], ...]:
        """For each offset bit, the coordinate it moves to (GF(2)-linear layouts only)."""
        offs = self.offsets(shape, element_bits)
        n = int(offs.size)
        inv = np.empty((n, len(shape)), np.int64)
        flat = offs.reshape(-1)
        if flat.max() + 1 != n:
            raise LayoutError(f"{self!r} is not a linear layout (it pads the allocation)")
        inv[flat] = np.stack(np.unravel_index(np.arange(n), shape), axis=1)
        return tuple(tuple(int(c) for c in inv[1 << b]) for b in range(n.bit_length() - 1))

    def describe(self, shape, element_bits: int = 16) -> str:
        """Which bank each element lands in, as rows of the last two dims."""
        shape = tuple(shape)
        banks = self.banks(shape, element_bits)
        offs = self.offsets(shape, element_bits)
        view = banks.reshape((-1, shape[-1])) if len(shape) > 1 else banks.reshape(1, -1)
        ov = offs.reshape(view.shape)
        lines = [f"{self!r} on {list(shape)} x {element_bits}-bit: bank (offset) of each element"]
        for r in range(view.shape[0]):
            lines.append(" ".join(f"{b:2d}({o})" for b, o in zip(view[r], ov[r])))
        return "\n".join(lines)

    def html(self, shape, element_bits: int = 16) -> str:
        shape = tuple(shape)
        banks = self.banks(shape, element_bits)
        view = banks.reshape((-1, shape[-1])) if len(shape) > 1 else banks.reshape(1, -1)
        rows = []
        for r in range(view.shape[0]):
            cells = "".join(f'<td style="background:hsl({int(b) * 360 // 32},70%,80%);padding:1px 3px">'
                            f"{int(b)}</td>" for b in view[r])
            rows.append(f"<tr><th>{r}</th>{cells}</tr>")
        return (f"<div><code>{html.escape(repr(self))}</code>: bank of each element</div>"
                '<table style="border-collapse:collapse;font-family:monospace;font-size:11px">'
                + "".join(rows) + "</table>")


@dataclass(frozen=True)
class SwizzledSharedLayout(SharedLayout):
    vec: int = 1
    per_phase: int = 1
    max_phase: int = 1
    order: tuple = (0,)
    cga_layout: tuple = ()

    def __post_init__(self):
        super().__post_init__()
        for n in ("vec", "per_phase", "max_phase"):
            if not _pow2(getattr(self, n)):
                raise LayoutError(f"SwizzledSharedLayout {n}={getattr(self, n)!r} must be a power of two",
                                  self.loc)
        order = _ints(self.order, "SwizzledSharedLayout order", self.loc)
        if sorted(order) != list(range(len(order))) or not order:
            raise LayoutError(f"SwizzledSharedLayout order={list(order)} is not a permutation of its dims",
                              self.loc)
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "cga_layout", tuple(tuple(b) for b in self.cga_layout))

    @property
    def rank(self) -> int:
        return len(self.order)

    def _build(self, shape, bits):
        lin = _row_major(shape, self.order)
        if len(shape) < 2 or self.max_phase == 1:
            return lin
        c_dim, r_dim = self.order[0], self.order[1]
        idx = np.indices(shape, dtype=np.int64)
        cols, rows = shape[c_dim], idx[r_dim]
        phase = ((rows // self.per_phase) % self.max_phase) * self.vec % cols
        c = idx[c_dim]
        return lin - c + (c ^ phase)


@dataclass(frozen=True)
class MBarrierLayout(SwizzledSharedLayout):
    """The layout of an int64 mbarrier array (one barrier per element)."""

    def __init__(self, cga_layout=()):
        super().__init__(1, 1, 1, (0,), tuple(cga_layout))


@dataclass(frozen=True)
class NVMMASharedLayout(SharedLayout):
    swizzle_byte_width: int = 128
    element_bitwidth: int = 16
    rank: int = 2  # type: ignore[assignment]
    transposed: bool = False
    fp4_padded: bool = False
    cga_layout: tuple = ()

    def __post_init__(self):
        super().__post_init__()
        if self.swizzle_byte_width not in (0, 32, 64, 128):
            raise LayoutError(f"NVMMASharedLayout swizzle_byte_width={self.swizzle_byte_width!r} must be "
                              "0, 32, 64 or 128", self.loc)
        if self.element_bitwidth not in (8, 16, 32, 64):
            raise LayoutError(f"NVMMASharedLayout element_bitwidth={self.element_bitwidth!r} must be 8, 16, "
                              "32 or 64", self.loc)
        if not isinstance(self.rank, int) or self.rank < 1:
            raise LayoutError(f"NVMMASharedLayout rank={self.rank!r} must be a positive int", self.loc)
        object.__setattr__(self, "transposed", bool(self.transposed))
        object.__setattr__(self, "cga_layout", tuple(tuple(b) for b in self.cga_layout))

    @staticmethod
    def get_default_for(block_shape, dtype, transposed=False, fp4_padded=False, cga_layout=None):
        """The widest swizzle the block's contiguous dim allows (as Gluon picks it)."""
        shape = [int(getattr(s, "value", s)) for s in block_shape]
        bits = dtype.bits
        contig = shape[0] if transposed else shape[-1]
        contig_bytes = contig * bits // 8
        swizzle = 0
        for w in (128, 64, 32):
            if contig_bytes >= w:
                swizzle = w
                break
        if len(shape) >= 2 and (shape[-1] if transposed else shape[-2]) < 8:
            swizzle = 0  # the swizzle pattern repeats every 8 rows: fewer rows can't hold it
        return NVMMASharedLayout(swizzle, bits, len(shape), transposed, fp4_padded,
                                 tuple(cga_layout or ()))

    def verify(self, shape, element_bits: int, loc=None) -> None:
        loc = loc if loc is not None else user_location(2)
        super().verify(shape, element_bits, loc)
        if element_bits != self.element_bitwidth:
            raise LayoutError(f"NVMMASharedLayout is written for {self.element_bitwidth}-bit elements, the "
                              f"buffer holds {element_bits}-bit ones", loc,
                              notes=("use NVMMASharedLayout.get_default_for(shape, dtype)",))
        contig = shape[0] if self.transposed else shape[-1]
        if self.swizzle_byte_width and contig * element_bits // 8 < self.swizzle_byte_width:
            raise LayoutError(f"a {self.swizzle_byte_width}-byte swizzle needs the contiguous dim to span at "
                              f"least that; it spans {contig * element_bits // 8} bytes", loc,
                              notes=("use NVMMASharedLayout.get_default_for(shape, dtype)",))

    def _build(self, shape, bits):
        e = bits // 8
        if len(shape) == 1:
            return np.arange(shape[0], dtype=np.int64)
        idx = np.indices(shape, dtype=np.int64)
        if self.transposed:
            c, r = idx[0], idx[1]
            cols, rows = shape[0], shape[1]
            lead = idx[2:]
            lead_shape = shape[2:]
        else:
            c, r = idx[-1], idx[-2]
            cols, rows = shape[-1], shape[-2]
            lead = idx[:-2]
            lead_shape = shape[:-2]
        width = self.swizzle_byte_width or 16   # bytes per row of one column block
        per_block = width // e                  # elements per row of a column block
        block = c // per_block
        within = (c % per_block) * e            # byte inside the block row
        chunk = within // 16
        if self.swizzle_byte_width:
            chunk = chunk ^ ((r // (128 // width)) % (width // 16))
        byte = block * (rows * width) + r * width + chunk * 16 + within % 16
        tile = rows * cols * e
        stack = np.zeros(shape, np.int64)
        stride = tile
        for d in range(len(lead_shape) - 1, -1, -1):
            stack += lead[d] * stride
            stride *= lead_shape[d]
        return (byte + stack) // e


@dataclass(frozen=True)
class PaddedSharedLayout(SharedLayout):
    """Elements in ``order`` (fastest first), with ``padding`` extra elements after every
    ``interval`` elements for each (interval, padding) pair."""
    interval_padding_pairs: tuple = ()
    order: tuple = (1, 0)
    shape: tuple | None = None

    def __post_init__(self):
        super().__post_init__()
        pairs = tuple(tuple(_ints(p, "interval_padding_pairs entry", self.loc)) for p in self.interval_padding_pairs)
        for p in pairs:
            if len(p) != 2 or not _pow2(p[0]) or not _pow2(p[1]):
                raise LayoutError(f"PaddedSharedLayout pairs must be [interval, padding] powers of two, got "
                                  f"{[list(q) for q in pairs]}", self.loc)
        if not pairs:
            raise LayoutError("PaddedSharedLayout needs at least one [interval, padding] pair", self.loc)
        object.__setattr__(self, "interval_padding_pairs", pairs)
        order = _ints(self.order, "PaddedSharedLayout order", self.loc)
        if sorted(order) != list(range(len(order))):
            raise LayoutError(f"PaddedSharedLayout order={list(order)} is not a permutation", self.loc)
        object.__setattr__(self, "order", order)
        if self.shape is not None:
            object.__setattr__(self, "shape", _ints(self.shape, "PaddedSharedLayout shape", self.loc))

    @staticmethod
    def with_identity_for(interval_padding_pairs, shape, order):
        return PaddedSharedLayout(tuple(tuple(p) for p in interval_padding_pairs), tuple(order), tuple(shape))

    @property
    def rank(self) -> int:
        return len(self.order)

    def _build(self, shape, bits):
        lin = _row_major(shape, self.order)
        out = lin.copy()
        for interval, pad in self.interval_padding_pairs:
            out += (lin // interval) * pad
        return out

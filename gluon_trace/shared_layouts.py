"""Shared-memory layouts: where each element of a tile lives inside its allocation.

Every shared layout answers, for a concrete tile shape and element width, one question:
the element offset of each logical coordinate (:meth:`SharedLayout.offsets`). The linear
ones (swizzled, NVMMA, explicit) are GF(2)-linear maps from offset bits to coordinates,
the same kind of map as :class:`gluon_trace.layouts.LinearLayout` (see
:class:`SharedLinearLayout`), so a register layout reading a shared layout is a
composition of two linear maps. The padded layout is a linear map followed by padding,
which is not linear; it offers the same API.

Conventions: offsets count elements, not bytes; a tile of rank > 2 stacks whole 2-D
tiles along its leading dims; banks are 32 x 4 bytes. The pictures and the bank-conflict
model (:func:`wavefronts`) are at the end of this module.
"""
from __future__ import annotations

import abc
import functools
import math
from dataclasses import dataclass, field, fields

import numpy as np

from .errors import LayoutError, SourceLoc, user_location
from .layouts import _int_tuple, _is_pow2, _log2, _span

__all__ = [
    "SharedLayout", "SwizzledSharedLayout", "NVMMASharedLayout", "PaddedSharedLayout",
    "MBarrierLayout", "SharedLinearLayout", "WavefrontReport", "wavefronts",
]

NUM_BANKS = 32
BANK_BYTES = 4


def _user_loc() -> SourceLoc | None:
    return user_location(2)


def _plain(value):
    """A gl.constexpr's value (also inside lists); anything else unchanged."""
    if getattr(value, "__gluon_constexpr__", False):
        return _plain(value.value)
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def _bases_tuple(value, what: str, loc) -> tuple[tuple[int, ...], ...]:
    try:
        items = tuple(value)
    except TypeError:
        raise LayoutError(f"{what} must be a list of coordinate lists, got {value!r}", loc) from None
    return tuple(_int_tuple(b, f"{what} entry", loc) for b in items)


def _pow2_arg(value, name: str, cls: str, loc) -> int:
    if not _is_pow2(value):
        raise LayoutError(f"{cls} {name}={value!r} must be a positive power of two (1, 2, 4, 8, ...)", loc)
    return int(value)


def _no_cga(cga_layout, cls: str, loc) -> tuple:
    bases = _bases_tuple(cga_layout or (), f"{cls} cga_layout", loc)
    if bases:
        raise LayoutError(f"{cls} cga_layout (multi-CTA clusters) is not supported; pass cga_layout=[]", loc)
    return bases


def _order_of(order, cls: str, loc) -> tuple[int, ...]:
    order = _int_tuple(order, f"{cls} order", loc)
    if not order or sorted(order) != list(range(len(order))):
        raise LayoutError(f"{cls} order={list(order)} is not a permutation of {list(range(len(order)))}; "
                          "list every dimension once, fastest-varying (contiguous) first", loc)
    return order


def _unit(rank: int, dim: int, value: int) -> tuple[int, ...]:
    return tuple(value if d == dim else 0 for d in range(rank))


def _stacked_bases(shape, order, inner: list) -> list:
    """``inner`` bases for the fastest dims, then one base per bit of every other dim in
    ``order`` (whole tiles stacked above each other)."""
    out = list(inner)
    for d in order:
        out += [_unit(len(shape), d, 1 << k) for k in range(_log2(shape[d]))]
    return out


def bit_fields(images) -> dict:
    """A coordinate's bits' offsets (``images[j]``: the offset of bit j, an XOR-linear layout's
    column) as fields: {(first coordinate bit, count): [first offset bit of each place the field
    lands]}, each field a run of coordinate bits landing on consecutive offset bits. A swizzled
    row lands twice: at row * row bytes and, shifted, on the chunks it XORs; the backends build
    such an address from whole fields (one bit-field extract and a shift each), not bit by bit."""
    runs = []   # [first coordinate bit, count, first offset bit]
    for shift, j in sorted((p - j, j) for j, b in enumerate(images) for p in range(b.bit_length()) if b >> p & 1):
        r = runs[-1] if runs else None
        if r and r[2] - r[0] == shift and r[0] + r[1] == j:
            r[1] += 1
        else:
            runs.append([j, 1, j + shift])
    fields: dict = {}
    for j, k, p in runs:
        fields.setdefault((j, k), []).append(p)
    return fields


def _offsets_from_bases(shape: tuple[int, ...], bases) -> np.ndarray:
    """Invert a bijective linear map offset bits -> coordinates into an array
    ``offsets[coord] = offset``."""
    n = 1 << len(bases)
    out = np.empty(shape, dtype=np.int64)
    if not shape:
        out[()] = 0
        return out
    coords = _span(bases, len(shape))
    out[tuple(coords.T)] = np.arange(n, dtype=np.int64)
    return out


# ------------------------------------------------------------------------- base
@dataclass(frozen=True)
class SharedLayout(abc.ABC):
    """Base of the shared-memory layouts. ``loc`` is where the user wrote the layout
    (not part of equality)."""
    loc: SourceLoc | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "loc", _user_loc())
        for f in fields(self):  # Gluon users pass gl.constexpr values straight through
            if f.init:
                object.__setattr__(self, f.name, _plain(getattr(self, f.name)))

    @property
    @abc.abstractmethod
    def rank(self) -> int: ...

    # ---- what subclasses define
    def _check(self, shape: tuple[int, ...], element_bits: int, loc) -> None:
        """Raise LayoutError for a shape/element width the layout can't hold (beyond rank)."""

    @abc.abstractmethod
    def _build_offsets(self, shape: tuple[int, ...], element_bits: int) -> np.ndarray: ...

    @abc.abstractmethod
    def _offset_bases(self, shape, element_bits) -> tuple:
        """The linear map offset bit -> coordinate (a padded layout: before padding)."""

    # ---- public API
    def _notes(self, loc):
        return (f"layout written at {self.loc}",) if self.loc and self.loc != loc else ()

    def verify(self, shape, element_bits: int, loc=None) -> None:
        """Raise LayoutError unless a buffer of ``shape`` with ``element_bits``-bit
        elements fits this layout."""
        loc = loc if loc is not None else _user_loc()
        name = type(self).__name__
        shape = _int_tuple(shape, "shared buffer shape", loc)
        if len(shape) != self.rank:
            raise LayoutError(f"{name} has rank {self.rank}, but the buffer has shape {list(shape)} "
                              f"(rank {len(shape)}); write a layout with rank {len(shape)}",
                              loc, notes=self._notes(loc))
        if not all(_is_pow2(s) for s in shape):
            raise LayoutError(f"{name}: shared buffer shape {list(shape)} has a dimension that is not a "
                              "power of two; pad the tile to powers of two", loc, notes=self._notes(loc))
        if not isinstance(element_bits, (int, np.integer)) or element_bits <= 0:
            raise LayoutError(f"{name}: element_bits={element_bits!r} must be a positive int", loc)
        try:
            self._check(shape, int(element_bits), loc)
        except LayoutError as e:
            if e.notes or not self._notes(loc):
                raise
            raise LayoutError(e.message, e.loc, notes=self._notes(loc)) from None

    @functools.lru_cache(maxsize=1024)
    def _cached(self, shape: tuple[int, ...], element_bits: int) -> np.ndarray:
        self.verify(shape, element_bits, loc=_user_loc())  # only on a cache miss
        out = self._build_offsets(shape, element_bits)
        out.flags.writeable = False  # shared by every caller through the cache
        return out

    def offsets(self, shape, element_bits: int) -> np.ndarray:
        """Read-only int64 array of ``shape``: the element offset of each coordinate
        inside the allocation."""
        return self._cached(tuple(int(s) for s in shape), int(element_bits))

    def alloc_elements(self, shape, element_bits: int) -> int:
        """Elements the allocation spans (padding included)."""
        return int(self.offsets(shape, element_bits).max(initial=-1)) + 1

    def to_linear(self, shape, element_bits: int) -> "SharedLinearLayout":
        """The linear map offset bits -> coordinates (for a padded layout: its linear part)."""
        shape = tuple(int(s) for s in shape)
        self.verify(shape, element_bits, loc=_user_loc())
        return SharedLinearLayout(self._offset_bases(shape, int(element_bits)), shape=shape)

    def banks(self, shape, element_bits: int) -> np.ndarray:
        """The 4-byte bank (0..31) each element's first byte lands in (allocation base
        assumed 128-byte aligned)."""
        byte = self.offsets(shape, element_bits) * int(element_bits) // 8
        return (byte // BANK_BYTES) % NUM_BANKS

    # ---- pictures and the bank-conflict model (defined at the end of this module)
    def describe(self, shape, element_bits: int) -> str:
        """Text picture: the bank of each element, then its offset."""
        return describe_banks(self, shape, element_bits)

    def html(self, shape, element_bits: int) -> str:
        """HTML picture of the banks (hover an element for its offset)."""
        return html_banks(self, shape, element_bits)

    def plot(self, shape, element_bits: int = 16, ax=None):
        """Which bank each element lands in, as a matplotlib figure."""
        from .layout_plots import plot_banks
        return plot_banks(self.banks(tuple(shape), element_bits),
                          f"{type(self).__name__}: bank of each element ({element_bits}-bit)", ax)

    def wavefronts(self, reg_layout, shape, element_bits: int, num_warps: int,
                   threads_per_warp: int = 32, vector_bytes: int | None = None) -> "WavefrontReport":
        """Bank conflicts of loading/storing a ``reg_layout`` tile; see :func:`wavefronts`."""
        return wavefronts(self, reg_layout, shape, element_bits, num_warps, threads_per_warp, vector_bytes)


# --------------------------------------------------------------- swizzled
@dataclass(frozen=True)
class SwizzledSharedLayout(SharedLayout):
    """Triton's swizzled shared layout. In the 2-D view (columns along ``order[0]``, rows
    along ``order[1]``), row r stores its ``vec``-element groups XORed with
    ``phase(r) = (r // per_phase) % max_phase``; dims after ``order[1]`` stack whole tiles."""
    vec: int
    per_phase: int
    max_phase: int
    order: tuple[int, ...]
    cga_layout: tuple = ()

    def __post_init__(self):
        super().__post_init__()
        cls = type(self).__name__
        for name in ("vec", "per_phase", "max_phase"):
            object.__setattr__(self, name, _pow2_arg(getattr(self, name), name, cls, self.loc))
        object.__setattr__(self, "order", _order_of(self.order, cls, self.loc))
        object.__setattr__(self, "cga_layout", _no_cga(self.cga_layout, cls, self.loc))

    @property
    def rank(self) -> int:
        return len(self.order)

    def __repr__(self):
        return (f"{type(self).__name__}(vec={self.vec}, per_phase={self.per_phase}, "
                f"max_phase={self.max_phase}, order={list(self.order)})")

    def _offset_bases(self, shape, element_bits):
        rank = len(shape)
        col = self.order[0]
        bases = [_unit(rank, col, 1 << k) for k in range(_log2(shape[col]))]
        if rank == 1:
            return tuple(bases)
        row, ncols = self.order[1], shape[col]
        for k in range(_log2(shape[row])):
            r = 1 << k
            phase = (r // self.per_phase) % self.max_phase
            swz = (self.vec * phase) % ncols  # a swizzle past the row wraps (as Triton does)
            bases.append(tuple(r if d == row else (swz if d == col else 0) for d in range(rank)))
        return tuple(_stacked_bases(shape, self.order[2:], bases))

    def _build_offsets(self, shape, element_bits):
        return _offsets_from_bases(shape, self._offset_bases(shape, element_bits))


@dataclass(frozen=True, repr=False)
class MBarrierLayout(SwizzledSharedLayout):
    """The layout of an array of 64-bit mbarriers: one after another."""
    vec: int = 1
    per_phase: int = 1
    max_phase: int = 1
    order: tuple[int, ...] = (0,)
    cga_layout: tuple = ()

    def __repr__(self):
        return "MBarrierLayout()" if self.order == (0,) else f"MBarrierLayout(order={list(self.order)})"


# ------------------------------------------------------------------ NVMMA
_SWIZZLES = (0, 32, 64, 128)


@dataclass(frozen=True)
class NVMMASharedLayout(SharedLayout):
    """The layout TMA writes and wgmma reads. The contiguous dim (the last, or the one
    before it when ``transposed``) is cut into column blocks of ``swizzle_byte_width``
    bytes (16 bytes when 0); each block holds every row, rows one after another. Inside,
    byte address bits [4, 4+b) are XORed with bits [7, 7+b), b = log2(width / 16): the
    hardware's 128/64/32-byte swizzle (CUTLASS Swizzle<b,4,3>), so for a 128-byte
    swizzle the 16-byte chunk c of row r lands at chunk c ^ (r % 8). Leading dims stack."""
    swizzle_byte_width: int
    element_bitwidth: int
    rank: int = 2
    transposed: bool = False
    fp4_padded: bool = False
    cga_layout: tuple = ()

    def __post_init__(self):
        super().__post_init__()
        loc = self.loc
        if self.swizzle_byte_width not in _SWIZZLES or isinstance(self.swizzle_byte_width, bool):
            raise LayoutError(f"NVMMASharedLayout swizzle_byte_width={self.swizzle_byte_width!r} must be one "
                              "of 0, 32, 64, 128 (bytes); NVMMASharedLayout.get_default_for(shape, dtype) "
                              "picks one", loc)
        if self.element_bitwidth not in (8, 16, 32, 64) or isinstance(self.element_bitwidth, bool):
            raise LayoutError(f"NVMMASharedLayout element_bitwidth={self.element_bitwidth!r} must be 8, 16, "
                              "32 or 64 (the element dtype's bits)", loc)
        if isinstance(self.rank, bool) or not isinstance(self.rank, (int, np.integer)) or self.rank < 1:
            raise LayoutError(f"NVMMASharedLayout rank={self.rank!r} must be a positive int (the buffer's rank)",
                              loc)
        if self.fp4_padded and (self.swizzle_byte_width != 128 or self.element_bitwidth != 8):
            raise LayoutError("NVMMASharedLayout fp4_padded=True needs swizzle_byte_width=128 and "
                              "element_bitwidth=8", loc)
        if self.transposed and self.rank < 2:
            raise LayoutError("NVMMASharedLayout transposed=True needs rank >= 2 (it makes dim rank-2 the "
                              "contiguous one)", loc)
        object.__setattr__(self, "swizzle_byte_width", int(self.swizzle_byte_width))
        object.__setattr__(self, "element_bitwidth", int(self.element_bitwidth))
        object.__setattr__(self, "rank", int(self.rank))
        object.__setattr__(self, "transposed", bool(self.transposed))
        object.__setattr__(self, "fp4_padded", bool(self.fp4_padded))
        object.__setattr__(self, "cga_layout", _no_cga(self.cga_layout, "NVMMASharedLayout", loc))

    def __repr__(self):
        extra = ", transposed=True" if self.transposed else ""
        extra += ", fp4_padded=True" if self.fp4_padded else ""
        return (f"NVMMASharedLayout(swizzle_byte_width={self.swizzle_byte_width}, "
                f"element_bitwidth={self.element_bitwidth}, rank={self.rank}{extra})")

    @property
    def order(self) -> tuple[int, ...]:
        """Dims fastest first: the contiguous dim, the row dim, then the stacked ones."""
        r = self.rank
        if r == 1:
            return (0,)
        inner = (r - 2, r - 1) if self.transposed else (r - 1, r - 2)
        return inner + tuple(range(r - 3, -1, -1))

    @staticmethod
    def get_default_for(block_shape, dtype, transposed=False, fp4_padded=False, cga_layout=None):
        """The largest swizzle (128, 64, 32 bytes, else none) the contiguous dim's bytes
        allow, as Gluon picks it (no swizzle for fewer than 8 rows)."""
        loc = _user_loc()
        shape = _int_tuple(_plain(block_shape), "NVMMASharedLayout.get_default_for block_shape", loc)
        dtype, transposed, fp4_padded = _plain(dtype), _plain(transposed), _plain(fp4_padded)
        bits = getattr(dtype, "bits", None)
        if not isinstance(bits, int):
            raise LayoutError(f"NVMMASharedLayout.get_default_for needs a gl dtype (e.g. gl.float16), got "
                              f"{dtype!r}", loc)
        _no_cga(cga_layout, "NVMMASharedLayout", loc)
        if not shape:
            raise LayoutError("NVMMASharedLayout.get_default_for block_shape must have at least one dim", loc)
        contig = len(shape) - 2 if transposed and len(shape) >= 2 else len(shape) - 1
        contig_bytes = shape[contig] * (2 if fp4_padded else 1) * bits // 8
        swizzle = next((s for s in (128, 64, 32) if contig_bytes >= s and contig_bytes % s == 0), 0)
        outer = math.prod(s for d, s in enumerate(shape) if d != contig)
        if len(shape) < 2 or outer < 8:
            swizzle = 0
        return NVMMASharedLayout(swizzle, bits, len(shape), bool(transposed), bool(fp4_padded))

    def _dims(self):
        r = self.rank
        if r == 1:
            return 0, None
        return (r - 2, r - 1) if self.transposed else (r - 1, r - 2)

    def _check(self, shape, element_bits, loc):
        if self.fp4_padded:
            raise LayoutError("NVMMASharedLayout fp4_padded=True (packed fp4 operands) is not supported by "
                              "gluon_trace; use fp4_padded=False", loc)
        if element_bits != self.element_bitwidth:
            raise LayoutError(f"{self!r} is for {self.element_bitwidth}-bit elements but the buffer holds "
                              f"{element_bits}-bit ones; write element_bitwidth={element_bits} (or use "
                              "NVMMASharedLayout.get_default_for(shape, dtype))", loc)
        col, _ = self._dims()
        row_bytes = shape[col] * element_bits // 8
        if self.swizzle_byte_width and row_bytes < self.swizzle_byte_width:
            best = next((s for s in (128, 64, 32) if row_bytes >= s), 0)
            raise LayoutError(f"{self!r}: the contiguous dim {col} of shape {list(shape)} holds {row_bytes} "
                              f"bytes, less than the {self.swizzle_byte_width}-byte swizzle; use "
                              f"swizzle_byte_width={best} (or NVMMASharedLayout.get_default_for)", loc)

    def _offset_bases(self, shape, element_bits):
        rank, ebytes = len(shape), element_bits // 8
        col, row = self._dims()
        width_bytes = self.swizzle_byte_width or 16
        block = min(width_bytes // ebytes, shape[col])  # elements of one row inside a column block
        # Unswizzled: a row of a column block, the block's rows, the further column blocks,
        # then the stacked dims.
        plain = [_unit(rank, col, 1 << k) for k in range(_log2(block))]
        if row is not None:
            plain += [_unit(rank, row, 1 << k) for k in range(_log2(shape[row]))]
        plain += [_unit(rank, col, block << k) for k in range(_log2(shape[col] // block))]
        plain = _stacked_bases(shape, self.order[2:], plain)
        # The swizzle acts on byte addresses (the buffer is aligned to its repeat): address
        # bits [4, 4+b) are XORed with bits [7, 7+b); for one offset bit that moves the
        # element by whole 16-byte chunks along the contiguous dim.
        mask = self.swizzle_byte_width // 16 - 1 if self.swizzle_byte_width else 0
        bases = []
        for i, base in enumerate(plain):
            chunks = (((1 << i) * ebytes) >> 7) & mask
            bases.append(tuple(c ^ (chunks * 16 // ebytes) if d == col else c for d, c in enumerate(base)))
        return tuple(bases)

    def _build_offsets(self, shape, element_bits):
        return _offsets_from_bases(shape, self._offset_bases(shape, element_bits))


# ------------------------------------------------------------------ padded
@dataclass(frozen=True)
class PaddedSharedLayout(SharedLayout):
    """A linear map offset bits -> coordinates (``offset_bases``), then ``padding``
    elements inserted after every ``interval`` elements, for each [interval, padding]
    pair (paddings of several pairs add up)."""
    interval_padding_pairs: tuple[tuple[int, int], ...]
    offset_bases: tuple[tuple[int, ...], ...]
    cga_layout: tuple = ()
    shape: tuple[int, ...] | None = None

    def __post_init__(self):
        super().__post_init__()
        loc, cls = self.loc, "PaddedSharedLayout"
        pairs = _bases_tuple(self.interval_padding_pairs, f"{cls} interval_padding_pairs", loc)
        if not pairs or any(len(p) != 2 for p in pairs):
            raise LayoutError(f"{cls} interval_padding_pairs={[list(p) for p in pairs]} must be a non-empty "
                              "list of [interval, padding] pairs, e.g. [[64, 4]]", loc)
        for interval, padding in pairs:
            _pow2_arg(interval, "interval", cls, loc)
            _pow2_arg(padding, "padding", cls, loc)
        if len({p[0] for p in pairs}) != len(pairs):
            raise LayoutError(f"{cls} interval_padding_pairs={[list(p) for p in pairs]} repeats an interval; "
                              "give each interval once (add the paddings up)", loc)
        object.__setattr__(self, "interval_padding_pairs", pairs)
        if self.shape is None:
            raise LayoutError(f"{cls} needs shape=[...], the buffer shape its offset_bases map into "
                              f"(or use {cls}.with_identity_for(pairs, shape, order))", loc)
        shape = _int_tuple(self.shape, f"{cls} shape", loc)
        if not shape or not all(_is_pow2(s) for s in shape):
            raise LayoutError(f"{cls} shape={list(shape)} must be a non-empty list of powers of two", loc)
        object.__setattr__(self, "shape", shape)
        bases = _bases_tuple(self.offset_bases, f"{cls} offset_bases", loc)
        for b in bases:
            if len(b) != len(shape) or not all(0 <= c < s for c, s in zip(b, shape)):
                raise LayoutError(f"{cls} offset_bases entry {list(b)} is not a coordinate inside shape "
                                  f"{list(shape)}; give {len(shape)} coordinates, each in [0, dim size)", loc)
        object.__setattr__(self, "offset_bases", bases)
        object.__setattr__(self, "cga_layout", _no_cga(self.cga_layout, cls, loc))
        n = math.prod(shape)
        if len(bases) != _log2(n) or len(np.unique(np.ravel_multi_index(
                tuple(_span(bases, len(shape)).T), shape))) != n:
            raise LayoutError(f"{cls} offset_bases {[list(b) for b in bases]} do not reach every element of "
                              f"shape {list(shape)} exactly once; give log2({n}) = {_log2(n)} independent "
                              f"bases (with_identity_for(pairs, shape, order) builds the plain one)", loc)

    @staticmethod
    def with_identity_for(interval_padding_pairs, shape, order, cga_layout=()):
        """Padding over a plain layout of ``shape`` with ``order[0]`` contiguous."""
        loc = _user_loc()
        shape = _int_tuple(_plain(shape), "PaddedSharedLayout.with_identity_for shape", loc)
        order = _order_of(_plain(order), "PaddedSharedLayout.with_identity_for", loc)
        if len(order) != len(shape) or not all(_is_pow2(s) for s in shape):
            raise LayoutError(f"PaddedSharedLayout.with_identity_for: shape {list(shape)} needs power-of-two "
                              f"dims and one order entry per dim, got order={list(order)}", loc)
        return PaddedSharedLayout(interval_padding_pairs, tuple(_stacked_bases(shape, order, [])),
                                  cga_layout, shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self):
        pairs = ", ".join(f"{i}:+{p}" for i, p in self.interval_padding_pairs)
        return f"PaddedSharedLayout([{pairs}], offset_bases={[list(b) for b in self.offset_bases]}, shape={list(self.shape)})"

    def _check(self, shape, element_bits, loc):
        if shape != self.shape:
            raise LayoutError(f"{self!r} was written for shape {list(self.shape)}, but the buffer has shape "
                              f"{list(shape)}; write one for this shape", loc)

    def _offset_bases(self, shape, element_bits):
        return self.offset_bases

    def _build_offsets(self, shape, element_bits):
        linear = _offsets_from_bases(shape, self.offset_bases)
        out = linear.copy()
        for interval, padding in self.interval_padding_pairs:
            out += (linear >> _log2(interval)) << _log2(padding)
        return out


# ---------------------------------------------------------- explicit linear
@dataclass(frozen=True)
class SharedLinearLayout(SharedLayout):
    """An explicit linear map: offset bit i selects ``offset_bases[i]``; the coordinate
    of an offset is the XOR of the bases of its set bits. ``to_linear`` of every linear
    layout returns one, so two layouts are the same map iff their ``to_linear`` are equal.
    ``shape`` defaults to the smallest power-of-two box the bases reach."""
    offset_bases: tuple[tuple[int, ...], ...]
    block_bases: tuple = ()
    alignment: int = 16
    shape: tuple[int, ...] | None = None

    def __post_init__(self):
        super().__post_init__()
        loc, cls = self.loc, "SharedLinearLayout"
        bases = _bases_tuple(self.offset_bases, f"{cls} offset_bases", loc)
        object.__setattr__(self, "block_bases", _no_cga(self.block_bases, cls, loc))
        _pow2_arg(self.alignment, "alignment", cls, loc)
        if self.shape is None:
            if not bases:
                raise LayoutError(f"{cls} needs offset_bases (or shape=[...] for a one-element buffer)", loc)
            rank = len(bases[0])
            ors = [0] * rank
            for b in bases:
                ors = [o | c for o, c in zip(ors, b)]
            shape = tuple(1 << o.bit_length() for o in ors)
        else:
            shape = _int_tuple(self.shape, f"{cls} shape", loc)
        object.__setattr__(self, "shape", shape)
        n = math.prod(shape)
        for b in bases:
            if len(b) != len(shape) or not all(0 <= c < s for c, s in zip(b, shape)):
                raise LayoutError(f"{cls} offset_bases entry {list(b)} is not a coordinate inside shape "
                                  f"{list(shape)}", loc)
        if not all(_is_pow2(s) for s in shape) or len(bases) != _log2(n) or len(np.unique(
                np.ravel_multi_index(tuple(_span(bases, len(shape)).T), shape))) != n:
            raise LayoutError(f"{cls} offset_bases {[list(b) for b in bases]} do not reach every element of "
                              f"shape {list(shape)} exactly once; give log2(elements) independent bases", loc)
        object.__setattr__(self, "offset_bases", bases)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self):
        return f"SharedLinearLayout(offset_bases={[list(b) for b in self.offset_bases]}, shape={list(self.shape)})"

    def _check(self, shape, element_bits, loc):
        if shape != self.shape:
            raise LayoutError(f"{self!r} maps into shape {list(self.shape)}, but the buffer has shape "
                              f"{list(shape)}; write bases for this shape", loc)

    def _offset_bases(self, shape, element_bits):
        return self.offset_bases

    def _build_offsets(self, shape, element_bits):
        return _offsets_from_bases(shape, self.offset_bases)

    def coords(self) -> np.ndarray:
        """int64 (elements, rank): row i is the coordinate at offset i."""
        return _span(self.offset_bases, len(self.shape))


# ------------------------------------------------------------- pictures
def _planes(shape):
    """(title, index of each row's coordinates) per 2-D picture: the last two dims, one
    picture per leading index; 1-D is one row."""
    if len(shape) == 1:
        yield "", [[(j,) for j in range(shape[0])]]
        return
    for lead in np.ndindex(*shape[:-2]):
        title = f"[{', '.join(map(str, lead))}, :, :]" if lead else ""
        yield title, [[lead + (i, j) for j in range(shape[-1])] for i in range(shape[-2])]


def _grid(shape, cell) -> list[str]:
    lines = []
    for title, rows in _planes(shape):
        cells = [[cell(c) for c in row] for row in rows]
        width = max(len(x) for row in cells for x in row)
        width = max(width, len(str(len(rows[0]) - 1)))
        lw = len(str(len(rows) - 1))
        if title:
            lines.append(title)
        lines.append(" " * lw + " " + " ".join(str(j).rjust(width) for j in range(len(rows[0]))))
        lines += [str(i).rjust(lw) + " " + " ".join(x.rjust(width) for x in row) for i, row in enumerate(cells)]
    return lines


def _html_tables(shape, cell_text, cell_style, cell_title) -> str:
    import html as _html
    out = []
    td = "padding:1px 3px;border:1px solid #bbb;"
    for title, rows in _planes(shape):
        out.append('<table style="border-collapse:collapse;font-family:monospace;font-size:11px">')
        if title:
            out.append(f"<caption>{_html.escape(title)}</caption>")
        out.append("<tr><th></th>" + "".join(f"<th>{j}</th>" for j in range(len(rows[0]))) + "</tr>")
        for i, row in enumerate(rows):
            tds = "".join(f'<td style="{td}{cell_style(c)}" title="{_html.escape(cell_title(c))}">'
                          f"{_html.escape(cell_text(c))}</td>" for c in row)
            out.append(f"<tr><th>{i}</th>{tds}</tr>")
        out.append("</table>")
    return "\n".join(out)


def describe_banks(self, shape, element_bits: int) -> str:
    """Which bank each element lands in, then each element's offset (rows: dim -2, columns:
    dim -1; one picture per leading index)."""
    shape = tuple(int(s) for s in shape)
    banks, offs = self.banks(shape, element_bits), self.offsets(shape, element_bits)
    head = (f"{self!r} on {list(shape)} x {element_bits}-bit: {self.alloc_elements(shape, element_bits)} "
            f"elements allocated")
    return "\n".join([head, "bank (0..31) of each element:", *_grid(shape, lambda c: str(banks[c])),
                      "element offset of each element:", *_grid(shape, lambda c: str(offs[c]))])


def html_banks(self, shape, element_bits: int) -> str:
    """An HTML table of the banks (colour: bank; hover: offset and bytes)."""
    import html as _html
    shape = tuple(int(s) for s in shape)
    banks, offs = self.banks(shape, element_bits), self.offsets(shape, element_bits)
    nbytes = max(element_bits // 8, 1)
    head = (f"<div><code>{_html.escape(repr(self))}</code> on {list(shape)} x {element_bits}-bit: "
            "bank of each element</div>")
    return head + _html_tables(
        shape, lambda c: str(banks[c]), lambda c: f"background:hsl({int(banks[c]) * 360 // NUM_BANKS},70%,80%);",
        lambda c: f"offset {offs[c]}, bytes {offs[c] * nbytes}..{(offs[c] + 1) * nbytes - 1}")




# ---------------------------------------------------------- bank conflicts
@dataclass(frozen=True)
class WavefrontReport:
    """Shared-memory wavefronts of moving a register tile to/from a shared layout.

    ``counts[a, w]``: wavefronts warp ``w`` needs for access instruction ``a`` (register
    group ``a`` of every thread, ``vector`` elements each); ``ideal`` the same without bank
    conflicts; ``ways`` per element: how many distinct 4-byte words its bank had to serve
    in its access (1: no conflict)."""
    shared: str
    registers: str
    shape: tuple[int, ...]
    element_bits: int
    vector: int
    counts: np.ndarray
    ideal: np.ndarray
    ways: np.ndarray = field(repr=False)

    total = property(lambda self: int(self.counts.sum()))
    ideal_total = property(lambda self: int(self.ideal.sum()))
    conflict_free = property(lambda self: self.total == self.ideal_total)

    def describe(self) -> str:
        vbytes = self.vector * max(self.element_bits // 8, 1) if self.element_bits >= 8 else None
        lines = [f"{self.shared} <-> {self.registers} on {list(self.shape)} x {self.element_bits}-bit",
                 f"{self.counts.shape[0]} access(es) per thread of {self.vector} element(s)"
                 + (f" ({vbytes} bytes)" if vbytes else "") + f", {self.counts.shape[1]} warp(s)",
                 f"wavefronts: {self.total} (ideal {self.ideal_total}, "
                 f"{self.total / max(self.ideal_total, 1):.2f}x); per access and warp: "
                 + ("all equal to " + str(int(self.counts.flat[0])) if np.all(self.counts == self.counts.flat[0])
                    else str(self.counts.T.tolist())),
                 "bank conflict ways of each element ('.': none, n: its bank served n words):"]

        def cell(c):
            w = int(self.ways[c])
            return "." if w <= 1 else (str(w) if w < 10 else "#")
        lines += _grid(self.shape, cell)
        if (self.ways == 0).any():
            lines.append("(0 never occurs: every element is moved)")
        return "\n".join(lines)

    __str__ = describe

    def plot(self, ax=None):
        """The conflict heat map as a matplotlib figure (ways per element)."""
        from .layout_plots import plot_heat
        return plot_heat(self.ways, f"{self.total} wavefronts (ideal {self.ideal_total})", ax)

    def _repr_html_(self) -> str:
        import html as _html
        peak = max(int(self.ways.max()), 2)
        head = (f"<div><code>{_html.escape(self.shared)}</code> &lt;-&gt; <code>{_html.escape(self.registers)}"
                f"</code>: {self.total} wavefronts (ideal {self.ideal_total}), {self.vector}-element accesses"
                "</div>")
        return head + _html_tables(
            self.shape, lambda c: str(int(self.ways[c])),
            lambda c: f"background:hsl(0,80%,{100 - 50 * (int(self.ways[c]) - 1) // (peak - 1)}%);",
            lambda c: f"{int(self.ways[c])}-way")


def _vector_width(offs: np.ndarray, ebytes: float, cap_bytes: int) -> int:
    """Widest v (power of two, <= cap) such that registers [g*v, g*v+v) of every thread hold
    elements at consecutive, v-aligned offsets."""
    regs = offs.shape[-1]
    best, v = 1, 2
    while v <= regs and v * ebytes <= cap_bytes:
        g = offs.reshape(offs.shape[:-1] + (regs // v, v))
        if not ((g == g[..., :1] + np.arange(v)).all() and (g[..., 0] % v == 0).all()):
            break
        best, v = v, v * 2
    return best


def wavefronts(layout: SharedLayout, reg_layout, shape, element_bits: int, num_warps: int,
               threads_per_warp: int = 32, vector_bytes: int | None = None) -> WavefrontReport:
    """Model of the shared-memory traffic of a load (or store) of a ``reg_layout`` tile.

    Each thread moves its registers in groups of the widest vector both layouts allow (at
    most ``vector_bytes``, default 16). Per access instruction and warp, lanes are split
    into phases of at most 128 bytes (32 lanes for <= 4-byte accesses, 16 for 8-byte, 8 for
    16-byte, consecutive lanes); a phase takes as many wavefronts as the most distinct
    4-byte words any one of the 32 banks holds (lanes touching the same word share it).
    The ideal is the distinct words of the phase over 32."""
    from .layouts import linear_layout_of
    shape = tuple(int(s) for s in shape)
    loc = _user_loc()
    layout.verify(shape, element_bits, loc=loc)
    lin = linear_layout_of(reg_layout, shape, num_warps, threads_per_warp)
    cap = 16 if vector_bytes is None else vector_bytes
    if not _is_pow2(cap):
        raise LayoutError(f"vector_bytes={vector_bytes!r} must be a power of two (1, 2, 4, 8, 16)", loc)
    coords = lin.coords()  # (warps, lanes, regs, rank)
    offs = layout.offsets(shape, element_bits)[tuple(np.moveaxis(coords, -1, 0))]
    ebytes = element_bits / 8
    vec = _vector_width(offs, ebytes, cap)
    W, L, R = offs.shape
    G = R // vec
    start = offs.reshape(W, L, G, vec)[..., 0].transpose(0, 2, 1)  # (W, G, L)
    access_bytes = vec * ebytes
    k = max(1, int(access_bytes) // BANK_BYTES)  # 4-byte words per lane
    words = (start * element_bits // 8 // BANK_BYTES)[..., None] + np.arange(k)  # (W, G, L, k)
    per_phase = max(1, min(L, NUM_BANKS // k))
    phases = L // per_phase
    words = words.reshape(W, G, phases, per_phase * k)
    order = np.argsort(words, axis=-1, kind="stable")
    sorted_words = np.take_along_axis(words, order, axis=-1)
    first = np.ones(sorted_words.shape, dtype=bool)
    first[..., 1:] = sorted_words[..., 1:] != sorted_words[..., :-1]
    per_bank = np.zeros((W, G, phases, NUM_BANKS), dtype=np.int64)
    wi, gi, pi, _ = np.indices(sorted_words.shape, sparse=True)
    np.add.at(per_bank, (wi, gi, pi, sorted_words % NUM_BANKS), first)
    counts = per_bank.max(-1).sum(-1)  # (W, G)
    ideal = (-(-first.sum(-1) // NUM_BANKS)).sum(-1)
    # each lane's conflict: the busiest bank among its words, spread over its elements
    lane_ways = np.take_along_axis(per_bank, words % NUM_BANKS, axis=-1).reshape(W, G, phases, per_phase, k)
    lane_ways = lane_ways.max(-1).reshape(W, G, L).transpose(0, 2, 1)  # (W, L, G)
    elem_ways = np.repeat(lane_ways, vec, axis=-1)  # (W, L, R)
    ways = np.zeros(shape, dtype=np.int64)
    np.maximum.at(ways, tuple(np.moveaxis(coords, -1, 0)), elem_ways)
    return WavefrontReport(repr(layout), repr(reg_layout), shape, int(element_bits), vec,
                           counts.T.copy(), ideal.T.copy(), ways)


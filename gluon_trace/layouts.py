"""Distributed layouts: which thread holds which element of a tile.

Every distributed layout (BlockedLayout, SliceLayout, DistributedLinearLayout)
converts, for a concrete tile shape, to ONE representation: a LinearLayout, a
linear map over GF(2) from the bits of (register, lane, warp) to tensor
coordinates, as in "Linear Layouts" (arXiv 2505.23819).  Backends and the
interpreter only look at the LinearLayout, so a new layout kind only needs a
``_build_linear``.

Conventions: index bit i of the register index selects ``reg_bases[i]``; the
coordinate of (reg, lane, warp) is the XOR of the bases of all its set bits.  A
zero lane/warp base means those threads hold copies (broadcast).  Register bases
are kept linearly independent by the builders here, so one thread never holds
the same element twice (a per-thread sum over registers can't double count).
"""
from __future__ import annotations

import abc
import functools
import html
import math
from dataclasses import dataclass, field

import numpy as np

from .errors import LayoutError, SourceLoc, user_location

__all__ = [
    "LinearLayout", "DistributedLayout", "BlockedLayout", "SliceLayout",
    "DistributedLinearLayout", "free_bits", "invert_regs", "reg_index_of",
    "linear_layout_of",
]


# --------------------------------------------------------------------- helpers
def _user_loc() -> SourceLoc | None:
    return user_location(2)


def _is_pow2(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x > 0 and (x & (x - 1)) == 0


def _log2(x: int) -> int:
    return int(x).bit_length() - 1


def _int_tuple(value, what: str, loc) -> tuple[int, ...]:
    """Accept lists/tuples of ints (Gluon users write lists); store tuples so the
    layout is hashable."""
    try:
        items = tuple(value)
    except TypeError:
        raise LayoutError(f"{what} must be a list of ints, got {value!r}", loc) from None
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise LayoutError(f"{what} must be a list of ints, got {list(items)!r}", loc)
    return tuple(int(v) for v in items)


def _check_shape(shape, what: str, loc) -> tuple[int, ...]:
    shape = _int_tuple(shape, what, loc)
    if not all(_is_pow2(s) for s in shape):
        raise LayoutError(f"{what} {shape} has a dimension that is not a power of two; "
                          "tile shapes must be powers of two (pad the tile and mask the edge)", loc)
    return shape


def _span(bases, ndim: int) -> np.ndarray:
    """All 2**len(bases) XOR-combinations; row i has bit j of i selecting bases[j]
    (doubling the table per base keeps that order)."""
    out = np.zeros((1, ndim), dtype=np.int64)
    for b in bases:
        out = np.concatenate([out, out ^ np.asarray(b, dtype=np.int64).reshape(1, ndim)])
    return out


def _pack(base, shape) -> int:
    """A base as one bit-vector: the bits of coordinate d sit above those of d+1..."""
    v = 0
    for c, s in zip(base, shape):
        v = (v << _log2(s)) | c
    return v


def _add_to_basis(vec: int, basis: dict[int, int]) -> bool:
    """Insert vec into an echelon basis {leading bit: vector}; False if it was
    already in the span (zero or dependent)."""
    while vec:
        top = vec.bit_length() - 1
        if top not in basis:
            basis[top] = vec
            return True
        vec ^= basis[top]
    return False


# --------------------------------------------------------------- LinearLayout
@dataclass(frozen=True)
class LinearLayout:
    """A GF(2)-linear map (register, lane, warp) bits -> coordinates in ``shape``."""
    shape: tuple[int, ...]
    reg_bases: tuple[tuple[int, ...], ...] = ()
    lane_bases: tuple[tuple[int, ...], ...] = ()
    warp_bases: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self):
        loc = _user_loc()
        shape = _check_shape(self.shape, "LinearLayout shape", loc)
        object.__setattr__(self, "shape", shape)
        for name in ("reg_bases", "lane_bases", "warp_bases"):
            bases = tuple(_int_tuple(b, f"LinearLayout {name} entry", loc) for b in getattr(self, name))
            for b in bases:
                if len(b) != len(shape) or not all(0 <= c < s for c, s in zip(b, shape)):
                    raise LayoutError(
                        f"LinearLayout {name} entry {list(b)} is not a coordinate inside shape {shape}; "
                        f"give {len(shape)} coordinates, each in [0, dim size)", loc)
            object.__setattr__(self, name, bases)

    ndim = property(lambda self: len(self.shape))
    num_regs = property(lambda self: 1 << len(self.reg_bases))
    num_lanes = property(lambda self: 1 << len(self.lane_bases))
    num_warps = property(lambda self: 1 << len(self.warp_bases))

    def coord(self, reg: int, lane: int, warp: int) -> tuple[int, ...]:
        out = [0] * self.ndim
        for index, bases in ((reg, self.reg_bases), (lane, self.lane_bases), (warp, self.warp_bases)):
            if not 0 <= index < (1 << len(bases)):
                raise IndexError(f"index {index} out of range for {len(bases)} bases")
            for i, b in enumerate(bases):
                if index >> i & 1:
                    out = [o ^ c for o, c in zip(out, b)]
        return tuple(out)

    @functools.cached_property
    def _coords(self) -> np.ndarray:
        r, l, w = (_span(b, self.ndim) for b in (self.reg_bases, self.lane_bases, self.warp_bases))
        c = w[:, None, None, :] ^ l[None, :, None, :] ^ r[None, None, :, :]
        c.flags.writeable = False  # shared by every caller through the cache
        return c

    def coords(self) -> np.ndarray:
        """Read-only int64 array (num_warps, num_lanes, num_regs, ndim)."""
        return self._coords

    def owners(self) -> dict[tuple[int, ...], list[tuple[int, int, int]]]:
        """{coordinate: [(warp, lane, reg), ...]} in row-major coordinate order;
        each owner list is sorted. Elements no thread holds are absent."""
        if self.ndim == 0:  # a scalar: every slot holds it
            return {(): [(w, l, r) for w in range(self.num_warps) for l in range(self.num_lanes)
                         for r in range(self.num_regs)]}
        c = self.coords().reshape(-1, self.ndim)
        flat = np.ravel_multi_index(tuple(c.T), self.shape)
        order = np.argsort(flat, kind="stable")  # stable: owners stay in (warp, lane, reg) order
        w, l, r = np.unravel_index(order, (self.num_warps, self.num_lanes, self.num_regs))
        result: dict[tuple[int, ...], list[tuple[int, int, int]]] = {}
        for key, ww, ll, rr in zip(map(tuple, c[order].tolist()), w.tolist(), l.tolist(), r.tolist()):
            result.setdefault(key, []).append((ww, ll, rr))
        return result

    def is_surjective(self) -> bool:
        basis: dict[int, int] = {}
        for b in self.reg_bases + self.lane_bases + self.warp_bases:
            _add_to_basis(_pack(b, self.shape), basis)
        return len(basis) == sum(_log2(s) for s in self.shape)

    def reg_contiguity(self, dim: int) -> int:
        """Elements along ``dim`` one thread holds in registers 0, 1, 2, ... (for
        vector loads): the largest 2**k with reg_bases[j] == 2**j * unit(dim), j<k."""
        k = 0
        while k < len(self.reg_bases) and self.reg_bases[k] == tuple(
                (1 << k) if d == dim else 0 for d in range(self.ndim)):
            k += 1
        return 1 << k

    def equivalent(self, other) -> bool:
        """Same function on every (reg, lane, warp). A linear map is fixed by its
        bases, so this compares bases; ``other`` may be a DistributedLayout,
        converted on this shape."""
        if isinstance(other, DistributedLayout):
            if other.rank != self.ndim:
                return False
            other = other.to_linear(self.shape)
        return (isinstance(other, LinearLayout) and other.shape == self.shape
                and (other.reg_bases, other.lane_bases, other.warp_bases)
                == (self.reg_bases, self.lane_bases, self.warp_bases))

    # ---- pictures
    def _cell(self, owners) -> str:
        if not owners:
            return "."
        w, l, r = owners[0]
        text = (f"W{w}" if self.num_warps > 1 else "") + f"T{l}:R{r}"
        return text + (f"+{len(owners) - 1}" if len(owners) > 1 else "")

    def _planes(self):
        """Yield (title, row labels, column labels, rows of coordinates) per 2-D
        picture: 1-D is wrapped 16 per row, >2-D is cut per leading index."""
        if self.ndim == 1:
            n = self.shape[0]
            cols = min(n, 16)
            yield "", [str(i) for i in range(0, n, cols)], [str(j) for j in range(cols)], \
                [[(i + j,) for j in range(cols)] for i in range(0, n, cols)]
            return
        for lead in np.ndindex(*self.shape[:-2]):
            title = f"[{', '.join(map(str, lead))}, :, :]" if lead else ""
            rows, cols = self.shape[-2:]
            yield title, [str(i) for i in range(rows)], [str(j) for j in range(cols)], \
                [[lead + (i, j) for j in range(cols)] for i in range(rows)]

    def _sizes(self) -> str:
        return " x ".join(f"{n} {w}{'s' if n != 1 else ''}" for n, w in
                          ((self.num_regs, "reg"), (self.num_lanes, "lane"), (self.num_warps, "warp")))

    def describe(self) -> str:
        owners = self.owners()
        lines = [f"LinearLayout shape={self.shape}: {self._sizes()}"]
        if self.ndim == 0:
            return lines[0] + "\nscalar held by " + self._cell(owners[()])
        if self.ndim == 1 and self.shape[0] > 16:
            lines.append("(element index = row label + column)")
        cells_all = []
        for title, row_labels, col_labels, rows in self._planes():
            cells = [[self._cell(owners.get(c)) for c in row] for row in rows]
            cells_all += cells
            width = max(len(x) for x in col_labels + [x for row in cells for x in row])
            lw = max(len(x) for x in row_labels)
            if title:
                lines.append(title)
            lines.append(" " * lw + " " + " ".join(x.rjust(width) for x in col_labels))
            for label, row in zip(row_labels, cells):
                lines.append(label.rjust(lw) + " " + " ".join(x.rjust(width) for x in row))
        flat = [x for row in cells_all for x in row]
        if any("+" in x for x in flat):
            lines.append("+k: k more (warp, lane, reg) slots hold copies of that element")
        if "." in flat:
            lines.append(".: no thread holds that element")
        return "\n".join(lines)

    __str__ = describe

    def _repr_html_(self) -> str:
        owners = self.owners()
        out = [f"<div><b>LinearLayout</b> shape={self.shape}: {self._sizes()}</div>"]
        planes = list(self._planes()) if self.ndim else [("", ["-"], ["-"], [[()]])]
        td = "padding:1px 4px;border:1px solid #bbb;"
        for title, row_labels, col_labels, rows in planes:
            out.append('<table style="border-collapse:collapse;font-family:monospace;font-size:11px">')
            if title:
                out.append(f"<caption>{html.escape(title)}</caption>")
            out.append("<tr><th></th>" + "".join(f"<th>{c}</th>" for c in col_labels) + "</tr>")
            for label, row in zip(row_labels, rows):
                tds = []
                for c in row:
                    own = owners.get(c, [])
                    style = td
                    if own:  # hue tells lanes apart, lightness tells warps apart
                        w, l, _ = own[0]
                        light = 85 - 40 * w // max(self.num_warps - 1, 1)
                        style += f"background:hsl({360 * l // self.num_lanes},70%,{light}%);"
                    title_attr = html.escape(" ".join(f"W{w}T{l}:R{r}" for w, l, r in own))
                    tds.append(f'<td style="{style}" title="{title_attr}">{html.escape(self._cell(own))}</td>')
                out.append(f"<tr><th>{label}</th>" + "".join(tds) + "</tr>")
            out.append("</table>")
        return "\n".join(out)


# ---------------------------------------------------------- DistributedLayout
@dataclass(frozen=True)
class DistributedLayout(abc.ABC):
    """Base of layouts that spread a tensor over registers, lanes and warps.

    ``loc`` is where the user wrote the layout; it is not part of equality."""
    loc: SourceLoc | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "loc", _user_loc())

    @property
    @abc.abstractmethod
    def rank(self) -> int: ...

    @property
    @abc.abstractmethod
    def num_warps(self) -> int: ...

    @property
    @abc.abstractmethod
    def num_lanes(self) -> int:
        """Threads per warp the layout is written for."""

    @property
    @abc.abstractmethod
    def tile_shape(self) -> tuple[int, ...]:
        """The natural tile: what one repetition of the layout covers."""

    @abc.abstractmethod
    def _build_linear(self, shape: tuple[int, ...]) -> LinearLayout: ...

    def _lanes_desc(self) -> str:
        return type(self).__name__

    def _warps_desc(self) -> str:
        return type(self).__name__

    def verify(self, shape, num_warps=None, threads_per_warp=None, loc=None) -> None:
        """Raise LayoutError unless the layout fits a tensor of ``shape`` on a
        target with ``threads_per_warp`` lanes, in a kernel of ``num_warps``."""
        loc = loc if loc is not None else _user_loc()
        notes = (f"layout written at {self.loc}",) if self.loc and self.loc != loc else ()
        name = type(self).__name__
        shape = _check_shape(shape, "tensor shape", loc)
        if len(shape) != self.rank:
            raise LayoutError(f"{name} has rank {self.rank}, but the tensor has shape {list(shape)} "
                              f"(rank {len(shape)}); use a layout with one entry per tensor dimension",
                              loc, notes=notes)
        if threads_per_warp is not None and self.num_lanes != threads_per_warp:
            raise LayoutError(f"{self._lanes_desc()} has {self.num_lanes} threads per warp, but the "
                              f"target's warp has {threads_per_warp} threads; make them multiply to "
                              f"{threads_per_warp}", loc, notes=notes)
        if num_warps is not None and self.num_warps != num_warps:
            raise LayoutError(f"{self._warps_desc()} has {self.num_warps} warps, but the kernel runs "
                              f"with num_warps={num_warps}; make them multiply to {num_warps} "
                              f"(or launch with num_warps={self.num_warps})", loc, notes=notes)

    def to_linear(self, shape, num_warps=None, threads_per_warp=None) -> LinearLayout:
        """The LinearLayout of a tensor of ``shape``; checked against the target
        when num_warps / threads_per_warp are given."""
        self.verify(shape, num_warps, threads_per_warp, loc=_user_loc())
        return self._linear_cached(tuple(int(s) for s in shape))

    @functools.lru_cache(maxsize=4096)
    def _linear_cached(self, shape: tuple[int, ...]) -> LinearLayout:
        return self._build_linear(shape)

    def equivalent(self, other: DistributedLayout, shape) -> bool:
        """Same element-to-thread map on a tensor of ``shape``."""
        return other.rank == self.rank and self.to_linear(shape).equivalent(other.to_linear(shape))

    def describe(self, shape=None) -> str:
        shape = self.tile_shape if shape is None else shape
        return f"{self!r}\n{self.to_linear(shape).describe()}"

    def plot(self, shape=None, ax=None, annotate: bool = True):
        """Who owns each element, as a matplotlib figure (the PTX ISA's fragment pictures for
        the MMA layouts)."""
        from .layout_plots import plot_owners
        shape = self.tile_shape if shape is None else tuple(shape)
        return plot_owners(self.to_linear(shape), type(self).__name__, ax, annotate)

    def _repr_html_(self, shape=None) -> str:
        shape = self.tile_shape if shape is None else shape
        return f"<div><code>{html.escape(repr(self))}</code></div>\n{self.to_linear(shape)._repr_html_()}"


# -------------------------------------------------------------- BlockedLayout
@dataclass(frozen=True)
class BlockedLayout(DistributedLayout):
    """Each thread holds a size_per_thread block; lanes, then warps, tile the
    blocks; order[0] is the fastest-varying dimension."""
    size_per_thread: tuple[int, ...]
    threads_per_warp: tuple[int, ...]
    warps_per_cta: tuple[int, ...]
    order: tuple[int, ...]
    # Gluon's multi-CTA sharding of a tile over a cluster's CTAs: accepted empty only
    cga_layout: tuple = field(default=(), repr=False, compare=False)

    def __post_init__(self):
        super().__post_init__()
        if self.cga_layout:
            raise LayoutError(
                f"BlockedLayout cga_layout={[list(b) for b in self.cga_layout]} (a tile sharded over a cluster's "
                "CTAs) is not supported: each CTA of a num_ctas cluster runs as its own program here; share "
                "tiles between them with tma.async_load(..., multicast=...) and mbarrier.arrive(bar, cta=r)",
                self.loc)
        object.__setattr__(self, "cga_layout", ())
        names = ("size_per_thread", "threads_per_warp", "warps_per_cta", "order")
        for n in names:
            object.__setattr__(self, n, _int_tuple(getattr(self, n), f"BlockedLayout {n}", self.loc))
        lengths = {n: len(getattr(self, n)) for n in names}
        if len(set(lengths.values())) != 1 or self.rank == 0:
            raise LayoutError(f"BlockedLayout needs one entry per tensor dimension in each argument, "
                              f"got lengths {lengths}; give all four lists the tensor's rank (>= 1)", self.loc)
        for n in names[:3]:
            values = getattr(self, n)
            if not all(_is_pow2(v) for v in values):
                raise LayoutError(f"BlockedLayout {n}={list(values)} has an entry that is not a positive "
                                  "power of two; use 1, 2, 4, 8, ...", self.loc)
        if sorted(self.order) != list(range(self.rank)):
            raise LayoutError(f"BlockedLayout order={list(self.order)} is not a permutation of "
                              f"{list(range(self.rank))}; list every dimension once, fastest-varying first",
                              self.loc)

    rank = property(lambda self: len(self.order))
    num_warps = property(lambda self: math.prod(self.warps_per_cta))
    num_lanes = property(lambda self: math.prod(self.threads_per_warp))
    tile_shape = property(lambda self: tuple(
        s * t * w for s, t, w in zip(self.size_per_thread, self.threads_per_warp, self.warps_per_cta)))

    def _lanes_desc(self):
        return f"BlockedLayout threads_per_warp={list(self.threads_per_warp)}"

    def _warps_desc(self):
        return f"BlockedLayout warps_per_cta={list(self.warps_per_cta)}"

    def _build_linear(self, shape):
        rank = self.rank

        def unit(d, pos):  # a base at offset pos along d; past the shape it wraps to 0
            return tuple(pos if e == d and pos < shape[d] else 0 for e in range(rank))

        regs, lanes, warps = [], [], []
        for d in self.order:
            # Register bases past the shape are dropped, not zeroed (as Triton
            # does): a zero register base would make a thread hold an element twice.
            regs += [unit(d, 1 << k) for k in range(_log2(self.size_per_thread[d])) if (1 << k) < shape[d]]
        for d in self.order:
            lanes += [unit(d, self.size_per_thread[d] << k) for k in range(_log2(self.threads_per_warp[d]))]
        for d in self.order:
            step = self.size_per_thread[d] * self.threads_per_warp[d]
            warps += [unit(d, step << k) for k in range(_log2(self.warps_per_cta[d]))]
        for d in self.order:  # the tile is smaller than the shape: repeat it in registers
            pos = self.tile_shape[d]
            while pos < shape[d]:
                regs.append(unit(d, pos))
                pos <<= 1
        return LinearLayout(shape, tuple(regs), tuple(lanes), tuple(warps))


# ---------------------------------------------------------------- SliceLayout
@dataclass(frozen=True)
class SliceLayout(DistributedLayout):
    """The layout of ``reduce(x, dim)`` for x in ``parent``: every thread that held
    part of a row keeps that row's reduced value.

    Built by taking the parent's linear layout with ``dim`` re-inserted at the
    parent's natural tile extent (no repetition and no broadcast along dim) and
    deleting coordinate ``dim`` from every base. Lane/warp bases that became zero
    are broadcasts (the threads that reduced together all hold the result);
    register bases that became zero or dependent on earlier ones are dropped, so a
    thread holds each result once."""
    dim: int
    parent: DistributedLayout

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.parent, DistributedLayout):
            raise LayoutError(f"SliceLayout parent must be a distributed layout (e.g. BlockedLayout), "
                              f"got {self.parent!r}", self.loc)
        if isinstance(self.dim, bool) or not isinstance(self.dim, (int, np.integer)) \
                or not 0 <= self.dim < self.parent.rank:
            raise LayoutError(f"SliceLayout dim={self.dim!r} is not a dimension of its rank-"
                              f"{self.parent.rank} parent; use 0 <= dim < {self.parent.rank}", self.loc)
        object.__setattr__(self, "dim", int(self.dim))

    rank = property(lambda self: self.parent.rank - 1)
    num_warps = property(lambda self: self.parent.num_warps)
    num_lanes = property(lambda self: self.parent.num_lanes)
    tile_shape = property(lambda self: tuple(s for i, s in enumerate(self.parent.tile_shape) if i != self.dim))

    def _lanes_desc(self):
        return f"SliceLayout(dim={self.dim}) of {self.parent._lanes_desc()}"

    def _warps_desc(self):
        return f"SliceLayout(dim={self.dim}) of {self.parent._warps_desc()}"

    def _build_linear(self, shape):
        d = self.dim
        parent_shape = shape[:d] + (self.parent.tile_shape[d],) + shape[d:]
        p = self.parent._linear_cached(parent_shape)

        def drop(b):
            return b[:d] + b[d + 1:]

        regs, basis = [], {}
        for b in map(drop, p.reg_bases):
            if _add_to_basis(_pack(b, shape), basis):
                regs.append(b)
        return LinearLayout(shape, tuple(regs), tuple(map(drop, p.lane_bases)), tuple(map(drop, p.warp_bases)))


# ---------------------------------------------------- DistributedLinearLayout
@dataclass(frozen=True)
class DistributedLinearLayout(DistributedLayout):
    """An explicit linear layout for one tile ``shape`` (Gluon's argument names).
    Bases may be any coordinates inside the shape; together they must cover every
    element. ``block_bases`` (multi-CTA clusters) are not supported: pass []."""
    reg_bases: tuple[tuple[int, ...], ...]
    lane_bases: tuple[tuple[int, ...], ...]
    warp_bases: tuple[tuple[int, ...], ...]
    block_bases: tuple[tuple[int, ...], ...] = ()
    shape: tuple[int, ...] | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.shape is None:
            raise LayoutError("DistributedLinearLayout needs shape=[...], the tile shape its bases map into",
                              self.loc)
        shape = _check_shape(self.shape, "DistributedLinearLayout shape", self.loc)
        object.__setattr__(self, "shape", shape)
        for name in ("reg_bases", "lane_bases", "warp_bases", "block_bases"):
            try:
                bases = tuple(_int_tuple(b, f"DistributedLinearLayout {name} entry", self.loc)
                              for b in getattr(self, name))
            except TypeError:
                raise LayoutError(f"DistributedLinearLayout {name} must be a list of coordinate lists",
                                  self.loc) from None
            for b in bases:
                if len(b) != len(shape) or not all(0 <= c < s for c, s in zip(b, shape)):
                    raise LayoutError(f"DistributedLinearLayout {name} entry {list(b)} is not a coordinate "
                                      f"inside shape {list(shape)}; give {len(shape)} coordinates, each in "
                                      "[0, dim size)", self.loc)
            object.__setattr__(self, name, bases)
        if self.block_bases:
            raise LayoutError("DistributedLinearLayout block_bases (multi-CTA clusters) are not supported; "
                              "pass block_bases=[]", self.loc)
        ll = LinearLayout(shape, self.reg_bases, self.lane_bases, self.warp_bases)
        if not ll.is_surjective():
            raise LayoutError(f"DistributedLinearLayout bases do not reach every element of shape "
                              f"{list(shape)}; add bases until they span the whole tile", self.loc)

    rank = property(lambda self: len(self.shape))
    num_warps = property(lambda self: 1 << len(self.warp_bases))
    num_lanes = property(lambda self: 1 << len(self.lane_bases))
    tile_shape = property(lambda self: self.shape)

    def _lanes_desc(self):
        return f"DistributedLinearLayout with {len(self.lane_bases)} lane_bases"

    def _warps_desc(self):
        return f"DistributedLinearLayout with {len(self.warp_bases)} warp_bases"

    def _build_linear(self, shape):
        if shape == self.shape:
            return LinearLayout(shape, self.reg_bases, self.lane_bases, self.warp_bases)
        if len(shape) != len(self.shape) or any(s > t for s, t in zip(shape, self.shape)):
            raise LayoutError(f"DistributedLinearLayout was written for shape {list(self.shape)} but is "
                              f"used on a tensor of shape {list(shape)}; it describes that shape and "
                              "smaller ones (as expand_dims/keep_dims make), so write one for this shape",
                              _user_loc(), notes=(f"layout written at {self.loc}",) if self.loc else ())
        # A smaller shape (e.g. the (R, 1) tile expand_dims makes from a slice of this layout):
        # coordinates past it wrap to 0, as in a blocked layout. Lanes and warps that lose their
        # coordinate hold copies; registers that lose theirs, or repeat another, are dropped so no
        # thread holds one element twice.
        mask = [d - 1 for d in shape]

        def cut(b):
            return tuple(c & m for c, m in zip(b, mask))

        regs, basis = [], {}
        for b in self.reg_bases:
            if _add_to_basis(_pack(cut(b), shape), basis):
                regs.append(cut(b))
        return LinearLayout(shape, tuple(regs), tuple(cut(b) for b in self.lane_bases),
                            tuple(cut(b) for b in self.warp_bases))


# --------------------------------------------------------- backend helpers
def linear_layout_of(layout, shape, num_warps: int, threads_per_warp: int) -> LinearLayout:
    """Verify ``layout`` against the target, then convert it for ``shape``."""
    if isinstance(layout, LinearLayout):
        if layout.shape != tuple(shape) or layout.num_warps != num_warps or layout.num_lanes != threads_per_warp:
            raise LayoutError(f"LinearLayout for shape {layout.shape} with {layout.num_lanes} lanes x "
                              f"{layout.num_warps} warps does not fit shape {tuple(shape)} with "
                              f"{threads_per_warp} lanes x {num_warps} warps", _user_loc())
        return layout
    return layout.to_linear(shape, num_warps, threads_per_warp)


def free_bits(linear: LinearLayout) -> dict[str, int]:
    """Per in-dimension, a bitmask of the bases that are zero: flipping those
    index bits gives another copy of the same element (broadcast)."""
    return {name: sum(1 << i for i, b in enumerate(bases) if not any(b))
            for name, bases in (("reg", linear.reg_bases), ("lane", linear.lane_bases),
                                ("warp", linear.warp_bases))}


def copy_bits(linear: LinearLayout) -> dict[str, int]:
    """Per in-dimension, a bitmask of the bases that reach no element the registers' and the
    earlier lanes' and warps' bases do not already reach: a zero basis (free_bits), or one equal
    to an XOR of earlier ones. The registers and threads with all of these bits clear hold each
    element exactly once, so they are the ones an atomic (or anything done once per element)
    runs in; the others hold copies."""
    pivots: dict[int, int] = {}
    return {name: sum(1 << i for i, b in enumerate(bases) if not _add_to_basis(_pack(b, linear.shape), pivots))
            for name, bases in (("reg", linear.reg_bases), ("lane", linear.lane_bases),
                                ("warp", linear.warp_bases))}


def xor_coset_min(values):
    """v -> the least of v ^ s over the XOR span S of ``values``: the lowest offset of a view whose
    offsets are an XOR-linear table (S, its values) XORed with v. It is the reduction of v by S's
    echelon basis, highest bits first, so it is linear in v over GF(2): a run-time v's image is
    the XOR of its bits' images."""
    basis: dict[int, int] = {}   # leading bit -> vector

    def least(v: int) -> int:
        for top in sorted(basis, reverse=True):
            if v >> top & 1:
                v ^= basis[top]
        return v
    for x in values:
        x = least(int(x))
        if x:
            basis[x.bit_length() - 1] = x
    return least


def first_copy_regs(linear: LinearLayout) -> list[int]:
    """For each register, the lowest register of the same thread holding the same element."""
    first: dict[tuple, int] = {}
    out = []
    for r in range(1 << len(linear.reg_bases)):
        c = [0] * len(linear.shape)
        for i, b in enumerate(linear.reg_bases):
            if r >> i & 1:
                c = [x ^ int(y) for x, y in zip(c, b)]
        out.append(first.setdefault(tuple(c), r))
    return out


@functools.lru_cache(maxsize=256)
def invert_regs(linear: LinearLayout) -> dict[tuple, int]:
    """{(warp, lane, coordinate): register index} -- O(elements held); the lowest
    register wins if a thread held an element twice."""
    table: dict[tuple, int] = {}
    c = linear.coords()
    for w in range(linear.num_warps):
        for l in range(linear.num_lanes):
            for r, coord in enumerate(map(tuple, c[w, l].tolist())):
                table.setdefault((w, l, coord), r)
    return table


def reg_index_of(linear: LinearLayout, coord, lane: int, warp: int):
    """Register of thread (lane, warp) holding ``coord``, or -1. ``coord`` may be
    one coordinate or an (N, ndim) array, giving an int array of N answers."""
    table = invert_regs(linear)
    arr = np.asarray(coord)
    if arr.ndim == 2:
        return np.array([table.get((warp, lane, tuple(x)), -1) for x in arr.tolist()], dtype=np.int64)
    return table.get((warp, lane, tuple(int(x) for x in arr.reshape(-1))), -1)


def _remap_bases(linear: LinearLayout, fn) -> dict:
    return {k: tuple(fn(b) for b in getattr(linear, k))
            for k in ("reg_bases", "lane_bases", "warp_bases")}


def reshape_layout(layout, old_shape, new_shape, num_warps: int, threads_per_warp: int):
    """The layout a reshape gives when no element moves between threads or registers.

    Row-major flattening of power-of-two shapes is linear over GF(2), so each base is
    flattened and re-split into the new shape.
    """
    lin = layout.to_linear(tuple(old_shape), num_warps, threads_per_warp)
    old_strides = [1] * len(old_shape)
    for d in range(len(old_shape) - 2, -1, -1):
        old_strides[d] = old_strides[d + 1] * old_shape[d + 1]

    def split(b):
        flat = sum(c * s for c, s in zip(b, old_strides))
        out = []
        for size in reversed(new_shape):
            out.append(flat % size)
            flat //= size
        return tuple(reversed(out))

    return DistributedLinearLayout(**_remap_bases(lin, split), shape=tuple(new_shape))


def permute_layout(layout, shape, dims, num_warps: int, threads_per_warp: int):
    """The layout of ``permute(x, dims)``: the same threads hold the same elements."""
    lin = layout.to_linear(tuple(shape), num_warps, threads_per_warp)
    return DistributedLinearLayout(**_remap_bases(lin, lambda b: tuple(b[d] for d in dims)),
                                   shape=tuple(shape[d] for d in dims))


def split_layout(layout, shape, num_warps: int, threads_per_warp: int):
    """The layout of each half that ``split`` makes of a tile whose last dimension is 2:
    every base loses its last coordinate. A register base that moved only along that
    dimension (the usual case, where a thread holds both halves) is dropped, so each half
    is the same registers renamed; a lane or warp base that did becomes a copy."""
    lin = layout.to_linear(tuple(shape), num_warps, threads_per_warp)
    out = tuple(shape[:-1])
    regs, basis = [], {}
    for b in lin.reg_bases:
        if _add_to_basis(_pack(b[:-1], out), basis):
            regs.append(b[:-1])
    return DistributedLinearLayout(reg_bases=tuple(regs), lane_bases=tuple(b[:-1] for b in lin.lane_bases),
                                   warp_bases=tuple(b[:-1] for b in lin.warp_bases), shape=out)


def join_layout(layout, shape, num_warps: int, threads_per_warp: int):
    """The layout ``join`` gives two tiles in ``layout``: a new last dimension of 2 held in
    the lowest register bit, so the pair sits in adjacent registers (vectorised stores)."""
    lin = layout.to_linear(tuple(shape), num_warps, threads_per_warp)
    ext = lambda bases: tuple(tuple(b) + (0,) for b in bases)  # noqa: E731
    return DistributedLinearLayout(reg_bases=((0,) * len(shape) + (1,),) + ext(lin.reg_bases),
                                   lane_bases=ext(lin.lane_bases), warp_bases=ext(lin.warp_bases),
                                   shape=tuple(shape) + (2,))

"""Where the elements of an LDS buffer or view live (the AMD shared-memory lowering's model of
a view; how a tile's registers address it is lds_address.py, the rules lds.py).

Buffers sit at the offsets :mod:`gluon_trace.smem_plan` gives them (the backend's own scratch
for reductions and conversions lives above them, see ``Emitter.scratch_off``). A buffer or
view is an :class:`Lds`: element ``c`` of it lives at byte

    base + const + lead(c) + es * pad(lin[c])

``base`` is a run-time SGPR (only ``.index(i)`` with a run-time ``i`` makes one), ``lead``
adds the byte strides of the stacked leading dims still in the view, ``lin`` is the layout's
offset of each element of the swizzled tile before padding (XOR-linear in the coordinate
bits for every shared layout), and ``pad`` inserts a padded layout's padding
(``x + sum((x >> log2 interval) << log2 padding)``; none for swizzled/NVMMA layouts).
A view chosen by a branch or carried by a loop among views whose tables differ by a constant
XOR (the column halves of a swizzled tile: lds_join.py) has ``lin[c] ^ X`` in place of
``lin[c]``, X known only at run time: an SGPR ``xreg`` holding ``es * X``, X's bits within
``xmask`` (no padding then); each thread address VGPR takes it with one ``v_xor_b32``.
"""
from __future__ import annotations

import numpy as np

from gluon_trace.ops_memory import element_offsets, layout_rank

from .layout import log2

_BIG = 1 << 16  # the alignment of a compile-time base (LDS is 64 KiB)


class Lds:
    """A shared buffer or view on AMD (see the module docstring)."""
    __slots__ = ("base", "balign", "const", "lead", "lin", "pads", "dtype", "xreg", "xmask", "coff", "sreg", "svals",
                 "sdim")

    def __init__(self, base, balign, const, lead, lin, pads, dtype, xreg=None, xmask=0, coff=None, sreg=None,
                 svals=(), sdim=None):
        self.base, self.balign, self.const = base, balign, const
        self.lead, self.lin, self.pads, self.dtype = tuple(lead), lin, tuple(pads), dtype
        self.xreg, self.xmask = xreg, xmask   # a run-time XOR of lin (lds_join.py): SGPR es * X
        # (per swizzled dim, the view's start in the buffer and the lin of each of the buffer's
        # coordinate bits: lin[c] = XOR_d B_d(c_d + start_d) where the views keep it, for
        # Access._split_coords; a rewrite of lin that breaks it only makes that check fail)
        self.coff = coff
        # a padded view carried by a loop or joined by a branch from starts inside a padding period
        # (lds_join_start.shift_join): element c at base + const + lead(c) + es * pad(S + lin[c]), S (in
        # elements) in the SGPR ``sreg``, one of ``svals`` (every value it may take, for the checks)
        self.sreg, self.svals = sreg, tuple(svals)
        # a swizzled/NVMMA view carried by a loop or joined by a branch from starts inside a swizzle
        # period (lds_join_start.coord_join): S is the start of its dim ``sdim`` in the buffer's coordinates,
        # added to coff's (lin is the table at S = 0): element c at the buffer's lin of c + coff + S
        self.sdim = sdim

    def with_(self, **kw) -> "Lds":
        d = {k: getattr(self, k) for k in self.__slots__}
        d.update(kw)
        return Lds(**d)

    @property
    def es(self) -> int:
        return max(self.dtype.bits // 8, 1)


def pad(x, pads):
    out = x
    for k, p in pads:
        out = out + ((x >> k) << p)
    return out


def additive(x: Lds) -> Lds | None:
    """A padded view with the whole padding periods below its least offset moved into the address:
    lin - a, const + es * pad(a), a the greatest multiple of the largest padding interval not above
    lin's least (a multiple of every interval: pad(a + y) = pad(a) + pad(y)). Rows r.. of a padded
    buffer are then one table whatever r, where the XOR split (control._canonical) gives rows 1..4
    and 2..5 different ones (their starts' bits collide with the rows'). None where not padded."""
    if not x.pads or x.xreg is not None or x.sreg is not None or not np.size(x.lin):
        return None
    step = max(1 << k for k, _ in x.pads)
    lin = np.asarray(x.lin, np.int64)
    a = int(lin.min()) // step * step
    return x.with_(const=x.const + x.es * int(pad(np.int64(a), x.pads)), lin=lin - a) if a else x


def _pow2_div(v: int) -> int:
    return (v & -v) if v else _BIG


def _fresh(em, layout, shape, dtype, base, balign, const) -> Lds:
    """The view of ``shape`` x ``dtype`` in ``layout`` starting at byte base + const."""
    if dtype.is_bool:
        raise em.error("int1 shared buffers are not supported on AMD; store int8 (x.to(gl.int8)) instead")
    r = layout_rank(layout)
    lead_shape, inner = tuple(shape[:len(shape) - r]), tuple(shape[len(shape) - r:])
    offs, _ = element_offsets(layout, tuple(shape), dtype.bits)
    tile = np.asarray(layout.offsets(inner, dtype.bits), np.int64)
    es = max(dtype.bits // 8, 1)
    span = int(layout.alloc_elements(inner, dtype.bits)) * es
    if type(layout).__name__ == "PaddedSharedLayout":
        from gluon_trace.shared_layouts import _offsets_from_bases
        lin = _offsets_from_bases(inner, layout.offset_bases)
        pads = tuple((log2(i), log2(p)) for i, p in layout.interval_padding_pairs)
    else:
        lin, pads = tile, ()
    if not np.array_equal(pad(lin, pads), tile):
        raise em.error(f"the AMD backend does not model {layout!r}'s offsets")
    lead = []
    stride = span
    for n in reversed(lead_shape):
        lead.insert(0, stride)
        stride *= n
    images = tuple(tuple(int(lin[tuple((1 << j) * (e == d) for e in range(len(inner)))])
                         for j in range(log2(n))) for d, n in enumerate(inner))
    v = Lds(base, balign, const, lead, lin, pads, dtype, coff=((0,) * len(inner), images))
    assert np.array_equal(_table(v, tuple(shape)), np.asarray(offs, np.int64) * es + const)
    return v


def _table(v: Lds, shape) -> np.ndarray:
    """Byte offset (less the run-time base) of every element of the view (for checks)."""
    nl = len(v.lead)
    t = v.const + v.es * pad(v.lin, v.pads)
    idx = np.indices(shape[:nl]) if nl else []
    extra = sum((idx[d] * s for d, s in enumerate(v.lead)), np.zeros(shape[:nl], np.int64))
    return extra.reshape(shape[:nl] + (1,) * (len(shape) - nl)) + t


def _scatter(parts) -> np.ndarray | int:
    """XOR over (coordinate x, lin of each of its bits) of the lin of x's set bits."""
    out = 0
    for x, images in parts:
        for j, b in enumerate(images):
            out = out ^ ((x >> j) & 1) * b
    return out


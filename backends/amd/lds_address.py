"""Where the elements of an LDS buffer or view live, and the address of each register of a
tile accessing it (the AMD shared-memory lowering's addressing; rules in lds.py).

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

An access from a distributed layout splits the way an LDS exchange does: the thread's part
(lane and warp bits) is one VGPR made once at the kernel entry, every register's part a
constant in the instruction's 16-bit offset. That split holds for ``pad`` too wherever a
register's bits do not collide with the thread's (``pad(a | b) = pad(a) + pad(b)`` for
disjoint ``a``, ``b``); the bits that do collide (a swizzle) get one more thread register
per distinct value. The stacked bytes add up over the lane/warp/register bases unless the
bases mix a stacked dim's coordinate bits (lane bases [1, 0] and [3, 0]: lane 3 is row
1 ^ 3 = 2, not 4); such a dim's coordinate is split instead, as the XOR of a thread part and a
register part, the thread register holding ``lead_d * (tc_d ^ lo_d)`` for the register bits the
thread part can set too (``Access._coord_lead``; any stride, padded tiles' too). A padded view
starting inside a padding period (rows 1..4, padding every 2 rows) has ``lin = s + m``, ``m``
XOR-linear but not ``s ^ m``: its whole periods go into ``const`` and the rest of ``s`` is added
to the thread part before ``pad`` (``Access.shift``), tried only where the plain split fails;
where the layout's offset_bases interleave the sliced dim's bits with another's (rows 1..4 at
lin 2, 64, 66, 128) even that fails, and the start is added to the thread's coordinate instead,
whose bits then go to their lin places (``Access._split_coords``: ``Lds.coff``). So does a
swizzled or NVMMA view starting inside a swizzle period (rows 1..8 of a 128-byte swizzle have
phases 1..7, 0: no XOR of rows 0..7's), its coordinate's bit fields shifted into place whole
(``bit_fields``: row << 5 and (row & 7) << 2 for f32 rows of 128 bytes).
Every split is checked against the view's full byte table, and so is each vector width: runs of
registers whose bytes are consecutive and aligned for every thread move as one
``ds_write/ds_read_b64/b128``.
"""
from __future__ import annotations

import numpy as np

from gluon_trace.ops_memory import element_offsets, layout_rank
from gluon_trace.shared_layouts import bit_fields

from .emitter import elem_key
from .layout import log2, possible_bits, reg_part, thread_part, tid_pairs
from .mir import Imm

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
        # (lds_join.shift_join): element c at base + const + lead(c) + es * pad(S + lin[c]), S (in
        # elements) in the SGPR ``sreg``, one of ``svals`` (every value it may take, for the checks)
        self.sreg, self.svals = sreg, tuple(svals)
        # a swizzled/NVMMA view carried by a loop or joined by a branch from starts inside a swizzle
        # period (lds_join.coord_join): S is the start of its dim ``sdim`` in the buffer's coordinates,
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


class Access:
    """Where each register of a tile in ``lin`` lives in the view ``v``, per thread."""

    def __init__(self, em, v: Lds, ty):
        self.em, self.cdims = em, None
        self.lay = em.linear(ty)
        self.reach, self.rshift, self.all_bytes = None, None, None
        self.carry = False   # (_split_shifted: the start's carries through register parts too)
        self.crun = None
        self.slead = None   # (_split_coords: stacked coordinates split as XORs)
        self.corg = 0       # (_split_coords: the table origin's bits the thread register clears)
        if v.sdim is not None:   # (a run-time coordinate start: lds_join.coord_join)
            self._split_coords_run(v)
            return
        if v.sreg is not None:   # (a run-time start: lds_join.shift_join)
            self._split_shifted(v, tuple(ty.shape))
            return
        self.bytes = self._bytes(v)   # (warps, lanes, regs)
        if self._split(v, tuple(ty.shape)):
            return
        # A padded view from inside a padding period (rows 1..4 of rows padded every 64 elements):
        # lin[c] = s + m[c], m XOR-linear, but s's bits collide with m's, so lin is not the XOR of
        # a thread and a register part. Its whole periods below s go into const (lds_join.additive:
        # no code) and the rest, ``shift``, is added to the thread part before it is padded, the
        # register bits the sum's carries may reach joining the thread part (more thread registers).
        # Tried only where the split above fails: every view it takes is lowered as before.
        w = additive(v)
        if w is not None:
            if w is not v and self._split(w, tuple(ty.shape)):
                return
            shift = int(np.asarray(w.lin).min())
            w = w.with_(lin=np.asarray(w.lin, np.int64) - shift)
            if shift and self._split(w, tuple(ty.shape), shift):
                return
        if self._split_coords(v):
            return
        # the shift plus a thread part holding the bits it reaches may carry further, into a register
        # part's bits (start 1, thread lin 1, registers 2 and 4: 1 + 3 = 4): those join the thread
        # part too (_split's ``carry``, as for a run-time start). Tried last: nothing lowered before
        # takes it
        if w is not None and shift:
            self.cdims, self.slead, self.corg, self.carry = None, None, 0, True
            if self._split(w, tuple(ty.shape), shift):
                return
        raise em.error("this shared-memory view is not addressable as thread part + register part "
                       "(a slice at an unaligned start of a swizzled dim?); the AMD backend lowers "
                       "views whose offsets split that way")

    def _bytes(self, v: Lds, s: int = 0):
        """Every thread's byte of every register of the view (its table moved by ``s`` elements)."""
        coords = self.lay.coords()  # (warps, lanes, regs, ndim)
        nl = len(v.lead)
        inner = tuple(coords[..., d] for d in range(nl, coords.shape[-1]))
        L = v.lin[inner] if inner else np.broadcast_to(v.lin, coords.shape[:3])
        lead = sum((coords[..., d] * s for d, s in enumerate(v.lead)), np.zeros(coords.shape[:3], np.int64))
        return v.const + lead + v.es * pad(L + s, v.pads)

    def _split_shifted(self, v: Lds, shape) -> None:
        """A view at a run-time start S (lds_join.shift_join): lin = m + M, M XOR-linear from 0, split
        as a compile-time shift is (Access.shift) with S + m in its place, the register bits the sum
        may carry into, for every S it may take, in the thread part; checked for each S."""
        lin = np.asarray(v.lin, np.int64)
        m = int(lin.min())
        w = v.with_(lin=lin - m, sreg=None, svals=(), coff=None)
        self.reach = max(v.svals) + m
        # (first with the bits the start's sum reaches from the thread part alone, as before; then,
        # where that fails, with every bit the sum of the start and a thread part holding those
        # bits' register parts too may carry into: _split's ``carry``)
        # (a layout mixing a stacked dim's coordinate bits splits that dim's coordinate (_coord_lead)
        # for every start alike, as _split decides from the layout; the state kept is the last
        # start's, so each start's table is checked against it again)
        for carry in (False, True):
            self.carry, tables = carry, []
            for s in v.svals:
                self.bytes = self._bytes(v, s)
                if not self._split(w, shape, s + m):
                    break
                tables.append(self.bytes)
            else:
                if all(self._predicts(t, s + m) for t, s in zip(tables, v.svals)):
                    break
        else:
            raise self.em.error("this shared-memory view, carried by a loop (or chosen by a branch) among padded "
                                "views whose starts differ inside a padding period, is not addressable as "
                                "thread part + register part for every start it may take; slice the buffer "
                                "inside the loop body (or branch) instead")
        self.all_bytes = tables
        self.rshift = (v.sreg, m)

    def _predicts(self, table, shift: int) -> bool:
        """Whether the split kept reproduces ``table`` (the view's bytes at start ``shift``)."""
        self.bytes, self.shift = table, shift
        return np.array_equal(self._predict(), table)

    def _split(self, v: Lds, shape, shift: int = 0) -> bool:
        """Whether thread part + register part of ``v`` (its table added to ``shift`` before the
        padding) reproduce ``self.bytes``; the parts are kept in ``self`` either way."""
        em, lay = self.em, self.lay
        self.v, self.shift = v, shift
        nl = len(v.lead)
        # the thread part: lane/warp bases' XOR of lin, and their sum of lead bytes
        zero = (0,) * len(shape)

        def at(b):
            b = np.asarray(b, np.int64)
            return int(v.lin[tuple(b[nl:])] ^ v.lin[zero[nl:]]) if v.lin.ndim else 0
        L0 = int(v.lin[zero[nl:]]) if v.lin.ndim else int(v.lin)
        lb = lambda b: sum(int(b[d]) * s for d, s in enumerate(v.lead))  # noqa: E731
        self.lpairs = tid_pairs(em, lay, at)
        self.spairs = tid_pairs(em, lay, lb)
        self.possible = possible_bits(self.lpairs)
        if shift or self.reach is not None:  # shift + (tL ^ lo) sets no bit at or above the sum's top one
            top = self.reach if self.reach is not None else shift
            self.possible |= (1 << (top + self.possible).bit_length()) - 1   # (pad(hi) adds)
            if self.carry:
                # the bits just added hold register parts too (lo = regL & possible), so the sum
                # top + (tL ^ lo) reaches past top + (thread bits) (start 1 + register lin 3 = 4):
                # grow to a fixpoint; tL ^ lo stays within the bits of lin's values, so it ends
                lbits = int(np.bitwise_or.reduce(np.asarray(v.lin, np.int64).ravel()))
                while True:
                    p = self.possible | (1 << (top + (self.possible & lbits)).bit_length()) - 1
                    if p == self.possible:
                        break
                    self.possible = p
        if v.xreg is not None:  # X joins the thread's part: register parts with its bits go there too
            self.possible |= v.xmask
            # (es * (tL ^ lo) + tS) ^ es * X is es * (tL ^ lo ^ X) + tS while X's bytes stay
            # below every stacked dim's stride
            if any(val & -val <= v.es * v.xmask for _, val in self.spairs):
                raise em.error("this shared-memory view, chosen by a branch among views placed differently "
                               "(a run-time XOR), is accessed across stacked buffers whose strides collide "
                               "with that XOR; slice or index the buffer inside the branch (or loop body) "
                               "instead")
        self.clead = None
        self.regL = []
        self.regS = []  # (additive lead bytes; per register [(lo_d, hi_d)] once _coord_lead ran)
        for r in range(lay.num_regs):
            x, s = L0, 0
            for j, b in enumerate(lay.reg_bases):
                if r >> j & 1:
                    x ^= at(b)
                    s += lb(b)
            self.regL.append(x)
            self.regS.append(s)
        # the split must reproduce every thread's address (XOR-linear lin, additive lead)
        pred = self._predict()
        if not np.array_equal(pred, self.bytes) and nl:
            # a layout mixing a stacked dim's coordinate bits (bases [1, 0] and [3, 0] over it):
            # the coordinate is the XOR of the bases' but the bytes are not their sum. Then
            # stacked dim d's coordinate splits as the XOR of a thread part tc_d and a register
            # part; the register part's bits tc_d can set go into the thread register, which
            # holds sum_d lead_d * (tc_d ^ lo_d), the others into the offset
            self._coord_lead(em, lay, nl)
            pred = self._predict()
        return np.array_equal(pred, self.bytes)

    def _split_coords_run(self, v: Lds) -> None:
        """A swizzled view at a run-time start S of its dim sdim (lds_join.coord_join): split as
        _split_coords does, the bits S + (tc ^ lo) may reach for every S it may take in the thread
        part, checked for each S; the thread register made where the view is accessed."""
        from .lds_join import unpacked
        starts, images = v.coff
        idx = np.indices(np.shape(v.lin))
        tables = []
        for S in v.svals:
            at = unpacked(v.sdim, images, S)
            st = [s + at.get(d, 0) for d, s in enumerate(starts)]
            w = v.with_(lin=_scatter([(idx[d] + s, images[d]) for d, s in enumerate(st)]), sreg=None, svals=(),
                        sdim=None)
            self.bytes = self._bytes(w)
            tables.append(self.bytes)
        self.all_bytes = tables
        if not self._split_coords(v, (v.sdim, v.svals)):
            raise self.em.error("this shared-memory view, carried by a loop (or chosen by a branch) among views of "
                                "a swizzled buffer whose starts differ inside a swizzle period, is not addressable "
                                "as thread part + register part for every start it may take; slice the buffer "
                                "inside the loop body (or branch) instead")
        self.crun = (v.sreg, v.sdim)

    def _split_coords(self, v: Lds, run=None) -> bool:
        """A view whose lin has no split above: a slice from an unaligned row of a padded layout
        whose offset_bases interleave row and column bits (rows 1..4 at lin 2, 64, 66, 128: no
        start plus an XOR-linear table), or of a swizzled one from inside its period (rows 1..8
        of a 128-byte swizzle). lin is XOR_d B_d(c_d + start_d), B_d the buffer's
        linear map of dim d's coordinate bits, and each coordinate splits like a stacked one
        (_coord_lead): thread part tc_d ^ lo_d, the register bits the sum start_d + (tc_d ^ lo_d)
        may carry into, in the thread register, which holds es * pad(XOR_d B_d(start_d +
        (tc_d ^ lo_d))) + the stacked bytes; the other register bits, clear in every such sum,
        padded apart into the offset. Checked against the view's whole byte table."""
        em, lay = self.em, self.lay
        if v.coff is None or not v.lin.ndim or (v.xreg is not None and (run is not None or v.pads)):
            return False
        # (``run``: (the moving dims' packing, the packed run-time starts S they add): the bits each
        # may reach, checked for each)
        from .lds_join import unpacked
        sd, svals = run if run is not None else ((), (0,))
        starts, images = v.coff
        ats = [unpacked(sd, images, S) for S in svals]
        nl = len(v.lead)
        idx = np.indices(v.lin.shape)
        if len(starts) != v.lin.ndim:
            return False
        full = _scatter([(idx[d] + s, images[d]) for d, s in enumerate(starts)])
        if not np.array_equal(v.lin, full):
            # a carried view (rows of a swizzled tile swapped by a loop, then sliced from inside the
            # period): its table's origin, the bits k every entry has, moved into the address
            # (control._canonical, or lds_join._split with a run-time XOR X). The thread register
            # clears them again (lin is full ^ k; checked below), and X, which never has k's
            # bits, applies to it as for an aligned view (addr)
            k = int(np.asarray(v.lin ^ full).flat[0])
            if run is not None or v.pads or not np.array_equal(v.lin ^ full, np.full_like(full, k)) or k & v.xmask:
                return False
            self.corg = k
        self.v, self.shift, self.clead = v, 0, None
        lb = lambda b: sum(int(b[d]) * s for d, s in enumerate(v.lead))  # noqa: E731
        self.spairs = tid_pairs(em, lay, lb)
        ndim = len(starts)
        pairs = [tid_pairs(em, lay, lambda b, d=d: int(b[nl + d])) for d in range(ndim)]
        rbits = [possible_bits((0, int(b[nl + d])) for b in lay.reg_bases) for d in range(ndim)]
        core, low = [], []
        reach_s = list(starts)   # (per dim, the greatest start: the carries' reach)
        for d, (p, s) in enumerate(zip(pairs, starts)):
            poss = possible_bits(p)
            if d in dict(sd):
                reach_s[d] = max(s + at[d] for at in ats)
                s = int(np.bitwise_or.reduce([s + at[d] for at in ats]))
            lw = ((poss | s) & -(poss | s)) - 1 if poss | s else 0  # (pass through the sum: offset)
            core.append((((1 << (reach_s[d] + poss).bit_length()) - 1) if reach_s[d] else poss) & ~lw)
            low.append(lw)
        # A swizzle XORs row bits into column bits: a register bit whose lin shares a bit with what
        # the thread register may hold cannot be added as an offset; it joins the thread part too
        # (one more thread register per value, as _split's possible bits do for aligned views)
        extra = [0] * ndim
        while True:
            reach = [(((1 << (s + c).bit_length()) - 1) & ~lw if s else c) | x
                     for s, c, lw, x in zip(reach_s, core, low, extra)]
            timg = v.xmask if v.xreg is not None else 0   # (a register part under X's bits: the thread's)
            for m, im in zip(reach, images):
                for j, b in enumerate(im):
                    timg |= b if m >> j & 1 else 0
            new = [x | sum(1 << j for j, b in enumerate(images[d])
                           if (rb & ~(c | x)) >> j & 1 and b & timg)
                   for d, (rb, c, x) in enumerate(zip(rbits, core, extra))]
            if new == extra:
                break
            extra = new
        dims = []   # per swizzled dim: (tid pairs, start, bits of its thread part, their lin)
        for d, s in enumerate(starts):
            # (a padded view's code takes each bit the sum may set apart; an unpadded one's takes
            # whole fields of the coordinate, which is below the buffer's size: every bit)
            nb = min(len(images[d]), reach[d].bit_length()) if v.pads else len(images[d])
            dims.append((pairs[d], s, core[d] | extra[d], images[d][:nb]))
        self.cdims = tuple(dims)
        self.slead = None
        if self._coords_fit(v, lay, nl, lb, dims, sd, svals):
            return True
        if not nl:
            return False
        # a layout mixing a stacked dim's coordinate bits (lane bases [2, 1] and [2, 0] over it):
        # the coordinate is the XOR of the bases', the bytes not their sum. As _coord_lead does for
        # aligned views, stacked dim d's coordinate splits as tc_d ^ lo_d (in the thread register,
        # times its stride) plus a register part outside tc_d's bits (the offset). Tried only where
        # the additive split fails: every view it takes is lowered as before.
        self.slead = tuple((p, possible_bits(p)) for p in
                           (tid_pairs(em, lay, lambda b, d=d: int(b[d])) for d in range(nl)))
        self.spairs = ()
        return self._coords_fit(v, lay, nl, lb, dims, sd, svals)

    def _coords_fit(self, v, lay, nl, lb, dims, sd, svals) -> bool:
        """_split_coords' register parts (self.regC) for ``dims``, and whether they, with the
        thread parts, reproduce the view's bytes (for each run-time start in ``svals``)."""
        self.regC = []
        for r in range(lay.num_regs):
            cs = [reg_part(lay, lambda b, d=d: int(b[nl + d]), r) for d in range(len(dims))]
            lo = tuple(c & e for c, (_, _, e, _) in zip(cs, dims))
            hi = _scatter([(c & ~e, v.coff[1][d]) for d, (c, (_, _, e, _)) in enumerate(zip(cs, dims))])
            if self.slead is None:
                s = sum(lb(b) for j, b in enumerate(lay.reg_bases) if r >> j & 1)
            else:   # (lo_d joins lo, after the swizzled dims'; the rest of the coordinate adds)
                ls = [reg_part(lay, lambda b, d=d: int(b[d]), r) for d in range(nl)]
                lo += tuple(c & m for c, (_, m) in zip(ls, self.slead))
                s = sum(st * (c & ~m) for st, c, (_, m) in zip(v.lead, ls, self.slead))
            self.regC.append((lo, v.const + s + v.es * int(pad(np.int64(hi), v.pads))))
        W, Ln, R = self.bytes.shape
        tS = np.zeros((W, Ln), np.int64)
        for bit, val in self.spairs:
            tS += self._tid_bit(bit, W, Ln) * val
        tcs = []
        for pairs, *_ in dims:
            tc = np.zeros((W, Ln), np.int64)
            for bit, val in pairs:
                tc ^= self._tid_bit(bit, W, Ln) * val
            tcs.append(tc)
        from .lds_join import unpacked
        ats = [unpacked(sd, v.coff[1], S) for S in svals]   # (each run-time start, per moving dim)
        lcs = []   # (the stacked dims' coordinates' thread parts, where they split as coordinates)
        for pairs, _ in self.slead or ():
            tc = np.zeros((W, Ln), np.int64)
            for bit, val in pairs:
                tc ^= self._tid_bit(bit, W, Ln) * val
            lcs.append(tc)
        for at, b in zip(ats, self.all_bytes or [self.bytes]):
            pred = np.empty_like(b)
            for r, (lo, imm) in enumerate(self.regC):
                t = _scatter([(s + at.get(d, 0) + (tc ^ x), im)
                              for d, (tc, x, (_, s, _, im)) in enumerate(zip(tcs, lo, dims))]) ^ self.corg
                tl = sum((st * (tc ^ x) for st, tc, x in zip(v.lead, lcs, lo[len(dims):])), tS)
                pred[..., r] = v.es * pad(t, v.pads) + tl + imm
            if not np.array_equal(pred, b):
                return False
        return True

    def _thread_reg_coords(self, lo: tuple):
        """es * pad(XOR_d B_d(start_d + (tc_d ^ lo_d))) + the stacked bytes (_split_coords)."""
        em, v = self.em, self.v
        key = ("lds_thread_coords", self.cdims, self.spairs, lo, v.es, v.pads) + \
            ((self.slead, self.corg) if self.slead or self.corg else ())
        if key in em.memo:
            return em.memo[key]
        add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
        with em.hoisted():
            x = Imm(0)
            for (pairs, s, _, im), c in zip(self.cdims, lo):
                t = thread_part(em, pairs) if pairs else Imm(0)
                if isinstance(t, Imm):  # no thread bits in this dim: its bytes are a constant
                    k = _scatter([(s + (t.bits ^ c), im)])
                    if isinstance(x, Imm):
                        x = Imm(x.bits ^ k)
                    elif k:
                        x = em.valu("v_xor_b32", em.v(), [Imm(k), x])
                    continue
                if c:
                    t = em.valu("v_xor_b32", em.v(), [Imm(c), t])
                if s:
                    t = em.valu(add, em.v(), [Imm(s), t])
                # (padded views keep a term a bit, as before fields: their AMDGCN stays as it was)
                for u in _image_terms(em, t, im) if not v.pads else _bit_terms(em, t, im):
                    x = u if isinstance(x, Imm) and x.bits == 0 else em.valu("v_xor_b32", em.v(), [x, u])
            if self.corg:
                x = Imm(x.bits ^ self.corg) if isinstance(x, Imm) else em.valu("v_xor_b32", em.v(), [Imm(self.corg), x])
            x = self._with_spairs(em, self._padded_bytes(x))
            if self.slead:
                x = _plus_lead_coords(em, x, self.slead, v.lead, lo[len(self.cdims):])
        em.memo[key] = x
        return x

    def _thread_reg_coords_run(self, lo: tuple):
        """es * XOR_d B_d(start_d + [S_d] + (tc_d ^ lo_d)) + the stacked bytes, S (an SGPR: the moving
        dims' starts packed, lds_join.packing) added to theirs: the other dims' terms and the moving
        dims' tc ^ lo + start, packed alike, made at the kernel entry, the sum with S and the terms
        of its packed fields where the view is accessed (S is the loop's or branch's)."""
        em, v = self.em, self.v
        sreg, sd = self.crun
        moving = dict(sd)
        add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
        key = ("lds_thread_coords_run", self.cdims, self.spairs, self.slead, lo, v.es, elem_key(sreg), sd)
        x = em.cse_get(key)
        if x is not None:
            return x
        hkey = ("lds_thread_coords_run0", self.cdims, lo, sd)
        if hkey not in em.memo:
            with em.hoisted():
                x, ts = Imm(0), Imm(0)
                for d, ((pairs, s, _, im), c) in enumerate(zip(self.cdims, lo)):
                    t = thread_part(em, pairs) if pairs else Imm(0)
                    if d in moving:
                        b = moving[d]
                        if isinstance(t, Imm):
                            u = Imm(((t.bits ^ c) + s) << b)
                        else:
                            if c:
                                t = em.valu("v_xor_b32", em.v(), [Imm(c), t])
                            u = em.valu(add, em.v(), [Imm(s), t]) if s else t
                            u = em.valu("v_lshlrev_b32", em.v(), [Imm(b), u]) if b else u
                        if isinstance(ts, Imm) and isinstance(u, Imm):
                            ts = Imm(ts.bits + u.bits)
                        elif isinstance(ts, Imm) and not ts.bits:
                            ts = u
                        else:
                            ts = em.valu(add, em.v(), [ts, u] if isinstance(ts, Imm) else [u, ts])
                        continue
                    if isinstance(t, Imm):  # a constant dim after one with a register part: XOR it in
                        k = _scatter([(s + (t.bits ^ c), im)])
                        if isinstance(x, Imm):
                            x = Imm(x.bits ^ k)
                        elif k:
                            x = em.valu("v_xor_b32", em.v(), [Imm(k), x])
                        continue
                    if c:
                        t = em.valu("v_xor_b32", em.v(), [Imm(c), t])
                    if s:
                        t = em.valu(add, em.v(), [Imm(s), t])
                    for u in _image_terms(em, t, im):
                        x = u if isinstance(x, Imm) and x.bits == 0 else em.valu("v_xor_b32", em.v(), [x, u])
                em.memo[hkey] = (x, ts)
        x, ts = em.memo[hkey]
        if isinstance(ts, Imm):
            t = em.valu(add, em.v(), [Imm(ts.bits), em.to_v(sreg)]) if ts.bits else em.to_v(sreg)
        else:
            t = em.valu(add, em.v(), [sreg, ts])
        ims = [0] * max(b + len(self.cdims[d][3]) for d, b in sd)
        for d, b in sd:
            ims[b:b + len(self.cdims[d][3])] = self.cdims[d][3]
        for u in _image_terms(em, t, tuple(ims)):
            x = u if isinstance(x, Imm) and x.bits == 0 else em.valu("v_xor_b32", em.v(), [x, u])
        x = self._padded_bytes(x)
        if self.slead:   # (stacked coordinates split as XORs: their bytes made at the kernel entry too)
            ckey = ("lds_lead_coords", self.slead, v.lead, lo[len(self.cdims):])
            if ckey not in em.memo:
                with em.hoisted():
                    em.memo[ckey] = _plus_lead_coords(em, Imm(0), self.slead, v.lead, lo[len(self.cdims):])
            c = em.memo[ckey]
            if not isinstance(c, Imm):
                x = em.valu(add, em.v(), [x, c])
            elif c.bits:
                x = em.valu(add, em.v(), [Imm(c.bits), x])
        x = self._plus_hoisted_spairs(em, x, add)
        return em.cse_put(key, em.to_v(x) if isinstance(x, Imm) else x)

    def _plus_hoisted_spairs(self, em, x, add: str):
        """``x`` plus the stacked dims' thread bytes, summed once in the prologue (an address made
        at each access: a carried start's)."""
        if self.spairs:
            skey = ("lds_tid_sum", self.spairs)
            if skey not in em.memo:
                with em.hoisted():
                    em.memo[skey] = _tid_sum(em, self.spairs)
            x = em.valu(add, em.v(), [x, em.memo[skey]])
        return x

    def _with_spairs(self, em, x):
        """``x`` (bytes) plus the stacked dims' thread bytes, as a VGPR."""
        if self.spairs:
            s = _tid_sum(em, self.spairs)
            add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
            x = em.valu(add, em.v(), [x, s]) if not (isinstance(x, Imm) and x.bits == 0) else s
        return em.to_v(x) if isinstance(x, Imm) else x

    def _coord_lead(self, em, lay, nl):
        v = self.v
        self.clead = []   # per stacked dim: (its tid pairs, their possible bits)
        for d in range(nl):
            pairs = tid_pairs(em, lay, lambda b, d=d: int(b[d]))
            self.clead.append((pairs, possible_bits(pairs)))
        if v.xreg is not None and any(pairs and (s & -s) <= v.es * v.xmask
                                      for (pairs, _), s in zip(self.clead, v.lead)):
            raise em.error("this shared-memory view, chosen by a branch among views placed differently "
                           "(a run-time XOR), is accessed across stacked buffers whose strides collide "
                           "with that XOR; slice or index the buffer inside the branch (or loop body) "
                           "instead")
        self.regS = []
        for r in range(lay.num_regs):
            cs = [reg_part(lay, lambda b, d=d: int(b[d]), r) for d in range(nl)]
            self.regS.append(tuple((c & m, c & ~m) for c, (_, m) in zip(cs, self.clead)))

    def _predict(self):
        v = self.v
        W, Ln, R = self.bytes.shape
        tL = np.zeros((W, Ln), np.int64)
        tS = np.zeros((W, Ln), np.int64)
        for bit, val in self.lpairs:
            on = self._tid_bit(bit, W, Ln)
            tL ^= on * val
        rl = np.asarray(self.regL, np.int64)
        if self.clead is not None:  # sum_d lead_d * ((tc_d ^ lo_d) + hi_d), as the code makes it
            lead = np.zeros((W, Ln, R), np.int64)
            for d, ((pairs, _), s) in enumerate(zip(self.clead, v.lead)):
                tc = np.zeros((W, Ln), np.int64)
                for bit, val in pairs:
                    tc ^= self._tid_bit(bit, W, Ln) * val
                lo = np.asarray([x[d][0] for x in self.regS], np.int64)
                hi = np.asarray([x[d][1] for x in self.regS], np.int64)
                lead += s * ((tc[..., None] ^ lo) + hi)
            return v.const + lead + self._lin_table(tL, rl)
        for bit, val in self.spairs:
            on = self._tid_bit(bit, W, Ln)
            tS += on * val
        rs = np.asarray(self.regS, np.int64)
        return v.const + tS[..., None] + rs + self._lin_table(tL, rl)

    def _lin_table(self, tL, rl):
        """es * pad of lin at (waves, lanes, registers), as the code makes it: the thread
        register's part (shifted) and the offset's padded apart."""
        v = self.v
        if not self.shift and self.reach is None:
            return v.es * pad(tL[..., None] ^ rl, v.pads)
        lo, hi = rl & self.possible, rl & ~self.possible
        return v.es * (pad(self.shift + (tL[..., None] ^ lo), v.pads) + pad(hi, v.pads))

    def _tid_bit(self, bit, W, Ln):
        wl = log2(self.em.wave)
        if bit < wl:
            return ((np.arange(Ln) >> bit) & 1)[None, :].repeat(W, 0)
        return ((np.arange(W) >> (bit - wl)) & 1)[:, None].repeat(Ln, 1)

    def vec(self, cap_bytes: int = 16) -> int:
        """Registers per access: 2**k registers at consecutive bytes, aligned, for every thread."""
        es = self.v.es
        R = self.bytes.shape[2]
        V = 1
        while V * 2 * es <= cap_bytes and R % (V * 2) == 0:
            n = V * 2
            good = True
            for b in self.all_bytes or [self.bytes]:   # (a run-time start: every one it may take)
                runs = b.reshape(b.shape[:2] + (R // n, n))
                if not np.array_equal(runs - runs[..., :1], np.broadcast_to(np.arange(n) * es, runs.shape)):
                    good = False
                if (runs[..., 0] % (n * es)).any() or self.v.balign % (n * es) or self.v.xmask % n:
                    good = False
            if not good:
                break
            V = n
        if es == 8:
            V = 1  # a 64-bit element is a register pair: one ds_*_b64 each
        return V

    def where(self, r: int):
        """(which thread register, immediate offset) register r's element is at: registers with
        the same first part share an address VGPR."""
        v = self.v
        if self.cdims is not None:
            return ("coords",) + self.regC[r][:1], self.regC[r][1]
        x = self.regL[r]
        lo, hi = x & self.possible, x & ~self.possible
        if self.clead is not None:
            parts = self.regS[r]
            extra = sum(s * h for s, (_, h) in zip(v.lead, parts))
            return (lo, tuple(x for x, _ in parts)), v.const + extra + v.es * int(pad(np.int64(hi), v.pads))
        return lo, v.const + self.regS[r] + v.es * int(pad(np.int64(hi), v.pads))

    def addr(self, r: int):
        """(VGPR address, immediate offset) of register r's element in this thread."""
        em, v = self.em, self.v
        lo, imm = self.where(r)
        reg = self._thread_reg(lo)
        if v.xreg is not None:  # the run-time XOR: once per thread register (lds_join.py)
            if isinstance(reg, Imm):
                reg = _zero_v(em, reg.bits)
            key = ("lds_xor", elem_key(reg), elem_key(v.xreg))
            x = em.cse_get(key)
            if x is None:
                x = em.cse_put(key, em.valu("v_xor_b32", em.v(), [v.xreg, reg]))
            reg = x
        if v.base is not None:
            key = ("lds_addr", elem_key(reg) if not isinstance(reg, Imm) else reg.bits, elem_key(v.base))
            a = em.cse_get(key)
            if a is None:
                a = em.cse_put(key, em.valu("v_add_u32" if em.t.gfx9 else "v_add_nc_u32", em.v(),
                                            [v.base, reg]))
            reg = a
        elif isinstance(reg, Imm):
            reg = _zero_v(em, reg.bits)
        if imm >= 1 << 16 or imm < 0:
            reg = em.valu("v_add_u32" if em.t.gfx9 else "v_add_nc_u32", em.v(), [Imm(imm), reg])
            imm = 0
        return reg, imm

    def _thread_reg(self, lo):
        """es * pad(shift + (tL ^ lo)) + tS, hoisted to the kernel entry (``lo`` = (lo, (lo_d...)) for
        stacked coordinates split by _coord_lead)."""
        em, v = self.em, self.v
        if self.rshift is not None:
            return self._thread_reg_shifted(lo)
        if self.crun is not None:
            return self._thread_reg_coords_run(lo[1])
        if self.cdims is not None:
            return self._thread_reg_coords(lo[1])
        if self.clead is not None:
            return self._thread_reg_c(*lo)
        key = ("lds_thread", self.lpairs, self.spairs, lo, v.es, v.pads, self.shift)
        if key in em.memo:
            return em.memo[key]
        if not self.lpairs and not self.spairs:
            em.memo[key] = Imm(v.es * int(pad(np.int64(self.shift + lo), v.pads)))
            return em.memo[key]
        with em.hoisted():
            x = self._with_spairs(em, self._lin_bytes(lo))
        em.memo[key] = x
        return x

    def _thread_reg_shifted(self, lo):
        """es * pad(S + m + (tL ^ lo)) + tS for a run-time start S (an SGPR): tL ^ lo and tS made at
        the kernel entry, the rest where the view is accessed (S is the loop's or branch's). Stacked
        coordinates split by _coord_lead (``lo`` = (lo, (lo_d...))) add sum_d lead_d * (tc_d ^ lo_d)
        in place of tS, also made at the kernel entry."""
        em, v = self.em, self.v
        sreg, m = self.rshift
        add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
        if self.clead is not None:
            return self._thread_reg_shifted_c(*lo)
        key = ("lds_thread_sh", self.lpairs, self.spairs, lo, v.es, v.pads, elem_key(sreg), m)
        x = em.cse_get(key)
        if x is not None:
            return x
        hkey = ("lds_thread_sh0", self.lpairs, lo)
        if hkey not in em.memo:
            with em.hoisted():
                t = thread_part(em, self.lpairs) if self.lpairs else Imm(0)
                if lo:
                    t = em.valu("v_xor_b32", em.v(), [Imm(lo), em.to_v(t)])
                em.memo[hkey] = t
        t = em.memo[hkey]
        s = em.salu("s_add_u32", em.s(), [sreg, Imm(m)]) if m else sreg
        if isinstance(t, Imm):
            x = em.valu(add, em.v(), [Imm(t.bits), em.to_v(s)]) if t.bits else em.to_v(s)
        else:
            x = em.valu(add, em.v(), [s, t])
        x = self._padded_bytes(x)
        x = self._plus_hoisted_spairs(em, x, add)
        return em.cse_put(key, x)

    def _thread_reg_shifted_c(self, lo: int, los: tuple):
        """_thread_reg_shifted's address with sum_d lead_d * (tc_d ^ lo_d) for the stacked bytes."""
        em, v = self.em, self.v
        sreg, m = self.rshift
        add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
        cpairs = tuple(p for p, _ in self.clead)
        key = ("lds_thread_sh_c", self.lpairs, cpairs, lo, los, v.es, v.pads, v.lead, elem_key(sreg), m)
        x = em.cse_get(key)
        if x is not None:
            return x
        hkey = ("lds_thread_sh_c0", self.lpairs, lo, cpairs, los, v.lead)
        if hkey not in em.memo:
            with em.hoisted():
                t = thread_part(em, self.lpairs) if self.lpairs else Imm(0)
                if lo:
                    t = em.valu("v_xor_b32", em.v(), [Imm(lo), em.to_v(t)])
                em.memo[hkey] = (t, _plus_lead_coords(em, Imm(0), self.clead, v.lead, los))
        t, c = em.memo[hkey]
        s = em.salu("s_add_u32", em.s(), [sreg, Imm(m)]) if m else sreg
        if isinstance(t, Imm):
            x = em.valu(add, em.v(), [Imm(t.bits), em.to_v(s)]) if t.bits else em.to_v(s)
        else:
            x = em.valu(add, em.v(), [s, t])
        x = self._padded_bytes(x)
        if not isinstance(c, Imm):
            x = em.valu(add, em.v(), [x, c])
        elif c.bits:
            x = em.valu(add, em.v(), [Imm(c.bits), x])
        return em.cse_put(key, x)

    def _thread_reg_c(self, lo: int, los: tuple):
        """es * pad(shift + (tL ^ lo)) + sum_d lead_d * (tc_d ^ lo_d)."""
        em, v = self.em, self.v
        key = ("lds_thread_c", self.lpairs, tuple(p for p, _ in self.clead), lo, los, v.es, v.pads, v.lead,
               self.shift)
        if key in em.memo:
            return em.memo[key]
        if not self.lpairs and not any(p for p, _ in self.clead):
            em.memo[key] = Imm(v.es * int(pad(np.int64(self.shift + lo), v.pads))
                               + sum(s * x for s, x in zip(v.lead, los)))
            return em.memo[key]
        with em.hoisted():
            x = _plus_lead_coords(em, self._lin_bytes(lo), self.clead, v.lead, los)
            if isinstance(x, Imm):
                x = em.to_v(x)
        em.memo[key] = x
        return x

    def _lin_bytes(self, lo: int):
        """es * pad(shift + (tL ^ lo)): a VGPR, or an Imm when no thread bit moves it (emitted in place)."""
        em = self.em
        add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
        x = thread_part(em, self.lpairs) if self.lpairs else Imm(0)
        if lo:
            x = em.valu("v_xor_b32", em.v(), [Imm(lo), em.to_v(x)])
        if self.shift:
            x = Imm(x.bits + self.shift) if isinstance(x, Imm) else em.valu(add, em.v(), [Imm(self.shift), x])
        return self._padded_bytes(x)

    def _padded_bytes(self, x):
        """es * pad(x) of a VGPR (emitted in place) or an Imm."""
        em, v = self.em, self.v
        add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
        if v.pads and not isinstance(x, Imm):
            acc = x
            for k, p in v.pads:
                t = em.valu("v_lshrrev_b32", em.v(), [Imm(k), x])
                t = em.valu("v_lshlrev_b32", em.v(), [Imm(p), t])
                acc = em.valu(add, em.v(), [acc, t])
            x = acc
        elif isinstance(x, Imm):
            x = Imm(int(pad(np.int64(x.bits), v.pads)))
        if v.es > 1 and not isinstance(x, Imm):
            x = em.valu("v_lshlrev_b32", em.v(), [Imm(log2(v.es)), x])
        elif isinstance(x, Imm):
            x = Imm(x.bits * v.es)
        return x


def _plus_lead_coords(em, x, clead, lead, los):
    """``x`` plus sum_d lead_d * (tc_d ^ lo_d), tc_d the thread part of stacked dim d's coordinate."""
    add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
    for (pairs, _), s, c in zip(clead, lead, los):
        if not pairs:  # (then no register bit goes to the thread: c is 0)
            continue
        t = thread_part(em, pairs)
        if c:
            t = em.valu("v_xor_b32", em.v(), [Imm(c), t])
        if s & (s - 1) == 0:
            if s > 1:
                t = em.valu("v_lshlrev_b32", em.v(), [Imm(log2(s)), t])
        else:
            t = em.valu("v_mul_u32_u24", em.v(), [Imm(s), t])
        x = t if isinstance(x, Imm) and x.bits == 0 else em.valu(add, em.v(), [x, t])
    return x


def _scatter(parts) -> np.ndarray | int:
    """XOR over (coordinate x, lin of each of its bits) of the lin of x's set bits."""
    out = 0
    for x, images in parts:
        for j, b in enumerate(images):
            out = out ^ ((x >> j) & 1) * b
    return out


def _image_terms(em, t, im):
    """VGPRs whose XOR is B(t), t < 2 ** len(im) a VGPR (see bit_fields): a field is t itself where it
    spans t, else a v_bfe_u32; its places, where they do not overlap, are one multiply (their XOR
    is their sum). Each emitted as it is taken."""
    for (j, k), places in bit_fields(im).items():
        u = t if j == 0 and k == len(im) else em.valu("v_bfe_u32", em.v(), [t, Imm(j), Imm(k)], form="vop3")
        groups: list = []
        for p in places:
            g = next((g for g in groups if all(abs(p - q) >= k for q in g)), None)
            g.append(p) if g is not None else groups.append([p])
        for g in groups:
            m = sum(1 << p for p in g)
            if m & (m - 1):
                yield em.valu("v_mul_u32_u24", em.v(), [Imm(m), u])
            else:
                yield em.valu("v_lshlrev_b32", em.v(), [Imm(g[0]), u]) if g[0] else u


def _bit_terms(em, t, im):
    """VGPRs whose XOR is B(t), one a bit of t, each emitted as it is taken."""
    for j, b in enumerate(im):
        if not b:
            continue
        u = em.valu("v_bfe_u32", em.v(), [t, Imm(j), Imm(1)], form="vop3")
        if b & (b - 1):
            u = em.valu("v_mul_u32_u24", em.v(), [Imm(b), u])
        elif b > 1:
            u = em.valu("v_lshlrev_b32", em.v(), [Imm(log2(b)), u])
        yield u


def _tid_sum(em, pairs):
    """VGPR: the sum of the values of the set work-item id bits (stacked-dim byte strides)."""
    add = "v_add_u32" if em.t.gfx9 else "v_add_nc_u32"
    acc = None
    for bit, val in pairs:
        t = em.valu("v_bfe_u32", em.v(), [em.tid, Imm(bit), Imm(1)], form="vop3")
        t = em.valu("v_mul_u32_u24", em.v(), [Imm(val), t])
        acc = t if acc is None else em.valu(add, em.v(), [acc, t])
    return acc


def _zero_v(em, value: int):
    key = ("lds_const_v", value)
    if key not in em.memo:
        with em.hoisted():
            em.memo[key] = em.to_v(Imm(value))
    return em.memo[key]

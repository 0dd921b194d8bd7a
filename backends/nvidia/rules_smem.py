"""Shared-memory buffers, their views, loads and stores, CTA barriers and cp.async.

A buffer value is a :class:`Smem`: a b32 register holding a shared address, a constant byte
offset, and the byte offset of every element relative to both (numpy, from the shared
layout's ``element_offsets``). Views re-index the table at compile time; only ``index``
with a run-time index moves the base register (base + i * the leading dim's stride).

The swizzled and NVMMA layouts place elements XOR-linearly in their coordinate bits, so an
access from a distributed layout splits like a global address: the thread's part is one
register made once in the prologue, each register's part a constant. Bits the two share
(the swizzle) are XORed into the thread register per distinct value (a handful per
layout); the rest is the instruction's immediate offset. Runs of registers at consecutive,
aligned offsets move as one ``ld/st.shared.v*`` of up to 16 bytes.

Barriers come from :mod:`gluon_trace.membar` (a ``bar.sync 0`` right before each access it
names). An async copy is visible to other threads after the user's ``wait_group`` and the
barrier membar puts before the first read of its buffer.
"""
from __future__ import annotations

import functools

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace.errors import CompileError
from gluon_trace.ops_memory import element_offsets

from . import fp8, ptx
from .emitter import rule
from .rules_memory import _extract8, _extract16, _to16, vec_width


LDMATRIX = True  # 16-bit loads (stores) through ldmatrix (stmatrix) where the layouts allow; a switch for tests


class Smem:
    """A shared buffer or view: element c lives at base + const + rel[c] (bytes), or, with a
    run-time XOR ``xreg`` (a view chosen by a branch or carried by a loop among views whose
    XOR-linear tables differ by a constant XOR: smem_join.py), at base + const + (rel[c] ^ X)
    where X, the register's value, has only bits of ``xmask``. ``plin``: for a view of a
    padded buffer, (the padding's linear index of each element, re-indexed with ``rel``, and
    the padding pairs as (log2 interval, padding)); Access needs it only for a view whose table
    is no sum over its coordinate bits (a slice from inside a padding period). None elsewhere.
    ``sreg``: a padded view chosen by a branch or carried by a loop among views that start at
    different linear indices (smem_padded.py): element c at base + const + rel[c] + es *
    pad(S + plin[0][c]), S the register's value, a multiple of ``salign``. ``coff``: for a
    view made by slices (and run-time ``index``) of an unpadded buffer, (the buffer's table
    ``root`` with the indexed dims dropped, the view's start in each of its dims): element c
    at base + root[c + start]; Access needs it only for a view whose table is not XOR-linear
    (a slice from inside a swizzle period: smem_swizzled.py); with ``xreg``, the table T of the
    view X applies to and the start in it: element c at base + const + (T[c + start] ^ X), ``rel``
    being T[c + start] (smem_join.slice_xor). None elsewhere. ``joined``: the view
    a branch or loop carries with one table for all its views (only the refusal's words use it).
    ``creg``: a view with ``coff`` chosen by a branch or carried by a loop among slices whose
    starts in some dims differ (inside a swizzle period): the register holding those starts,
    packed as ``cdim`` ((dim, bit), ...) says (``coff``'s are 0 there; ``rel`` only gives the
    shape): smem_swizzled.py."""
    __slots__ = ("base", "const", "rel", "dtype", "align", "xreg", "xmask", "plin", "sreg", "salign", "coff", "joined",
                 "creg", "cdim")

    def __init__(self, base: str, const: int, rel: np.ndarray, dtype: dt.dtype, align: int,
                 xreg: str | None = None, xmask: int = 0, plin: tuple | None = None,
                 sreg: str | None = None, salign: int = 0, coff: tuple | None = None, joined: bool = False,
                 creg: str | None = None, cdim: tuple | None = None):
        self.base, self.const, self.rel, self.dtype, self.align = base, const, rel, dtype, align
        self.xreg, self.xmask, self.plin = xreg, xmask, plin
        self.sreg, self.salign = sreg, salign
        self.coff, self.joined = coff, joined
        self.creg, self.cdim = creg, cdim

    def shifted(self, rel: np.ndarray, idx=None) -> "Smem":
        """The same base, a re-indexed table (normalised so rel at the origin is 0); ``idx``,
        the index that re-indexed it, re-indexes ``plin`` (and a slice's ``coff``) too."""
        o = int(rel.flat[0]) if rel.size else 0
        coff = None
        if self.coff is not None and idx is not None:
            root, starts = self.coff
            coff = (root, tuple(st + (i.start or 0) for st, i in zip(starts, idx)))
        return Smem(self.base, self.const + o, rel - o, self.dtype, self.align,
                    plin=self.plin_at(idx) if idx is not None else None, coff=coff)

    def plin_at(self, fn) -> tuple | None:
        """``plin`` with its table re-indexed like ``rel`` (``fn``: an index, or a function of
        the table)."""
        if self.plin is None:
            return None
        lin, pads = self.plin
        return (fn(lin) if callable(fn) else lin[fn]), pads


def _plin_of(layout, shape: tuple) -> tuple | None:
    """``Smem.plin`` of a buffer of ``shape`` in ``layout`` (None unless padded)."""
    from gluon_trace.shared_layouts import PaddedSharedLayout, _offsets_from_bases
    if not isinstance(layout, PaddedSharedLayout) or len(shape) < len(layout.shape):
        return None
    inner = tuple(shape[len(shape) - len(layout.shape):])
    lin = np.broadcast_to(_offsets_from_bases(inner, layout.offset_bases), shape)
    pads = tuple((i.bit_length() - 1, p) for i, p in layout.interval_padding_pairs)
    return lin, pads


def _pad(x, pads):
    """A padded layout's element offset of linear index ``x`` (int or array)."""
    return x + sum((x >> k) * p for k, p in pads)


def _esize(t: dt.dtype) -> int:
    return max(t.bits // 8, 1)


def _pow2_div(v: int, cap: int = 1 << 12) -> int:
    return ptx.pow2_div(v, cap) if v else cap


def _view_of(em, v, xor_ok: bool = False, start_ok: bool = False) -> Smem:
    """The view ``v``; ``xor_ok``: the caller addresses elements through Access, which folds a
    run-time XOR into the thread's register (every other use needs the view's placement at
    compile time: a descriptor, a TMA box, one start address); ``start_ok`` (implied by
    ``xor_ok``): through Access, which takes a padded view's run-time start."""
    s = em.vals[v][0]
    if not isinstance(s, Smem):
        raise CompileError("a shared-memory descriptor reached the NVIDIA backend through a path it "
                           "does not follow (a loop-carried or branch-selected buffer); pass the "
                           "buffer itself and index it inside the loop", em.loc)
    if s.xreg is not None and not xor_ok:
        raise CompileError("this shared-memory view was chosen by a branch (or carried by a loop) among "
                           "views placed differently (column halves of a swizzled tile: their offsets "
                           "differ by an XOR known only at run time), which only .load() and .store() "
                           "(and views of it: .index/.slice/.permute/.reshape/.reinterpret) take; slice or "
                           "index the buffer inside the branch (or loop body), right where it is used here, "
                           "or branch around this operation", em.loc)
    if s.sreg is not None and not (xor_ok or start_ok):
        from .smem_padded import refuse
        refuse("this operation", em.loc)
    if s.creg is not None and not (xor_ok or start_ok):
        from .smem_swizzled_runtime import refuse_runtime
        refuse_runtime("this operation", em.loc)
    return s


def _barrier_if_needed(em, op) -> None:
    """membar's verdict for this access (scratch lives above every buffer: it never conflicts)."""
    if op in em.membar:
        em.barrier()


# -- allocation and views ---------------------------------------------------------------------

@rule("smem_alloc")
def _alloc(em, op):
    t = op.results[0].type
    if t.dtype.is_bool:
        raise CompileError("int1 shared buffers are not supported on NVIDIA; store int8 (x.to(gl.int8)) "
                           "instead", op.loc)
    off = em.smem_plan.offsets[op]
    key = ("smem_buf", off)
    base = em.thread_cache.get(key)
    if base is None:
        base = em.thread_cache[key] = em.reg("b32")
        em.pro(f"add.u32 {base}, {em.smem_start()}, {off};")
    es = _esize(t.dtype)
    offs, _ = element_offsets(t.layout, tuple(t.shape), t.dtype.bits)
    rel = np.asarray(offs, np.int64) * es
    plin = _plin_of(t.layout, tuple(t.shape))
    s = Smem(base, 0, rel, t.dtype, _pow2_div(off, 16),  # gt_smem: .align 16
             plin=plin, coff=None if plin is not None else (rel, (0,) * rel.ndim))
    if op.operands:
        _barrier_if_needed(em, op)
        _store_tile(em, s, op.operands[0])
    return [[s]]


@rule("smem_index")
def _index(em, op):
    s = _view_of(em, op.operands[0], xor_ok=True)
    i_v = op.operands[1]
    if s.creg is not None:
        from .smem_swizzled_runtime import index_view
        return [[index_view(em, s, _index_reg(em, i_v), op.loc)]]
    if s.sreg is not None:
        from .smem_padded import index_view
        return [[index_view(em, s, _index_reg(em, i_v), op.loc)]]
    n = s.rel.shape[0]
    stride = int(s.rel[1].flat[0] - s.rel[0].flat[0]) if n > 1 else 0
    for j in range(n):
        if not np.array_equal(s.rel[j], s.rel[0] + j * stride):
            raise CompileError("the leading dim of this buffer is not evenly strided in shared memory; "
                               "index a buffer allocated with stacked leading dims", op.loc)
    if s.xreg is not None:
        from .smem_join import index_xor
        index_xor(s, stride, n, op.loc)
    coff = None
    if s.coff is not None and s.coff[1][0] == 0:  # (slot i: the base moved by i * stride)
        coff = (s.coff[0][0], s.coff[1][1:])
    elif s.coff is not None:  # (from a stacked start: moved into the base first, smem_stacked.py)
        from .smem_stacked import fold_plain
        s, coff = fold_plain(em, s, s.rel[0], lambda c: (c[0][0], c[1][1:]) if c[1][0] == 0 else None)
    i = _index_reg(em, i_v)
    base = em.ins("b32", f"mad.lo.u32 {{d}}, {i}, {stride}, {s.base};") if stride else s.base
    align = min(s.align, _pow2_div(stride, 16))
    return [[Smem(base, s.const, s.rel[0], s.dtype, align, s.xreg, s.xmask, s.plin_at(0), coff=coff)]]


def _index_reg(em, i_v) -> str:
    i = em.vals[i_v][0]
    if i_v.type.dtype.bits == 64:
        i = em.ins("b32", f"cvt.u32.u64 {{d}}, {i};")
    return i


@rule("smem_slice")
def _slice(em, op):
    s = _view_of(em, op.operands[0], xor_ok=True)
    a = op.attrs
    idx = [slice(None)] * s.rel.ndim
    idx[a["dim"]] = slice(a["start"], a["start"] + a["length"])
    if s.xreg is not None:
        from .smem_join import slice_xor
        return [[slice_xor(em, s, s.rel[tuple(idx)], op.loc, tuple(idx))]]
    if s.sreg is not None:
        from .smem_padded import slice_view
        return [[slice_view(em, s, tuple(idx))]]
    if s.creg is not None:
        from .smem_swizzled_runtime import slice_view
        return [[slice_view(em, s, tuple(idx))]]
    return [[s.shifted(s.rel[tuple(idx)], tuple(idx))]]


@rule("smem_permute")
def _permute(em, op):  # (a re-indexed table places elements where they were: the XOR still holds)
    s = _view_of(em, op.operands[0], xor_ok=True)
    order = op.attrs["order"]
    coff = None if s.coff is None else (np.transpose(s.coff[0], order), tuple(s.coff[1][o] for o in order))
    cdim = None if s.creg is None else tuple(sorted((list(order).index(d), b) for d, b in s.cdim))
    return [[Smem(s.base, s.const, np.transpose(s.rel, order), s.dtype, s.align, s.xreg, s.xmask,
                  s.plin_at(lambda a: np.transpose(a, order)), s.sreg, s.salign, coff=coff, creg=s.creg, cdim=cdim)]]


@rule("smem_reshape")
def _reshape(em, op):
    s = _view_of(em, op.operands[0], xor_ok=True)
    shape = tuple(op.attrs["shape"])
    if s.creg is not None:
        from .smem_swizzled_runtime import reshape_view
        return [[reshape_view(em, s, shape, op.loc)]]
    coff = None
    if s.coff is not None:  # (the buffer's table and the start, reshaped alike where they can be)
        from .smem_swizzled import reshape_coff
        coff = reshape_coff(s.coff, tuple(s.rel.shape), shape)
        if coff is None:  # (a stacked start it splits unevenly: moved into the base first, smem_stacked.py)
            from .smem_stacked import fold_plain
            s, coff = fold_plain(em, s, np.reshape(s.rel, shape), lambda c: reshape_coff(c, tuple(s.rel.shape), shape))
    return [[Smem(s.base, s.const, np.reshape(s.rel, shape), s.dtype, s.align, s.xreg, s.xmask,
                  s.plin_at(lambda a: np.reshape(a, shape)), s.sreg, s.salign, coff=coff)]]


@rule("smem_reinterpret")
def _reinterpret(em, op):
    s = _view_of(em, op.operands[0], xor_ok=True)
    t = op.results[0].type
    if t.dtype.is_bool:
        raise CompileError("int1 shared buffers are not supported on NVIDIA; use int8", op.loc)
    if s.creg is not None:
        from .smem_swizzled_runtime import refuse_runtime
        refuse_runtime(".reinterpret()", op.loc)
    start = s.const + int(s.rel.min())
    es = _esize(t.dtype)
    base, align = s.base, s.align
    if s.sreg is not None:  # (it starts at pad(S), known at run time: the base takes it)
        from .smem_padded import start_reg
        base, align = start_reg(em, s)
    if s.xreg is not None:  # (its lowest offset moves with the XOR: the base takes it)
        from .smem_join import reinterpret_start
        base, align = reinterpret_start(em, s, es, op.loc)
    if start % es:
        raise CompileError(f"reinterpret as {t.dtype} starts at byte {start}, not a multiple of {es}", op.loc)
    offs, _ = element_offsets(t.layout, tuple(t.shape), t.dtype.bits)
    plin = _plin_of(t.layout, tuple(t.shape)) if s.xreg is None else None
    return [[Smem(base, start, np.asarray(offs, np.int64) * es, t.dtype, align, plin=plin)]]


# -- addressing ---------------------------------------------------------------------------------

def _linear_bits(shape: tuple, raw: bytes) -> tuple | None:
    """Per dim, the offset of each coordinate bit, if the table is XOR-linear in them, every
    offset >= 0. (Column 4 of a transposed-NVMMA f16 [16, 8] buffer, 32-byte swizzled, is
    128 + 2 * (row ^ 8) = 144 ^ 2 * row; relative to its first element, 144, rows 0..15 sit at
    2 * (row & 7) - 16 * (row >> 3): XOR-linear in two's complement with row bit 3 at -16, but
    an XOR of such offsets sets every bit above the address's, and the address base + const +
    that register leaves shared memory unless 32-bit arithmetic wraps it back. Not linear here,
    the view is const ^ an XOR-linear table (``_xor_affine``: 144 ^ 2 * row) or, failing that,
    taken from its start (smem_swizzled.py).)"""
    bits = _bit_offsets(shape, raw, False)
    return None if bits is not None and any(o < 0 for col in bits for o in col) else bits


def _additive_bits(shape: tuple, raw: bytes) -> tuple | None:
    """Per dim, the offset of each coordinate bit, if the table is their sum: a padded layout
    (padding after every interval adds a multiple of the offset's high bits, so offsets of
    coordinates with disjoint bits add up)."""
    return _bit_offsets(shape, raw, True)


@functools.lru_cache(maxsize=512)
def _bit_offsets(shape: tuple, raw: bytes, additive: bool) -> tuple | None:
    """Per dim, the offset of each coordinate bit, if the table (``raw``: int64 offsets of
    ``shape``) is those offsets combined over a coordinate's set bits, by XOR or, ``additive``,
    by sum."""
    rel = np.frombuffer(raw, np.int64).reshape(shape)
    bits, exp = [], np.zeros(shape, np.int64)
    for d, n in enumerate(shape):
        if n & (n - 1):
            return None
        col = []
        idx = np.arange(n).reshape([n if e == d else 1 for e in range(len(shape))])
        for j in range(n.bit_length() - 1):
            unit = [0] * len(shape)
            unit[d] = 1 << j
            v = int(rel[tuple(unit)])
            col.append(v)
            term = ((idx >> j) & 1) * v
            exp = exp + term if additive else exp ^ term
        bits.append(tuple(col))
    return tuple(bits) if np.array_equal(exp, rel) else None


def offset_fn(em, s: Smem, what: str, lin=None):
    """coordinate -> byte offset in the view (relative to its base + const); ``f.additive``: the
    offsets of coordinate bits add (a padded layout) rather than XOR; ``f.bits``: per dim, the
    offset of each coordinate bit."""
    raw = np.ascontiguousarray(s.rel).tobytes()
    bits = _linear_bits(tuple(s.rel.shape), raw)
    additive = False
    if bits is None and lin is not None:  # (bases that mix coordinate bits: Access sums at run time)
        bits = _additive_bits(tuple(s.rel.shape), raw)
        additive = True
    if bits is None:
        raise CompileError(f"{what}: this shared layout does not place elements XOR-linearly (or, padded, "
                           "additively) in their coordinates (a slice at an unaligned start?); the NVIDIA "
                           "backend lowers swizzled, NVMMA, linear and padded shared layouts", em.loc)

    def f(c):
        v = 0
        for d, x in enumerate(c):
            for j, o in enumerate(bits[d]):
                if x >> j & 1:
                    v = v + o if additive else v ^ o
        return v
    f.additive = additive
    f.bits = bits
    return f


def _disjoint_bases(lin) -> bool:
    """Whether the tile's register, lane and warp bases set pairwise disjoint coordinate bits
    (then an element's coordinate is their sum as well as their XOR)."""
    seen = None
    for b in list(lin.reg_bases) + list(lin.lane_bases) + list(lin.warp_bases):
        if not any(b):
            continue
        bits = tuple(int(x) for x in b)
        if seen is None:
            seen = [0] * len(bits)
        if any(s & x for s, x in zip(seen, bits)):
            return False
        seen = [s | x for s, x in zip(seen, bits)]
    return True


def _xor_affine(s: Smem) -> tuple[Smem, int]:
    """(a view, X) with the element offsets of ``s`` = the view's (XOR-linear) ^ X. A slice of
    a swizzled dim from a start inside the swizzle's period (columns 8..15 of a 16-wide
    128-byte-swizzled tile) places element c at L(c + start) = L(c) ^ L(start): XOR-linear up
    to a constant XOR, which no added offset can express. Else (s, 0)."""
    rel = s.rel
    if not s.const or s.xreg is not None or _linear_bits(tuple(rel.shape), np.ascontiguousarray(rel).tobytes()) is not None:
        return s, 0
    lin = (rel + s.const) ^ s.const
    if _linear_bits(tuple(lin.shape), np.ascontiguousarray(lin).tobytes()) is None:
        return s, 0
    return Smem(s.base, 0, lin, s.dtype, s.align), s.const


class Access:
    """Where each register of a tile in ``lin`` lives in the view ``s``, per thread."""

    def __init__(self, em, s: Smem, lin, what: str, lane_fn=None):
        if s.creg is not None:  # (a swizzled slice's run-time start: smem_swizzled_runtime.py)
            from .smem_swizzled_runtime import runtime_coords
            self.em, self.s, self.lin, self.xor, self.shift = em, s, lin, 0, 0
            self.runtime, self.ct = False, None
            runtime_coords(self, what, lane_fn)
            return
        if s.sreg is not None:  # (a padded view's run-time start: smem_padded.py)
            from .smem_padded import runtime_access
            self.em, self.s, self.lin, self.xor, self.shift = em, s, lin, 0, 0
            runtime_access(self, em, s, lin, what)
            return
        self.runtime, self.ct = False, None
        s, self.xor = _xor_affine(s)  # (a view with a run-time XOR has an XOR-linear table: xor 0)
        self.em, self.s, self.lin = em, s, lin
        self.mixed, self.shift = None, 0
        try:
            f = offset_fn(em, s, what, lin if lane_fn is None else None)
        except CompileError:
            # tried only where offset_fn refuses: every view lowered before is lowered as before
            if lane_fn is None and self._padded_shift():
                return
            if lane_fn is None and s.coff is not None:
                from .smem_swizzled import start_coords
                if start_coords(self):
                    return
            if s.joined and s.plin is None and s.xreg is None:
                from .smem_swizzled import refuse_joined
                refuse_joined(em, what)
            raise
        self.f = f
        self.additive = f.additive
        if self.additive and not _disjoint_bases(lin):
            self._mixed(f)
            return
        if self.additive:  # thread part and register parts add: nothing is XORed into the register
            self.treg, low = em.thread_sum(tuple(f(b) for b in lin.lane_bases), tuple(f(b) for b in lin.warp_bases))
            self.tmask, self.tlow = 0, low
        elif lane_fn is None:
            self.treg, self.tmask = em.thread_part(lin, f)
            self.tlow = self.tmask
        else:  # the lanes address something else than their own elements (ldmatrix rows)
            self.treg, self.tmask = em.thread_xor(tuple(lane_fn(f)), tuple(f(b) for b in lin.warp_bases))
            self.tlow = self.tmask
        if s.xreg is not None:  # X joins the thread's part: register parts with its bits go there too
            assert not self.additive, "a run-time XOR on a table that is not XOR-linear"
            self.tmask |= s.xmask
            self.tlow = self.tmask
        self.es = _esize(s.dtype)
        self.offs = [(sum(f(b) for i, b in enumerate(lin.reg_bases) if r >> i & 1) if self.additive
                      else em.reg_part(lin, r, f) ^ self.xor) for r in range(lin.num_regs)]

    def _mixed(self, f) -> None:
        """An additive (padded) table addressed from a layout whose bases mix coordinate bits
        (lane bases [1] and [3]): an element's coordinate is the XOR of its bases', not their
        sum, so no per-basis offsets add up to its place. The thread's coordinate bits, packed
        dim after dim into one word, are XOR-linear in its lane and warp: one register K (the
        prologue); register r's packed coordinate splits into bits K can have (lo, XORed into
        K) and the rest (hi, disjoint from it). The table adds over coordinate bits, so the
        offset is F(K ^ lo) + F(hi): the first summed at run time in the prologue per distinct
        lo, the second the instruction's immediate."""
        em, lin, s = self.em, self.lin, self.s
        shifts, sh = [], 0
        for col in f.bits:
            shifts.append(sh)
            sh += len(col)
        vals = tuple(o for col in f.bits for o in col)  # packed bit -> its offset

        def pack(c):
            return functools.reduce(lambda a, d: a | int(c[d]) << shifts[d], range(len(shifts)), 0)

        def F(k):
            return sum(o for p, o in enumerate(vals) if k >> p & 1)
        self.treg, self.tmask = em.thread_xor(tuple(pack(b) for b in lin.lane_bases),
                                              tuple(pack(b) for b in lin.warp_bases))
        self.tvals = tuple(o if self.tmask >> p & 1 else 0 for p, o in enumerate(vals))
        self.tlow = functools.reduce(lambda a, o: a | o, self.tvals, 0)
        self.es = _esize(s.dtype)
        self.mixed = []
        for r in range(lin.num_regs):
            k = functools.reduce(lambda a, i: a ^ pack(lin.reg_bases[i]) if r >> i & 1 else a,
                                 range(len(lin.reg_bases)), 0)
            self.mixed.append((k & self.tmask, F(k & ~self.tmask)))
        self.offs = [hi for _, hi in self.mixed]

    def _padded_shift(self) -> bool:
        """A view of a padded buffer from inside a padding period (rows 1..4 of rows padded
        every four: 0, 32, 64, 104 elements past row 1, no sum over the view's row bits).
        Its linear indices are a + shift + M(c): a whole padding periods (pad(a + y) =
        pad(a) + pad(y)), M XOR-linear in the view's coordinate bits. The thread's part of M is
        one register K; register r's part splits into lo, the bits the sum shift + (K ^ lo)
        can carry into (XORed into K, then shift added, in the prologue), and hi, bits clear
        in every such sum: pad adds over disjoint bits, so the offset is pad(shift + (K ^ lo))
        (summed per bit in the prologue, per distinct lo) + pad(hi) (the immediate). Checked
        against the view's table for every thread and register; False where it does not hold."""
        em, lin, s = self.em, self.lin, self.s
        if s.plin is None or s.xreg is not None or not s.rel.size:
            return False
        L, pads = np.asarray(s.plin[0], np.int64), s.plin[1]
        es = _esize(s.dtype)
        c0 = s.const + s.rel - es * _pad(L, pads)  # (a view of one slot of a stack: constant)
        ct, clow, cregs, ctab = None, 0, [0] * lin.num_regs, 0
        if np.any(c0 != c0.flat[0]):  # (slots of a stacked buffer: padding never touches them)
            from .smem_padded import stack_part
            ct, clow, cregs, ctab = stack_part(em, c0 - c0.flat[0], lin)
        step = max(1 << k for k, _ in pads)
        a = int(L.min()) // step * step
        shift = int(L.min()) - a
        M = L - a - shift
        g = _linear_bits(tuple(M.shape), np.ascontiguousarray(M).tobytes())
        if g is None:
            return False

        def m(c):
            return functools.reduce(lambda v, d: functools.reduce(
                lambda w, j: w ^ g[d][j] if int(c[d]) >> j & 1 else w, range(len(g[d])), v), range(len(g)), 0)
        self.treg, kmask = em.thread_xor(tuple(m(b) for b in lin.lane_bases), tuple(m(b) for b in lin.warp_bases))
        # bits below the lowest K or shift can set pass through the sum untouched: the immediate
        # keeps them (runs of registers stay vectors)
        low = ((kmask | shift) & -(kmask | shift)) - 1 if kmask | shift else 0
        ext = ((1 << (shift + kmask).bit_length()) - 1) & ~low
        regs = [functools.reduce(lambda v, i: v ^ m(lin.reg_bases[i]) if r >> i & 1 else v,
                                 range(len(lin.reg_bases)), 0) for r in range(lin.num_regs)]
        cw, ln, rg = lin.coords().shape[:3]
        kvals = np.zeros((cw, ln), np.int64)
        for bases, axis in ((lin.lane_bases, 1), (lin.warp_bases, 0)):
            idx = np.arange((cw, ln)[axis]).reshape((-1, 1) if axis == 0 else (1, -1))
            for i, b in enumerate(bases):
                kvals = kvals ^ ((idx >> i) & 1) * m(b)
        # the register bits XORed into K can carry the sum past ext (rows 29.. of rows padded
        # every 8, register bit 4 above lane bits 2, 3): widened until the sum stays inside,
        # tried only where the first ext fails the check (views lowered before stay as they were)
        wide = ext
        while True:
            rbits = functools.reduce(lambda u, x: u | (x & wide), regs, 0)
            nxt = ((1 << (shift + (kmask | rbits)).bit_length()) - 1) & ~low
            if nxt == wide:
                break
            wide = nxt
        for ext in ([ext, wide] if wide != ext else [ext]):
            if self._padded_shift_with(ext, regs, kvals, kmask, shift, pads, es, c0, ct, clow, cregs, ctab, a):
                return True
        return False

    def _padded_shift_with(self, ext, regs, kvals, kmask, shift, pads, es, c0, ct, clow, cregs, ctab, a) -> bool:
        """_padded_shift's offsets with the register bits ``ext`` summed per thread: True (and
        the access set up) where they match the view's table."""
        lin, s = self.lin, self.s
        lo = np.asarray([x & ext for x in regs], np.int64)
        y = shift + (kvals[..., None] ^ lo)  # (warps, lanes, regs)
        top = int(y.max()).bit_length()
        tvals = tuple(es * int(_pad(1 << j, pads)) if ext >> j & 1 else 0 for j in range(top))
        base0 = int(c0.flat[0]) + es * int(_pad(a, pads)) - s.const
        hi = [base0 + es * int(_pad(x & ~ext, pads)) + cregs[r] for r, x in enumerate(regs)]
        got = sum(((y >> j) & 1) * v for j, v in enumerate(tvals)) + np.asarray(hi, np.int64) + s.const + ctab
        c = lin.coords()
        want = s.const + s.rel[tuple(c[..., d] for d in range(c.shape[-1]))]
        if not np.array_equal(got, want):
            return False
        self.tmask, self.shift, self.tvals, self.ct = kmask, shift, tvals, ct
        self.tlow = functools.reduce(lambda u, v: u | v, tvals, clow)
        self.es = es
        self.mixed = [(int(lo[r]), hi[r]) for r in range(lin.num_regs)]
        self.offs = hi
        self.additive = True
        return True

    def _mixed_vec(self, cap_elems: int) -> int:
        es, n, V = self.es, self.lin.num_regs, 1
        while V * 2 <= min(cap_elems, 16 // es) and n % (V * 2) == 0:
            W, span = V * 2, V * 2 * es
            ok = self.s.align % span == 0 and self.s.const % span == 0 and not self.tlow & (span - 1)
            for r0 in range(0, n, W):
                lo0, hi0 = self.mixed[r0]
                ok = ok and hi0 % span == 0 and all(self.mixed[r0 + i] == (lo0, hi0 + i * es) for i in range(W))
                # (and one stacked-slots register: a run's registers differ in their immediates alone)
                ok = ok and (self.ct is None or all(self.ct[r0 + i] == self.ct[r0] for i in range(W)))
            if not ok:
                break
            V = W
        return V

    def _at(self, t: str, hi: int) -> str:
        """``[base + t + const + hi]``: the view's base plus thread register ``t`` (one add per
        pair in a region), the constant parts as the immediate."""
        key = ("saddr", self.s.base, t)
        a = self.em.memo_get(key)
        if a is None:
            a = self.em.ins("b32", f"add.u32 {{d}}, {self.s.base}, {t};")
            self.em.memo_put(key, a)
        imm = self.s.const + hi
        return f"[{a}+{imm}]" if imm else f"[{a}]"

    def _mixed_addr(self, r: int) -> str:
        if self.runtime:
            from .smem_padded import runtime_addr
            return runtime_addr(self, r)
        em = self.em
        lo, hi = self.mixed[r]
        ct = self.ct[r] if self.ct is not None else None   # (the stacked slots' part of the thread's address)
        key = ("smem_padsum", self.treg, lo, self.tvals, self.shift) + ((ct,) if ct else ())
        t = em.thread_cache.get(key)
        if t is None:
            src = self.treg
            if lo:
                src = em.reg("b32")
                em.pro(f"xor.b32 {src}, {self.treg}, {lo};")
            if self.shift:
                x, src = src, em.reg("b32")
                em.pro(f"add.u32 {src}, {x}, {self.shift};")
            t = em.fold_terms("add.u32", em._bit_terms(src, self.tvals))
            if ct:
                x, t = t, em.reg("b32")
                em.pro(f"add.u32 {t}, {x}, {ct};")
            em.thread_cache[key] = t
        return self._at(t, hi)

    def vec(self, cap_elems: int) -> int:
        """Registers per access: runs of 2**k registers at consecutive, aligned offsets."""
        if self.mixed is not None:
            return self._mixed_vec(cap_elems)
        lin, es = self.lin, self.es
        V = 1
        while V * 2 <= min(cap_elems, 16 // es):
            k = V.bit_length() - 1
            if k >= len(lin.reg_bases) or self.f(lin.reg_bases[k]) != es * V:
                break
            V *= 2
        while V > 1:
            k = V.bit_length() - 1
            span = V * es
            rest = [self.f(b) for b in lin.reg_bases[k:]]
            if self.s.align % span == 0 and self.s.const % span == 0 and not self.tlow & (span - 1) \
                    and self.xor % span == 0 and all(o % span == 0 for o in rest):
                break
            V //= 2
        return V

    def addr(self, r: int) -> str:
        """``[reg+imm]`` of register r's element in this thread."""
        if getattr(self, "swz", None) is not None:
            from .smem_swizzled import swz_addr
            return swz_addr(self, r)
        if self.mixed is not None:
            return self._mixed_addr(r)
        em, o = self.em, self.offs[r]
        lo, hi = o & self.tmask, o & ~self.tmask
        if lo:
            key = ("smem_txor", self.treg, lo)
            t = em.thread_cache.get(key)
            if t is None:
                t = em.thread_cache[key] = em.reg("b32")
                em.pro(f"xor.b32 {t}, {self.treg}, {lo};")
        else:
            t = self.treg
        return self._at(self.xored(t), hi)

    def xored(self, t: str) -> str:
        """Thread register ``t`` with the view's run-time XOR applied (a view joined among
        placements an XOR apart): one xor per thread register in use, per region."""
        if self.s.xreg is None:
            return t
        key = ("smem_xreg", t, self.s.xreg)
        x = self.em.memo_get(key)
        if x is None:
            x = self.em.ins("b32", f"xor.b32 {{d}}, {t}, {self.s.xreg};")
            self.em.memo_put(key, x)
        return x


# -- stores and loads -----------------------------------------------------------------------

def _words(em, t: dt.dtype, vals: list[str]) -> tuple[str, list[str]]:
    """(st type, registers) of a run of element registers, packed into 32-bit words where narrow."""
    if t.is_fp8:  # stored as its byte: from here on an 8-bit integer
        vals, t = [fp8.encode(em, t, v) for v in vals], dt.uint8
    es = _esize(t)
    if es >= 4:
        return f"b{8 * es}", vals
    if len(vals) == 1:
        return ("b16", [_to16(em, t, vals[0])]) if t.is_floating else (ptx.mem_type(t), vals)
    if es == 2 and t.is_floating:
        return "b32", [em.pack16x2(vals[i], vals[i + 1], t) for i in range(0, len(vals), 2)]
    if es == 2:
        hs = [_to16(em, t, v) for v in vals]
        return "b32", [em.ins("b32", f"mov.b32 {{d}}, {{{hs[i]}, {hs[i + 1]}}};") for i in range(0, len(hs), 2)]
    words = []
    for i in range(0, len(vals), 4):
        w = vals[i]
        for j in range(1, min(4, len(vals) - i)):
            w = em.ins("b32", f"bfi.b32 {{d}}, {vals[i + j]}, {w}, {8 * j}, 8;")
        words.append(w)
    return ("u16" if len(vals) == 2 else "b32"), words


def _store_tile(em, s: Smem, val_v) -> None:
    if LDMATRIX and len(em.vals[val_v]) > 1 and _stmatrix(em, s, val_v):
        return
    lin = em.lin(val_v)
    acc = Access(em, s, lin, "smem.store()")
    V = acc.vec(16)
    vals = em.vals[val_v]
    owner = em.owner_pred(lin)
    g = f"@{owner} " if owner else ""
    for r in range(0, lin.num_regs, V):
        ty, regs = _words(em, s.dtype, [vals[r + i] if len(vals) > 1 else vals[0] for i in range(V)])
        src = regs[0] if len(regs) == 1 else "{" + ", ".join(regs) + "}"
        vs = f".v{len(regs)}" if len(regs) > 1 else ""
        em.emit(f"{g}st.shared{vs}.{ty} {acc.addr(r)}, {src};")


@rule("smem_store")
def _store(em, op):
    s = _view_of(em, op.operands[0], xor_ok=True)
    _barrier_if_needed(em, op)
    _store_tile(em, s, op.operands[1])
    return []


def _unpack(em, t: dt.dtype, words: list[str], n: int) -> list[str]:
    es = _esize(t)
    per = 4 // es
    out = [(_extract16 if es == 2 else _extract8)(em, t, words[i // per], i % per) for i in range(n)]
    if es == 2:  # an MMA packing these pairs again takes the loaded words (rules_mma._pack)
        for i in range(0, n - 1, 2):
            em.memo_put(("mma_pack", t.name, (out[i], out[i + 1])), words[i // 2])
    return out


def _fragments(em, s: Smem, lin, t: dt.dtype, what: str):
    """How a 16-bit tile's registers pair up as ldmatrix/stmatrix 8x8 fragments, or None:
    (trans, matrices per instruction, the access whose lanes address the rows). Thread t holds
    row t // 4, columns 2 * (t % 4) + {0, 1} of each matrix (transposed with .trans), and lane
    l names row l % 8 of matrix l // 8. So the layout must put register bit 0 and lane bits 0-1
    at 2, 4, 8 bytes (rows along lane bits 2-4), or lane bits 2-4 there (.trans: rows along
    register bit 0 and lane bits 0-1); further register bits pick the matrices of one x2/x4."""
    if _esize(t) != 2 or len(lin.lane_bases) != 5 or not lin.reg_bases or s.sreg is not None or \
            s.creg is not None or \
            _linear_bits(tuple(s.rel.shape), np.ascontiguousarray(s.rel).tobytes()) is None:
        return None
    f, rb, lb = offset_fn(em, s, what), lin.reg_bases, lin.lane_bases
    if [f(rb[0]), f(lb[0]), f(lb[1])] == [2, 4, 8]:
        trans, rows = False, [lb[2], lb[3], lb[4]]
    elif [f(lb[2]), f(lb[3]), f(lb[4])] == [2, 4, 8]:
        trans, rows = True, [rb[0], lb[0], lb[1]]
    else:
        return None
    sel = list(rb[1:3])
    nmat = 1 << len(sel)
    lanes = [f(b) for b in rows] + [f(b) for b in sel] + [0] * (2 - len(sel))
    rest = lanes + [f(b) for b in lin.warp_bases] + [f(b) for b in rb[1:]]
    if any(v % 16 for v in rest) or s.align % 16 or s.const % 16 or s.xmask % 16:
        return None
    return trans, nmat, Access(em, s, lin, what, lane_fn=lambda _: lanes)


def _ldmatrix(em, s: Smem, lin, t: dt.dtype) -> list[str] | None:
    frag = _fragments(em, s, lin, t, "smem.load()")
    if frag is None:
        return None
    trans, nmat, acc = frag
    out = []
    for r0 in range(0, lin.num_regs, 2 * nmat):
        words = [em.reg("b32") for _ in range(nmat)]
        dst = "{" + ", ".join(words) + "}"
        em.emit(f"ldmatrix.sync.aligned.m8n8.x{nmat}{'.trans' if trans else ''}.shared.b16 {dst}, "
                f"{acc.addr(r0)};")
        out += _unpack(em, t, words, 2 * nmat)
    return out


def _stmatrix(em, s: Smem, val_v) -> bool:
    """A 16-bit float tile stored by stmatrix (sm_90): a quarter of the st.shared.b32 an
    accumulator layout needs otherwise. False where the layouts do not allow it."""
    t, lin = s.dtype, em.lin(val_v)
    if not t.is_floating or t.is_fp8 or _target_sm(em) < 90 or em.owner_pred(lin):
        return False
    frag = _fragments(em, s, lin, t, "smem.store()")
    if frag is None:
        return False
    trans, nmat, acc = frag
    vals = em.vals[val_v]
    for r0 in range(0, lin.num_regs, 2 * nmat):
        words = [em.pack16x2(vals[r0 + 2 * i], vals[r0 + 2 * i + 1], t) for i in range(nmat)]
        em.emit(f"stmatrix.sync.aligned.m8n8.x{nmat}{'.trans' if trans else ''}.shared.b16 "
                f"{acc.addr(r0)}, {{{', '.join(words)}}};")
    return True


def _target_sm(em) -> int:
    return int("".join(ch for ch in em.target[3:] if ch.isdigit()) or 0)


@rule("smem_load")
def _load(em, op):
    s = _view_of(em, op.operands[0], xor_ok=True)
    _barrier_if_needed(em, op)
    t = s.dtype
    lin = em.lin(op.results[0])
    if LDMATRIX:
        out = _ldmatrix(em, s, lin, t)
        if out is not None:
            return [out]
    acc = Access(em, s, lin, "smem.load()")
    V = acc.vec(16)
    es = _esize(t)
    out = []
    for r in range(0, lin.num_regs, V):
        a = acc.addr(r)
        if es >= 4:
            regs = [em.reg(ptx.rclass(t)) for _ in range(V)]
            dst = regs[0] if V == 1 else "{" + ", ".join(regs) + "}"
            em.emit(f"ld.shared{f'.v{V}' if V > 1 else ''}.b{8 * es} {dst}, {a};")
            out += regs
        elif V == 1:
            if t.is_fp8:
                out.append(fp8.decode(em, t, em.ins("b32", f"ld.shared.u8 {{d}}, {a};")))
            elif t.is_floating:
                h = em.ins("b16", f"ld.shared.b16 {{d}}, {a};")
                out.append(em.widen16(h, t))
            else:
                out.append(em.ins("b32", f"ld.shared.{ptx.mem_type(t)} {{d}}, {a};"))
        else:
            nw = max(V * es // 4, 1)
            words = [em.reg("b32") for _ in range(nw)]
            if V * es == 2:
                em.emit(f"ld.shared.u16 {words[0]}, {a};")
            else:
                dst = words[0] if nw == 1 else "{" + ", ".join(words) + "}"
                em.emit(f"ld.shared{f'.v{nw}' if nw > 1 else ''}.b32 {dst}, {a};")
            out += _unpack(em, t, words, V)
    return [out]


# -- barriers and async copies ------------------------------------------------------------------

@rule("thread_barrier")
def _thread_barrier(em, op):
    em.barrier()
    return []


@rule("async_copy_load")
def _async_load(em, op):
    s = _view_of(em, op.operands[0], start_ok=True)
    ptr_v = op.operands[1]
    mask_v = op.operands[2] if op.attrs.get("mask") else None
    _barrier_if_needed(em, op)
    t = s.dtype
    es = _esize(t)
    lin = em.lin(ptr_v)
    acc = Access(em, s, lin, "async_copy")
    V = acc.vec(vec_width(em, ptr_v, mask_v))
    ptrs = em.vals[ptr_v]
    masks = em.vals[mask_v] if mask_v is not None else None
    owner = em.owner_pred(lin)
    if V * es < 4:
        _sync_copy(em, s, acc, ptr_v, mask_v, owner)
        return []
    g = f"@{owner} " if owner else ""
    nbytes = V * es
    kind = "cg" if nbytes == 16 else "ca"  # .cg (bypass L1) exists for 16-byte copies only
    for r in range(0, lin.num_regs, V):
        p = ptrs[r] if len(ptrs) > 1 else ptrs[0]
        size = ""
        if masks is not None:
            m = masks[r] if len(masks) > 1 else masks[0]
            n = em.ins("b32", f"selp.u32 {{d}}, {nbytes}, 0, {m};")  # 0: write zeros, read nothing
            size = f", {n}"
        em.emit(f"{g}cp.async.{kind}.shared.global {acc.addr(r)}, [{p}], {nbytes}{size};")
    return []


def _sync_copy(em, s, acc, ptr_v, mask_v, owner) -> None:
    """Elements that cannot form 4-byte groups: ld.global + st.shared (complete at once)."""
    from .rules_memory import _load_scalar
    t = s.dtype
    ptrs = em.vals[ptr_v]
    masks = em.vals[mask_v] if mask_v is not None else None
    for r in range(acc.lin.num_regs):
        p = ptrs[r] if len(ptrs) > 1 else ptrs[0]
        m = (masks[r] if len(masks) > 1 else masks[0]) if masks is not None else None
        v = _load_scalar(em, t, p, m, None)
        ty, regs = _words(em, t, [v])
        g = f"@{owner} " if owner else ""
        em.emit(f"{g}st.shared.{ty} {acc.addr(r)}, {regs[0]};")


@rule("async_copy_commit_group")
def _commit(em, op):
    em.emit("cp.async.commit_group;")
    return []


@rule("async_copy_wait_group")
def _wait(em, op):
    em.emit(f"cp.async.wait_group {int(op.attrs['num_outstanding'])};")
    return []


@rule("async_copy_mbarrier_arrive")
def _copy_arrive(em, op):
    """The interpreter counts one arrival per call (net zero with ``increment_count``), made once
    the partition's earlier copies land; PTX tracks each thread's own cp.async. So every thread
    makes the mbarrier track its copies with a net-zero ``cp.async.mbarrier.arrive`` (pending
    count +1 now, -1 when they land), then the partition meets (every thread's +1 is in before
    anything else could complete the phase), and for ``increment_count=False`` one thread adds
    the call's arrival (``.noinc``: -1 once its own copies, already tracked, land)."""
    from .rules_hopper import _addr  # (rules_hopper imports this module)
    a = _addr(em, _view_of(em, op.operands[0]))
    em.emit(f"cp.async.mbarrier.arrive.shared::cta.b64 [{a}];")
    em.barrier()
    if not op.attrs["increment_count"]:
        em.emit(f"@{em.owner_pred(None)} cp.async.mbarrier.arrive.noinc.shared::cta.b64 [{a}];")
    return []

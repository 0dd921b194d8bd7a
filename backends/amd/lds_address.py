"""How each register of a tile accessing an LDS view finds its element: :class:`Access` (the AMD
shared-memory lowering's addressing; the rules are in lds.py).

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

The view's model (:class:`Lds`) is lds_buffer.py; the coordinate split, lds_coords.py; the address
code, lds_thread.py.
"""
from __future__ import annotations

import numpy as np

from .layout import log2, possible_bits, reg_part, tid_pairs
from .lds_buffer import Lds, additive, pad
from .lds_coords import CoordSplit
from .lds_thread import ThreadRegs


class Access(CoordSplit, ThreadRegs):
    """Where each register of a tile in ``lin`` lives in the view ``v``, per thread."""

    def __init__(self, em, v: Lds, ty):
        self.em, self.cdims = em, None
        self.lay = em.linear(ty)
        self.reach, self.rshift, self.all_bytes = None, None, None
        self.carry = False   # (_split_shifted: the start's carries through register parts too)
        self.crun = None
        self.slead = None   # (_split_coords: stacked coordinates split as XORs)
        self.corg = 0       # (_split_coords: the table origin's bits the thread register clears)
        if v.sdim is not None:   # (a run-time coordinate start: lds_join_start.coord_join)
            self._split_coords_run(v)
            return
        if v.sreg is not None:   # (a run-time start: lds_join_start.shift_join)
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
        # lin need not be XOR-linear over the register bits: rows 1..4 of a swizzle period held in
        # registers are start 1 + rows 0..3, whose sum carries into row bit 2 (its swizzle image
        # XORs a column bit a register holds too; _split_coords bounds the carries by the thread's
        # own row bits). Where the thread holds none of such a dim's bits, each register's part
        # is its own entry of the table and the thread part still XORs into it. Tried last:
        # nothing lowered before takes it
        self.cdims, self.slead, self.corg, self.carry = None, None, 0, False
        if self._split(v, tuple(ty.shape), tabled=True):
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
        """A view at a run-time start S (lds_join_start.shift_join): lin = m + M, M XOR-linear from 0, split
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


    def _split(self, v: Lds, shape, shift: int = 0, tabled: bool = False) -> bool:
        """Whether thread part + register part of ``v`` (its table added to ``shift`` before the
        padding) reproduce ``self.bytes``; the parts are kept in ``self`` either way. ``tabled``:
        each register's part is the table's entry at its coordinate, not the XOR of its bases'."""
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
        rc = lay.coords()[0, 0] if tabled else None   # (thread 0's coordinate of each register)
        for r in range(lay.num_regs):
            if tabled:
                self.regL.append(int(v.lin[tuple(rc[r][nl:])]) if v.lin.ndim else L0)
                self.regS.append(lb(rc[r]))
                continue
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

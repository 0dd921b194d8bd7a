"""The coordinate split of an LDS view (part of lds_address.Access): a slice from an unaligned
row of a padded layout whose offset_bases interleave row and column bits, or of a swizzled or
NVMMA layout from inside its period, whose table is no start plus an XOR-linear one. Its
coordinates (the start added) go to their lin places whole, as bit fields (``bit_fields``:
row << 5 and (row & 7) << 2 for f32 rows of 128 bytes), the thread's part of each in a thread
register, the register bits the start's sum may carry into joining it; a run-time start
(lds_join_start.coord_join) is added where the view is accessed.
"""
from __future__ import annotations

import numpy as np

from .emitter import elem_key
from .layout import possible_bits, reg_part, thread_part, tid_pairs
from .lds_buffer import Lds, _scatter, pad
from .lds_thread import _bit_terms, _image_terms, _plus_lead_coords
from .mir import Imm


def _xor_dim(em, x, t, s: int, c: int, im, add: str, per_bit: bool):
    """``x`` ^ B(s + (t ^ c)) for a dim whose start s is known at compile time (t its thread part,
    c the register's bits of it, im its images B): one constant where t has no thread bits,
    else terms of a VGPR, a term a bit (``per_bit``) or a whole field a term."""
    if isinstance(t, Imm):
        k = _scatter([(s + (t.bits ^ c), im)])
        if isinstance(x, Imm):
            return Imm(x.bits ^ k)
        return em.valu("v_xor_b32", em.v(), [Imm(k), x]) if k else x
    if c:
        t = em.valu("v_xor_b32", em.v(), [Imm(c), t])
    if s:
        t = em.valu(add, em.v(), [Imm(s), t])
    for u in _bit_terms(em, t, im) if per_bit else _image_terms(em, t, im):
        x = u if isinstance(x, Imm) and x.bits == 0 else em.valu("v_xor_b32", em.v(), [x, u])
    return x


class CoordSplit:
    """lds_address.Access's coordinate split: the analysis (which bits go where, checked against
    the view's byte table) and the thread register it makes."""

    def _split_coords_run(self, v: Lds) -> None:
        """A swizzled view at a run-time start S of its dim sdim (lds_join_start.coord_join): split as
        _split_coords does, the bits S + (tc ^ lo) may reach for every S it may take in the thread
        part, checked for each S; the thread register made where the view is accessed."""
        from .lds_join_start import unpacked
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
        from .lds_join_start import unpacked
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
        from .lds_join_start import unpacked
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
                # (padded views keep a term a bit, as before fields: their AMDGCN stays as it was)
                x = _xor_dim(em, x, t, s, c, im, add, per_bit=bool(v.pads))
            if self.corg:
                x = Imm(x.bits ^ self.corg) if isinstance(x, Imm) else em.valu("v_xor_b32", em.v(), [Imm(self.corg), x])
            x = self._with_spairs(em, self._padded_bytes(x))
            if self.slead:
                x = _plus_lead_coords(em, x, self.slead, v.lead, lo[len(self.cdims):])
        em.memo[key] = x
        return x


    def _thread_reg_coords_run(self, lo: tuple):
        """es * XOR_d B_d(start_d + [S_d] + (tc_d ^ lo_d)) + the stacked bytes, S (an SGPR: the moving
        dims' starts packed, lds_join_start.packing) added to theirs: the other dims' terms and the moving
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
                    # (a run-time start is a swizzled view's, never a padded one's: whole fields)
                    x = _xor_dim(em, x, t, s, c, im, add, per_bit=False)
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

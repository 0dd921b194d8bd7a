"""Where each register of a tile lives in a shared view: the address split of loads, stores and
async copies (:class:`Access`).

The swizzled and NVMMA layouts place elements XOR-linearly in their coordinate bits, so an
access from a distributed layout splits like a global address: the thread's part is one
register made once in the prologue, each register's part a constant. Bits the two share
(the swizzle) are XORed into the thread register per distinct value (a handful per
layout); the rest is the instruction's immediate offset. Runs of registers at consecutive,
aligned offsets move as one ``ld/st.shared.v*`` of up to 16 bytes. Padded layouts add over
their coordinate bits instead; views that neither XOR nor add (slices from inside a swizzle or
padding period, run-time starts) are split by smem_swizzled.py, smem_swizzled_runtime.py and
smem_padded.py, each checked against the view's table.
"""
from __future__ import annotations

import functools

import numpy as np

from gluon_trace.errors import CompileError

from .smem_view import Smem, _esize, _pad


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

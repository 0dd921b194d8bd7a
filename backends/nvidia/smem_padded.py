"""Padded shared-memory views whose start is known only at run time.

A padded layout places linear index y at pad(y) = y + sum((y >> k) * p) over its (2**k, p)
pairs. A view of a padded buffer is its linear indices S + M(c): S the view's first index, M
the same for every view of one shape (rows 1..4 and rows 3..6 of one tile: S = 32 and 96, M =
row * 32 + column). Where S sits inside a padding period the two views' byte tables differ (rows
1..4 of a tile padded every four rows lie 0, 32, 64, 104 elements apart, rows 3..6 0, 40, 72,
104), so a branch or loop choosing between them cannot carry one start address with one table
(rules_control). It carries S instead, in a second b32 register: element c at base + rel[c] +
es * pad(S + M(c)), rel the part padding never touches (the slot offsets of a stacked buffer).
Loads and stores compute pad at run time per distinct thread part (Access: a shift and a
multiply-add per padding pair); slices and indexes of such a view add to S.

Joins decide this before their code is emitted (smem_join.branch_specs, loop_specs), only for
views whose tables differ: every view joined before (one table, a moved start) is carried as
before, in one register.
"""
from __future__ import annotations

import functools

import numpy as np

from gluon_trace.errors import CompileError

from . import ptx

_STATIC = "%static"  # a register not made yet (a join's spec, a view predicted ahead)


def _esize(s) -> int:
    return max(s.dtype.bits // 8, 1)


def _pad(x, pads):
    return x + sum((x >> k) * p for k, p in pads)


def _lowbit(v: int, cap: int) -> int:
    return min(v & -v, cap) if v else cap


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a, b)


def _step(pads) -> int:
    return 1 << max(k for k, _ in pads)


def form(s):
    """(d, rel, S, M, pads): ``s`` places element c at its base + d + rel[c] + es * pad(S + M[c]),
    rel 0 at the origin, M's least entry 0; S None where the register ``s.sreg`` holds it. None
    for a view of no padded buffer (or with a run-time XOR)."""
    if s.plin is None or s.xreg is not None or not s.rel.size:
        return None
    lin, pads = s.plin
    if s.sreg is not None:
        return s.const, s.rel, None, lin, pads
    lin = np.asarray(lin, np.int64)
    start = int(lin.min())
    d = s.const + s.rel - _esize(s) * _pad(lin, pads)
    d0 = int(d.flat[0])
    return d0, d - d0, start, lin - start, pads


def _salign(s, f) -> int:
    """The power of two the view's S is known to be a multiple of (capped at the padding step)."""
    step = _step(f[4])
    return min(s.salign, step) if f[2] is None else _lowbit(f[2], step)


def join(views: list, force: bool = False):
    """The spec of a join of padded views whose tables differ but whose forms agree (the same
    M, rel and padding: only S and the base move), or None: views of one table (the join
    carries one register, as before, unless ``force``: an enclosing join needs S), or views this
    form does not cover."""
    if any(v is None for v in views):
        return None
    first = views[0]
    if not force and all(v.sreg is None and v.xreg is None and _same(v.rel, first.rel) for v in views):
        return None
    fs = [form(v) for v in views]
    if None in fs or any(v.dtype != first.dtype for v in views):
        return None
    _, rel, _, lin, pads = fs[0]
    if not all(_same(f[1], rel) and _same(f[3], lin) and f[4] == pads for f in fs):
        return None
    salign = min(_salign(v, f) for v, f in zip(views, fs))
    from .smem_view import Smem
    return Smem(_STATIC, 0, rel, first.dtype, 16, plin=(lin, pads), sreg=_STATIC, salign=salign)


def check(s, spec, loc, what: str) -> None:
    """A view the join receives: the spec's form, S a multiple of the spec's alignment."""
    f = form(s)
    ok = f is not None and s.dtype == spec.dtype and _same(f[1], spec.rel) and _same(f[3], spec.plin[0]) \
        and f[4] == spec.plin[1]
    if not ok:
        raise CompileError(f"{what} yields views of padded shared memory placed differently (another "
                           "buffer shape, layout or slice length, not the same view moved): only where the "
                           "view starts may change; slice or index the buffer inside the branch or loop "
                           "body instead", loc)
    if _salign(s, f) < spec.salign:
        raise CompileError(f"{what} yields a padded shared-memory view starting at a linear index less "
                           f"aligned ({_salign(s, f)} elements) than the views it was predicted to receive "
                           f"({spec.salign}); the backend could not follow the code that made it ahead: "
                           "slice or index the buffer inside the branch or loop body instead", loc)


def home_align(s, spec) -> int:
    d = form(s)[0]
    return min(s.align, ptx.pow2_div(d, 16) if d else 16)


def carry(em, s, spec) -> list[str]:
    """[base + d, S]: the two b32 sources a join copies for view ``s`` (S an immediate where known)."""
    d, _, start, _, _ = form(s)
    base = em.ins("b32", f"add.u32 {{d}}, {s.base}, {d};") if d else s.base
    return [base, s.sreg if start is None else str(start)]


def view(regs: list[str], spec, align: int):
    from .smem_view import Smem
    return Smem(regs[0], 0, spec.rel, spec.dtype, align, plin=spec.plin, sreg=regs[1], salign=spec.salign)


# -- views of a view with a run-time start ------------------------------------------------------

def _moved(em, s, rel, lin, by: int, base: str, align: int):
    """``s`` re-indexed to (rel, lin), S moved by ``by`` elements and the base to ``base``; both
    normalised (rel's origin into the constant, lin's least into S)."""
    from .smem_view import Smem
    m0 = int(lin.min())
    o = int(rel.flat[0])
    by += m0
    sreg = em.ins("b32", f"add.u32 {{d}}, {s.sreg}, {by};") if by else s.sreg
    step = _step(s.plin[1])
    return Smem(base, s.const + o, rel - o, s.dtype, align, plin=(lin - m0, s.plin[1]), sreg=sreg,
                salign=min(s.salign, _lowbit(by, step)))


def slice_view(em, s, idx: tuple):
    return _moved(em, s, s.rel[idx], s.plin[0][idx], 0, s.base, s.align)


def index_view(em, s, i: str, loc):
    """Slot i of the leading dim: the base moves by i * rel's stride (stacked slots), S by
    i * M's (rows of the padded tile), each where evenly strided."""
    rel, lin = s.rel, s.plin[0]
    n = rel.shape[0]
    strides = []
    for t in (rel, lin):
        st = int(t[1].flat[0] - t[0].flat[0]) if n > 1 else 0
        if any(not np.array_equal(t[j], t[0] + j * st) for j in range(n)):
            raise CompileError(".index() of this padded shared-memory view (chosen by a branch or carried by "
                               "a loop among views starting at different linear indices) is not addressable: "
                               "its leading dim is not evenly strided; index the buffer inside the branch or "
                               "loop body instead", loc)
        strides.append(st)
    rs, ms = strides
    base = em.ins("b32", f"mad.lo.u32 {{d}}, {i}, {rs}, {s.base};") if rs else s.base
    align = min(s.align, ptx.pow2_div(rs, 16)) if rs else s.align
    v = _moved(em, s, rel[0], lin[0], 0, base, align)
    if ms:
        v.sreg = em.ins("b32", f"mad.lo.u32 {{d}}, {i}, {ms}, {v.sreg};")
        v.salign = min(v.salign, _lowbit(ms, _step(s.plin[1])))
    return v


def start_reg(em, s) -> tuple[str, int]:
    """(register, alignment) of the view's first byte, base + es * pad(S) (M and rel are 0 there:
    the least of both, padding growing with the index), for a reinterpret (the constant apart)."""
    pads, es = s.plin[1], _esize(s)
    sh = es.bit_length() - 1
    t = em.ins("b32", f"shl.b32 {{d}}, {s.sreg}, {sh};") if sh else s.sreg
    for k, p in pads:
        q = em.ins("b32", f"shr.u32 {{d}}, {s.sreg}, {k};")
        t = em.ins("b32", f"mad.lo.u32 {{d}}, {q}, {es * p}, {t};")
    unit = es * min([s.salign] + [p & -p for _, p in pads])
    return em.ins("b32", f"add.u32 {{d}}, {s.base}, {t};"), min(s.align, unit, 16)


def refuse(what: str, loc):
    raise CompileError(f"{what} needs this shared-memory view's placement at compile time, but it was chosen by "
                       "a branch (or carried by a loop) among views of a padded buffer starting at different "
                       "linear indices (inside a padding period), known only at run time; only .load(), "
                       ".store(), async copies and the view ops take it: slice or index the "
                       "buffer inside the branch (or loop body), right where it is used here", loc)


# -- addressing ---------------------------------------------------------------------------------

def stack_part(em, rel: np.ndarray, lin):
    """(per register: the thread register or None; OR of their terms; per register: the
    immediate; (warps, lanes, registers): the thread registers' values, or 0) of ``rel``, the
    bytes of a padded view padding never touches (the slots of a stacked buffer: a sum over
    their coordinate bits). Where the lane and warp bases set disjoint coordinate bits, one
    register sums the lane's and warp's parts once in the prologue and each register's part is
    an immediate. Where they mix them (lane bases [6] and [7]: lane 3 is slot 1, not 13), the
    coordinate is the XOR of the bases' and the bytes are not their sum: _mixed_stack. The
    callers check the result against the view's table."""
    n = lin.num_regs
    if not rel.any():
        return [None] * n, 0, [0] * n, 0
    c = lin.coords()
    regs = [int(rel[tuple(c[0, 0, r])]) for r in range(n)]
    lanes = tuple(int(rel[tuple(int(x) for x in b)]) for b in lin.lane_bases)
    warps = tuple(int(rel[tuple(int(x) for x in b)]) for b in lin.warp_bases)
    table = _stack_values(lin, (lanes, warps))[..., None]
    if not np.array_equal(table + np.asarray(regs, np.int64), rel[tuple(c[..., d] for d in range(c.shape[-1]))]):
        mixed = _mixed_stack(em, rel, lin)
        if mixed is not None:
            return mixed
    reg, low = em.thread_sum(lanes, warps)
    return [reg] * n, low, regs, table


def _mixed_stack(em, rel: np.ndarray, lin):
    """stack_part of a table that adds over the coordinate bits, from a layout whose bases mix
    them. The thread's coordinate bits, packed dim after dim into one word, are XOR-linear in
    its lane and warp: one register K; register r's packed coordinate splits into the bits K
    can have (lo, XORed into K) and the rest (hi, disjoint from K ^ lo), so its bytes are
    F(K ^ lo) + F(hi), F the sum over packed bits of their bytes: the first made in the
    prologue per distinct lo, the second the immediate. None where the table does not add over
    its coordinate bits."""
    from .smem_access import _additive_bits
    bits = _additive_bits(tuple(rel.shape), np.ascontiguousarray(rel).tobytes())
    if bits is None:
        return None
    shifts = np.cumsum([0] + [len(col) for col in bits[:-1]])
    vals = tuple(o for col in bits for o in col)  # packed bit -> its bytes

    def pack(b):
        return functools.reduce(lambda a, d: a | int(b[d]) << int(shifts[d]), range(len(bits)), 0)

    def F(k):
        return sum(o for p, o in enumerate(vals) if k >> p & 1)
    lanes, warps = tuple(pack(b) for b in lin.lane_bases), tuple(pack(b) for b in lin.warp_bases)
    k, kmask = em.thread_xor(lanes, warps)
    tvals = tuple(o if kmask >> p & 1 else 0 for p, o in enumerate(vals))
    low = functools.reduce(lambda a, o: a | o, tvals, 0)
    kv = _thread_values(lin, (lanes, warps), np.bitwise_xor)
    cts, imms, table = [], [], []
    for r in range(lin.num_regs):
        x = functools.reduce(lambda a, i: a ^ pack(lin.reg_bases[i]) if r >> i & 1 else a,
                             range(len(lin.reg_bases)), 0)
        lo = x & kmask
        key = ("smem_stackmix", k, lo, tvals)
        t = em.thread_cache.get(key)
        if t is None:
            src = k
            if lo:
                src = em.reg("b32")
                em.pro(f"xor.b32 {src}, {k}, {lo};")
            t = em.thread_cache[key] = em.fold_terms("add.u32", em._bit_terms(src, tvals))
        cts.append(t)
        imms.append(F(x & ~kmask))
        table.append(np.vectorize(F, otypes=[np.int64])(kv ^ lo))
    return cts, low, imms, np.stack(table, -1)


def _thread_values(lin, lanes_warps: tuple, op) -> np.ndarray:
    """(warps, lanes): ``op`` (np.add, np.bitwise_xor) folded over each thread's set lane and
    warp bits of the given values."""
    lanes, warps = lanes_warps
    cw, ln = lin.coords().shape[:2]
    out = np.zeros((cw, ln), np.int64)
    for vals, axis in ((lanes, 1), (warps, 0)):
        idx = np.arange((cw, ln)[axis]).reshape((-1, 1) if axis == 0 else (1, -1))
        for i, v in enumerate(vals):
            out = op(out, ((idx >> i) & 1) * v)
    return out


def _stack_values(lin, lanes_warps: tuple) -> np.ndarray:
    """(warps, lanes) of the sum over each thread's lane and warp bits of the given values."""
    return _thread_values(lin, lanes_warps, np.add)


def runtime_access(acc, em, s, lin, what: str) -> None:
    """Fill Access ``acc`` for a view with a run-time start: element c at base + const + rel[c] +
    es * pad(S + M(c)). M is XOR-linear: the thread's part one register K, register r's R_r.
    R_r splits three ways by bit: low bits (below S's alignment, K's lowest bit and the least
    padding interval) never carry past an interval: pad adds them as they are (the immediate,
    so runs of registers stay vectors); high bits (multiples of the largest interval, none of
    K's) pad apart (the immediate, padded); the rest, mid, are XORed into K and padded with S
    at run time, once per distinct mid in a region."""
    lm, pads = s.plin
    from .smem_access import _linear_bits
    g = _linear_bits(tuple(lm.shape), np.ascontiguousarray(lm).tobytes())
    if g is None:
        raise CompileError(f"{what}: this padded shared-memory view (chosen by a branch or carried by a loop, "
                           "its start known only at run time) does not place its linear indices XOR-linearly "
                           "in its coordinates (a permuted or reshaped slice?); load or store the buffer's "
                           "view inside the branch or loop body instead", em.loc)

    def m(c):
        return functools.reduce(lambda v, d: functools.reduce(
            lambda w, j: w ^ g[d][j] if int(c[d]) >> j & 1 else w, range(len(g[d])), v), range(len(g)), 0)
    es = _esize(s)
    lanes, warps = tuple(m(b) for b in lin.lane_bases), tuple(m(b) for b in lin.warp_bases)
    k, kmask = em.thread_xor(lanes, warps)
    cts, clow, cregs, ctab = stack_part(em, s.rel, lin)
    step, least = _step(pads), 1 << min(k for k, _ in pads)
    low = min(s.salign, (kmask & -kmask) or step, least) - 1
    high = ~(step - 1) & ~kmask
    regs = [functools.reduce(lambda v, i: v ^ m(lin.reg_bases[i]) if r >> i & 1 else v,
                             range(len(lin.reg_bases)), 0) for r in range(lin.num_regs)]
    acc.mixed = [(x & ~low & ~high, es * (x & low) + es * int(_pad(x & high, pads)) + cregs[r])
                 for r, x in enumerate(regs)]
    acc.offs = [hi for _, hi in acc.mixed]
    acc.es, acc.treg, acc.tmask, acc.ct, acc.runtime = es, k, kmask, cts, True
    # the address register's alignment: S + (K ^ mid) is a multiple of low + 1; its padding a
    # multiple of each pair's padding
    unit = es * min([low + 1] + [p & -p for _, p in pads])
    acc.tlow = unit | clow   # (the bits it may have: none below unit)
    _verify(acc, s, lin, lanes, warps, ctab, step)


def _verify(acc, s, lin, lanes, warps, ctab, step) -> None:
    """The split against the view's definition for every thread and register, for several
    starts S (multiples of its alignment, inside and across padding periods)."""
    pads, es = s.plin[1], acc.es
    kv = np.zeros(lin.coords().shape[:2], np.int64)
    cw, ln = kv.shape
    for vals, axis in ((lanes, 1), (warps, 0)):
        idx = np.arange((cw, ln)[axis]).reshape((-1, 1) if axis == 0 else (1, -1))
        for i, v in enumerate(vals):
            kv = kv ^ ((idx >> i) & 1) * v
    c = lin.coords()
    at = tuple(c[..., d] for d in range(c.shape[-1]))
    rel, lm = s.rel[at], s.plin[0][at]
    mid = np.asarray([x for x, _ in acc.mixed], np.int64)
    imm = np.asarray(acc.offs, np.int64)
    for start in sorted({0, s.salign, step - s.salign, step + s.salign, 3 * step - s.salign}):
        got = es * _pad(start + (kv[..., None] ^ mid), pads) + ctab + imm
        want = rel + es * _pad(start + lm, pads)
        if not np.array_equal(got, want):
            raise CompileError("internal: the run-time padded address split disagrees with the view's table "
                               f"(start {start}); please report this kernel", acc.em.loc)


def runtime_addr(acc, r: int) -> str:
    """``[reg+imm]`` of register r's element: es * pad(S + (K ^ mid)) (+ the stack part) made once
    per region and mid, the rest the immediate."""
    em, s = acc.em, acc.s
    mid, hi = acc.mixed[r]
    pads = s.plin[1]
    ct = acc.ct[r]
    key = ("smem_padrt", s.sreg, acc.treg, mid, pads, acc.es, ct)
    t = em.memo_get(key)
    if t is None:
        kx = acc.treg
        if mid:
            kx = em.thread_cache.get(("smem_txor", acc.treg, mid))
            if kx is None:
                kx = em.thread_cache[("smem_txor", acc.treg, mid)] = em.reg("b32")
                em.pro(f"xor.b32 {kx}, {acc.treg}, {mid};")
        y = em.ins("b32", f"add.u32 {{d}}, {s.sreg}, {kx};")
        sh = acc.es.bit_length() - 1
        t = em.ins("b32", f"shl.b32 {{d}}, {y}, {sh};") if sh else y
        for k, p in pads:
            q = em.ins("b32", f"shr.u32 {{d}}, {y}, {k};")
            t = em.ins("b32", f"mad.lo.u32 {{d}}, {q}, {acc.es * p}, {t};")
        if ct is not None:
            t = em.ins("b32", f"add.u32 {{d}}, {t}, {ct};")
        em.memo_put(key, t)
    return acc._at(t, hi)

"""Views of swizzled (and NVMMA) shared buffers that start inside a swizzle period.

Rows 1..8 of a 128-byte-swizzled f32 tile have phases 1..7, 0: not rows 0..7's XOR a constant,
so the view's table is no XOR-linear map of its coordinate bits (rules_smem.offset_fn refuses
it: 'does not place elements XOR-linearly'), though the buffer's is. Element c of such a view
lives at base + B(c + start) (``Smem.coff``), B = XOR_d B_d, B_d the buffer's (XOR-linear) map
of dim d's coordinate bits. Each coordinate c_d = T_d ^ R_d(r), the thread's part and the
register's. Register bits the sum start_d + (T_d ^ lo_d) may carry into (``lo``) join the
thread's part: per distinct lo, one register made in the prologue holding
XOR_d B_d(start_d + (T_d ^ lo_d)) (the start added to the thread's coordinate, then swizzled);
the other register bits (``hi``) are clear in every such sum, so their B is XORed, and, where
no bit of it can be set in the thread register (register bits whose B would collide, the swizzle
XORing row bits into the columns, join lo too), added as the instruction's immediate. Bits
below every bit the thread and the start can set pass through the sum: a thread's run of
consecutive elements keeps its one wide access. Tried only where every other split refuses
(every kernel lowered before is lowered as before); checked against the view's whole table.
"""
from __future__ import annotations

import functools

import numpy as np

from .rules_smem import _esize, _linear_bits


def _reg_coord(lin, r: int, d: int) -> int:
    return functools.reduce(lambda v, i: v ^ int(lin.reg_bases[i][d]) if r >> i & 1 else v,
                            range(len(lin.reg_bases)), 0)


def _image(bits, x: int) -> int:
    """B_d(x): XOR of the offsets of x's set bits."""
    return functools.reduce(lambda v, j: v ^ bits[j] if x >> j & 1 else v, range(len(bits)), 0)


def start_coords(acc) -> bool:
    """Set ``acc`` up for a view with ``coff`` (see the module); False where the split does not
    reproduce the view's table (the caller then refuses as before)."""
    em, lin, s = acc.em, acc.lin, acc.s
    root, starts = s.coff
    if root.ndim != s.rel.ndim or root.ndim != lin.ndim or not s.rel.size:
        return False
    B = _linear_bits(tuple(root.shape), np.ascontiguousarray(root).tobytes())
    if B is None:
        return False
    nd = root.ndim
    poss = []   # bits each thread coordinate can have
    for d in range(nd):
        m = 0
        for b in list(lin.lane_bases) + list(lin.warp_bases):
            m |= int(b[d])
        poss.append(m)
    rbits = [functools.reduce(lambda v, b: v | int(b[d]), lin.reg_bases, 0) for d in range(nd)]
    lo = [0] * nd   # register bits taken into the thread's part
    for _ in range(64):
        ext, timg = [], 0
        for d in range(nd):
            m, st = poss[d] | lo[d], starts[d]
            low = ((m | st) & -(m | st)) - 1 if m | st else 0
            e = ((1 << (st + m).bit_length()) - 1) & ~low if st else m
            ext.append(e)
            for j, o in enumerate(B[d]):
                if e >> j & 1:
                    timg |= o
        new = []
        for d in range(nd):
            x = lo[d] | (rbits[d] & ext[d])
            for j, o in enumerate(B[d]):
                if (rbits[d] & ~x) >> j & 1 and o & timg:
                    x |= 1 << j
            new.append(x)
        if new == lo:
            break
        lo = new
    else:
        return False
    es = _esize(s.dtype)
    regs = [[_reg_coord(lin, r, d) for d in range(nd)] for r in range(lin.num_regs)]
    keys = [tuple(regs[r][d] & lo[d] for d in range(nd)) for r in range(lin.num_regs)]
    his = [functools.reduce(lambda v, d: v ^ _image(B[d], regs[r][d] & ~lo[d]), range(nd), 0)
           for r in range(lin.num_regs)]
    # the check: base + const + rel[c] == base + (thread value) + hi, every thread and register
    c = lin.coords()
    want = s.const + s.rel[tuple(c[..., d] for d in range(nd))]
    got = np.zeros(want.shape, np.int64)
    tv = np.zeros(want.shape, np.int64)
    for d in range(nd):
        R = np.asarray([regs[r][d] for r in range(lin.num_regs)], np.int64)
        L = np.asarray([k[d] for k in keys], np.int64)
        T = c[..., d] ^ R   # (the thread's part: the same in every register)
        if np.any(T != T[..., :1]):
            return False
        g = starts[d] + (T ^ L)
        img = np.zeros(g.shape, np.int64)
        for j, o in enumerate(B[d]):
            img ^= ((g >> j) & 1) * o
        tv ^= img
    hv = np.asarray(his, np.int64)
    if np.any(tv & hv):
        return False
    got = tv + hv
    if not np.array_equal(got, want):
        return False
    acc.swz = (tuple(poss), tuple(starts), B, lo)
    acc.keys = keys
    acc.es = es
    acc.tlow = functools.reduce(lambda v, x: v | int(x), np.unique(tv).tolist(), 0)
    acc.mixed = [(keys[r], his[r] - s.const) for r in range(lin.num_regs)]
    acc.offs = [h for _, h in acc.mixed]
    acc.additive = False
    acc.xor, acc.tmask, acc.shift = 0, 0, 0
    return True


def swz_addr(acc, r: int) -> str:
    """``[base + thread value + imm]`` of register r (the thread value made once per distinct lo)."""
    em, lin = acc.em, acc.lin
    poss, starts, B, _ = acc.swz
    key = acc.keys[r]
    ck = ("smem_swzstart", tuple(tuple(b) for b in lin.lane_bases), tuple(tuple(b) for b in lin.warp_bases),
          starts, B, key)
    t = em.thread_cache.get(ck)
    if t is None:
        terms, const = [], 0
        for d in range(len(starts)):
            if not poss[d]:  # (no thread part: the dim's sum is a constant)
                const ^= _image(B[d], starts[d] + key[d])
                continue
            lv, wv = tuple(int(b[d]) for b in lin.lane_bases), tuple(int(b[d]) for b in lin.warp_bases)
            dk = ("smem_swzdim", lv, wv, key[d], starts[d], B[d])  # (a dim's term: shared by the lo values)
            u = em.thread_cache.get(dk)
            if u is None:
                src, _ = em.thread_xor(lv, wv)
                if key[d]:
                    x, src = src, em.reg("b32")
                    em.pro(f"xor.b32 {src}, {x}, {key[d]};")
                if starts[d]:
                    x, src = src, em.reg("b32")
                    em.pro(f"add.u32 {src}, {x}, {starts[d]};")
                u = em.thread_cache[dk] = em.fold_terms("xor.b32", _field_terms(em, src, B[d]))
            terms.append(u)
        t = em.fold_terms("xor.b32", terms)
        if const:
            x, t = t, em.reg("b32")
            em.pro(f"xor.b32 {t}, {x}, {const};")
        em.thread_cache[ck] = t
    return acc._at(t, acc.mixed[r][1])


def joined_coff(views) -> tuple | None:
    """The ``coff`` a join keeps: every view's, where all are one (the same buffer table and the
    same start: a branch picking rows 1.. in both arms, a loop carrying rows 1.. unchanged), so
    the joined view is addressed as each of them is; else None."""
    cs = [getattr(v, "coff", None) if v is not None else None for v in views]
    if not cs or any(c is None for c in cs) or any(v.xreg is not None or v.sreg is not None for v in views):
        return None
    root, starts = cs[0]
    for r, st in cs[1:]:
        if st != starts or r.shape != root.shape or not np.array_equal(r, root):
            return None
    return cs[0]


def reshape_coff(coff, old: tuple, new: tuple) -> tuple | None:
    """``coff`` of a view of shape ``old`` reshaped (row-major) to ``new``, or None where no
    buffer table of ``new``'s rank with a per-dim start expresses it. Dims group into runs whose
    sizes multiply alike; in each, the view's dims after its first of size > 1 must be the
    buffer's whole dims (no start), so the run is one linear index L + S in the buffer's run
    (S: the start's); the new dims after the run's first split it where their product P divides
    S and the buffer's run: the run reshaped to (its size / P, those dims), the start (S / P,
    0, ...). New dims of size 1: a buffer dim of 1 from 0. Checked against the view's table."""
    root, starts = coff
    if root.ndim != len(old) or int(np.prod(old)) != int(np.prod(new)) or not int(np.prod(old)):
        return None
    nn = [n for n in new if n != 1]
    i = j = 0
    rshape, rstarts = [], []
    while j < len(nn):
        gi, gj, po, pn = [], [j], 1, nn[j]
        j += 1
        while True:
            while po < pn:
                if i >= len(old):
                    return None
                po *= old[i]
                gi.append(i)
                i += 1
            if po == pn:
                break
            if j >= len(nn):
                return None
            pn *= nn[j]
            gj.append(j)
            j += 1
        k = next(x for x, d in enumerate(gi) if old[d] > 1)
        if any(old[d] != root.shape[d] or starts[d] for d in gi[k + 1:]):
            return None
        RG, S = 1, 0
        for d in gi:
            RG, S = RG * root.shape[d], S * root.shape[d] + starts[d]
        P = int(np.prod([nn[e] for e in gj[1:]], dtype=np.int64)) if len(gj) > 1 else 1
        if S % P or RG % P:
            return None
        rshape += [RG // P] + [nn[e] for e in gj[1:]]
        rstarts += [S // P] + [0] * (len(gj) - 1)
    if any(root.shape[d] != 1 for d in range(i, len(old))):
        return None
    it = iter(zip(rshape, rstarts))
    full = [next(it) if n != 1 else (1, 0) for n in new]
    try:
        nroot = np.reshape(root, [r for r, _ in full])
    except ValueError:
        return None
    rst = tuple(st for _, st in full)
    # the check: element c' of the new view is element unravel(ravel(c')) of the old one
    cn = np.indices(new).reshape(len(new), -1)
    co = np.stack(np.unravel_index(np.ravel_multi_index(tuple(cn), new), old))
    want = root[tuple(co[d] + starts[d] for d in range(len(old)))]
    got = nroot[tuple(cn[d] + rst[d] for d in range(len(new)))]
    return (nroot, rst) if np.array_equal(want, got) else None


def refuse_joined(em, what: str):
    """A view a branch or loop carries among slices whose tables are not XOR-linear (rows 1..4,
    2..5, 3..6 of an 8-row swizzle): the carried view has one table for all of them."""
    from gluon_trace.errors import CompileError
    raise CompileError(f"{what}: this shared-memory view is chosen by a branch (or carried by a loop) among "
                       "slices of a swizzled buffer that start inside the swizzle period (rows 1.., 2.. of an "
                       "8-row swizzle: no XOR-linear placement, and each start places elements differently), "
                       "which the NVIDIA backend needs known at compile time here; slice the buffer inside the "
                       "branch (or loop body), right where it is used here, or make the starts differ by whole "
                       "swizzle periods (rows 0.., 8..)", em.loc)


def _fields(bits) -> dict:
    """B_d (the offset of each coordinate bit, ``bits``) as fields: {(first coordinate bit,
    count): [first offset bit of each place the field lands]}, each a run of coordinate bits
    landing on consecutive offset bits (a swizzled row: row * row bytes, and its low bits again,
    shifted, on the chunks they XOR)."""
    runs = []   # [first coordinate bit, count, first offset bit]
    for shift, j in sorted((p - j, j) for j, b in enumerate(bits) for p in range(b.bit_length()) if b >> p & 1):
        r = runs[-1] if runs else None
        if r and r[2] - r[0] == shift and r[0] + r[1] == j:
            r[1] += 1
        else:
            runs.append([j, 1, j + shift])
    fields: dict = {}
    for j, k, p in runs:
        fields.setdefault((j, k), []).append(p)
    return fields


def _field_terms(em, src: str, bits) -> list:
    """Registers (made in the prologue) whose XOR is B_d(src), src < 2 ** len(bits): a field is
    src itself where it spans src, else one bfe.u32; each place one shl (row << 7 ^ (row & 7)
    << 4 for f32 rows of 128 bytes, not a bfe, neg and and per bit)."""
    terms = []
    for (j, k), places in _fields(bits).items():
        if j == 0 and k == len(bits):
            u = src
        else:
            u = em.reg("b32")
            em.pro(f"bfe.u32 {u}, {src}, {j}, {k};")
        for p in places:
            if p:
                t = em.reg("b32")
                em.pro(f"shl.b32 {t}, {u}, {p};")
                terms.append(t)
            else:
                terms.append(u)
    return terms

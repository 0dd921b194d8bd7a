"""Views of swizzled (and NVMMA) shared buffers that start inside a swizzle period.

Rows 1..8 of a 128-byte-swizzled f32 tile have phases 1..7, 0: not rows 0..7's XOR a constant,
so the view's table is no XOR-linear map of its coordinate bits (smem_access.offset_fn refuses
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

from gluon_trace.shared_layouts import bit_fields

from .smem_access import _linear_bits
from .smem_view import _esize


def affine(root: np.ndarray) -> tuple[np.ndarray, int]:
    """(the XOR-linear table, k) of a ``coff`` root that is one plus a constant k: the buffer's
    table (k 0), or a slot's of it (an index from a stacked start) or one a join moved (the
    carried register holding part of the address)."""
    k = int(root.flat[0]) if root.size else 0
    return (root - k if k else root), k


def _reg_coord(lin, r: int, d: int) -> int:
    return functools.reduce(lambda v, i: v ^ int(lin.reg_bases[i][d]) if r >> i & 1 else v,
                            range(len(lin.reg_bases)), 0)


def _image(bits, x: int) -> int:
    """B_d(x): XOR of the offsets of x's set bits."""
    return functools.reduce(lambda v, j: v ^ bits[j] if x >> j & 1 else v, range(len(bits)), 0)


def _taken_bits(B, lin, starts, runs=None, xm=0):
    """(per dim, the bits the thread's coordinate can have; the register bits taken into the
    thread's part; whether that settled): every bit the start plus the thread's bits can reach
    (all of dim d's for each ``runs`` dim, whose start is known only at run time), then every
    register bit whose offset meets those bits' offsets (or ``xm``, a run-time XOR's), until nothing is added. ``B[d]``: the
    offset of each coordinate bit of dim d. Shared by the constant-start and run-time-start paths."""
    runs = runs or ()
    nd = len(B)
    poss = [functools.reduce(lambda v, b: v | int(b[d]), list(lin.lane_bases) + list(lin.warp_bases), 0)
            for d in range(nd)]   # bits each thread coordinate can have
    rbits = [functools.reduce(lambda v, b: v | int(b[d]), lin.reg_bases, 0) for d in range(nd)]
    lo = [0] * nd
    for _ in range(64):
        ext, timg = [], xm
        for d in range(nd):
            m, st = poss[d] | lo[d], starts[d]
            if d in runs:
                e = (1 << len(B[d])) - 1
            elif st:
                low = ((m | st) & -(m | st)) - 1
                e = ((1 << (st + m).bit_length()) - 1) & ~low
            else:
                e = m
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
            return poss, lo, True
        lo = new
    return poss, lo, False


def start_coords(acc) -> bool:
    """Set ``acc`` up for a view with ``coff`` (see the module); False where the split does not
    reproduce the view's table (the caller then refuses as before)."""
    lin, s = acc.lin, acc.s
    root, starts = s.coff
    if root.ndim != s.rel.ndim or root.ndim != lin.ndim or not s.rel.size:
        return False
    root, k = affine(root)
    if k and s.xreg is not None:
        return False
    B = _linear_bits(tuple(root.shape), np.ascontiguousarray(root).tobytes())
    if B is None:
        return False
    nd = root.ndim
    xm = s.xmask if s.xreg is not None else 0
    poss, lo, done = _taken_bits(B, lin, starts, xm=xm)
    if not done:
        return False
    es = _esize(s.dtype)
    regs = [[_reg_coord(lin, r, d) for d in range(nd)] for r in range(lin.num_regs)]
    keys = [tuple(regs[r][d] & lo[d] for d in range(nd)) for r in range(lin.num_regs)]
    his = [functools.reduce(lambda v, d: v ^ _image(B[d], regs[r][d] & ~lo[d]), range(nd), 0)
           for r in range(lin.num_regs)]
    # the check: base + const + rel[c] == base + (thread value) + hi, every thread and register
    c = lin.coords()
    cst = 0 if s.xreg is not None else s.const   # (with X: base + const + (rel[c] ^ X))
    want = cst + s.rel[tuple(c[..., d] for d in range(nd))]
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
    if np.any(tv & hv) or np.any(hv & xm):   # (X, on the thread's part, never meets the immediate's bits)
        return False
    got = tv + hv + k
    if not np.array_equal(got, want):
        return False
    acc.swz = (tuple(poss), tuple(starts), B, lo)
    acc.keys = keys
    acc.es = es
    acc.tlow = functools.reduce(lambda v, x: v | int(x), np.unique(tv).tolist(), xm)
    acc.mixed = [(keys[r], his[r] + k - cst) for r in range(lin.num_regs)]
    acc.offs = [h for _, h in acc.mixed]
    acc.additive = False
    acc.xor, acc.tmask, acc.shift = 0, 0, 0
    return True


def swz_addr(acc, r: int) -> str:
    """``[base + thread value + imm]`` of register r (the thread value made once per distinct lo)."""
    em, lin = acc.em, acc.lin
    poss, starts, B, _ = acc.swz
    key = acc.keys[r]
    if acc.s.creg is not None:
        return _runtime_addr(acc, r)
    ck = ("smem_swzstart", tuple(tuple(b) for b in lin.lane_bases), tuple(tuple(b) for b in lin.warp_bases),
          starts, B, key)
    t = em.thread_cache.get(ck)
    if t is None:
        terms, const = _prologue_terms(em, lin, poss, starts, B, key)
        t = em.fold_terms("xor.b32", terms)
        if const:
            x, t = t, em.reg("b32")
            em.pro(f"xor.b32 {t}, {x}, {const};")
        em.thread_cache[ck] = t
    return acc._at(acc.xored(t), acc.mixed[r][1])   # (a run-time XOR: on the thread's part)


def _prologue_terms(em, lin, poss, starts, B, key, skip=None) -> tuple[list, int]:
    """(registers made in the prologue, constant) whose XOR is XOR_d B_d(start_d + (T_d ^ key_d))
    over the dims but those in ``skip``."""
    terms, const = [], 0
    for d in range(len(starts)):
        if skip and d in skip:
            continue
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
    return terms, const


def _runtime_addr(acc, r: int) -> str:
    """``[base + thread value + imm]`` of register r for a view whose starts in its moving dims
    (``cdim``) are packed in the register ``creg``: the other dims' part made in the prologue
    (as ``swz_addr``), the moving dims' B(creg + packed(T ^ key)) at the access, once per region
    and key (one add: each field's sum stays below its dim's size, so none carries into the next)."""
    em, lin, s = acc.em, acc.lin, acc.s
    poss, starts, B, _ = acc.swz
    key = acc.keys[r]
    lanes, warps = tuple(tuple(b) for b in lin.lane_bases), tuple(tuple(b) for b in lin.warp_bases)
    mk = ("smem_swzrt", s.creg, lanes, warps, starts, B, key)
    t = em.memo_get(mk)
    if t is None:
        terms, const = _prologue_terms(em, lin, poss, starts, B, key, skip={d for d, _ in s.cdim})
        pk = _packed(s.cdim, key)
        if any(poss[d] for d, _ in s.cdim):
            lv = tuple(_packed(s.cdim, b) for b in lin.lane_bases)
            wv = tuple(_packed(s.cdim, b) for b in lin.warp_bases)
            src, _ = em.thread_xor(lv, wv)
            if pk:
                kk = ("smem_txor", src, pk)
                x = em.thread_cache.get(kk)
                if x is None:
                    x = em.thread_cache[kk] = em.reg("b32")
                    em.pro(f"xor.b32 {x}, {src}, {pk};")
                src = x
            y = em.ins("b32", f"add.u32 {{d}}, {s.creg}, {src};")
        else:
            y = em.ins("b32", f"add.u32 {{d}}, {s.creg}, {pk};") if pk else s.creg
        t = None
        for u in _field_terms(em, y, _packed_bits(s.cdim, B), at_access=True):
            t = u if t is None else em.ins("b32", f"xor.b32 {{d}}, {t}, {u};")
        if terms:
            p = em.fold_terms("xor.b32", terms)
            t = p if t is None else em.ins("b32", f"xor.b32 {{d}}, {t}, {p};")
        if t is None:
            t = em.ins("b32", "mov.u32 {d}, 0;")
        if const:
            t = em.ins("b32", f"xor.b32 {{d}}, {t}, {const};")
        em.memo_put(mk, t)
    return acc._at(t, acc.mixed[r][1])


def joined_coff(views, kept: int | None = None) -> tuple | None:
    """The ``coff`` a join of views of one table keeps: every view's, where all are one (the same
    buffer table and the same start: a branch picking rows 1.. in both arms, a loop carrying
    rows 1.. unchanged), so the joined view is addressed as each of them is; else, given the
    constant the join keeps (``kept``: the carried register holds base + const - kept), the
    ``coff`` of a view starting there (rows 1.. joined with rows 9..: the register moves by the
    period). Else None. (Access checks it against the joined view's table before using it.)"""
    if any(v is None or v.xreg is not None or v.sreg is not None or v.creg is not None for v in views):
        return None
    cs = [v.coff for v in views]
    if cs and all(c is not None for c in cs):
        root, starts = cs[0]
        if all(st == starts and r.shape == root.shape and np.array_equal(r, root) for r, st in cs[1:]):
            # (where the register takes the constant too, the root moves with it, as below: a later
            # join checks root[c + start] against const + rel, and carry moves by the roots' constants)
            k = views[0].const - kept if kept is not None and all(v.const == views[0].const for v in views) else 0
            return (root - k, starts) if k else cs[0]
    if kept is not None:
        for v in views:
            if v.coff is not None and v.const == kept:
                return v.coff
        c = _coff_at(views, kept)
        if c is None:   # (no view of the buffer starts at kept: the coff moved with the register, affine)
            v = next((v for v in views if v.coff is not None), None)
            c = None if v is None else (v.coff[0] - (v.const - kept), v.coff[1])
        return c
    return None


def _coff_at(views, kept: int) -> tuple | None:
    """The ``coff`` of the view of the views' buffer table that starts at ``kept`` where none of them
    does (a loop carrying rows 1.., 2.. and 3.. of a buffer strided evenly by rows keeps 0: the
    whole address is in the register): the start, moved in a dim their starts differ in, at which
    the table is kept + the joined table. None where there is none."""
    if any(v.coff is None or v.rel.shape != views[0].rel.shape or not np.array_equal(v.rel, views[0].rel)
           for v in views):
        return None
    root, st = views[0].coff
    if root.ndim != views[0].rel.ndim or any(v.coff[0].shape != root.shape or not np.array_equal(v.coff[0], root)
                                             for v in views[1:]):
        return None
    rel = views[0].rel
    c = np.indices(rel.shape)
    for e in range(root.ndim):
        if len({v.coff[1][e] for v in views}) < 2:
            continue
        for x in range(root.shape[e] - rel.shape[e] + 1):
            at = st[:e] + (x,) + st[e + 1:]
            if np.array_equal(root[tuple(c[k] + at[k] for k in range(root.ndim))], kept + rel):
                return root, at
    return None


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
    """A view a branch or loop carries with one table (not XOR-linear: a slice from inside a
    swizzle period) whose place in its buffer (``coff``) the backend does not know: views made
    through a reinterpret, or by code it does not predict ahead."""
    from gluon_trace.errors import CompileError
    raise CompileError(f"{what}: this shared-memory view is chosen by a branch (or carried by a loop) among "
                       "slices of a swizzled buffer that start inside the swizzle period (no XOR-linear "
                       "placement), and the NVIDIA backend cannot tell where in the swizzled buffer they start "
                       "(a view made through .reinterpret(), or by code it does not follow ahead), which it needs "
                       "to address them; slice the allocated buffer itself, or slice it inside the branch (or "
                       "loop body), right where it is used here", em.loc)


def _field_terms(em, src: str, bits, at_access: bool = False) -> list:
    """Registers (made in the prologue) whose XOR is B_d(src), src < 2 ** len(bits): a field is
    src itself where it spans src, else one bfe.u32; each place one shl (row << 7 ^ (row & 7)
    << 4 for f32 rows of 128 bytes, not a bfe, neg and and per bit)."""
    terms = []
    for (j, k), places in bit_fields(bits).items():
        if j == 0 and k == len(bits):
            u = src
        elif at_access:  # (``src`` made at the access: so are its fields)
            u = em.ins("b32", f"bfe.u32 {{d}}, {src}, {j}, {k};")
        else:
            u = em.reg("b32")
            em.pro(f"bfe.u32 {u}, {src}, {j}, {k};")
        for p in places:
            if p and at_access:
                terms.append(em.ins("b32", f"shl.b32 {{d}}, {u}, {p};"))
            elif p:
                t = em.reg("b32")
                em.pro(f"shl.b32 {t}, {u}, {p};")
                terms.append(t)
            else:
                terms.append(u)
    return terms


_STATIC = "%static"


def _packed(pairs, c) -> int:
    """The coordinates ``c`` of the moving dims, packed as ``pairs`` ((dim, bit), ...) places them."""
    return sum(int(c[d]) << b for d, b in pairs)


def _packed_bits(pairs, B) -> tuple:
    """The offset of each bit of a packed start: dim d's bit j at bit b + j, as B[d][j]."""
    out = [0] * max(b + len(B[d]) for d, b in pairs)
    for d, b in pairs:
        out[b:b + len(B[d])] = B[d]
    return tuple(out)

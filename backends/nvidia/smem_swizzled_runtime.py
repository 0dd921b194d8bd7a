"""Swizzled (and NVMMA) shared-memory views whose start inside a swizzle period is known only at
run time: slices a branch picks (a loop carries) among, their joins, the register that carries
their start, and what slicing, indexing and reshaping do to it. The addressing at an access is
smem_swizzled._runtime_addr; the views with a compile-time start are smem_swizzled.py's."""
from __future__ import annotations

import functools

import numpy as np

from . import ptx
from .smem_access import _linear_bits
from .smem_view import _esize
from .smem_swizzled import _STATIC, _image, _packed, _reg_coord, _taken_bits, affine, reshape_coff

# -- a start known only at run time: slices a branch picks (a loop carries) among ----------------
# Rows 1..4 and rows 2..5 of a swizzled tile have no common table (neither XOR-linear, nor one the
# other moved or XORed), so a join between them cannot carry one start address (rules_control)
# or one address and an XOR (smem_join). All are base + B(c + start), their starts apart in some
# dims: the join carries those starts in a second register (``Smem.creg``), and loads and stores
# build B(creg + packed(T ^ key)) at the access for those dims (a few bfe/shl/xor per region and
# key), the other dims' part in the prologue as for a start known at compile time. ``Smem.cdim``
# says where each moving dim's start sits in creg: ((dim, bit), ...), each a field as wide as its
# dim's coordinate (log2 of the buffer's size there), the last dim lowest. A start plus a
# coordinate stays inside its dim, so one add of two packed values adds every field at once, and
# B of the packed sum is built from whole bit fields as for one dim (rows and columns of a
# 128-byte swizzle: the row field lands next to the column field, one shift for both). Decided
# before the join's code is emitted (smem_join.branch_specs, loop_specs), only for joins of
# slices whose tables differ, which were refused before; one moving dim sits at bit 0, creg its
# start, as before.

def _packing(shape, dims) -> tuple:
    """((dim, bit), ...) of ``dims`` of a buffer of ``shape``: the last dim lowest, each field its
    dim's coordinate bits wide."""
    out, b = [], 0
    for d in sorted(dims, reverse=True):
        out.append((d, b))
        b += (int(shape[d]) - 1).bit_length()
    return tuple(sorted(out))


def _form(v):
    """(root, starts, cdim) of a view with ``coff`` (cdim None unless its start there is a
    register), or None."""
    if v is None or v.coff is None or v.xreg is not None or v.sreg is not None or not v.rel.size:
        return None
    return v.coff[0], v.coff[1], v.cdim


def join(views: list):
    """The spec of a join of slices of one buffer table whose starts differ (and whose tables
    differ: slices of one table are carried as before, in one register), or None."""
    if any(v is None for v in views):
        return None
    first = views[0]
    if all(v.creg is None and v.rel.shape == first.rel.shape and np.array_equal(v.rel, first.rel) for v in views):
        return None
    fs = [_form(v) for v in views]
    if None in fs or any(v.dtype != first.dtype or v.rel.shape != first.rel.shape for v in views):
        return None
    # (roots one table up to a constant: the buffer's, or moved by a join or a slot index,
    # smem_swizzled.affine; carry moves each view's base by its root's difference from the spec's.
    # The carried register is then the view's origin (where its root's element 0 lies) less the
    # spec's constant, which stays inside the buffer where that constant is at most 0, as the first
    # view's is but for a slot's (slot 2's offset: slot 1's view would move below the buffer), where
    # the spec takes the lowest root instead, every view's base moving up)
    root = fs[0][0]
    if root.size and int(root.flat[0]) > 0:
        root = min((f[0] for f in fs), key=lambda r: int(r.flat[0]) if r.size else 0)
    lin0 = affine(root)[0]
    if any(f[0].shape != root.shape or not np.array_equal(affine(f[0])[0], lin0) for f in fs) or \
            root.ndim != first.rel.ndim:
        return None
    if _linear_bits(tuple(lin0.shape), np.ascontiguousarray(lin0).tobytes()) is None:
        return None
    for v, (r, st, cd) in zip(views, fs):   # (each start where its view is: base + const + rel)
        if cd is None:
            c = np.indices(v.rel.shape)
            if not np.array_equal(r[tuple(c[e] + st[e] for e in range(root.ndim))], v.const + v.rel):
                return None
    dims = {d for f in fs if f[2] is not None for d, _ in f[2]}
    moves = lambda f, d: f[2] is not None and d in dict(f[2])  # noqa: E731
    dims |= {d for d in range(root.ndim) if len({f[1][d] for f in fs if not moves(f, d)}) > 1}
    if not dims:
        return None
    starts = tuple(0 if e in dims else fs[0][1][e] for e in range(root.ndim))
    from .smem_view import Smem
    return Smem(_STATIC, 0, first.rel, first.dtype, 16, coff=(root, starts), creg=_STATIC,
                cdim=_packing(root.shape, dims))


def check(s, spec, loc, what: str) -> None:
    """A view the join receives: a slice of the spec's buffer table, starts apart in its moving
    dims only."""
    moving = dict(spec.cdim)
    if join([spec, s]) is None or (s.creg is not None and any(d not in moving for d, _ in s.cdim)) or \
            any(e not in moving and s.coff[1][e] != spec.coff[1][e] for e in range(spec.coff[0].ndim)):
        from gluon_trace.errors import CompileError
        raise CompileError(f"{what} yields views of a swizzled shared buffer placed differently (another buffer "
                           "shape, layout or slice length, or a start apart in a dim the join did not predict to "
                           "move), not the slice predicted: only where the view starts may change; slice or index "
                           "the buffer inside the branch or loop body instead", loc)


def _moved(s, spec) -> int:
    """Bytes the base of view ``s`` moves by to be addressed by the spec's root (their constants'
    difference: 0 unless a root was moved, smem_swizzled.affine)."""
    return int(s.coff[0].flat[0]) - int(spec.coff[0].flat[0])


def home_align(s, spec) -> int:
    k = _moved(s, spec)
    return min(s.align, ptx.pow2_div(k, 16)) if k else s.align


def carry(em, s, spec) -> list[str]:
    """[base, packed starts]: the two b32 sources a join copies for view ``s`` (the starts an
    immediate where known; a run-time start packed otherwise moved to the spec's fields)."""
    base, k = s.base, _moved(s, spec)
    if k:
        base = em.ins("b32", f"add.u32 {{d}}, {s.base}, {k};" if k > 0 else f"sub.u32 {{d}}, {s.base}, {-k};")
    if s.creg is None:
        return [base, str(_packed(spec.cdim, s.coff[1]))]
    if s.cdim == spec.cdim:
        return [base, s.creg]
    own = dict(s.cdim)
    x = None
    for d, b in spec.cdim:
        if d in own:
            w = (int(s.coff[0].shape[d]) - 1).bit_length()
            f = s.creg if len(s.cdim) == 1 else em.ins("b32", f"bfe.u32 {{d}}, {s.creg}, {own[d]}, {w};")
            f = em.ins("b32", f"shl.b32 {{d}}, {f}, {b};") if b else f
        else:
            f = str(int(s.coff[1][d]) << b)
        x = f if x is None else em.ins("b32", f"add.u32 {{d}}, {x}, {f};")
    return [base, x]


def view(regs: list[str], spec, align: int):
    from .smem_view import Smem
    return Smem(regs[0], 0, spec.rel, spec.dtype, align, coff=spec.coff, creg=regs[1], cdim=spec.cdim)


def refuse_runtime(what: str, loc, why: str = ""):
    from gluon_trace.errors import CompileError
    raise CompileError(f"{what} needs this shared-memory view's placement at compile time, but it was chosen by "
                       "a branch (or carried by a loop) among slices of a swizzled buffer starting at different "
                       "places inside the swizzle period (rows 1.., 2..), known only at run time" + why + "; only "
                       ".load(), .store(), async copies, .slice/.index/.permute and a .reshape that keeps the "
                       "dims whose start moves take it: slice or index the buffer inside the branch (or loop "
                       "body), right where it is used here", loc)


def slice_view(em, s, idx: tuple):
    """A slice of a view with a run-time start: the moving dims' fields moved (one add), the
    others' starts (constants) moved."""
    from .smem_view import Smem
    root, starts = s.coff
    moving = dict(s.cdim)
    by = sum((idx[d].start or 0) << b for d, b in s.cdim)
    creg = em.ins("b32", f"add.u32 {{d}}, {s.creg}, {by};") if by else s.creg
    st = tuple(x if e in moving else x + (i.start or 0) for e, (x, i) in enumerate(zip(starts, idx)))
    return Smem(s.base, 0, s.rel[idx], s.dtype, s.align, coff=(root, st), creg=creg, cdim=s.cdim)


def index_view(em, s, i: str, loc):
    """Slot i of the leading dim: the base moves by (start + i) * its stride, where the buffer's
    table strides it evenly; a start there known only at run time (slices of slots 1.. and 2..
    joined) goes into the base first (smem_stacked.fold: one bfe and one mad)."""
    from gluon_trace.errors import CompileError
    from .smem_view import Smem
    root, starts = s.coff
    n = root.shape[0]
    stride = int(root[1].flat[0] - root[0].flat[0]) if n > 1 else 0
    if any(not np.array_equal(root[j], root[0] + j * stride) for j in range(n)):
        raise CompileError(".index() of this shared-memory view (chosen by a branch or carried by a loop among "
                           "slices of a swizzled buffer starting at different places inside the swizzle period) "
                           "is not addressable: it indexes a dim not evenly strided; index the buffer inside the "
                           "branch or loop body instead", loc)
    if 0 in dict(s.cdim):   # (the indexed dim's start moves: into the base first, smem_stacked.fold)
        from .smem_stacked import fold
        s = fold(em, s)
        if s.creg is not None:   # (the moving dims whose tables differ: still in the register)
            return index_view(em, s, i, loc)
        starts = (0,) + s.coff[1][1:]   # (its start is in the base now; the same root)
    base = em.ins("b32", f"mad.lo.u32 {{d}}, {i}, {stride}, {s.base};") if stride else s.base
    from . import ptx
    align = min(s.align, ptx.pow2_div(stride, 16)) if stride else s.align
    if starts[0] and stride:   # (from a constant start there: a split stacked dim's, refused before)
        base = em.ins("b32", f"add.u32 {{d}}, {base}, {starts[0] * stride};")
        align = min(align, ptx.pow2_div(starts[0] * stride, 16))
    return Smem(base, 0, s.rel[0], s.dtype, align, coff=(root[0], starts[1:]), creg=s.creg,
                cdim=tuple((d - 1, b) for d, b in s.cdim))


def reshape_view(em, s, shape: tuple, loc):
    """.reshape of a view with a run-time start: where each moving dim keeps its size (and its
    buffer dim's) through the reshape, the others regrouped as reshape_coff regroups a constant
    start, the packed register is the reshaped view's as it is (its fields relabelled); else the
    stacked dims' starts moved into the base (smem_stacked.py) and tried again; else refused,
    saying which dim."""
    c, where, bad = _crossing(s, shape)
    if bad:
        from .smem_stacked import fold
        f = fold(em, s)
        if f is not None and f.creg is None:   # (no start left at run time: a plain view's reshape)
            from .smem_view import Smem
            return Smem(f.base, 0, np.reshape(f.rel, shape), f.dtype, f.align,
                        coff=reshape_coff(f.coff, tuple(f.rel.shape), shape))
        if f is not None:
            s = f
            c, where, bad = _crossing(s, shape)
    if bad:
        refuse_runtime(".reshape()", loc, f" in dim {bad[0]}, which this reshape merges with another dim or "
                       "splits (its start would move another dim's coordinate)")
    from .smem_view import Smem
    return Smem(s.base, 0, np.reshape(s.rel, shape), s.dtype, s.align, coff=c, creg=s.creg,
                cdim=tuple(sorted((where[d], b) for d, b in s.cdim)))


def _crossing(s, shape: tuple) -> tuple:
    """(the reshaped coff at the moving dims' starts 0, {old dim: new dim} of dims kept whole, the
    moving dims the reshape to ``shape`` regroups) of a view with a run-time start."""
    root, starts = s.coff
    old = tuple(s.rel.shape)
    moving = dict(s.cdim)
    probe = tuple(0 if d in moving else x for d, x in enumerate(starts))
    c = reshape_coff((root, probe), old, shape)
    where = _dim_map(old, shape)
    bad = [d for d in moving if where.get(d) is None or c is None
           or c[0].shape[where[d]] != root.shape[d] or c[1][where[d]]]
    if not bad:   # (each moving dim's start must land on its own new dim, unscaled: try one)
        for d in moving:
            one = tuple(1 if e == d else x for e, x in enumerate(probe))
            k = reshape_coff((root, one), old, shape)
            if k is None or k[1][where[d]] != 1 or any(a != b for e, (a, b) in enumerate(zip(k[1], c[1]))
                                                     if e != where[d]):
                bad.append(d)
    return c, where, bad


def _dim_map(old: tuple, new: tuple) -> dict:
    """{old dim: new dim} for dims of size > 1 that a row-major reshape keeps whole (a group of
    one old and one new dim, size-1 dims aside)."""
    out, i, j = {}, 0, 0
    oi = [d for d, n in enumerate(old) if n != 1]
    nj = [d for d, n in enumerate(new) if n != 1]
    while i < len(oi) and j < len(nj):
        po, pn, gi, gj = old[oi[i]], new[nj[j]], [oi[i]], [nj[j]]
        i, j = i + 1, j + 1
        while po != pn:
            if po < pn and i < len(oi):
                po *= old[oi[i]]
                gi.append(oi[i])
                i += 1
            elif pn < po and j < len(nj):
                pn *= new[nj[j]]
                gj.append(nj[j])
                j += 1
            else:
                return out
        if len(gi) == 1 and len(gj) == 1:
            out[gi[0]] = gj[0]
    return out


def runtime_coords(acc, what: str, lane_fn=None) -> None:
    """Set ``acc`` up for a view whose starts in its moving dims are packed in the register
    ``creg`` (see ``start_coords``): every register bit of those dims joins lo (any start may
    carry into it), the split checked against the buffer's table for every start the dims admit."""
    import itertools
    from gluon_trace.errors import CompileError
    em, lin, s = acc.em, acc.lin, acc.s
    root, starts = s.coff
    moving = [d for d, _ in s.cdim]
    nd = root.ndim
    lin0, k = affine(root)
    B = _linear_bits(tuple(lin0.shape), np.ascontiguousarray(lin0).tobytes())
    if lane_fn is not None or B is None or nd != s.rel.ndim or nd != lin.ndim or not s.rel.size:
        raise CompileError(f"{what}: internal: a swizzled view with a run-time start reached an access the "
                           "backend does not address this way; please report this kernel", em.loc)
    poss, lo, _ = _taken_bits(B, lin, starts, set(moving))
    regs = [[_reg_coord(lin, r, e) for e in range(nd)] for r in range(lin.num_regs)]
    keys = [tuple(regs[r][e] & lo[e] for e in range(nd)) for r in range(lin.num_regs)]
    his = [functools.reduce(lambda v, e: v ^ _image(B[e], regs[r][e] & ~lo[e]), range(nd), 0)
           for r in range(lin.num_regs)]
    c = lin.coords()
    hv = np.asarray(his, np.int64)
    tlow = 0
    for S in itertools.product(*(range(root.shape[d] - s.rel.shape[d] + 1) for d in moving)):
        st = list(starts)
        for d, x in zip(moving, S):
            st[d] = x
        want = root[tuple(c[..., e] + st[e] for e in range(nd))]
        tv = np.zeros(want.shape, np.int64)
        ok = True
        for e in range(nd):
            R = np.asarray([regs[r][e] for r in range(lin.num_regs)], np.int64)
            L = np.asarray([k[e] for k in keys], np.int64)
            T = c[..., e] ^ R
            ok = ok and not np.any(T != T[..., :1])
            g = st[e] + (T ^ L)
            img = np.zeros(g.shape, np.int64)
            for j, o in enumerate(B[e]):
                img ^= ((g >> j) & 1) * o
            tv ^= img
        if not ok or np.any(tv & hv) or not np.array_equal(tv + hv + k, want):
            at = ", ".join(f"{x} of dim {d}" for d, x in zip(moving, S))
            raise CompileError(f"{what}: this shared-memory view was chosen by a branch (or carried by a loop) "
                               "among slices of a swizzled buffer starting at different places inside the swizzle "
                               f"period, and this register layout does not split its addresses (start {at}) into "
                               "a thread part and constants; load or store it in another layout, or slice the "
                               "buffer inside the branch (or loop body), right where it is used here", em.loc)
        tlow |= functools.reduce(lambda v, x: v | int(x), np.unique(tv).tolist(), 0)
    acc.swz = (tuple(poss), tuple(starts), B, lo)
    acc.keys = keys
    acc.es = _esize(s.dtype)
    acc.tlow = tlow
    acc.mixed = [(keys[r], his[r] + k - s.const) for r in range(lin.num_regs)]
    acc.offs = [h for _, h in acc.mixed]
    acc.additive = False
    acc.xor, acc.tmask, acc.shift = 0, 0, 0

"""LDS views joined by control flow at a start known only at run time.

Padded views whose tables are one table M moved by a start (rows 1..4 and 3..6 of rows padded
every four) are carried with that start S in a second SGPR (shift_join): element c at
``start + lead(c) + es * pad(S + M[c])``. Swizzled/NVMMA views from inside the swizzle's period
whose starts differ (rows 1..4, 2..5 and 3..6 of a 128-byte swizzle) are carried in their
buffer's coordinates, the starts of the dims that move packed in that SGPR (coord_join). Each
access adds S where it is made (lds_address.Access, lds_coords.py). Only joins lds_join.py does
not carry take these forms: every view joined before is carried as before.
"""
from __future__ import annotations

import numpy as np

from .lds_buffer import Lds, _scatter, additive
from .lds_join import _STATIC, _same, join, padded_join
from .mir import Imm


def shifted(x: Lds) -> Lds | None:
    """A padded view as the table M (least offset 0) its elements take from a start S: its additive
    form less its least offset s (svals (s,)), or, for one already at a run-time start, M with
    svals moved by its least offset. None where not padded (or with a run-time XOR). A swizzled or
    NVMMA view: its coordinate form (_coord)."""
    if x is not None and not x.pads:
        return _coord(x)
    if x is None or x.xreg is not None or not x.pads or not np.size(x.lin):
        return None
    if x.sreg is None:
        a = additive(x)
        if a is None:
            return None
        lin = np.asarray(a.lin, np.int64)
        s = int(lin.min())
        return a.with_(lin=lin - s, svals=(s,), coff=None)
    lin = np.asarray(x.lin, np.int64)
    m = int(lin.min())
    return x.with_(lin=lin - m, svals=tuple(sorted({s + m for s in x.svals})), coff=None)


def _coord(x: Lds) -> Lds | None:
    """A swizzled/NVMMA view in its buffer's coordinates: lin the buffer's table at c + coff's starts,
    const the buffer's (a canonical form's moved origin taken back, control._canonical); one at a
    run-time start (sdim) with its moving dims' starts in svals (0 in coff). None where it has no
    such form."""
    if x is None or x.pads or x.xreg is not None or x.coff is None or not np.size(x.lin) \
            or (x.sreg is not None and x.sdim is None):
        return None
    starts, images = x.coff
    lin = np.asarray(x.lin, np.int64)
    if len(starts) != lin.ndim:
        return None
    idx = np.indices(lin.shape)
    if x.sdim is not None:
        k = packed(x.sdim, starts)
        st = tuple(0 if d in dict(x.sdim) else s for d, s in enumerate(starts))
        return x.with_(lin=_scatter([(idx[d] + s, images[d]) for d, s in enumerate(st)]), coff=(st, images),
                       svals=tuple(sorted(s + k for s in x.svals)))
    full = _scatter([(idx[d] + s, images[d]) for d, s in enumerate(starts)])
    if np.array_equal(lin, full):
        return x
    l0 = int(full.flat[0])
    if int(lin.flat[0]) == 0 and np.array_equal(lin + l0, full):
        return x.with_(lin=full, const=x.const - x.es * l0)
    return None


# A run-time start that moves in several dims (rows and columns of a 128-byte swizzle) is one SGPR:
# the dims' starts packed, each in a field as wide as its dim's coordinate (the buffer's images of
# it), the last dim lowest: ``sdim`` ((dim, bit), ...). A start plus a coordinate stays inside its
# dim, so adding two packed values adds each field alone, and the swizzle of the packed sum is
# built from whole bit fields as for one dim. One moving dim sits at bit 0: S its start, as before.

def packed(pairs, c) -> int:
    """The starts ``c`` of the moving dims, packed as ``pairs`` places them."""
    return sum(int(c[d]) << b for d, b in pairs)


def unpacked(pairs, images, S: int) -> dict:
    """{dim: its start} of the packed start S."""
    return {d: S >> b & ((1 << len(images[d])) - 1) for d, b in pairs}


def packing(images, dims) -> tuple:
    out, b = [], 0
    for d in sorted(dims, reverse=True):
        out.append((d, b))
        b += len(images[d])
    return tuple(sorted(out))


def _coord_parts(f: Lds):
    return (f.lead, f.dtype, np.shape(f.lin), tuple(map(tuple, f.coff[1])))


def coord_join(fs: list) -> Lds | None:
    """The joined view (its moving dims' starts known at run time only, packed in one SGPR: sreg
    _STATIC, sdim their packing, svals every packed value it may take) of swizzled views (in _coord
    form) of one buffer's table whose starts differ (rows 1..4, 2..5 and 3..6 of a 128-byte swizzle:
    no XOR of one another's; rows 1.. columns 3.. and rows 2.. columns 5..); None otherwise."""
    if None in fs or any(f.pads or f.coff is None for f in fs) \
            or any(_coord_parts(f) != _coord_parts(fs[0]) for f in fs[1:]):
        return None
    nd = len(fs[0].coff[0])
    images = fs[0].coff[1]
    dims = {d for f in fs if f.sdim is not None for d, _ in f.sdim}
    dims |= {d for f in fs for d in range(nd) if f.coff[0][d] != fs[0].coff[0][d]}
    if not dims:
        return None
    pk = packing(images, dims)
    if any(f.coff[0][e] != fs[0].coff[0][e] for f in fs for e in range(nd) if e not in dims):
        return None
    svals = set()
    for f in fs:   # (each view's every start, its own packing's moved to the join's)
        for S in (f.svals if f.sdim is not None else (0,)):
            at = dict(enumerate(f.coff[0]))
            if f.sdim is not None:
                at.update(unpacked(f.sdim, images, S))
            svals.add(packed(pk, at))
    st = tuple(0 if e in dims else s for e, s in enumerate(fs[0].coff[0]))
    idx = np.indices(np.shape(fs[0].lin))
    lin = _scatter([(idx[e] + s, images[e]) for e, s in enumerate(st)])
    return fs[0].with_(base=None, const=0, lin=lin, coff=(st, images), sreg=_STATIC, svals=tuple(sorted(svals)),
                       sdim=pk)


def _same_m(x: Lds, y: Lds) -> bool:
    return (x.lead == y.lead and x.pads == y.pads and x.dtype == y.dtype and np.shape(x.lin) == np.shape(y.lin)
            and np.array_equal(x.lin, y.lin))


def shift_join(views: list) -> Lds | None:
    """The joined view (a table, its start S known at run time only: sreg _STATIC, svals every value
    S may take) for padded views whose tables differ but are one table M moved by a start (rows 1..4
    and 3..6 of rows padded every four; columns 3.. and 12..); None where the join is carried
    otherwise (one table, a run-time XOR, the additive form) or not at all. Only joins refused
    before take it: every view joined before is carried as before."""
    if any(y is None for y in views) or all(_same(views[0], y) for y in views[1:]):
        return None
    if join(views) is not None or padded_join(views):
        return None
    fs = [shifted(y) for y in views]
    if None not in fs and not fs[0].pads:   # (swizzled views from inside a swizzle period)
        return coord_join(fs)
    if None in fs or not all(_same_m(fs[0], f) for f in fs[1:]):
        return None
    return fs[0].with_(base=None, const=0, sreg=_STATIC, svals=tuple(sorted(set().union(*(f.svals for f in fs)))))


def carried_shift(em, x: Lds, spec: Lds, what: str):
    """([its address, S], the address's alignment) for the view ``x`` a join at a run-time start
    (``spec``, shift_join) receives."""
    from .control import _address, _align
    if spec.sdim is not None:
        return _carried_coord(em, x, spec, what)
    f = shifted(x) if x.xreg is None else None
    if f is None or not _same_m(f, spec) or not set(f.svals) <= set(spec.svals):
        raise em.error(f"{what} yields shared-memory views placed differently (another layout, a slice "
                       "or permutation of the buffer, not one padded table moved by a start): only the base "
                       "and the start may change; slice or index the buffer inside the branch or loop body instead")
    if x.sreg is None:
        s = Imm(f.svals[0])
    else:
        m = int(np.asarray(x.lin, np.int64).min())
        s = em.salu("s_add_u32", em.s(), [x.sreg, Imm(m)]) if m else x.sreg
    return [_address(em, f), s], _align(f)


def _carried_coord(em, x: Lds, spec: Lds, what: str):
    """carried_shift's for a swizzled view joined at a run-time start of the dims spec.sdim packs."""
    from .control import _address, _align
    f = _coord(x)
    j = coord_join([f, spec]) if f is not None else None
    if j is None or j.sdim != spec.sdim or not set(j.svals) <= set(spec.svals):
        raise em.error(f"{what} yields shared-memory views placed differently (another layout, a permutation "
                       "of the buffer, or a slice whose start differs from the others' in a dim the join did not "
                       "predict to move): only the base and the starts may change; slice or index the buffer "
                       "inside the branch or loop body instead")
    if x.sdim is None:
        return [_address(em, f), Imm(packed(spec.sdim, x.coff[0]))], _align(f)
    k = packed(spec.sdim, x.coff[0])
    if x.sdim == spec.sdim:
        s = em.salu("s_add_u32", em.s(), [x.sreg, Imm(k)]) if k else x.sreg
        return [_address(em, f), s], _align(f)
    # (the view's own packing moved field by field to the join's, its static starts added)
    own, images = dict(x.sdim), x.coff[1]
    s = Imm(k)
    for d, b in spec.sdim:
        if d not in own:
            continue
        u = x.sreg
        if len(x.sdim) > 1:
            u = em.salu("s_lshr_b32", em.s(), [u, Imm(own[d])]) if own[d] else u
            u = em.salu("s_and_b32", em.s(), [u, Imm((1 << len(images[d])) - 1)])
        u = em.salu("s_lshl_b32", em.s(), [u, Imm(b)]) if b else u
        s = u if isinstance(s, Imm) and not s.bits else em.salu("s_add_u32", em.s(), [s, u])
    return [_address(em, f), s], _align(f)


def shift_view(spec: Lds, home, align: int) -> Lds:
    return spec.with_(base=home[0], const=0, balign=align, sreg=home[1])

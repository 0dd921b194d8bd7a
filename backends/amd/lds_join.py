"""LDS views joined by control flow whose offset tables differ by a constant XOR.

A view chosen by a branch or carried by a loop lives in SGPRs (control.py). Where the joined
views share one table (after control._canonical), one SGPR (the address, base + const) does.
The column halves of a 128-byte-swizzled tile do not: element c of the right half sits at the
left half's ``lin[c] ^ 16`` (f32; a slice from inside the swizzle's period), and no added
offset expresses that. Such views are one table ``lin`` up to a constant XOR X that differs
between the joined values, so the join carries ``es * X`` in a second SGPR: element c at
``start + lead(c) + es * (lin[c] ^ X)``. Loads and stores fold it into each thread's address
VGPR with one ``v_xor_b32`` (lds_address.Access); every other use of the view needs its
placement at compile time and refuses it (lds._view).

Whether a join carries X is decided before its code is emitted, from the tables, which are
compile-time: a loop body is emitted once, for the view it will receive (what each view will
be is predicted ahead: lds_join_predict.py). Joins whose views share one table (every kernel
before this) are carried as before, padded views at moved starts in their additive form where
that makes their tables one (padded_join); views one table moved by a start known only at run
time carry that start (lds_join_start.py).
"""
from __future__ import annotations

import numpy as np

from .lds_buffer import _BIG, Lds, additive
from .mir import Imm

_STATIC = "static"  # the run-time XOR of a view known only by its table (the decision below)


def _same(x: Lds, y: Lds) -> bool:
    """One carried address stands for both (control._as_first's test)."""
    from .control import _canonical
    x, y = _canonical(x), _canonical(y)
    return (x.xreg is None and y.xreg is None and x.sreg is None and y.sreg is None and x.lead == y.lead and x.pads == y.pads
            and x.dtype == y.dtype and np.shape(x.lin) == np.shape(y.lin) and np.array_equal(x.lin, y.lin))


def _same_table(x: Lds, y: Lds) -> bool:
    return (x.xreg is None and y.xreg is None and x.sreg is None and y.sreg is None and x.lead == y.lead and x.pads == y.pads and x.dtype == y.dtype
            and np.shape(x.lin) == np.shape(y.lin) and np.array_equal(x.lin, y.lin))


def padded_join(views: list) -> bool:
    """Whether a join of ``views`` (all known) carries them in their additive form: one table
    there, not in the XOR-split form (where one table carries them as before)."""
    if any(y is None for y in views) or all(_same(views[0], y) for y in views[1:]):
        return False
    forms = [additive(y) for y in views]
    return None not in forms and all(_same_table(forms[0], y) for y in forms[1:])


def _split(x: Lds) -> Lds | None:
    """``x`` with its table's origin L0 split: the bits no other entry has (they add) moved into
    const, the rest (C, colliding with the swizzle) kept in lin = rel ^ C. None for a padded
    layout (its tables add: only a moved start may differ between joined views)."""
    if x.pads:
        return None
    if x.xreg is not None or not np.size(x.lin):
        return x
    lin = np.asarray(x.lin, np.int64)
    l0 = int(lin.flat[0])
    rel = lin ^ l0
    d = l0 & ~int(np.bitwise_or.reduce(rel, axis=None))
    return x.with_(const=x.const + x.es * d, lin=lin ^ d) if d else x


def join(views: list) -> tuple | None:
    """(spec, mask) for views a join may carry with a run-time XOR: spec, the first's table (split);
    mask, the bits X may have (0: the split tables agree, one address carries them). None where
    the join needs no XOR (one table: carried as before) or cannot have one (tables that differ
    otherwise: refused where the join is emitted)."""
    if all(_same(views[0], y) for y in views[1:]):
        return None
    if any(y.sreg is not None for y in views):   # (a run-time start is no XOR: shift_join carries it)
        return None
    xs = [_split(y) for y in views]
    if any(x is None for x in xs):
        return None
    s = xs[0]
    mask = 0
    for x in xs:
        if x.lead != s.lead or x.dtype != s.dtype or np.shape(x.lin) != np.shape(s.lin):
            return None
        d = int(np.asarray(x.lin).flat[0] ^ np.asarray(s.lin).flat[0]) if np.size(s.lin) else 0
        if not np.array_equal(np.asarray(x.lin) ^ d, s.lin):
            return None
        mask |= d | x.xmask
    return s, mask


def _spec(s: Lds, mask: int) -> Lds:
    """The joined view, as a table (its registers are not known yet)."""
    return s.with_(base=None, const=0, xreg=_STATIC if mask else None, xmask=mask)


# -- carrying it ------------------------------------------------------------------------------

def homes(em, ty, mask: int):
    """The SGPRs a joined view lives in: its address, and es * X where X may be nonzero."""
    return [em.new_home(ty), em.new_home(ty)] if mask else em.new_home(ty)


def _xor_of(x: Lds, spec: Lds, mask: int):
    """(``x`` split, the XOR d of ``spec``'s table it is), d None where a join with ``spec`` and
    ``mask`` cannot receive ``x``."""
    y = _split(x)
    ok = y is not None and y.lead == spec.lead and y.dtype == spec.dtype and np.shape(y.lin) == np.shape(spec.lin)
    d = int(np.asarray(y.lin).flat[0] ^ np.asarray(spec.lin).flat[0]) if ok and np.size(spec.lin) else 0
    if not ok or not np.array_equal(np.asarray(y.lin) ^ d, spec.lin) or (d | y.xmask) & ~mask:
        return y, None
    return y, d


def fits(x: Lds, spec: Lds, mask: int) -> bool:
    """Whether a join with ``spec`` and ``mask`` receives the view ``x`` (``carried`` refuses it)."""
    return _xor_of(x, spec, mask)[1] is not None


def carried(em, x: Lds, spec: Lds, mask: int, what: str):
    """(sources for the join's homes, the arm's alignment) for the view ``x`` a join with
    ``spec`` receives: its address and, with a mask, es * X (an immediate where it is known)."""
    from .control import _address, _align
    y, d = _xor_of(x, spec, mask)
    if d is None:
        raise em.error(f"{what} yields shared-memory views placed differently (another layout, a slice "
                       "or permutation of the buffer, not the same table up to a constant XOR): only the "
                       "base (and, for slices of a swizzled tile, that XOR) may change; slice or index the "
                       "buffer inside the branch or loop body instead")
    start = _address(em, y)
    if not mask:
        return start, _align(y)
    if y.xreg is None:
        xr = Imm(d * y.es)
    elif d:
        xr = em.salu("s_xor_b32", em.s(), [y.xreg, Imm(d * y.es)])
    else:
        xr = y.xreg
    return [start, xr], _align(y)


def view(spec: Lds, mask: int, home, align: int) -> Lds:
    """The joined view on its homes."""
    if not mask:
        return spec.with_(base=home, const=0, balign=align, xreg=None, xmask=0)
    return spec.with_(base=home[0], const=0, balign=align, xreg=home[1], xmask=mask)


def reinterpret_start(em, v: Lds, es: int):
    """(base SGPR, its alignment, const) where a reinterpret of ``v`` (with a run-time XOR X)
    starts: at its lowest byte, const + es * the least of lin ^ X (stacked dims start at 0). That
    is es * (least(lin0) ^ X) where the table's offsets never XOR X's bits down
    (layouts.xor_coset_min); otherwise refused, as a reinterpret that may start inside an element."""
    from gluon_trace.layouts import xor_coset_min
    lin = np.asarray(v.lin, np.int64)
    l0 = int(lin.flat[0])
    least = xor_coset_min(np.unique(lin ^ l0))
    bits = [1 << b for b in range(v.xmask.bit_length()) if v.xmask >> b & 1]
    lo = least(l0)
    why = None
    if any(least(b) != b for b in bits):
        why = "starts at an offset that is not the XOR itself (the table's offsets take some of its bits down)"
    elif v.const % es or (v.es * (v.xmask | lo)) % es:
        why = f"may start inside an element of {es} bytes"
    if why:
        raise em.error(f".reinterpret() of this shared-memory view, chosen by a branch (or carried by a loop) "
                       f"among views whose offsets differ by an XOR known only at run time, {why}; slice or "
                       "index the buffer inside the branch (or loop body) instead")
    x, const = v.xreg, v.const + v.es * (lo & ~v.xmask)   # (lo's bits outside X's add)
    if lo & v.xmask:
        x = em.salu("s_xor_b32", em.s(), [x, Imm(v.es * (lo & v.xmask))])
    base = x if v.base is None else em.salu("s_add_u32", em.s(), [v.base, x])
    balign = min(v.balign if v.base is not None else _BIG, (v.es * v.xmask) & -(v.es * v.xmask) or _BIG)
    return base, balign, const

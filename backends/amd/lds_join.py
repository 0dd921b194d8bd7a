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
compile-time: a loop body is emitted once, for the view it will receive. Joins whose views
share one table (every kernel before this) are carried as before.
"""
from __future__ import annotations

import numpy as np

from gluon_trace.errors import CompileError
from gluon_trace.ir import MemDescType

from .lds_buffer import _BIG, Lds, _fresh, _pow2_div, _scatter, additive
from .mir import Imm

_STATIC = "static"  # the run-time XOR of a view known only by its table (the decision below)
_PURE = ("smem_slice", "smem_permute", "smem_reshape", "smem_reinterpret")  # rules that emit nothing


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


def loop_shift(em, op, firsts: dict, xor: dict, add: set, outer: dict | None = None) -> dict:
    """{carried index: joined view (shift_join)} for a ``for``'s padded views carried at a run-time
    start: one whose body yields a view of its table moved by another start (repeated until no
    carried view gains one or a start)."""
    body = op.regions[0]
    args = body.args[1:]
    sh: dict = {}
    while True:
        env = dict(outer or {})
        env.update({args[j]: _spec(*xor[j]) if j in xor else additive(f) if j in add else sh.get(j, f)
                    for j, f in firsts.items()})
        new = dict(sh)
        for j, f in firsts.items():
            v = body.yielded(j)
            if j in xor or j in add or v is None:
                continue
            y = _static(em, v, env)
            j2 = shift_join([env[args[j]], y]) if y is not None else None
            if j2 is not None:
                new[j] = j2
        if new.keys() == sh.keys() and all(new[j].svals == sh[j].svals for j in new):
            return sh
        sh = new


def _static_align(em, v, env: dict, form, known: dict) -> int:
    """The alignment of the address a join gives the view ``v`` (in ``form``: additive or shifted),
    predicted: a branch's, the weaker arm's (as rule_if makes it); ``known``: the carried views'."""
    from .control import _align
    if v in known:
        return known[v]
    op = v.owner
    if v not in env and em.vals.get(v) is None and op is not None and op.name == "if":
        i = next(k for k, r in enumerate(op.results) if r is v)
        arms = [b.yielded(i) for b in op.regions]
        views = [_static(em, a, env) if a is not None else None for a in arms]
        if None not in views and join(views) is not None:   # (the form rule_if carries the arms in:
            form = _split                                    # a slot's origin in const, lds_join.carried)
        elif padded_join(views):
            form = additive
        elif shift_join(views) is not None:
            form = shifted
        return min(_static_align(em, a, env, form, known) if a is not None else 16 for a in arms)
    x = _static(em, v, env)
    f = form(x) if x is not None and x.sreg is None and x.xreg is None else None
    return _align(f) if f is not None else 16


def loop_aligns(em, op, firsts: dict, xor: dict, add: set, sh: dict) -> dict:
    """{carried index: the least alignment its body's predicted yields have} for the views a ``for``
    carries in the additive form, at a run-time start or with a run-time XOR (columns 3.. then
    12..: the carried address takes the weakest, not the first's)."""
    body = op.regions[0]
    args = body.args[1:]
    from .control import _align, _canonical
    env = {args[j]: _spec(*xor[j]) if j in xor else additive(f) if j in add else sh.get(j, f)
           for j, f in firsts.items()}
    forms = {j: _split if j in xor else additive if j in add else shifted if j in sh else _canonical
             for j in firsts}   # (a run-time XOR's: its address as carried splits it)
    known = {args[j]: _align(form(firsts[j])) for j, form in forms.items()}
    while True:   # (a yield may be another carried view: the least over the loop's steps)
        new = dict(known)
        for j, form in forms.items():
            v = body.yielded(j)
            if v is not None:
                new[args[j]] = min(new[args[j]], _static_align(em, v, env, form, known))
        if new == known:
            return {j: known[args[j]] for j in forms}
        known = new


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


# -- what a view is at compile time ------------------------------------------------------------

class _Views:
    """The part of the emitter the pure view rules read."""

    def __init__(self, em, vals: dict, loc):
        self.vals, self.loc, self.t, self.smem_plan = vals, loc, em.t, em.smem_plan

    def error(self, msg: str) -> CompileError:
        return CompileError(msg, self.loc)

    def s(self):  # (a register a view rule would make: a stand-in, as the joined XOR's)
        return _STATIC

    def salu(self, *_):
        return _STATIC


def _static(em, v, env: dict):
    """The view ``v`` will be, as far as its tables go (its registers may not exist yet), from the
    views already emitted and the ops between, nested branches and loops included (in the form
    their joins will carry it); None where a view is made by something else."""
    if v in env:
        return env[v]
    x = em.vals.get(v)
    if x is not None:
        return x if isinstance(x, Lds) else None
    op = v.owner
    if op is None:
        return None
    if op.name == "if":  # (a branch inside a loop body picks the next view)
        i = next(k for k, r in enumerate(op.results) if r is v)
        views = [_static(em, a, env) if a is not None else None for a in (b.yielded(i) for b in op.regions)]
        if None in views:
            return None
        j = join(views)
        if j is not None:
            return _spec(*j)
        if padded_join(views):
            return additive(views[0])
        s = shift_join(views)
        if s is not None:
            return s
        return views[0] if all(_same(views[0], y) for y in views[1:]) else None
    if op.name == "for":
        return _static_loop(em, op, v, env)
    if op.name == "smem_alloc":
        t = v.type
        try:
            return _fresh(_Views(em, {}, op.loc), t.layout, tuple(t.shape), t.dtype, None, _BIG,
                          em.smem_plan.offsets[op])
        except (CompileError, KeyError, AttributeError):
            return None
    if op.name not in _PURE + ("smem_index",):
        return None
    s = _static(em, op.operands[0], env)
    if s is None:
        return None
    if op.name == "smem_index":  # (moves the address only: as rule_index does, so as aligned)
        stride, i = s.lead[0], em.vals.get(op.operands[1])
        if isinstance(i, Imm):
            k = i.bits if i.size == 1 else i.bits & 0xFFFFFFFF
            return s.with_(const=s.const + (k - (1 << 32) if k >> 31 else k) * stride, lead=s.lead[1:])
        # (a run-time slot, or one not emitted yet: a base register as aligned as the stride)
        return s.with_(base=_STATIC, balign=min(s.balign, _pow2_div(stride)), lead=s.lead[1:])
    from .lds import RULES
    fake = _Views(em, {op.operands[0]: s}, op.loc)
    try:
        RULES[op.name](fake, op)
    except CompileError:  # (the rule says so again, with its reason, when it is emitted)
        return None
    return fake.vals.get(op.result)


def _static_loop(em, op, v, env: dict):
    """A nested loop's carried view after it, in the form control.rule_for will carry it."""
    from .control import _canonical, _is_view
    i = next(k for k, r in enumerate(op.results) if r is v)
    firsts = {}
    for k, a in enumerate(op.operands[3:]):
        f = _static(em, a, env) if _is_view(a) else None
        if f is not None:
            firsts[k] = _canonical(f)
    if i not in firsts:
        return None
    xor = loop_specs(em, op, firsts, env)
    if i in xor:
        return _spec(*xor[i])
    add = loop_additive(em, op, firsts, xor, env)
    if i in add:
        return additive(firsts[i])
    sh = loop_shift(em, op, firsts, xor, add, env)
    return sh[i] if i in sh else firsts[i]


def loop_additive(em, op, firsts: dict, xor: dict, outer: dict | None = None) -> set:
    """The carried views (indexes) a ``for`` carries in their additive form: a padded view whose
    body yields one of another table that form makes the same (repeated while the yields of
    carried views change with it)."""
    body = op.regions[0]
    args = body.args[1:]
    add: set = set()
    while True:
        env = dict(outer or {})
        env.update({args[j]: _spec(*xor[j]) if j in xor else additive(f) if j in add else f
                    for j, f in firsts.items()})
        new = set(add)
        for j, f in firsts.items():
            v = body.yielded(j)
            if j not in xor and j not in add and v is not None and padded_join([f, _static(em, v, env)]):
                new.add(j)
        if new == add:
            return add
        add = new


def branch_specs(em, op) -> dict:
    """{result index: (spec, mask)} for an ``if``'s views joined with a run-time XOR."""
    out = {}
    for i, r in enumerate(op.results):
        if not isinstance(r.type, MemDescType):
            continue
        views = [_static(em, a, {}) if a is not None else None for a in (b.yielded(i) for b in op.regions)]
        if None in views:
            continue
        j = join(views)
        if j is not None:
            out[i] = j
    return out


def loop_specs(em, op, firsts: dict, outer: dict | None = None) -> dict:
    """{carried index: (spec, mask)} for a ``for``'s carried views joined with a run-time XOR: a
    view that enters with one, or whose body yields a view of the same table up to another XOR.
    The body's views may be the carried ones (halves swapped each step): repeated until no
    carried view gains a join or bits of its XOR. ``outer``: the predicted views around (a loop
    nested in code not emitted yet)."""
    body = op.regions[0]
    args = body.args[1:]  # (the first is the induction variable)
    specs = {i: (f, f.xmask) for i, f in firsts.items() if f.xreg is not None}
    while True:
        env = dict(outer or {})
        env.update({args[i]: (_spec(*specs[i]) if i in specs else f) for i, f in firsts.items()})
        new = dict(specs)
        for i, f in firsts.items():
            v = body.yielded(i)
            y = _static(em, v, env) if v is not None else None
            j = join([env[args[i]], y]) if y is not None else None
            if j is not None:
                s, m = specs.get(i, j)
                new[i] = (s, m | j[1])
        if new.keys() == specs.keys() and all(new[i][1] == specs[i][1] for i in new):
            return specs
        specs = new


# -- carrying it ------------------------------------------------------------------------------

def homes(em, ty, mask: int):
    """The SGPRs a joined view lives in: its address, and es * X where X may be nonzero."""
    return [em.new_home(ty), em.new_home(ty)] if mask else em.new_home(ty)


def carried(em, x: Lds, spec: Lds, mask: int, what: str):
    """(sources for the join's homes, the arm's alignment) for the view ``x`` a join with
    ``spec`` receives: its address and, with a mask, es * X (an immediate where it is known)."""
    from .control import _address, _align
    y = _split(x)
    ok = y is not None and y.lead == spec.lead and y.dtype == spec.dtype and np.shape(y.lin) == np.shape(spec.lin)
    d = int(np.asarray(y.lin).flat[0] ^ np.asarray(spec.lin).flat[0]) if ok and np.size(spec.lin) else 0
    if not ok or not np.array_equal(np.asarray(y.lin) ^ d, spec.lin) or (d | y.xmask) & ~mask:
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

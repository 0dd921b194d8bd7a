"""What an LDS view will be before its code is emitted, for the joins of lds_join.py and
lds_join_start.py.

A join's form (one table, a run-time XOR, the additive form, a run-time start) and the alignment
of its address are decided before the code that receives the view is emitted: a loop body is
emitted once, for the view it will receive. The views a branch's arms or a loop's body yield are
predicted from the views already emitted and the pure view rules between (their tables are
compile-time; their registers may not exist yet), nested branches and loops included; a loop's
carried views to a fixed point over its steps.
"""
from __future__ import annotations

from gluon_trace import start_rescue
from gluon_trace.errors import CompileError
from gluon_trace.ir import MemDescType

from .lds_buffer import _BIG, Lds, _fresh, _pow2_div, additive
from .lds_join import _STATIC, _same, _spec, _split, join, padded_join
from .lds_join_start import coord_join, shift_join, shifted
from .mir import Imm

_PURE = ("smem_slice", "smem_permute", "smem_reshape", "smem_reinterpret")  # rules that emit nothing


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
        s = _demanded(em, v, views)
        if s is not None:
            return s
        j = join(views)
        if j is not None:
            return _spec(*j)
        if padded_join(views):
            return additive(views[0])
        s = shift_join(views)
        if s is not None:
            return s
        if all(_same(views[0], y) for y in views[1:]):
            return views[0]
        return start_rescue.rescue(_planner(em), [b.yielded(i) for b in op.regions], views, env)
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

    def first_of(a):
        f = _static(em, a, env) if _is_view(a) else None
        return None if f is None else _canonical(f)
    got = start_rescue.predict_loop(_planner(em), op, i, first_of, lambda firsts: loop_specs(em, op, firsts, env))
    if got is None:
        return None
    firsts, xor = got
    if i in xor:
        return _spec(*xor[i])
    add = loop_additive(em, op, firsts, xor, env)
    if i in add:
        return additive(firsts[i])
    sh = loop_shift(em, op, firsts, xor, add, env)
    return sh[i] if i in sh else firsts[i]


def branch_specs(em, op) -> dict:
    """{result index: (spec, mask)} for an ``if``'s views joined with a run-time XOR."""
    out = {}
    for i, r in enumerate(op.results):
        if not isinstance(r.type, MemDescType):
            continue
        views = [_static(em, a, {}) if a is not None else None for a in (b.yielded(i) for b in op.regions)]
        if None in views:
            continue
        if _demanded(em, r, views) is not None:
            continue
        j = join(views)
        if j is not None:
            start_rescue.look_ahead(_planner(em), op)
            if _demanded(em, r, views) is None:   # (else a later join needs it at a run-time start)
                out[i] = j
    return out


def arm_views(em, op, i: int) -> list:
    """The views an ``if``'s arms yield as its result ``i``, predicted (None: not a view known ahead)."""
    return [_static(em, a, {}) if a is not None else None for a in (b.yielded(i) for b in op.regions)]


def start_spec(em, op, i: int):
    """The joined view (lds_join_start) of an ``if``'s result ``i`` carried at a run-time start, or
    None: a later join's demand (start_rescue.rescue), else shift_join's, else one its arms'
    joins would give carrying their starts instead of an XOR."""
    views = arm_views(em, op, i)
    p = _demanded(em, op.results[i], views) or shift_join(views)
    if p is not None or None in views or all(_same(views[0], y) for y in views[1:]):
        return p   # (one table: carried in one register, as before)
    return start_rescue.rescue(_planner(em), [b.yielded(i) for b in op.regions], views, {})


# -- a run-time XOR a later join needs as a run-time start (gluon_trace.start_rescue) ---------

def _coord_join(views: list):
    """coord_join of swizzled views, even of ones an XOR join would carry."""
    fs = [shifted(y) for y in views]
    return None if None in fs or any(f.pads for f in fs) else coord_join(fs)


def _demanded(em, v, views: list):
    """The run-time-start spec of a branch's result ``v`` that a later join asked for, or None."""
    return _coord_join(views) if v in em.start_demand else None


def _planner(em) -> start_rescue.Planner:
    """This backend's side of the rescue: views from _static, joined at a run-time start by
    coord_join, demands kept on the emitter."""
    return start_rescue.Planner(static=lambda v, env: _static(em, v, env), join=_coord_join,
                                emitted=lambda v: em.vals.get(v) is not None, plain=lambda y: y.sreg is None,
                                demand=em.start_demand, ahead=em.start_ahead, root=em.g.body,
                                blocks=em.start_blocks)


def loop_plan(em, op, firsts: dict) -> dict:
    """loop_specs of a loop about to be emitted, planned again where a join after it asked for a
    view it carries with a run-time XOR at a run-time start instead (start_rescue.loop_ahead)."""
    xor = loop_specs(em, op, firsts)
    if xor and start_rescue.loop_ahead(_planner(em), op):
        xor = loop_specs(em, op, firsts)
    return xor


def loop_specs(em, op, firsts: dict, outer: dict | None = None) -> dict:
    """{carried index: (spec, mask)} for a ``for``'s carried views joined with a run-time XOR
    (_xor_specs). A view so carried whose body yields one at a start across the swizzle's chunks (a
    first value an XOR join picked, then columns 3.. for 1.. and 5..) is refused by that plan;
    where its first value or yield comes from branches not emitted yet, they are asked for their
    starts instead (start_rescue.rescue_loop) and the loop planned again."""
    from .control import _canonical
    from .lds_join import fits
    xor = _xor_specs(em, op, firsts, outer)
    body = op.regions[0]
    args = body.args[1:]
    add, sh = set(), {}
    for exact in (False, True):   # (the other forms planned only where a yield looks refused)
        if exact:
            add = loop_additive(em, op, firsts, xor, outer)
            sh = loop_shift(em, op, firsts, xor, add, outer)
        env = dict(outer or {})
        env.update({args[j]: _spec(*xor[j]) if j in xor else additive(f) if j in add else sh.get(j, f)
                    for j, f in firsts.items()})
        refused = {}
        for i, f in firsts.items():   # (the yields control.rule_for refuses: not the XOR's table, not the first's)
            v = body.yielded(i)
            y = _static(em, v, env) if v is not None and i not in add and i not in sh else None
            if y is not None and not (fits(y, *xor[i]) if i in xor else _same(f, y)):
                refused[i] = (f, y)
        if not refused:
            return xor
    again = start_rescue.rescue_loop(_planner(em), op, refused, env, firsts, outer or {}, _canonical)
    return xor if again is None else loop_specs(em, op, again, outer)


def _xor_specs(em, op, firsts: dict, outer: dict | None = None) -> dict:
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
        if None not in views and _demanded(em, v, views) is not None:   # (a later join's run-time start)
            form = shifted
        elif None not in views and join(views) is not None:   # (the form rule_if carries the arms in:
            form = _split                                    # a slot's origin in const, lds_join.carried)
        elif padded_join(views):
            form = additive
        elif shift_join(views) is not None:
            form = shifted
        elif None not in views:   # (one table: rule_if carries it plain, its home as aligned as the
            from .control import _canonical   # weaker canonical arm, which a later form cannot undo)
            return min([_static_align(em, a, env, form, known) for a in arms] + [_align(_canonical(x)) for x in views])
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

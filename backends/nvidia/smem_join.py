"""Shared-memory views joined by control flow whose offset tables differ by a constant XOR.

A view chosen by a branch or carried by a loop is carried as registers (rules_control). Where
the joined views share one offset table, one b32 register (the start address) does. The column
halves of a 128-byte-swizzled tile do not: element c of the right half sits at the left half's
offset of c XOR 64 bytes (a slice from inside the swizzle's period, smem_access._xor_affine), and
no added offset expresses that. Such views are the same XOR-linear table ``lin`` up to a constant
XOR X that differs between the joined values, so the join carries X as a second b32 register:
element c at start + (lin[c] ^ X). Loads and stores fold X into the thread's part of the address
(one xor.b32 per thread register: smem_access.Access). Views of such a view keep that form (the
view ops below): an index or a slice of whole swizzle periods moves the start, a slice inside
the period XORs a constant into X, a permute or reshape re-indexes the table (X is in offset
space: it stays), a reinterpret starts at the lowest offset, start + the least of lin ^ X (no
XOR left). Every other use needs the view's placement at compile time and refuses it
(smem_view._view_of).

Whether a join needs X is decided before its code is emitted, from the views' tables, which are
compile-time: the loop body is emitted once, for the carried view it will receive. Joins whose
views share one table (every kernel before this) are carried as before, in one register.
"""
from __future__ import annotations

import numpy as np

from gluon_trace import start_rescue
from gluon_trace.errors import CompileError
from gluon_trace.ir import MemDescType

from . import ptx, smem_padded
from .smem_access import _linear_bits, _xor_affine
from .smem_view import Smem
from . import smem_swizzled_runtime
from .smem_swizzled import joined_coff

_STATIC = "%static"  # the run-time XOR of a view known only by its table (the decision below)
_PURE = ("smem_slice", "smem_permute", "smem_reshape", "smem_reinterpret")  # views by table (and X's xor)


def _linear(rel: np.ndarray) -> bool:
    return _linear_bits(tuple(rel.shape), np.ascontiguousarray(rel).tobytes()) is not None


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a, b)


def _canon(s: Smem, lin: np.ndarray | None = None):
    """(A, X, table): ``s`` places element c at base + A + (table[c] ^ X), the table XOR-linear
    (and ``lin``, where given); X None: the view's run-time XOR. None where the table is not
    XOR-linear up to a constant XOR (a padded layout's tables add: a moved start is all a join
    of them may change), or cannot be ``lin``.

    Without ``lin``, a view's own table (normalised to start at 0) where it is XOR-linear. A
    view may also be another XOR-linear table up to a constant XOR: the right column of a
    [32, 2] tile swizzled per row (SwizzledSharedLayout(1, 1, 2)) is the left one's table XOR
    one element, though each, normalised, is XOR-linear on its own. So with ``lin``, the
    start's bits within the table's go into X, the rest (rows of a row slice) into A."""
    if s.xreg is not None:
        c = (s.const, None, s.rel)
    elif _linear(s.rel):
        c = (s.const, 0, s.rel)
    else:
        v, x = _xor_affine(s)
        c = (0, x, v.rel) if x else None
    if lin is None or c is not None and _same(c[2], lin):
        return c
    if s.xreg is not None or lin.shape != s.rel.shape or not lin.size or lin.flat[0] != 0:
        return None
    full = s.rel + s.const
    c0 = int(full.flat[0])
    m = int(np.bitwise_or.reduce(lin, axis=None))
    for x in dict.fromkeys((c0 & m, c0)):
        if x and np.array_equal(full - (c0 - x), lin ^ x):
            return c0 - x, x, lin
    return None


def _join(views: list[Smem]):
    """(mask, table) of a join that needs a run-time XOR: the bits the joined views' XOR may
    have, and the XOR-linear table they share; None if it does not (one table: carried as
    before) or cannot (tables that differ otherwise: refused where the join is emitted). The
    shared table is the first view's own where every view is it up to an XOR (as before),
    else another view's."""
    first = views[0]
    if all(s.xreg is None and _same(s.rel, first.rel) for s in views) or \
            any(s.sreg is not None or s.creg is not None for s in views):
        return None  # (one table: one register; a padded run-time start: smem_padded.join)
    own = [_canon(s) for s in views]
    for c in own:
        if c is None:
            continue
        cs = [_canon(s, c[2]) for s in views]
        if any(d is None for d in cs):
            continue
        m = 0
        for s, (_, x, _) in zip(views, cs):
            m |= s.xmask if x is None else x
        return m, c[2]
    return None


def join_mask(views: list[Smem]) -> int | None:
    """The bits the joined views' XOR may have, if the join needs a run-time XOR (``_join``)."""
    j = _join(views)
    return None if j is None else j[0]


def _spec(s: Smem, mask: int, lin: np.ndarray) -> Smem:
    """The joined view as a table: ``lin``, ``s``'s up to an XOR, a run-time XOR with bits of ``mask``."""
    a, _, lin = _canon(s, lin)
    return Smem(s.base, a, lin, s.dtype, s.align, _STATIC, mask)


# -- a run-time XOR a later join needs as a run-time start (gluon_trace.start_rescue) ---------

_DEMAND = "start_demand"


def _demanded(em, v, views: list) -> Smem | None:
    """The run-time-start spec of a branch's result ``v`` that a later join asked for, or None."""
    if v not in em.flags.get(_DEMAND, ()):
        return None
    return smem_swizzled_runtime.join(views)


def _aligned(p: Smem, views: list) -> Smem:
    """``p`` with the alignment of its registers: as aligned as the join's weakest arm's."""
    p.align = min(home_align(a, p) for a in views)
    return p


def _planner(em) -> start_rescue.Planner:
    """This backend's side of the rescue: views from _static, joined at a run-time start by
    smem_swizzled_runtime (aligned as their weakest arm), demands kept in the emitter's flags."""
    def join(views: list) -> Smem | None:
        p = smem_swizzled_runtime.join(views)
        return None if p is None else _aligned(p, views)
    return start_rescue.Planner(static=lambda v, env: _static(em, v, env), join=join,
                                emitted=lambda v: v in em.vals,
                                plain=lambda s: s.creg is None and s.sreg is None,
                                demand=em.flags.setdefault(_DEMAND, set()),
                                ahead=em.flags.setdefault("start_ahead", set()), root=em.g.body,
                                blocks=em.flags.setdefault("start_blocks", {}))


def _one_table(views: list) -> bool:
    """Whether a join carries ``views`` in one register (their tables one: no plan needed)."""
    return all(s.xreg is None and s.sreg is None and s.creg is None and s.rel.shape == views[0].rel.shape
               and np.array_equal(s.rel, views[0].rel) for s in views)


# -- what a view is at compile time ------------------------------------------------------------

class _Views:
    """What the view rules read of the emitter, for views predicted ahead (a register they would
    make, or an .index()'s run-time index: a stand-in)."""
    vals: dict = {}
    loc = None
    ins = staticmethod(lambda *_: _STATIC)

    @staticmethod
    def strided(s) -> bool:
        try:
            smem_padded.index_view(_Views, s, _STATIC, None)
            return True
        except CompileError:
            return False


def _static(em, v, env: dict) -> Smem | None:
    """The view ``v`` will be, as far as its table and constant go (its registers may not exist
    yet), from the views already emitted and the ops between, nested branches and loops
    included: a join of tables that are not XOR-linear keeps the lowest start it receives
    (rules_control._kept_const), so a view made by nested code must be predicted as the join
    will make it, or an outer join would keep a start above it. None where a view is made by
    something else."""
    if v in env:
        return env[v]
    regs = em.vals.get(v)
    if regs is not None:
        return regs[0] if isinstance(regs[0], Smem) else None
    op = v.owner
    if op is not None and op.name == "if":  # (a branch inside a loop body picks the next view)
        i = next(k for k, r in enumerate(op.results) if r is v)
        arms = [b.yielded(i) for b in op.regions]
        views = [_static(em, a, env) if a is not None else None for a in arms]
        if None in views:
            return None
        p = _demanded(em, v, views)
        if p is not None:
            return _aligned(p, views)
        j = _join(views)
        if j is not None:   # (the join's registers: as aligned as its weakest arm's)
            spec = _spec(views[0], *j)
            spec.align = min(home_align(a, spec) for a in views)
            return spec
        p = smem_padded.join(views) or smem_swizzled_runtime.join(views)
        if p is not None:   # (the join's registers: as aligned as its weakest arm's)
            p.align = min(home_align(a, p) for a in views)
            return p
        if not _one_table(views):
            return start_rescue.rescue(_planner(em), arms, views, env)
        from .rules_control import _kept_const
        if _linear(views[0].rel):   # (carried whole in the register: as aligned as its weakest arm's)
            import copy
            from .rules_control import _home_align
            f = copy.copy(views[0])
            f.align = min(_home_align(a, 0) for a in views)
            return f
        f = views[0]
        kept = _kept_const(f, views[1:])
        # (the join's register: as aligned as its weakest arm's; plin kept as rules_control._as_views keeps it)
        from .rules_control import _home_align, _kept_plin
        return Smem(f.base, kept, f.rel, f.dtype, min(_home_align(a, kept) for a in views), joined=True,
                    coff=joined_coff(views, kept), plin=_kept_plin(f))
    if op is not None and op.name == "for":
        return _static_loop(em, op, v, env)
    if op is not None and op.name == "smem_alloc":
        return _static_alloc(em, op)
    if op is None or op.name not in _PURE + ("smem_index",):
        return None
    s = _static(em, op.operands[0], env)
    if s is None:
        return None
    if op.name == "smem_index" and s.sreg is not None:
        return smem_padded.index_view(_Views, s, _STATIC, op.loc) if _Views.strided(s) else None
    if op.name == "smem_index" and s.creg is not None:
        try:
            return smem_swizzled_runtime.index_view(_Views, s, _STATIC, op.loc)
        except CompileError:
            return None
    # (an index as its rule makes it: from a stacked start, the base may take the start (a constant
    # and alignment moved) and the view keeps its slot's buffer coordinates, which a join of views
    # from inside the swizzle period needs predicted: smem_swizzled_runtime.join)
    from .emitter import RULES
    _Views.vals, _Views.loc = {op.operands[0]: [s], **{i: [_STATIC] for i in op.operands[1:]}}, op.loc
    try:
        return RULES[op.name](_Views, op)[0][0]
    except CompileError:  # (the rule says so again, with its reason, when it is emitted)
        return None


def _static_loop(em, op, v, env: dict) -> Smem | None:
    """A nested loop's carried view after it: as rules_control._for will carry it."""
    from .rules_control import _loop_kept
    i = next(k for k, r in enumerate(op.results) if r is v)
    got = start_rescue.predict_loop(_planner(em), op, i,
                                    lambda a: _static(em, a, env) if isinstance(a.type, MemDescType) else None,
                                    lambda firsts: loop_specs(em, op, firsts, env))
    if got is None:
        return None
    firsts, xor = got
    if i in xor:
        return xor[i]
    f = firsts[i]
    return Smem(f.base, _loop_kept(em, op, firsts, xor, env)[i], f.rel, f.dtype, f.align, joined=True)


def _static_alloc(em, op) -> Smem | None:
    """A buffer allocated in code not emitted yet (a nested body's): its table; the base is the
    allocation's and only the table and constant matter ahead."""
    t = op.results[0].type
    if t.dtype.is_bool or op not in em.smem_plan.offsets:
        return None
    from gluon_trace.ops_memory import element_offsets
    from .smem_view import _esize
    offs, _ = element_offsets(t.layout, tuple(t.shape), t.dtype.bits)
    return Smem(_STATIC, 0, np.asarray(offs, np.int64) * _esize(t.dtype), t.dtype,
                ptx.pow2_div(em.smem_plan.offsets[op], 16) if em.smem_plan.offsets[op] else 16)


def branch_specs(em, op) -> dict:
    """{result index: joined view's spec} for an ``if``'s views that need a run-time XOR."""
    out = {}
    for i, r in enumerate(op.results):
        if not isinstance(r.type, MemDescType):
            continue
        arms = [b.yielded(i) for b in op.regions]
        views = [_static(em, a, {}) if a is not None else None for a in arms]
        if None in views:
            continue
        p = _demanded(em, r, views)
        if p is not None:
            out[i] = p
            continue
        j = _join(views)
        if j is not None:
            out[i] = _spec(views[0], *j)
            start_rescue.look_ahead(_planner(em), op)
            if r in em.flags.get(_DEMAND, ()):   # (a later join needs this one at a run-time start)
                out[i] = _demanded(em, r, views) or out[i]
        else:
            p = smem_padded.join(views) or smem_swizzled_runtime.join(views) or \
                (None if _one_table(views) else start_rescue.rescue(_planner(em), arms, views, {}))
            if p is None and r in em.flags.get("padded_demand", ()):
                from .rules_control import _joined_plin
                if _joined_plin(views[0]) is None:   # (carried in one register, S would be lost)
                    p = smem_padded.join(views, force=True)
            if p is not None:
                out[i] = p
    return out


def demand_padded(em, v) -> None:
    """Mark the branches that make ``v`` (a view an enclosing join carries at a run-time start
    S, smem_padded.py): a branch among padded views of one table (elements 1.. or 2.. of a
    buffer padded every 4) carries S too, which one register holding the address would lose
    (the enclosing join then refused its view with elements 3..)."""
    marked = em.flags.setdefault("padded_demand", set())
    todo = [v]
    while todo:
        v = todo.pop()
        op = v.owner if v is not None else None
        if op is None or op.name != "if" or v in marked:
            continue
        marked.add(v)
        k = next(k for k, r in enumerate(op.results) if r is v)
        todo += [b.yielded(k) for b in op.regions]


def loop_plan(em, op, firsts: dict) -> dict:
    """loop_specs of a loop about to be emitted, planned again where a join after it asked for a
    view it carries with a run-time XOR at a run-time start instead (start_rescue.loop_ahead)."""
    xor = loop_specs(em, op, firsts)
    if any(_xor_form(s) for s in xor.values()) and start_rescue.loop_ahead(_planner(em), op):
        xor = loop_specs(em, op, firsts)
    return xor


def _xor_form(spec: Smem) -> bool:
    return spec.sreg is None and spec.creg is None


def loop_specs(em, op, firsts: dict, outer: dict | None = None) -> dict:
    """{carried index: spec} for a ``for``'s carried views that need a run-time XOR (_xor_specs)
    or a run-time start. A view carried with an XOR whose body yields one at a start across the
    swizzle's chunks (a first value an XOR join picked, then columns 3.. for 1.. and 5..) is
    refused by that plan; where its first value or yield comes from branches not emitted yet,
    they are asked for their starts instead (start_rescue.rescue_loop) and the loop planned again."""
    xor = _xor_specs(em, op, firsts, outer)
    body = op.regions[0]
    args = body.args[1:]
    env = dict(outer or {})
    env.update({args[i]: xor.get(i, f) for i, f in firsts.items()})
    refused = {}
    for i, spec in xor.items():
        v = body.yielded(i)
        y = _static(em, v, env) if v is not None and _xor_form(spec) else None
        if y is not None and yield_home_align(y, spec) is None:
            refused[i] = (firsts[i], y)
    again = start_rescue.rescue_loop(_planner(em), op, refused, env, firsts, outer or {}) if refused else None
    return xor if again is None else loop_specs(em, op, again, outer)


def _xor_specs(em, op, firsts: dict, outer: dict | None = None) -> dict:
    """{carried index: spec} for a ``for``'s carried views that need a run-time XOR: a view
    that enters with one, or whose body yields a view of the same table up to another XOR. The
    body's views may be the carried ones (buffers swapped each step): repeated until no carried
    view gains a run-time XOR or bits of one. ``outer``: the predicted views of the code around
    (a loop nested in a body not emitted yet)."""
    body = op.regions[0]
    args = body.args[1:]  # (the first is the induction variable)
    masks = {i: f.xmask for i, f in firsts.items() if f.xreg is not None}
    lins = {i: firsts[i].rel for i in masks}
    while True:
        env = dict(outer or {})
        env.update({args[i]: (_spec(f, masks[i], lins[i]) if i in masks else f) for i, f in firsts.items()})
        new = dict(masks)
        for i in firsts:
            v = body.yielded(i)
            y = _static(em, v, env) if v is not None else None
            j = _join([env[args[i]], y]) if y is not None else None
            if j is not None:
                new[i] = new.get(i, 0) | j[0]
                lins.setdefault(i, j[1])
        if new == masks:
            break
        masks = new
    xor = {i: _spec(firsts[i], m, lins[i]) for i, m in masks.items()}
    xor = {**xor, **_loop_padded(em, op, firsts, xor, outer)}
    return {**xor, **_loop_swizzled(em, op, firsts, xor, outer)}


def _loop_swizzled(em, op, firsts: dict, done: dict, outer: dict | None) -> dict:
    """{carried index: spec} for a ``for``'s carried swizzled slices that need a run-time start
    (smem_swizzled_runtime.join: the body yields rows 2.. for rows 1..). Repeated until no carried view
    gains one (a view swapped with another carried one)."""
    body = op.regions[0]
    args = body.args[1:]
    specs: dict = {}
    while True:
        env = dict(outer or {})
        env.update({args[i]: done.get(i) or specs.get(i) or f for i, f in firsts.items()})
        new = {}
        for i, f in firsts.items():
            if i in done:
                continue
            v = body.yielded(i)
            y = _static(em, v, env) if v is not None else None
            p = smem_swizzled_runtime.join([f, y] + ([specs[i]] if i in specs else [])) if y is not None else None
            if p is not None or i in specs:
                new[i] = p or specs[i]
        if new.keys() == specs.keys():
            return specs
        specs = new


def _loop_padded(em, op, firsts: dict, xor: dict, outer: dict | None) -> dict:
    """{carried index: spec} for a ``for``'s carried padded views that need a run-time start
    (smem_padded.py): the body yields a view of another table (rows 3.. for rows 1..). Repeated
    until no spec's alignment lowers (a view swapped with another carried one)."""
    body = op.regions[0]
    args = body.args[1:]
    specs: dict = {}
    while True:
        env = dict(outer or {})
        env.update({args[i]: xor.get(i) or specs.get(i) or f for i, f in firsts.items()})
        new = {}
        for i, f in firsts.items():
            if i in xor:
                continue
            v = body.yielded(i)
            y = _static(em, v, env) if v is not None else None
            p = smem_padded.join([f, y] + ([specs[i]] if i in specs else []))
            if p is not None or i in specs:   # (never dropped: the fixpoint only lowers alignments)
                new[i] = p or specs[i]
        if {i: p.salign for i, p in new.items()} == {i: p.salign for i, p in specs.items()}:
            return specs
        specs = new


# -- carrying it ------------------------------------------------------------------------------

def check(s: Smem, spec: Smem, loc, what: str) -> None:
    """A view the join receives: the spec's table, up to an XOR within its bits."""
    if spec.sreg is not None:
        return smem_padded.check(s, spec, loc, what)
    if spec.creg is not None:
        return smem_swizzled_runtime.check(s, spec, loc, what)
    m = join_mask([spec, s])
    if m is None or m & ~spec.xmask:
        raise CompileError(f"{what} yields shared-memory views placed differently (another layout, a "
                           "slice or permutation of the buffer, not the same table up to a constant XOR): "
                           "only the base (and, for slices of a swizzled tile, that XOR) may change; slice "
                           "or index the buffer inside the branch or loop body instead", loc)


def home_align(s: Smem, spec: Smem) -> int:
    """Alignment of the start register carried for ``s`` (its base + A) joined as ``spec``."""
    if spec.sreg is not None:
        return smem_padded.home_align(s, spec)
    if spec.creg is not None:
        return smem_swizzled_runtime.home_align(s, spec)
    a = _canon(s, spec.rel)[0]
    return min(s.align, ptx.pow2_div(a, 16) if a else 16)


def yield_home_align(s: Smem, spec: Smem) -> int | None:
    """home_align of a view a loop's body yields (predicted), joined as ``spec``; None for a view
    the join will refuse (it says why where it is emitted). A prediction is never more aligned
    than the view the code makes (joins take their weakest arm's), so lowering by it only meets
    loops their own check refused before."""
    try:
        check(s, spec, None, "")
    except CompileError:
        return None
    return home_align(s, spec)


def carry(em, s: Smem, spec: Smem) -> list[str]:
    """[start address, XOR]: the two b32 sources a join copies for view ``s`` joined as ``spec``
    (the XOR an immediate where it is a constant)."""
    if spec.sreg is not None:
        return smem_padded.carry(em, s, spec)
    if spec.creg is not None:
        return smem_swizzled_runtime.carry(em, s, spec)
    a, x, _ = _canon(s, spec.rel)
    start = em.ins("b32", f"add.u32 {{d}}, {s.base}, {a};") if a else s.base
    return [start, s.xreg if x is None else str(x)]


def view(regs: list[str], spec: Smem, align: int) -> Smem:
    """The joined view on its carried registers."""
    if spec.sreg is not None:
        return smem_padded.view(regs, spec, align)
    if spec.creg is not None:
        return smem_swizzled_runtime.view(regs, spec, align)
    return Smem(regs[0], 0, spec.rel, spec.dtype, align, regs[1], spec.xmask)


# -- views of a view with a run-time XOR ----------------------------------------------------------

def _refuse(what: str, why: str, loc):
    raise CompileError(f"{what} of this shared-memory view, chosen by a branch (or carried by a loop) among "
                       f"views whose offsets differ by an XOR known only at run time, {why}; slice or index "
                       "the buffer inside the branch (or loop body) instead", loc)


def index_xor(s: Smem, stride: int, n: int, loc) -> None:
    """Slot j of a view with X: start + ((rel[j, c]) ^ X) = start + j * stride + (rel[0, c] ^ X)
    where the slots' bits (the rule checked they add) are not X's too."""
    if any(j * stride & s.xmask for j in range(n)):
        _refuse(".index()", f"is not addressable: the slots' offsets (a stride of {stride} bytes) share bits "
                f"with that XOR's (mask {s.xmask:#x}), so the slot moves with it", loc)


def slice_xor(em, s: Smem, sub: np.ndarray, loc, idx: tuple | None = None) -> Smem:
    """``sub`` (a part of ``s.rel``) as a view with a run-time XOR. Its first offset k either XORs
    (the table is lin ^ k, lin XOR-linear: a slice inside the swizzle's period): k's bits that
    lin or X may have go into X (one xor.b32), the rest add to the start; or adds (sub - k
    XOR-linear: whole swizzle periods of rows) where X's bits all lie below k's lowest, which
    adding k never carries into; or, neither (a start inside the period that splits the swizzle's
    chunks), keeps its place in the view's XOR-linear table T (``coff``, _xor_coff): element c at
    base + const + (T(c + start) ^ X), which Access takes from its start (smem_swizzled), X
    applied to the thread's register where no bit of it meets the immediate's."""
    k = int(sub.flat[0]) if sub.size else 0
    lin = sub ^ k
    if _linear(lin):
        m = int(np.bitwise_or.reduce(lin, axis=None)) | s.xmask
        kx, ka = k & m, k & ~m
    elif _linear(sub - k) and s.xmask < (k & -k):
        lin, kx, ka = sub - k, 0, k
    elif idx is not None and (c := _xor_coff(s, idx)) is not None:
        # a start inside the swizzle period: element c at base + const + (T(c + start) ^ X), T the
        # view's XOR-linear table (or its buffer's, ``coff``); Access takes it from its start
        # (smem_swizzled.start_coords), X applying to the thread register
        return Smem(s.base, s.const, sub, s.dtype, s.align, s.xreg, s.xmask, coff=c)
    else:
        _refuse(".slice()", "is neither its table XOR a constant nor its table moved by whole swizzle "
                "periods (a start inside the period that is not a multiple of the length?), so no one "
                "register holds what varies", loc)
    x = em.ins("b32", f"xor.b32 {{d}}, {s.xreg}, {kx};") if kx else s.xreg
    return Smem(s.base, s.const + ka, lin, s.dtype, s.align, x, s.xmask | kx)


def _xor_coff(s: Smem, idx: tuple) -> tuple | None:
    """``coff`` of the slice ``idx`` of a view with X: its table T (XOR-linear: a join's, or the
    buffer's a slice from inside the period keeps) and the start in it. None where T is not."""
    root, starts = s.coff if s.coff is not None else (s.rel, (0,) * s.rel.ndim)
    if root.ndim != s.rel.ndim or len(idx) != root.ndim or \
            _linear_bits(tuple(root.shape), np.ascontiguousarray(root).tobytes()) is None:
        return None
    return root, tuple(st + (i.start or 0) for st, i in zip(starts, idx))


def reinterpret_start(em, s: Smem, es: int, loc) -> tuple[str, int]:
    """(base register, alignment) of a reinterpret of a view with X: it starts at the view's lowest
    offset, const + the least of rel ^ X, which is X itself unless the table holds offsets that
    XOR X's bits down (then refused: that map would be bit by bit)."""
    from gluon_trace.layouts import xor_coset_min
    bits = _linear_bits(tuple(s.rel.shape), np.ascontiguousarray(s.rel).tobytes())
    if bits is None:   # (a slice from inside the swizzle period: _xor_coff)
        _refuse(".reinterpret()", "starts inside a swizzle period (its table is not XOR-linear), where the "
                "backend does not compute its lowest offset", loc)
    least = xor_coset_min(o for col in bits for o in col)
    moved = [1 << b for b in range(s.xmask.bit_length()) if s.xmask >> b & 1 and least(1 << b) != 1 << b]
    if moved:
        _refuse(".reinterpret()", f"starts at an offset that is not the XOR itself (the table's offsets take "
                f"bit {moved[0]:#x} of it down), which the backend does not compute", loc)
    if (s.const | s.xmask) % es:
        _refuse(".reinterpret()", f"may start inside an element of {es} bytes (that XOR's mask "
                f"{s.xmask:#x})", loc)
    return em.ins("b32", f"add.u32 {{d}}, {s.base}, {s.xreg};"), min(s.align, (s.xmask & -s.xmask) or 16)

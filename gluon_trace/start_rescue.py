"""A run-time XOR that a later join needs as a run-time start: the planning both backends share.

A branch picking columns 1.. or 8.. of a slot (a 16-byte chunk apart) joins one table up to an
XOR, carried with X; a later branch picking that or columns 7.. (across the chunks) needs the
start instead, which X does not give (no register maps X back to a start). Both forms are
decided before the code is emitted, so the later join's plan, where it finds no other, asks the
earlier ones not emitted yet to carry their starts and, where that gives it a plan, records them
(``Planner.demand``); their own plans then take that form. A loop predicts its body's joins
before emitting it; a branch or loop whose join is planned with an XOR predicts the branches and
loops after it in its block first (:func:`look_ahead`). So a loop whose first value an XOR branch
picked and whose body yields a view at another start asks that branch (emitted before the loop:
hence predicted from it) for its start (:func:`rescue_loop`), and a branch after a loop that
carries an XOR asks the loop's first value and yield for theirs (:func:`as_start` of a loop's
result). Only joins refused before change.

The backends differ in what a view is and how views join at a run-time start; they pass those
as a :class:`Planner` (NVIDIA ``smem_join``, AMD ``lds_join_predict``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .ir import Block, MemDescType


@dataclass(frozen=True)
class Planner:
    """A backend's side of the rescue: ``static(v, env)`` the view ``v`` will be (None where not
    known ahead); ``join(views)`` their join at a run-time start (None where none); ``emitted(v)``
    whether ``v``'s code exists already; ``plain(view)`` whether a view carried plainly may be
    re-planned at a start; ``demand`` the branch results recorded; ``ahead`` the branches whose
    later ones were predicted; ``root`` the body of the graph the backend emits, ``blocks`` a
    cache (kept by the backend) of which of its blocks holds each op."""
    static: Callable[[Any, dict], Any]
    join: Callable[[list], Any]
    emitted: Callable[[Any], bool]
    plain: Callable[[Any], bool]
    demand: set
    ahead: set
    root: Block
    blocks: dict


def as_start(pl: Planner, v, env: dict, marks: set, every: bool = False):
    """The branch result ``v`` (not emitted yet) joined at a run-time start, its arms made by
    branches likewise where they carry a run-time XOR (and, ``every``, where they are carried
    plainly and can be), into ``marks``; None where it cannot be."""
    op = v.owner if v is not None else None
    if v in env or pl.emitted(v) or op is None or op.name not in ("if", "for"):
        return None
    arms, env = _arms(pl, op, next(k for k, r in enumerate(op.results) if r is v), env)
    views = [pl.static(a, env) if a is not None else None for a in arms]
    if None in views:
        return None
    inner: set = set()
    alt = start_arms(pl, arms, views, env, inner, every)
    p = pl.join(alt) if None not in alt else None
    if p is not None:
        marks |= inner | {v}
    return p


def _arms(pl: Planner, op, i: int, env: dict):
    """(the values ``op``'s result ``i`` joins, the predicted views to read them in): a branch's
    arms; a loop's first value and its body's yield, the body's carried views taken as their
    first values (a loop whose yield reads them is planned again, to its fixed point, where it is
    emitted: its check refuses a yield this prediction got wrong)."""
    if op.name == "if":
        return [b.yielded(i) for b in op.regions], env
    body = op.regions[0]
    inner = dict(env)
    for a, x in zip(body.args[1:], op.operands[3:]):
        s = pl.static(x, env) if isinstance(x.type, MemDescType) else None
        if s is not None:
            inner[a] = s
    return [op.operands[3 + i], body.yielded(i)], inner


def start_arms(pl: Planner, arms: list, views: list, env: dict, marks: set, every: bool) -> list:
    """``views`` (of ``arms``) with those made by branches not emitted yet joined at a run-time
    start (:func:`as_start`): every one with a run-time XOR (None where one cannot be), and,
    ``every``, the ones carried plainly that can be."""
    return [as_start(pl, a, env, marks, every) if s.xreg is not None else
            (as_start(pl, a, env, marks, every) or s) if every and pl.plain(s) else s
            for a, s in zip(arms, views)]


def rescue(pl: Planner, arms: list, views: list, env: dict):
    """A run-time-start join of ``views`` (of ``arms``) that has no plan, from its arms made by
    branches not emitted yet joined at a run-time start instead (recorded: their plans take it):
    those with a run-time XOR, then also those carried plainly (one table, whose one address keeps
    neither start); None where that gives none."""
    for every in (False, True):
        marks: set = set()
        alt = start_arms(pl, arms, views, env, marks, every)
        p = pl.join(alt) if marks and None not in alt else None
        if p is not None:
            pl.demand.update(marks)
            return p
    return None


def rescue_loop(pl: Planner, op, refused: dict, env: dict, firsts: dict, outer: dict, form=None) -> dict | None:
    """The first views of the loop ``op`` to plan it again with (``form`` of what ``pl.static``
    predicts in ``outer`` where asked for its start), where the carried views its plan refuses
    (``refused``: {index: (first view, the body's yield)}: a first value an XOR join picked, then a
    yield at a start across the swizzle's chunks) were rescued (:func:`rescue`, their first value
    and yield from branches not emitted yet asked for their starts); None where none was."""
    n = len(pl.demand)
    body = op.regions[0]
    for i, (first, y) in refused.items():
        rescue(pl, [op.operands[3 + i], body.yielded(i)], [first, y], env)
    if len(pl.demand) == n:
        return None
    inits, out = op.operands[3:], dict(firsts)
    for k in firsts:
        s = pl.static(inits[k], outer) if inits[k] in pl.demand and not pl.emitted(inits[k]) else None
        if s is not None:
            out[k] = form(s) if form is not None else s
    return out


def predict_loop(pl: Planner, op, i: int, first_of: Callable, plan: Callable):
    """(first views, ``plan`` of them) of a loop not emitted yet whose result ``i`` is a view:
    ``first_of(value)`` predicts each first value's view (None where it is not one), predicted
    again while the plan asks first values for their starts (:func:`rescue_loop`); None where
    result ``i`` enters with no view."""
    n = -1
    while n != len(pl.demand):
        n = len(pl.demand)
        firsts = {}
        for k, a in enumerate(op.operands[3:]):
            f = first_of(a)
            if f is not None:
                firsts[k] = f
        if i not in firsts:
            return None
        planned = plan(firsts)
    return firsts, planned


def loop_ahead(pl: Planner, op) -> bool:
    """Whether a join after the loop ``op`` (about to be emitted, with a run-time XOR) asked for its
    carried view at a run-time start (:func:`look_ahead`): the backend plans the loop again."""
    n = len(pl.demand)
    look_ahead(pl, op)
    return len(pl.demand) != n


def look_ahead(pl: Planner, op) -> None:
    """Predict the branches and loops after ``op`` in its block (once): a join among them (a loop's
    carried one too) refused with ``op``'s run-time XOR asks for its start instead (:func:`rescue`,
    :func:`rescue_loop`)."""
    block = _block_of(pl, op)
    if op in pl.ahead or block is None:
        return
    pl.ahead.add(op)
    for later in block.ops[block.ops.index(op) + 1:]:
        if later.name in ("if", "for"):
            for r in later.results:
                if isinstance(r.type, MemDescType):
                    pl.static(r, {})


def _block_of(pl: Planner, op):
    """The block of the emitted graph that holds ``op``. Found by walking it, not from a result's
    ``block``: schedule.hoist_stores gives the backend copies of the blocks (and ops) it
    reorders, whose values still name the originals (a branch whose arm stores then had no place
    in its block: a ValueError)."""
    if not pl.blocks:
        todo = [pl.root]
        while todo:
            b = todo.pop()
            for o in b.ops:
                pl.blocks[id(o)] = b
                todo.extend(o.regions)
    return pl.blocks.get(id(op))

"""Stores moved up to just after the values they write, for the backends.

A kernel that computes several tiles and stores them all at the end keeps every tile
alive until the last store: with large tiles that is thousands of values per thread,
which the register allocators (ptxas, ours for AMD) spill, and ptxas's time grows with
the square of the values it holds (a random program whose stores came after a loop
took minutes). Storing each tile as soon as it and everything before it allows lets it
die there.

A store moves up past pure computation only (ops without side effects that read no
memory, in themselves or in their regions: ``for``/``if`` bodies, combine functions), never
past a load, another store, an
atomic, a barrier or any shared-memory op, so every memory access keeps its order
relative to every other one and the result is the same program. Backends apply this to
their own copy; the traced graph (and the interpreter's order) is unchanged.
"""
from __future__ import annotations

import dataclasses

from .ir import Block, Graph, Op
from .ops import OPS


def _pure(op: Op) -> bool:
    """No effect and no memory read, in the op or in its regions (a combine may load)."""
    if op.name not in ("for", "if"):  # these two are as pure as their bodies
        d = OPS.get(op.name)
        if d is None or d.has_side_effects or op.name == "load":
            return False
    return all(_pure(o) for r in op.regions for o in r.ops)


def _schedule(block: Block) -> tuple[Block, bool]:
    """A copy of ``block`` (new op lists; ops with regions copied) with stores hoisted."""
    changed = False
    ops: list[Op] = []
    fence = 0  # ops[:fence] stay where they are: the last impure op and all before it
    for op in block.ops:
        if op.regions:
            regions = []
            for r in op.regions:
                nr, ch = _schedule(r)
                regions.append(nr)
                changed |= ch
            if changed and any(a is not b for a, b in zip(regions, op.regions)):
                cp = Op(op.name, op.operands, op.attrs, op.loc)
                cp.results, cp.regions = op.results, regions
                op = cp
        if op.name == "store":
            # the pure ops since the fence that the store reads (its address, its value)
            # go first, then the store; the others follow in their order
            seg, needed, mine = ops[fence:], set(op.operands), set()
            for o in reversed(seg):
                if any(r in needed for r in o.results):
                    mine.add(o)
                    needed.update(_reads(o))
            first = [o for o in seg if o in mine]
            rest = [o for o in seg if o not in mine]
            changed |= bool(rest)
            ops[fence:] = first + [op] + rest
            fence += len(first) + 1
            continue
        ops.append(op)
        if not _pure(op):
            fence = len(ops)
    if not changed:
        return block, False
    new = Block(block.parent)
    new.args, new.ops = block.args, ops
    return new, True


def _reads(op: Op):
    """The values ``op`` reads, those its regions read from outside included."""
    yield from op.operands
    for r in op.regions:
        for o in r.walk():
            yield from o.operands


def hoist_stores(graph: Graph) -> Graph:
    """``graph`` with each store as early as its operands and the memory order allow; the
    same graph object when nothing moves."""
    body, changed = _schedule(graph.body)
    if not changed:
        return graph
    return dataclasses.replace(graph, body=body, _text=None)

"""Loops and branches. Their conditions are IR scalars, so uniform over the workgroup:
every wave takes the same path, and branches are scalar (``s_cbranch_scc*``) with the
full EXEC mask -- which is also what keeps ``s_barrier`` inside them safe."""
from __future__ import annotations

import numpy as np

from gluon_trace import dtypes as dt

from . import arith, lds_join, lds_join_predict, lds_join_start
from .emitter import dwords
from .mir import Imm, Reg


def _scc_from_bool(em, c) -> None:
    arith.scc_of(em, c)


# -- shared-memory views carried by a loop or chosen by a branch ---------------------------------
# An Lds view is an address (an SGPR base, maybe none, plus a constant) and compile-time tables;
# a loop or branch may change the address only (buffers swapped, a slot picked), so it is carried
# in one SGPR holding base + const, the tables fixed by its first value (padded views at moved
# starts in their additive form, lds_join.additive, where that makes the joined tables one: decided
# before the code is emitted, from the views lds_join_predict.py predicts ahead). Views whose tables differ
# by a constant XOR (the column halves of a swizzled tile) carry that XOR in a second SGPR
# (lds_join.py): the ``xor`` dicts below, {index: (the joined table, the XOR's bits)}, decided
# before the code that receives the view is emitted.

def _is_view(v) -> bool:
    from gluon_trace.ir import MemDescType
    return isinstance(v.type, MemDescType)


def _address(em, x):
    """An Lds view's address as one scalar (register or constant); other values as they are."""
    from .lds_buffer import Lds
    if not isinstance(x, Lds):
        return x
    if x.base is None:
        return Imm(x.const)
    return em.salu("s_add_u32", em.s(), [x.base, Imm(x.const)]) if x.const else x.base


def _align(x) -> int:
    from .lds_buffer import _BIG, _pow2_div
    # (alignment matters up to a 16-byte ds_read_b128: beyond, two whole slots are alike)
    return min(16, x.balign if x.base is not None else _BIG, _pow2_div(x.const))


def _canonical(x):
    """``x`` with its table's origin moved into the address: lin = L0 + lin', lin' XOR-linear from
    0, when L0's bits and the rest are disjoint (a slot, a row half: padding then adds up too).
    Two views one carried address can stand for have equal canonical tables."""
    from .lds_buffer import pad
    if x.xreg is not None or x.sreg is not None:  # (a run-time XOR's or start's table: lds_join*.py)
        return x
    lin = np.asarray(x.lin, np.int64)
    l0 = int(lin.flat[0]) if lin.size else 0
    rel = lin ^ l0
    if not l0 or (rel & l0).any() or not np.array_equal(rel + l0, lin):
        return x
    return x.with_(const=x.const + x.es * int(pad(np.int64(l0), x.pads)), lin=rel)


def _as_first(em, x, first, what: str, align: bool, canon=_canonical):
    """``x`` in the form of ``first`` (already canonical, by ``canon``): the same tables, another address."""
    x = canon(x)
    same = (x.lead == first.lead and x.pads == first.pads and x.dtype == first.dtype
            and np.shape(x.lin) == np.shape(first.lin) and np.array_equal(x.lin, first.lin)
            and x.xreg is None and first.xreg is None and x.sreg is None and first.sreg is None)  # (one SGPR would drop a run-time XOR)
    if not same:
        raise em.error(f"{what} yields shared-memory views placed differently (another layout, a slice "
                       "or permutation of the buffer): only the base may change, e.g. bufs.index(i) of one "
                       "buffer, or two buffers of the same shape and layout")
    if align and _align(x) < _align(first):
        raise em.error(f"{what} yields a shared-memory view less aligned than its first value; carry "
                       "views of whole slots")
    return x


def _home_view(first, home, align=None):
    return first.with_(base=home, const=0, balign=_align(first) if align is None else align)


def rule_for(em, op):
    lo_v, hi_v, step_v = op.operands[:3]
    ity = lo_v.type.dtype
    lo, hi, step = (em.vals[v] for v in op.operands[:3])
    inits = op.operands[3:]
    body = op.regions[0]
    firsts = {i: _canonical(em.vals[v]) for i, v in enumerate(inits) if _is_view(v)}
    xor = lds_join_predict.loop_plan(em, op, firsts)
    add = lds_join_predict.loop_additive(em, op, firsts, xor)   # (padded views at moved starts)
    firsts.update({i: lds_join.additive(firsts[i]) for i in add})
    sh = lds_join_predict.loop_shift(em, op, firsts, xor, add)   # (padded views at run-time starts)
    homes = [lds_join.homes(em, v.type, xor[i][1]) if i in xor else
             [em.new_home(v.type), em.new_home(v.type)] if i in sh else em.new_home(v.type)
             for i, v in enumerate(inits)]
    aligns = {}
    pred = lds_join_predict.loop_aligns(em, op, firsts, xor, add, sh)   # (the body's yields may be less aligned)
    pairs = []
    for i, (h, v) in enumerate(zip(homes, inits)):
        if i in xor:
            x, aligns[i] = lds_join.carried(em, firsts[i], *xor[i], "this loop")
            aligns[i] = min(aligns[i], pred.get(i, 16))
        elif i in sh:
            x, aligns[i] = lds_join_start.carried_shift(em, firsts[i], sh[i], "this loop")
            aligns[i] = min(aligns[i], pred.get(i, 16))
        else:
            x = _address(em, firsts.get(i, em.vals[v]))
        if i in firsts and i not in xor and i not in sh:   # (the least a yield has: less than the first's only where refused before)
            aligns[i] = min(_align(firsts[i]), pred.get(i, 16))
        if isinstance(h, list):
            pairs += list(zip(h, x))
        else:
            pairs.append((h, x))
    em.parallel_copy(pairs)
    iv = Reg("s", dwords(ity))
    em.copy_into(iv, lo)
    hi = em.to_s(hi)
    step = em.to_s(step)
    head, end = em.label("for"), em.label("endfor")
    em.place(head)
    # continue while iv < hi (step > 0) or iv > hi (step < 0)
    if isinstance(step, Imm):
        neg = step.signed < 0 if ity.is_signed or ity.bits == 64 else False
        cond = arith.compare(em, "gt" if neg else "lt", ity, iv, hi)
    else:
        up = arith.compare(em, "lt", ity, iv, hi)
        down = arith.compare(em, "gt", ity, iv, hi)
        zero = Imm(0, dwords(ity))
        pos = arith.compare(em, "gt", ity, step, zero)
        cond = arith.where(em, dt.int1, pos, up, down)
    _scc_from_bool(em, cond)
    em.emit("s_cbranch_scc0", kind="cbranch", target=end.name)
    em.vals[body.args[0]] = iv
    em.set_mult(iv, min(em.mult(lo), em.mult(step)))  # lo + i * step: what divides both (axis info)
    for i, (a, h) in enumerate(zip(body.args[1:], homes)):
        em.vals[a] = lds_join.view(*xor[i], h, aligns[i]) if i in xor else \
            lds_join_start.shift_view(sh[i], h, aligns[i]) if i in sh else \
            _home_view(firsts[i], h, aligns.get(i)) if i in firsts else h
    em.loop_depth += 1
    # the copies into the homes stay in the body's scope: a ``var + c`` they materialize is
    # computed on the body's path only, from the home's value of that iteration
    with em.scope():
        ys = list(em.emit_block(body))
        for i, f in firsts.items():
            if i in xor:
                ys[i], a = lds_join.carried(em, ys[i], *xor[i], "this loop's body")
                if a < aligns[i]:
                    raise em.error("this loop's body yields a shared-memory view less aligned than its "
                                   "first value; carry views of whole slots")
            elif i in sh:
                ys[i], a = lds_join_start.carried_shift(em, ys[i], sh[i], "this loop's body")
                if a < aligns[i]:
                    raise em.error("this loop's body yields a shared-memory view less aligned than its "
                                   "first value; carry views of whole slots")
            else:
                ys[i] = _as_first(em, ys[i], f, "this loop's body", align=False,
                                  canon=lds_join.additive if i in add else _canonical)
                if _align(ys[i]) < aligns[i]:
                    raise em.error("this loop's body yields a shared-memory view less aligned than its "
                                   "first value; carry views of whole slots")
        ys = [_address(em, y) for y in ys]
        pairs = []
        for h, y in zip(homes, ys):
            pairs += list(zip(h, y)) if isinstance(h, list) else [(h, y)]
        em.parallel_copy(pairs)
    em.loop_depth -= 1
    nxt = arith.add64(em, iv, step) if dwords(ity) == 2 else em.salu("s_add_u32", em.s(), [iv, step])
    em.copy_into(iv, nxt)
    back = em.emit("s_branch", kind="branch", target=head.name)
    em.loops.append((head, back))
    em.place(end)
    for i, (r, h) in enumerate(zip(op.results, homes)):
        em.vals[r] = lds_join.view(*xor[i], h, aligns[i]) if i in xor else \
            lds_join_start.shift_view(sh[i], h, aligns[i]) if i in sh else \
            _home_view(firsts[i], h, aligns.get(i)) if i in firsts else h


def rule_if(em, op):
    c = em.vals[op.operands[0]]
    then_b, else_b = op.regions
    if isinstance(c, Imm):  # decided at trace time
        ys = em.emit_block(then_b if c.bits else else_b)
        for r, y in zip(op.results, ys):
            em.vals[r] = y
        return
    xor = lds_join_predict.branch_specs(em, op)
    add = {i for i, r in enumerate(op.results) if _is_view(r) and i not in xor and lds_join.padded_join(
           lds_join_predict.arm_views(em, op, i))}
    sh = {}   # (views at run-time starts: lds_join_start.shift_join)
    for i, r in enumerate(op.results):
        if _is_view(r) and i not in xor and i not in add:
            j = lds_join_predict.start_spec(em, op, i)
            if j is not None:
                sh[i] = j
    homes = [lds_join.homes(em, r.type, xor[i][1]) if i in xor else
             [em.new_home(r.type), em.new_home(r.type)] if i in sh else em.new_home(r.type)
             for i, r in enumerate(op.results)]
    firsts, aligns = {}, {}
    els, end = em.label("else"), em.label("endif")
    _scc_from_bool(em, c)
    em.emit("s_cbranch_scc0", kind="cbranch", target=els.name)
    for block, last in ((then_b, False), (else_b, True)):
        if last:
            em.place(els)
        with em.scope():  # copies too: what one arm materializes the other has not computed
            ys = em.emit_block(block)
            ys = list(ys)
            for i, r in enumerate(op.results):
                if i in xor:
                    ys[i], a = lds_join.carried(em, ys[i], *xor[i], "this branch")
                    aligns[i] = min(aligns.get(i, 16), a)
                elif i in sh:
                    ys[i], a = lds_join_start.carried_shift(em, ys[i], sh[i], "this branch")
                    aligns[i] = min(aligns.get(i, 16), a)
                elif _is_view(r):
                    canon = lds_join.additive if i in add else _canonical   # (padded views at moved starts)
                    if i not in firsts:
                        firsts[i] = ys[i] = canon(ys[i])
                    else:
                        ys[i] = _as_first(em, ys[i], firsts[i], "this branch", align=False, canon=canon)
                    aligns[i] = min(aligns.get(i, 16), _align(ys[i]))   # the join's: the weaker arm's
            ys = [_address(em, y) for y in ys]
            pairs = []
            for h, y in zip(homes, ys):
                pairs += list(zip(h, y)) if isinstance(h, list) else [(h, y)]
            em.parallel_copy(pairs)
        if not last:
            em.emit("s_branch", kind="branch", target=end.name)
    em.place(end)
    for i, (r, h) in enumerate(zip(op.results, homes)):
        em.vals[r] = lds_join.view(*xor[i], h, aligns[i]) if i in xor else \
            lds_join_start.shift_view(sh[i], h, aligns[i]) if i in sh else \
            _home_view(firsts[i], h, aligns[i]) if i in firsts else h


def rule_yield(em, op):
    pass  # read by the op that owns the region

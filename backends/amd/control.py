"""Loops and branches. Their conditions are IR scalars, so uniform over the workgroup:
every wave takes the same path, and branches are scalar (``s_cbranch_scc*``) with the
full EXEC mask -- which is also what keeps ``s_barrier`` inside them safe."""
from __future__ import annotations

from gluon_trace import dtypes as dt

from . import arith
from .emitter import dwords
from .mir import Imm, Reg


def _scc_from_bool(em, c) -> None:
    arith.scc_of(em, c)


def rule_for(em, op):
    lo_v, hi_v, step_v = op.operands[:3]
    ity = lo_v.type.dtype
    lo, hi, step = (em.vals[v] for v in op.operands[:3])
    inits = op.operands[3:]
    body = op.regions[0]
    homes = [em.new_home(v.type) for v in inits]
    pairs = []
    for h, v in zip(homes, inits):
        x = em.vals[v]
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
    for a, h in zip(body.args[1:], homes):
        em.vals[a] = h
    em.loop_depth += 1
    # the copies into the homes stay in the body's scope: a ``var + c`` they materialize is
    # computed on the body's path only, from the home's value of that iteration
    with em.scope():
        ys = em.emit_block(body)
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
    for r, h in zip(op.results, homes):
        em.vals[r] = h


def rule_if(em, op):
    c = em.vals[op.operands[0]]
    then_b, else_b = op.regions
    if isinstance(c, Imm):  # decided at trace time
        ys = em.emit_block(then_b if c.bits else else_b)
        for r, y in zip(op.results, ys):
            em.vals[r] = y
        return
    homes = [em.new_home(r.type) for r in op.results]
    els, end = em.label("else"), em.label("endif")
    _scc_from_bool(em, c)
    em.emit("s_cbranch_scc0", kind="cbranch", target=els.name)
    for block, last in ((then_b, False), (else_b, True)):
        if last:
            em.place(els)
        with em.scope():  # copies too: what one arm materializes the other has not computed
            ys = em.emit_block(block)
            pairs = []
            for h, y in zip(homes, ys):
                pairs += list(zip(h, y)) if isinstance(h, list) else [(h, y)]
            em.parallel_copy(pairs)
        if not last:
            em.emit("s_branch", kind="branch", target=end.name)
    em.place(end)
    for r, h in zip(op.results, homes):
        em.vals[r] = h


def rule_yield(em, op):
    pass  # read by the op that owns the region

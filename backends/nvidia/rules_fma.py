"""``gl.dot_fma`` on NVIDIA: acc + A @ B as one fused multiply-add per element and K step.

Each output element is a chain along K in order, k = 0..K-1, each step rounded once
(``fma.rn.f32``/``f64``, and ``fma.rn.f16``/``fma.rn.bf16`` on the 16-bit patterns, sm_80+),
which is the interpreter's rule bit for bit. Integers multiply and add with ``mad.lo``,
wrapping in the accumulator's type (their order does not matter).

The operands are DotOperandLayouts over the accumulator's BlockedLayout: a thread holds the
whole K of every row (column) its outputs need, so no data moves between threads. That is read
off the layouts at lane 0 of warp 0 (the lanes and warps of an operand must carry the
accumulator's rows or columns and no K), as in the AMD rule; a layout that does not is a
CompileError naming the user's line. The output elements are interleaved across K (all of a
step's FMAs before the next step's), so neighbouring instructions are independent.
"""
from __future__ import annotations

from gluon_trace.errors import CompileError

from . import ptx
from .emitter import rule

_F16 = {"float16": "f16", "bfloat16": "bf16"}


def _by_coord(lin) -> dict:
    """{coordinate at lane 0, warp 0: the first register index holding it}."""
    out: dict = {}
    for r in range(lin.num_regs):
        out.setdefault(tuple(lin.coord(r, 0, 0)), r)
    return out


def _check_threads(op, lin, acc_lin, own: int, what: str) -> None:
    kdim = 1 - own
    for kind in ("lane_bases", "warp_bases"):
        for b, ab in zip(getattr(lin, kind), getattr(acc_lin, kind)):
            if b[kdim] != 0 or b[own] != ab[own]:
                raise CompileError(
                    f"gl.dot_fma: operand {what}'s layout spreads K (or its {'MN'[own]} rows) over "
                    "threads other than the accumulator's; each thread must hold all of K for its "
                    "outputs (a DotOperandLayout over the accumulator's BlockedLayout covering the "
                    "tile); convert the operands and the accumulator to such layouts first", op.loc)


@rule("dot_fma")
def _dot_fma(em, op):
    a_v, b_v, c_v = op.operands
    t = c_v.type.dtype
    la, lb, lc = em.lin(a_v), em.lin(b_v), em.lin(op.results[0])
    _check_threads(op, la, lc, 0, "A")
    _check_threads(op, lb, lc, 1, "B")
    ta, tb = _by_coord(la), _by_coord(lb)
    K = a_v.type.shape[1]
    av, bv, cv = em.vals[a_v], em.vals[b_v], em.vals[c_v]

    def pick(vals, r):
        return vals[r] if len(vals) > 1 else vals[0]

    half = _F16.get(t.name)
    if half:  # the chain runs on the 16-bit patterns; widened back to f32 registers at the end
        bits: dict = {}

        def operand(r):
            h = bits.get(r)
            if h is None:
                h = bits[r] = em.to16(r, t)
            return h

        def step(a, b, c):
            return em.ins("b16", f"fma.rn.{half} {{d}}, {a}, {b}, {c};")
    elif t.is_floating:
        f = "f64" if t.bits == 64 else "f32"

        def operand(r):
            return r

        def step(a, b, c):
            return em.ins(f, f"fma.rn.{f} {{d}}, {a}, {b}, {c};")
    else:
        cls, it = ptx.rclass(t), ptx.ity(t)

        def operand(r):
            return r

        def step(a, b, c):
            return em.ins(cls, f"mad.lo.{it} {{d}}, {a}, {b}, {c};")

    # one chain per distinct output coordinate (a register index repeating one, as a tile
    # smaller than the layout's coverage does, takes the same chain's result)
    first: dict = {}
    for r in range(lc.num_regs):
        first.setdefault(tuple(lc.coord(r, 0, 0)), r)
    chains = {mn: operand(pick(cv, r)) for mn, r in first.items()}
    for kk in range(K):
        for (mm, nn) in chains:
            ra, rb = ta.get((mm, kk)), tb.get((kk, nn))
            if ra is None or rb is None:
                raise CompileError(f"gl.dot_fma: no register of operand {'A' if ra is None else 'B'} "
                                   f"holds the element output ({mm}, {nn}) needs at K={kk}", op.loc)
            chains[(mm, nn)] = step(operand(pick(av, ra)), operand(pick(bv, rb)), chains[(mm, nn)])
    if half:
        chains = {mn: em.widen16(h, t) for mn, h in chains.items()}
    elif ptx.needs_norm(t):
        chains = {mn: em.norm(x, t) for mn, x in chains.items()}
    return [[chains[tuple(lc.coord(r, 0, 0))] for r in range(lc.num_regs)]]

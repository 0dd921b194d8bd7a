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
step's FMAs before the next step's), so neighbouring instructions are independent. 16-bit
outputs of one row go two to an ``fma.rn.f16x2`` (``bf16x2``) where a thread holds enough of
them for that to save instructions (``_pairs``); each half rounds as the scalar fma does.
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

    def elem(vals, table, coord, what):
        r = table.get(coord)
        if r is None:
            raise CompileError(f"gl.dot_fma: no register of operand {what} holds element {coord}, which "
                               "the thread's outputs need", op.loc)
        return pick(vals, r)

    # one chain per distinct output coordinate (a register index repeating one, as a tile
    # smaller than the layout's coverage does, takes the same chain's result)
    first: dict = {}
    for r in range(lc.num_regs):
        first.setdefault(tuple(lc.coord(r, 0, 0)), r)
    pairs = _pairs(first, K) if half else []
    paired = {mn for m, n0, n1 in pairs for mn in ((m, n0), (m, n1))}
    chains = {mn: operand(pick(cv, r)) for mn, r in first.items() if mn not in paired}
    twos = {(m, n0, n1): em.pack16x2(pick(cv, first[(m, n0)]), pick(cv, first[(m, n1)]), t)
            for m, n0, n1 in pairs}
    for kk in range(K):
        for (mm, nn) in chains:
            a, b = elem(av, ta, (mm, kk), "A"), elem(bv, tb, (kk, nn), "B")
            chains[(mm, nn)] = step(operand(a), operand(b), chains[(mm, nn)])
        dup: dict = {}
        bpair: dict = {}
        for key in twos:  # two outputs of one row: A's element twice, B's two, one f16x2 fma
            m, n0, n1 = key
            if m not in dup:
                h = operand(elem(av, ta, (m, kk), "A"))
                dup[m] = em.ins("b32", f"mov.b32 {{d}}, {{{h}, {h}}};")
            if (n0, n1) not in bpair:
                bpair[(n0, n1)] = em.pack16x2(elem(bv, tb, (kk, n0), "B"), elem(bv, tb, (kk, n1), "B"), t)
            twos[key] = em.ins("b32", f"fma.rn.{half}x2 {{d}}, {dup[m]}, {bpair[(n0, n1)]}, {twos[key]};")
    if half:
        chains = {mn: em.widen16(h, t) for mn, h in chains.items()}
        for (m, n0, n1), w in twos.items():
            lo, hi = em.halves16(w, t)
            chains[(m, n0)], chains[(m, n1)] = em.widen16(lo, t), em.widen16(hi, t)
    elif ptx.needs_norm(t):
        chains = {mn: em.norm(x, t) for mn, x in chains.items()}
    return [[chains[tuple(lc.coord(r, 0, 0))] for r in range(lc.num_regs)]]


def _pairs(outputs, K: int) -> list:
    """(m, n0, n1): outputs of a row taken two at a time for ``fma.rn.f16x2`` where that is
    fewer instructions: per K step a pair costs its fma plus, shared, A's element duplicated
    into both halves (one per row) and B's two packed (one per column pair), against two fmas;
    once, its accumulator packed and its result split."""
    rows: dict = {}
    for m, n in sorted(outputs):
        rows.setdefault(m, []).append(n)
    pairs = [(m, ns[i], ns[i + 1]) for m, ns in rows.items() for i in range(0, len(ns) - 1, 2)]
    cols = {(n0, n1) for _, n0, n1 in pairs}
    if 2 * len(pairs) + K * (len({m for m, _, _ in pairs}) + len(cols)) >= K * len(pairs):
        return []
    return pairs

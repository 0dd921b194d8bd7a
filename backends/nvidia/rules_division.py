"""Float division: IEEE by default, ``div.full.f32`` for ``gl.fdiv`` (approx=True).

``div.rn.f32`` is correctly rounded but ptxas expands each one into a reciprocal, a
few fmas and a range check that branches to a slow path: one branch per element splits
a row of divisions into many small blocks that ptxas cannot schedule together. Most
divisions in kernels share their divisor along a row (``e / gl.sum(e)[:, None]``), so
when a tile has at least MIN_SHARE elements per distinct divisor register we divide by
Markstein's method instead: y = RN(1/b) once per divisor (``rcp.rn.f32``), then per
element q0 = RN(a*y), r = a - b*q0 (exact in an fma), q = RN(q0 + r*y), which is the
correctly rounded a/b when nothing under- or overflows (Markstein 1990). Before
dividing, integer compares check every operand's exponent against the range where that
holds (a zero numerator included); a thread with any operand outside it -- a subnormal,
huge, inf or NaN numerator, a quotient that would leave the normal range, a zero, tiny,
huge or NaN divisor -- divides all of its elements with ``div.rn.f32`` instead, behind
one branch. Either way the result is bit-identical to ``div.rn.f32``
(tests/backends/nvidia/test_division.py checks the method against numpy's division on
the CPU, test_gpu.py against torch on the GPU).
"""
from __future__ import annotations

from .emitter import rule

# The method is exact when 1/b is normal, the residual a - b*q0 is representable
# (|a| >= 2**-102) and the quotient is normal: |b| in [2**-126, 2**126) and |a| in
# [max(2**-102, |b| * 2**-124), min(2**126, |b| * 2**125)), or a == 0. Scaling |b| by a
# power of two is adding to its bit pattern, so each divisor's window for its numerators
# is two integer ops, and a numerator is checked against it before any division.
B_LO, B_HI = 0x00800000, 0x7E800000
A_LO, A_HI = 0x0C800000, 0x7E800000
BELOW, ABOVE = 124 << 23, 125 << 23
# Elements per distinct divisor from which the shared-divisor method is used. It pays where
# a thread has long rows: on the H100, softmax 1024x16384 (32-64 per thread) ran 3-11%
# faster with it, 4096x4096 (8-16) within 1%; but its fallback block makes ptxas slower
# (+17% for a 16-per-thread softmax), so shorter rows keep div.rn.f32.
MIN_SHARE = 32


def _abs_bits(em, x: str) -> str:
    return em.ins("b32", f"and.b32 {{d}}, {x}, 2147483647;")


def _reg(em, x: str) -> str:
    """Immediates (0f...) into a register: the range checks are integer instructions."""
    return em.ins("f32", f"mov.f32 {{d}}, {x};") if x.startswith("0f") else x


def _window(em, b: str) -> tuple[str, str, str]:
    """(lo, width, divisor ok) of the numerators' window for divisor ``b``."""
    bb = _abs_bits(em, b)
    off = em.ins("b32", f"sub.s32 {{d}}, {bb}, {B_LO};")
    ok = em.ins("pred", f"setp.lt.u32 {{d}}, {off}, {B_HI - B_LO};")
    lo = em.ins("b32", f"sub.s32 {{d}}, {bb}, {BELOW};")
    lo = em.int_minmax("max", "s32", lo, str(A_LO))
    hi = em.ins("b32", f"add.s32 {{d}}, {bb}, {ABOVE};")
    hi = em.int_minmax("min", "u32", hi, str(A_HI))
    width = em.ins("b32", f"sub.s32 {{d}}, {hi}, {lo};")
    return lo, width, ok


def shared_divisor_division(em, pairs: list[tuple[str, str]]) -> dict:
    """{(a, b): quotient register} for f32 registers, correctly rounded."""
    regs = {x: _reg(em, x) for x in dict.fromkeys(x for pair in pairs for x in pair)}
    divisors = list(dict.fromkeys(regs[b] for _, b in pairs))
    windows = {b: _window(em, b) for b in divisors}
    inside_zero = {b: em.ins("b32", f"add.s32 {{d}}, {windows[b][1]}, -1;") for b in divisors}
    worst = {}
    for pair in pairs:
        a, b = regs[pair[0]], regs[pair[1]]
        # |a| - lo, except that a == 0 lands inside: min(|a| - lo, |a| + width - 1)
        ab = _abs_bits(em, a)
        off = em.ins("b32", f"sub.s32 {{d}}, {ab}, {windows[b][0]};")
        zero = em.ins("b32", f"add.s32 {{d}}, {ab}, {inside_zero[b]};")
        off = em.int_minmax("min", "u32", off, zero)
        worst[b] = off if b not in worst else em.int_minmax("max", "u32", worst[b], off)
    ok = None
    for b in divisors:
        lo, width, b_ok = windows[b]
        p = em.ins("pred", f"setp.lt.u32 {{d}}, {worst[b]}, {width};")
        p = em.ins("pred", f"and.pred {{d}}, {p}, {b_ok};")
        ok = p if ok is None else em.ins("pred", f"and.pred {{d}}, {ok}, {p};")
    out = {pair: em.reg("f32") for pair in pairs}
    slow, done = em.label("div_slow"), em.label("div_done")
    em.emit(f"@!{ok} bra {slow};")
    recip = {b: em.ins("f32", f"rcp.rn.f32 {{d}}, {b};") for b in divisors}
    for pair, q in out.items():
        a, b = regs[pair[0]], regs[pair[1]]
        y = recip[b]
        q0 = em.ins("f32", f"mul.rn.f32 {{d}}, {a}, {y};")
        nq = em.ins("f32", f"neg.f32 {{d}}, {q0};")
        r = em.ins("f32", f"fma.rn.f32 {{d}}, {nq}, {b}, {a};")
        q1 = em.ins("f32", f"fma.rn.f32 {{d}}, {r}, {y}, {q0};")
        # r == 0: q0 is the exact quotient (and keeps the sign of a zero numerator)
        exact = em.ins("pred", f"setp.eq.f32 {{d}}, {r}, 0f00000000;")
        em.emit(f"selp.f32 {q}, {q0}, {q1}, {exact};")
    em.emit(f"bra.uni {done};")
    em.emit(f"{slow}:")
    for pair, q in out.items():
        em.emit(f"div.rn.f32 {q}, {regs[pair[0]]}, {regs[pair[1]]};")
    em.emit(f"{done}:")
    return out


@rule("div")
def _div(em, op):
    t = op.results[0].type.dtype
    a_regs, b_regs = em.vals[op.operands[0]], em.vals[op.operands[1]]
    n = max(len(a_regs), len(b_regs))
    f32ish = t.is_floating and t.bits <= 32 and not op.attrs.get("approx")
    if not f32ish or n < 2 or len(set(b_regs)) * MIN_SHARE > n:
        from .rules_elementwise import arith
        return em.map(op, lambda a, b: arith(em, op, "div", a, b))
    a_col = a_regs if len(a_regs) == n else a_regs * n
    b_col = b_regs if len(b_regs) == n else b_regs * n
    q = shared_divisor_division(em, list(dict.fromkeys(zip(a_col, b_col))))
    rounded = {p: em.round16(r, t) for p, r in q.items()}
    return [[rounded[p] for p in zip(a_col, b_col)]]

"""Float division: IEEE by default, ``div.full.f32`` for ``gl.fdiv`` (approx=True).

``div.rn.f32`` is correctly rounded but ptxas expands each one into a reciprocal, a
few fmas and a range check that branches to a slow path: one branch per element splits
a row of divisions into many small blocks that ptxas cannot schedule together. Most
divisions in kernels share their divisor along a row (``e / gl.sum(e)[:, None]``), so
when a tile has at least two elements per distinct divisor register we divide by
Markstein's method instead: y = RN(1/b) once per divisor (``rcp.rn.f32``), then per
element q0 = RN(a*y), r = a - b*q0 (exact in an fma), q = RN(q0 + r*y), which is the
correctly rounded a/b when nothing under- or overflows (Markstein 1990; the residual is
exact while the exponents leave it room). The operands' exponents are checked with
integer compares, and a thread with any element outside the safe range -- zero,
subnormal, huge, inf, NaN numerators; a divisor outside [2**-126, 2**102) -- recomputes
all of its elements with ``div.rn.f32``, once, behind one branch. Either way the result
is bit-identical to ``div.rn.f32`` (tests/backends/nvidia/test_division.py checks the
method against numpy's division on the CPU, test_gpu.py against torch on the GPU).
"""
from __future__ import annotations

from . import ptx
from .emitter import rule

# Safe exponent windows, as offsets of |x|'s bit pattern: x is safe when
# 0 <= bits(|x|) - LO < WIDTH. One width for all three lets a thread fold every check
# into one running unsigned max and test it once.
WIDTH = 0x72000000     # 228 binades: the numerator's window, the narrowest of the three
A_LO = 0x0C800000      # numerator in [2**-102, 2**126): the residual a - b*q0 is exact
B_LO = 0x00800000      # divisor in [2**-126, 2**102): normal, and 1/b is normal
Q_LO = 0x01000000      # quotient in [2**-125, 2**103): the last rounding is a normal one


def _offset(em, x: str, lo: int) -> str:
    m = em.ins("b32", f"and.b32 {{d}}, {x}, 2147483647;")
    return em.ins("b32", f"sub.s32 {{d}}, {m}, {lo};")


def _reg(em, x: str) -> str:
    """Immediates (0f...) into a register: the range checks are integer instructions."""
    return em.ins("f32", f"mov.f32 {{d}}, {x};") if x.startswith("0f") else x


def shared_divisor_division(em, pairs: list[tuple[str, str]]) -> dict:
    """{(a, b): quotient register} for f32 registers, correctly rounded."""
    regs = {x: _reg(em, x) for x in dict.fromkeys(x for pair in pairs for x in pair)}
    recip, worst = {}, None

    def track(off):
        nonlocal worst
        worst = off if worst is None else em.ins("b32", f"max.u32 {{d}}, {worst}, {off};")

    for b in dict.fromkeys(regs[b] for _, b in pairs):
        recip[b] = em.ins("f32", f"rcp.rn.f32 {{d}}, {b};")
        track(_offset(em, b, B_LO))
    out = {}
    for pair in pairs:
        a, b = regs[pair[0]], regs[pair[1]]
        y = recip[b]
        q0 = em.ins("f32", f"mul.rn.f32 {{d}}, {a}, {y};")
        nq = em.ins("f32", f"neg.f32 {{d}}, {q0};")
        r = em.ins("f32", f"fma.rn.f32 {{d}}, {nq}, {b}, {a};")
        q = em.ins("f32", f"fma.rn.f32 {{d}}, {r}, {y}, {q0};")
        track(_offset(em, a, A_LO))
        track(_offset(em, q, Q_LO))
        out[pair] = q
    ok = em.ins("pred", f"setp.lt.u32 {{d}}, {worst}, {WIDTH};")
    done = em.label("div_done")
    em.emit(f"@{ok} bra {done};")
    for (a, b), q in out.items():
        em.emit(f"div.rn.f32 {q}, {regs[a]}, {regs[b]};")
    em.emit(f"{done}:")
    return out


@rule("div")
def _div(em, op):
    t = op.results[0].type.dtype
    a_regs, b_regs = em.vals[op.operands[0]], em.vals[op.operands[1]]
    n = max(len(a_regs), len(b_regs))
    f32ish = t.is_floating and t.bits <= 32 and not op.attrs.get("approx")
    if not f32ish or n < 2 or len(set(b_regs)) * 2 > n:
        from .rules_elementwise import arith
        return em.map(op, lambda a, b: arith(em, op, "div", a, b))
    a_col = a_regs if len(a_regs) == n else a_regs * n
    b_col = b_regs if len(b_regs) == n else b_regs * n
    q = shared_divisor_division(em, list(dict.fromkeys(zip(a_col, b_col))))
    rounded = {p: em.round16(r, t) for p, r in q.items()}
    return [[rounded[p] for p in zip(a_col, b_col)]]

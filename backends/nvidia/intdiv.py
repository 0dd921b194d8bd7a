"""32-bit integer ``//`` and ``%`` by a constant, as a multiply-high and shifts.

ptxas does not strength-reduce ``div.s32``/``rem.s32`` by an immediate (seen with ptxas 13:
``div.s32 %r, %a, 2`` assembles to the generic reciprocal, refinement and sign fix-up, ~25
instructions), and kernels divide by constants all the time: a ring slot ``i % STAGES`` and
its phase ``i // STAGES`` every step. The quotient truncates toward zero (the documented
semantics, as C and Triton), so the sequences are the classic ones (Hacker's Delight,
chapter 10): a power of two is a shift with a bias for negative numerators; any other divisor
a multiply-high by a "magic" constant, a shift and a sign correction. ``magic_signed`` and
``magic_unsigned`` are checked against Python's integers in tests/backends/nvidia/test_intdiv.py,
and the emitted code against the interpreter on the PTX simulator.
"""
from __future__ import annotations

M32 = (1 << 32) - 1


def magic_signed(d: int) -> tuple[int, int]:
    """(M, s) with trunc(n / d) = mulhi(n, M) [+- n] >> s, + 1 if negative, for |d| >= 2."""
    ad = abs(d)
    t = (1 << 31) + (1 if d < 0 else 0)
    anc = t - 1 - t % ad
    p = 31
    q1, r1 = divmod(1 << 31, anc)
    q2, r2 = divmod(1 << 31, ad)
    while True:
        p += 1
        q1, r1 = 2 * q1, 2 * r1
        if r1 >= anc:
            q1, r1 = q1 + 1, r1 - anc
        q2, r2 = 2 * q2, 2 * r2
        if r2 >= ad:
            q2, r2 = q2 + 1, r2 - ad
        delta = ad - r2
        if not (q1 < delta or (q1 == delta and r1 == 0)):
            break
    m = q2 + 1
    if d < 0:
        m = -m
    m &= M32
    return (m - (1 << 32) if m >> 31 else m), p - 32


def magic_unsigned(d: int) -> tuple[int, bool, int]:
    """(M, add, s) with n // d = mulhi(n, M) >> s, or with ``add`` ((n - q) / 2 + q) >> (s - 1)."""
    nc = M32 - ((1 << 32) - d) % d
    p = 31
    q1, r1 = divmod(1 << 31, nc)
    q2, r2 = divmod((1 << 31) - 1, d)
    add = False
    while True:
        p += 1
        if r1 >= nc - r1:
            q1, r1 = 2 * q1 + 1, 2 * r1 - nc
        else:
            q1, r1 = 2 * q1, 2 * r1
        if r2 + 1 >= d - r2:
            add |= q2 >= (1 << 31) - 1
            q2, r2 = 2 * q2 + 1, 2 * r2 + 1 - d
        else:
            add |= q2 >= 1 << 31
            q2, r2 = 2 * q2, 2 * r2 + 1
        delta = d - 1 - r2
        if not (p < 64 and (q1 < delta or (q1 == delta and r1 == 0))):
            break
    return (q2 + 1) & M32, add, p - 32


def quotient(em, a: str, d: int, signed: bool) -> str:
    """The register holding trunc(a / d) for a 32-bit ``a`` and a constant d != 0."""
    if signed:
        return _quotient_signed(em, a, d)
    return _quotient_unsigned(em, a, d)


def remainder(em, a: str, d: int, signed: bool, q: str | None = None) -> str:
    """a - trunc(a / d) * d (the sign of a, as ``rem``)."""
    it = "s32" if signed else "u32"
    if not signed and d & (d - 1) == 0:
        return em.ins("b32", f"and.b32 {{d}}, {a}, {d - 1};")
    q = q or quotient(em, a, d, signed)
    qd = em.ins("b32", f"mul.lo.{it} {{d}}, {q}, {d};")
    return em.ins("b32", f"sub.{it} {{d}}, {a}, {qd};")


def _quotient_unsigned(em, a: str, d: int) -> str:
    if d == 1:
        return a
    if d & (d - 1) == 0:
        return em.ins("b32", f"shr.u32 {{d}}, {a}, {d.bit_length() - 1};")
    m, add, s = magic_unsigned(d)
    q = em.ins("b32", f"mul.hi.u32 {{d}}, {a}, {m};")
    if not add:
        return em.ins("b32", f"shr.u32 {{d}}, {q}, {s};") if s else q
    t = em.ins("b32", f"sub.u32 {{d}}, {a}, {q};")
    t = em.ins("b32", f"shr.u32 {{d}}, {t}, 1;")
    t = em.ins("b32", f"add.u32 {{d}}, {t}, {q};")
    return em.ins("b32", f"shr.u32 {{d}}, {t}, {s - 1};")


def _quotient_signed(em, a: str, d: int) -> str:
    ad = abs(d)
    if ad == 1:
        return a if d == 1 else em.ins("b32", f"neg.s32 {{d}}, {a};")
    if ad & (ad - 1) == 0:  # bias a negative numerator by |d| - 1 so the shift truncates
        k = ad.bit_length() - 1
        sign = em.ins("b32", f"shr.s32 {{d}}, {a}, 31;")
        bias = em.ins("b32", f"shr.u32 {{d}}, {sign}, {32 - k};")
        t = em.ins("b32", f"add.s32 {{d}}, {a}, {bias};")
        q = em.ins("b32", f"shr.s32 {{d}}, {t}, {k};")
        return q if d > 0 else em.ins("b32", f"neg.s32 {{d}}, {q};")
    m, s = magic_signed(d)
    q = em.ins("b32", f"mul.hi.s32 {{d}}, {a}, {m};")
    if d > 0 and m < 0:
        q = em.ins("b32", f"add.s32 {{d}}, {q}, {a};")
    elif d < 0 and m > 0:
        q = em.ins("b32", f"sub.s32 {{d}}, {q}, {a};")
    if s:
        q = em.ins("b32", f"shr.s32 {{d}}, {q}, {s};")
    neg = em.ins("b32", f"shr.u32 {{d}}, {q}, 31;")
    return em.ins("b32", f"add.s32 {{d}}, {q}, {neg};")

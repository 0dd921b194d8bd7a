"""Integer and pointer arithmetic that keeps constants apart (``Aff``: var + c).

``arange`` gives every register of a tile the same thread-dependent part plus its own
constant; carrying that split through ``+ k``, ``* k``, ``<< k``, ``+ scalar`` and
``ptr + offset`` turns a tile of addresses into one base register (computed once)
and per-register constants, which land in the memory instruction's 13-bit immediate
offset -- and make contiguous registers visible, so loads and stores vectorize.

Known power-of-two multiples (of thread indices, program ids times a block size,
arguments specialized as divisible by 16) let ``offs < n`` produce one mask per
group of registers that cannot straddle ``n``, as Triton's axis analysis does.

One liberty, as in Triton: ``ptr + (i + c)`` is computed as ``(ptr + i) + c``, which
differs only when the 32-bit offset ``i + c`` overflows.
"""
from __future__ import annotations

from gluon_trace import dtypes as dt

from . import arith
from .emitter import elem_key
from .mir import Aff, Imm

AWARE = {"add", "sub", "mul", "shl", "ptr_add", "lt", "le", "gt", "ge", "mod", "floordiv"}


def tracks(d: dt.dtype) -> bool:
    return d.is_ptr or (d.is_int and not d.is_bool and d.bits in (32, 64))


def split(x, d):
    """(var or None, constant)."""
    if isinstance(x, Aff):
        return x.var, x.c
    if isinstance(x, Imm) and not d.is_ptr:
        return None, (x.signed if d.is_signed or x.size == 2 else x.bits)
    return x, 0


def make(em, var, c: int, size: int, d=None):
    bits = 32 * size
    c &= (1 << bits) - 1
    if c >> (bits - 1):
        c -= 1 << bits
    if var is None:
        return Imm(c, size)
    if c == 0:
        return var
    return Aff(var, c, size)


def _cse(em, key, build, mult=None):
    hit = em.cse_get(key)
    if hit is not None:
        return hit
    r = build()
    if mult is not None:
        em.set_mult(r, mult)
    return em.cse_put(key, r)


def _k(x):
    return elem_key(x) if x is not None else None


def binary(em, name, d, a, b):
    """add/sub/mul/shl that keep the constant apart; None when they cannot."""
    size = 2 if d.bits == 64 else 1
    if name in ("mod", "floordiv"):
        return _by_pow2(em, name, d, a, b)
    va, ca = split(a, d)
    vb, cb = split(b, d)
    if name == "add":
        if va is None or vb is None:
            v = va if vb is None else vb
        else:
            v = _cse(em, ("add", d.name, _k(va), _k(vb)),
                     lambda: arith.binary(em, "add", d, va, vb), min(em.mult(va), em.mult(vb)))
        return make(em, v, ca + cb, size)
    if name == "sub":
        if vb is None:
            return make(em, va, ca - cb, size)
        if va is None:
            v = _cse(em, ("neg", d.name, _k(vb)),
                     lambda: arith.binary(em, "sub", d, Imm(0, size), vb), em.mult(vb))
        else:
            v = _cse(em, ("sub", d.name, _k(va), _k(vb)),
                     lambda: arith.binary(em, "sub", d, va, vb), min(em.mult(va), em.mult(vb)))
        return make(em, v, ca - cb, size)
    if name in ("mul", "shl"):
        if name == "shl":
            if vb is not None or not 0 <= cb < d.bits:
                return None
            k = 1 << cb
        else:
            if vb is not None and va is not None:
                # a product of two unknowns: no constant to keep apart, but their known
                # power-of-two factors multiply (row * stride: a tile's addresses stay aligned)
                m = min(em.mult(a) * em.mult(b), 1 << 32)
                ra, rb = em.real(a), em.real(b)
                return _cse(em, ("mul", d.name, elem_key(ra), elem_key(rb)),
                            lambda: arith.binary(em, "mul", d, ra, rb), m)
            if vb is not None:  # constant * x
                va, ca, vb, cb = vb, cb, va, ca
            k = cb
        if va is None:
            return make(em, None, ca * k, size)
        v = _cse(em, ("mul", d.name, _k(va), k),
                 lambda: arith.binary(em, "mul", d, va, Imm(k, size)),
                 em.mult(va) * (k & -k) if k else None)
        return make(em, v, ca * k, size)
    return None


def _by_pow2(em, name, d, a, b):
    """x % 2^n and x // 2^n (32-bit, truncating as the interpreter and C): shifts and masks, on
    the scalar unit for a uniform x (a loop counter's ``k % 2`` was a 27-instruction division
    on the vector unit). Signed: x + (2^n - 1 if x < 0 else 0) rounds the quotient toward 0."""
    vb, k = split(b, d)
    if d.bits != 32 or d.is_ptr or d.is_bool or vb is not None or k <= 1 or k & (k - 1):
        return None
    x = em.real(a)
    if isinstance(x, Imm):
        return None  # (folded by the generic rule)
    n = k.bit_length() - 1
    if not d.is_signed:
        return arith.binary(em, "and", d, x, Imm(k - 1)) if name == "mod" else \
            arith.binary(em, "shr", d, x, Imm(n))
    sign = arith.binary(em, "shr", d, x, Imm(31))                 # 0 or -1
    bias = arith.binary(em, "shr", dt.uint32, sign, Imm(32 - n))  # 0 or 2^n - 1
    t = arith.binary(em, "add", d, x, bias)
    if name == "floordiv":
        return arith.binary(em, "shr", d, t, Imm(n))
    return arith.binary(em, "sub", d, x, arith.binary(em, "and", d, t, Imm(-k & 0xFFFFFFFF)))


def ptr_add(em, esize: int, p, off, odt):
    vp, cp = p.var if isinstance(p, Aff) else p, p.c if isinstance(p, Aff) else 0
    vo, co = split(off, odt) if tracks(odt) or isinstance(off, Imm) else (em.real(off), 0)
    if vo is None:
        base = vp
    else:
        base = _cse(em, ("ptr_add", esize, odt.name, elem_key(vp), elem_key(vo)),
                    lambda: arith.ptr_add(em, esize, vp, vo, odt),
                    min(em.mult(vp), em.mult(vo) * esize))
    return make(em, base, cp + co * esize, 2)


def compare(em, name, d, a, b):
    """``i + c < n`` is the same for every c in one block of M (M dividing both i and
    n): such registers get the same mask element, so their loads can be one vector."""
    if isinstance(b, Aff) and not isinstance(a, Aff):
        a, b, name = b, a, arith.SWAP_CMP[name]
    va, ca = split(a, d) if not d.is_ptr else (None, 0)
    if va is not None and name in ("lt", "ge") and not isinstance(b, Aff) and em.uniform(b):
        m = min(em.mult(va), em.mult(b), 1 << 16)
        if m > 1:
            q = ca - ca % m
            key = ("cmp", name, d.name, elem_key(va), q, elem_key(b))
            return _cse(em, key, lambda: arith.compare(
                em, name, d, em.real(make(em, va, q, 1 if d.bits < 64 else 2)), b))
    return arith.compare(em, name, d, em.real(a), em.real(b))

"""32-bit integer registers known as ``base register + constant``, and addresses as
``[base + immediate]``.

Offsets are built per element (``arange``, ``* stride``, ``+``), so a tile of N elements
used to cost N multiplies, N adds and N 64-bit pointers (``mul.wide`` + ``add.s64``)
before its N loads: with thousands of values per thread ptxas spent minutes allocating
those pointers. Here each 32-bit integer register the arange/add/sub/mul/neg/const rules
produce is remembered as (base, c) -- base a register or None for a constant -- and
the algebra works on the pairs: the offsets of a tile share one base register and
differ by constants, an element's register is one ``add.s32 base, c`` (dead, and
dropped by ptxas, where only addresses read it), and a pointer whose only readers are
loads, stores and further ptr_adds becomes the address ``[p + base*size + c*size]`` --
one 64-bit base per tile, an immediate per element.

Exact in 32-bit two's complement (add/sub/mul distribute over wrap-around). The one
assumption is the address: ``p + sext(base + c)*size`` is taken as ``p + sext(base)*size +
c*size``, which differs only where the offset itself overflows int32 (an address far
outside any buffer either way), as LLVM and Triton assume.
"""
from __future__ import annotations

from gluon_trace import dtypes as dt

_M = 1 << 32
_IMM = 1 << 31  # PTX address immediates are 32-bit signed


def _wrap(c: int) -> int:
    c %= _M
    return c - _M if c >= _IMM else c


def applies(t: dt.dtype) -> bool:
    return t.is_int and not t.is_bool and t.bits == 32


def _table(em) -> dict:
    return em.flags.setdefault("affine", {})


def split(em, r: str) -> tuple[str | None, int]:
    return _table(em).get(r, (r, 0))


def record(em, r: str, base: str | None, c: int) -> str:
    if r != base:
        _table(em)[r] = (base, _wrap(c))
    return r


def make(em, base: str | None, c: int) -> str:
    """The register holding base + c: one add, shared within the op that asks (see
    ``elementwise``), made again by a later op rather than kept alive until it."""
    c = _wrap(c)
    if base is not None and c == 0:
        return base
    local = em.flags.setdefault("affine_op", {})
    key = (base, c)
    r = local.get(key)
    if r is None:
        r = em.ins("b32", f"mov.b32 {{d}}, {c};" if base is None else f"add.s32 {{d}}, {base}, {c};")
        local[key] = r
        record(em, r, base, c)
    return r


def elementwise(em, op, fn) -> list:
    """``em.map`` for an op on the pairs, without the emitter's CSE across ops: the offsets
    of a tile computed again for a later store (``o = ...`` repeated) used to be the same
    registers as the first time, alive for the whole kernel between (1023 of the 4232 live
    at once in the slowest random program); an add per element is cheaper than that."""
    em.flags["affine_op"] = {}
    out = em.map(op, fn, cse=False)
    em.flags["affine_op"] = {}
    return out


def _base_op(em, op: str, a: str, b: str) -> str:
    key = ("aff_" + op, a, b)
    r = em.memo_get(key)
    if r is None:
        r = em.ins("b32", f"{op} {{d}}, {a}, {b};")
        em.memo_put(key, r)
    return r


def add(em, a: str, b: str, sub: bool = False) -> str:
    (ba, ca), (bb, cb) = split(em, a), split(em, b)
    c = ca - cb if sub else ca + cb
    if bb is None:
        base = ba
    elif ba is None and not sub:
        base = bb
    elif ba is None:
        base = _neg(em, bb)
    else:
        if not sub and ba > bb:
            ba, bb = bb, ba  # a + b and b + a share one register
        base = _base_op(em, "sub.s32" if sub else "add.s32", ba, bb)
    return make(em, base, c)


def _neg(em, b: str) -> str:
    key = ("aff_neg", b)
    r = em.memo_get(key)
    if r is None:
        r = em.ins("b32", f"neg.s32 {{d}}, {b};")
        em.memo_put(key, r)
    return r


def neg(em, a: str) -> str:
    base, c = split(em, a)
    return make(em, None if base is None else _neg(em, base), -c)


def mul(em, a: str, b: str) -> str | None:
    """a * b when one side is a constant; None otherwise (the caller multiplies)."""
    (ba, ca), (bb, cb) = split(em, a), split(em, b)
    if ba is not None and bb is not None:
        return None
    if ba is None:
        (ba, ca), (bb, cb) = (bb, cb), (ba, ca)
    k = _wrap(cb)
    if ba is None or k == 0:
        return make(em, None, ca * k)
    if k == 1:
        base = ba
    elif k == -1:
        base = _neg(em, ba)
    elif k > 0 and k & (k - 1) == 0:
        base = _base_op(em, "shl.b32", ba, str(k.bit_length() - 1))
    else:
        base = _base_op(em, "mul.lo.s32", ba, str(k))
    return make(em, base, ca * k)


def address(em, p: str, off: str, signed: bool, size: int) -> str:
    """The address p + off*size written as ``reg+imm`` for a load or store (``p`` may be
    such an address itself: ``x + offs - 8`` is two ptr_adds)."""
    p, imm0 = p.split("+", 1) if "+" in p else (p, "0")
    base, c = split(em, off)
    q = p
    if base is not None:
        key = ("aff_ptr", p, base, size, signed)
        q = em.memo_get(key)
        if q is None:
            w = em.ins("b64", f"mul.wide.{'s' if signed else 'u'}32 {{d}}, {base}, {size};")
            q = em.ins("b64", f"add.s64 {{d}}, {p}, {w};")
            em.memo_put(key, q)
    imm = int(imm0) + c * size
    if not imm:
        return q
    if -_IMM <= imm < _IMM:
        return f"{q}+{imm}"
    return em.ins("b64", f"add.s64 {{d}}, {q}, {imm};")


def only_addressed(em, v) -> bool:
    """Whether every reader of ``v`` uses it as the pointer of a load or store, or of a
    ptr_add with a 32-bit offset whose result is only addressed (so its registers may be
    ``reg+imm`` address expressions)."""
    uses = em.flags.get("affine_uses")
    if uses is None:
        uses = em.flags["affine_uses"] = {}
        for op in em.g.body.walk():
            for i, x in enumerate(op.operands):
                uses.setdefault(x, []).append((op, i))
    known = em.flags.setdefault("affine_addressed", {})

    def ok(x) -> bool:
        r = known.get(x)
        if r is None:
            rs = uses.get(x)
            r = bool(rs) and all(
                i == 0 and (op.name in ("load", "store") or (
                    op.name == "ptr_add" and applies(op.operands[1].type.dtype) and ok(op.results[0])))
                for op, i in rs)
            known[x] = r
        return r
    return ok(v)


# -- masks made where they are used ---------------------------------------------------------
#
# ``o < n`` over a tile made every predicate in one run before the first store: a
# thousand predicates live at once per tile (ptxas keeps them in registers, 7 predicate
# registers being all there are). A comparison of 32-bit integers read only as the mask
# of stores is instead made right before each store that reads it, from the operands'
# base + constant, and dies there. Load masks stay as they were: ptxas issues a tile's
# loads together, and interleaving a compare with each made it slower (seed 111 of
# bench_compile_fuzz: 20 s with masks up front, 21 s deferring store masks, 31 s
# deferring load masks too; seed 3: 10, 4.8 and 6.3 s).

def _masks_only(em, v) -> bool:
    only_addressed(em, v)  # builds the use lists
    rs = em.flags["affine_uses"].get(v)
    return bool(rs) and all(op.name == "store" and op.attrs.get("mask") and i == 2 for op, i in rs)


def deferrable(em, op) -> bool:
    return all(applies(v.type.dtype) for v in op.operands) and _masks_only(em, op.results[0])


def defer(em, cmp: str, a: str, b: str) -> str:
    """A stand-in for the predicate ``a <cmp> b``; ``pred`` makes it (never in the PTX)."""
    table = em.flags.setdefault("affine_deferred", {})
    name = f"deferred#{len(table)}"
    table[name] = (cmp, split(em, a), split(em, b))
    return name


def pred(em, m: str | None, also: str | None = None) -> str | None:
    """The predicate register for mask register ``m`` here (a deferred one is made now), and
    with ``also`` when given: a deferred compare takes it into its setp (``setp.lt.and``), one
    instruction per element fewer than a separate ``and.pred``."""
    d = em.flags.get("affine_deferred", {}).get(m) if m is not None else None
    if d is None:
        if m is None or also is None:
            return also if m is None else m
        return em.ins("pred", f"and.pred {{d}}, {also}, {m};")
    cmp, (ba, ca), (bb, cb) = d
    a = em.ins("b32", f"mov.b32 {{d}}, {_wrap(ca)};" if ba is None else f"add.s32 {{d}}, {ba}, {_wrap(ca)};") \
        if ba is None or ca else ba
    b = str(_wrap(cb)) if bb is None else (em.ins("b32", f"add.s32 {{d}}, {bb}, {_wrap(cb)};") if cb else bb)
    if also is None:
        return em.ins("pred", f"setp.{cmp} {{d}}, {a}, {b};")
    c, ty = cmp.split(".")
    return em.ins("pred", f"setp.{c}.and.{ty} {{d}}, {a}, {b}, {also};")

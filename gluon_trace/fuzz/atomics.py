"""The atomics op family (``FuzzConfig.atomics``): a tile already in the program is applied to a
global buffer by one atomic read-modify-write, element by element, and the old values come back.

Two nodes stand for it, so programs stay SSA:

- ``atomic_buf``: the buffer, shape ``(size,)``, no layout. It is a kernel output whose
  contents start random (``runner.make_inputs`` draws them; ``pool``: from a few small values,
  so that a compare-and-swap finds its expected value often); the reference's value of the
  node is the buffer's final contents. It is never an operand of other ops;
- ``atomic``: args ``(buf, val)``, plus ``cmp`` for ``kind == "cas"``, plus the mask tile for
  ``mask == "node"``; attrs ``kind`` (add, max, min, and, or, xor, xchg, cas), ``index`` (the
  address of each element, from its row-major element number ``o``: ``("affine", a, c)``
  ``(o * a + c) % numel`` with ``a`` odd and ``("xor", c)`` ``o ^ c`` are permutations;
  ``("mod", m)`` ``o % m`` and ``("div", k)`` ``o // k`` send several elements to one address)
  and ``mask`` (``"none"``, ``"n_valid"``: ``o < n_valid``, ``"node"``). The node's value is
  the old values, its layout the one the atomic runs in.

The layout is often one that holds elements more than once (:func:`copy_layout`: zero bases and
bases repeating an XOR of others, in registers, lanes and warps): each element must still be
applied once and every copy must get its old value. Repeated addresses only go with the kinds
whose final memory does not depend on the order (integer add, max, min, and, or, xor; float add
is order-dependent in rounding only, which the reference bounds); the old values there depend on
the order and are compared in the interpreter only (see ``evaluate._atomic``).
"""
from __future__ import annotations

from ..layouts import DistributedLinearLayout
from .program import COMPARE, _Builder, _literal, _log2, _permutation, bit_coord

KINDS = ("add", "max", "min", "and", "or", "xor", "xchg", "cas")
_BYTES = {"int1": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2}
ORDER_FREE = ("add", "max", "min", "and", "or", "xor")  # final memory whatever the order


def _dtype_ok(kind: str, d: str) -> bool:
    return kind not in ("and", "or", "xor") or not d.startswith("float") and d != "bfloat16"


def copy_layout(ch, shape, num_warps: int, warp: int, max_values: int | None = None):
    """A linear layout in which registers, lanes or warps hold copies: the element bases (an
    invertible set, some XOR-mixed) go to random hardware bits, and the other bits get a zero
    basis or the XOR of a few element bases (equal to one, or to a combination), wherever they
    are placed. None if no such layout keeps within ``max_values`` registers per thread."""
    bits = [(d, k) for d in range(len(shape)) for k in range(_log2(shape[d]))]
    n = len(bits)
    vecs = [1 << i for i in _permutation(ch, n)]
    for _ in range(ch.int(0, 2) if n > 1 else 0):
        i, j = ch.int(0, n - 1), ch.int(0, n - 1)
        if i != j:
            vecs[i] ^= vecs[j]
    fresh = list(vecs)
    lanes, warps = [], []
    for want, out in ((_log2(warp), lanes), (_log2(num_warps), warps)):
        for _ in range(want):
            out.append(vecs.pop(ch.int(0, len(vecs) - 1)) if vecs and not ch.chance(30) else None)
    regs = list(vecs)
    room = 3 if max_values is None else _log2(max_values) - len(regs)
    if room < 0:
        return None
    for _ in range(ch.int(0, min(room, 2))):
        regs.insert(ch.int(0, len(regs)), None)

    def fill(b):
        if b is not None:
            return b
        if not fresh or ch.chance(40):
            return 0
        v = 0
        for p in {ch.int(0, len(fresh) - 1) for _ in range(ch.int(1, 3))}:
            v ^= fresh[p]
        return v

    regs, lanes, warps = ([bit_coord(bits, len(shape), fill(b)) for b in bs] for bs in (regs, lanes, warps))
    return DistributedLinearLayout(regs, lanes, warps, [], shape=list(shape))


def _index(ch, numel: int, unique: bool):
    """(spec, buffer size): where each element goes, see the module docstring."""
    if unique or numel == 1:
        if ch.chance(50):
            return ("affine", 2 * ch.int(0, 3) + 1, ch.int(0, numel - 1)), numel
        return ("xor", ch.int(0, numel - 1)), numel
    if ch.chance(50):
        m = ch.int(1, max(1, min(numel - 1, 16))) if ch.chance(60) else ch.int(1, numel - 1)
        return ("mod", m), m
    k = ch.int(2, 5) if ch.chance(50) else 1 << ch.int(1, max(1, _log2(numel)))
    return ("div", k), -(-numel // k)


def _compare_tile(b: _Builder, val, dtype: str):
    """What a compare-and-swap expects: ``x & 3`` of a tile like ``val`` (negated, sometimes, for
    floats: -0.0 beside the buffer's 0.0), values the pooled buffer holds often."""
    x = b.same_tile(val)
    if x.dtype != "int32":
        x = b.add("cast", (x,), "int32", x.shape, x.layout, to="int32")
    m = b.add("binary", (x,), "int32", x.shape, x.layout, fn="and", literal=3)
    c = b.add("cast", (m,), dtype, m.shape, m.layout, to=dtype)
    if (dtype.startswith("float") or dtype == "bfloat16") and b.ch.chance(40):
        c = b.add("unary", (c,), dtype, c.shape, c.layout, fn="neg")
    return c


def _mask(b: _Builder, val):
    """(kind, extra args): no mask, the run-time bound, or an int1 tile of the program."""
    pick = b.ch.int(0, 2)
    if pick == 0:
        return "none", ()
    if pick == 1:
        return "n_valid", ()
    c = b.pick(lambda n: n.shape == val.shape and n.dtype == "int1")
    if c is None or b.ch.chance(50):
        x = b.same_tile(val)
        c = b.add("binary", (x,), "int1", x.shape, x.layout, fn=b.ch.choice(COMPARE),
                  literal=_literal(b.ch, x.dtype))
    return "node", (b.convert(c, val.layout),)


def op_atomics(b: _Builder) -> None:
    t = b.pick(lambda n: n.shape)
    if t is None:
        return
    kind = b.ch.choice(KINDS)
    dtype = t.dtype
    if not _dtype_ok(kind, dtype):
        allowed = [d for d in b.cfg.dtypes if _dtype_ok(kind, d)]
        if not allowed:
            return
        dtype = b.ch.choice(allowed)
    layout = None
    if b.ch.chance(65):
        layout = copy_layout(b.ch, t.shape, b.num_warps, b.cfg.warp_size, b.cfg.max_values_per_thread)
    layout = layout or b.layout(t.shape)
    if t.dtype != dtype:
        t = b.add("cast", (t,), dtype, t.shape, t.layout, to=dtype)
    val = b.convert(t, layout)
    unique = kind not in ORDER_FREE or b.ch.chance(45)
    index, size = _index(b.ch, t.numel, unique)
    size += b.ch.int(0, 2)  # elements no atomic reaches must keep their contents
    # 8- and 16-bit atomics compare-and-swap the aligned 32-bit word around the element: an
    # allocation always holds that word, the simulators' exact-size buffers only if sized so
    per_word = max(1, 4 // _BYTES.get(dtype, 4))
    size = -(-size // per_word) * per_word
    buf = b.add("atomic_buf", (), dtype, (size,), None, pool=kind == "cas")
    args = [buf, val]
    mask = "none"
    if kind == "cas":
        args.append(_compare_tile(b, val, dtype))
    else:
        mask, extra = _mask(b, val)
        args += extra
    old = b.add("atomic", tuple(args), dtype, t.shape, layout, kind=kind, index=index, mask=mask)
    if b.ch.chance(40):  # read every copy's old value: they meet in another layout
        b.add("convert", (old,), dtype, old.shape, b.layout(old.shape))

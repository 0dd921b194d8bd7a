"""The op kinds the generator draws from: each picks operands among earlier nodes and
appends the node(s) it makes. Result dtypes follow the promotion rules documented in
gluon_trace/dtypes.py, restated here (not imported) so the fuzzer checks them."""
from __future__ import annotations

from ..layouts import BlockedLayout, SliceLayout, join_layout, permute_layout, reshape_layout, split_layout
from .atomics import op_atomics
from .smem import op_shared
from .program import (COMPARE, FLOAT_DTYPES, UNARY_FLOAT, _Builder, _literal, _log2,
                      blocked_layout)

_BITS = {"int1": 1, "int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16,
         "uint32": 32, "uint64": 64, "float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}


def is_float(d: str) -> bool:
    return d in FLOAT_DTYPES


def is_bool(d: str) -> bool:
    return d == "int1"


def promote(a: str, b: str) -> str:
    """What ``a <op> b`` computes in (dtypes.py: equal; bool yields; float beats int; the
    wider float, f16 with bf16 gives f32; the wider int, unsigned at equal width)."""
    if a == b:
        return a
    if is_bool(a) or is_bool(b):
        return b if is_bool(a) else a
    if is_float(a) and is_float(b):
        return "float32" if _BITS[a] == _BITS[b] else max(a, b, key=_BITS.get)
    if is_float(a) or is_float(b):
        return a if is_float(a) else b
    if _BITS[a] != _BITS[b]:
        return max(a, b, key=_BITS.get)
    return a if a.startswith("uint") else b


# ops that compute int1 operands in int32, as Python does with bool (language/tensor.py)
BOOL_AS_INT = ("add", "sub", "mul", "floordiv", "mod", "shl", "shr", "neg", "abs")


def literal_dtype(value, other: str) -> str:
    """A Python literal is weak: it takes the tile's type, but a float beside an int is f32
    and an int beside a bool is int32."""
    if isinstance(value, float) and not is_float(other):
        return "float32"
    if isinstance(value, int) and not isinstance(value, bool) and is_bool(other):
        return "int32"
    return other


def binary_dtype(fn: str, a: str, b: str) -> str:
    if fn in COMPARE:
        return "int1"
    t = promote(a, b)
    return "int32" if is_bool(t) and fn in BOOL_AS_INT else t


def binary_ok(fn: str, t: str, cfg) -> bool:
    """May ``fn`` compute in dtype ``t`` (the promoted operand type)?"""
    if fn in COMPARE:
        return True
    if is_bool(t):
        return fn in ("and", "or", "xor") or (cfg.int1_arithmetic and fn != "truediv")
    if fn in ("and", "or", "xor", "shl", "shr"):
        return not is_float(t)
    if fn == "truediv":
        return is_float(t)
    return True


# ------------------------------------------------------------------------------ op kinds
def _operand(b: _Builder, a, fn):
    """The right operand of ``a fn _``: a literal or a tile like ``a``, with ``fn`` legal on
    the promoted type; ints divided by something are kept off zero."""
    cfg = b.cfg
    if b.ch.chance(25) or not a.shape:
        lit = _literal(b.ch, a.dtype if b.ch.chance(80) else "float32")
        t = binary_dtype(fn, a.dtype, literal_dtype(lit, a.dtype))
        if binary_ok(fn, promote(a.dtype, literal_dtype(lit, a.dtype)), cfg) and \
                not (isinstance(lit, float) and not is_float(a.dtype) and fn in ("and", "or", "xor", "shl", "shr")):
            return lit, t
    other = b.same_tile(a, lambda d: binary_ok(fn, promote(a.dtype, d), cfg)) if a.shape else None
    if other is None:
        return None, None
    t = binary_dtype(fn, a.dtype, other.dtype)
    if fn in ("floordiv", "mod") and not is_float(promote(a.dtype, other.dtype)) and \
            not is_bool(other.dtype) and b.ch.chance(70):
        other = b.add("nonzero", (other,), other.dtype, other.shape, other.layout)
    return other, t


def op_binary(b: _Builder) -> None:
    a = b.pick()
    fns = [f for f in ("add", "sub", "mul", "maximum", "minimum", "truediv", "floordiv", "mod",
                       "and", "or", "xor", "shl", "shr") + COMPARE
           if binary_ok(f, a.dtype, b.cfg) or (f == "truediv" and not is_bool(a.dtype))]
    fn = b.ch.choice(fns)
    if fn == "truediv" and not is_float(a.dtype):
        a = b.add("cast", (a,), "float32", a.shape, a.layout, to="float32")
    other, t = _operand(b, a, fn)
    if other is None:
        return
    if isinstance(other, type(a)):
        shape, layout = (a.shape, a.layout) if a.shape else (other.shape, other.layout)
        b.add("binary", (a, other), t, shape, layout, fn=fn)
    else:
        b.add("binary", (a,), t, a.shape, a.layout, fn=fn, literal=other)


def op_unary(b: _Builder) -> None:
    a = b.pick()
    fns = ["not"] if is_bool(a.dtype) and not b.cfg.int1_arithmetic else ["neg", "abs", "not"]
    if is_float(a.dtype):
        fns = ["neg", "abs"] + (list(UNARY_FLOAT) if b.cfg.math else [])
    fn = b.ch.choice(fns)
    t = "int32" if is_bool(a.dtype) and fn in BOOL_AS_INT else a.dtype
    b.add("unary", (a,), t, a.shape, a.layout, fn=fn)


def op_cast(b: _Builder) -> None:
    a = b.pick()
    to = b.dtype()
    b.add("cast", (a,), to, a.shape, a.layout, to=to)


def op_where(b: _Builder) -> None:
    a = b.pick(lambda n: n.shape)
    if a is None:
        return
    c = b.pick(lambda n: n.shape == a.shape and n.dtype == "int1")
    if c is None or b.ch.chance(50):
        x = b.same_tile(a)
        lit = _literal(b.ch, x.dtype)
        c = b.add("binary", (x,), "int1", x.shape, x.layout, fn=b.ch.choice(COMPARE), literal=lit)
    c = b.convert(c, a.layout)
    y = b.same_tile(a)
    b.add("where", (c, a, y), promote(a.dtype, y.dtype), a.shape, a.layout)


def op_fma(b: _Builder) -> None:
    a = b.pick(lambda n: is_float(n.dtype) and n.shape)
    if a is None:
        return
    y = b.same_tile(a, is_float)
    z = b.same_tile(a, is_float)
    b.add("fma", (a, y, z), promote(promote(a.dtype, y.dtype), z.dtype), a.shape, a.layout)


def op_dot_fma(b: _Builder) -> None:
    """acc + A @ B: the accumulator in a BlockedLayout, A [M, K] and B [K, N] of its dtype in
    the DotOperandLayouts over it (tiles of that shape converted, or loaded fresh)."""
    from ..mma_layouts import DotOperandLayout
    acc = b.pick(lambda n: n.rank == 2 and not is_bool(n.dtype))
    if acc is None:
        return
    m, n = acc.shape
    k = 1 << b.ch.int(0, 3)
    lay = acc.layout if isinstance(acc.layout, BlockedLayout) else \
        blocked_layout(b.ch, acc.shape, b.num_warps, b.cfg.warp_size)
    acc = b.convert(acc, lay)
    ops = []
    for i, shape in ((0, (m, k)), (1, (k, n))):
        x = b.pick(lambda c: c.shape == shape and c.dtype == acc.dtype)
        if x is None or b.ch.chance(40):
            x = b.load(shape, acc.dtype)
        ops.append(b.convert(x, DotOperandLayout(i, lay, k_width=1)))
    b.add("dot_fma", (ops[0], ops[1], acc), acc.dtype, acc.shape, lay)


def _sum_dtype(d: str) -> str:
    return "int32" if is_bool(d) or (not is_float(d) and _BITS[d] < 32) else d


def op_reduce(b: _Builder) -> None:
    a = b.pick(lambda n: n.shape)
    if a is None:
        return
    kinds = ["sum", "xor_sum"] if is_bool(a.dtype) else \
        ["sum", "max", "min", "argmax", "argmin"] + ([] if is_float(a.dtype) else ["xor_sum"])
    kind = b.ch.choice(kinds)
    axis = b.ch.int(0, a.rank - 1)
    keep = b.ch.chance(30)
    dtype = {"sum": _sum_dtype(a.dtype), "argmax": "int32", "argmin": "int32"}.get(kind, a.dtype)
    shape = a.shape[:axis] + ((1,) if keep else ()) + a.shape[axis + 1:]
    layout = a.layout if keep else (SliceLayout(axis, a.layout) if a.rank > 1 else None)
    b.add("reduce", (a,), dtype, shape, layout, kind=kind, axis=axis, keep=keep)


def op_scan(b: _Builder) -> None:
    a = b.pick(lambda n: n.shape and not is_bool(n.dtype))
    if a is None:
        return
    kind = b.ch.choice(["cumsum", "max_scan"])
    dtype = _sum_dtype(a.dtype) if kind == "cumsum" else a.dtype
    b.add("scan", (a,), dtype, a.shape, a.layout, kind=kind, axis=b.ch.int(0, a.rank - 1),
          reverse=b.ch.chance(30))


def op_convert(b: _Builder) -> None:
    a = b.pick(lambda n: n.shape)
    if a is not None:
        b.add("convert", (a,), a.dtype, a.shape, b.layout(a.shape))


def op_expand(b: _Builder) -> None:
    a = b.pick(lambda n: n.shape and n.rank < b.cfg.max_rank)
    if a is None:
        return
    axis = b.ch.int(0, a.rank)
    room = _log2(b.cfg.max_numel // a.numel)
    size = 1 << b.ch.int(0, min(room, 3))
    shape = a.shape[:axis] + (size,) + a.shape[axis:]
    parent = b.layout(shape)
    s = b.convert(a, SliceLayout(axis, parent))
    b.add("expand", (s,), a.dtype, shape, parent, axis=axis)


def op_reshape(b: _Builder) -> None:
    a = b.pick(lambda n: n.shape)
    if a is None:
        return
    bits = _log2(a.numel)
    rank = b.ch.int(1, b.cfg.max_rank)
    parts = [0] * rank
    for _ in range(bits):
        parts[b.ch.int(0, rank - 1)] += 1
    shape = tuple(1 << p for p in parts)
    layout = reshape_layout(a.layout, a.shape, shape, b.num_warps, b.cfg.warp_size)
    b.add("reshape", (a,), a.dtype, shape, layout, new_shape=shape)


def op_permute(b: _Builder) -> None:
    a = b.pick(lambda n: n.rank >= 2)
    if a is None:
        return
    from .program import _permutation
    dims = tuple(_permutation(b.ch, a.rank))
    layout = permute_layout(a.layout, a.shape, dims, b.num_warps, b.cfg.warp_size)
    b.add("permute", (a,), a.dtype, tuple(a.shape[d] for d in dims), layout, dims=dims)



def op_split(b: _Builder) -> None:
    """One half of gl.split: of a tile whose last dimension is 2, or of one reshaped to that."""
    a = b.pick(lambda n: n.rank >= 2 and n.shape[-1] == 2)
    if a is None:
        src = b.pick(lambda n: n.shape and n.numel >= 4)
        if src is None:
            return
        shape = (src.numel // 2, 2)
        a = b.add("reshape", (src,), src.dtype, shape,
                  reshape_layout(src.layout, src.shape, shape, b.num_warps, b.cfg.warp_size), new_shape=shape)
    layout = split_layout(a.layout, a.shape, b.num_warps, b.cfg.warp_size)
    b.add("split", (a,), a.dtype, a.shape[:-1], layout, half=b.ch.int(0, 1))


def op_join(b: _Builder) -> None:
    a = b.pick(lambda n: n.shape and n.rank < b.cfg.max_rank and 2 * n.numel <= b.cfg.max_numel)
    if a is None:
        return
    x = b.same_tile(a)
    if x.dtype != a.dtype:
        x = b.add("cast", (x,), a.dtype, x.shape, x.layout, to=a.dtype)
    b.add("join", (a, x), a.dtype, tuple(a.shape) + (2,),
          join_layout(a.layout, a.shape, b.num_warps, b.cfg.warp_size))

_CARRY_FNS = ("add", "mul", "maximum", "sub", "xor")


def _step(b: _Builder, acc, allow_index: bool):
    """One ``acc = (acc fn x).to(acc.dtype)`` of a loop or branch body."""
    fns = [f for f in _CARRY_FNS if binary_ok(f, acc.dtype, b.cfg)]
    if not fns:
        return None
    fn = b.ch.choice(fns)
    pick = b.ch.int(0, 2)
    if pick == 0 or not acc.shape:
        return (fn, "lit", _literal(b.ch, acc.dtype))
    if pick == 1 and allow_index and not is_bool(acc.dtype) and fn != "xor" or \
            (pick == 1 and allow_index and fn == "xor" and not is_float(acc.dtype)):
        return (fn, "i", None)
    x = b.same_tile(acc)
    if x.dtype != acc.dtype:
        x = b.add("cast", (x,), acc.dtype, x.shape, x.layout, to=acc.dtype)
    if fn == "xor" and is_float(x.dtype):
        return None
    return (fn, "node", x.name)


def op_loop(b: _Builder) -> None:
    acc = b.pick()
    steps = [s for s in (_step(b, acc, True) for _ in range(b.ch.int(1, 2))) if s]
    if steps:
        b.add("loop", (acc,), acc.dtype, acc.shape, acc.layout, steps=steps)


def op_branch(b: _Builder) -> None:
    acc = b.pick()
    then = _step(b, acc, False)
    other = _step(b, acc, False) if b.ch.chance(60) else None
    if then:
        b.add("branch", (acc,), acc.dtype, acc.shape, acc.layout, then=then, other=other)


OPS = {
    "binary": (lambda c: True, op_binary),
    "unary": (lambda c: True, op_unary),
    "cast": (lambda c: True, op_cast),
    "reduce": (lambda c: True, op_reduce),
    "where": (lambda c: True, op_where),
    "scan": (lambda c: True, op_scan),
    "convert": (lambda c: True, op_convert),
    "expand": (lambda c: c.max_rank > 1, op_expand),
    "reshape": (lambda c: True, op_reshape),
    "permute": (lambda c: c.max_rank > 1, op_permute),
    "fma": (lambda c: True, op_fma),
    "dot_fma": (lambda c: c.dot_fma, op_dot_fma),
    "split": (lambda c: c.split_join, op_split),
    "join": (lambda c: c.split_join and c.max_rank > 1, op_join),
    "loop": (lambda c: c.loops, op_loop),
    "branch": (lambda c: c.branches, op_branch),
    "shared": (lambda c: c.shared, op_shared),
    "atomics": (lambda c: c.atomics, op_atomics),
}

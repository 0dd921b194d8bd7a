"""The op table: the one place an IR op is defined.

Each :class:`OpDef` gives the op's operand count, its attributes and its type rule,
which checks the operand types and returns the result types or raises a
:class:`TraceError` naming the user's line. The tracer calls the rule when it
records an op; the verifier calls it again on a finished graph. Backends register
one lowering rule per op name; ``tests/test_op_coverage.py`` checks that each
backend covers every op here or says why not.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import dtypes as dt
from .errors import LayoutError, TraceError
from .ir import Type


@dataclass(frozen=True)
class OpDef:
    name: str
    infer: Callable  # (ctx, operand types, attrs, regions) -> list[Type]
    elementwise: bool = False
    has_side_effects: bool = False
    doc: str = ""
    # whether operands may be shared-memory / TMA descriptors (memory ops); other ops refuse
    # them with an error saying to load the buffer first
    memory_operands: bool = False


OPS: dict[str, OpDef] = {}


class Ctx:
    """What a type rule may need beyond the operands: the launch shape and the source line."""

    def __init__(self, num_warps: int, threads_per_warp: int, loc=None, opname: str = "",
                 target: str | None = None):
        self.opname = opname
        self.num_warps = num_warps
        self.threads_per_warp = threads_per_warp
        self.loc = loc
        self.target = target

    def error(self, msg: str, cls=TraceError, notes=()):
        return cls(msg, self.loc, notes=notes)

    def linear(self, layout, shape):
        return layout.to_linear(tuple(shape), self.num_warps, self.threads_per_warp)

    def same_layout(self, a, b, shape) -> bool:
        if a == b:
            return True
        if a is None or b is None:
            return False
        return self.linear(a, shape).equivalent(self.linear(b, shape))

    def check_same_tiles(self, opname: str, types: list[Type]) -> None:
        """Elementwise operands must agree exactly: shape, then layout (never silently converted)."""
        first = types[0]
        for t in types[1:]:
            if t.shape != first.shape:
                raise self.error(f"{opname}: shapes {list(first.shape)} and {list(t.shape)} differ; "
                                 "broadcast them first (gl.broadcast or x[:, None])")
            if not first.is_scalar and not self.same_layout(first.layout, t.layout, first.shape):
                raise self.error(
                    f"{opname}: operand layouts differ:\n    {first.layout!r}\n    {t.layout!r}",
                    LayoutError,
                    notes=("convert one with gl.convert_layout(x, layout) so both match",))


def define(name, infer, **kw):
    OPS[name] = OpDef(name, infer, **kw)


# -- elementwise ------------------------------------------------------------------------

def _same(kinds: str | None = None):
    def rule(ctx: Ctx, ts, attrs, regions):
        ctx.check_same_tiles(ctx.opname, ts)
        for t in ts:
            if t.dtype != ts[0].dtype:
                raise ctx.error(f"operand dtypes {ts[0].dtype} and {t.dtype} differ")
            if kinds == "int" and not t.dtype.is_int:
                raise ctx.error(f"this operator needs integer operands, got {t.dtype}; "
                                "bitwise ops and shifts are not defined on floats "
                                "(use x.to(gl.int32, bitcast=True) to work on the bits)")
            if kinds == "float" and not t.dtype.is_floating:
                raise ctx.error(f"this function needs a floating-point operand, got {t.dtype}; "
                                "convert first with x.to(gl.float32)")
            if kinds != "ptr" and t.dtype.is_ptr:
                raise ctx.error("pointers take part only in ptr + int and comparisons, not this op")
            if t.dtype.is_fp8:
                raise ctx.error(f"{t.dtype} holds data for MMAs and memory, not arithmetic; convert with "
                                ".to(gl.float16) or .to(gl.float32) first")
        return [ts[0]]
    return rule


def _compare(ctx, ts, attrs, regions):
    ctx.check_same_tiles("comparison", ts)
    if ts[0].dtype.is_fp8:
        raise ctx.error(f"{ts[0].dtype} values are compared after .to(gl.float32)")
    if ts[0].dtype != ts[1].dtype:
        raise ctx.error(f"comparison of {ts[0].dtype} with {ts[1].dtype}")
    return [ts[0].with_dtype(dt.int1)]


BINARY = ("add", "sub", "mul", "div", "floordiv", "mod", "maximum", "minimum",
          "and", "or", "xor", "shl", "shr")
INT_ONLY = {"and", "or", "xor", "shl", "shr", "floordiv"}
FLOAT_ONLY = {"div"}
COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
UNARY = ("neg", "not", "abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos",
         "erf", "floor", "ceil")
UNARY_FLOAT = {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "floor", "ceil"}

for _n in BINARY:
    define(_n, _same("int" if _n in INT_ONLY else "float" if _n in FLOAT_ONLY else None),
           elementwise=True)
for _n in COMPARE:
    define(_n, _compare, elementwise=True)
for _n in UNARY:
    define(_n, _same("float" if _n in UNARY_FLOAT else "int" if _n == "not" else None),
           elementwise=True)
define("fma", _same("float"), elementwise=True)


def _ptr_add(ctx, ts, attrs, regions):
    ctx.check_same_tiles("pointer arithmetic", ts)
    p, off = ts
    if not p.dtype.is_ptr or not off.dtype.is_int or off.dtype.is_bool:
        raise ctx.error(f"pointer arithmetic needs a pointer and an integer, got {p.dtype} and {off.dtype}")
    return [p]


define("ptr_add", _ptr_add, elementwise=True, doc="pointer + integer offset in elements")


def _where(ctx, ts, attrs, regions):
    c, a, b = ts
    ctx.check_same_tiles("where", ts)
    if not c.dtype.is_bool:
        raise ctx.error(f"gl.where needs an int1 condition, got {c.dtype}")
    if a.dtype != b.dtype:
        raise ctx.error(f"gl.where branches have dtypes {a.dtype} and {b.dtype}")
    return [a]


define("where", _where, elementwise=True)


def _cast(ctx, ts, attrs, regions):
    (t,) = ts
    to = attrs["dtype"]
    if attrs.get("bitcast"):
        if to.bits != t.dtype.bits:
            raise ctx.error(f"bitcast from {t.dtype} ({t.dtype.bits} bits) to {to} ({to.bits} bits)")
    elif t.dtype.is_ptr and not (to.is_int and to.bits == 64) and not to.is_ptr:
        raise ctx.error(f"a pointer converts only to int64/uint64 or another pointer, not {to}")
    return [t.with_dtype(to)]


define("cast", _cast, elementwise=True)


def _hint(ctx, ts, attrs, regions):
    return [ts[0]]


define("hint", _hint, doc="multiple_of / max_contiguous facts about a value; checked by the interpreter")


# -- creation ---------------------------------------------------------------------------

def _const(ctx, ts, attrs, regions):
    return [Type(attrs["dtype"])]


def _pid(ctx, ts, attrs, regions):
    if attrs["axis"] not in (0, 1, 2):
        raise ctx.error(f"program axis must be 0, 1 or 2, got {attrs['axis']}")
    return [Type(dt.int32)]


def _timer(ctx, ts, attrs, regions):
    if attrs["clock"] not in ("globaltimer", "clock64"):
        raise ctx.error(f"no clock named {attrs['clock']!r}")
    return [Type(dt.int64)]


def _arange(ctx, ts, attrs, regions):
    start, end, layout = attrs["start"], attrs["end"], attrs["layout"]
    n = end - start
    if n <= 0 or n & (n - 1):
        raise ctx.error(f"gl.arange({start}, {end}) has {n} elements; the count must be a positive "
                        "power of two (pad and mask instead)")
    _check_layout(ctx, layout, (n,))
    return [Type(dt.int32, (n,), layout)]


def _check_layout(ctx, layout, shape):
    if layout is None:
        raise ctx.error("a tile needs a layout: pass layout=gl.BlockedLayout(...)", LayoutError)
    from .layouts import DistributedLayout
    if not isinstance(layout, DistributedLayout):
        kind = "a shared-memory layout" if hasattr(layout, "offsets") else "not a distributed layout"
        raise ctx.error(f"{layout!r} is {kind}; register tiles need a distributed layout "
                        "(gl.BlockedLayout, gl.SliceLayout, an MMA layout, ...)", LayoutError)
    for s in shape:
        if s <= 0 or s & (s - 1):
            raise ctx.error(f"tile shape {list(shape)} must have power-of-two dimensions")
    layout.verify(tuple(shape), ctx.num_warps, ctx.threads_per_warp, loc=ctx.loc)


def _splat(ctx, ts, attrs, regions):
    (t,) = ts
    if not t.is_scalar:
        raise ctx.error("splat takes a scalar")
    _check_layout(ctx, attrs["layout"], attrs["shape"])
    return [Type(t.dtype, tuple(attrs["shape"]), attrs["layout"])]


define("const", _const)
define("program_id", _pid)
define("num_programs", _pid)
# a clock read: never merged with another read nor moved across other side effects
define("read_timer", _timer, has_side_effects=True)
define("arange", _arange)
define("splat", _splat)


# -- shape and layout -------------------------------------------------------------------

def _broadcast(ctx, ts, attrs, regions):
    (t,) = ts
    shape = tuple(attrs["shape"])
    if len(shape) != len(t.shape) or any(a != b and a != 1 for a, b in zip(t.shape, shape)):
        raise ctx.error(f"cannot broadcast shape {list(t.shape)} to {list(shape)}")
    _check_layout(ctx, t.layout, shape)
    return [Type(t.dtype, shape, t.layout)]


def _expand_dims(ctx, ts, attrs, regions):
    (t,) = ts
    axis = attrs["axis"]
    from .layouts import SliceLayout
    lay = t.layout
    if not isinstance(lay, SliceLayout) or lay.dim != axis:
        raise ctx.error(
            f"expand_dims(axis={axis}) needs a tile in SliceLayout({axis}, parent), got {lay!r}",
            LayoutError,
            notes=(f"convert first: gl.convert_layout(x, gl.SliceLayout({axis}, parent))",))
    shape = t.shape[:axis] + (1,) + t.shape[axis:]
    _check_layout(ctx, lay.parent, shape)
    return [Type(t.dtype, shape, lay.parent)]


def _convert(ctx, ts, attrs, regions):
    (t,) = ts
    _check_layout(ctx, attrs["layout"], t.shape)
    return [Type(t.dtype, t.shape, attrs["layout"])]


def _reshape(ctx, ts, attrs, regions):
    (t,) = ts
    shape = tuple(attrs["shape"])
    n = 1
    for s in shape:
        n *= s
    if n != t.numel:
        raise ctx.error(f"cannot reshape {list(t.shape)} ({t.numel} elements) to {list(shape)} ({n})")
    _check_layout(ctx, attrs["layout"], shape)
    return [Type(t.dtype, shape, attrs["layout"])]


def _permute(ctx, ts, attrs, regions):
    (t,) = ts
    dims = tuple(attrs["dims"])
    if sorted(dims) != list(range(len(t.shape))):
        raise ctx.error(f"permute dims {list(dims)} are not a permutation of {len(t.shape)} axes")
    shape = tuple(t.shape[d] for d in dims)
    _check_layout(ctx, attrs["layout"], shape)
    return [Type(t.dtype, shape, attrs["layout"])]


def _split(ctx, ts, attrs, regions):
    (t,) = ts
    if len(t.shape) < 2 or t.shape[-1] != 2:
        raise ctx.error(f"split needs a tile of 2 or more dimensions whose last is 2, got shape {list(t.shape)}",
                        notes=("reshape first, e.g. x.reshape([M, 2, N // 2]).permute((0, 2, 1)).split() "
                               "for the two column halves of an [M, N] tile",))
    _check_layout(ctx, attrs["layout"], t.shape[:-1])
    half = Type(t.dtype, t.shape[:-1], attrs["layout"])
    return [half, half]


def _join(ctx, ts, attrs, regions):
    a, b = ts
    if a != b:
        raise ctx.error(f"join needs two tiles of one shape, dtype and layout, got {a} and {b}")
    shape = tuple(a.shape) + (2,)
    _check_layout(ctx, attrs["layout"], shape)
    return [Type(a.dtype, shape, attrs["layout"])]


define("broadcast", _broadcast)
define("expand_dims", _expand_dims)
define("convert_layout", _convert)
define("reshape", _reshape)
define("permute", _permute)
define("split", _split, doc="(x[..., 0], x[..., 1]) of a tile whose last dimension is 2")
define("join", _join, doc="a tile with a new last dimension of 2 holding (a, b)")


# -- memory -----------------------------------------------------------------------------

def _mask_other(ctx, ts, attrs, ptr_t, start):
    i = start
    if attrs.get("mask"):
        m = ts[i]
        i += 1
        if not m.dtype.is_bool:
            raise ctx.error(f"mask must be int1 (a comparison), got {m.dtype}")
        ctx.check_same_tiles("mask", [ptr_t, m])
    return i


def _load(ctx, ts, attrs, regions):
    p = ts[0]
    if not p.dtype.is_ptr:
        raise ctx.error(f"gl.load needs a pointer, got {p.dtype}")
    i = _mask_other(ctx, ts, attrs, p, 1)
    if attrs.get("other"):
        o = ts[i]
        ctx.check_same_tiles("other", [p, o])
        if o.dtype != p.dtype.element:
            raise ctx.error(f"other has dtype {o.dtype}, the pointer loads {p.dtype.element}")
    return [Type(p.dtype.element, p.shape, p.layout)]


def _store(ctx, ts, attrs, regions):
    p, v = ts[0], ts[1]
    if not p.dtype.is_ptr:
        raise ctx.error(f"gl.store needs a pointer to store to, got a value of type {p.dtype}")
    ctx.check_same_tiles("store", [p, v])
    if v.dtype != p.dtype.element:
        raise ctx.error(f"storing {v.dtype} through {p.dtype}")
    _mask_other(ctx, ts, attrs, p, 2)
    return []


ATOMIC_KINDS = ("add", "max", "min", "xchg", "and", "or", "xor")


def _atomic(ctx, ts, attrs, regions):
    p, v = ts[0], ts[1]
    if not p.dtype.is_ptr:
        raise ctx.error(f"atomics need a pointer, got {p.dtype}")
    ctx.check_same_tiles("atomic", [p, v])
    if v.dtype != p.dtype.element:
        raise ctx.error(f"atomic value {v.dtype} does not match the pointer's {p.dtype.element}")
    if attrs["kind"] not in ATOMIC_KINDS:
        raise ctx.error(f"unknown atomic {attrs['kind']}")
    if attrs["kind"] in ("and", "or", "xor") and not v.dtype.is_int:
        raise ctx.error(f"atomic_{attrs['kind']} needs integers, got {v.dtype}")
    _mask_other(ctx, ts, attrs, p, 2)
    return [v]


def _cas(ctx, ts, attrs, regions):
    p, c, v = ts
    if not p.dtype.is_ptr:
        raise ctx.error(f"atomic_cas needs a pointer, got {p.dtype}")
    ctx.check_same_tiles("atomic_cas", ts)
    if c.dtype != p.dtype.element or v.dtype != p.dtype.element:
        raise ctx.error("atomic_cas compare and value must have the pointer's element type")
    return [v]


define("load", _load)
define("store", _store, has_side_effects=True)
define("atomic_rmw", _atomic, has_side_effects=True)
define("atomic_cas", _cas, has_side_effects=True)


def _print(ctx, ts, attrs, regions):
    return []


define("print", _print, has_side_effects=True)


# -- regions ----------------------------------------------------------------------------

def _yield_types(region):
    term = region.ops[-1] if region.ops else None
    if term is None or term.name != "yield":
        raise TraceError("region does not end in yield")
    return [v.type for v in term.operands]


def _reduce(ctx, ts, attrs, regions):
    axis = attrs["axis"]
    t0 = ts[0]
    if not (0 <= axis < len(t0.shape)):
        raise ctx.error(f"reduction axis {axis} is out of range for a {len(t0.shape)}-D tile "
                        f"of shape {list(t0.shape)}")
    ctx.check_same_tiles("reduce", list(ts))
    (body,) = regions
    ys = _yield_types(body)
    if [y.dtype for y in ys] != [t.dtype for t in ts]:
        raise ctx.error("the combine function must return values of the input dtypes "
                        f"{[str(t.dtype) for t in ts]}, got {[str(y.dtype) for y in ys]}")
    from .layouts import SliceLayout
    shape = t0.shape[:axis] + t0.shape[axis + 1:]
    lay = SliceLayout(axis, t0.layout) if shape else None
    return [Type(t.dtype, shape, lay) for t in ts]


def _scan(ctx, ts, attrs, regions):
    axis = attrs["axis"]
    if not (0 <= axis < len(ts[0].shape)):
        raise ctx.error(f"scan axis {axis} is out of range for shape {list(ts[0].shape)}")
    ctx.check_same_tiles("scan", list(ts))
    ys = _yield_types(regions[0])
    if [y.dtype for y in ys] != [t.dtype for t in ts]:
        raise ctx.error("the combine function must return values of the input dtypes")
    return list(ts)


def _for(ctx, ts, attrs, regions):
    for t in ts[:3]:
        if not t.is_scalar or not t.dtype.is_int or t.dtype.is_bool:
            raise ctx.error(f"gl.range bounds must be integer scalars, got {t}")
    inits = ts[3:]
    ys = _yield_types(regions[0])
    if ys != list(inits):
        raise ctx.error("loop body yields types that differ from the carried values' types")
    return list(inits)


def _if(ctx, ts, attrs, regions):
    (c,) = ts
    if not c.is_scalar or not c.dtype.is_bool:
        raise ctx.error(f"gl.if_ needs a scalar int1 condition, got {c}; for tiles use gl.where")
    then_t, else_t = (_yield_types(r) for r in regions)
    if then_t != else_t:
        raise ctx.error("the branches of gl.if_ give values of different types")
    return then_t


def _yield(ctx, ts, attrs, regions):
    return []


define("reduce", _reduce)
define("scan", _scan)
# control flow carries shared-memory and TMA descriptors like any other value
define("for", _for, has_side_effects=True, memory_operands=True)
define("if", _if, has_side_effects=True, memory_operands=True)
define("yield", _yield, memory_operands=True)


# the memory-hierarchy and tensor-core ops live beside this table, registered into it
from . import ops_memory, ops_mma  # noqa: E402,F401

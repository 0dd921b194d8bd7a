"""The gl.* functions kernels call: creation, memory, math, reductions, shape, atomics."""
from __future__ import annotations

import builtins

from .. import dtypes as dt
from ..errors import TraceError, TraceTypeError, user_location
from ..ir import Block, Type
from ..layouts import SliceLayout
from ..tracer import current
from .tensor import (binary, broadcast_pair, broadcast_to, cast, const, operands, splat, tensor,
                     to_tensor, unary)


class constexpr:
    """Marks a kernel parameter as a compile-time constant (``BLOCK: gl.constexpr``)."""

    __gluon_constexpr__ = True

    def __init__(self, value=None):
        self.value = value.value if isinstance(value, constexpr) else value

    def __repr__(self):
        return f"constexpr({self.value!r})"


def _int(x, what: str) -> int:
    if isinstance(x, constexpr):
        x = x.value
    if isinstance(x, tensor):
        raise TraceError(f"{what} must be known at trace time (a Python int or gl.constexpr), "
                         "not a traced value", user_location())
    return int(x)


# -- program and creation ----------------------------------------------------------------

def program_id(axis: int) -> tensor:
    return tensor(current().value("program_id", [], {"axis": _int(axis, "axis")}))


def num_programs(axis: int) -> tensor:
    return tensor(current().value("num_programs", [], {"axis": _int(axis, "axis")}))


def globaltimer() -> tensor:
    """Nanoseconds of a clock every CTA of the launch shares, as an int64 scalar: for timing
    parts of a kernel (write the readings out and subtract them on the host). NVIDIA:
    ``%globaltimer`` (its resolution is the GPU's, tens of nanoseconds or more); AMD: the 100 MHz
    real-time counter times 10; the interpreter: the host's ``time.perf_counter_ns()``, so only
    differences within one run of one backend mean anything."""
    return tensor(current().value("read_timer", [], {"clock": "globaltimer"}))


def clock64() -> tensor:
    """This SM's cycle counter as an int64 scalar (NVIDIA ``%clock64``, AMD CDNA ``s_memtime``):
    finer than :func:`globaltimer`, but each SM counts its own. RDNA3 has no 64-bit read of its
    shader clock: there it is the real-time counter's 10 ns ticks. The interpreter reads the
    host's nanoseconds."""
    return tensor(current().value("read_timer", [], {"clock": "clock64"}))


def arange(start, end, layout=None) -> tensor:
    return tensor(current().value("arange", [], {"start": _int(start, "arange start"),
                                                  "end": _int(end, "arange end"), "layout": layout}))


def full(shape, value, dtype, layout=None) -> tensor:
    shape = tuple(_int(s, "shape") for s in shape)
    if isinstance(value, tensor):
        v = cast(value, dtype)
    else:
        v = const(value, dtype)
    if shape == ():
        return v
    return splat(v, shape, layout)


def zeros(shape, dtype, layout=None) -> tensor:
    return full(shape, 0, dtype, layout)


def full_like(x: tensor, value, dtype=None, layout=None) -> tensor:
    return full(x.shape, value, dtype or x.dtype, layout or x.layout)


def zeros_like(x: tensor, dtype=None, layout=None) -> tensor:
    return full_like(x, 0, dtype, layout)


def threads_per_warp() -> int:
    """The target's warp (wave) size, a Python int at trace time."""
    return current().threads_per_warp


def num_warps() -> int:
    return current().num_warps


def num_ctas() -> int:
    """CTAs per cluster (the ``num_ctas`` launch option), a Python int at trace time."""
    return current().graph.num_ctas


# -- memory -------------------------------------------------------------------------------

def _masked(ptr: tensor, mask):
    mask = to_tensor(mask, dt.int1)
    if not mask.dtype.is_bool:
        raise TraceError(f"mask must be int1 (e.g. offs < n), got {mask.dtype}", user_location())
    return broadcast_pair(ptr, mask)


def load(pointer, mask=None, other=None) -> tensor:
    b = current()
    ptr = to_tensor(pointer)
    if not ptr.dtype.is_ptr:
        raise TraceError(f"gl.load needs a pointer, got a value of type {ptr.dtype}", user_location())
    ops, attrs = [ptr], {"mask": mask is not None, "other": other is not None}
    if mask is not None:
        ptr, m = _masked(ptr, mask)
        ops = [ptr, m]
    if other is not None:
        if mask is None:
            raise TraceError("gl.load: `other` needs a `mask`", user_location())
        o = cast(to_tensor(other, ptr.dtype.element), ptr.dtype.element)
        if o.type.is_scalar and not ptr.type.is_scalar:
            o = splat(o, ptr.shape, ptr.layout)
        ops.append(o)
    ops[0] = ptr
    return tensor(b.value("load", [o.value for o in ops], attrs))


def store(pointer, value, mask=None) -> None:
    b = current()
    ptr = to_tensor(pointer)
    if not ptr.dtype.is_ptr:
        raise TraceError(f"gl.store needs a pointer to store to, got a value of type {ptr.dtype}",
                         user_location())
    val = cast(to_tensor(value, ptr.dtype.element), ptr.dtype.element)
    ptr, val = broadcast_pair(ptr, val)
    ops = [ptr, val]
    if mask is not None:
        ptr2, m = _masked(ptr, mask)
        if ptr2.shape != ptr.shape:
            raise TraceError(f"mask shape {m.shape} is larger than the stored tile {ptr.shape}",
                             user_location())
        ops.append(m)
    b.create("store", [o.value for o in ops], {"mask": mask is not None})


def _atomic(kind, pointer, val, mask=None) -> tensor:
    ptr = to_tensor(pointer)
    if not ptr.dtype.is_ptr:
        raise TraceError(f"atomic_{kind} needs a pointer, got {ptr.dtype}", user_location())
    v = cast(to_tensor(val, ptr.dtype.element), ptr.dtype.element)
    ptr, v = broadcast_pair(ptr, v)
    ops = [ptr, v]
    if mask is not None:
        _, m = _masked(ptr, mask)
        ops.append(m)
    return tensor(current().value("atomic_rmw", [o.value for o in ops],
                                  {"kind": kind, "mask": mask is not None}))


def atomic_add(pointer, val, mask=None): return _atomic("add", pointer, val, mask)
def atomic_max(pointer, val, mask=None): return _atomic("max", pointer, val, mask)
def atomic_min(pointer, val, mask=None): return _atomic("min", pointer, val, mask)
def atomic_xchg(pointer, val, mask=None): return _atomic("xchg", pointer, val, mask)
def atomic_and(pointer, val, mask=None): return _atomic("and", pointer, val, mask)
def atomic_or(pointer, val, mask=None): return _atomic("or", pointer, val, mask)
def atomic_xor(pointer, val, mask=None): return _atomic("xor", pointer, val, mask)


def atomic_cas(pointer, cmp, val) -> tensor:
    ptr = to_tensor(pointer)
    if not ptr.dtype.is_ptr:
        raise TraceError(f"atomic_cas needs a pointer, got {ptr.dtype}", user_location())
    el = ptr.dtype.element
    c = cast(to_tensor(cmp, el), el)
    v = cast(to_tensor(val, el), el)
    ptr, c = broadcast_pair(ptr, c)
    ptr, v = broadcast_pair(ptr, v)
    return tensor(current().value("atomic_cas", [ptr.value, c.value, v.value]))


# -- element-wise --------------------------------------------------------------------------

def where(condition, x, y) -> tensor:
    c = to_tensor(condition, dt.int1)
    if isinstance(x, tensor) or isinstance(y, tensor):
        x, y = operands(x, y)
    else:
        x, y = operands(x, y)
    c, x = broadcast_pair(c, x)
    c, y = broadcast_pair(c, y)
    x, y = broadcast_pair(x, y)
    return tensor(current().value("where", [c.value, x.value, y.value]))


def maximum(x, y) -> tensor: return binary("maximum", x, y)
def minimum(x, y) -> tensor: return binary("minimum", x, y)


def clamp(x, min, max) -> tensor:
    return minimum(maximum(x, min), max)


def fma(x, y, z) -> tensor:
    x, y = operands(x, y)
    x, z = operands(x, z)
    x, y = operands(x, y)
    return tensor(current().value("fma", [x.value, y.value, z.value]))


def _float_unary(name):
    def fn(x) -> tensor:
        x = to_tensor(x)
        if not x.dtype.is_floating:
            raise TraceError(f"gl.{name} needs a floating-point value, got {x.dtype}; "
                             f"convert first with x.to(gl.float32)", user_location())
        return unary(name, x)
    fn.__name__ = name
    fn.__doc__ = f"Element-wise {name}."
    return fn


exp = _float_unary("exp")


def exp2(x, ftz=False) -> tensor:
    """Element-wise 2**x. ``ftz=True`` flushes results below 2**-126 (float32's smallest normal)
    to zero, on every backend and in the interpreter: one instruction on the GPU (NVIDIA's
    ``ex2.approx.ftz``, AMD's ``v_exp_f32``) where keeping subnormal results costs a range check
    and two multiplies per value — worth it in a softmax, whose tiny terms vanish in the sum."""
    x = to_tensor(x)
    if not x.dtype.is_floating:
        raise TraceError(f"gl.exp2 needs a floating-point value, got {x.dtype}; "
                         f"convert first with x.to(gl.float32)", user_location())
    if not isinstance(ftz, bool):
        raise TraceError(f"gl.exp2's ftz must be True or False, got {ftz!r}", user_location())
    if not ftz:
        return unary("exp2", x)
    if x.dtype.bits == 64:
        raise TraceError("gl.exp2(..., ftz=True) is for float32 and 16-bit floats; float64 keeps its "
                         "subnormals (drop ftz)", user_location())
    return tensor(current().value("exp2", [x.value], {"ftz": True}))


log = _float_unary("log")
log2 = _float_unary("log2")
sqrt = _float_unary("sqrt")
rsqrt = _float_unary("rsqrt")
sin = _float_unary("sin")
cos = _float_unary("cos")
erf = _float_unary("erf")
floor = _float_unary("floor")
ceil = _float_unary("ceil")


def abs(x) -> tensor:
    return unary("abs", x)


def div_rn(x, y) -> tensor:
    """IEEE division rounded to nearest (also what ``/`` does)."""
    return binary("truediv", x, y)


def fdiv(x, y, ieee_rounding: bool = False) -> tensor:
    """Float division; ``ieee_rounding=False`` allows the fast approximate instruction on GPUs."""
    x, y = operands(x, y, float_result=True)
    return tensor(current().value("div", [x.value, y.value], {"approx": not ieee_rounding}))


def cdiv(x, div):
    """Ceiling division; on two Python ints it stays a Python int."""
    if not isinstance(x, tensor) and not isinstance(div, tensor):
        return -(-_int(x, "cdiv") // _int(div, "cdiv"))
    return (x + div - 1) // div


# -- reductions and scans ---------------------------------------------------------------------

def _check_axis(x: tensor, axis) -> int:
    axis = _int(axis, "axis")
    rank = len(x.shape)
    if axis < 0:
        axis += rank
    if not 0 <= axis < rank:
        raise TraceError(f"axis {axis} is out of range for a {rank}-D tile of shape {x.shape}",
                         user_location())
    return axis


# Side effects a combine function may not have. The interpreter calls a reduce's combine once
# per pair of its tree; a GPU forms the same pairs, but threads holding copies of a pair each
# call it (a store writes the same value again; an atomic or a print would repeat), and a scan's
# calls differ between backends altogether (the same result for an associative combine). So
# these are not part of the language -- refused where they are written, in the interpreter too,
# as Triton refuses side effects in its combine regions -- rather than run differently.
_COMBINE_REFUSED = {"reduce": ("atomic_rmw", "atomic_cas", "print"),
                    "scan": ("store", "atomic_rmw", "atomic_cas", "print")}


def _check_combine_effects(block: Block, kind: str) -> None:
    for o in block.walk():
        if o.name in _COMBINE_REFUSED[kind]:
            allowed = " (a reduce's combine may store)" if kind == "scan" and o.name == "store" else ""
            raise TraceError(f"`{o.name}` inside a {kind}'s combine function: its calls are not the same "
                             f"on every backend{allowed}; return the values from the reduction or scan "
                             "and store them after it", o.loc or user_location())


def _combine_region(inputs: list[tensor], combine_fn, n_args: int, kind: str = "reduce") -> Block:
    b = current()
    block = Block(b.block)
    loc = user_location()
    with b.region(block, "a combine function", loc):
        args = [tensor(block.add_arg(Type(t.dtype))) for t in inputs for _ in (0,)]
        args2 = [tensor(block.add_arg(Type(t.dtype))) for t in inputs]
        out = combine_fn(*args, *args2)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(outs) != len(inputs):
            raise TraceError(f"the combine function returned {len(outs)} values for {len(inputs)} "
                             "inputs", loc)
        outs = [cast(to_tensor(o, t.dtype), t.dtype) for o, t in zip(outs, inputs)]
        for o in outs:
            if not o.type.is_scalar:
                raise TraceError("the combine function must return scalars", loc)
        b.create("yield", [o.value for o in outs], loc=loc)
    _check_combine_effects(block, kind)
    return block


def reduce(input, axis, combine_fn, keep_dims: bool = False):
    """Reduce one tile (or a tuple of tiles) along ``axis`` with a Python ``combine_fn``."""
    inputs = list(input) if isinstance(input, (tuple, list)) else [input]
    inputs = [to_tensor(t) for t in inputs]
    if axis is None:
        out = inputs
        while len(out[0].shape) > 0:
            out = reduce(tuple(out), len(out[0].shape) - 1, combine_fn)
            out = list(out) if isinstance(out, tuple) else [out]
        return tuple(out) if isinstance(input, (tuple, list)) else out[0]
    if inputs[0].type.is_scalar:
        raise TraceError("cannot reduce a scalar", user_location())
    axis = _check_axis(inputs[0], axis)
    region = _combine_region(inputs, combine_fn, 2)
    op = current().create("reduce", [t.value for t in inputs], {"axis": axis}, [region])
    outs = [tensor(r) for r in op.results]
    if keep_dims:
        outs = [expand_dims(o, axis) if not o.type.is_scalar else
                splat(o, tuple(1 for _ in inputs[0].shape), inputs[0].layout) for o in outs]
    return tuple(outs) if isinstance(input, (tuple, list)) else outs[0]


def _add(a, b): return a + b
def _max(a, b): return maximum(a, b)
def _min(a, b): return minimum(a, b)


def sum(input, axis=None, keep_dims=False, dtype=None):
    x = to_tensor(input)
    if dtype is not None:
        x = cast(x, dtype)
    elif x.dtype.is_bool or (x.dtype.is_int and x.dtype.bits < 32):
        x = cast(x, dt.int32)
    return reduce(x, axis, _add, keep_dims)


def max(input, axis=None, keep_dims=False):
    return reduce(to_tensor(input), axis, _max, keep_dims)


def min(input, axis=None, keep_dims=False):
    return reduce(to_tensor(input), axis, _min, keep_dims)


def _index_along(x: tensor, axis: int) -> tensor:
    """An int32 tile of x's shape and layout holding each element's index along ``axis``."""
    rank = len(x.shape)
    lay = x.layout
    for d in reversed(range(rank)):
        if d != axis:
            lay = SliceLayout(d, lay)
    idx = arange(0, x.shape[axis], layout=lay)
    for d in range(rank):
        if d != axis:
            idx = expand_dims(idx, d)
    return broadcast_to(idx, x.shape)


def _arg(x, axis, keep_dims, pick_first_if):
    x = to_tensor(x)
    if axis is None:
        raise TraceError("argmax/argmin need an axis", user_location())
    axis = _check_axis(x, axis)

    def combine(v1, i1, v2, i2):
        better = pick_first_if(v1, v2) | ((v1 == v2) & (i1 < i2))
        return where(better, v1, v2), where(better, i1, i2)

    _, idx = reduce((x, _index_along(x, axis)), axis, combine, keep_dims)
    return idx


def argmax(input, axis, keep_dims=False, tie_break_left=True):
    return _arg(input, axis, keep_dims, lambda a, b: a > b)


def argmin(input, axis, keep_dims=False, tie_break_left=True):
    return _arg(input, axis, keep_dims, lambda a, b: a < b)


def associative_scan(input, axis, combine_fn, reverse: bool = False):
    inputs = list(input) if isinstance(input, (tuple, list)) else [input]
    inputs = [to_tensor(t) for t in inputs]
    axis = _check_axis(inputs[0], axis)
    region = _combine_region(inputs, combine_fn, 2, kind="scan")
    op = current().create("scan", [t.value for t in inputs], {"axis": axis, "reverse": bool(reverse)},
                          [region])
    outs = [tensor(r) for r in op.results]
    return tuple(outs) if isinstance(input, (tuple, list)) else outs[0]


def cumsum(input, axis=0, reverse=False):
    x = to_tensor(input)
    if x.dtype.is_bool or (x.dtype.is_int and x.dtype.bits < 32):
        x = cast(x, dt.int32)
    return associative_scan(x, axis, _add, reverse)


# -- shape and layout -----------------------------------------------------------------------

def expand_dims(input, axis) -> tensor:
    x = to_tensor(input)
    rank = len(x.shape)
    axis = _int(axis, "axis")
    if axis < 0:
        axis += rank + 1
    if not 0 <= axis <= rank:
        raise TraceError(f"expand_dims axis {axis} is out of range for a {rank}-D tile",
                         user_location())
    return tensor(current().value("expand_dims", [x.value], {"axis": axis}))


def broadcast(input, other):
    """Broadcast two tiles against each other; returns both."""
    return broadcast_pair(to_tensor(input), to_tensor(other))


def reshape(input, shape, layout=None) -> tensor:
    x = to_tensor(input)
    shape = tuple(_int(s, "shape") for s in shape)
    if layout is None:
        from ..layouts import reshape_layout
        layout = reshape_layout(x.layout, tuple(x.shape), shape, current().num_warps,
                                current().threads_per_warp)
    return tensor(current().value("reshape", [x.value], {"shape": shape, "layout": layout}))


def permute(input, dims, layout=None) -> tensor:
    x = to_tensor(input)
    dims = tuple(_int(d, "dims") for d in dims)
    if layout is None and sorted(dims) == list(range(len(x.shape))):
        from ..layouts import permute_layout
        layout = permute_layout(x.layout, tuple(x.shape), dims, current().num_warps,
                                current().threads_per_warp)
    return tensor(current().value("permute", [x.value], {"dims": dims, "layout": layout}))


def split(a) -> tuple[tensor, tensor]:
    """``(a[..., 0], a[..., 1])`` of a tile whose last dimension is 2 (Triton's and Gluon's
    ``split``). Where the layout keeps both halves in one thread's registers (any layout a
    reshape/permute of a register-held dimension gives) this moves no data; otherwise the
    halves are exchanged between threads."""
    x = to_tensor(a)
    layout = None
    if len(x.shape) >= 2 and x.shape[-1] == 2:
        from ..layouts import split_layout
        layout = split_layout(x.layout, tuple(x.shape), current().num_warps, current().threads_per_warp)
    op = current().create("split", [x.value], {"layout": layout})
    return tensor(op.results[0]), tensor(op.results[1])


def join(a, b) -> tensor:
    """A tile with a new last dimension of 2: ``out[..., 0] = a``, ``out[..., 1] = b`` (the
    inverse of :func:`split`). ``a`` and ``b`` are broadcast together; ``b`` is converted to
    ``a``'s layout if it differs. The pair sits in one thread's adjacent registers."""
    x, y = broadcast_pair(to_tensor(a), to_tensor(b))
    if x.dtype != y.dtype:
        raise TraceTypeError(f"join needs two tiles of one dtype, got {x.dtype} and {y.dtype}",
                                user_location(), notes=("cast one first: b.to(a.dtype)",))
    if not x.shape:
        raise TraceError("join needs tiles, not scalars", user_location())
    y = convert_layout(y, x.layout)
    from ..layouts import join_layout
    layout = join_layout(x.layout, tuple(x.shape), current().num_warps, current().threads_per_warp)
    return tensor(current().value("join", [x.value, y.value], {"layout": layout}))


def trans(input, layout=None) -> tensor:
    return permute(input, (1, 0), layout)


def convert_layout(value, layout) -> tensor:
    x = to_tensor(value)
    if x.layout == layout:
        return x
    return tensor(current().value("convert_layout", [x.value], {"layout": layout}))


# -- hints, assertions, printing ---------------------------------------------------------------

def multiple_of(input, values) -> tensor:
    x = to_tensor(input)
    return tensor(current().value("hint", [x.value], {"multiple_of": _int(values, "multiple_of")}))


def max_contiguous(input, values) -> tensor:
    x = to_tensor(input)
    return tensor(current().value("hint", [x.value], {"max_contiguous": _int(values, "max_contiguous")}))


def constexpr_function(fn):
    """Gluon's decorator for a helper computed at compile time (a layout, a block size). A
    trace runs every Python function at trace time, so it returns ``fn`` unchanged."""
    return fn


def aggregate(cls):
    """Gluon's ``@aggregate`` (a class grouping kernel values): any Python class already is one
    here -- locals holding such objects, tuples or lists of tiles are carried through gl.range
    and gl.if_ tile by tile. Returns ``cls`` unchanged."""
    return cls


def static_assert(cond, msg: str = "") -> None:
    if isinstance(cond, tensor):
        raise TraceError("gl.static_assert needs a condition known at trace time", user_location())
    if isinstance(cond, constexpr):
        cond = cond.value
    if not cond:
        raise TraceError(f"static_assert failed{': ' + msg if msg else ''}", user_location())


def static_print(*args) -> None:
    builtins.print(*args)


def device_print(prefix: str, *args) -> None:
    vals = [to_tensor(a).value for a in args]
    current().create("print", vals, {"prefix": str(prefix)})

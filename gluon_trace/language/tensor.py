"""The tile proxy: what kernel code holds instead of data while it is traced.

A :class:`tensor` wraps one SSA value. Its operators record ops; Python literals
beside it are weakly typed (see :mod:`gluon_trace.dtypes`); scalars are splatted and
size-1 dimensions broadcast, but layouts are never silently converted.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import TraceError, TraceTypeError, user_location
from ..ir import Type, Value
from ..tracer import current


class tensor:
    __slots__ = ("value", "__weakref__")

    def __init__(self, value: Value):
        self.value = value

    # -- description -------------------------------------------------------------------
    @property
    def type(self) -> Type:
        return self.value.type

    @property
    def dtype(self) -> dt.dtype:
        return self.value.type.dtype

    @property
    def shape(self) -> list[int]:
        return list(self.value.type.shape)

    @property
    def layout(self):
        return self.value.type.layout

    @property
    def numel(self) -> int:
        return self.value.type.numel

    def __repr__(self) -> str:
        return f"tensor({self.value.type})"

    # -- things Python would do with a value, that a traced tile cannot ------------------
    def __bool__(self):
        raise TraceError(
            "a traced tile has no truth value while the kernel is being traced: Python `if`, "
            "`and`, `or`, `not` and `while` on it cannot be recorded",
            user_location(),
            notes=("for element-wise choice use gl.where(cond, a, b)",
                   "for a run-time branch on a scalar use `with gl.if_(cond):`",
                   "for & | ~ on masks use the bitwise operators"))

    def __index__(self):
        loc = user_location()
        notes = ()
        if loc is not None and "range(" in (loc.source_line() or "") and "gl.range(" not in loc.source_line():
            # Gluon compiles `for i in range(n)` over a run-time n to a loop; a trace cannot
            notes = ("for a run-time loop write `for i in gl.range(...)`",)
        raise TraceError("a traced value cannot be used as a Python int (it is only known at run "
                         "time); make it a gl.constexpr argument to specialize on it", loc, notes=notes)

    __int__ = __index__

    def __float__(self):
        raise TraceError("a traced value cannot be used as a Python float", user_location())

    def __iter__(self):
        raise TraceError("a traced tile cannot be iterated in Python; use gl.range for a run-time "
                         "loop or index with a Python range over a constexpr", user_location())

    def __len__(self):
        raise TraceTypeError(
            f"len() of a traced tile is not defined (a {self.type} has a shape, not a length); "
            "use x.shape[0] for the size of axis 0 or x.numel for the element count",
            user_location())

    __hash__ = object.__hash__

    # -- arithmetic -------------------------------------------------------------------------
    def __add__(self, o): return binary("add", self, o)
    def __radd__(self, o): return binary("add", o, self)
    def __sub__(self, o): return binary("sub", self, o)
    def __rsub__(self, o): return binary("sub", o, self)
    def __mul__(self, o): return binary("mul", self, o)
    def __rmul__(self, o): return binary("mul", o, self)
    def __truediv__(self, o): return binary("truediv", self, o)
    def __rtruediv__(self, o): return binary("truediv", o, self)
    def __floordiv__(self, o): return binary("floordiv", self, o)
    def __rfloordiv__(self, o): return binary("floordiv", o, self)
    def __mod__(self, o): return binary("mod", self, o)
    def __rmod__(self, o): return binary("mod", o, self)
    def __and__(self, o): return binary("and", self, o)
    def __rand__(self, o): return binary("and", o, self)
    def __or__(self, o): return binary("or", self, o)
    def __ror__(self, o): return binary("or", o, self)
    def __xor__(self, o): return binary("xor", self, o)
    def __rxor__(self, o): return binary("xor", o, self)
    def __lshift__(self, o): return binary("shl", self, o)
    def __rlshift__(self, o): return binary("shl", o, self)
    def __rshift__(self, o): return binary("shr", self, o)
    def __rrshift__(self, o): return binary("shr", o, self)
    def __lt__(self, o): return binary("lt", self, o)
    def __le__(self, o): return binary("le", self, o)
    def __gt__(self, o): return binary("gt", self, o)
    def __ge__(self, o): return binary("ge", self, o)
    def __eq__(self, o): return binary("eq", self, o)  # type: ignore[override]
    def __ne__(self, o): return binary("ne", self, o)  # type: ignore[override]

    def __neg__(self): return unary("neg", self)
    def __pos__(self): return self
    def __invert__(self): return unary("not", self)
    def __abs__(self): return unary("abs", self)

    # -- conversions and shape ----------------------------------------------------------------
    def to(self, dtype: dt.dtype, bitcast: bool = False) -> "tensor":
        return cast(self, dtype, bitcast=bitcast)

    def __getitem__(self, idx) -> "tensor":
        if not isinstance(idx, tuple):
            idx = (idx,)
        from .core import expand_dims
        out, axis = self, 0
        for item in idx:
            if item is None:
                out = expand_dims(out, axis)
                axis += 1
            elif isinstance(item, slice) and item == slice(None):
                axis += 1
            else:
                raise TraceError(f"tiles support only `:` and `None` in indexing (x[:, None]), "
                                 f"not {item!r}", user_location())
        if axis > len(out.shape):
            raise TraceError(f"too many indices for a {len(self.shape)}-D tile", user_location())
        return out

    # Triton-style methods
    def reshape(self, shape, layout=None) -> "tensor":
        from .core import reshape
        return reshape(self, shape, layout)

    def permute(self, dims, layout=None) -> "tensor":
        from .core import permute
        return permute(self, dims, layout)

    def trans(self, layout=None) -> "tensor":
        from .core import trans
        return trans(self, layout)

    def split(self) -> tuple["tensor", "tensor"]:
        from .core import split
        return split(self)

    def sum(self, axis=None, keep_dims=False):
        from .core import sum as _sum
        return _sum(self, axis, keep_dims=keep_dims)

    def max(self, axis=None, keep_dims=False):
        from .core import max as _max
        return _max(self, axis, keep_dims=keep_dims)

    def min(self, axis=None, keep_dims=False):
        from .core import min as _min
        return _min(self, axis, keep_dims=keep_dims)


_PROXIES: dict[type, type] = {}


def register_proxy(type_cls: type, proxy_cls: type) -> None:
    """Values of ``type_cls`` (an ir.Type subclass) are held as ``proxy_cls`` in kernel code."""
    _PROXIES[type_cls] = proxy_cls


def wrap(v: Value) -> tensor:
    """The proxy kernel code holds for ``v``: a tile, or a descriptor for memory types."""
    return _PROXIES.get(type(v.type), tensor)(v)


# -- conversion of operands ---------------------------------------------------------------

def const(value, dtype: dt.dtype, loc=None) -> tensor:
    b = current()
    if dtype.is_floating:
        value = float(value)
    elif dtype.is_bool:
        value = bool(value)
    else:
        value = int(value)
        lo, hi = (-(1 << (dtype.bits - 1)), 1 << (dtype.bits - 1)) if dtype.is_signed else (0, 1 << dtype.bits)
        if not lo <= value < hi:
            raise TraceError(f"constant {value} does not fit in {dtype}", loc or user_location())
    return tensor(b.value("const", [], {"value": value, "dtype": dtype}, loc=loc))


def to_tensor(x, like: dt.dtype | None = None) -> tensor:
    if isinstance(x, tensor):
        return x
    if hasattr(x, "__gluon_constexpr__"):
        x = x.value
    if isinstance(x, (bool, int, float)):
        return const(x, dt.literal_type(x, like))
    raise TraceError(f"cannot use a {type(x).__name__} ({x!r}) as a kernel value", user_location())


def cast(x, dtype: dt.dtype, bitcast: bool = False) -> tensor:
    x = to_tensor(x)
    if not isinstance(dtype, dt.dtype):
        raise TraceError(f"x.to() takes a gl dtype such as gl.float32, not {dtype!r}", user_location())
    if x.dtype == dtype:
        return x
    return tensor(current().value("cast", [x.value], {"dtype": dtype, "bitcast": bitcast}))


def broadcast_pair(a: tensor, b: tensor) -> tuple[tensor, tensor]:
    """Splat scalars to the other side's tile; broadcast size-1 dims."""
    if a.type.is_scalar and not b.type.is_scalar:
        a = splat(a, b.type.shape, b.layout)
    elif b.type.is_scalar and not a.type.is_scalar:
        b = splat(b, a.type.shape, a.layout)
    sa, sb = a.type.shape, b.type.shape
    if sa != sb:
        if len(sa) != len(sb):
            raise TraceError(f"cannot combine tiles of shapes {list(sa)} and {list(sb)}: ranks "
                             "differ (add axes with x[None, :] or gl.expand_dims)", user_location())
        shape = []
        for x, y in zip(sa, sb):
            if x != y and x != 1 and y != 1:
                raise TraceError(f"shapes {list(sa)} and {list(sb)} do not broadcast "
                                 f"(dimension {x} vs {y})", user_location())
            shape.append(max(x, y))
        shape = tuple(shape)
        if sa != shape:
            a = broadcast_to(a, shape)
        if sb != shape:
            b = broadcast_to(b, shape)
    return a, b


def splat(x: tensor, shape, layout) -> tensor:
    return tensor(current().value("splat", [x.value], {"shape": tuple(shape), "layout": layout}))


def broadcast_to(x: tensor, shape) -> tensor:
    shape = tuple(shape)
    if x.type.is_scalar:
        raise TraceError("broadcast_to needs a tile; a scalar takes the layout of the tile it meets",
                         user_location())
    if tuple(x.shape) == shape:
        return x
    return tensor(current().value("broadcast", [x.value], {"shape": shape}))


def operands(a, b, *, float_result=False) -> tuple[tensor, tensor]:
    """Two operands converted to one dtype (promotion rules) and one shape."""
    if not isinstance(a, tensor) and not isinstance(b, tensor):
        a = to_tensor(a)
    if not isinstance(a, tensor):
        a = to_tensor(a, b.dtype)
    elif not isinstance(b, tensor):
        b = to_tensor(b, a.dtype)
    if a.dtype.is_ptr or b.dtype.is_ptr:
        return broadcast_pair(a, b)
    t = dt.promote(a.dtype, b.dtype)
    if float_result and not t.is_floating:
        t = dt.float32
    return broadcast_pair(cast(a, t), cast(b, t))


def binary(name: str, a, b) -> tensor:
    b_ = current()
    if name in ("add", "sub") and (_is_ptr(a) or _is_ptr(b)):
        return _pointer_arith(name, a, b)
    if name == "truediv":
        a, b = operands(a, b, float_result=True)
        return tensor(b_.value("div", [a.value, b.value]))
    if name == "floordiv" and (_is_float(a) or _is_float(b)):
        a, b = operands(a, b)
        return unary("floor", tensor(b_.value("div", [a.value, b.value])))
    if name in ("shl", "shr") and isinstance(a, tensor) and not isinstance(b, tensor):
        b = to_tensor(b, a.dtype)
    a, b = operands(a, b)
    if a.dtype.is_bool and name in _BOOL_AS_INT:
        a, b = cast(a, dt.int32), cast(b, dt.int32)
    return tensor(b_.value(name, [a.value, b.value]))


# Arithmetic on int1 computes in int32, as Python does with bool (True + True == 2,
# -True == -1); logic (& | ^ ~), comparisons, maximum and minimum stay int1.
_BOOL_AS_INT = frozenset(("add", "sub", "mul", "floordiv", "mod", "shl", "shr", "neg", "abs"))


def _is_ptr(x) -> bool:
    return isinstance(x, tensor) and x.dtype.is_ptr


def _is_float(x) -> bool:
    return isinstance(x, float) or isinstance(x, tensor) and x.dtype.is_floating


def _pointer_arith(name, a, b) -> tensor:
    if _is_ptr(b):
        if name == "sub":
            raise TraceError("int - pointer is not defined; only pointer + int and pointer - int",
                             user_location())
        a, b = b, a
    if _is_ptr(b):
        raise TraceError("adding two pointers is not defined", user_location())
    off = to_tensor(b, dt.int32)
    if off.dtype.is_floating:
        raise TraceError(f"pointer offsets must be integers, got {off.dtype}", user_location())
    if name == "sub":
        off = unary("neg", off)
    a, off = broadcast_pair(a, off)
    return tensor(current().value("ptr_add", [a.value, off.value]))


def unary(name: str, x) -> tensor:
    x = to_tensor(x)
    if x.dtype.is_bool and name in _BOOL_AS_INT:
        x = cast(x, dt.int32)
    return tensor(current().value(name, [x.value]))

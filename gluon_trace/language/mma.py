"""The MMA ops every vendor module builds on, and the portable ``gl.dot_fma``."""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import TraceError, user_location
from ..tracer import current
from .tensor import tensor, to_tensor


def mma(name: str, a, b, acc, **attrs) -> tensor:
    a, b, acc = (to_tensor(x) for x in (a, b, acc))
    return tensor(current().value(name, [a.value, b.value, acc.value], attrs))


def dot_fma(a, b, acc) -> tensor:
    """``acc + a @ b`` with FMAs (no tensor cores): a in DotOperandLayout(0, acc.layout),
    b in DotOperandLayout(1, acc.layout), any target."""
    return mma("dot_fma", a, b, acc)


def use_acc_operand(use_acc) -> tensor:
    u = to_tensor(use_acc, dt.int1)
    if not u.type.is_scalar:
        raise TraceError("use_acc must be a scalar", user_location())
    return u if u.dtype.is_bool else u != 0

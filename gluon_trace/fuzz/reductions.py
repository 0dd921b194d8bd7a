"""Reductions and scans of the reference (see :mod:`.reference` for the orders and bounds)."""
from __future__ import annotations

import numpy as np

from . import reference as R
from .evaluate import Val, _as, _finish
from .ops import is_float


def _pairs(x: np.ndarray, axis: int):
    y = np.moveaxis(x, axis, -1)
    return np.moveaxis(y[..., 0::2], -1, axis), np.moveaxis(y[..., 1::2], -1, axis)


def _tree(arrays: list, axis: int, combine) -> list:
    """Combine adjacent pairs along ``axis`` until one is left (the documented order)."""
    while arrays[0].shape[axis] > 1:
        halves = [_pairs(a, axis) for a in arrays]
        arrays = combine([h[0] for h in halves], [h[1] for h in halves])
    return [np.squeeze(a, axis) for a in arrays]


def _bound(x: Val, axis: int, n: int, t: str):
    """How far any summation order of n terms may land from this one (plus input errors)."""
    mag = np.sum(np.abs(np.asarray(x.v, np.float64)), axis=axis)
    e = np.sum(x.e, axis=axis) + 2 * max(n - 1, 1) * R.UNIT_ROUNDOFF[t] * mag
    return np.where(mag > R.FLOAT_MAX[t], np.inf, e)  # a partial sum may overflow in some order


def reduce(x: Val, src: str, node, mode: str) -> Val:
    kind, axis, t = node.attrs["kind"], node.attrs["axis"], node.dtype
    n = x.v.shape[axis]
    if kind == "sum":
        x = _as(x, src, t)
        (v,) = _tree([x.v], axis, lambda a, b: [R.binary("add", a[0], b[0], t)])
        if is_float(t) and (mode == "bounded" or x.e.any()):
            out = _finish(v, _bound(x, axis, n, t), t)
        else:
            out = _finish(v, np.max(x.e, axis=axis), t)
    elif kind in ("max", "min"):
        fn = "maximum" if kind == "max" else "minimum"
        (v,) = _tree([x.v], axis, lambda a, b: [R.binary(fn, a[0], b[0], t)])
        out = Val(v, np.max(x.e, axis=axis))
    elif kind == "xor_sum":
        (v,) = _tree([x.v], axis, lambda a, b: [np.bitwise_xor(a[0], b[0])])
        out = Val(v, np.max(x.e, axis=axis))
    else:  # argmax / argmin: (value, index) pairs, the first index among equal values
        idx = np.broadcast_to(np.arange(n, dtype=np.int32).reshape(
            [n if d == axis else 1 for d in range(x.v.ndim)]), x.v.shape)

        def combine(a, b):
            (v1, i1), (v2, i2) = a, b
            with np.errstate(invalid="ignore"):
                better = (v1 > v2) if kind == "argmax" else (v1 < v2)
                better = better | ((v1 == v2) & (i1 < i2))
            return [np.where(better, v1, v2), np.where(better, i1, i2)]

        _, v = _tree([x.v, idx], axis, lambda a, b: combine(a, b))
        unsure = np.any(x.e > 0, axis=axis)
        if mode == "bounded" and is_float(src):  # NaNs make the pick depend on the order
            unsure = unsure | np.any(np.isnan(np.asarray(x.v, np.float64)), axis=axis)
        out = Val(v.astype(np.int32), np.where(unsure, np.inf, 0.0))
    if node.attrs["keep"]:
        return Val(np.expand_dims(out.v, axis), np.expand_dims(out.e, axis))
    return out


def scan(x: Val, src: str, node, mode: str) -> Val:
    kind, axis, rev, t = node.attrs["kind"], node.attrs["axis"], node.attrs["reverse"], node.dtype
    if kind == "cumsum":
        x = _as(x, src, t)
    v, e = x.v, x.e
    if rev:
        v, e = np.flip(v, axis), np.flip(e, axis)
    if kind == "max_scan":
        acc = np.fmax.accumulate if is_float(t) else np.maximum.accumulate
        out_v, out_e = acc(v, axis=axis), np.maximum.accumulate(e, axis=axis)
        out = Val(out_v, out_e)
    elif not is_float(t):
        with np.errstate(all="ignore"):
            out = Val(np.cumsum(v, axis=axis, dtype=v.dtype), np.maximum.accumulate(e, axis=axis))
        out = _finish(out.v, out.e, t)
    else:
        # the scan order is not documented: one order (sequential, in float64) and a bound
        with np.errstate(all="ignore"):
            wide = np.cumsum(np.asarray(v, np.float64), axis=axis)
            mag = np.cumsum(np.abs(np.asarray(v, np.float64)), axis=axis)
        k = np.arange(v.shape[axis]).reshape([-1 if d == axis else 1 for d in range(v.ndim)])
        bound = np.cumsum(e, axis=axis) + 2 * np.maximum(k, 1) * R.UNIT_ROUNDOFF[t] * mag
        bound = np.where(mag > R.FLOAT_MAX[t], np.inf, bound)  # partial sums may overflow
        out_v = R.fix(wide, t)
        out = _finish(out_v, bound + 2 * R.UNIT_ROUNDOFF[t] * np.abs(out_v.astype(np.float64)), t)
    if rev:
        return Val(np.flip(out.v, axis), np.flip(out.e, axis))
    return out

"""The numpy meaning of an ``atomic`` node (fuzz/atomics.py), restated from the interpreter's
documented semantics, never from its code:

- the elements whose mask holds are applied one at a time in row-major order of the tile (each
  element once, whatever copies the layout holds): ``old`` is what the address held, the
  address then holds ``old <kind> val`` computed as the element-wise op would (wrapping
  integers, float16/bfloat16 rounded after the op, max/min returning the non-NaN operand; on
  int1 add and max are ``or``, min is ``and``), ``val`` for xchg, ``val`` where ``old`` has
  ``cmp``'s bit pattern for cas (-0.0 is not 0.0; int1 compares truth values);
- a masked-off element's old value is 0.

That order is the interpreter's ("exact" mode). A GPU applies the elements at one address in
any order ("bounded" mode): the final contents stay exact for the order-free kinds except float
add, which gets the bound of a sum in any order (as ``gl.sum``'s; float32's also allows a GPU
flushing each add's subnormal inputs and result to zero, as ``atom.add.f32`` does); the old values at an address
several elements hit are unknown there, as is everything at an address an element of unknown
mask (or with an inexact compare) may reach.
"""
from __future__ import annotations

import numpy as np

from . import reference as R
from .evaluate import Val, _binary, _finish
from .ops import is_float

_FN = {"add": "add", "max": "maximum", "min": "minimum", "and": "and", "or": "or", "xor": "xor"}
_BOOL_FN = {"add": "or", "max": "or", "min": "and"}


def index_of(spec, numel: int) -> np.ndarray:
    o = np.arange(numel, dtype=np.int64)
    kind = spec[0]
    if kind == "affine":
        return (o * spec[1] + spec[2]) % numel
    if kind == "xor":
        return o ^ spec[1]
    if kind == "mod":
        return o % spec[1]
    return o // spec[1]


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f":
        u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
        return bool(a.astype(a.dtype).view(u) == b.astype(a.dtype).view(u))
    return bool(a == b)


def _apply(kind: str, t: str, cur: Val, x: Val, cmp: Val | None) -> Val:
    if kind == "xchg":
        return x
    if kind == "cas":
        if cur.e.any() or cmp.e.any():
            return Val(cur.v, np.inf)
        return x if _same_bits(cur.v, cmp.v) else cur
    fn = _BOOL_FN.get(kind, _FN[kind]) if t == "int1" else _FN[kind]
    return _binary(fn, cur, x, t, t)


def atomic(prog, n, arg, mode: str) -> tuple[Val, Val]:
    """(old values, the buffer's contents after) for node ``n`` given its operands' Vals."""
    at, t, kind = n.attrs, n.dtype, n.attrs["kind"]
    mem, x = arg[0], arg[1]
    cmp = arg[2] if kind == "cas" else None
    shape, numel = n.shape, n.numel
    mv, me = np.array(mem.v, copy=True), np.array(mem.e, float, copy=True)
    idx = index_of(at["index"], numel)
    xv, xe = x.v.reshape(-1), x.e.reshape(-1)
    if at["mask"] == "node":
        on, unsure = arg[-1].v.reshape(-1).astype(bool), np.isinf(arg[-1].e.reshape(-1))
    else:
        on = np.arange(numel) < prog.n_valid if at["mask"] == "n_valid" else np.ones(numel, bool)
        unsure = np.zeros(numel, bool)
    old_v, old_e = np.zeros(numel, R.np_dtype(t)), np.zeros(numel)
    for i in np.flatnonzero(on):
        a = idx[i]
        cur = Val(mv[a], me[a])
        old_v[i], old_e[i] = cur.v, cur.e
        c = Val(cmp.v.reshape(-1)[i], cmp.e.reshape(-1)[i]) if cmp is not None else None
        new = _apply(kind, t, cur, Val(xv[i], xe[i]), c)
        mv[a], me[a] = new.v, new.e
    reach = on | unsure
    hits = np.bincount(idx[reach], minlength=mv.size)
    tainted = np.zeros(mv.size, bool)
    tainted[idx[unsure]] = True
    if mode == "bounded":
        many = hits >= 2
        if kind not in ("add", "max", "min", "and", "or", "xor"):
            tainted |= many
        elif kind == "add" and is_float(t):
            mag = np.abs(np.asarray(mem.v, np.float64))
            np.add.at(mag, idx[on], np.abs(np.asarray(xv[on], np.float64)))
            extra = 2 * hits * R.UNIT_ROUNDOFF[t] * mag
            me = np.where(many, me + np.where(mag > R.FLOAT_MAX[t], np.inf, extra), me)
        if kind == "add" and t == "float32":
            # atom.add.f32 flushes subnormal inputs and results to zero (the PTX ISA; a fresh
            # fuzz seed on the H200 got 0 for 1e-45): each add may move the sum by < 2 * 2^-126
            me = me + 2 * hits * 2.0 ** -126
        old_e = np.where(reach & many[idx], np.inf, old_e)
    me = np.where(tainted, np.inf, me)
    old_e = np.where(tainted[idx] & reach, np.inf, old_e)
    after = _finish(mv, me, t) if is_float(t) else Val(mv, np.where(me > 0, np.inf, 0.0))
    return Val(old_v.reshape(shape), old_e.reshape(shape)), after

"""Runs a program's description through :mod:`.reference`, node by node, carrying for each
value an error bound (see that module's docstring): ``evaluate`` gives every node's
``(value, err)``."""
from __future__ import annotations

import numpy as np

from . import reference as R
from .ops import BOOL_AS_INT, COMPARE, is_float, literal_dtype, promote
from .program import Program


class Val:
    __slots__ = ("v", "e")

    def __init__(self, v, e=None):
        self.v = np.asarray(v)
        self.e = np.zeros(self.v.shape) if e is None else np.broadcast_to(np.asarray(e, float), self.v.shape)


def _ulp(r, t: str):
    if not is_float(t):
        return 0.0
    return 2 * R.UNIT_ROUNDOFF[t] * np.abs(np.asarray(r, np.float64)) + R._TINY[t]


def _finish(v, e, t: str) -> Val:
    """Unknown where a float result is not finite but carries error, or could overflow."""
    e = np.asarray(e, float)
    e = np.where(np.isnan(e), np.inf, e)
    if is_float(t):
        vv = np.asarray(v, np.float64)
        with np.errstate(invalid="ignore"):
            risky = (e > 0) & (~np.isfinite(vv) | (np.abs(vv) + e > R.FLOAT_MAX[t]))
        e = np.where(risky, np.inf, e)
    else:
        e = np.where(e > 0, np.inf, 0.0)
    return Val(v, e)


def _as(x: Val, src: str, to: str) -> Val:
    """Convert with the bound: a float -> int conversion is exact only where the whole
    interval truncates to one integer."""
    out = R.cast(x.v, src, to)
    if not x.e.any():
        return Val(out)
    if is_float(src) and not is_float(to):
        lo = R.cast(np.asarray(x.v, np.float64) - x.e, "float64", to)
        hi = R.cast(np.asarray(x.v, np.float64) + x.e, "float64", to)
        return Val(out, np.where((lo == hi) & np.isfinite(x.e), 0.0, np.inf))
    if is_float(to):
        return _finish(out, x.e + np.where(x.e > 0, _ulp(out, to), 0.0), to)
    return _finish(out, x.e, to)


def _binary(fn, a: Val, b: Val, t: str, out_t: str) -> Val:
    v = R.binary(fn, a.v, b.v, t)
    ea, eb = a.e, b.e
    if not (ea.any() or eb.any()):
        return Val(v)
    av, bv = np.abs(np.asarray(a.v, np.float64)), np.abs(np.asarray(b.v, np.float64))
    with np.errstate(all="ignore"):
        if not is_float(t) or fn in ("floordiv", "mod"):
            e = np.where((ea > 0) | (eb > 0), np.inf, 0.0)
        elif fn in COMPARE:
            gap = np.abs(np.asarray(a.v, np.float64) - np.asarray(b.v, np.float64))
            e = np.where((ea + eb == 0) | (gap > ea + eb), 0.0, np.inf)
        elif fn in ("add", "sub"):
            e = ea + eb + _ulp(v, t)
        elif fn == "mul":
            e = av * eb + bv * ea + ea * eb + _ulp(v, t)
        elif fn == "truediv":
            e = np.where(bv > eb, (ea + np.abs(np.asarray(v, np.float64)) * eb) / (bv - eb), np.inf) + _ulp(v, t)
        else:  # maximum, minimum
            e = np.maximum(ea, eb)
    return _finish(v, e, out_t)


def _operands(prog_vals, n, nodes) -> tuple:
    a = nodes[n.args[0]]
    aval = prog_vals[n.args[0]]
    if len(n.args) > 1:
        b = nodes[n.args[1]]
        return a.dtype, aval, b.dtype, prog_vals[n.args[1]]
    lit = n.attrs["literal"]
    lt = literal_dtype(lit, a.dtype)
    return a.dtype, aval, lt, lit_val(lit, lt)


def lit_val(lit, t: str) -> Val:
    """A Python literal as a value of dtype ``t``."""
    src = "int1" if isinstance(lit, bool) else "float64" if isinstance(lit, float) else "int64"
    return Val(R.cast(np.array(lit), src, t))


def evaluate(prog: Program, inputs: dict, mode: str = "exact") -> dict:
    """Every node's Val. ``inputs`` maps input index -> the numpy array (compute dtype) loaded;
    ``mode`` is "exact" (the interpreter's orders) or "bounded" (any order: for GPUs)."""
    nodes = {n.name: n for n in prog.nodes}
    vals: dict[str, Val] = {}
    with np.errstate(all="ignore"):  # overflow, NaN and inf are part of what is checked
        for n in prog.nodes:
            vals[n.name] = _node(prog, n, nodes, vals, inputs, mode)
    return vals


def _node(prog, n, nodes, vals, inputs, mode) -> Val:
    at = n.attrs
    arg = [vals[a] for a in n.args]
    src = [nodes[a].dtype for a in n.args]
    if n.op == "load":
        flat = np.asarray(inputs[at["input"]])
        v = flat.reshape(n.shape).copy()
        if at["masked"]:
            keep = np.arange(v.size).reshape(n.shape) < prog.n_valid
            other = lit_val(at["other"], n.dtype).v if at["other"] is not None else np.zeros((), v.dtype)
            v = np.where(keep, v, other).astype(v.dtype)
        return Val(v)
    if n.op == "binary":
        ta, a, tb, b = _operands(vals, n, nodes)
        t = promote(ta, tb)
        if t == "int1" and at["fn"] in BOOL_AS_INT:
            t = "int32"
        return _binary(at["fn"], _as(a, ta, t), _as(b, tb, t), t, n.dtype)
    if n.op == "unary":
        return _unary(at["fn"], arg[0], n.dtype, mode)
    if n.op == "cast":
        return _as(arg[0], src[0], at["to"])
    if n.op == "nonzero":
        x = arg[0]
        return Val(np.where(x.v == 0, np.ones((), x.v.dtype), x.v), x.e)
    if n.op == "where":
        c, x, y = arg
        t = n.dtype
        x, y = _as(x, src[1], t), _as(y, src[2], t)
        e = np.where(np.isinf(c.e), np.inf, np.where(c.v, x.e, y.e))
        return Val(np.where(c.v, x.v, y.v), e)
    if n.op == "fma":
        t = n.dtype
        x, y, z = (_as(v, s, t) for v, s in zip(arg, src))
        v = R.fma(x.v, y.v, z.v, t)
        if not (x.e.any() or y.e.any() or z.e.any()):
            return Val(v)
        ax, ay = np.abs(np.asarray(x.v, float)), np.abs(np.asarray(y.v, float))
        return _finish(v, ax * y.e + ay * x.e + x.e * y.e + z.e + _ulp(v, t), t)
    if n.op == "dot_fma":
        return _dot_fma(arg, n.dtype)
    if n.op == "reduce":
        from .reductions import reduce
        return reduce(arg[0], src[0], n, mode)
    if n.op == "scan":
        from .reductions import scan
        return scan(arg[0], src[0], n, mode)
    if n.op in ("convert",):
        return arg[0]
    if n.op == "expand":
        x = arg[0]
        v = np.broadcast_to(np.expand_dims(x.v, at["axis"]), n.shape)
        return Val(v, np.broadcast_to(np.expand_dims(x.e, at["axis"]), n.shape))
    if n.op == "reshape":
        return Val(arg[0].v.reshape(n.shape), arg[0].e.reshape(n.shape))
    if n.op == "permute":
        return Val(np.transpose(arg[0].v, at["dims"]), np.transpose(arg[0].e, at["dims"]))
    if n.op == "split":
        k = at["half"]
        return Val(arg[0].v[..., k].copy(), arg[0].e[..., k].copy())
    if n.op == "join":
        return Val(np.stack([arg[0].v, arg[1].v], -1), np.stack([arg[0].e, arg[1].e], -1))
    if n.op == "shared":
        return _shared(prog, at, arg, n.dtype)
    if n.op == "atomic_buf":
        return Val(np.array(inputs[n.name], copy=True))
    if n.op == "atomic":
        from .atomics_ref import atomic
        old, vals[n.args[0]] = atomic(prog, n, arg, mode)
        return old
    if n.op == "loop":
        acc = arg[0]
        for i in range(prog.n_iter):
            for step in at["steps"]:
                acc = _step(step, acc, n.dtype, vals, nodes, i)
        return acc
    if n.op == "branch":
        step = at["then"] if prog.flag > 0 else at["other"]
        return _step(step, arg[0], n.dtype, vals, nodes, None) if step else arg[0]
    raise ValueError(f"unknown fuzz op {n.op!r}")


def _views(idx: np.ndarray, steps, flag: int) -> np.ndarray:
    """The element numbers a view of the buffer reaches, arranged as the view."""
    for s in steps:
        if s[0] == "slice":
            _, start, length, dim = s
            idx = np.take(idx, np.arange(start, start + length), axis=dim)
        elif s[0] == "permute":
            idx = np.transpose(idx, s[1])
        elif s[0] == "index":
            idx = idx[flag if s[1] == "flag" else s[1]]
        else:
            idx = idx.reshape(s[1])
    return idx


def _accessed(idx: np.ndarray, acc, flag: int) -> np.ndarray:
    arm = acc["b"] if acc["b"] is not None and flag > 0 else acc["a"]
    return _views(_views(idx, arm, flag), acc["after"], flag)


def _shared(prog, at, arg, t: str) -> Val:
    """A tile stored into a buffer, perhaps partly overwritten through a view, read back
    through another: the buffer as a flat array of elements, each view as the element
    numbers it reaches (layouts place bytes; they never change what a view holds)."""
    x = arg[0]
    v, e = np.array(x.v, copy=True).reshape(-1), np.array(x.e, copy=True).reshape(-1)
    base = _views(np.arange(v.size).reshape(x.v.shape), at["views"], prog.flag)
    if at["write"] is not None:
        w = _accessed(base, at["write"], prog.flag)
        v[w], e[w] = arg[1].v, arg[1].e
    if at.get("loop") is not None:
        got = _loop(prog, at, arg, v, e, base, t)
        if got is not None:
            return got
    r = _accessed(base, at["read"], prog.flag)
    return Val(v[r], e[r])


def _loop(prog, at, arg, v, e, base, t: str) -> Val | None:
    """The loop's body run ``n_iter`` times over the buffer ``v`` (``e`` its bounds), in place
    (see fuzz/smem.py's ``_loop``): the node's value, or None where it is read from ``base``."""
    lp = at["loop"]
    views = [_views(_views(base, p, prog.flag), lp["after"], prog.flag) for p in lp["pos"]]
    k = len(views)
    cur = [0, 1 % k]   # the positions {v}_c and {v}_d hold
    loads = [op for op in lp["body"] if op[0] == "load"]
    acc = None
    if loads:
        w = views[cur[loads[0][1]]]
        acc = Val(v[w], e[w])
    for i in range(prog.n_iter):
        for op in lp["body"]:
            if op[0] == "load":
                w = views[cur[op[1]]]
                x = Val(v[w], e[w])
                acc = _binary("maximum", acc, x, t, t) if lp["combine"] == "max" else x
            elif op[0] == "store":
                w = views[cur[op[1]]]
                v[w], e[w] = arg[op[2]].v, arg[op[2]].e
            else:
                src, dst = views[cur[op[1]]], views[cur[op[2]]]
                v[dst], e[dst] = v[src].copy(), e[src].copy()
        cur = cur[::-1] if lp["move"] == "swap" else [(i + 1) % k, cur[1]]
    if lp["out"] == "acc":
        return acc
    if lp["out"] == "final":
        w = views[cur[0]]
        return Val(v[w], e[w])
    return None


def _step(step, acc: Val, t: str, vals, nodes, i) -> Val:
    fn, kind, x = step
    if kind == "node":
        xt, xv = nodes[x].dtype, vals[x]
    elif kind == "i":
        xt, xv = "int32", Val(np.int32(i))
    else:
        xt = literal_dtype(x, t)
        xv = lit_val(x, xt)
    p = promote(t, xt)
    if p == "int1" and fn in BOOL_AS_INT:
        p = "int32"
    r = _binary(fn, _as(acc, t, p), _as(xv, xt, p), p, p)
    return _as(r, p, t)


def _unary(fn, x: Val, t: str, mode: str) -> Val:
    if x.v.dtype == np.bool_ and fn in BOOL_AS_INT:
        x = Val(x.v.astype(np.int32), x.e)
    v = R.unary(fn, x.v, t)
    if fn in ("neg", "abs", "not"):
        return Val(v, x.e)
    approx = mode == "bounded" and fn not in ("floor", "ceil")
    if not x.e.any() and not approx:
        return Val(v)
    if fn in ("floor", "ceil"):
        xv = np.asarray(x.v, np.float64)
        same = R.unary(fn, xv - x.e, "float64") == R.unary(fn, xv + x.e, "float64")
        return Val(v, np.where(same, 0.0, np.inf))
    # math on an inexact operand: not decided; on an exact one, a GPU's instruction is close
    e = np.where(x.e > 0, np.inf, R.MATH_ULPS * _ulp(v, t) + R.math_error(fn, x.v, v, t))
    if fn in ("sin", "cos"):  # the approximate instructions lose accuracy far from zero
        e = np.where(np.abs(np.asarray(x.v, float)) > 100, np.inf, e + 1e-5 * (t != "float64"))
    return _finish(v, e, t)


def _dot_fma(arg, t: str) -> Val:
    """acc + A @ B as the chain along K in order, k = 0..K-1, each step one fma rounded to ``t``
    (integers: wrapping multiply and add). The bound: the inputs' errors through each product,
    plus one rounding of each partial sum."""
    a, b, c = arg
    m, k = a.v.shape
    v, e = c.v, np.array(c.e, float)
    exact = not (a.e.any() or b.e.any() or c.e.any())
    for kk in range(k):
        x = np.broadcast_to(a.v[:, kk:kk + 1], v.shape)
        y = np.broadcast_to(b.v[kk:kk + 1, :], v.shape)
        if is_float(t):
            v = R.fma(x, y, v, t)
        else:
            v = R.binary("add", R.binary("mul", x, y, t), v, t)
        if not exact:
            ex = np.broadcast_to(a.e[:, kk:kk + 1], v.shape)
            ey = np.broadcast_to(b.e[kk:kk + 1, :], v.shape)
            ax, ay = np.abs(np.asarray(x, float)), np.abs(np.asarray(y, float))
            e = e + ax * ey + ay * ex + ex * ey + _ulp(v, t)
    return Val(v) if exact else _finish(v, e, t)

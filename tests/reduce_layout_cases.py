"""Reductions and scans over arbitrary legal layouts, shared by the NVIDIA and AMD
layout tests: hypothesis strategies for the layouts (BlockedLayouts of rank 1-3 in every
order; DistributedLinearLayouts from random invertible GF(2) maps, with multi-bit,
zero and repeated lane/warp bases), the kernels (one per operation, the tile loaded and
the result stored directly in the layouts under test), and the inputs/checks.

Values are small multiples of 1/4, so float sums are exact in any order and results
compare exactly on every backend."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

import gluon_trace as gt
from gluon_trace import language as gl


# -- kernels ---------------------------------------------------------------------------------

def offsets(shape, layout):
    """Row-major element offsets of a tile of ``shape`` in ``layout`` (trace time)."""
    r = len(shape)
    off = None
    for d in range(r):
        lay = layout
        for e in reversed(range(r)):
            if e != d:
                lay = gl.SliceLayout(e, lay)
        a = gl.arange(0, shape[d], layout=lay)
        for e in range(r):
            if e != d:
                a = gl.expand_dims(a, e)
        term = a * math.prod(shape[d + 1:])
        off = term if off is None else off + term
    return off


def _first_nonzero(a, b):  # associative, not commutative
    return gl.where(a != 0, a, b)


def _max(a, b):
    return gl.maximum(a, b)


REDUCTIONS = {
    "sum": lambda x, ax: gl.sum(x, axis=ax),
    "max": lambda x, ax: gl.max(x, axis=ax),
    "argmax": lambda x, ax: gl.argmax(x, axis=ax),
    "first_nonzero": lambda x, ax: gl.reduce(x, ax, _first_nonzero),
}
SCANS = {
    "cumsum": lambda x, ax, rev: gl.cumsum(x, axis=ax, reverse=rev),
    "cummax": lambda x, ax, rev: gl.associative_scan(x, ax, _max, reverse=rev),
    "first_nonzero": lambda x, ax, rev: gl.associative_scan(x, ax, _first_nonzero, reverse=rev),
}


@gt.jit
def reduce_kernel(out_ptr, in_ptr, LAYOUT: gl.constexpr, SHAPE: gl.constexpr, AXIS: gl.constexpr,
                  OP: gl.constexpr):
    x = gl.load(in_ptr + offsets(SHAPE, LAYOUT))
    y = REDUCTIONS[OP](x, AXIS)
    out_shape = SHAPE[:AXIS] + SHAPE[AXIS + 1:]
    if out_shape:
        gl.store(out_ptr + offsets(out_shape, gl.SliceLayout(AXIS, LAYOUT)), y)
    else:
        gl.store(out_ptr, y)


@gt.jit
def scan_kernel(out_ptr, in_ptr, LAYOUT: gl.constexpr, SHAPE: gl.constexpr, AXIS: gl.constexpr,
                OP: gl.constexpr, REVERSE: gl.constexpr):
    off = offsets(SHAPE, LAYOUT)
    gl.store(out_ptr + off, SCANS[OP](gl.load(in_ptr + off), AXIS, REVERSE))


# -- layouts ---------------------------------------------------------------------------------

def _log2(n):
    return n.bit_length() - 1


@st.composite
def shapes(draw, max_bits=9):
    rank = draw(st.integers(1, 3))
    total = draw(st.integers(1, max_bits))
    return tuple(draw(split(total, range(rank))))


@st.composite
def split(draw, total_log, dims_log):
    """Spread 2**total_log over len(dims_log) dimensions (powers of two)."""
    out = [0] * len(dims_log)
    for _ in range(total_log):
        out[draw(st.integers(0, len(dims_log) - 1))] += 1
    return [1 << b for b in out]


@st.composite
def blocked_layouts(draw, shape, lanes_log, warps_log):
    rank = len(shape)
    spt = [1 << draw(st.integers(0, min(2, _log2(s)))) for s in shape]
    tpw = draw(split(lanes_log, shape))
    wpc = draw(split(warps_log, shape))
    order = draw(st.permutations(range(rank)))
    return gl.BlockedLayout(spt, tpw, wpc, list(order))


def _unpack(v, shape):
    out = []
    for s in reversed(shape):
        b = _log2(s)
        out.append(v & ((1 << b) - 1))
        v >>= b
    return list(reversed(out))


@st.composite
def linear_layouts(draw, shape, lanes_log, warps_log):
    """A random invertible map of the tile's coordinate bits, its columns dealt out to
    registers, lanes and warps; lane/warp slots beyond them hold zero (broadcast) or a
    repeat of a combination of the others (an element owned twice)."""
    n = sum(_log2(s) for s in shape)
    cols = []
    for i in range(n):  # unit vectors, then random column additions: invertible, bits mixed
        cols.append(1 << i)
    for _ in range(draw(st.integers(0, 2 * n))):
        i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        if i != j:
            cols[i] ^= cols[j]
    cols = draw(st.permutations(cols))
    slots = lanes_log + warps_log
    nr = draw(st.integers(max(0, n - slots), n))
    regs, rest = list(cols[:nr]), list(cols[nr:])
    if draw(st.integers(0, 5)) == 0:  # now and then a register holding a copy of another
        regs.insert(draw(st.integers(0, len(regs))), draw(st.sampled_from(regs)) if regs else 0)
    spare = slots - len(rest)
    for _ in range(spare):
        if draw(st.booleans()) or not cols:
            rest.append(0)
        else:
            rest.append(draw(st.sampled_from(cols)) ^ (draw(st.sampled_from(cols)) if draw(st.booleans()) else 0))
    rest = draw(st.permutations(rest))
    to = lambda vs: [_unpack(v, shape) for v in vs]  # noqa: E731
    return gl.DistributedLinearLayout(reg_bases=to(regs), lane_bases=to(rest[:lanes_log]),
                                      warp_bases=to(rest[lanes_log:]), shape=list(shape))


@st.composite
def cases(draw, lanes_log, scan: bool, max_bits=9):
    """(layout, shape, axis, op, reverse, num_warps, dtype)"""
    shape = draw(shapes(max_bits))
    warps_log = draw(st.integers(0, 3))
    kind = draw(st.sampled_from(["blocked", "linear"]))
    make = blocked_layouts if kind == "blocked" else linear_layouts
    layout = draw(make(shape, lanes_log, warps_log))
    axis = draw(st.integers(0, len(shape) - 1))
    op = draw(st.sampled_from(sorted(SCANS if scan else REDUCTIONS)))
    reverse = draw(st.booleans()) if scan else None
    dtype = draw(st.sampled_from([np.int32, np.float32]))
    return layout, shape, axis, op, reverse, 1 << warps_log, dtype


# -- running ---------------------------------------------------------------------------------

def inputs(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    # many zeros (first_nonzero has work to do) and repeated values (argmax's tie-break)
    x = rng.integers(-6, 7, size=shape) * (rng.random(shape) < 0.7)
    return (x / 4 if dtype == np.float32 else x).astype(dtype)


def launch_args(case, seed):
    """(kernel, [out, in], constexprs) for one case; ``out`` starts as -99 everywhere."""
    layout, shape, axis, op, reverse, nw, dtype = case
    x = inputs(shape, dtype, seed)
    if reverse is not None:
        out = np.full(shape, -99, x.dtype)
        return scan_kernel, [out, x], dict(LAYOUT=layout, SHAPE=shape, AXIS=axis, OP=op, REVERSE=reverse)
    out_shape = shape[:axis] + shape[axis + 1:]
    out = np.full(out_shape or (1,), -99, np.int32 if op == "argmax" else x.dtype)
    return reduce_kernel, [out, x], dict(LAYOUT=layout, SHAPE=shape, AXIS=axis, OP=op)


def reference(case, seed, target=None):
    """The interpreter's result (traced for ``target``'s warp size), checked against numpy."""
    layout, shape, axis, op, reverse, nw, dtype = case
    kernel, args, cx = launch_args(case, seed)
    kw = dict(target=target) if target else {}
    kernel[(1,)](*args, **cx, num_warps=nw, backend="interpreter", **kw)
    out, x = args
    np.testing.assert_array_equal(out.reshape(-1), _numpy(op, x, axis, reverse).reshape(-1),
                                  err_msg="interpreter vs numpy")
    return out


def _numpy(op, x, axis, reverse):
    """numpy's answer; ``reverse`` is None for a reduction."""
    if reverse is None:
        if op == "sum":
            return x.sum(axis)
        if op == "max":
            return x.max(axis)
        if op == "argmax":
            return x.argmax(axis).astype(np.int32)
        nz = x != 0
        idx = np.where(nz.any(axis, keepdims=True), nz.argmax(axis, keepdims=True), 0)
        return np.take_along_axis(x, idx, axis).squeeze(axis)
    xs = np.moveaxis(np.flip(x, axis) if reverse else x, axis, 0)
    if op == "cumsum":
        ys = np.cumsum(xs, 0, dtype=x.dtype)
    elif op == "cummax":
        ys = np.maximum.accumulate(xs, 0)
    else:
        # reversed, the suffix is still combined left to right: y[i] = x[i] (+) y[i+1]
        ys, acc = np.empty_like(xs), np.zeros_like(xs[0])
        for i in range(xs.shape[0]):
            acc = np.where(acc != 0, acc, xs[i]) if not reverse else np.where(xs[i] != 0, xs[i], acc)
            ys[i] = acc
    ys = np.moveaxis(ys, 0, axis)
    return np.flip(ys, axis) if reverse else ys

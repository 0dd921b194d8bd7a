"""Reductions and scans on every axis of 1-D and 2-D tiles, against numpy."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

L2 = gl.BlockedLayout([1, 2], [4, 8], [2, 1], [1, 0])


@gt.jit
def reduce_2d(out_ptr, in_ptr, M: gl.constexpr, N: gl.constexpr, AXIS: gl.constexpr,
              KIND: gl.constexpr):
    rows = gl.arange(0, M, layout=gl.SliceLayout(1, L2))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, L2))
    x = gl.load(in_ptr + rows[:, None] * N + cols[None, :])
    if KIND == "sum":
        r = gl.sum(x, axis=AXIS)
    elif KIND == "max":
        r = gl.max(x, axis=AXIS)
    elif KIND == "min":
        r = gl.min(x, axis=AXIS)
    elif KIND == "argmax":
        r = gl.argmax(x, axis=AXIS)
    elif KIND == "argmin":
        r = gl.argmin(x, axis=AXIS)
    else:  # a generic reduce with a Python combine function: sum of squares-ish
        r = gl.reduce(x, AXIS, lambda a, b: a + b * 0 + gl.maximum(b, 0))
    idx = rows if AXIS == 1 else cols
    gl.store(out_ptr + idx, r.to(out_ptr.dtype.element))


NP = {"sum": np.sum, "max": np.max, "min": np.min, "argmax": np.argmax, "argmin": np.argmin}


@pytest.mark.parametrize("kind", ["sum", "max", "min", "argmax", "argmin", "custom"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("shape", [(8, 16), (32, 4), (1, 64)])
def test_reduce_2d(kind, axis, shape, rng):
    m, n = shape
    x = rng.standard_normal(shape).astype(np.float32)
    if kind.startswith("arg"):
        x = np.round(x * 2)  # ties: the first index must win
    out = np.full(shape[1 - axis], np.nan, np.float32)
    reduce_2d[(1,)](out, x, M=m, N=n, AXIS=axis, KIND=kind, num_warps=2)
    if kind == "custom":
        # combine(a, b) = a + max(b, 0) over adjacent pairs: a tree, so compute it as one
        want = np.apply_along_axis(_tree_custom, axis, x)
    else:
        want = NP[kind](x, axis=axis)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def _tree_custom(v):
    v = list(v)
    while len(v) > 1:
        v = [v[i] + max(v[i + 1], 0) for i in range(0, len(v), 2)]
    return v[0]


L1 = gl.BlockedLayout([2], [32], [1], [0])


@gt.jit
def reduce_all(out_ptr, in_ptr, N: gl.constexpr):
    offs = gl.arange(0, N, layout=L1)
    x = gl.load(in_ptr + offs)
    gl.store(out_ptr, gl.sum(x))
    gl.store(out_ptr + 1, gl.max(x, axis=0, keep_dims=True).to(gl.float32) * 0 +
             gl.max(x, axis=0))


def test_reduce_whole_tile_and_keep_dims(rng):
    x = rng.standard_normal(256).astype(np.float32)
    out = np.full(2, np.nan, np.float32)
    reduce_all[(1,)](out, x, N=256, num_warps=1)
    # A float32 sum of depth d (here at most 9 levels of adds) errs by at most about d*eps times
    # the sum of magnitudes, not times the result, which can be near zero (CI drew -0.0436).
    np.testing.assert_allclose(out[0], x.sum(dtype=np.float64), rtol=0,
                               atol=16 * np.finfo(np.float32).eps * np.abs(x).sum())
    assert out[1] == x.max()


@gt.jit
def int_sum(out_ptr, in_ptr, N: gl.constexpr):
    offs = gl.arange(0, N, layout=L1)
    x = gl.load(in_ptr + offs)
    gl.store(out_ptr, gl.sum(x, axis=0))


def test_int8_sum_accumulates_in_int32(rng):
    x = rng.integers(-128, 127, 128).astype(np.int8)
    out = np.zeros(1, np.int32)
    int_sum[(1,)](out, x, N=128, num_warps=1)
    assert out[0] == x.astype(np.int32).sum()


@gt.jit
def scan_2d(out_ptr, in_ptr, M: gl.constexpr, N: gl.constexpr, AXIS: gl.constexpr,
            REV: gl.constexpr):
    rows = gl.arange(0, M, layout=gl.SliceLayout(1, L2))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, L2))
    offs = rows[:, None] * N + cols[None, :]
    x = gl.load(in_ptr + offs)
    gl.store(out_ptr + offs, gl.cumsum(x, axis=AXIS, reverse=REV))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("rev", [False, True])
def test_cumsum(axis, rev, rng):
    x = rng.integers(-50, 50, (8, 32)).astype(np.int32)
    out = np.full_like(x, -1)
    scan_2d[(1,)](out, x, M=8, N=32, AXIS=axis, REV=rev, num_warps=2)
    want = np.flip(np.cumsum(np.flip(x, axis), axis), axis) if rev else np.cumsum(x, axis)
    np.testing.assert_array_equal(out, want)


@gt.jit
def scan_affine(out_ptr, a_ptr, b_ptr, N: gl.constexpr):
    # x_i = a_i * x_{i-1} + b_i: an associative but non-commutative combine
    offs = gl.arange(0, N, layout=L1)
    a = gl.load(a_ptr + offs)
    b = gl.load(b_ptr + offs)

    def combine(a1, b1, a2, b2):
        return a1 * a2, b1 * a2 + b2

    _, x = gl.associative_scan((a, b), 0, combine)
    gl.store(out_ptr + offs, x)


def test_noncommutative_scan_keeps_order(rng):
    a = rng.uniform(0.5, 1.0, 64).astype(np.float64)
    b = rng.standard_normal(64)
    out = np.full(64, np.nan)
    scan_affine[(1,)](out, a, b, N=64, num_warps=1)
    want, x = [], 0.0
    for ai, bi in zip(a, b):
        x = ai * x + bi
        want.append(x)
    # the scan combines in a tree, not left to right: ulp-sized differences of terms of size ~3,
    # absolute where the running value passes near zero
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-13)

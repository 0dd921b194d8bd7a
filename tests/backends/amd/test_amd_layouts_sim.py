"""Random 2-D blocked layouts -- tiles smaller than the layout (copies in lanes and
warps), larger (repeats in registers), any order -- through reductions on both axes,
argmax, convert_layout, reshape/permute and scans, run on the simulator for each
target (the random layouts on amdsim_races: two waves storing one LDS byte unordered fail). Values are small integers, so every summation order gives the same floats."""
import numpy as np
import pytest
from hypothesis import Phase, given, reject, settings
from hypothesis import strategies as st

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backends.amd.assembler import find_toolchain

import amdsim
import amdsim_races


def make(p, nw):
    spt0, spt1, t0, w0, order = p
    tpw = gl.threads_per_warp()
    t0 = min(t0, tpw.bit_length() - 1)
    w0 = min(w0, nw.bit_length() - 1)
    return gl.BlockedLayout([spt0, spt1], [1 << t0, tpw >> t0], [1 << w0, nw >> w0], list(order))


@gt.jit
def layouts_kernel(o_sum0, o_max1, o_conv, o_cum, o_arg, o_trans, x_ptr,
                   M: gl.constexpr, N: gl.constexpr, A: gl.constexpr, B: gl.constexpr,
                   NW: gl.constexpr):
    LA, LB = make(A, NW), make(B, NW)
    rows = gl.arange(0, M, layout=gl.SliceLayout(1, LA))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, LA))
    r2, c2 = gl.expand_dims(rows, 1), gl.expand_dims(cols, 0)
    x = gl.load(x_ptr + r2 * N + c2)
    gl.store(o_sum0 + cols, gl.sum(x, axis=0))
    gl.store(o_max1 + rows, gl.max(x, axis=1))
    gl.store(o_arg + rows, gl.argmax(x, axis=1))
    y = gl.convert_layout(x, LB)
    rb = gl.expand_dims(gl.arange(0, M, layout=gl.SliceLayout(1, LB)), 1)
    cb = gl.expand_dims(gl.arange(0, N, layout=gl.SliceLayout(0, LB)), 0)
    gl.store(o_conv + rb * N + cb, y * 2.0)
    gl.store(o_cum + rb * N + cb, gl.cumsum(y, axis=1))
    t = gl.permute(x, (1, 0))
    gl.store(o_trans + gl.permute(c2 * M + r2, (1, 0)), t)


layout_params = st.tuples(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]),
                          st.integers(0, 6), st.integers(0, 2), st.sampled_from([(0, 1), (1, 0)]))


@pytest.fixture(scope="module", autouse=True)
def _toolchain(tmp_path_factory):
    import os
    os.environ.setdefault("GLUON_TRACE_CACHE_DIR", str(tmp_path_factory.mktemp("amdcache")))
    try:
        find_toolchain()
    except gt.CompileError as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
@settings(max_examples=8, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(m=st.sampled_from([2, 8, 32]), n=st.sampled_from([4, 16, 64]), a=layout_params,
       b=layout_params, nw=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**16))
def test_random_layouts(target, m, n, a, b, nw, seed):
    x = np.random.default_rng(seed).integers(-8, 8, m * n).astype(np.float32)
    outs = [np.zeros(n, np.float32), np.zeros(m, np.float32), np.zeros(m * n, np.float32),
            np.zeros(m * n, np.float32), np.zeros(m, np.int32), np.zeros(m * n, np.float32)]
    tk = layouts_kernel.trace(*outs, x, M=m, N=n, A=a, B=b, NW=nw, num_warps=nw, target=target)
    try:
        # strict LDS races: waves holding copies must leave the scratch to one of them
        amdsim_races.simulate(tk, target, (1,), outs + [x])
    except gt.CompileError as e:
        if "VGPRs" not in str(e):
            raise
        reject()  # a layout holding a whole 64-wide row per thread: too many registers
    X = x.reshape(m, n)
    np.testing.assert_array_equal(outs[0], X.sum(0))
    np.testing.assert_array_equal(outs[1], X.max(1))
    np.testing.assert_array_equal(outs[2], (X * 2).ravel())
    np.testing.assert_array_equal(outs[3], np.cumsum(X, 1).ravel())
    np.testing.assert_array_equal(outs[4], X.argmax(1))
    np.testing.assert_array_equal(outs[5], X.T.ravel())


@gt.jit
def reshape_kernel(out_ptr, x_ptr, M: gl.constexpr, N: gl.constexpr):
    L = gl.BlockedLayout([1, 2], [gl.threads_per_warp() // 8, 8], [2, 1], [1, 0])
    r = gl.expand_dims(gl.arange(0, M, layout=gl.SliceLayout(1, L)), 1)
    c = gl.expand_dims(gl.arange(0, N, layout=gl.SliceLayout(0, L)), 0)
    x = gl.load(x_ptr + r * N + c)
    flat = gl.reshape(x, [M * N])
    L1 = gl.BlockedLayout([2], [gl.threads_per_warp()], [2], [0])
    flat = gl.convert_layout(flat, L1)
    gl.store(out_ptr + gl.arange(0, M * N, layout=L1), flat + 1.0)


@pytest.mark.parametrize("target", ["gfx90a", "gfx1100"])
def test_reshape(target):
    m, n = 16, 32
    x = np.arange(m * n, dtype=np.float32)
    out = np.zeros(m * n, np.float32)
    tk = reshape_kernel.trace(out, x, M=m, N=n, num_warps=2, target=target)
    amdsim.simulate(tk, target, (1,), [out, x])
    np.testing.assert_array_equal(out, x + 1)


@gt.jit
def reverse_scan_kernel(o1, o2, x_ptr, BLOCK: gl.constexpr):
    L = gl.BlockedLayout([2], [gl.threads_per_warp()], [2], [0])
    offs = gl.arange(0, BLOCK, layout=L)
    x = gl.load(x_ptr + offs)
    gl.store(o1 + offs, gl.cumsum(x, axis=0, reverse=True))
    i = offs.to(gl.float32)
    gl.store(o2 + gl.argmin(x, axis=0), gl.min(x, axis=0) + gl.sum(i, axis=0) * 0.0)


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_reverse_scan_and_argmin(target):
    n = 512
    x = np.random.default_rng(3).integers(-50, 50, n).astype(np.float32)
    o1, o2 = np.zeros(n, np.float32), np.full(n, 123.0, np.float32)
    tk = reverse_scan_kernel.trace(o1, o2, x, BLOCK=n, num_warps=2, target=target)
    amdsim.simulate(tk, target, (1,), [o1, o2, x])
    np.testing.assert_array_equal(o1, np.cumsum(x[::-1])[::-1])
    assert o2[x.argmin()] == x.min() and (np.delete(o2, x.argmin()) == 123.0).all()

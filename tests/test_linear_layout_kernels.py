"""Kernels on DistributedLinearLayouts: slices, expand_dims and reductions of them."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl


@gt.jit
def row_sum(out_ptr, in_ptr, LAYOUT: gl.constexpr, R: gl.constexpr, C: gl.constexpr):
    r = gl.arange(0, R, layout=gl.SliceLayout(1, LAYOUT))
    c = gl.arange(0, C, layout=gl.SliceLayout(0, LAYOUT))
    x = gl.load(in_ptr + gl.expand_dims(r, 1) * C + gl.expand_dims(c, 0))
    gl.store(out_ptr + r, gl.sum(x, axis=1))


# a lane-broadcast linear layout for a 1x2 tile: found by hypothesis in notebook 04 on the H100
TINY = gl.DistributedLinearLayout(reg_bases=[], lane_bases=[[0, 1], [0, 0], [0, 0], [0, 0], [0, 0]],
                                  warp_bases=[[0, 0]], shape=[1, 2])
WIDE = gl.DistributedLinearLayout(reg_bases=[[0, 1], [2, 0]], lane_bases=[[0, 2], [0, 4], [0, 8], [1, 0],
                                                                          [4, 0]],
                                  warp_bases=[[8, 0]], shape=[16, 16])


@pytest.mark.parametrize("layout,shape", [(TINY, (1, 2)), (WIDE, (16, 16))])
def test_row_sum_on_linear_layouts(layout, shape, rng):
    x = rng.integers(-1000, 1000, shape).astype(np.int32)
    out = np.full(shape[0], -1, np.int32)
    row_sum[(1,)](out, x, LAYOUT=layout, R=shape[0], C=shape[1], num_warps=2)
    assert np.array_equal(out, x.sum(1))
    k = row_sum.trace(gl.pointer(gl.int32), gl.pointer(gl.int32), LAYOUT=layout, R=shape[0], C=shape[1],
                      num_warps=2)
    try:
        k.compile("sm_90")  # emitted and assembled: the backend agrees on every layout here
    except gt.CompileError as e:
        if "ptxas" in str(e) and "found" in str(e):
            pytest.skip(f"no ptxas here: {e}")
        raise

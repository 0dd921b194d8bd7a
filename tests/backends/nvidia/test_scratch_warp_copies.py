"""Reduce and scan across warps out of a layout whose warps hold copies of each other's elements:
one warp of each set of copies writes the partials' shared scratch. Every warp of a set stored
the same partials to the same slots in the same instruction, with nothing ordering the stores
(a419c62's race, in the reduce/scan scratch rather than convert_layout's) -- plain stores of
one value, harmless on the hardware in practice but a data race by the PTX memory model and a
hazard to compute-sanitizer. ptxsim_races reports it once it compares one instruction's writes
with each other (fuzz seeds 1000 and 1030 of the small preset). Against the interpreter.
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim_races  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402


def _offsets(shape, layout):
    """Row-major offsets of a 2-D tile in ``layout``."""
    rows = gl.arange(0, shape[0], layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, shape[1], layout=gl.SliceLayout(0, layout))
    return gl.expand_dims(rows, 1) * shape[1] + gl.expand_dims(cols, 0)


@gt.jit
def reduce_rows(x, y, M: gl.constexpr, N: gl.constexpr, L: gl.constexpr):
    v = gl.load(x + _offsets([M, N], L))
    s = gl.sum(v, axis=0)
    gl.store(y + gl.arange(0, N, layout=gl.SliceLayout(0, L)), s)


@gt.jit
def scan_rows(x, y, M: gl.constexpr, N: gl.constexpr, L: gl.constexpr):
    o = _offsets([M, N], L)
    gl.store(y + o, gl.cumsum(gl.load(x + o), axis=0))


def _lin(regs, lanes, warps, shape):
    return gl.DistributedLinearLayout(reg_bases=regs, lane_bases=lanes, warp_bases=warps, block_bases=[], shape=shape)


CASES = {  # name: (kernel, M, N, layout, warps)
    # fuzz seed 1000: warps 2 along the rows, 4 along 16 columns one warp already covers
    "reduce, blocked, four warps copies": (reduce_rows, 16, 16, gl.BlockedLayout([2, 2], [4, 8], [2, 4], [1, 0]), 8),
    "reduce, a zero warp basis": (reduce_rows, 8, 32, _lin([[0, 1]], [[0, 2], [0, 4], [0, 8], [0, 16], [1, 0]],
                                                           [[0, 0], [2, 0], [4, 0]], [8, 32]), 8),
    # fuzz seed 1030: cumsum along the rows, the warp totals' scratch (no lanes along the axis)
    "scan, a zero warp basis": (scan_rows, 2, 32, _lin([[0, 1]], [[0, 2], [0, 4], [0, 8], [0, 16], [0, 0]],
                                                       [[0, 0], [1, 0]], [2, 32]), 4),
    "scan, lanes and warps copies": (scan_rows, 4, 16, _lin([[0, 1]], [[1, 0], [0, 2], [0, 4], [0, 8], [0, 0]],
                                                            [[0, 0], [2, 0]], [4, 16]), 4),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_one_warp_of_each_copy_set_writes_the_partials(name, dtype):
    kernel, M, N, lay, warps = CASES[name]
    x = (np.arange(M * N) % 13 - 5).astype(dtype)
    out = (N,) if kernel is reduce_rows else (M * N,)
    args = [x, np.full(out, -1, dtype)]
    text, _, smem = emit(kernel.trace(*args, M=M, N=N, L=lay, num_warps=warps, target="sm_90").graph, "sm_90")
    ref = [a.copy() for a in args]
    kernel[(1,)](*ref, M=M, N=N, L=lay, num_warps=warps, backend="interpreter", target="sm_90")
    ptxsim_races.run(text, (1, 1, 1), args, smem)   # raises on two warps storing one slot unordered
    want = x.reshape(M, N).sum(0) if kernel is reduce_rows else x.reshape(M, N).cumsum(0).reshape(-1)
    assert np.array_equal(ref[1], want) and np.array_equal(args[1], want)

"""Reduce and scan out of layouts whose warps (waves) hold copies of each other's elements -- a
zero warp basis, one repeating a lane's, or more warps than the tile needs -- shared by the
NVIDIA and AMD scratch tests: one warp of each set of copies must write the partials' shared
scratch (every warp of a set storing the same values to the same slots, unordered, is a data
race, if of one value). Layouts are functions of the wave size; their lane bases are padded
with zero (copying) lanes up to it."""
from __future__ import annotations

import numpy as np

import gluon_trace as gt
from gluon_trace import language as gl


def offsets(shape, layout):
    """Row-major offsets of a 2-D tile in ``layout``."""
    rows = gl.arange(0, shape[0], layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, shape[1], layout=gl.SliceLayout(0, layout))
    return gl.expand_dims(rows, 1) * shape[1] + gl.expand_dims(cols, 0)


@gt.jit
def reduce_rows(x, y, M: gl.constexpr, N: gl.constexpr, L: gl.constexpr):
    v = gl.load(x + offsets([M, N], L))
    gl.store(y + gl.arange(0, N, layout=gl.SliceLayout(0, L)), gl.sum(v, axis=0))


@gt.jit
def scan_rows(x, y, M: gl.constexpr, N: gl.constexpr, L: gl.constexpr):
    o = offsets([M, N], L)
    gl.store(y + o, gl.cumsum(gl.load(x + o), axis=0))


def lin(regs, lanes, warps, shape, wave):
    """A linear layout whose lanes past ``lanes`` (up to the wave's) hold copies."""
    pad = [[0] * len(shape)] * (wave.bit_length() - 1 - len(lanes))
    return gl.DistributedLinearLayout(reg_bases=regs, lane_bases=lanes + pad, warp_bases=warps, block_bases=[],
                                      shape=shape)


REDUCE_SCAN = {  # name: (kernel, M, N, layout(wave), warps)
    # fuzz seed 1000 (small preset): warps 2 along the rows, 4 along 16 columns one warp already covers
    "reduce, blocked, warps copies": (reduce_rows, 16, 16,
                                      lambda w: gl.BlockedLayout([2 if w == 32 else 1, 2], [w // 8, 8], [2, 4], [1, 0]), 8),
    "reduce, a zero warp basis": (reduce_rows, 8, 32, lambda w: lin(
        [[0, 1]], [[0, 2], [0, 4], [0, 8], [0, 16], [1, 0]], [[0, 0], [2, 0], [4, 0]], [8, 32], w), 8),
    # the axis's bits in a warp, a lane, a warp: an order-sensitive sum (float) reduces the first
    # warp bit, then the lane, then the second warp bit -- its scratch written by warps that the
    # first step left holding one partial
    "reduce, warp then lane then warp": (reduce_rows, 8, 32, lambda w: lin(
        [[0, 16]] if w == 32 else [], [[2, 0], [0, 1], [0, 2], [0, 4], [0, 8]] + ([[0, 16]] if w == 64 else []),
        [[1, 0], [4, 0]], [8, 32], w), 4),
    # fuzz seed 1030: cumsum along the rows, the warp totals' scratch (no lanes along the axis)
    "scan, a zero warp basis": (scan_rows, 2, 32, lambda w: lin(
        [[0, 1]], [[0, 2], [0, 4], [0, 8], [0, 16]], [[0, 0], [1, 0]], [2, 32], w), 4),
    "scan, lanes and warps copies": (scan_rows, 4, 16, lambda w: lin(
        [[0, 1]], [[1, 0], [0, 2], [0, 4], [0, 8]], [[0, 0], [2, 0]], [4, 16], w), 4),
    "scan, a warp repeating a lane": (scan_rows, 4, 16, lambda w: lin(
        [[0, 1]], [[1, 0], [0, 2], [0, 4], [0, 8]], [[1, 0], [2, 0]], [4, 16], w), 4),
}


def case(name, wave, dtype):
    """(kernel, its constexprs, warps, fresh arguments, the expected output) of REDUCE_SCAN[name]:
    small integers, so float sums are exact in any order."""
    kernel, M, N, lay, warps = REDUCE_SCAN[name]
    x = (np.arange(M * N) % 13 - 5).astype(dtype)
    out = (N,) if kernel is reduce_rows else (M * N,)
    want = x.reshape(M, N).sum(0) if kernel is reduce_rows else x.reshape(M, N).cumsum(0).reshape(-1)
    return kernel, dict(M=M, N=N, L=lay(wave)), warps, (lambda: [x.copy(), np.full(out, -1, dtype)]), want

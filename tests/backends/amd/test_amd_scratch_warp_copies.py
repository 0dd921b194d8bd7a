"""Reduce, scan and convert_layout out of layouts whose waves hold copies of each other's
elements (a zero warp basis, or one repeating an XOR of earlier bases: more waves than the tile
needs): one wave of each set of copies writes the LDS scratch. Every wave of a set stored the
same values to the same bytes with no s_barrier ordering the stores -- a data race, if of one
value (the NVIDIA backend's d6a4536 and a419c62). amdsim's own check accepts a byte rewritten
with the value it holds; amdsim_races reports it. On the race-checking simulator against the
interpreter, for wave32 (gfx1100) and wave64 (gfx942); the NVIDIA tests' layouts, their lane
bases padded with zero (copying) lanes up to the wave."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

import amdsim_races

pytestmark = pytest.mark.usefixtures("amd_toolchain")

TARGETS = {"gfx1100": 32, "gfx942": 64}


def _offsets(shape, layout):
    """Row-major offsets of a 2-D tile in ``layout``."""
    rows = gl.arange(0, shape[0], layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, shape[1], layout=gl.SliceLayout(0, layout))
    return gl.expand_dims(rows, 1) * shape[1] + gl.expand_dims(cols, 0)


@gt.jit
def reduce_rows(x, y, M: gl.constexpr, N: gl.constexpr, L: gl.constexpr):
    v = gl.load(x + _offsets([M, N], L))
    gl.store(y + gl.arange(0, N, layout=gl.SliceLayout(0, L)), gl.sum(v, axis=0))


@gt.jit
def scan_rows(x, y, M: gl.constexpr, N: gl.constexpr, L: gl.constexpr):
    o = _offsets([M, N], L)
    gl.store(y + o, gl.cumsum(gl.load(x + o), axis=0))


@gt.jit
def convert(x, y, A: gl.constexpr, B: gl.constexpr):
    w = gl.convert_layout(gl.load(x + gl.arange(0, 4, A)), B)
    gl.store(y + gl.arange(0, 4, B), w)


def _lin(regs, lanes, warps, shape, wave):
    """A linear layout whose lanes past ``lanes`` (up to the wave's) hold copies."""
    pad = [[0] * len(shape)] * (wave.bit_length() - 1 - len(lanes))
    return gl.DistributedLinearLayout(reg_bases=regs, lane_bases=lanes + pad, warp_bases=warps, block_bases=[],
                                      shape=shape)


REDUCE_SCAN = {  # name: (kernel, M, N, layout(wave), waves)
    "reduce, blocked, waves copies": (reduce_rows, 16, 16,
                                      lambda w: gl.BlockedLayout([2 if w == 32 else 1, 2], [w // 8, 8], [2, 4], [1, 0]), 8),
    "reduce, a zero warp basis": (reduce_rows, 8, 32, lambda w: _lin(
        [[0, 1]], [[0, 2], [0, 4], [0, 8], [0, 16], [1, 0]], [[0, 0], [2, 0], [4, 0]], [8, 32], w), 8),
    # the axis's bits in a wave, a lane, a wave: an order-sensitive sum (float) reduces the first
    # wave bit, then the lane, then the second wave bit -- its scratch written by waves that the
    # first step left holding one partial
    "reduce, wave then lane then wave": (reduce_rows, 8, 32, lambda w: _lin(
        [[0, 16]] if w == 32 else [], [[2, 0], [0, 1], [0, 2], [0, 4], [0, 8]] + ([[0, 16]] if w == 64 else []),
        [[1, 0], [4, 0]], [8, 32], w), 4),
    "scan, a zero warp basis": (scan_rows, 2, 32, lambda w: _lin(
        [[0, 1]], [[0, 2], [0, 4], [0, 8], [0, 16]], [[0, 0], [1, 0]], [2, 32], w), 4),
    "scan, lanes and waves copies": (scan_rows, 4, 16, lambda w: _lin(
        [[0, 1]], [[1, 0], [0, 2], [0, 4], [0, 8]], [[0, 0], [2, 0]], [4, 16], w), 4),
    "scan, a wave repeating a lane": (scan_rows, 4, 16, lambda w: _lin(
        [[0, 1]], [[1, 0], [0, 2], [0, 4], [0, 8]], [[1, 0], [2, 0]], [4, 16], w), 4),
}


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("name", list(REDUCE_SCAN))
@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_one_wave_of_each_copy_set_writes_the_partials(target, name, dtype):
    kernel, M, N, lay, waves = REDUCE_SCAN[name]
    lay = lay(TARGETS[target])
    x = (np.arange(M * N) % 13 - 5).astype(dtype)
    out = (N,) if kernel is reduce_rows else (M * N,)
    args = [x, np.full(out, -1, dtype)]
    ref = [a.copy() for a in args]
    kernel[(1,)](*ref, M=M, N=N, L=lay, num_warps=waves, backend="interpreter", target=target)
    tk = kernel.trace(*args, M=M, N=N, L=lay, num_warps=waves, target=target)
    amdsim_races.simulate(tk, target, (1,), args)   # raises on two waves storing one byte unordered
    want = x.reshape(M, N).sum(0) if kernel is reduce_rows else x.reshape(M, N).cumsum(0).reshape(-1)
    assert np.array_equal(ref[1], want) and np.array_equal(args[1], want)


CONVERT = {  # 4 elements; (layout(wave), waves)
    "lane repeats a register, waves copies": (lambda w: _lin([[1]], [[2], [1]], [[0]], [4], w), 2),
    "register repeats a register, waves copies": (lambda w: _lin([[1], [1]], [[2]], [[0]], [4], w), 2),
    "a wave basis the XOR of two lanes'": (lambda w: _lin([[1]], [[1], [1], [0], [2]], [[0], [3], [0]], [4], w), 8),
}


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("name", list(CONVERT))
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_one_wave_of_each_copy_set_writes_the_exchange(target, name, dtype):
    lay, waves = CONVERT[name]
    lay = lay(TARGETS[target])
    dst = gl.BlockedLayout([4], [TARGETS[target]], [waves], [0])
    args = [np.arange(4, dtype=dtype) + 7, np.full(4, -1, dtype)]
    ref = [a.copy() for a in args]
    convert[(1,)](*ref, A=lay, B=dst, num_warps=waves, backend="interpreter", target=target)
    tk = convert.trace(*args, A=lay, B=dst, num_warps=waves, target=target)
    amdsim_races.simulate(tk, target, (1,), args)   # raises on two unordered writes of one byte
    assert np.array_equal(ref[1], [7, 8, 9, 10]) and np.array_equal(args[1], ref[1])

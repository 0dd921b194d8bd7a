"""Reduce, scan and convert_layout out of layouts whose waves hold copies of each other's
elements (a zero warp basis, or one repeating an XOR of earlier bases: more waves than the tile
needs): one wave of each set of copies writes the LDS scratch. Every wave of a set stored the
same values to the same bytes with no s_barrier ordering the stores -- a data race, if of one
value (the NVIDIA backend's d6a4536 and a419c62). amdsim's own check accepts a byte rewritten
with the value it holds; amdsim_races reports it. On the race-checking simulator against the
interpreter, for wave32 (gfx1100) and wave64 (gfx942); the reduce/scan cases are the NVIDIA
tests' (tests/warp_copy_cases.py)."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

import amdsim_races
from warp_copy_cases import REDUCE_SCAN, case, lin as _lin

pytestmark = pytest.mark.usefixtures("amd_toolchain")

TARGETS = {"gfx1100": 32, "gfx942": 64}


@gt.jit
def convert(x, y, A: gl.constexpr, B: gl.constexpr):
    w = gl.convert_layout(gl.load(x + gl.arange(0, 4, A)), B)
    gl.store(y + gl.arange(0, 4, B), w)


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("name", list(REDUCE_SCAN))
@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_one_wave_of_each_copy_set_writes_the_partials(target, name, dtype):
    kernel, kw, waves, args, want = case(name, TARGETS[target], dtype)
    ref, sim = args(), args()
    kernel[(1,)](*ref, **kw, num_warps=waves, backend="interpreter", target=target)
    tk = kernel.trace(*sim, **kw, num_warps=waves, target=target)
    amdsim_races.simulate(tk, target, (1,), sim)   # raises on two waves storing one byte unordered
    assert np.array_equal(ref[1], want) and np.array_equal(sim[1], want)


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

"""convert_layout out of a layout whose warps hold copies of each other's elements: one warp of
each set of copies writes the exchange's shared scratch. Every warp wrote its copies; where a lane
basis repeats a register's (or a register basis repeats one), a copy sits in another register of
another thread, so two warps wrote one byte in different instructions with nothing ordering them
(found by the atomics fuzz preset, seed 0: an atomic's old values converted to another layout).
The race-checking PTX simulator against the interpreter."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim_races  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402


def _lin(regs, lanes, warps):
    return gl.DistributedLinearLayout(reg_bases=regs, lane_bases=lanes, warp_bases=warps, block_bases=[], shape=[4])


LAYOUTS = {  # 4 elements; (layout, warps)
    "lane repeats a register, warps copies": (_lin([[1]], [[2], [1], [0], [0], [0]], [[0]]), 2),
    "register repeats a register, warps copies": (_lin([[1], [1]], [[2], [0], [0], [0], [0]], [[0]]), 2),
    "fuzz seed 0: a warp basis the XOR of two lanes'": (_lin([[1]], [[1], [1], [0], [2], [0]], [[0], [3], [0]]), 8),
}


@gt.jit
def convert(x, y, A: gl.constexpr, B: gl.constexpr):
    w = gl.convert_layout(gl.load(x + gl.arange(0, 4, A)), B)
    gl.store(y + gl.arange(0, 4, B), w)


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_one_warp_of_each_copy_set_writes_the_scratch(name, dtype):
    lay, warps = LAYOUTS[name]
    dst = gl.BlockedLayout([4], [32], [warps], [0])
    args = [np.arange(4, dtype=dtype) + 7, np.full(4, -1, dtype)]
    text, _, smem = emit(convert.trace(*args, A=lay, B=dst, num_warps=warps, target="sm_90").graph, "sm_90")
    ref = [a.copy() for a in args]
    convert[(1,)](*ref, A=lay, B=dst, num_warps=warps, backend="interpreter", target="sm_90")
    ptxsim_races.run(text, (1, 1, 1), args, smem)  # raises on two unordered writes of one byte
    assert np.array_equal(ref[1], [7, 8, 9, 10]) and np.array_equal(args[1], ref[1])

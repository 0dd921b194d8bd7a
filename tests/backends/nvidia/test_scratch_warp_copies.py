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

from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from warp_copy_cases import REDUCE_SCAN, case  # noqa: E402


@pytest.mark.parametrize("name", list(REDUCE_SCAN))
@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_one_warp_of_each_copy_set_writes_the_partials(name, dtype):
    kernel, kw, warps, args, want = case(name, 32, dtype)
    ref, sim = args(), args()
    text, _, smem = emit(kernel.trace(*sim, **kw, num_warps=warps, target="sm_90").graph, "sm_90")
    kernel[(1,)](*ref, **kw, num_warps=warps, backend="interpreter", target="sm_90")
    ptxsim_races.run(text, (1, 1, 1), sim, smem)   # raises on two warps storing one slot unordered
    assert np.array_equal(ref[1], want) and np.array_equal(sim[1], want)

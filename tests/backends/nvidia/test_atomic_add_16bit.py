"""atomic_add on float16 and bfloat16 in the PTX simulator against the interpreter: sm_90's
native atom.add.noftz.bf16 (the simulator added the bf16 patterns as integers, NaN where the
interpreter had sums; found checking the atomics fuzz preset's bf16 adds), f16's native add on
both targets and sm_80's bf16 CAS loop; masked lanes, two lanes per address."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402


@gt.jit
def add(buf, val, old):
    i = gl.arange(0, 64, gl.BlockedLayout([1], [32], [2], [0]))
    gl.store(old + i, gl.atomic_add(buf + i % 48, gl.load(val + i), mask=i % 7 != 3))


@pytest.mark.parametrize("target", ["sm_90", "sm_80"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_atomic_add_16bit_floats(dtype, target):
    import ml_dtypes
    npt = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16
    rng = np.random.default_rng(3)
    # exact in any order: small integers and halves, so repeated addresses compare bit for bit
    args = [(rng.integers(-40, 40, 48) / 2).astype(npt), (rng.integers(-8, 8, 64) / 2).astype(npt),
            np.zeros(64, npt)]
    init = np.asarray(args[0], np.float64)
    ref = [a.copy() for a in args]
    add[(1,)](*ref, num_warps=2, backend="interpreter", target=target)
    text, _, smem = emit(add.trace(*args, num_warps=2, target=target).graph, target)
    ptxsim.run(text, (1, 1, 1), args, smem)
    got, want = np.asarray(args[0], np.float64), np.asarray(ref[0], np.float64)
    assert np.array_equal(got, want) and not np.array_equal(want, init)
    once = np.arange(16, 48)  # addresses only these lanes hit: their old values are determined
    assert np.array_equal(np.asarray(args[2], np.float64)[once], np.asarray(ref[2], np.float64)[once])

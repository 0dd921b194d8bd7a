"""A combine function that loads (a scalar, or an address computed from its arguments)
compiles for AMD and agrees with the interpreter on the simulator: it was refused ("a
combine function may only compute on its arguments") although the interpreter and the
NVIDIA backend run it. Reductions across registers, lanes and warps (LDS), and a scan."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import amdsim  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402

pytestmark = pytest.mark.usefixtures("amd_toolchain")


@gt.jit
def combine_with_loads(x, s, out, W: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([2], [W], [2], [0])
    offs = gl.arange(0, 4 * W, layout=L)
    v = gl.load(x + offs)
    r = gl.reduce(v, 0, lambda a, b: a + b * gl.load(s + (b > 0.5).to(gl.int32)))
    c = gl.associative_scan(v, 0, lambda a, b: gl.maximum(a, b) + gl.load(s + 2))
    gl.store(out + offs, c + r)


@pytest.mark.parametrize("target, W", [("gfx942", 64), ("gfx90a", 64), ("gfx1100", 32)])
def test_a_combine_that_loads_matches_the_interpreter(rng, target, W):
    tr = combine_with_loads.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), gl.pointer(gl.float32),
                                  W=W, num_warps=2, target=target)
    x = rng.random(4 * W).astype(np.float32)
    s = rng.random(3).astype(np.float32)
    ref = np.full(4 * W, np.nan, np.float32)
    get("interpreter").run(tr.graph, (1, 1, 1), [x, s, ref])
    got = np.full(4 * W, np.nan, np.float32)
    amdsim.simulate(tr, target, (1,), [x, s.copy(), got])
    assert np.isfinite(ref).all()
    np.testing.assert_array_equal(got, ref)

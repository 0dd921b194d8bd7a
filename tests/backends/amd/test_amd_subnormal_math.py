"""exp2 and exp with subnormal results on AMD agree with the interpreter (no flush to zero),
the rule the NVIDIA backend now follows too (ex2.approx.f32 without .ftz): v_exp_f32 flushes,
so the backend scales around it."""
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
def exp_kernel(out2, oute, x, W: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1], [W], [1], [0])
    offs = gl.arange(0, W, layout=L)
    v = gl.load(x + offs)
    gl.store(out2 + offs, gl.exp2(v))
    gl.store(oute + offs, gl.exp(v * 0.6931471805599453))


@pytest.mark.parametrize("target, W", [("gfx942", 64), ("gfx1100", 32)])
def test_subnormal_results_are_kept(rng, target, W):
    x = np.concatenate([rng.uniform(-148.5, -126.5, W - 4), [-140.0, -1.0, 0.0, 3.0]]).astype(np.float32)
    tr = exp_kernel.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), gl.pointer(gl.float32),
                          W=W, num_warps=1, target=target)
    ref = [np.full(W, np.nan, np.float32), np.full(W, np.nan, np.float32)]
    get("interpreter").run(tr.graph, (1, 1, 1), [*ref, x])
    got = [np.full(W, np.nan, np.float32), np.full(W, np.nan, np.float32)]
    amdsim.simulate(tr, target, (1,), [*got, x])
    assert np.all(ref[0][:W - 4] > 0) and np.all(got[0][:W - 4] > 0) and np.all(got[1][:W - 4] > 0)
    assert got[0][W - 4] == np.float32(2.0 ** -140)
    np.testing.assert_allclose(got[0], ref[0], rtol=2.0 ** -20, atol=2.0 ** -148)
    np.testing.assert_allclose(got[1], ref[1], rtol=2.0 ** -16, atol=2.0 ** -146)


@gt.jit
def exp2_ftz_kernel(out, x, W: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1], [W], [1], [0])
    offs = gl.arange(0, W, layout=L)
    gl.store(out + offs, gl.exp2(gl.load(x + offs), ftz=True))


@pytest.mark.parametrize("target, W", [("gfx942", 64), ("gfx1100", 32)])
def test_exp2_ftz_flushes_like_the_interpreter(rng, target, W):
    x = np.concatenate([rng.uniform(-148.5, -126.5, W - 6), [-125.5, -140.0, -1.0, 0.0, 3.0, 127.5]]).astype(np.float32)
    tr = exp2_ftz_kernel.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), W=W, num_warps=1, target=target)
    ref = np.full(W, np.nan, np.float32)
    get("interpreter").run(tr.graph, (1, 1, 1), [ref, x])
    got = np.full(W, np.nan, np.float32)
    amdsim.simulate(tr, target, (1,), [got, x])
    assert np.all(ref[:W - 6] == 0) and np.all(got[:W - 6] == 0) and got[W - 6] > 0
    np.testing.assert_allclose(got, ref, rtol=2.0 ** -20, atol=0)

"""LDS views the fuzzer's 'views' preset (FuzzConfig(unaligned_views=True): slices from inside
swizzle and padding periods) found the AMD backend failing on, each on amdsim against the
interpreter, on fresh random inputs:

- a dim with no thread bits (size 1) after an unaligned slice whose thread part is a register:
  the thread address XORed an immediate into a register as an immediate (AttributeError).
"""
import os
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

sys.path.insert(0, os.path.dirname(__file__))
from lds_runner import both  # noqa: E402

TARGETS = ["gfx942", "gfx1100"]
pytestmark = pytest.mark.usefixtures("amd_toolchain")  # conftest: a fresh cache; skip without an assembler


@gt.jit
def size1_dim_after_unaligned_slice(x_ptr, out_ptr):
    """A [32, 1, 2] f32 buffer (dims placed 1, 0, 2 fastest first, single elements swizzled over
    rows in fours) holding x, viewed as .slice(0, 1, 2).permute([2, 0, 1]).slice(15, 8, 1): rows
    15..22 (inside the period) of column 0; read into out [1, 8, 1]."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1, 1], [W // 16, 8, 2], [1, 1, 1], [2, 1, 0])
    L: gl.constexpr = gl.BlockedLayout([1, 2, 1], [1, 4, W // 4], [1, 1, 1], [2, 1, 0])
    C: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(1, F))
    R: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, F))
    rf = (gl.arange(0, 32, R)[:, None, None] * 2 + gl.arange(0, 2, C)[None, None, :])
    buf = gl.allocate_shared_memory(gl.float32, [32, 1, 2], gl.SwizzledSharedLayout(1, 4, 8, [1, 0, 2]))
    buf.store(gl.load(x_ptr + rf))
    v = buf.slice(0, 1, 2).permute([2, 0, 1]).slice(15, 8, 1)
    r = gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(2, L)))[None, :, None] + \
        gl.zeros([1, 8, 1], gl.int32, L)
    gl.store(out_ptr + r, v.load(L))


@pytest.mark.parametrize("target", TARGETS)
def test_a_size1_dim_after_an_unaligned_slice(target):
    """Found by the fuzzer's views preset: a dim with no thread bits (size 1) after one whose
    thread part is a register made the thread address XOR an immediate into a register as an
    immediate (AttributeError: 'Reg' object has no attribute 'bits')."""
    x = np.random.default_rng().standard_normal(64).astype(np.float32)
    exp = x.reshape(32, 1, 2)[15:23, 0, 0].reshape(1, 8, 1)
    ref, sim, _ = both(size1_dim_after_unaligned_slice, lambda: [x.copy(), np.full((1, 8, 1), np.nan, np.float32)],
                       target, num_warps=1)
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)

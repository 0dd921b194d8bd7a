"""Views of swizzled shared buffers from starts inside a swizzle period, joined by control flow
or re-viewed: a branch picking the same slice in both arms (or a loop carrying one unchanged),
and .reshape of such a slice, which the NVIDIA backend refused though the interpreter runs them.
On the PTX simulator with the race detector for sm_90 and sm_80, against the interpreter and
numpy, fresh random inputs, NaN-poisoned outputs.
"""
import os
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import ptxsim_races  # noqa: E402
import smem_view_cases as C  # noqa: E402

from gluon_trace.backend import get  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

TARGETS = ["sm_90", "sm_80"]
SW = gl.SwizzledSharedLayout(4, 1, 8, [1, 0])   # 16-byte chunks of f32 swizzled over 8 rows


def both(kernel, make, target, num_warps=1, **kw):
    """(interpreter's args, simulator's args, PTX): traced on one set of args, run on two fresh ones."""
    g = kernel.trace(*make(), target=target, num_warps=num_warps, **kw).graph
    text, _, smem = emit(g, target)
    ref, sim = make(), make()
    get("interpreter").run(g, (1, 1, 1), ref)
    ptxsim_races.run(text, (1, 1, 1), sim, smem)
    return ref, sim, text


# -- one slice, picked by both arms of a branch or carried unchanged by a loop ---------------------

@gt.jit
def same_slice_joined(x_ptr, out_ptr, n, A: gl.constexpr, HOW: gl.constexpr):
    """Rows A..A+3 of a swizzled [16, 32] f32 buffer, n times into out: HOW=0 picked by a branch
    whose arms both slice rows A.., HOW=1 carried by a loop whose body yields rows A.. again,
    HOW=2 the same with the body's view picked by a branch (both arms rows A..)."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [16, 32], SW, gl.load(x_ptr + r))
    v = buf.slice(A, 4, 0)
    if HOW == 0:
        with gl.if_(n % 2 == 0):
            v = buf.slice(A, 4, 0)
        for i in gl.range(0, n):
            gl.store(out_ptr + i * 128 + rh, v.load(L))
    else:
        for i in gl.range(0, n):
            gl.store(out_ptr + i * 128 + rh, v.load(L))
            w = buf.slice(A, 4, 0)
            if HOW == 2:
                with gl.if_(i % 2 == 0):
                    w = buf.slice(A, 4, 0)
            v = w


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("how", [0, 1, 2], ids=["branch", "loop", "loop-branch"])
@pytest.mark.parametrize("a", [1, 3, 5])
def test_one_unaligned_slice_joined_with_itself(target, how, a):
    x, n = C.rand((16, 32)), 3
    ref, sim, _ = both(same_slice_joined, lambda: [x.copy(), np.full((n, 4, 32), np.nan, np.float32), n], target,
                       A=a, HOW=how)
    exp = np.stack([x[a:a + 4]] * n)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)

"""Shared-memory views of slots of stacked buffers that the fuzzer's 'stacked' preset
(fuzz/smem_stacked.py) found the NVIDIA backend refusing, on the PTX simulator with the race
detector against the interpreter and numpy, fresh random inputs, poisoned outputs (the joins of
one view picked twice before another are in smem_stacked_cases.py: *_twice_then_another):

- a loop swapping two views of different slots of a padded buffer, rows 11.. of slot 1 and rows
  2.. of slot 0 of an i64 buffer padded one element every 32 (both carried at a run-time start):
  the loop's alignment look-ahead (rules_control._loop_aligns) took the swapped-in view as
  aligned as the one it replaces, so the body's yield was refused ('less aligned (8 bytes) than
  its first value (16)', seed 400383).
"""
import os
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

sys.path.insert(0, os.path.dirname(__file__))
pytest.importorskip("gluon_trace.backends.nvidia")
from smem_runner import both  # noqa: E402

TARGETS = ["sm_90", "sm_80"]


@gt.jit
def swapped_slot_rows(x_ptr, y_ptr, out_ptr, n, C: gl.constexpr, D: gl.constexpr, PADS: gl.constexpr):
    """An i64 [2, 16, 8] buffer padded by PADS holding x, seen as [2, 8, 16] (permuted); a loop
    carries c = slot C[0]'s columns C[1]..C[1]+1 and d = slot D[0]'s columns D[1].. of that view,
    and at step i reads c into out[i], stores y[i] through d and swaps them. Then the buffer."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1, 8], [1, W, 1], [1, 1, 1], [2, 1, 0])
    rf = gl.arange(0, 2, gl.SliceLayout(1, gl.SliceLayout(2, F)))[:, None, None] * 128 + \
        gl.arange(0, 16, gl.SliceLayout(0, gl.SliceLayout(2, F)))[None, :, None] * 8 + \
        gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(1, F)))[None, None, :]
    M: gl.constexpr = gl.BlockedLayout([1, 1, 2], [1, 8, W // 8], [1, 1, 1], [2, 1, 0])
    ro = gl.arange(0, 1, gl.SliceLayout(1, gl.SliceLayout(2, M)))[:, None, None] + \
        gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(2, M)))[None, :, None] * 2 + \
        gl.arange(0, 2, gl.SliceLayout(0, gl.SliceLayout(1, M)))[None, None, :]
    lay: gl.constexpr = gl.PaddedSharedLayout.with_identity_for(PADS, [16, 8], [1, 0])
    buf = gl.allocate_shared_memory(gl.int64, [2, 16, 8], lay, gl.load(x_ptr + rf))
    p = buf.permute([0, 2, 1])
    c = p.slice(C[0], 1, 0).slice(C[1], 2, 2)
    d = p.slice(D[0], 1, 0).slice(D[1], 2, 2)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 16 + ro, c.load(M))
        d.store(gl.load(y_ptr + i * 16 + ro))
        c, d = d, c
    gl.store(out_ptr + n * 16 + rf, buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("c,d", [((1, 11), (0, 2)), ((0, 2), (1, 11)), ((1, 3), (0, 5)), ((1, 2), (0, 4))])
@pytest.mark.parametrize("pads", [[[32, 1]], [[8, 2]]], ids=["every32", "every8"])
def test_swapped_views_of_two_slots_differently_aligned(target, c, d, pads):
    """Seed 400383: slot 1's columns 11.. (an odd i64 offset: 8-byte aligned) swapped with slot 0's
    columns 2.. (16); refused before whichever came first where their alignments differ (6 of these 16 cases).
    (1, 2) and (0, 4), and every case padded every 8, compiled before."""
    rng = np.random.default_rng()
    n = 5
    x = rng.integers(-2 ** 40, 2 ** 40, 256).astype(np.int64)
    y = rng.integers(-2 ** 40, 2 ** 40, 16 * n).astype(np.int64)
    b = x.reshape(2, 16, 8).copy()
    p = b.transpose(0, 2, 1)
    views = [p[c[0]:c[0] + 1, :, c[1]:c[1] + 2], p[d[0]:d[0] + 1, :, d[1]:d[1] + 2]]
    out = []
    for i in range(n):
        out.append(views[0].reshape(-1).copy())
        views[1][...] = y[i * 16:(i + 1) * 16].reshape(1, 8, 2)
        views = views[::-1]
    exp = np.concatenate(out + [b.reshape(-1)])
    ref, sim, _ = both(swapped_slot_rows, lambda: [x.copy(), y.copy(), np.full(exp.size, -1, np.int64), n], target,
                       num_warps=1, C=c, D=d, PADS=pads)
    assert np.array_equal(ref[2], exp) and np.array_equal(sim[2], exp)

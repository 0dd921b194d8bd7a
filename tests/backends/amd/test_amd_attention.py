"""Attention forward on MFMA (gluon_trace/kernels/attention_amd.py): in the interpreter against
numpy, and as gfx942 / gfx90a machine code on the AMD simulator against the interpreter (fresh
random inputs, poisoned outputs), causal or not, a sequence that is not a tile multiple."""
import os
import sys

import numpy as np
import pytest

from gluon_trace.kernels.attention_amd import attention_fwd_mfma

sys.path.insert(0, os.path.dirname(__file__))
import amdsim  # noqa: E402

pytest.importorskip("gluon_trace.backends.amd")


def reference(q, k, v, scale, causal):
    s = np.einsum("bqd,bkd->bqk", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        n = s.shape[1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bqk,bkd->bqd", p / p.sum(-1, keepdims=True), v.astype(np.float64))


@pytest.mark.parametrize("target", ["gfx942", "gfx90a"])
@pytest.mark.parametrize("seq, causal", [(80, False), (70, True)])
def test_mfma_attention_on_the_simulator(amd_toolchain, target, seq, causal):
    rng = np.random.default_rng(seq)
    bh, d, bm, bn = 2, 64, 64, 32
    q, k, v = (rng.standard_normal((bh, seq, d)).astype(np.float16) for _ in range(3))
    scale = 1 / np.sqrt(d)
    kw = dict(BM=bm, BN=bn, D=d, CAUSAL=causal, num_warps=2)
    grid = (-(-seq // bm), bh)
    ref = np.full((bh, seq, d), np.nan, np.float16)
    attention_fwd_mfma[grid](q, k, v, ref, seq, scale, backend="interpreter", target=target, **kw)
    np.testing.assert_allclose(ref.astype(np.float64), reference(q, k, v, scale, causal), atol=2e-3, rtol=2e-3)
    sim = np.full((bh, seq, d), np.nan, np.float16)
    tk = attention_fwd_mfma.trace(q, k, v, sim, seq, scale, target=target, **kw)
    amdsim.simulate(tk, target, grid, [q, k, v, sim, seq, scale])
    # the same arithmetic in a different order (MFMA sums K in its own order): close, not equal
    np.testing.assert_allclose(sim.astype(np.float64), ref.astype(np.float64), atol=2e-3, rtol=2e-3)
    assert not np.isnan(sim).any()

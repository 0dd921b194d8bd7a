"""attention_fwd_ws_split (gluon_trace/kernels/attention_hopper_ws.py) on the interpreter: the
last, partial round of tiles of a persistent grid cut along KV into parts, each part published
through the workspace and combined by the last to count itself in. Against numpy for tails of
one and several tiles, parts capped by SPLIT, by the KV tiles and by the idle CTAs, a KV length
that is not a tile multiple (the masked tile falls in one part), grids with no tail, and
back-to-back launches over one workspace (the counters come back to zero)."""
import numpy as np
import pytest

from gluon_trace import language as gl
from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws_split, attention_split_workspace
from gluon_trace.nvidia.hopper import TensorDescriptor

from test_kernels import BF16, attention_reference, cdiv


def schedule(tiles, programs, n_kv, split):
    """(whole tiles, parts a tail tile, units) as the kernel's _split_tail computes them."""
    r = tiles % programs
    parts = min(n_kv, programs // max(r, 1), split)
    cut = r > 0 and parts >= 2
    return tiles - r * cut, parts, r * parts * cut


def run(rng, seq, bh, programs, split=8, d=64, bn=64, consumers=2, launches=1):
    """The kernel against numpy; returns how many records the workspace received."""
    bm = 64
    q, k, v = (rng.standard_normal((bh, seq, d)).astype(np.float32).astype(BF16) for _ in range(3))
    lq = gl.NVMMASharedLayout.get_default_for([bm, d], gl.bfloat16)
    lk = gl.NVMMASharedLayout.get_default_for([bn, d], gl.bfloat16)
    kd, vd = (TensorDescriptor.from_tensor(x, [1, bn, d], lk) for x in (k, v))
    size, count = attention_split_workspace(programs, bm, d, consumers)
    parts = np.full(size, np.nan, np.float32)  # never read before it is written
    counters = np.zeros(count, np.int32)
    scale = 1.0 / np.sqrt(d)
    ref = attention_reference(q, k, v, scale, False)
    for _ in range(launches):
        o = np.full((bh, seq, d), np.nan, BF16)
        qd, od = (TensorDescriptor.from_tensor(x, [1, bm, d], lq) for x in (q, o))
        attention_fwd_ws_split[(programs,)](qd, kd, vd, od, parts, counters, seq, scale, CAUSAL=False,
                                            CONSUMERS=consumers, SPLIT=split, backend="interpreter",
                                            target="sm_90a")
        out = o.astype(np.float32)
        assert not np.isnan(out).any(), "some rows were never stored"
        np.testing.assert_allclose(out, ref, atol=2e-2, rtol=2e-2)
        assert not counters.any(), "the last part of each tail tile sets its counter back to zero"
    records = parts.reshape(programs * consumers, -1)
    return int((~np.isnan(records).all(axis=1)).sum())


@pytest.mark.parametrize("seq, bh, programs", [
    (256, 3, 4),   # 6 tiles on 4 CTAs: 4 whole, 2 tail tiles of 4 KV tiles in 2 parts each
    (256, 3, 5),   # 6 tiles on 5: 1 tail tile cut in 4 parts (capped by its 4 KV tiles)
    (200, 2, 3),   # 4 tiles on 3, the last KV tile masked: 1 tail tile in 3 parts of 4 KV tiles
    (384, 1, 2),   # 3 tiles on 2: 1 tail tile of 6 KV tiles in 2 parts (capped by the idle CTAs)
])
def test_split_tail_matches_numpy(rng, seq, bh, programs):
    tiles, n_kv = cdiv(seq, 128) * bh, cdiv(seq, 64)
    _, parts, units = schedule(tiles, programs, n_kv, 8)
    assert units >= 2
    assert run(rng, seq, bh, programs) == units * 2  # one record a consumer a unit


def test_split_capped_by_split(rng):
    """One tail tile of 8 KV tiles on 7 CTAs with SPLIT=3: three parts, four CTAs idle."""
    assert schedule(8, 7, 8, 3) == (7, 3, 3)
    assert run(rng, 512, 2, 7, split=3) == 3 * 2


@pytest.mark.parametrize("seq, bh, programs", [(256, 2, 4), (128, 5, 3), (64, 3, 2)])
def test_no_cut_without_a_tail_worth_cutting(rng, seq, bh, programs):
    """Tiles = CTAs (no tail); 2 tail tiles on 3 CTAs (one idle CTA: no part to give it); a tail
    tile of one KV tile (nothing to cut): every tile whole, no record written."""
    tiles, n_kv = cdiv(seq, 128) * bh, cdiv(seq, 64)
    assert schedule(tiles, programs, n_kv, 8)[2] == 0
    assert run(rng, seq, bh, programs) == 0


def test_split_three_consumers_head_dim_128_and_repeated_launches(rng):
    """192-row tiles: 2 * 3 = 6 tiles on 5 CTAs, the tail tile's 3 KV tiles in 3 parts; twice
    over one workspace."""
    assert schedule(6, 5, 3, 8) == (5, 3, 3)
    assert run(rng, 384, 3, 5, d=128, bn=128, consumers=3, launches=2) == 3 * 3


def test_split_refuses_causal():
    from gluon_trace.errors import TraceError
    bm, d = 64, 64
    lq = gl.NVMMASharedLayout.get_default_for([bm, d], gl.bfloat16)
    spec = TensorDescriptor.type_spec(gl.bfloat16, [1, bm, d], lq)
    with pytest.raises(TraceError, match="non-causal"):
        attention_fwd_ws_split.trace(spec, spec, spec, spec, gl.pointer(gl.float32), gl.pointer(gl.int32), gl.int32,
                                     gl.float32, CAUSAL=True, num_warps=4, target="sm_90a")

"""attention_fwd_ws with KV_PIECES (gluon_trace/kernels/attention_hopper_ws.py) on the
interpreter: KV tiles of P pieces of 16 rows, so BN = 16 P need not be a power of two (160, FA3's
tile for head dim 128 is 176). S comes back as P column pieces whose softmax folds them into one
row reduction; P V is one wgmma group over P's pieces. Against numpy: tiles that cross the sequence end inside
a piece and between pieces, causal diagonals inside a tile, head dims 64 (one K chunk) and 128 (two),
persistent grids, and the split tail over pieces."""
import numpy as np
import pytest

from gluon_trace import language as gl
from gluon_trace.errors import ArgumentValueError
from gluon_trace.kernels.attention_hopper_ws import (attention_fwd_ws, attention_fwd_ws_split,
                                                     attention_split_workspace, piece_descriptors)
from gluon_trace.nvidia.hopper import TensorDescriptor

from test_kernels import BF16, attention_reference, cdiv


def inputs(rng, bh, seq, d, pieces):
    q, k, v = (rng.standard_normal((bh, seq, d)).astype(np.float32).astype(BF16) for _ in range(3))
    o = np.full((bh, seq, d), np.nan, BF16)
    lq = gl.NVMMASharedLayout.get_default_for([64, d], gl.bfloat16)
    qd, od = (TensorDescriptor.from_tensor(x, [1, 64, d], lq) for x in (q, o))
    return (q, k, v, o), (qd, *piece_descriptors(k, v, pieces), od)


def check(o, q, k, v, d, causal):
    out = o.astype(np.float32)
    assert not np.isnan(out).any(), "some rows were never stored"
    np.testing.assert_allclose(out, attention_reference(q, k, v, 1.0 / np.sqrt(d), causal), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("d, pieces, consumers, ctas", [(128, 10, 2, None), (64, 3, 2, None), (64, 5, 3, 2),
                                                        (128, 6, 2, 3)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [100, 330, 336])
def test_pieces_match_numpy(rng, d, pieces, consumers, ctas, causal, seq):
    """seq 100 ends inside a piece of the first tile; 330 crosses tiles and pieces (both a box a
    piece); 336, a multiple of 16, loads K and V by 5-D boxes; ctas: a persistent 1-D grid."""
    (q, k, v, o), descs = inputs(rng, 2, seq, d, pieces)
    grid = (cdiv(seq, consumers * 64), 2) if ctas is None else (ctas,)
    attention_fwd_ws[grid](*descs, seq, 1.0 / np.sqrt(d), CAUSAL=causal, CONSUMERS=consumers,
                           CONSUMER_REGS=240 if consumers == 2 else 160, KV_PIECES=pieces,
                           backend="interpreter", target="sm_90a")
    check(o, q, k, v, d, causal)


def test_pieces_under_the_split_tail(rng):
    """6 tiles on 4 CTAs: 2 tail tiles of 3 KV tiles (160, 160, 64 columns) cut into parts."""
    seq, bh, programs, d = 384, 3, 4, 128
    (q, k, v, o), (qd, kd, vd, od) = inputs(rng, bh, seq, d, 10)
    size, count = attention_split_workspace(programs, 64, d)
    parts = np.full(size, np.nan, np.float32)
    counters = np.zeros(count, np.int32)
    attention_fwd_ws_split[(programs,)](qd, kd, vd, od, parts, counters, seq, 1.0 / np.sqrt(d), CAUSAL=False,
                                        KV_PIECES=10, backend="interpreter", target="sm_90a")
    check(o, q, k, v, d, False)
    assert not np.isnan(parts).all(), "the tail tiles were cut: parts were published"
    assert not counters.any()


@pytest.mark.parametrize("k, v, words", [
    (np.zeros((2, 64, 128), np.float32), np.zeros((2, 64, 128), np.float32), ["16-bit", "float32"]),
    (np.zeros((2, 64, 128), BF16), np.zeros((2, 32, 128), BF16), ["one shape", "(2, 32, 128)"]),
    (np.zeros((2, 64, 96), BF16), np.zeros((2, 64, 96), BF16), ["head dim 96", "multiple of 64"]),
])
def test_piece_descriptors_refuse_what_the_kernel_cannot_take(k, v, words):
    with pytest.raises(ArgumentValueError) as e:
        piece_descriptors(k, v, 10)
    assert all(w in str(e.value) for w in words) and "test_attention_pieces.py" in str(e.value), str(e.value)



def test_kv_pieces_that_disagree_with_the_descriptors_boxes_are_refused_when_traced(rng):
    """5-D boxes of 10 pieces (piece_descriptors(k, v, 10)) launched with KV_PIECES=5: refused at
    trace time, naming what the boxes must be (at the kernel's check, as a static_assert does)."""
    from gluon_trace.errors import TraceError
    _, descs = inputs(rng, 2, 320, 128, 10)
    with pytest.raises(TraceError) as e:
        attention_fwd_ws.trace(*descs, gl.int32, gl.float32, CAUSAL=False, KV_PIECES=5, num_warps=4,
                               target="sm_90a")
    assert "KV_PIECES with 5-D boxes" in str(e.value) and "attention_hopper_ws.py" in str(e.value), str(e.value)

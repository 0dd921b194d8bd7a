"""The shipped tensor-core kernels (gluon_trace/kernels) in the interpreter against numpy, on
fresh random inputs, square and odd shapes, outputs poisoned before each run."""
import ml_dtypes
import numpy as np
import pytest

from gluon_trace import dtypes as dt
from gluon_trace import language as gl
from gluon_trace.kernels.attention_hopper import attention_fwd
from gluon_trace.kernels.matmul_amd import matmul_mfma, matmul_wmma
from gluon_trace.kernels.matmul_ampere import matmul_ampere
from gluon_trace.kernels.matmul_fma import matmul_fma
from gluon_trace.kernels.matmul_hopper import matmul_hopper
from gluon_trace.kernels.matmul_hopper_ws import matmul_hopper_pingpong, matmul_hopper_ws
from gluon_trace.nvidia.hopper import TensorDescriptor

SHAPES = [(64, 64, 64), (96, 80, 72), (37, 50, 130)]
BF16 = ml_dtypes.bfloat16


def operands(rng, m, n, k, dtype):
    a = rng.standard_normal((m, k)).astype(np.float32).astype(dtype)
    b = rng.standard_normal((k, n)).astype(np.float32).astype(dtype)
    return a, b


def reference(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def check(c, a, b, rtol=2e-5):
    ref = reference(a, b)
    assert not np.isnan(c).any(), "some outputs were never written"
    np.testing.assert_allclose(c, ref, rtol=rtol, atol=rtol * np.abs(ref).max())


def cdiv(a, b):
    return -(-a // b)


@pytest.mark.parametrize("m, n, k", SHAPES)
def test_matmul_fma(rng, m, n, k):
    a, b = operands(rng, m, n, k, np.float16)
    c = np.full((m, n), np.nan, np.float32)
    matmul_fma[(cdiv(m, 32), cdiv(n, 32))](a, b, c, m, n, k, k, n, n, BM=32, BN=32, BK=16)
    check(c, a, b)


@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_matmul_ampere(rng, m, n, k, dtype):
    a, b = operands(rng, m, n, k, dtype)
    c = np.full((m, n), np.nan, np.float32)
    matmul_ampere[(cdiv(m, 64), cdiv(n, 64))](a, b, c, m, n, k, k, n, n, BM=64, BN=64, BK=32, STAGES=3,
                                              backend="interpreter", target="sm_80")
    check(c, a, b)


def descs(a, b, c, bm, bn, bk):
    lay = gl.NVMMASharedLayout.get_default_for
    ta, tc = dt.from_numpy(a.dtype), dt.from_numpy(c.dtype)
    return (TensorDescriptor.from_tensor(a, [bm, bk], lay([bm, bk], ta)),
            TensorDescriptor.from_tensor(b, [bk, bn], lay([bk, bn], ta)),
            TensorDescriptor.from_tensor(c, [bm, bn], lay([bm, bn], tc)))


def padded(x):
    """A copy whose rows are 16-byte aligned (TMA's stride rule), viewed at the original shape."""
    cols = -(-x.shape[1] * x.itemsize // 16) * 16 // x.itemsize
    buf = np.zeros((x.shape[0], cols), x.dtype)
    buf[:, :x.shape[1]] = x
    return buf[:, :x.shape[1]]


@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("programs", [1, 3])
def test_matmul_hopper_persistent(rng, m, n, k, programs):
    a, b = operands(rng, m, n, k, BF16)
    a, b = padded(a), padded(b)
    c = padded(np.full((m, n), np.nan, np.float32))
    matmul_hopper[(programs,)](*descs(a, b, c, 64, 64, 32), m, n, k, STAGES=3, GROUP_M=2,
                               backend="interpreter", target="sm_90a")
    check(c, a, b)


@pytest.mark.parametrize("epi_n", [16, 32])
def test_matmul_hopper_stores_tiles_in_column_blocks(rng, epi_n):
    """c_desc's block a column block of the tile: each tile stored in pieces through two
    buffers taken in turn, a store in flight while the next piece fills; odd shapes clip."""
    m, n, k = 200, 130, 70
    a, b = operands(rng, m, n, k, BF16)
    a, b = padded(a), padded(b)
    c = padded(np.full((m, n), np.nan, np.float32))
    da, db, _ = descs(a, b, c, 64, 64, 32)
    dc = TensorDescriptor.from_tensor(c, [64, epi_n], gl.NVMMASharedLayout.get_default_for([64, epi_n], gl.float32))
    matmul_hopper[(3,)](da, db, dc, m, n, k, STAGES=3, GROUP_M=2, backend="interpreter", target="sm_90a")
    check(c, a, b)


@pytest.mark.parametrize("m, n, k, stages, programs", [(200, 130, 20, 4, 2), (150, 64, 70, 4, 3),
                                                       (64, 200, 100, 2, 1)])
def test_matmul_hopper_ring_phases_across_tiles(rng, m, n, k, stages, programs):
    """Slots and phases counted over all of a CTA's tiles: with fewer K steps than the ring has
    slots (k=20: one step a tile) the phases turn over mid-ring, several tiles in a row."""
    a, b = operands(rng, m, n, k, BF16)
    a, b = padded(a), padded(b)
    c = padded(np.full((m, n), np.nan, np.float32))
    matmul_hopper[(programs,)](*descs(a, b, c, 64, 64, 32), m, n, k, STAGES=stages, GROUP_M=2,
                               backend="interpreter", target="sm_90a")
    check(c, a, b)


@pytest.mark.parametrize("m, n, k", SHAPES[:2])
def test_matmul_hopper_warp_specialized(rng, m, n, k):
    a, b = operands(rng, m, n, k, np.float16)
    a, b = padded(a), padded(b)
    c = padded(np.full((m, n), np.nan, np.float32))
    matmul_hopper_ws[(2,)](*descs(a, b, c, 64, 64, 32), m, n, k, STAGES=2, GROUP_M=2,
                           backend="interpreter", target="sm_90a")
    check(c, a, b)


@pytest.mark.parametrize("m, n, k", SHAPES[:2])
@pytest.mark.parametrize("programs", [1, 2])
def test_matmul_hopper_pingpong(rng, m, n, k, programs):
    """Two consumer partitions taking turns over one ring (and the turn barriers that keep
    their waits within one mbarrier phase of the producer): checked by the interpreter's
    synchronisation analysis and against numpy."""
    a, b = operands(rng, m, n, k, np.float16)
    a, b = padded(a), padded(b)
    c = padded(np.full((m, n), np.nan, np.float32))
    matmul_hopper_pingpong[(programs,)](*descs(a, b, c, 64, 64, 32), m, n, k, STAGES=3, GROUP_M=2,
                                        backend="interpreter", target="sm_90a")
    check(c, a, b)


def test_vector_clocks_merged_in_turn_stay_small():
    from gluon_trace.backends.interpreter.sync import merge
    a, b = np.zeros(3, np.int64), np.zeros(5, np.int64)
    for _ in range(40):   # two partitions acquiring each other's clocks, as ping-pong consumers do
        a, b = merge(a, b), merge(b, a)
    assert a.size == b.size == 5


def attention_reference(q, k, v, scale, causal):
    s = np.einsum("bqd,bkd->bqk", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        n = s.shape[1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bqk,bkd->bqd", p / p.sum(-1, keepdims=True), v.astype(np.float64))


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [128, 100, 330])
@pytest.mark.parametrize("kernel", ["attention_fwd", "attention_fwd_pipelined"])
def test_attention(rng, d, causal, seq, kernel):
    from gluon_trace.kernels import attention_hopper
    attention = getattr(attention_hopper, kernel)
    bh, bm, bn = 2, 64, 64
    q, k, v = (rng.standard_normal((bh, seq, d)).astype(np.float32).astype(BF16) for _ in range(3))
    o = np.full((bh, seq, d), np.nan, BF16)
    lay = gl.NVMMASharedLayout.get_default_for([bm, d], gl.bfloat16)
    qd, kd, vd, od = (TensorDescriptor.from_tensor(x, [1, bm if x is q or x is o else bn, d], lay)
                      for x in (q, k, v, o))
    scale = 1.0 / np.sqrt(d)
    attention[(cdiv(seq, bm), bh)](qd, kd, vd, od, seq, scale, CAUSAL=causal,
                                   backend="interpreter", target="sm_90a")
    ref = attention_reference(q, k, v, scale, causal)
    out = o.astype(np.float32)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, ref, atol=2e-2, rtol=2e-2)  # P is rounded to bf16, O too


@pytest.mark.parametrize("d, bn, consumers, ctas", [(64, 64, 2, None), (128, 128, 2, None), (64, 128, 3, None),
                                                   (64, 64, 2, 3), (64, 128, 3, 2)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [128, 100, 330])
def test_attention_warp_specialized(rng, d, bn, consumers, ctas, causal, seq):
    """ctas: a persistent 1-D grid of that many CTAs walking the (query block, head) tiles."""
    """Two consumer warpgroups of 64 rows each taking turns, a producer warp streaming K and V
    through rings with their own ready/empty barriers (count 2: both consumers release)."""
    from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws
    bh, bm = 2, 64
    q, k, v = (rng.standard_normal((bh, seq, d)).astype(np.float32).astype(BF16) for _ in range(3))
    o = np.full((bh, seq, d), np.nan, BF16)
    lq = gl.NVMMASharedLayout.get_default_for([bm, d], gl.bfloat16)
    lk = gl.NVMMASharedLayout.get_default_for([bn, d], gl.bfloat16)
    qd, od = (TensorDescriptor.from_tensor(x, [1, bm, d], lq) for x in (q, o))
    kd, vd = (TensorDescriptor.from_tensor(x, [1, bn, d], lk) for x in (k, v))
    scale = 1.0 / np.sqrt(d)
    grid = (cdiv(seq, consumers * bm), bh) if ctas is None else (ctas,)
    attention_fwd_ws[grid](qd, kd, vd, od, seq, scale, CAUSAL=causal,
                                                      CONSUMERS=consumers, backend="interpreter",
                                                      target="sm_90a")
    out = o.astype(np.float32)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, attention_reference(q, k, v, scale, causal), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("m, n, k", SHAPES[:2])
def test_matmul_mfma(rng, m, n, k):
    a, b = operands(rng, m, n, k, np.float16)
    c = np.full((m, n), np.nan, np.float32)
    matmul_mfma[(cdiv(m, 64), cdiv(n, 64))](a, b, c, m, n, k, k, n, n, BM=64, BN=64, BK=32,
                                            backend="interpreter", target="gfx942")
    check(c, a, b)


@pytest.mark.parametrize("m, n, k", SHAPES[:2])
def test_matmul_wmma(rng, m, n, k):
    a, b = operands(rng, m, n, k, BF16)
    c = np.full((m, n), np.nan, np.float32)
    matmul_wmma[(cdiv(m, 64), cdiv(n, 64))](a, b, c, m, n, k, k, n, n, BM=64, BN=64, BK=32,
                                            backend="interpreter", target="gfx1100")
    check(c, a, b)


@pytest.mark.parametrize("fmt, ml", [("float8e4nv", ml_dtypes.float8_e4m3fn), ("float8e5", ml_dtypes.float8_e5m2)])
def test_fp8_gemm_on_wgmma(rng, fmt, ml):
    """fp8 operands (K-major B as wgmma needs for 8-bit types), f32 accumulation."""
    m, n, k = 64, 64, 96
    a = (rng.standard_normal((m, k)) * 4).astype(np.float32).astype(ml)
    b = (rng.standard_normal((k, n)) * 4).astype(np.float32).astype(ml)
    c = np.full((m, n), np.nan, np.float32)
    bt = np.ascontiguousarray(b.T)
    lay = gl.NVMMASharedLayout.get_default_for
    f8 = getattr(gl, fmt)
    da = TensorDescriptor.from_tensor(a, [64, 32], lay([64, 32], f8))
    db = TensorDescriptor.from_tensor(bt, [64, 32], lay([64, 32], f8))
    dc = TensorDescriptor.from_tensor(c, [64, 64], lay([64, 64], gl.float32))
    with pytest.raises(Exception) as e:  # B as [K, N] (N contiguous) is refused for 8-bit types
        matmul_hopper.trace(da, TensorDescriptor.from_tensor(b, [32, 64], lay([32, 64], f8)), dc, m, n, k,
                            STAGES=2, GROUP_M=1, target="sm_90a")
    assert "K-major" in str(e.value)
    matmul_hopper[(1,)](da, db, dc, m, n, k, STAGES=2, GROUP_M=1, B_KMAJOR=True,
                        backend="interpreter", target="sm_90a")
    check(c, a, b)


def test_fp8_needs_sm89_and_no_arithmetic():
    import gluon_trace as gt
    from gluon_trace.errors import TraceError

    @gt.jit
    def add(p, q):
        L = gl.BlockedLayout([1], [32], [4], [0])
        offs = gl.arange(0, 128, layout=L)
        gl.store(p + offs, gl.load(p + offs) + gl.load(q + offs))
    with pytest.raises(TraceError) as e:
        add.trace(gl.pointer(gl.float8e4nv), gl.pointer(gl.float8e4nv))
    assert "convert with .to(gl.float16)" in str(e.value) and "test_kernels.py" in str(e.value)
    acc = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1], instr_shape=[16, 8])

    @gt.jit
    def mma(p):
        from gluon_trace.language.nvidia.ampere import mma_v2
        a = gl.zeros([64, 32], gl.float8e4nv, gl.DotOperandLayout(0, acc, k_width=4))
        b = gl.zeros([32, 8], gl.float8e4nv, gl.DotOperandLayout(1, acc, k_width=4))
        mma_v2(a, b, gl.zeros([64, 8], gl.float32, acc))
    mma.trace(gl.pointer(gl.float32), target="sm_89")
    with pytest.raises(TraceError) as e:
        mma.trace(gl.pointer(gl.float32), target="sm_80")
    assert "sm_89" in str(e.value)


def test_fp8_round_trips_exactly_through_memory(rng):
    import gluon_trace as gt

    @gt.jit
    def convert(out_ptr, in_ptr):
        L = gl.BlockedLayout([4], [32], [4], [0])
        offs = gl.arange(0, 512, layout=L)
        x = gl.load(in_ptr + offs)
        gl.store(out_ptr + offs, x.to(gl.float8e4nv).to(gl.float32))
    x = (rng.standard_normal(512) * 100).astype(np.float32)
    x[:4] = [1e6, -1e6, np.inf, 0.0]
    out = np.full(512, np.nan, np.float32)
    convert[(1,)](out, x)
    ref = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert np.array_equal(out, ref)


def test_gpu_backends_refuse_fp8_at_the_users_line():
    import gluon_trace as gt
    from gluon_trace.errors import CompileError

    @gt.jit
    def widen(out_ptr, in_ptr):
        L = gl.BlockedLayout([4], [gl.threads_per_warp()], [2], [0])
        offs = gl.arange(0, 512, layout=L)
        gl.store(out_ptr + offs, gl.load(in_ptr + offs).to(gl.float32))
    k = widen.trace(gl.pointer(gl.float32), gl.pointer(gl.float8e5), num_warps=2)
    for emit in (lambda: k.ptx("sm_80"), lambda: k.amdgcn("gfx942")):   # sm_89+ lowers it (test_fp8.py)
        with pytest.raises(CompileError) as e:
            emit()
        assert "fp8" in str(e.value) and "test_kernels.py" in str(e.value)
    assert "cvt.rn.f16x2.e5m2x2" in k.ptx("sm_90a")

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
from gluon_trace.kernels.matmul_hopper_ws import matmul_hopper_ws
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


@pytest.mark.parametrize("m, n, k", SHAPES[:2])
def test_matmul_hopper_warp_specialized(rng, m, n, k):
    a, b = operands(rng, m, n, k, np.float16)
    a, b = padded(a), padded(b)
    c = padded(np.full((m, n), np.nan, np.float32))
    matmul_hopper_ws[(2,)](*descs(a, b, c, 64, 64, 32), m, n, k, STAGES=2, GROUP_M=2,
                           backend="interpreter", target="sm_90a")
    check(c, a, b)


def attention_reference(q, k, v, scale, causal):
    s = np.einsum("bqd,bkd->bqk", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        n = s.shape[1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bqk,bkd->bqd", p / p.sum(-1, keepdims=True), v.astype(np.float64))


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [128, 100])
def test_attention(rng, d, causal, seq):
    bh, bm, bn = 2, 64, 64
    q, k, v = (rng.standard_normal((bh, seq, d)).astype(np.float32).astype(BF16) for _ in range(3))
    o = np.full((bh, seq, d), np.nan, BF16)
    lay = gl.NVMMASharedLayout.get_default_for([bm, d], gl.bfloat16)
    qd, kd, vd, od = (TensorDescriptor.from_tensor(x, [1, bm if x is q or x is o else bn, d], lay)
                      for x in (q, k, v, o))
    scale = 1.0 / np.sqrt(d)
    attention_fwd[(cdiv(seq, bm), bh)](qd, kd, vd, od, seq, scale, CAUSAL=causal,
                                       backend="interpreter", target="sm_90a")
    ref = attention_reference(q, k, v, scale, causal)
    out = o.astype(np.float32)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, ref, atol=2e-2, rtol=2e-2)  # P is rounded to bf16, O too


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

"""Each MMA op on random shapes, dtypes and warp arrangements, in the interpreter, against
numpy: operands loaded straight into their dot-operand layouts, the accumulator stored
from its own layout (so the layouts' coordinates are exercised too, not only the math)."""
import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.amd.cdna3 import mfma
from gluon_trace.language.amd.rdna3 import wmma
from gluon_trace.language.nvidia.ampere import mma_v2
from gluon_trace.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait


def _tile(ptr, rows, cols, layout, stride):
    r = gl.arange(0, rows, layout=gl.SliceLayout(1, layout))
    c = gl.arange(0, cols, layout=gl.SliceLayout(0, layout))
    return ptr + r[:, None] * stride + c[None, :]


def make_kernel(op, acc_l, kw, M, N, K):
    @gt.jit
    def kernel(c_ptr, a_ptr, b_ptr, c0_ptr):
        a_l = gl.DotOperandLayout(0, acc_l, k_width=kw)
        b_l = gl.DotOperandLayout(1, acc_l, k_width=kw)
        a = gl.load(_tile(a_ptr, M, K, a_l, K))
        b = gl.load(_tile(b_ptr, K, N, b_l, N))
        acc = gl.load(_tile(c0_ptr, M, N, acc_l, N))
        gl.store(_tile(c_ptr, M, N, acc_l, N), op(a, b, acc))
    return kernel


def _run(kernel, a, b, acc, target, num_warps, exact=False):
    poison = np.iinfo(acc.dtype).min if acc.dtype.kind == "i" else np.nan
    c = np.full(acc.shape, poison, acc.dtype)
    kernel[(1,)](c, a, b, acc, num_warps=num_warps, backend="interpreter", target=target)
    ref = a.astype(np.float64) @ b.astype(np.float64) + acc
    if exact:
        assert np.array_equal(c, ref.astype(np.int64).astype(np.int32))
    else:
        np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4 * np.abs(ref).max())


DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([(1, 1), (2, 2), (4, 1), (1, 4), (2, 1)]), st.integers(0, 2), st.integers(0, 2),
       st.integers(0, 2), st.sampled_from(["float16", "bfloat16", "int8", "float32"]), st.randoms())
def test_mma_v2_random(warps, mi, ni, ki, dtype, rnd):
    acc_l = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=list(warps), instr_shape=[16, 8])
    bits = {"float16": 16, "bfloat16": 16, "int8": 8, "float32": 32}[dtype]
    M, N, K = 16 << mi, 8 << ni, (256 // bits if bits < 32 else 8) << ki
    rng = np.random.default_rng(rnd.randint(0, 2**31))
    if dtype == "int8":
        a = rng.integers(-128, 128, (M, K)).astype(np.int8)
        b = rng.integers(-128, 128, (K, N)).astype(np.int8)
        acc = rng.integers(-1000, 1000, (M, N)).astype(np.int32)
    else:
        npd = DTYPES.get(dtype, np.float32)
        a = rng.standard_normal((M, K)).astype(np.float32)
        b = rng.standard_normal((K, N)).astype(np.float32)
        if dtype == "float32":  # tf32 inputs: round like cvt.rna.tf32.f32 before comparing
            from gluon_trace.backends.interpreter.rules_mma import _tf32
            a, b = _tf32(a), _tf32(b)
        a, b = a.astype(npd), b.astype(npd)
        acc = rng.standard_normal((M, N)).astype(np.float32)
    kw = max(32 // bits, 1)
    kernel = make_kernel(mma_v2, acc_l, kw, M, N, K)
    _run(kernel, a, b, acc, "sm_80", warps[0] * warps[1], exact=dtype == "int8")


@settings(max_examples=8, deadline=None)
@given(st.sampled_from([(32, 8), (16, 16)]), st.sampled_from([(1, 1), (2, 2), (4, 1)]),
       st.booleans(), st.integers(0, 1), st.randoms())
def test_mfma_random(instr, warps, transposed, ki, rnd):
    m, k = instr
    acc_l = gl.amd.AMDMFMALayout(version=3, instr_shape=[m, m, k], transposed=transposed,
                                 warps_per_cta=list(warps))
    M, N, K = m * warps[0], m * warps[1], k << ki
    rng = np.random.default_rng(rnd.randint(0, 2**31))
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    acc = rng.standard_normal((M, N)).astype(np.float32)
    _run(make_kernel(mfma, acc_l, 4, M, N, K), a, b, acc, "gfx942", warps[0] * warps[1])


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([(1, 1), (2, 2), (4, 1)]), st.integers(0, 1), st.randoms())
def test_wmma_random(warps, ki, rnd):
    acc_l = gl.amd.AMDWMMALayout(version=1, transposed=False, warps_per_cta=list(warps))
    M, N, K = 16 * warps[0], 16 * warps[1], 16 << ki
    rng = np.random.default_rng(rnd.randint(0, 2**31))
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    acc = rng.standard_normal((M, N)).astype(np.float32)
    _run(make_kernel(wmma, acc_l, 16, M, N, K), a, b, acc, "gfx1100", warps[0] * warps[1])


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([8, 16, 32]), st.sampled_from([8, 16, 32]), st.sampled_from([4, 8, 16]), st.randoms())
def test_dot_fma_random(M, N, K, rnd):
    acc_l = gl.BlockedLayout([1, 1], [4, 8], [1, 1], [1, 0])
    rng = np.random.default_rng(rnd.randint(0, 2**31))
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    acc = rng.standard_normal((M, N)).astype(np.float32)
    _run(make_kernel(gl.dot_fma, acc_l, 1, M, N, K), a, b, acc, "interpreter", 1)


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([64, 128]), st.sampled_from([16, 64, 128]), st.sampled_from([16, 64]),
       st.booleans(), st.randoms())
def test_wgmma_random(M, N, K, a_in_registers, rnd):
    acc_l = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N, 16])
    rng = np.random.default_rng(rnd.randint(0, 2**31))
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    acc = rng.standard_normal((M, N)).astype(np.float32)

    @gt.jit
    def kernel(c_ptr, a_ptr, b_ptr, c0_ptr):
        ld = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
        b_smem = gl.allocate_shared_memory(gl.float16, [K, N], gl.NVMMASharedLayout.get_default_for([K, N], gl.float16),
                                           gl.load(_tile(b_ptr, K, N, ld, N)))
        if a_in_registers:
            a_op = gl.load(_tile(a_ptr, M, K, gl.DotOperandLayout(0, acc_l, k_width=2), K))
        else:
            a_op = gl.allocate_shared_memory(gl.float16, [M, K], gl.NVMMASharedLayout.get_default_for([M, K], gl.float16),
                                             gl.load(_tile(a_ptr, M, K, ld, K)))
        fence_async_shared()
        acc_v = gl.load(_tile(c0_ptr, M, N, acc_l, N))
        out = warpgroup_mma(a_op, b_smem, acc_v, is_async=True)
        out = warpgroup_mma_wait(0, deps=[out])
        gl.store(_tile(c_ptr, M, N, acc_l, N), out)
    _run(kernel, a, b, acc, "sm_90a", 4)


def test_mfma_operands_may_pack_two_k_slices(rng):
    acc_l = gl.amd.AMDMFMALayout(version=3, instr_shape=[32, 32, 8], transposed=True, warps_per_cta=[1, 1])
    M, N, K = 32, 32, 32
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    acc = rng.standard_normal((M, N)).astype(np.float32)
    _run(make_kernel(mfma, acc_l, 8, M, N, K), a, b, acc, "gfx942", 1)

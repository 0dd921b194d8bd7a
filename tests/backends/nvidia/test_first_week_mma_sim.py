"""A Gluon user's first-week tensor-core kernels (wgmma, mma_v2; fp16, bf16, tf32, fp8, int8, uint8)
emitted for sm_90a and run on ptxsim_hopper against the interpreter and numpy, on fresh random
inputs with poisoned outputs, and assembled by ptxas. The simulator lacked integer wgmma and fp8
mma.sync: those PTX paths had only been assembled before.
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.language.nvidia.ampere import async_copy, mma_v2  # noqa: E402
from gluon_trace.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,  # noqa: E402
                                                warpgroup_mma_wait)
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
ml_dtypes = pytest.importorskip("ml_dtypes")
from test_first_week_hopper import (PERSISTENT, SMALL_MMA, add_ws, add_ws_args, persistent_args,  # noqa: E402
                                    persistent_matmul, small_mma, small_mma_args)
from test_first_week_sim import _arr, both  # noqa: E402

NV = gl.NVMMASharedLayout.get_default_for


@pytest.mark.parametrize("shape, lhs, n, num_warps, warps", SMALL_MMA)
def test_small_mma(shape, lhs, n, num_warps, warps):
    make, exp = small_mma_args(*shape, np.random.default_rng())
    ref, sim, _ = both(small_mma, make, (1,), num_warps=num_warps, LHS_IN_REG=lhs, INSTR_N=n, WARPS=warps)
    np.testing.assert_allclose(_arr(sim[3]), exp, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(_arr(sim[3]), _arr(ref[3]), rtol=1e-5, atol=1e-5)


@gt.jit
def mma_bias_relu(a_desc, b_desc, bias_ptr, c_ptr, M, N, stride_cm):
    """relu(A @ B + bias): a 2-slot TMA ring with one wgmma in flight, K from the descriptor, the
    accumulator read back through a swizzled buffer into a blocked layout, masked stores."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                    instr_shape=[16, BN, 16])
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [2, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [2, BK, BN], b_desc.layout)
    bars = mbarrier.allocate_mbarrier(batch=2)
    mbarrier.init(bars.index(0), count=1)
    mbarrier.init(bars.index(1), count=1)
    off_m = gl.program_id(0) * BM
    off_n = gl.program_id(1) * BN
    nk = gl.cdiv(a_desc.shape[1], BK)
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    mbarrier.expect(bars.index(0), nbytes)
    tma.async_load(a_desc, [off_m, 0], bars.index(0), a_bufs.index(0))
    tma.async_load(b_desc, [0, off_n], bars.index(0), b_bufs.index(0))
    acc = gl.zeros([BM, BN], gl.float32, acc_l)
    for k in gl.range(0, nk):
        s = k % 2
        mbarrier.wait(bars.index(s), (k // 2) & 1)
        acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=[acc])   # step k - 1's wgmma is done: its slot is free
        with gl.if_(k + 1 < nk):
            ns = (k + 1) % 2
            mbarrier.expect(bars.index(ns), nbytes)
            tma.async_load(a_desc, [off_m, (k + 1) * BK], bars.index(ns), a_bufs.index(ns))
            tma.async_load(b_desc, [(k + 1) * BK, off_n], bars.index(ns), b_bufs.index(ns))
    acc = warpgroup_mma_wait(0, deps=[acc])
    epi = gl.allocate_shared_memory(gl.float32, [BM, BN], gl.SwizzledSharedLayout(4, 1, 8, [1, 0]))
    epi.store(acc)
    L: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [gl.num_warps(), 1], [1, 0])
    rows = off_m + gl.arange(0, BM, gl.SliceLayout(1, L))
    cols = off_n + gl.arange(0, BN, gl.SliceLayout(0, L))
    v = gl.maximum(epi.load(L) + gl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :], 0.0)
    gl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], v.to(c_ptr.dtype.element),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def test_mma_with_an_epilogue_through_shared_memory():
    rng = np.random.default_rng()
    M, N, K = int(rng.integers(65, 128)), int(rng.integers(33, 64)), 72
    a = rng.standard_normal((M, K)).astype(np.float16)
    b_rows = rng.standard_normal((K, 72)).astype(np.float16)   # rows padded to 144 bytes (TMA's strides)
    b = b_rows[:, :N]
    bias = rng.standard_normal(N).astype(np.float32)
    exp = np.maximum(a.astype(np.float32) @ b.astype(np.float32) + bias, 0)

    def make():
        return [TensorDescriptor.from_tensor(a.copy(), [64, 32], NV([64, 32], gl.float16)),
                TensorDescriptor.from_tensor(b_rows.copy()[:, :N], [32, 32], NV([32, 32], gl.float16)), bias.copy(),
                np.full((M, N), np.nan, np.float16), M, N, N]
    ref, sim, _ = both(mma_bias_relu, make, (-(-M // 64), -(-N // 32)))
    np.testing.assert_allclose(sim[3].astype(np.float32), exp, rtol=2e-3, atol=2e-2)
    # (the order of a wgmma's f32 sums is the hardware's: an fp16 rounding apart at most)
    np.testing.assert_allclose(sim[3].astype(np.float32), ref[3].astype(np.float32), rtol=1e-3, atol=1e-2)


@gt.jit
def mma_use_acc_then_reuse(a_desc, b_desc, c_desc, K):
    """A K loop whose first wgmma ignores the accumulator (use_acc=k > 0, the accumulator holds
    123 before it), A read into registers, and C stored through the A ring's bytes
    (reinterpret) once the loop is done with them."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                    instr_shape=[16, BN, 16])
    a_bufs = gl.allocate_shared_memory(gl.float16, [2, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(gl.float16, [2, BK, BN], b_desc.layout)
    bars = mbarrier.allocate_mbarrier(batch=2)
    for i in gl.static_range(2):
        mbarrier.init(bars.index(i), count=1)
    acc = gl.full([BM, BN], 123.0, gl.float32, acc_l)
    for k in gl.range(0, gl.cdiv(K, BK)):
        s = k % 2
        mbarrier.expect(bars.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
        tma.async_load(a_desc, [gl.program_id(0) * BM, k * BK], bars.index(s), a_bufs.index(s))
        tma.async_load(b_desc, [k * BK, 0], bars.index(s), b_bufs.index(s))
        mbarrier.wait(bars.index(s), (k // 2) & 1)
        acc = warpgroup_mma(a_bufs.index(s).load(gl.DotOperandLayout(0, acc_l, 2)), b_bufs.index(s), acc,
                            use_acc=k > 0)
    c_s = a_bufs.reinterpret(gl.float32, [BM, BN], c_desc.layout)
    c_s.store(acc)
    fence_async_shared()
    tma.async_store(c_desc, [gl.program_id(0) * BM, 0], c_s)
    tma.store_wait(0)


@pytest.mark.parametrize("M, N, K, num_warps", [(128, 32, 96, 4), (128, 32, 64, 8)])
def test_use_acc_and_a_reinterpreted_ring(M, N, K, num_warps):
    rng = np.random.default_rng()
    BM = 32 * num_warps // 2
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)

    def make():
        return [TensorDescriptor.from_tensor(a.copy(), [BM, 32], NV([BM, 32], gl.float16)),
                TensorDescriptor.from_tensor(b.copy(), [32, N], NV([32, N], gl.float16)),
                TensorDescriptor.from_tensor(np.full((M, N), np.nan, np.float32), [BM, N], NV([BM, N], gl.float32)), K]
    ref, sim, _ = both(mma_use_acc_then_reuse, make, (M // BM,), num_warps=num_warps)
    np.testing.assert_allclose(_arr(sim[2]), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(_arr(sim[2]), _arr(ref[2]), rtol=1e-5, atol=1e-5)


@gt.jit
def int8_rowsums(a_ptr, b_ptr, out_ptr, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr):
    """Row sums of A @ B in int8 -> int32: a 2-slot cp.async ring whose copies complete on one
    mbarrier a slot (async_copy.mbarrier_arrive, increment_count=False), mma_v2."""
    W: gl.constexpr = gl.num_warps()
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[W, 1], instr_shape=[16, 8])
    ld: gl.constexpr = gl.BlockedLayout([1, 16], [32 // (BK // 16), BK // 16], [W, 1], [1, 0])
    ldb: gl.constexpr = gl.BlockedLayout([1, 16], [32 // (BN // 16), BN // 16], [W, 1], [1, 0])
    sl: gl.constexpr = gl.SwizzledSharedLayout(vec=16, per_phase=1, max_phase=4, order=[1, 0])
    a_s = gl.allocate_shared_memory(gl.int8, [2, BM, BK], sl)
    b_s = gl.allocate_shared_memory(gl.int8, [2, BK, BN], sl)
    bars = mbarrier.allocate_mbarrier(batch=2)
    mbarrier.init(bars.index(0), count=1)
    mbarrier.init(bars.index(1), count=1)
    rm = gl.arange(0, BM, gl.SliceLayout(1, ld))
    rk = gl.arange(0, BK, gl.SliceLayout(0, ld))
    kb = gl.arange(0, BK, gl.SliceLayout(1, ldb))
    rn = gl.arange(0, BN, gl.SliceLayout(0, ldb))
    acc = gl.zeros([BM, BN], gl.int32, acc_l)
    for k in gl.range(0, gl.cdiv(K, BK)):
        s = k % 2
        async_copy.async_load(a_s.index(s), a_ptr + rm[:, None] * K + (k * BK + rk)[None, :])
        async_copy.async_load(b_s.index(s), b_ptr + (k * BK + kb)[:, None] * BN + rn[None, :])
        async_copy.mbarrier_arrive(bars.index(s), increment_count=False)
        mbarrier.wait(bars.index(s), (k // 2) & 1)
        acc = mma_v2(a_s.index(s).load(gl.DotOperandLayout(0, acc_l, 4)),
                     b_s.index(s).load(gl.DotOperandLayout(1, acc_l, 4)), acc)
    gl.store(out_ptr + gl.arange(0, BM, gl.SliceLayout(1, acc_l)), gl.sum(acc, axis=1))


@pytest.mark.parametrize("BM, BN, BK, K, num_warps", [(64, 32, 32, 96, 4), (32, 64, 64, 128, 2)])
def test_int8_mma_v2_fed_by_copies_on_mbarriers(BM, BN, BK, K, num_warps):
    rng = np.random.default_rng()
    a = rng.integers(-128, 128, (BM, K)).astype(np.int8)
    b = rng.integers(-128, 128, (K, BN)).astype(np.int8)
    ref, sim, _ = both(int8_rowsums, lambda: [a.copy(), b.copy(), np.full(BM, -123456789, np.int32), K], (1,),
                       num_warps=num_warps, BM=BM, BN=BN, BK=BK)
    assert np.array_equal(sim[2], (a.astype(np.int64) @ b.astype(np.int64)).sum(1).astype(np.int32))
    assert np.array_equal(ref[2], sim[2])


def test_maxnreg_reaches_ptxas():
    """maxnreg caps a plain kernel's registers (.maxnreg), and is the starting budget a
    warp-specialized kernel's setmaxnreg moves share."""
    make, _ = add_ws_args((32, 64), np.random.default_rng())
    ck = add_ws.trace(*make(), XBLOCK=32, YBLOCK=64, NL=1, NS=1, num_warps=4, maxnreg=128,
                      target="sm_90a").compile("sm_90a")
    assert ".maxnreg 128" in ck.asm and ck.registers <= 128
    make, _ = small_mma_args(64, 32, 32, np.random.default_rng())
    ck = small_mma.trace(*make(), LHS_IN_REG=True, INSTR_N=32, WARPS=[4, 1], num_warps=4, maxnreg=64,
                         target="sm_90a").compile("sm_90a")
    assert ".maxnreg 64" in ck.asm and ck.registers <= 64


@pytest.mark.parametrize("shape, nb, grid, num_warps", PERSISTENT)
def test_persistent_matmul_with_aggregates(shape, nb, grid, num_warps):
    """Gluon's persistence tutorial shape: the wgmma state and the scheduler are objects carried
    through the tile and K loops (they were escaped values)."""
    make, exp = persistent_args(*shape, num_warps, np.random.default_rng())
    ref, sim, _ = both(persistent_matmul, make, (grid,), num_warps=num_warps, NB=nb)
    np.testing.assert_allclose(_arr(sim[2]).astype(np.float32), exp, rtol=2e-3, atol=2e-2)
    # (the order of a wgmma's f32 sums is the hardware's: an fp16 rounding apart at most)
    np.testing.assert_allclose(_arr(sim[2]).astype(np.float32), _arr(ref[2]).astype(np.float32), rtol=1e-3, atol=1e-2)


@gt.jit
def int8_wgmma(a_desc, b_desc, out_ptr, LHS_REG: gl.constexpr):
    """A @ B^T in 8-bit integers on wgmma (K-major B), accumulated in int32, A from shared memory or
    registers."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 32])
    a_s = gl.allocate_shared_memory(a_desc.dtype, [BM, BK], a_desc.layout)
    b_s = gl.allocate_shared_memory(b_desc.dtype, [BN, BK], b_desc.layout)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma.async_load(a_desc, [gl.program_id(0) * BM, 0], bar, a_s)
    tma.async_load(b_desc, [0, 0], bar, b_s)
    mbarrier.wait(bar, 0)
    a = a_s.load(gl.DotOperandLayout(0, acc_l, 4)) if LHS_REG else a_s
    acc = warpgroup_mma(a, b_s.permute((1, 0)), gl.full([BM, BN], 7, gl.int32, acc_l))
    rows = gl.program_id(0) * BM + gl.arange(0, BM, gl.SliceLayout(1, acc_l))
    cols = gl.arange(0, BN, gl.SliceLayout(0, acc_l))
    gl.store(out_ptr + rows[:, None] * BN + cols[None, :], acc)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("BN, BK, lhs", [(32, 64, False), (16, 128, True), (64, 32, True)])
def test_8_bit_integer_wgmma(dtype, BN, BK, lhs):
    """ptxsim_hopper had no s8/u8 wgmma (NotImplementedError): the emitter's integer wgmma had
    only been assembled, never run."""
    rng = np.random.default_rng()
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    a = rng.integers(lo, hi, (128, BK)).astype(dtype)
    b = rng.integers(lo, hi, (BN, BK)).astype(dtype)
    g = getattr(gl, dtype)

    def make():
        return [TensorDescriptor.from_tensor(a.copy(), [64, BK], NV([64, BK], g)),
                TensorDescriptor.from_tensor(b.copy(), [BN, BK], NV([BN, BK], g)),
                np.full((128, BN), -123456789, np.int32)]
    ref, sim, text = both(int8_wgmma, make, (2,), LHS_REG=lhs)
    exp = ((a.astype(np.int64) @ b.astype(np.int64).T + 7) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    assert f".s32.{'s8.s8' if dtype == 'int8' else 'u8.u8'}" in text
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp)


@gt.jit
def mma_v2_from_shared(a_ptr, b_ptr, out_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr, KW: gl.constexpr):
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[gl.num_warps(), 1],
                                                    instr_shape=[16, 8])
    ld: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [gl.num_warps(), 1], [1, 0])
    sl: gl.constexpr = gl.SwizzledSharedLayout(vec=4, per_phase=1, max_phase=8, order=[1, 0])
    rm = gl.arange(0, M, gl.SliceLayout(1, ld))
    rk = gl.arange(0, K, gl.SliceLayout(0, ld))
    rkb = gl.arange(0, K, gl.SliceLayout(1, ld))
    rn = gl.arange(0, N, gl.SliceLayout(0, ld))
    a_s = gl.allocate_shared_memory(a_ptr.dtype.element, [M, K], sl, gl.load(a_ptr + rm[:, None] * K + rk[None, :]))
    b_s = gl.allocate_shared_memory(b_ptr.dtype.element, [K, N], sl, gl.load(b_ptr + rkb[:, None] * N + rn[None, :]))
    acc = mma_v2(a_s.load(gl.DotOperandLayout(0, acc_l, KW)), b_s.load(gl.DotOperandLayout(1, acc_l, KW)),
                 gl.zeros([M, N], gl.float32, acc_l))
    om = gl.arange(0, M, gl.SliceLayout(1, acc_l))
    on = gl.arange(0, N, gl.SliceLayout(0, acc_l))
    gl.store(out_ptr + om[:, None] * N + on[None, :], acc)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_mma_v2(dtype):
    """mma.sync on fp8 (sm_89+): ptxsim_tc decoded no e4m3/e5m2 fragments (NotImplementedError)."""
    rng = np.random.default_rng()
    h = getattr(ml_dtypes, dtype)
    a = rng.standard_normal((32, 64)).astype(h)
    b = rng.standard_normal((64, 32)).astype(h)
    ref, sim, text = both(mma_v2_from_shared, lambda: [a.copy(), b.copy(), np.full((32, 32), np.nan, np.float32)], (1,),
                          M=32, N=32, K=64, KW=4)
    exp = a.astype(np.float64) @ b.astype(np.float64)
    assert "mma.sync.aligned.m16n8k32" in text
    np.testing.assert_allclose(sim[2], exp, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(sim[2], ref[2], rtol=1e-5, atol=1e-4)


@gt.jit
def f16_accumulator_loop(a_desc, b_desc, out_ptr, K, ASYNC: gl.constexpr):
    """acc (float16, starting at 0.5) += A @ B over a 2-slot TMA ring, the wgmma synchronous or
    one group in flight; the accumulator is carried by the loop (in its 16 bits)."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    a_bufs = gl.allocate_shared_memory(gl.float16, [2, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(gl.float16, [2, BK, BN], b_desc.layout)
    bars = mbarrier.allocate_mbarrier(batch=2)
    mbarrier.init(bars.index(0), count=1)
    mbarrier.init(bars.index(1), count=1)
    nk = gl.cdiv(K, BK)
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    mbarrier.expect(bars.index(0), nbytes)
    tma.async_load(a_desc, [0, 0], bars.index(0), a_bufs.index(0))
    tma.async_load(b_desc, [0, 0], bars.index(0), b_bufs.index(0))
    acc = gl.full([BM, BN], 0.5, gl.float16, acc_l)
    for k in gl.range(0, nk):
        s = k % 2
        mbarrier.wait(bars.index(s), (k // 2) & 1)
        if ASYNC:
            acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=[acc])
        else:
            acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc)
        with gl.if_(k + 1 < nk):
            ns = (k + 1) % 2
            mbarrier.expect(bars.index(ns), nbytes)
            tma.async_load(a_desc, [0, (k + 1) * BK], bars.index(ns), a_bufs.index(ns))
            tma.async_load(b_desc, [(k + 1) * BK, 0], bars.index(ns), b_bufs.index(ns))
    acc = warpgroup_mma_wait(0, deps=[acc])
    rows = gl.arange(0, BM, gl.SliceLayout(1, acc_l))
    cols = gl.arange(0, BN, gl.SliceLayout(0, acc_l))
    gl.store(out_ptr + rows[:, None] * BN + cols[None, :], acc)


@pytest.mark.parametrize("K, is_async", [(96, True), (96, False), (32, True)])
def test_float16_accumulator_wgmma(K, is_async):
    """The NVIDIA emitter refused a float16 accumulator ('accumulates in float32') that the
    interpreter ran; it now runs the f32 form and rounds to float16 when the group retires. The
    in-place async form read the loop carrier's old 16 bits (a stale cache) until that was fixed."""
    rng = np.random.default_rng()
    a = (rng.standard_normal((64, K)) * 0.25).astype(np.float16)
    b = (rng.standard_normal((K, 32)) * 0.25).astype(np.float16)

    def make():
        return [TensorDescriptor.from_tensor(a.copy(), [64, 32], NV([64, 32], gl.float16)),
                TensorDescriptor.from_tensor(b.copy(), [32, 32], NV([32, 32], gl.float16)),
                np.full((64, 32), np.nan, np.float16), K]
    ref, sim, _ = both(f16_accumulator_loop, make, (1,), ASYNC=is_async)
    exp = a.astype(np.float64) @ b.astype(np.float64) + 0.5
    np.testing.assert_allclose(sim[2].astype(np.float64), exp, rtol=5e-3, atol=5e-3)
    np.testing.assert_allclose(sim[2].astype(np.float64), ref[2].astype(np.float64), rtol=5e-3, atol=5e-3)

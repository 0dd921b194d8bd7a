"""An MFMA GEMM staged by async copies: C = A @ B^T with A [M, K] and B [N, K] both K-contiguous
(a linear layer's weights), through a two-stage LDS ring.

Each tile goes global -> LDS by ``async_copy.async_load``, one dword of the row a lane, rows
unswizzled: on gfx942 that is LDS DMA (``buffer_load_dword ... lds``, backends/amd/lds_dma.py),
no VGPRs and no ds_write; elsewhere (gfx90a, or rows not dword-aligned: K not known to be a
multiple of 16) the VGPR path of the same copy. The next stage's copy is issued before this
stage's MFMAs read their operands (B's through a permuted view: its K-contiguous rows are the
operand's columns) and waited for after them."""
import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.amd.cdna3 import mfma
from gluon_trace.language.nvidia.ampere import async_copy


@gt.jit
def matmul_mfma_async(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bn, stride_cm,
                      BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr):
    """f16/bf16 C = A @ B^T on v_mfma_f32_32x32x8 (gfx90a, gfx942; wave64)."""
    W: gl.constexpr = gl.num_warps()
    T: gl.constexpr = gl.threads_per_warp()
    acc_l: gl.constexpr = gl.amd.AMDMFMALayout(version=3, instr_shape=[32, 32, 8], transposed=True,
                                               warps_per_cta=[2, W // 2])
    a_op: gl.constexpr = gl.DotOperandLayout(0, acc_l, k_width=4)
    b_op: gl.constexpr = gl.DotOperandLayout(1, acc_l, k_width=4)
    ld: gl.constexpr = gl.BlockedLayout([1, 2], [T // (BK // 2), BK // 2], [W, 1], [1, 0])  # a dword a lane
    sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
    dt = a_ptr.dtype.element
    rm = gl.program_id(0) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, ld))
    rn = gl.program_id(1) * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, ld))
    kk = gl.arange(0, BK, layout=gl.SliceLayout(0, ld))
    a_s = gl.allocate_shared_memory(dt, [2, BM, BK], sl)
    b_s = gl.allocate_shared_memory(dt, [2, BN, BK], sl)
    async_copy.async_load(a_s.index(0), a_ptr + rm[:, None] * stride_am + kk[None, :],
                          mask=(rm[:, None] < M) & (kk[None, :] < K))
    async_copy.async_load(b_s.index(0), b_ptr + rn[:, None] * stride_bn + kk[None, :],
                          mask=(rn[:, None] < N) & (kk[None, :] < K))
    async_copy.commit_group()
    acc = gl.zeros([BM, BN], gl.float32, acc_l)
    for k in gl.range(0, gl.cdiv(K, BK)):
        s = k % 2
        k1 = (k + 1) * BK
        async_copy.async_load(a_s.index(1 - s), a_ptr + rm[:, None] * stride_am + k1 + kk[None, :],
                              mask=(rm[:, None] < M) & (k1 + kk[None, :] < K))
        async_copy.async_load(b_s.index(1 - s), b_ptr + rn[:, None] * stride_bn + k1 + kk[None, :],
                              mask=(rn[:, None] < N) & (k1 + kk[None, :] < K))
        async_copy.commit_group()
        async_copy.wait_group(1)  # this stage has landed; the next one is in flight
        acc = mfma(a_s.index(s).load(a_op), b_s.index(s).permute((1, 0)).load(b_op), acc)
    cm = gl.program_id(0) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, acc_l))
    cn = gl.program_id(1) * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_l))
    gl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :], acc.to(c_ptr.dtype.element),
             mask=(cm[:, None] < M) & (cn[None, :] < N))

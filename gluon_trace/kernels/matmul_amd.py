"""AMD matrix-core GEMMs: MFMA on CDNA (gfx90a, gfx942) and WMMA on RDNA3 (gfx1100).

Both stage K through one LDS buffer per operand: the next tile's global loads are issued into
registers before this tile's MMAs and written to LDS after them (behind the barrier membar
places once every wave has read its operands), so global latency overlaps the math -- the
structure of Triton's AMD stream pipeliner. One buffer rather than two: LDS limits how many
workgroups share a CU, and the register prefetch already hides the loads."""
import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.amd.cdna3 import mfma
from gluon_trace.language.amd.rdna3 import wmma


def _load_tile(ptr, rows, cols, stride, n_rows, n_cols):
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    return gl.load(ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0)


def _gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM, BN, BK,
          acc_l, a_op, b_op, mma):
    W = gl.num_warps()
    T = gl.threads_per_warp()
    a_ld = gl.BlockedLayout([1, 8], [T // (BK // 8), BK // 8], [W, 1], [1, 0])
    b_ld = gl.BlockedLayout([1, 8], [T // (BN // 8), BN // 8], [W, 1], [1, 0])
    a_sl = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])
    # B K-contiguous in LDS (written transposed), so each lane reads its k_width operand
    # elements as one ds_read_b64 rather than one ds_read_u16 apiece
    b_sl = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[0, 1])
    pid_m = gl.program_id(0)
    pid_n = gl.program_id(1)
    rm = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, a_ld))
    ka = gl.arange(0, BK, layout=gl.SliceLayout(0, a_ld))
    kb = gl.arange(0, BK, layout=gl.SliceLayout(1, b_ld))
    rn = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, b_ld))
    a_smem = gl.allocate_shared_memory(a_ptr.dtype.element, [BM, BK], a_sl)
    b_smem = gl.allocate_shared_memory(b_ptr.dtype.element, [BK, BN], b_sl)
    a_smem.store(_load_tile(a_ptr, rm, ka, stride_am, M, K))
    b_smem.store(_load_tile(b_ptr, kb, rn, stride_bk, K, N))
    acc = gl.zeros([BM, BN], gl.int32 if a_ptr.dtype.element.is_int else gl.float32, acc_l)  # (int8 MMAs: i32)
    for k in gl.range(0, gl.cdiv(K, BK)):
        k1 = (k + 1) * BK
        a_next = _load_tile(a_ptr, rm, k1 + ka, stride_am, M, K)
        b_next = _load_tile(b_ptr, k1 + kb, rn, stride_bk, K, N)
        acc = mma(a_smem.load(a_op), b_smem.load(b_op), acc)
        a_smem.store(a_next)
        b_smem.store(b_next)
    cm = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, acc_l))
    cn = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_l))
    gl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :], acc.to(c_ptr.dtype.element),
             mask=(cm[:, None] < M) & (cn[None, :] < N))


@gt.jit
def matmul_mfma(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr):
    """f16/bf16 GEMM on v_mfma_f32_32x32x8 (gfx90a, gfx942; wave64)."""
    W: gl.constexpr = gl.num_warps()
    acc_l: gl.constexpr = gl.amd.AMDMFMALayout(version=3, instr_shape=[32, 32, 8], transposed=True,
                                               warps_per_cta=[2, W // 2])
    _gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM, BN, BK, acc_l,
          gl.DotOperandLayout(0, acc_l, k_width=4), gl.DotOperandLayout(1, acc_l, k_width=4), mfma)


@gt.jit
def matmul_wmma(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr):
    """f16/bf16 GEMM on v_wmma_f32_16x16x16 (gfx1100; wave32)."""
    W: gl.constexpr = gl.num_warps()
    acc_l: gl.constexpr = gl.amd.AMDWMMALayout(version=1, transposed=False, warps_per_cta=[2, W // 2])
    _gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM, BN, BK, acc_l,
          gl.DotOperandLayout(0, acc_l, k_width=16), gl.DotOperandLayout(1, acc_l, k_width=16), wmma)

"""matmul_amd's MFMA GEMM on 8-bit operands: gfx942's FNUZ fp8 formats (float8e4b8,
float8e5b16) on the 32x32x16 fp8 MFMA, and int8 on the int8 MFMA (32x32x16 on gfx942, 32x32x8 on
gfx90a; int32 results). The same LDS-staged K loop as the 16-bit GEMM; its
global tiles load 8 bytes a thread as one global_load_dwordx2 (backends/amd/memory.py), the
MFMA operands come from LDS as one ds_read_b64 of 8 bytes a lane."""
import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.kernels import matmul_amd
from gluon_trace.language.amd.cdna3 import mfma


@gt.jit
def matmul_fp8(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
               BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr):
    """C (f32) = A @ B, A and B in one of gfx942's fp8 formats (each its own: fp8 x bf8 too)."""
    W: gl.constexpr = gl.num_warps()
    acc_l: gl.constexpr = gl.amd.AMDMFMALayout(version=3, instr_shape=[32, 32, 16], transposed=True,
                                               warps_per_cta=[2, W // 2])
    matmul_amd._gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM, BN, BK, acc_l,
                     gl.DotOperandLayout(0, acc_l, k_width=8), gl.DotOperandLayout(1, acc_l, k_width=8), mfma)


@gt.jit
def matmul_i8(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
              BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, CDNA: gl.constexpr = 3):
    """C (int32) = A @ B in int8 (exact: i32 accumulators wrap as the hardware's). CDNA: 3 for
    gfx942 (v_mfma_i32_32x32x16_i8, 8 bytes a lane), 2 for gfx90a (v_mfma_i32_32x32x8_i8, 4)."""
    W: gl.constexpr = gl.num_warps()
    IK: gl.constexpr = 16 if CDNA == 3 else 8
    acc_l: gl.constexpr = gl.amd.AMDMFMALayout(version=CDNA, instr_shape=[32, 32, IK], transposed=True,
                                               warps_per_cta=[2, W // 2])
    matmul_amd._gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM, BN, BK, acc_l,
                     gl.DotOperandLayout(0, acc_l, k_width=IK // 2), gl.DotOperandLayout(1, acc_l, k_width=IK // 2),
                     mfma)

"""C = A @ B with FMAs on the vector units: gl.dot_fma, any target."""
import gluon_trace as gt
from gluon_trace import language as gl


@gt.jit
def matmul_fma(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
               BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr):
    acc_l: gl.constexpr = gl.BlockedLayout([BM // (4 * gl.num_warps()), BN // 8], [4, 8],
                                           [gl.num_warps(), 1], [1, 0])
    a_l: gl.constexpr = gl.DotOperandLayout(0, acc_l, k_width=1)
    b_l: gl.constexpr = gl.DotOperandLayout(1, acc_l, k_width=1)
    pid_m = gl.program_id(0)
    pid_n = gl.program_id(1)
    rm = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, a_l))
    ka = gl.arange(0, BK, layout=gl.SliceLayout(0, a_l))
    kb = gl.arange(0, BK, layout=gl.SliceLayout(1, b_l))
    rn = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, b_l))
    acc = gl.zeros([BM, BN], gl.float32, acc_l)
    for k in gl.range(0, K, BK):
        a_mask = (rm[:, None] < M) & ((k + ka)[None, :] < K)
        a = gl.load(a_ptr + rm[:, None] * stride_am + (k + ka)[None, :], mask=a_mask, other=0.0)
        b_mask = ((k + kb)[:, None] < K) & (rn[None, :] < N)
        b = gl.load(b_ptr + (k + kb)[:, None] * stride_bk + rn[None, :], mask=b_mask, other=0.0)
        acc = gl.dot_fma(a.to(gl.float32), b.to(gl.float32), acc)
    cm = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, acc_l))
    cn = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_l))
    c_mask = (cm[:, None] < M) & (cn[None, :] < N)
    gl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :], acc.to(c_ptr.dtype.element), mask=c_mask)

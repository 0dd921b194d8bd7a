"""Ampere-style GEMM: a cp.async ring of STAGES shared buffers feeding mma.sync (mma_v2)."""
import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.ampere import async_copy, mma_v2


@gt.jit
def matmul_ampere(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                  BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr):
    W: gl.constexpr = gl.num_warps()
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[W // 2, 2],
                                                    instr_shape=[16, 8])
    a_op: gl.constexpr = gl.DotOperandLayout(0, acc_l, k_width=2)
    b_op: gl.constexpr = gl.DotOperandLayout(1, acc_l, k_width=2)
    # global -> shared: 8 contiguous 16-bit elements (16 bytes) per thread and copy
    a_ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (BK // 8), BK // 8], [W, 1], [1, 0])
    b_ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // (BN // 8), BN // 8], [W, 1], [1, 0])
    a_sl: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])
    b_sl: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])

    pid_m = gl.program_id(0)
    pid_n = gl.program_id(1)
    rm = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, a_ld))
    ka = gl.arange(0, BK, layout=gl.SliceLayout(0, a_ld))
    kb = gl.arange(0, BK, layout=gl.SliceLayout(1, b_ld))
    rn = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, b_ld))
    a_bufs = gl.allocate_shared_memory(a_ptr.dtype.element, [STAGES, BM, BK], a_sl)
    b_bufs = gl.allocate_shared_memory(b_ptr.dtype.element, [STAGES, BK, BN], b_sl)
    k_tiles = gl.cdiv(K, BK)

    # prologue: STAGES - 1 copies in flight (masked copies write zeros past the edges)
    for s in gl.static_range(STAGES - 1):
        k0 = s * BK
        async_copy.async_load(a_bufs.index(s), a_ptr + rm[:, None] * stride_am + (k0 + ka)[None, :],
                              mask=(rm[:, None] < M) & ((k0 + ka)[None, :] < K))
        async_copy.async_load(b_bufs.index(s), b_ptr + (k0 + kb)[:, None] * stride_bk + rn[None, :],
                              mask=((k0 + kb)[:, None] < K) & (rn[None, :] < N))
        async_copy.commit_group()

    acc = gl.zeros([BM, BN], gl.float32, acc_l)
    for k in gl.range(0, k_tiles):
        async_copy.wait_group(STAGES - 2)  # the copy of step k has landed
        s = k % STAGES
        a = a_bufs.index(s).load(a_op)
        b = b_bufs.index(s).load(b_op)
        acc = mma_v2(a, b, acc)
        # refill the slot step k - 1 used (read above, by every warp, before this copy)
        nk = k + STAGES - 1
        ns = nk % STAGES
        k0 = nk * BK
        async_copy.async_load(a_bufs.index(ns), a_ptr + rm[:, None] * stride_am + (k0 + ka)[None, :],
                              mask=(rm[:, None] < M) & ((k0 + ka)[None, :] < K))
        async_copy.async_load(b_bufs.index(ns), b_ptr + (k0 + kb)[:, None] * stride_bk + rn[None, :],
                              mask=((k0 + kb)[:, None] < K) & (rn[None, :] < N))
        async_copy.commit_group()
    async_copy.wait_group(0)

    cm = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, acc_l))
    cn = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_l))
    gl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :], acc.to(c_ptr.dtype.element),
             mask=(cm[:, None] < M) & (cn[None, :] < N))

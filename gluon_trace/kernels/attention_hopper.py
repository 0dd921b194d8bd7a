"""Attention forward on Hopper: Q resident in shared memory, K/V tiles double-buffered by TMA,
S = Q K^T and O += P V on wgmma, the online softmax in registers (exp2 with the scale folded
in), causal masking that skips fully masked KV tiles. Tensors are [B*H, S, D] behind 3-D TMA
descriptors with [1, BLOCK, D] boxes, so a block past a head's end reads zeros and stores
nothing rather than touching the next head."""
import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma

LOG2E = 1.4426950408889634


@gt.jit
def attention_fwd(q_desc, k_desc, v_desc, o_desc, seq_len, sm_scale,
                  CAUSAL: gl.constexpr, STAGES: gl.constexpr = 2):
    BM: gl.constexpr = q_desc.block_type.shape[1]
    D: gl.constexpr = q_desc.block_type.shape[2]
    BN: gl.constexpr = k_desc.block_type.shape[1]
    W: gl.constexpr = gl.num_warps()
    s_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1],
                                                  instr_shape=[16, BN, 16])
    o_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1],
                                                  instr_shape=[16, D, 16])
    p_op: gl.constexpr = gl.DotOperandLayout(0, o_l, k_width=2)
    dtype = q_desc.dtype

    start_m = gl.program_id(0)
    bh = gl.program_id(1)
    q_smem = gl.allocate_shared_memory(dtype, [1, BM, D], q_desc.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, 1, BN, D], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, 1, BN, D], v_desc.layout)
    q_bar = mbarrier.allocate_mbarrier()
    kv_bars = mbarrier.allocate_mbarrier(batch=STAGES)
    mbarrier.init(q_bar, count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(kv_bars.index(s), count=1)
    kv_bytes: gl.constexpr = k_desc.block_type.nbytes + v_desc.block_type.nbytes

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_load(q_desc, [bh, start_m * BM, 0], q_bar, q_smem)
    if CAUSAL:
        hi = gl.minimum(seq_len, (start_m + 1) * BM)  # tiles right of the diagonal are skipped
    else:
        hi = seq_len + 0
    n_tiles = gl.cdiv(hi, BN)
    mbarrier.expect(kv_bars.index(0), kv_bytes)
    tma.async_load(k_desc, [bh, 0, 0], kv_bars.index(0), k_bufs.index(0))
    tma.async_load(v_desc, [bh, 0, 0], kv_bars.index(0), v_bufs.index(0))
    mbarrier.wait(q_bar, 0)
    q = q_smem.reshape([BM, D])

    m_i = gl.full([BM], -float("inf"), gl.float32, gl.SliceLayout(1, s_l))
    l_i = gl.zeros([BM], gl.float32, gl.SliceLayout(1, s_l))
    acc = gl.zeros([BM, D], gl.float32, o_l)
    rows = start_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, s_l))
    cols0 = gl.arange(0, BN, layout=gl.SliceLayout(0, s_l))
    qk_scale = sm_scale * LOG2E
    for j in gl.range(0, n_tiles):
        s = j % STAGES
        with gl.if_(j + 1 < n_tiles):  # prefetch the next tile into the other stage
            ns = (j + 1) % STAGES
            mbarrier.expect(kv_bars.index(ns), kv_bytes)
            tma.async_load(k_desc, [bh, (j + 1) * BN, 0], kv_bars.index(ns), k_bufs.index(ns))
            tma.async_load(v_desc, [bh, (j + 1) * BN, 0], kv_bars.index(ns), v_bufs.index(ns))
        mbarrier.wait(kv_bars.index(s), (j // STAGES) & 1)
        k_t = k_bufs.index(s).reshape([BN, D]).permute((1, 0))
        qk = warpgroup_mma(q, k_t, gl.zeros([BM, BN], gl.float32, s_l), use_acc=False)
        cols = j * BN + cols0
        keep = cols[None, :] < seq_len
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        qk = gl.where(keep, qk * qk_scale, -float("inf"))
        m_new = gl.maximum(m_i, gl.max(qk, 1))
        p = gl.exp2(qk - m_new[:, None])
        alpha = gl.exp2(m_i - m_new)
        l_i = l_i * alpha + gl.sum(p, 1)
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_l))[:, None]
        p_in = gl.convert_layout(p.to(dtype), p_op)
        acc = warpgroup_mma(p_in, v_bufs.index(s).reshape([BN, D]), acc)
        m_i = m_new
    acc = acc / gl.convert_layout(l_i, gl.SliceLayout(1, o_l))[:, None]
    o_smem = gl.allocate_shared_memory(o_desc.dtype, [1, BM, D], o_desc.layout)
    o_smem.reshape([BM, D]).store(acc.to(o_desc.dtype))
    fence_async_shared()
    tma.async_store(o_desc, [bh, start_m * BM, 0], o_smem)
    tma.store_wait(0)

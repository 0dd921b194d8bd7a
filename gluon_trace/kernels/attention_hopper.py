"""Attention forward on Hopper: Q resident in shared memory, K/V tiles double-buffered by TMA,
S = Q K^T and O += P V on wgmma, the online softmax in registers (exp2 with the scale folded
in), causal masking that skips fully masked KV tiles. Tensors are [B*H, S, D] behind 3-D TMA
descriptors with [1, BLOCK, D] boxes, so a block past a head's end reads zeros and stores
nothing rather than touching the next head."""
import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                warpgroup_mma_wait)

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
    acc = acc * gl.convert_layout(1.0 / l_i, gl.SliceLayout(1, o_l))[:, None]  # a division a row
    o_smem = gl.allocate_shared_memory(o_desc.dtype, [1, BM, D], o_desc.layout)
    o_smem.reshape([BM, D]).store(acc.to(o_desc.dtype))
    fence_async_shared()
    tma.async_store(o_desc, [bh, start_m * BM, 0], o_smem)
    tma.store_wait(0)


def _softmax_step(qk, m_i, l_i, rows, cols, seq_len, qk_scale, MASK):
    """Online softmax of one S tile: (P, the rescale factor of what was summed so far, m, l)."""
    if MASK:  # only tiles that cross the sequence end or the diagonal pay for the mask
        keep = cols[None, :] < seq_len
        if MASK == 2:
            keep = keep & (cols[None, :] <= rows[:, None])
        qk = gl.where(keep, qk * qk_scale, -float("inf"))
    else:
        qk = qk * qk_scale
    m_new = gl.maximum(m_i, gl.max(qk, 1))
    p = gl.exp2(qk - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    return p, alpha, m_new, l_i * alpha + gl.sum(p, 1)


@gt.jit
def attention_fwd_pipelined(q_desc, k_desc, v_desc, o_desc, seq_len, sm_scale,
                            CAUSAL: gl.constexpr, STAGES: gl.constexpr = 3):
    """The same attention with the tensor cores kept busy during the softmax: S(j+1) = Q K(j+1)^T
    is issued before the softmax of tile j and O += P(j) V(j) runs while the next softmax
    computes (async wgmma groups retire in order: waiting for all but one leaves the newest in
    flight). Tiles that need no mask (inside the sequence, left of the diagonal) skip it.
    STAGES >= 3: tile j+1's keys must be loading while tile j is processed and tile j-1's slot
    is refilled only once its P V has retired."""
    gl.static_assert(STAGES >= 3, "attention_fwd_pipelined needs STAGES >= 3")
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
        hi = gl.minimum(seq_len, (start_m + 1) * BM)
    else:
        hi = seq_len + 0
    n_tiles = gl.cdiv(hi, BN)
    # tiles below this one need no mask: wholly inside the sequence and left of the diagonal
    if CAUSAL:
        n_free = gl.minimum(start_m * BM, seq_len) // BN
    else:
        n_free = seq_len // BN
    for i in gl.static_range(STAGES - 1):  # the first tiles' loads
        with gl.if_(i < n_tiles):
            mbarrier.expect(kv_bars.index(i), kv_bytes)
            tma.async_load(k_desc, [bh, i * BN, 0], kv_bars.index(i), k_bufs.index(i))
            tma.async_load(v_desc, [bh, i * BN, 0], kv_bars.index(i), v_bufs.index(i))
    mbarrier.wait(q_bar, 0)
    q = q_smem.reshape([BM, D])

    m_i = gl.full([BM], -float("inf"), gl.float32, gl.SliceLayout(1, s_l))
    l_i = gl.zeros([BM], gl.float32, gl.SliceLayout(1, s_l))
    acc = gl.zeros([BM, D], gl.float32, o_l)
    rows = start_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, s_l))
    cols0 = gl.arange(0, BN, layout=gl.SliceLayout(0, s_l))
    qk_scale = sm_scale * LOG2E
    mbarrier.wait(kv_bars.index(0), 0)
    qk = warpgroup_mma(q, k_bufs.index(0).reshape([BN, D]).permute((1, 0)), gl.zeros([BM, BN], gl.float32, s_l),
                       use_acc=False, is_async=True)
    qk = warpgroup_mma_wait(0, deps=[qk])
    for j in gl.range(0, n_tiles):
        s = j % STAGES
        nxt = j + 1
        # S(j+1) while the softmax of tile j runs (the last tile's is a harmless repeat of its own)
        nxt_ok = nxt < n_tiles
        kn = gl.where(nxt_ok, nxt, j)
        kn_s = kn % STAGES
        mbarrier.wait(kv_bars.index(kn_s), (kn // STAGES) & 1)
        qk_next = warpgroup_mma(q, k_bufs.index(kn_s).reshape([BN, D]).permute((1, 0)),
                                gl.zeros([BM, BN], gl.float32, s_l), use_acc=False, is_async=True)
        cols = j * BN + cols0
        if CAUSAL:
            mask_kind = 2
        else:
            mask_kind = 1
        p, alpha = qk, m_i  # (both branches rebind them)
        with gl.if_(j < n_free):
            p, alpha, m_i, l_i = _softmax_step(qk, m_i, l_i, rows, cols, seq_len, qk_scale, 0)
        with gl.else_():
            p, alpha, m_i, l_i = _softmax_step(qk, m_i, l_i, rows, cols, seq_len, qk_scale, mask_kind)
        # O += P V(j): the previous group (S(j+1)) may still run; O's last update is done
        acc = warpgroup_mma_wait(1, deps=[acc])
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_l))[:, None]
        p_in = gl.convert_layout(p.to(dtype), p_op)
        acc = warpgroup_mma(p_in, v_bufs.index(s).reshape([BN, D]), acc, is_async=True)
        qk = warpgroup_mma_wait(1, deps=[qk_next])
        # tile j+STAGES-1 into the slot tile j-1 used (its S and O updates have retired)
        fill = j + STAGES - 1
        with gl.if_(fill < n_tiles):
            fs = fill % STAGES
            mbarrier.expect(kv_bars.index(fs), kv_bytes)
            tma.async_load(k_desc, [bh, fill * BN, 0], kv_bars.index(fs), k_bufs.index(fs))
            tma.async_load(v_desc, [bh, fill * BN, 0], kv_bars.index(fs), v_bufs.index(fs))
    acc = warpgroup_mma_wait(0, deps=[acc])
    acc = acc * gl.convert_layout(1.0 / l_i, gl.SliceLayout(1, o_l))[:, None]  # a division a row
    o_smem = gl.allocate_shared_memory(o_desc.dtype, [1, BM, D], o_desc.layout)
    o_smem.reshape([BM, D]).store(acc.to(o_desc.dtype))
    fence_async_shared()
    tma.async_store(o_desc, [bh, start_m * BM, 0], o_smem)
    tma.store_wait(0)

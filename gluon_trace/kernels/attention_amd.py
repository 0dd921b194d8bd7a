"""Attention forward on CDNA3's matrix cores (gfx942; gfx90a too): one program per BM query rows
of one head. Q is loaded once into its MFMA operand layout; each BN-key tile of K and V goes
through LDS (K transposed on the way, so both read as B operands), S = Q K^T and O += P V on
v_mfma_f32_32x32x8, the online softmax in the accumulator layout (exp2 with the scale folded
in), P handed to the second MFMA by a register layout conversion. Causal: tiles right of the
diagonal are skipped, the diagonal tile masked. Tensors are [B*H, S, D] contiguous."""
import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.amd.cdna3 import mfma

LOG2E = 1.4426950408889634


@gt.jit
def attention_fwd_mfma(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, sm_scale,
                       BM: gl.constexpr, BN: gl.constexpr, D: gl.constexpr, CAUSAL: gl.constexpr):
    W: gl.constexpr = gl.num_warps()
    T: gl.constexpr = gl.threads_per_warp()
    acc_l: gl.constexpr = gl.amd.AMDMFMALayout(version=3, instr_shape=[32, 32, 8], transposed=True,
                                               warps_per_cta=[W, 1])
    a_op: gl.constexpr = gl.DotOperandLayout(0, acc_l, k_width=4)
    b_op: gl.constexpr = gl.DotOperandLayout(1, acc_l, k_width=4)
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [T // (D // 8), D // 8], [W, 1], [1, 0])
    sl: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])
    # V is P @ V's B operand, K (= keys) its reduction dim: stored key-contiguous (written
    # transposed) so each lane reads its k_width elements as one ds_read_b64
    v_sl: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[0, 1])
    dtype = q_ptr.dtype.element
    start_m = gl.program_id(0)
    base = gl.program_id(1) * seq_len * D

    # Q: [BM, D] straight into the A operand layout (rows past the sequence read zeros)
    qm = start_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, a_op))
    qd = gl.arange(0, D, layout=gl.SliceLayout(0, a_op))
    q = gl.load(q_ptr + base + qm[:, None] * D + qd[None, :], mask=qm[:, None] < seq_len, other=0.0)

    kn = gl.arange(0, BN, layout=gl.SliceLayout(1, ld))
    kd = gl.arange(0, D, layout=gl.SliceLayout(0, ld))
    k_smem = gl.allocate_shared_memory(dtype, [BN, D], sl)
    v_smem = gl.allocate_shared_memory(dtype, [BN, D], v_sl)

    m_i = gl.full([BM], -float("inf"), gl.float32, gl.SliceLayout(1, acc_l))
    l_i = gl.zeros([BM], gl.float32, gl.SliceLayout(1, acc_l))
    acc = gl.zeros([BM, D], gl.float32, acc_l)
    rows = start_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, acc_l))
    cols0 = gl.arange(0, BN, layout=gl.SliceLayout(0, acc_l))
    qk_scale = sm_scale * LOG2E
    if CAUSAL:
        hi = gl.minimum(seq_len, (start_m + 1) * BM)
    else:
        hi = seq_len + 0
    for j in gl.range(0, gl.cdiv(hi, BN)):
        n0 = j * BN
        kv_mask = (n0 + kn)[:, None] < seq_len
        offs = base + (n0 + kn)[:, None] * D + kd[None, :]
        k_smem.store(gl.load(k_ptr + offs, mask=kv_mask, other=0.0))
        v_smem.store(gl.load(v_ptr + offs, mask=kv_mask, other=0.0))
        k_t = k_smem.permute((1, 0)).load(b_op)                        # K^T: [D, BN]
        qk = mfma(q, k_t, gl.zeros([BM, BN], gl.float32, acc_l))
        cols = n0 + cols0
        keep = cols[None, :] < seq_len
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
        qk = gl.where(keep, qk * qk_scale, -float("inf"))
        m_new = gl.maximum(m_i, gl.max(qk, 1))
        p = gl.exp2(qk - m_new[:, None])
        alpha = gl.exp2(m_i - m_new)
        l_i = l_i * alpha + gl.sum(p, 1)
        acc = acc * alpha[:, None]
        p_in = gl.convert_layout(p.to(dtype), a_op)
        acc = mfma(p_in, v_smem.load(b_op), acc)
        m_i = m_new
    acc = acc / l_i[:, None]
    od = gl.arange(0, D, layout=gl.SliceLayout(0, acc_l))
    gl.store(o_ptr + base + rows[:, None] * D + od[None, :], acc.to(o_ptr.dtype.element),
             mask=rows[:, None] < seq_len)

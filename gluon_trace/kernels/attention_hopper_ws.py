"""Warp-specialized attention forward on Hopper (FlashAttention-3's schedule).

A CTA takes C*BM query rows (C = CONSUMERS, 2 by default): C consumer warpgroups own BM rows
each, and a one-warp producer streams K and V tiles by TMA into rings of STAGES slots. Why:

- The softmax of a 64x128 tile (exp2 on the MUFU, max/sum on the FP32 pipes) costs about as
  long as the two wgmmas that surround it, so a lone warpgroup leaves the tensor cores idle
  half the time. The consumers take turns issuing their wgmmas (``turn[w]``: the one before
  has issued this step's), so one's softmax runs while another's matrix products do.
- Inside a consumer, S(j) = Q K(j)^T is issued together with O += P(j-1) V(j-1): the softmax
  of tile j waits only for S(j) (wgmma groups retire in order), and O is rescaled once P V
  has retired.
- K and V have their own ready/empty barriers: a K slot is released as soon as its S has
  retired, so the producer refills it a whole step before the slot's V is free.

- Persistent when launched on fewer CTAs than tiles: a consumer releases its Q buffer once its
  last S has retired, so the next tile's Q loads during this tile's last P V and epilogue, and
  O leaves through a buffer of its own whose TMA store is waited for only a tile later.

- A persistent grid of P CTAs over T tiles leaves T % P of them to a last round that keeps
  only T % P SMs busy: B4 H32 S4096 with 128-row tiles is 4096 tiles, 31.03 rounds on 132 SMs,
  timed as 32. :func:`attention_fwd_ws_split` cuts the KV range of each of those tiles into
  parts, one per otherwise idle CTA: a part publishes its unnormalized O with its row maxima
  and sums, and the last part of a tile to count itself in combines them all, in part order
  (the result does not depend on which came last), and stores O. Nobody waits for anybody.

Tensors are [B*H, S, D] behind 3-D TMA descriptors whose boxes are [1, BM, D] (Q, O) and
[1, BN, D] (K, V): a box past a head's end reads zeros and stores nothing.
"""
import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                warpgroup_mma_wait)

from .matmul_hopper_streamk import _tile_offsets

LOG2E = 1.4426950408889634


def _tiles(seq_len, BM, C, CAUSAL):
    """(first tile, tile count, stride): the CTA's share of the (query block, head) tiles. A grid
    (query blocks, heads) gives each CTA one tile; a smaller 1-D grid makes CTAs persistent,
    each overlapping one tile's epilogue and the next one's Q load with its KV stream."""
    n_m = gl.cdiv(seq_len, C * BM)
    first = gl.program_id(0) + gl.program_id(1) * gl.num_programs(0)
    stride = gl.num_programs(0) * gl.num_programs(1)
    return first, n_m, stride


def _tile_coords(tile, n_m):
    """(query block, head) of ``tile``: neighbouring tiles are blocks of one head, whose K and V
    the CTAs running them at once share in L2 (with heads interleaved instead, the causal
    kernel ran at 0.6x: every CTA streamed its own head from DRAM)."""
    return tile % n_m, tile // n_m


def _block_order(mb, n_m, CAUSAL):
    """Causal blocks further down visit more KV tiles: a head's longest come first, so short
    ones fill the last wave instead of long ones trailing it."""
    if CAUSAL:
        return n_m - 1 - mb
    return mb


def _kv_tiles(start, seq_len, BM, BN, CAUSAL, C):
    """(KV tiles a CTA with query rows from ``start`` visits, tiles below which none of its rows
    needs a mask)."""
    if CAUSAL:
        n_tiles = gl.cdiv(gl.minimum(seq_len, start + C * BM), BN)
        n_free = gl.minimum(start, seq_len) // BN
    else:
        n_tiles = gl.cdiv(seq_len, BN)
        n_free = seq_len // BN
    return n_tiles, n_free


def _split_tail(n_m, heads, seq_len, BN, SPLIT):
    """(tiles taken whole, parts of each tail tile, units): the last T % P tiles' KV ranges cut
    into ``parts`` (at most SPLIT, at most the KV tiles, at most what the idle CTAs can take),
    unit u being part u % parts of tail tile u // parts; no cut when a part would be a whole tile.
    SPLIT = 1: every tile whole (no parts, no units)."""
    T = n_m * heads
    if SPLIT == 1:
        return T, None, None
    P = gl.num_programs(0) * gl.num_programs(1)
    R = T % P
    parts = gl.minimum(gl.minimum(gl.cdiv(seq_len, BN), P // gl.maximum(R, 1)), SPLIT)
    cut = ((R > 0) & (parts >= 2)).to(gl.int32)
    return T - R * cut, parts, R * parts * cut


def _work(item, whole, parts, n_m, seq_len, BM, BN, CAUSAL, C, SPLIT, WHICH=None):
    """What a CTA's loop item is: (head, the first query row of the tile, or of consumer WHICH's
    rows, first KV tile, end KV tile, KV tiles below which no row needs a mask, tail tile index
    or None). Items below ``whole`` are whole tiles; item ``whole + u`` is unit u (part
    u % parts of tail tile u // parts), which falls to CTA u since ``whole`` is a multiple of the
    grid: one loop, one copy of the KV loop's code."""
    if SPLIT == 1:
        mb, bh = _tile_coords(item, n_m)
        start = _block_order(mb, n_m, CAUSAL) * (C * BM)
        row0 = start if WHICH is None else start + WHICH * BM
        n_tiles, n_free = _kv_tiles(start, seq_len, BM, BN, CAUSAL, C)
        return bh, row0, 0, n_tiles, n_free, None
    unit = gl.maximum(item - whole, 0)
    r, part = unit // parts, unit % parts
    is_unit = item >= whole
    mb, bh = _tile_coords(gl.where(is_unit, whole + r, item), n_m)  # (non-causal: blocks in order)
    start = mb * (C * BM)
    n_kv, n_free = _kv_tiles(start, seq_len, BM, BN, CAUSAL, C)
    kv0 = gl.where(is_unit, part * n_kv // parts, 0)
    kv1 = gl.where(is_unit, (part + 1) * n_kv // parts, n_kv)
    return bh, start if WHICH is None else start + WHICH * BM, kv0, kv1, n_free, gl.where(is_unit, r, -1)


def _load_tile(q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_bars, q_free, k_ready, v_ready, k_empty, v_empty,
               bh, start, kv0, kv1, it, t, STAGES, C):
    """Q for the C consumers, then KV tiles kv0 .. kv1-1 through the rings; returns the ring step."""
    BM: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[1]
    for w in gl.static_range(C):
        mbarrier.wait(q_free.index(w), (t & 1) ^ 1)  # consumer w's last S of the tile before
        mbarrier.expect(q_bars.index(w), q_desc.block_type.nbytes)
        tma.async_load(q_desc, [bh, start + w * BM, 0], q_bars.index(w), q_bufs.index(w))
    for j in gl.range(kv0, kv1):
        s = it % STAGES
        free = ((it // STAGES) & 1) ^ 1  # the first pass finds every slot free
        mbarrier.wait(k_empty.index(s), free)
        mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
        tma.async_load(k_desc, [bh, j * BN, 0], k_ready.index(s), k_bufs.index(s))
        mbarrier.wait(v_empty.index(s), free)
        mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
        tma.async_load(v_desc, [bh, j * BN, 0], v_ready.index(s), v_bufs.index(s))
        it += 1
    return it


def _loader(q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_bars, q_free, k_ready, v_ready, k_empty, v_empty,
            seq_len, heads, CAUSAL, STAGES, C, SPLIT):
    BM: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[1]
    first, n_m, stride = _tiles(seq_len, BM, C, CAUSAL)
    whole, parts, units = _split_tail(n_m, heads, seq_len, BN, SPLIT)
    it = gl.full([], 0, gl.int32)   # KV ring steps over every tile
    t = gl.full([], 0, gl.int32)    # tiles done by this CTA
    for item in gl.range(first, whole if SPLIT == 1 else whole + units, stride):
        bh, start, kv0, kv1, _, _ = _work(item, whole, parts, n_m, seq_len, BM, BN, CAUSAL, C, SPLIT)
        it = _load_tile(q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_bars, q_free, k_ready, v_ready, k_empty,
                        v_empty, bh, start, kv0, kv1, it, t, STAGES, C)
        t += 1


def _softmax(qk, m_i, l_i, rows, col0, seq_len, qk_scale, MASK, dtype):
    """Online softmax of one raw S tile whose first column is ``col0``: (P in ``dtype``, the factor
    rescaling what was summed, m, l). The scale rides in one fma with the max (qk_scale > 0, so
    the max of the raw scores scales)."""
    if MASK:  # only tiles crossing the sequence end or the diagonal pay for the mask
        # (the column indices are made here: held across the loop they would cost BN/4 registers)
        cols = col0 + gl.arange(0, qk.shape[1], layout=gl.SliceLayout(0, qk.type.layout))
        keep = cols[None, :] < seq_len
        if MASK == 2:
            keep = keep & (cols[None, :] <= rows[:, None])
        qk = gl.where(keep, qk, -float("inf"))
    m_new = gl.maximum(m_i, gl.max(qk, 1) * qk_scale)
    # terms below 2**-126 of a row whose largest is 1 change nothing: flushing them makes each
    # exp2 one MUFU.EX2 instead of a range check, the EX2 and two multiplies
    p = gl.exp2(gl.fma(qk, qk_scale, -m_new[:, None]), ftz=True)
    alpha = gl.exp2(m_i - m_new, ftz=True)
    return p.to(dtype), alpha, m_new, l_i * alpha + gl.sum(p, 1)


def _layouts(BM, BN, D):
    W: gl.constexpr = gl.num_warps()
    s_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, BN, 16])
    o_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, D, 16])
    return s_l, o_l


def _attend(q, k_bufs, v_bufs, q_bars, k_ready, v_ready, k_empty, v_empty, turn, row0, kv0, kv1, n_free, it, t,
            seq_len, qk_scale, CAUSAL, STAGES, C, WHICH):
    """This consumer's BM query rows from ``row0`` against KV tiles kv0 .. kv1-1 (kv1 > kv0):
    (O not yet divided by the row sums, row maxima in exp2's scale, row sums)."""
    BM: gl.constexpr = q.shape[0]
    D: gl.constexpr = q.shape[1]
    BN: gl.constexpr = k_bufs.shape[2]
    s_l, o_l = _layouts(BM, BN, D)
    p_op: gl.constexpr = gl.DotOperandLayout(0, o_l, k_width=2)
    dtype = q.dtype
    mask_kind = 2 if CAUSAL else 1
    zero_s = gl.zeros([BM, BN], gl.float32, s_l)
    nxt = (WHICH + 1) % C  # turns go round: 0, 1, .., C-1, 0, ...
    rows = row0 + gl.arange(0, BM, layout=gl.SliceLayout(1, s_l))
    m_i = gl.full([BM], -float("inf"), gl.float32, gl.SliceLayout(1, s_l))
    l_i = gl.zeros([BM], gl.float32, gl.SliceLayout(1, s_l))
    acc = gl.zeros([BM, D], gl.float32, o_l)
    mbarrier.wait(q_bars.index(WHICH), t & 1)

    # step 0: S(kv0) and its softmax (O is still zero: nothing to rescale)
    s0 = it % STAGES
    mbarrier.wait(turn.index(WHICH), it & 1)
    mbarrier.wait(k_ready.index(s0), (it // STAGES) & 1)
    qk = warpgroup_mma(q, k_bufs.index(s0).reshape([BN, D]).permute((1, 0)), zero_s, use_acc=False,
                       is_async=True)
    mbarrier.arrive(turn.index(nxt))
    qk = warpgroup_mma_wait(0, deps=[qk])
    mbarrier.arrive(k_empty.index(s0))
    p, alpha = qk.to(dtype), m_i  # (both branches rebind them)
    with gl.if_(kv0 < n_free):
        p, alpha, m_i, l_i = _softmax(qk, m_i, l_i, rows, kv0 * BN, seq_len, qk_scale, 0, dtype)
    with gl.else_():
        p, alpha, m_i, l_i = _softmax(qk, m_i, l_i, rows, kv0 * BN, seq_len, qk_scale, mask_kind, dtype)

    for j in gl.range(kv0 + 1, kv1):
        g = it + j - kv0
        s = g % STAGES
        ps = (g - 1) % STAGES
        # this consumer's turn on the tensor cores: S(j) and O += P(j-1) V(j-1)
        mbarrier.wait(turn.index(WHICH), g & 1)
        mbarrier.wait(k_ready.index(s), (g // STAGES) & 1)
        qk = warpgroup_mma(q, k_bufs.index(s).reshape([BN, D]).permute((1, 0)), zero_s, use_acc=False,
                           is_async=True)
        mbarrier.wait(v_ready.index(ps), ((g - 1) // STAGES) & 1)
        # P is carried in its 16 bits, packed two to a register by its paired cvts
        p_in = gl.convert_layout(p, p_op)
        acc = warpgroup_mma(p_in, v_bufs.index(ps).reshape([BN, D]), acc, is_async=True)
        mbarrier.arrive(turn.index(nxt))
        qk = warpgroup_mma_wait(1, deps=[qk])  # S(j) is done; P V may still run
        mbarrier.arrive(k_empty.index(s))
        with gl.if_(j < n_free):
            p, alpha, m_i, l_i = _softmax(qk, m_i, l_i, rows, j * BN, seq_len, qk_scale, 0, dtype)
        with gl.else_():
            p, alpha, m_i, l_i = _softmax(qk, m_i, l_i, rows, j * BN, seq_len, qk_scale, mask_kind, dtype)
        acc = warpgroup_mma_wait(0, deps=[acc])
        mbarrier.arrive(v_empty.index(ps))
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_l))[:, None]

    last = it + kv1 - kv0 - 1
    ls = last % STAGES
    mbarrier.wait(v_ready.index(ls), (last // STAGES) & 1)
    p_in = gl.convert_layout(p, p_op)
    acc = warpgroup_mma(p_in, v_bufs.index(ls).reshape([BN, D]), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[acc])
    mbarrier.arrive(v_empty.index(ls))
    return acc, m_i, l_i


def _store_o(acc, l_i, o_desc, o_smem, bh, row0):
    """O / l through this consumer's buffer: one division a row, not one an element (the O tile
    is BM*D/128 values a thread); the buffer's previous store is waited for first."""
    BM: gl.constexpr = acc.shape[0]
    D: gl.constexpr = acc.shape[1]
    acc = acc * gl.convert_layout(1.0 / l_i, gl.SliceLayout(1, acc.type.layout))[:, None]
    tma.store_wait(0)  # the previous tile's O has left o_smem
    o_smem.reshape([BM, D]).store(acc.to(o_desc.dtype))
    fence_async_shared()
    tma.async_store(o_desc, [bh, row0, 0], o_smem)


def _publish_and_combine(acc, m_i, l_i, parts_buf, counters, unit, r, parts, o_desc, o_smem, bh, row0, C, WHICH):
    """This consumer computed part of a tail tile's rows: publish (O, m, l) in the unit's record;
    the last part to count itself in combines every part's record in part order and stores O."""
    BM: gl.constexpr = acc.shape[0]
    D: gl.constexpr = acc.shape[1]
    REC: gl.constexpr = BM * D + 2 * BM  # a record: O, then m, then l
    o_l = acc.type.layout
    v_l = m_i.type.layout
    offs = _tile_offsets(BM, D, o_l)
    rows = gl.arange(0, BM, layout=v_l)
    rec = parts_buf + (unit * C + WHICH) * REC
    gl.store(rec + offs, acc)
    gl.store(rec + BM * D + rows, m_i)
    gl.store(rec + BM * D + BM + rows, l_i)
    gl.thread_barrier()  # every thread's share is stored before the count publishes it
    arrived = gl.atomic_add(counters + r * C + WHICH, 1)  # acq_rel, gpu scope
    with gl.if_(arrived == parts - 1):
        gl.store(counters + r * C + WHICH, 0)  # every part has counted: ready for the next launch
        first = parts_buf + (r * parts * C + WHICH) * REC
        m = gl.full([BM], -float("inf"), gl.float32, v_l)
        for q in gl.range(0, parts):
            m = gl.maximum(m, gl.load(first + q * (C * REC) + BM * D + rows))
        o = gl.zeros([BM, D], gl.float32, o_l)
        ls = gl.zeros([BM], gl.float32, v_l)
        for q in gl.range(0, parts):
            part = first + q * (C * REC)
            f = gl.exp2(gl.load(part + BM * D + rows) - m)
            ls = ls + gl.load(part + BM * D + BM + rows) * f
            o = o + gl.load(part + offs) * gl.convert_layout(f, gl.SliceLayout(1, o_l))[:, None]
        _store_o(o, ls, o_desc, o_smem, bh, row0)


def _consumer(q_desc, k_desc, v_desc, o_desc, q_bufs, k_bufs, v_bufs, o_bufs, q_bars, q_free, k_ready, v_ready,
              k_empty, v_empty, turn, parts_buf, counters, seq_len, sm_scale, heads, CAUSAL, STAGES, C, SPLIT, WHICH):
    BM: gl.constexpr = q_desc.block_type.shape[1]
    D: gl.constexpr = q_desc.block_type.shape[2]
    BN: gl.constexpr = k_desc.block_type.shape[1]
    qk_scale = sm_scale * LOG2E
    q = q_bufs.index(WHICH).reshape([BM, D])
    o_smem = o_bufs.index(WHICH)
    ring = (q, k_bufs, v_bufs, q_bars, k_ready, v_ready, k_empty, v_empty, turn)
    if WHICH == C - 1:
        mbarrier.arrive(turn.index(0))  # the first turn is consumer 0's

    first, n_m, stride = _tiles(seq_len, BM, C, CAUSAL)
    whole, parts, units = _split_tail(n_m, heads, seq_len, BN, SPLIT)
    it = gl.full([], 0, gl.int32)   # KV ring steps (and turns) over every tile
    t = gl.full([], 0, gl.int32)    # tiles done by this CTA
    for item in gl.range(first, whole if SPLIT == 1 else whole + units, stride):
        bh, row0, kv0, kv1, n_free, r = _work(item, whole, parts, n_m, seq_len, BM, BN, CAUSAL, C, SPLIT, WHICH)
        acc, m_i, l_i = _attend(*ring, row0, kv0, kv1, n_free, it, t, seq_len, qk_scale, CAUSAL, STAGES, C, WHICH)
        mbarrier.arrive(q_free.index(WHICH))  # every S of the tile has retired: the next Q may come
        if SPLIT == 1:
            _store_o(acc, l_i, o_desc, o_smem, bh, row0)
        else:
            with gl.if_(r < 0):
                _store_o(acc, l_i, o_desc, o_smem, bh, row0)
            with gl.else_():
                _publish_and_combine(acc, m_i, l_i, parts_buf, counters, item - whole, r, parts, o_desc, o_smem,
                                     bh, row0, C, WHICH)
        it += kv1 - kv0
        t += 1
    tma.store_wait(0)


def _consumer_at(which):
    def run(*args):
        _consumer(*args, which)
    run.__name__ = f"_consumer{which}"
    return run


_CONSUMERS = [_consumer_at(w) for w in range(4)]


def _build(q_desc, k_desc, v_desc, o_desc, parts_buf, counters, seq_len, sm_scale, CAUSAL, STAGES, C, REGS, SPLIT):
    BM: gl.constexpr = q_desc.block_type.shape[1]
    D: gl.constexpr = q_desc.block_type.shape[2]
    BN: gl.constexpr = k_desc.block_type.shape[1]
    gl.static_assert(2 <= C and C <= 4, "attention_fwd_ws takes 2 to 4 consumers")
    gl.static_assert(o_desc.block_type.shape[1] == BM, "O's box must have Q's rows")
    gl.static_assert(SPLIT == 1 or not CAUSAL, "the split tail is for non-causal attention (causal tiles "
                     "differ in length; the longest go first instead)")
    dtype = q_desc.dtype
    heads = q_desc.shape[0]
    q_bufs = gl.allocate_shared_memory(dtype, [C, 1, BM, D], q_desc.layout)
    o_bufs = gl.allocate_shared_memory(o_desc.dtype, [C, 1, BM, D], o_desc.layout)
    k_bufs = gl.allocate_shared_memory(dtype, [STAGES, 1, BN, D], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(dtype, [STAGES, 1, BN, D], v_desc.layout)
    q_bars = mbarrier.allocate_mbarrier(batch=C)
    q_free = mbarrier.allocate_mbarrier(batch=C)
    turn = mbarrier.allocate_mbarrier(batch=C)
    k_ready = mbarrier.allocate_mbarrier(batch=STAGES)
    v_ready = mbarrier.allocate_mbarrier(batch=STAGES)
    k_empty = mbarrier.allocate_mbarrier(batch=STAGES)
    v_empty = mbarrier.allocate_mbarrier(batch=STAGES)
    for w in gl.static_range(C):
        mbarrier.init(q_bars.index(w), count=1)
        mbarrier.init(q_free.index(w), count=1)
        mbarrier.init(turn.index(w), count=1)
    for s in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(s), count=1)
        mbarrier.init(v_ready.index(s), count=1)
        mbarrier.init(k_empty.index(s), count=C)  # every consumer releases each slot
        mbarrier.init(v_empty.index(s), count=C)
    rings = (k_ready, v_ready, k_empty, v_empty)
    consumer = ((q_desc, k_desc, v_desc, o_desc, q_bufs, k_bufs, v_bufs, o_bufs, q_bars, q_free) + rings
                + (turn, parts_buf, counters, seq_len, sm_scale, heads, CAUSAL, STAGES, C, SPLIT))
    loader = (q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_bars, q_free) + rings + (seq_len, heads, CAUSAL,
                                                                                          STAGES, C, SPLIT)
    gl.warp_specialize([(_CONSUMERS[w], consumer) for w in range(C)] + [(_loader, loader)],
                       worker_num_warps=[gl.num_warps()] * (C - 1) + [1],
                       worker_num_regs=[REGS] * (C - 1) + [24])


@gt.jit
def attention_fwd_ws(q_desc, k_desc, v_desc, o_desc, seq_len, sm_scale, CAUSAL: gl.constexpr,
                     STAGES: gl.constexpr = 2, CONSUMERS: gl.constexpr = 2, CONSUMER_REGS: gl.constexpr = 240):
    """O = softmax(Q K^T * sm_scale) V over [B*H, S, D] tensors, num_warps=4 (each consumer is
    one warpgroup of BM rows; the producer warp comes on top). Grid (cdiv(S, CONSUMERS*BM), B*H):
    one (query block, head) tile per CTA; or a 1-D grid of fewer CTAs (the SM count): each
    walks tiles pid, pid + grid, ... Three consumers suit small head dims."""
    _build(q_desc, k_desc, v_desc, o_desc, None, None, seq_len, sm_scale, CAUSAL, STAGES, CONSUMERS, CONSUMER_REGS,
           1)


def attention_split_workspace(programs: int, BM: int, D: int, consumers: int = 2) -> tuple[int, int]:
    """(float32 elements of ``parts``, int32 elements of ``counters``) for
    :func:`attention_fwd_ws_split` on a grid of ``programs`` CTAs with BM-row consumers of head
    dim D; ``counters`` must start at zero (each launch leaves them at zero)."""
    return programs * consumers * (BM * D + 2 * BM), programs * consumers


@gt.jit
def attention_fwd_ws_split(q_desc, k_desc, v_desc, o_desc, parts, counters, seq_len, sm_scale,
                           CAUSAL: gl.constexpr, STAGES: gl.constexpr = 2, CONSUMERS: gl.constexpr = 2,
                           CONSUMER_REGS: gl.constexpr = 240, SPLIT: gl.constexpr = 8):
    """:func:`attention_fwd_ws` on a persistent 1-D grid whose last, partial round of tiles is cut
    along KV into at most SPLIT parts a tile, taken by the CTAs that round would leave idle (module
    docstring); ``parts`` and ``counters`` as :func:`attention_split_workspace` sizes them.
    Non-causal only."""
    _build(q_desc, k_desc, v_desc, o_desc, parts, counters, seq_len, sm_scale, CAUSAL, STAGES, CONSUMERS,
           CONSUMER_REGS, SPLIT)

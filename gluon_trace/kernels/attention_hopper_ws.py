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

- KV tiles need not be powers of two (``KV_PIECES``): a tile is P pieces of 16 rows, S comes
  back as P column pieces [BM, 16] (one m64n(16P) wgmma a K step: K is stored chunk-major, so a
  head-dim chunk's P slots are one operand), the softmax folds the pieces elementwise before its
  one row reduction, and P V is one wgmma group over P's register pieces (``warpgroup_mma``'s K
  pieces). With one TMA box a KV tile (piece_descriptors' 5-D views) a 160-row tile ran 2% faster
  than the 128-row one on the H200; with one box a piece, 30% slower (the boxes, not the math).

Tensors are [B*H, S, D] behind 3-D TMA descriptors whose boxes are [1, BM, D] (Q, O) and
[1, BN, D] (K, V): a box past a head's end reads zeros and stores nothing.
"""
import operator

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                warpgroup_mma_wait)

from .matmul_hopper_streamk import _tile_offsets

LOG2E = 1.4426950408889634


def _bn(k_desc, PIECES):
    """KV rows a tile: K's box rows, or PIECES boxes of them (:func:`attention_fwd_ws`'s KV_PIECES)."""
    ROWS: gl.constexpr = k_desc.block_type.shape[-2]
    return PIECES * ROWS if PIECES else ROWS


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
               bh, start, kv0, kv1, it, t, STAGES, C, PIECES):
    """Q for the C consumers, then KV tiles kv0 .. kv1-1 through the rings; returns the ring step."""
    BM: gl.constexpr = q_desc.block_type.shape[1]
    ROWS: gl.constexpr = k_desc.block_type.shape[-2]
    DK: gl.constexpr = k_desc.block_type.shape[-1]
    STACKED: gl.constexpr = len(k_desc.block_type.shape) == 5   # a box fills every piece (piece_descriptors)
    DC: gl.constexpr = k_bufs.shape[1]   # K's head-dim chunks (pieces; 1 otherwise)
    BN: gl.constexpr = _bn(k_desc, PIECES)
    for w in gl.static_range(C):
        mbarrier.wait(q_free.index(w), (t & 1) ^ 1)  # consumer w's last S of the tile before
        mbarrier.expect(q_bars.index(w), q_desc.block_type.nbytes)
        tma.async_load(q_desc, [bh, start + w * BM, 0], q_bars.index(w), q_bufs.index(w))
    for j in gl.range(kv0, kv1):
        s = it % STAGES
        free = ((it // STAGES) & 1) ^ 1  # the first pass finds every slot free
        mbarrier.wait(k_empty.index(s), free)
        if STACKED:  # one box each, landing in the slots' bytes (the views say how they stack)
            mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
            tma.async_load(k_desc, [bh, 0, j * PIECES, 0, 0], k_ready.index(s),
                           k_bufs.index(s).reinterpret(k_desc.dtype, [1, DC, PIECES, ROWS, DK], k_desc.layout))
        elif PIECES:  # K in head-dim chunks of DK, each PIECES boxes of ROWS rows; V a box a piece
            mbarrier.expect(k_ready.index(s), PIECES * DC * k_desc.block_type.nbytes)
            for c in gl.static_range(DC):
                for p in gl.static_range(PIECES):
                    tma.async_load(k_desc, [bh, j * BN + p * ROWS, c * DK], k_ready.index(s),
                                   k_bufs.index(s).index(c).index(p))
        else:
            mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
            tma.async_load(k_desc, [bh, j * BN, 0], k_ready.index(s), k_bufs.index(s))
        mbarrier.wait(v_empty.index(s), free)
        if STACKED:
            mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
            tma.async_load(v_desc, [bh, j * PIECES, 0, 0, 0], v_ready.index(s),
                           v_bufs.index(s).reinterpret(v_desc.dtype, [1, PIECES, DC, ROWS, DK], v_desc.layout))
        elif PIECES:
            mbarrier.expect(v_ready.index(s), PIECES * v_desc.block_type.nbytes)
            for p in gl.static_range(PIECES):
                tma.async_load(v_desc, [bh, j * BN + p * ROWS, 0], v_ready.index(s), v_bufs.index(s).index(p))
        else:
            mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
            tma.async_load(v_desc, [bh, j * BN, 0], v_ready.index(s), v_bufs.index(s))
        it += 1
    return it


def _loader(q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_bars, q_free, k_ready, v_ready, k_empty, v_empty,
            seq_len, heads, CAUSAL, STAGES, C, SPLIT, PIECES):
    BM: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = _bn(k_desc, PIECES)
    first, n_m, stride = _tiles(seq_len, BM, C, CAUSAL)
    whole, parts, units = _split_tail(n_m, heads, seq_len, BN, SPLIT)
    it = gl.full([], 0, gl.int32)   # KV ring steps over every tile
    t = gl.full([], 0, gl.int32)    # tiles done by this CTA
    for item in gl.range(first, whole if SPLIT == 1 else whole + units, stride):
        bh, start, kv0, kv1, _, _ = _work(item, whole, parts, n_m, seq_len, BM, BN, CAUSAL, C, SPLIT)
        it = _load_tile(q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_bars, q_free, k_ready, v_ready, k_empty,
                        v_empty, bh, start, kv0, kv1, it, t, STAGES, C, PIECES)
        t += 1


def _fold(pieces, op):
    """The pieces of a row-split S tile combined elementwise: one row reduction for the whole
    tile afterwards, not one (with its shuffles) a piece."""
    out = pieces[0]
    for x in pieces[1:]:
        out = op(out, x)
    return out


def _softmax(qk, m_i, l_i, rows, col0, seq_len, qk_scale, MASK, dtype):
    """Online softmax of one raw S tile whose first column is ``col0``, or of a tuple of its
    column pieces: (P in ``dtype``, alike, the factor rescaling what was summed, m, l). The scale
    rides in one fma with the max (qk_scale > 0, so the max of the raw scores scales)."""
    pieces = list(qk) if isinstance(qk, tuple) else [qk]
    if MASK:  # only tiles crossing the sequence end or the diagonal pay for the mask
        # (the column indices are made here: held across the loop they would cost BN/4 registers)
        for i, x in enumerate(pieces):
            start = col0 + i * x.shape[1] if i else col0
            cols = start + gl.arange(0, x.shape[1], layout=gl.SliceLayout(0, x.type.layout))
            keep = cols[None, :] < seq_len
            if MASK == 2:
                keep = keep & (cols[None, :] <= rows[:, None])
            pieces[i] = gl.where(keep, x, -float("inf"))
    m_new = gl.maximum(m_i, gl.max(_fold(pieces, gl.maximum), 1) * qk_scale)
    # terms below 2**-126 of a row whose largest is 1 change nothing: flushing them makes each
    # exp2 one MUFU.EX2 instead of a range check, the EX2 and two multiplies
    ps = [gl.exp2(gl.fma(x, qk_scale, -m_new[:, None]), ftz=True) for x in pieces]
    alpha = gl.exp2(m_i - m_new, ftz=True)
    out = tuple(x.to(dtype) for x in ps)
    return (out if isinstance(qk, tuple) else out[0]), alpha, m_new, l_i * alpha + gl.sum(_fold(ps, operator.add), 1)


def _layouts(BM, BN, D):
    W: gl.constexpr = gl.num_warps()
    s_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, BN, 16])
    o_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1], instr_shape=[16, D, 16])
    return s_l, o_l


def _s(q, k_bufs, s, zero_s, PIECES):
    """S = Q K^T of ring slot ``s``, issued as one wgmma group: with pieces, Q's head-dim chunks
    against K's chunk-major slots (each chunk's PIECES slots one operand of BN columns: one
    m64n(BN) instruction a K step)."""
    if not PIECES:
        BN: gl.constexpr = k_bufs.shape[2]
        return warpgroup_mma(q, k_bufs.index(s).reshape([BN, q.shape[1]]).permute((1, 0)), zero_s, use_acc=False,
                             is_async=True)
    chunks = k_bufs.index(s)   # [D // DK, PIECES, 1, ROWS, DK]
    DC: gl.constexpr = chunks.shape[0]
    ROWS: gl.constexpr = chunks.shape[3]
    DK: gl.constexpr = chunks.shape[4]
    kt = chunks.reshape([DC, PIECES, ROWS, DK]).permute((0, 1, 3, 2))
    return warpgroup_mma([q.slice(c * DK, DK, dim=1) for c in range(DC)], kt, list(zero_s), use_acc=False,
                         is_async=True)


def _pv(p, v_bufs, s, acc, p_op, PIECES):
    """O += P V of ring slot ``s``, issued as one wgmma group: with pieces, P's register pieces
    against V's slots, one m64nD instruction a piece."""
    if not PIECES:
        BN: gl.constexpr = v_bufs.shape[2]
        p_in = gl.convert_layout(p, p_op)
        return warpgroup_mma(p_in, v_bufs.index(s).reshape([BN, acc.shape[1]]), acc, is_async=True)
    ROWS: gl.constexpr = v_bufs.shape[3]
    vs = v_bufs.index(s).reshape([PIECES, ROWS, acc.shape[1]])
    return warpgroup_mma([gl.convert_layout(x, p_op) for x in p], vs, acc, is_async=True)


def _attend(q, k_bufs, v_bufs, q_bars, k_ready, v_ready, k_empty, v_empty, turn, row0, kv0, kv1, n_free, it, t,
            seq_len, qk_scale, CAUSAL, STAGES, C, PIECES, WHICH):
    """This consumer's BM query rows from ``row0`` against KV tiles kv0 .. kv1-1 (kv1 > kv0):
    (O not yet divided by the row sums, row maxima in exp2's scale, row sums). With PIECES, S is
    a tuple of [BM, ROWS] column pieces and P alike."""
    BM: gl.constexpr = q.shape[0]
    D: gl.constexpr = q.shape[1]
    W: gl.constexpr = v_bufs.shape[3] if PIECES else k_bufs.shape[2]   # columns of an S tile (or piece)
    BN: gl.constexpr = PIECES * W if PIECES else W
    s_l, o_l = _layouts(BM, W, D)
    p_op: gl.constexpr = gl.DotOperandLayout(0, o_l, k_width=2)
    dtype = q.dtype
    mask_kind = 2 if CAUSAL else 1
    zero_s = (tuple(gl.zeros([BM, W], gl.float32, s_l) for _ in range(PIECES)) if PIECES
              else gl.zeros([BM, W], gl.float32, s_l))
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
    qk = _s(q, k_bufs, s0, zero_s, PIECES)
    mbarrier.arrive(turn.index(nxt))
    qk = warpgroup_mma_wait(0, deps=list(qk) if PIECES else [qk])
    mbarrier.arrive(k_empty.index(s0))
    p, alpha = (tuple(x.to(dtype) for x in qk) if PIECES else qk.to(dtype)), m_i  # (both branches rebind them)
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
        qk = _s(q, k_bufs, s, zero_s, PIECES)
        mbarrier.wait(v_ready.index(ps), ((g - 1) // STAGES) & 1)
        # P is carried in its 16 bits, packed two to a register by its paired cvts
        acc = _pv(p, v_bufs, ps, acc, p_op, PIECES)
        mbarrier.arrive(turn.index(nxt))
        qk = warpgroup_mma_wait(1, deps=list(qk) if PIECES else [qk])  # S(j) is done; P V may still run
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
    acc = _pv(p, v_bufs, ls, acc, p_op, PIECES)
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
              k_empty, v_empty, turn, parts_buf, counters, seq_len, sm_scale, heads, CAUSAL, STAGES, C, SPLIT, PIECES,
              WHICH):
    BM: gl.constexpr = q_desc.block_type.shape[1]
    D: gl.constexpr = q_desc.block_type.shape[2]
    BN: gl.constexpr = _bn(k_desc, PIECES)
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
        acc, m_i, l_i = _attend(*ring, row0, kv0, kv1, n_free, it, t, seq_len, qk_scale, CAUSAL, STAGES, C, PIECES,
                                 WHICH)
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


def _build(q_desc, k_desc, v_desc, o_desc, parts_buf, counters, seq_len, sm_scale, CAUSAL, STAGES, C, REGS, SPLIT,
           PIECES):
    BM: gl.constexpr = q_desc.block_type.shape[1]
    D: gl.constexpr = q_desc.block_type.shape[2]
    ROWS: gl.constexpr = k_desc.block_type.shape[-2]
    gl.static_assert(2 <= C and C <= 4, "attention_fwd_ws takes 2 to 4 consumers")
    gl.static_assert(o_desc.block_type.shape[1] == BM, "O's box must have Q's rows")
    gl.static_assert(SPLIT == 1 or not CAUSAL, "the split tail is for non-causal attention (causal tiles "
                     "differ in length; the longest go first instead)")
    dtype = q_desc.dtype
    heads = q_desc.shape[0]
    q_bufs = gl.allocate_shared_memory(dtype, [C, 1, BM, D], q_desc.layout)
    o_bufs = gl.allocate_shared_memory(o_desc.dtype, [C, 1, BM, D], o_desc.layout)
    if PIECES:  # K chunk-major, so that a chunk's PIECES slots are one wgmma operand of PIECES*ROWS columns
        DK: gl.constexpr = k_desc.block_type.shape[-1]
        if len(k_desc.block_type.shape) == 5:
            gl.static_assert(list(k_desc.block_type.shape) == [1, D // DK, PIECES, ROWS, DK]
                             and list(v_desc.block_type.shape) == [1, PIECES, D // DK, ROWS, DK],
                             "KV_PIECES with 5-D boxes: K's [1, D/DK, PIECES, ROWS, DK] and V's [1, PIECES, D/DK, "
                             "ROWS, DK] (piece_descriptors makes them)")
        else:
            gl.static_assert(D % DK == 0 and v_desc.block_type.shape[1] == ROWS and v_desc.block_type.shape[2] == D,
                             "KV_PIECES: K's box is [1, ROWS, a head-dim chunk], V's [1, ROWS, D]")
        k_bufs = gl.allocate_shared_memory(dtype, [STAGES, D // DK, PIECES, 1, ROWS, DK], k_desc.layout)
        v_bufs = gl.allocate_shared_memory(dtype, [STAGES, PIECES, 1, ROWS, D], v_desc.layout)
    else:
        k_bufs = gl.allocate_shared_memory(dtype, [STAGES, 1, ROWS, D], k_desc.layout)
        v_bufs = gl.allocate_shared_memory(dtype, [STAGES, 1, ROWS, D], v_desc.layout)
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
                + (turn, parts_buf, counters, seq_len, sm_scale, heads, CAUSAL, STAGES, C, SPLIT, PIECES))
    loader = (q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_bars, q_free) + rings + (seq_len, heads, CAUSAL,
                                                                                          STAGES, C, SPLIT, PIECES)
    gl.warp_specialize([(_CONSUMERS[w], consumer) for w in range(C)] + [(_loader, loader)],
                       worker_num_warps=[gl.num_warps()] * (C - 1) + [1],
                       worker_num_regs=[REGS] * (C - 1) + [32 if PIECES else 24])  # (a box a piece: more addresses)


@gt.jit
def attention_fwd_ws(q_desc, k_desc, v_desc, o_desc, seq_len, sm_scale, CAUSAL: gl.constexpr,
                     STAGES: gl.constexpr = 2, CONSUMERS: gl.constexpr = 2, CONSUMER_REGS: gl.constexpr = 240,
                     KV_PIECES: gl.constexpr = 0):
    """O = softmax(Q K^T * sm_scale) V over [B*H, S, D] tensors, num_warps=4 (each consumer is
    one warpgroup of BM rows; the producer warp comes on top). Grid (cdiv(S, CONSUMERS*BM), B*H):
    one (query block, head) tile per CTA; or a 1-D grid of fewer CTAs (the SM count): each
    walks tiles pid, pid + grid, ... Three consumers suit small head dims.

    KV_PIECES = 0: K and V boxes are whole KV tiles [1, BN, D]. KV_PIECES = P: a KV tile is P
    pieces of ROWS rows, BN = P * ROWS (any multiple of ROWS: 160 = 10 x 16, which powers of two
    cannot be), with K and V descriptors from :func:`piece_descriptors` (5-D boxes of a whole
    tile, or a box a piece when S is no multiple of ROWS)."""
    _build(q_desc, k_desc, v_desc, o_desc, None, None, seq_len, sm_scale, CAUSAL, STAGES, CONSUMERS, CONSUMER_REGS,
           1, KV_PIECES)


def attention_split_workspace(programs: int, BM: int, D: int, consumers: int = 2) -> tuple[int, int]:
    """(float32 elements of ``parts``, int32 elements of ``counters``) for
    :func:`attention_fwd_ws_split` on a grid of ``programs`` CTAs with BM-row consumers of head
    dim D; ``counters`` must start at zero (each launch leaves them at zero)."""
    return programs * consumers * (BM * D + 2 * BM), programs * consumers


@gt.jit
def attention_fwd_ws_split(q_desc, k_desc, v_desc, o_desc, parts, counters, seq_len, sm_scale,
                           CAUSAL: gl.constexpr, STAGES: gl.constexpr = 2, CONSUMERS: gl.constexpr = 2,
                           CONSUMER_REGS: gl.constexpr = 240, SPLIT: gl.constexpr = 8, KV_PIECES: gl.constexpr = 0):
    """:func:`attention_fwd_ws` on a persistent 1-D grid whose last, partial round of tiles is cut
    along KV into at most SPLIT parts a tile, taken by the CTAs that round would leave idle (module
    docstring); ``parts`` and ``counters`` as :func:`attention_split_workspace` sizes them.
    Non-causal only."""
    _build(q_desc, k_desc, v_desc, o_desc, parts, counters, seq_len, sm_scale, CAUSAL, STAGES, CONSUMERS,
           CONSUMER_REGS, SPLIT, KV_PIECES)


def piece_descriptors(k, v, pieces: int, rows: int = 16):
    """K's and V's TMA descriptors for KV_PIECES=pieces over [B*H, S, D] tensors (numpy arrays or
    torch tensors, 16-bit), in DK = min(D, 64) head-dim chunks (one 128-byte swizzle row each).

    When S is a multiple of ``rows``: 5-D views of the tensors whose one box is a whole KV tile,
    landing as the kernel's slots lie (K: [1, D/DK, pieces, rows, DK], chunk-major; V: [1, pieces,
    D/DK, rows, DK], piece-major). One box a tile, not one a piece: measured on the H200 with 128
    KV rows a tile, 4 boxes a ring stage ran at 676 TFLOP/s, 20 at 587, 40 at 467.
    Otherwise a box a piece ([1, rows, DK] and [1, rows, D]): the last piece may be cut by the
    sequence's end, which a 5-D view cannot say (its rows would run into the next head)."""
    from gluon_trace.errors import ArgumentValueError, user_location
    from gluon_trace.nvidia.hopper import TensorDescriptor
    name = str(k.dtype).rsplit(".", 1)[-1]
    if name not in ("bfloat16", "float16") or str(v.dtype) != str(k.dtype) or tuple(k.shape) != tuple(v.shape):
        raise ArgumentValueError(f"piece_descriptors takes K and V of one shape [B*H, S, D] and one 16-bit type "
                                 f"(bfloat16 or float16), got {k.dtype} {tuple(k.shape)} and {v.dtype} "
                                 f"{tuple(v.shape)}", user_location(2))
    dtype = getattr(gl, name)
    bh, s, d = k.shape
    dk = min(d, 64)
    dc = d // dk
    if not (d in (16, 32) or d % 64 == 0):
        raise ArgumentValueError(f"piece_descriptors: head dim {d} must be 16, 32 or a multiple of 64 (K is read "
                                 "in 64-column chunks, one 128-byte swizzle row each)", user_location(2))
    lay = gl.NVMMASharedLayout.get_default_for
    if s % rows == 0:
        def view(t, order):
            t = t.reshape(bh, s // rows, rows, dc, dk)
            return t.permute(*order) if hasattr(t, "permute") else t.transpose(order)
        return (TensorDescriptor.from_tensor(view(k, (0, 3, 1, 2, 4)), [1, dc, pieces, rows, dk], lay([rows, dk], dtype)),
                TensorDescriptor.from_tensor(view(v, (0, 1, 3, 2, 4)), [1, pieces, dc, rows, dk], lay([rows, dk], dtype)))
    return (TensorDescriptor.from_tensor(k, [1, rows, dk], lay([rows, dk], dtype)),
            TensorDescriptor.from_tensor(v, [1, rows, d], lay([rows, d], dtype)))

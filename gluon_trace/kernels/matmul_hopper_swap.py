"""Warp-specialized Hopper GEMM whose tile need not be a power of two: wgmma's M runs along C's
columns and its N along C's rows (it computes the tile of C^T = B^T A^T), so the tile is
CONSUMERS x 64 columns by PIECES x PIECE_ROWS rows, e.g. 160 x 192 (5 x 32 rows, 3 consumers).

Why: a tile count close to a whole number of waves. At 4000^3 a 128x256 tile leaves 512 tiles
on 132 SMs (four waves, the last 88% full, and 5% of each edge tile outside C); 160x192 tiles
make 525 (3.98 waves), each 6% cheaper. cuBLAS picks the same tile there. Register tiles and
shared buffers are powers of two, so the tile's rows come in pieces of PIECE_ROWS, and its
columns in 64-wide pieces, one a consumer warpgroup:

- wgmma's A operand is consumer w's 64 columns of the B stage, read MN-major (B is [K, N], N
  contiguous: one 128-byte swizzle atom wide);
- its B operand is the A stage's PIECES blocks, consecutive slots of one buffer read K-major:
  ``warpgroup_mma`` with a list of accumulators, one a piece, which the NVIDIA backend issues
  as one m64n(PIECES x PIECE_ROWS) instruction a K step (N of a wgmma is any multiple of 8 up
  to 256; session 18's main-and-tail pair of narrow instructions cost ~13% more per flop);
- the accumulators hold C^T; the epilogue stores them through transposed views of the output
  buffers, and TMA writes [PIECE_ROWS, 64] blocks of C.

A one-warp producer fills a ring of STAGES stages (A's PIECES blocks and the CONSUMERS column
blocks of B); a stage is free once every consumer has released it (``empty`` counts CONSUMERS).
All consumers walk the same tiles in the same order, persistent over the grid."""
import functools

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                warpgroup_mma_wait)

from .matmul_hopper import grouped_tile, ring_slot, wgmma_layout

COLUMNS = 64   # a consumer's columns of the tile: one 128-byte swizzle atom of 16-bit B


def swap_descriptors(a, b, c, piece_rows, bk, dtype):
    """matmul_hopper_swap's three descriptors over row-major A [M, K], B [K, N] and C [M, N] of
    the 16-bit ``dtype`` (numpy arrays or torch tensors): A's block [piece_rows, bk], B's
    [bk, 64], C's [piece_rows, 64], each in its default NVMMA layout."""
    from gluon_trace.nvidia.hopper import TensorDescriptor

    def desc(t, block):
        return TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, dtype))
    return desc(a, [piece_rows, bk]), desc(b, [bk, COLUMNS]), desc(c, [piece_rows, COLUMNS])


def _tiling(a_desc, M, N, K, CONSUMERS, PIECES):
    """(PIECE_ROWS, BM, BK, BN, tiles along M, tiles along N, K steps)."""
    ROWS, BK = a_desc.block_type.shape
    BM = PIECES * ROWS
    BN = CONSUMERS * COLUMNS
    return ROWS, BM, BK, BN, gl.cdiv(M, BM), gl.cdiv(N, BN), gl.cdiv(K, BK)


def _producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, STAGES, GROUP_M, CONSUMERS, PIECES):
    ROWS, BM, BK, BN, num_m, num_n, k_tiles = _tiling(a_desc, M, N, K, CONSUMERS, PIECES)
    nbytes = PIECES * a_desc.block_type.nbytes + CONSUMERS * b_desc.block_type.nbytes
    it = gl.full([], 0, gl.int32)
    for tile in gl.range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        for k in gl.range(0, k_tiles):
            s, phase = ring_slot(it, STAGES)
            mbarrier.wait(empty.index(s), phase ^ 1)   # the first pass finds every slot empty
            mbarrier.expect(ready.index(s), nbytes)
            # a block wholly past M or N still lands (zero-filled) and counts its bytes
            for p in gl.static_range(PIECES):
                tma.async_load(a_desc, [pid_m * BM + p * ROWS, k * BK], ready.index(s), a_bufs.index(s).index(p))
            for w in gl.static_range(CONSUMERS):
                tma.async_load(b_desc, [k * BK, pid_n * BN + w * COLUMNS], ready.index(s),
                               b_bufs.index(s * CONSUMERS + w))
            it += 1


def _store_piece(c_desc, c_mine, p, piece, off_m, off_n):
    """Piece ``p`` of a tile (C^T rows, converted to C's dtype) by TMA through output buffer
    p % (buffers): the first piece waits for every earlier store (a tile ago: long done, and
    with an odd piece count the last one may have used any buffer), a later one for the store
    that last read its buffer."""
    ROWS: gl.constexpr = c_desc.block_type.shape[0]
    nbuf: gl.constexpr = c_mine.shape[0]
    buf = c_mine.index(p % nbuf)
    if p == 0:
        tma.store_wait(0)
    elif p >= nbuf:
        tma.store_wait(nbuf - 1)
    buf.permute((1, 0)).store(piece)
    fence_async_shared()
    tma.async_store(c_desc, [off_m + p * ROWS, off_n], buf)


def _consumer(a_desc, c_desc, a_bufs, b_bufs, c_bufs, ready, empty, M, N, K, STAGES, GROUP_M, CONSUMERS, PIECES,
              OVERLAP, WHICH):
    """Consumer WHICH: columns WHICH*64 .. +64 of every tile, all its rows. Its output buffers
    (``c_bufs.index(WHICH)``): one a piece, filled after the previous tile's stores are done;
    or fewer, taken in turn, each once the store that last read it is done. With ``OVERLAP``
    a tile's pieces are kept (converted: 16-bit pairs, half the accumulator's registers) and
    stored one a K step of the next tile, after that step's wgmma is issued, so the tensor
    cores are not idle while the epilogue runs."""
    ROWS, BM, BK, BN, num_m, num_n, k_tiles = _tiling(a_desc, M, N, K, CONSUMERS, PIECES)
    acc_l = wgmma_layout(COLUMNS, ROWS, gl.num_warps())
    c_mine = c_bufs.index(WHICH)
    nbuf: gl.constexpr = c_bufs.shape[1]
    first = gl.program_id(0)
    stop = num_m * num_n
    it = gl.full([], 0, gl.int32)
    outs = tuple(gl.zeros([COLUMNS, ROWS], c_desc.dtype, acc_l) for _ in range(PIECES)) if OVERLAP else None
    out_m = gl.full([], 0, gl.int32)
    out_n = gl.full([], 0, gl.int32)
    for tile in gl.range(first, stop, gl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        # C^T: this consumer's columns x the tile's rows, a piece of ROWS rows an accumulator
        accs = [gl.zeros([COLUMNS, ROWS], gl.float32, acc_l) for _ in range(PIECES)]
        prev = it
        for k in gl.range(0, k_tiles):
            s, phase = ring_slot(it, STAGES)
            mbarrier.wait(ready.index(s), phase)
            bt = b_bufs.index(s * CONSUMERS + WHICH).permute((1, 0))
            accs = warpgroup_mma(bt, a_bufs.index(s).permute((0, 2, 1)), accs, is_async=True)
            if OVERLAP:   # one test a step once the pieces are out, not one a piece
                with gl.if_((k < PIECES) & (tile > first)):
                    for p in gl.static_range(PIECES):
                        with gl.if_(k == p):
                            _store_piece(c_desc, c_mine, p, outs[p], out_m, out_n)
            # this step's group may run on; the previous step's has retired: release its stage
            accs = warpgroup_mma_wait(1, deps=accs)
            with gl.if_(k > 0):
                mbarrier.arrive(empty.index(ring_slot(prev, STAGES)[0]))
            prev = it
            it += 1
        if OVERLAP:   # K had fewer steps than the tile has pieces
            for p in gl.static_range(PIECES):
                with gl.if_((k_tiles <= p) & (tile > first)):
                    _store_piece(c_desc, c_mine, p, outs[p], out_m, out_n)
        accs = warpgroup_mma_wait(0, deps=accs)
        mbarrier.arrive(empty.index(ring_slot(prev, STAGES)[0]))
        out_m = pid_m * BM
        out_n = pid_n * BN + WHICH * COLUMNS
        if OVERLAP:
            outs = tuple(a.to(c_desc.dtype) for a in accs)
        elif nbuf == PIECES:
            tma.store_wait(0)   # the previous tile's stores have read the buffers
            for p in gl.static_range(PIECES):
                c_mine.index(p).permute((1, 0)).store(accs[p].to(c_desc.dtype))
            fence_async_shared()
            for p in gl.static_range(PIECES):
                tma.async_store(c_desc, [out_m + p * ROWS, out_n], c_mine.index(p))
        else:
            for p in gl.static_range(PIECES):
                _store_piece(c_desc, c_mine, p, accs[p].to(c_desc.dtype), out_m, out_n)
    if OVERLAP:
        with gl.if_(first < stop):
            for p in gl.static_range(PIECES):
                _store_piece(c_desc, c_mine, p, outs[p], out_m, out_n)
    tma.store_wait(0)


@gt.jit
def matmul_hopper_swap(a_desc, b_desc, c_desc, M, N, K, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                       CONSUMERS: gl.constexpr = 3, PIECES: gl.constexpr = 5, EPI_BUFS: gl.constexpr = 0,
                       OVERLAP: gl.constexpr = False):
    """C = A @ B in tiles of PIECES x PIECE_ROWS rows by CONSUMERS x 64 columns. A is [M, K] and
    B [K, N] (16-bit, row-major); ``a_desc`` is A's descriptor with block [PIECE_ROWS, BK],
    ``b_desc`` B's with block [BK, 64], ``c_desc`` C's with block [PIECE_ROWS, 64]
    (``swap_descriptors`` makes them). Launch with num_warps=4 (one warpgroup a consumer).
    ``EPI_BUFS``: output buffers a consumer (default 0: one a piece); fewer leave shared
    memory for another stage (160x192 with 4 stages needs 2). ``OVERLAP``: each tile's
    epilogue runs during the next tile's first K steps, a piece a step."""
    ROWS: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    gl.static_assert(gl.num_warps() == 4, "matmul_hopper_swap: one warpgroup a consumer (num_warps=4)")
    gl.static_assert(b_desc.block_type.shape == [BK, COLUMNS], "matmul_hopper_swap: B's block must be [BK, 64]")
    gl.static_assert(c_desc.block_type.shape == [ROWS, COLUMNS],
                     "matmul_hopper_swap: C's block must be [PIECE_ROWS, 64], A's [PIECE_ROWS, BK]")
    gl.static_assert(PIECES * ROWS <= 256, "matmul_hopper_swap: a tile has at most 256 rows (wgmma's N)")
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, PIECES, ROWS, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES * CONSUMERS, BK, COLUMNS], b_desc.layout)
    gl.static_assert(0 <= EPI_BUFS <= PIECES, "matmul_hopper_swap: EPI_BUFS from 1 to PIECES (0: PIECES)")
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [CONSUMERS, EPI_BUFS or PIECES, ROWS, COLUMNS], c_desc.layout)
    ready = mbarrier.allocate_mbarrier(batch=STAGES)
    empty = mbarrier.allocate_mbarrier(batch=STAGES)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=CONSUMERS)
    common = (a_desc, c_desc, a_bufs, b_bufs, c_bufs, ready, empty, M, N, K, STAGES, GROUP_M, CONSUMERS, PIECES,
              OVERLAP)
    consumers = [(functools.partial(_consumer, WHICH=w), common) for w in range(CONSUMERS)]
    # the register file (64K) shared out: the producer warp (padded to a warpgroup) keeps 40,
    # each consumer warpgroup the rest (setmaxnreg: multiples of 8, at most 256)
    regs: gl.constexpr = min(256, (65536 - 128 * 40) // (128 * CONSUMERS) // 8 * 8)
    gl.warp_specialize(consumers + [
        (_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, STAGES, GROUP_M, CONSUMERS, PIECES)),
    ], worker_num_warps=[4] * (CONSUMERS - 1) + [1], worker_num_regs=[regs] * (CONSUMERS - 1) + [40])

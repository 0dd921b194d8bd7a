"""Warp-specialized Hopper GEMM whose tile need not be a power of two: wgmma's M runs along C's
columns and its N along C's rows (it computes the tile of C^T = B^T A^T), so the tile is
CONSUMERS x 64 columns by BM_MAIN + BM_TAIL rows, e.g. 160 x 192.

Why: a tile count close to a whole number of waves. At 4000^3 a 128x256 tile leaves 512 tiles
on 132 SMs (four waves, the last 88% full, and 5% of each edge tile outside C); 160x192 tiles
make 525 (3.98 waves), each 6% cheaper. cuBLAS picks the same tile there. Register tiles and
shared buffers are powers of two, so the rows come in two pieces (a main block and a tail, two
TMA descriptors over A and C) and the columns in 64-wide pieces, one a consumer warpgroup:

- wgmma's A operand is consumer w's 64 columns of the B stage, read MN-major (B is [K, N], N
  contiguous: one 128-byte swizzle atom wide);
- its B operands are the A stage's main and tail blocks, read K-major: m64 x BM_MAIN and
  m64 x BM_TAIL instructions (N of a wgmma is any multiple of 8 up to 256);
- the two accumulators hold C^T; the epilogue stores them through a transposed view of the
  output buffers, and TMA writes [BM_MAIN, 64] and [BM_TAIL, 64] blocks of C.

A one-warp producer fills a ring of STAGES stages (A's two blocks and the CONSUMERS column
blocks of B); a stage is free once every consumer has released it (``empty`` counts CONSUMERS).
All consumers walk the same tiles in the same order, persistent over the grid."""
import functools

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                warpgroup_mma_wait)

from .matmul_hopper import grouped_tile, ring_slot, wgmma_layout

COLUMNS = 64   # a consumer's columns of the tile: one 128-byte swizzle atom of 16-bit B


def swap_descriptors(a, b, c, bm_main, bm_tail, bk, dtype):
    """matmul_hopper_swap's five descriptors over row-major A [M, K], B [K, N] and C [M, N] of the
    16-bit ``dtype`` (numpy arrays or torch tensors): A's blocks [bm_main, bk] and [bm_tail, bk], B's
    [bk, 64], C's [bm_main, 64] and [bm_tail, 64], each in its default NVMMA layout."""
    from gluon_trace.nvidia.hopper import TensorDescriptor

    def desc(t, block):
        return TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, dtype))
    return (desc(a, [bm_main, bk]), desc(a, [bm_tail, bk]), desc(b, [bk, COLUMNS]), desc(c, [bm_main, COLUMNS]),
            desc(c, [bm_tail, COLUMNS]))


def _tiling(a_desc, a_tail_desc, M, N, K, CONSUMERS):
    """(BM_MAIN, BM, BK, BN, tiles along M, tiles along N, K steps)."""
    BM_MAIN, BK = a_desc.block_type.shape
    BM = BM_MAIN + a_tail_desc.block_type.shape[0]
    BN = CONSUMERS * COLUMNS
    return BM_MAIN, BM, BK, BN, gl.cdiv(M, BM), gl.cdiv(N, BN), gl.cdiv(K, BK)


def _producer(a_desc, a_tail_desc, b_desc, a_bufs, a_tails, b_bufs, ready, empty, M, N, K, STAGES, GROUP_M,
              CONSUMERS):
    BM_MAIN, BM, BK, BN, num_m, num_n, k_tiles = _tiling(a_desc, a_tail_desc, M, N, K, CONSUMERS)
    nbytes = a_desc.block_type.nbytes + a_tail_desc.block_type.nbytes + CONSUMERS * b_desc.block_type.nbytes
    it = gl.full([], 0, gl.int32)
    for tile in gl.range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        for k in gl.range(0, k_tiles):
            s, phase = ring_slot(it, STAGES)
            mbarrier.wait(empty.index(s), phase ^ 1)   # the first pass finds every slot empty
            mbarrier.expect(ready.index(s), nbytes)
            # a block wholly past M or N still lands (zero-filled) and counts its bytes
            tma.async_load(a_desc, [pid_m * BM, k * BK], ready.index(s), a_bufs.index(s))
            tma.async_load(a_tail_desc, [pid_m * BM + BM_MAIN, k * BK], ready.index(s), a_tails.index(s))
            for w in gl.static_range(CONSUMERS):
                tma.async_load(b_desc, [k * BK, pid_n * BN + w * COLUMNS], ready.index(s),
                               b_bufs.index(s * CONSUMERS + w))
            it += 1


def _consumer(a_desc, a_tail_desc, c_desc, c_tail_desc, a_bufs, a_tails, b_bufs, c_bufs, c_tails, ready, empty,
              M, N, K, STAGES, GROUP_M, CONSUMERS, WHICH):
    """Consumer WHICH: columns WHICH*64 .. +64 of every tile, all its rows."""
    BM_MAIN, BM, BK, BN, num_m, num_n, k_tiles = _tiling(a_desc, a_tail_desc, M, N, K, CONSUMERS)
    BM_TAIL = BM - BM_MAIN
    main_l = wgmma_layout(COLUMNS, BM_MAIN, gl.num_warps())
    tail_l = wgmma_layout(COLUMNS, BM_TAIL, gl.num_warps())
    c_main = c_bufs.index(WHICH)
    c_tail = c_tails.index(WHICH)
    it = gl.full([], 0, gl.int32)
    for tile in gl.range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        acc = gl.zeros([COLUMNS, BM_MAIN], gl.float32, main_l)     # C^T: this consumer's columns x the rows
        acc_t = gl.zeros([COLUMNS, BM_TAIL], gl.float32, tail_l)
        prev = it
        for k in gl.range(0, k_tiles):
            s, phase = ring_slot(it, STAGES)
            mbarrier.wait(ready.index(s), phase)
            bt = b_bufs.index(s * CONSUMERS + WHICH).permute((1, 0))
            acc = warpgroup_mma(bt, a_bufs.index(s).permute((1, 0)), acc, is_async=True)
            acc_t = warpgroup_mma(bt, a_tails.index(s).permute((1, 0)), acc_t, is_async=True)
            # this step's two groups may run on; the previous step's have retired: release its stage
            acc, acc_t = warpgroup_mma_wait(2, deps=[acc, acc_t])
            with gl.if_(k > 0):
                mbarrier.arrive(empty.index(ring_slot(prev, STAGES)[0]))
            prev = it
            it += 1
        acc, acc_t = warpgroup_mma_wait(0, deps=[acc, acc_t])
        mbarrier.arrive(empty.index(ring_slot(prev, STAGES)[0]))
        tma.store_wait(0)   # the previous tile's stores have read the buffers
        c_main.permute((1, 0)).store(acc.to(c_desc.dtype))
        c_tail.permute((1, 0)).store(acc_t.to(c_desc.dtype))
        fence_async_shared()
        off_n = pid_n * BN + WHICH * COLUMNS
        tma.async_store(c_desc, [pid_m * BM, off_n], c_main)
        tma.async_store(c_tail_desc, [pid_m * BM + BM_MAIN, off_n], c_tail)
    tma.store_wait(0)


@gt.jit
def matmul_hopper_swap(a_desc, a_tail_desc, b_desc, c_desc, c_tail_desc, M, N, K, STAGES: gl.constexpr,
                       GROUP_M: gl.constexpr, CONSUMERS: gl.constexpr = 3):
    """C = A @ B in tiles of BM_MAIN + BM_TAIL rows by CONSUMERS x 64 columns. A is [M, K] and B
    [K, N] (16-bit, row-major); ``a_desc`` / ``a_tail_desc`` are A's descriptors with blocks
    [BM_MAIN, BK] and [BM_TAIL, BK], ``b_desc`` B's with block [BK, 64], ``c_desc`` /
    ``c_tail_desc`` C's with blocks [BM_MAIN, 64] and [BM_TAIL, 64] (``swap_descriptors`` makes
    them). Launch with num_warps=4 (one warpgroup a consumer)."""
    BM_MAIN: gl.constexpr = a_desc.block_type.shape[0]
    BM_TAIL: gl.constexpr = a_tail_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    gl.static_assert(gl.num_warps() == 4, "matmul_hopper_swap: one warpgroup a consumer (num_warps=4)")
    gl.static_assert(b_desc.block_type.shape == [BK, COLUMNS] and a_tail_desc.block_type.shape[1] == BK,
                     "matmul_hopper_swap: B's block must be [BK, 64] and A's two blocks [*, BK]")
    gl.static_assert(c_desc.block_type.shape == [BM_MAIN, COLUMNS] and c_tail_desc.block_type.shape == [BM_TAIL, COLUMNS],
                     "matmul_hopper_swap: C's blocks must be [BM_MAIN, 64] and [BM_TAIL, 64]")
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM_MAIN, BK], a_desc.layout)
    a_tails = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM_TAIL, BK], a_tail_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES * CONSUMERS, BK, COLUMNS], b_desc.layout)
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [CONSUMERS, BM_MAIN, COLUMNS], c_desc.layout)
    c_tails = gl.allocate_shared_memory(c_desc.dtype, [CONSUMERS, BM_TAIL, COLUMNS], c_tail_desc.layout)
    ready = mbarrier.allocate_mbarrier(batch=STAGES)
    empty = mbarrier.allocate_mbarrier(batch=STAGES)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=CONSUMERS)
    common = (a_desc, a_tail_desc, c_desc, c_tail_desc, a_bufs, a_tails, b_bufs, c_bufs, c_tails, ready, empty,
              M, N, K, STAGES, GROUP_M, CONSUMERS)
    consumers = [(functools.partial(_consumer, WHICH=w), common) for w in range(CONSUMERS)]
    gl.warp_specialize(consumers + [
        (_producer, (a_desc, a_tail_desc, b_desc, a_bufs, a_tails, b_bufs, ready, empty, M, N, K, STAGES, GROUP_M,
                     CONSUMERS)),
    ], worker_num_warps=[4] * (CONSUMERS - 1) + [1], worker_num_regs=[152] * (CONSUMERS - 1) + [40])

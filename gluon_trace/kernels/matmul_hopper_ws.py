"""Warp-specialized Hopper GEMM: a one-warp producer partition issues the TMA loads into a
ring of STAGES buffers; the default partition (a warpgroup) runs wgmma and the epilogue.
``ready[s]`` says a stage is loaded (the TMA bytes land on it); ``empty[s]`` says the MMA
that read it has retired, so the producer may refill it. Persistent over tiles."""
import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                warpgroup_mma_wait)

from .matmul_hopper import grouped_tile, ring_slot, wgmma_layout


def _tiling(a_desc, b_desc, M, N, K):
    """(BM, BK, BN, tiles along M, tiles along N, K steps): both partitions walk the same tiles."""
    BM, BK = a_desc.block_type.shape
    BN = b_desc.block_type.shape[1]
    return BM, BK, BN, gl.cdiv(M, BM), gl.cdiv(N, BN), gl.cdiv(K, BK)


def _producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, STAGES, GROUP_M, A_EVICT="", B_EVICT=""):
    BM, BK, BN, num_m, num_n, k_tiles = _tiling(a_desc, b_desc, M, N, K)
    nbytes = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    it = gl.full([], 0, gl.int32)
    for tile in gl.range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        for k in gl.range(0, k_tiles):
            s, phase = ring_slot(it, STAGES)
            # the first pass over the ring finds every slot empty: wait on the phase before
            mbarrier.wait(empty.index(s), phase ^ 1)
            mbarrier.expect(ready.index(s), nbytes)
            tma.async_load(a_desc, [pid_m * BM, k * BK], ready.index(s), a_bufs.index(s), eviction_policy=A_EVICT)
            tma.async_load(b_desc, [k * BK, pid_n * BN], ready.index(s), b_bufs.index(s), eviction_policy=B_EVICT)
            it += 1


def _tile_mainloop(a_bufs, b_bufs, ready, empty, acc, it, k_tiles, STAGES):
    """acc += A B over one tile's K steps, from ring step ``it`` on: one wgmma group in flight,
    each stage released once the wgmma after the one that read it is issued. Returns (acc, the
    next ring step, the step whose wgmma may still be running)."""
    prev = it
    for k in gl.range(0, k_tiles):
        s, phase = ring_slot(it, STAGES)
        mbarrier.wait(ready.index(s), phase)
        acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=[acc])
        with gl.if_(k > 0):
            mbarrier.arrive(empty.index(ring_slot(prev, STAGES)[0]))
        prev = it
        it += 1
    return acc, it, prev


def _tile_epilogue(c_desc, c_smem, acc, empty, prev, STAGES, off_m, off_n):
    """Retire the last wgmma, release its stage, and store the tile through c_smem by TMA."""
    acc = warpgroup_mma_wait(0, deps=[acc])
    mbarrier.arrive(empty.index(ring_slot(prev, STAGES)[0]))
    tma.store_wait(0)  # the previous tile's store has read c_smem
    c_smem.store(acc.to(c_desc.dtype))
    fence_async_shared()
    tma.async_store(c_desc, [off_m, off_n], c_smem)


def _consumer(a_desc, b_desc, c_desc, a_bufs, b_bufs, c_smem, ready, empty, M, N, K, STAGES, GROUP_M):
    BM, BK, BN, num_m, num_n, k_tiles = _tiling(a_desc, b_desc, M, N, K)
    acc_l = wgmma_layout(BM, BN, gl.num_warps())
    it = gl.full([], 0, gl.int32)
    for tile in gl.range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        acc = gl.zeros([BM, BN], gl.float32, acc_l)
        acc, it, prev = _tile_mainloop(a_bufs, b_bufs, ready, empty, acc, it, k_tiles, STAGES)
        _tile_epilogue(c_desc, c_smem, acc, empty, prev, STAGES, pid_m * BM, pid_n * BN)
    tma.store_wait(0)


@gt.jit
def matmul_hopper_ws(a_desc, b_desc, c_desc, M, N, K, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                     A_EVICT: gl.constexpr = "", B_EVICT: gl.constexpr = ""):
    """``A_EVICT`` / ``B_EVICT``: the L2 eviction policy of A's and B's loads (tma.async_load's
    ``eviction_policy``; default none)."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BK, BN], b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, [BM, BN], c_desc.layout)
    ready = mbarrier.allocate_mbarrier(batch=STAGES)
    empty = mbarrier.allocate_mbarrier(batch=STAGES)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize([
        (_consumer, (a_desc, b_desc, c_desc, a_bufs, b_bufs, c_smem, ready, empty, M, N, K, STAGES, GROUP_M)),
        (_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, STAGES, GROUP_M, A_EVICT, B_EVICT)),
    ], worker_num_warps=[1], worker_num_regs=[40])


def _pingpong_consumer(a_desc, b_desc, c_desc, a_bufs, b_bufs, c_smem, ready, empty, turn, M, N, K,
                       STAGES, GROUP_M, WHICH):
    """Consumer WHICH (0 or 1) of a ping-pong pair: of the CTA's tiles pid, pid+P, pid+2P, ... it
    takes every other one. Their main loops take turns (``turn[w]``: the other consumer has
    issued its last MMA), so the tensor cores run one consumer's main loop while the other
    writes its tile out; taking turns also keeps each consumer's ring waits at most one
    mbarrier phase ahead of the producer (a wait further ahead would see an old phase)."""
    BM, BK, BN, num_m, num_n, k_tiles = _tiling(a_desc, b_desc, M, N, K)
    acc_l = wgmma_layout(BM, BN, gl.num_warps())
    pid = gl.program_id(0)
    progs = gl.num_programs(0)
    for tile in gl.range(pid + WHICH * progs, num_m * num_n, 2 * progs):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        n = (tile - pid) // progs           # the CTA's n-th tile: the producer made n * k_tiles steps before it
        it = n * k_tiles
        if WHICH == 0:
            with gl.if_(n > 0):
                mbarrier.wait(turn.index(0), ((n // 2) - 1) & 1)
        else:
            mbarrier.wait(turn.index(1), (n // 2) & 1)
        acc = gl.zeros([BM, BN], gl.float32, acc_l)
        acc, it, prev = _tile_mainloop(a_bufs, b_bufs, ready, empty, acc, it, k_tiles, STAGES)
        mbarrier.arrive(turn.index(1 - WHICH))  # every MMA of this tile is issued: the other's turn
        _tile_epilogue(c_desc, c_smem, acc, empty, prev, STAGES, pid_m * BM, pid_n * BN)
    tma.store_wait(0)


def _pingpong_first(*args):
    _pingpong_consumer(*args, 0)


def _pingpong_second(*args):
    _pingpong_consumer(*args, 1)


@gt.jit
def matmul_hopper_pingpong(a_desc, b_desc, c_desc, M, N, K, STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    """C = A @ B with two consumer warpgroups taking tiles in turn (each num_warps warps, its
    own C buffer) and a one-warp TMA producer: one consumer's epilogue overlaps the other's
    main loop (CUTLASS's "ping-pong" schedule)."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BK, BN], b_desc.layout)
    c0 = gl.allocate_shared_memory(c_desc.dtype, [BM, BN], c_desc.layout)
    c1 = gl.allocate_shared_memory(c_desc.dtype, [BM, BN], c_desc.layout)
    ready = mbarrier.allocate_mbarrier(batch=STAGES)
    empty = mbarrier.allocate_mbarrier(batch=STAGES)
    turn = mbarrier.allocate_mbarrier(batch=2)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    for s in gl.static_range(2):
        mbarrier.init(turn.index(s), count=1)
    common = (a_desc, b_desc, c_desc, a_bufs, b_bufs)
    gl.warp_specialize([
        (_pingpong_first, common + (c0, ready, empty, turn, M, N, K, STAGES, GROUP_M)),
        (_pingpong_second, common + (c1, ready, empty, turn, M, N, K, STAGES, GROUP_M)),
        (_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, STAGES, GROUP_M)),
    ], worker_num_warps=[gl.num_warps(), 1], worker_num_regs=[232, 40])

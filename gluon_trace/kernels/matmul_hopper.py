"""Hopper GEMM: TMA loads into a ring of STAGES shared buffers, one mbarrier per stage,
wgmma from shared memory with one group in flight, persistent over output tiles in a grouped
order (GROUP_M rows of tiles at a time, for L2 reuse), TMA store of each tile."""
import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                warpgroup_mma_wait)


def grouped_tile(tile, num_m, num_n, GROUP_M):
    """(pid_m, pid_n) of tile number ``tile`` when GROUP_M rows of tiles are walked together."""
    in_group = GROUP_M * num_n
    group = tile // in_group
    first_m = group * GROUP_M
    rows = gl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (tile % in_group) % rows
    pid_n = (tile % in_group) // rows
    return pid_m, pid_n


def ring_slot(it, STAGES):
    """(slot, phase) of ring step ``it`` (>= 0): the slot it % STAGES and the parity of the
    passes over the ring before it. With STAGES a power of two, a mask and a shift: a signed
    ``it % STAGES`` costs ptxas six instructions for the sign's sake, in every K step."""
    n = getattr(STAGES, "value", STAGES)
    if n & (n - 1) == 0:
        return it & (n - 1), (it >> (n.bit_length() - 1)) & 1
    return it % n, (it // n) & 1


def wgmma_layout(BM, BN, num_warps):
    """The accumulator layout of a [BM, BN] tile over ``num_warps`` consumer warps: warpgroups
    stacked along M while each has 64 rows of its own, the rest side by side along N (BM=64 on
    8 warps: two m64 x BN/2 halves, cuBLAS's split for a skinny M). Stacking all of them along M
    regardless would give warpgroups beyond BM/64 copies of the same rows: the same wgmmas run
    twice."""
    wm = min(num_warps, max(4, BM // 16))
    gl.static_assert(num_warps % wm == 0 and BN % (num_warps // wm) == 0,
                     "the consumer warps must split the tile into whole warpgroups of 64 rows")
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[wm, num_warps // wm],
                                     instr_shape=[16, BN // (num_warps // wm), 16])


def column_chunks(x, width):
    """A [M, N] register tile as its [M, width] column blocks, left to right; no data moves
    where the columns are spread over registers (an MMA accumulator's are)."""
    if x.shape[1] == width:
        return [x]
    left, right = x.reshape([x.shape[0], 2, x.shape[1] // 2]).permute((0, 2, 1)).split()
    return column_chunks(left, width) + column_chunks(right, width)


def output_buffers(c_desc, BM, BN):
    """Shared buffers of c_desc's block for the epilogue of a [BM, BN] tile: one for the whole
    tile, two for column blocks (one fills while the other's store drains)."""
    EPI_N: gl.constexpr = c_desc.block_type.shape[1]
    gl.static_assert(c_desc.block_type.shape[0] == BM and BN % EPI_N == 0,
                     "c_desc's block must be [BM, EPI_N], EPI_N dividing the output tile's BN (a cluster "
                     "kernel's tile: the shared operand's block times num_ctas)")
    return gl.allocate_shared_memory(c_desc.dtype, [1 if EPI_N == BN else 2, BM, EPI_N], c_desc.layout)


def store_tile(c_desc, c_bufs, acc, off_m, off_n):
    """The tile by TMA in c_desc's column blocks through the output buffers taken in turn;
    stores stay in flight across tiles."""
    for i, chunk in enumerate(column_chunks(acc.to(c_desc.dtype), c_desc.block_type.shape[1])):
        store_block(c_desc, c_bufs, i, chunk, off_m, off_n)


def store_block(c_desc, c_bufs, i, block, off_m, off_n):
    """Column block ``i`` of the tile at (off_m, off_n), by TMA through output buffer
    i % (buffers)."""
    EPI_N: gl.constexpr = c_desc.block_type.shape[1]
    nbuf: gl.constexpr = c_bufs.shape[0]
    buf = c_bufs.index(i % nbuf)
    tma.store_wait(nbuf - 1)  # the store that last read buf is done
    buf.store(block.to(c_desc.dtype))
    fence_async_shared()
    tma.async_store(c_desc, [off_m, off_n + i * EPI_N], buf)


@gt.jit
def matmul_hopper(a_desc, b_desc, c_desc, M, N, K,
                  STAGES: gl.constexpr, GROUP_M: gl.constexpr, B_KMAJOR: gl.constexpr = False):
    """C = A @ B; B is [K, N], or with B_KMAJOR its transpose [N, K] (K contiguous: what
    8-bit and tf32 wgmma operands need, and cuBLAS's "NT" layout). ``c_desc``'s block is the
    output tile [BM, BN] or a column block of it [BM, EPI_N] (stored in pieces through two
    buffers: less shared memory, room for another stage)."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0 if B_KMAJOR else 1]
    acc_l: gl.constexpr = wgmma_layout(BM, BN, gl.num_warps())
    dtype = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_bufs = output_buffers(c_desc, BM, BN)
    bars = mbarrier.allocate_mbarrier(batch=STAGES)
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes

    num_m = gl.cdiv(M, BM)
    num_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    # TMA loads issued and wgmma steps consumed, over all tiles: they pick slot and phase.
    # Run-time values (a Python int rebound in a gl.range body would change once, at trace time)
    prod = gl.full([], 0, gl.int32)
    cons = gl.full([], 0, gl.int32)
    for tile in gl.range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        off_m = pid_m * BM
        off_n = pid_n * BN
        for kk in gl.range(0, gl.minimum(k_tiles, STAGES - 1)):
            s, _ = ring_slot(prod, STAGES)
            mbarrier.expect(bars.index(s), nbytes)
            tma.async_load(a_desc, [off_m, kk * BK], bars.index(s), a_bufs.index(s))
            tma.async_load(b_desc, [off_n, kk * BK] if B_KMAJOR else [kk * BK, off_n], bars.index(s),
                           b_bufs.index(s))
            prod += 1
        acc = gl.zeros([BM, BN], gl.float32, acc_l)
        for k in gl.range(0, k_tiles):
            s, phase = ring_slot(cons, STAGES)
            mbarrier.wait(bars.index(s), phase)
            b = b_bufs.index(s).permute((1, 0)) if B_KMAJOR else b_bufs.index(s)
            acc = warpgroup_mma(a_bufs.index(s), b, acc, is_async=True)
            # one group in flight: the wgmma of step k - 1 is done, so its slot can be refilled
            acc = warpgroup_mma_wait(1, deps=[acc])
            cons += 1
            with gl.if_(k + STAGES - 1 < k_tiles):
                ps, _ = ring_slot(prod, STAGES)
                mbarrier.expect(bars.index(ps), nbytes)
                tma.async_load(a_desc, [off_m, (k + STAGES - 1) * BK], bars.index(ps), a_bufs.index(ps))
                kn = (k + STAGES - 1) * BK
                tma.async_load(b_desc, [off_n, kn] if B_KMAJOR else [kn, off_n], bars.index(ps),
                               b_bufs.index(ps))
                prod += 1
        acc = warpgroup_mma_wait(0, deps=[acc])
        store_tile(c_desc, c_bufs, acc, off_m, off_n)
    tma.store_wait(0)

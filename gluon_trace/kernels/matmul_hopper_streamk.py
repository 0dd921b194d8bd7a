"""Hopper GEMM, warp-specialized and persistent, with a stream-K tail.

A persistent grid of P CTAs takes T output tiles in waves of P. When P does not divide T, the
last wave leaves SMs idle: 512 tiles on the H100's 132 SMs are 3.88 waves, timed as 4. Here the
first T - T % P tiles go whole, one per CTA in turn, as in :func:`matmul_hopper_cluster_ws`; the
K steps of the remaining T % P tiles are then cut into equal ranges, one per CTA (stream-K). A
range covers the end of one tile and the start of the next at most; a CTA that computed only
part of a tile stores its fp32 partial sum in ``partials`` and counts itself in
``counters[tile]``; the last to count adds every part in a fixed order (so the result does not
depend on which CTA came last) and stores the tile. Nobody waits for anybody: the last
arrival does the work. ``SPLIT`` caps the CTAs that share one tile (a tail of few tiles is cut
into at most SPLIT parts each, not into P: every part costs a partial tile's round trip
through L2).

Measured on the H200 (perf/README.md, session 12): 0.86-0.89x cuBLAS on every shape, against
0.97-1.00x for :func:`matmul_hopper_cluster_ws`. At 4096^3 the partly idle fourth wave already
runs faster than a full one, so a perfect tail would save ~1 us, and storing and summing the parts
costs ~20 us. Use it as the stream-K pattern (parts through L2, the last arrival sums them in a
fixed order), not for speed.

Workspace (:func:`streamk_workspace`): ``partials`` holds 2 * P * BM * BN float32;
``counters`` P int32, zero before the first launch; the last arrival of each tile sets its
counter back to zero, so one workspace serves any number of launches, one at a time."""
import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from .matmul_hopper import column_chunks, grouped_tile, store_block, wgmma_layout
from .matmul_hopper_cluster import _produce, _release, _ring, _tiles, consume_tiles, produce_tiles


def streamk_workspace(programs: int, BM: int, BN: int) -> tuple[int, int]:
    """(float32 elements of ``partials``, int32 elements of ``counters``) for a grid of
    ``programs`` CTAs and [BM, BN] tiles; ``counters`` must start at zero."""
    return 2 * programs * BM * BN, programs


def _schedule(T, KT, SPLIT):
    """(whole tiles, K steps cut into ranges, CTAs that take a range) for T tiles of KT steps."""
    P = gl.num_programs(0)
    sk_tiles = (T % P) * (KT > 0).to(gl.int32)  # K = 0: every tile is whole (and zero)
    return T - sk_tiles, sk_tiles * KT, gl.minimum(P, sk_tiles * SPLIT)


def _range_start(c, S, P_sk):
    """The first stream-K step of CTA c: the ranges are [c*S/P_sk, (c+1)*S/P_sk), rounded down."""
    return gl.minimum(c, P_sk) * S // gl.maximum(P_sk, 1)


def _owner(i, S, P_sk):
    """The CTA whose range holds stream-K step i: the last c with c*S//P_sk <= i."""
    return ((i + 1) * P_sk - 1) // gl.maximum(S, 1)


def _unit(u, S, P_sk, KT):
    """Unit u (0 or 1) of this CTA's range: (stream-K tile, first step, end step), steps
    counted within the tile; an empty unit has first == end."""
    pid = gl.program_id(0)
    start = _range_start(pid, S, P_sk)
    end = _range_start(pid + 1, S, P_sk)
    t = start // gl.maximum(KT, 1) + u
    lo = gl.maximum(start, t * KT)
    hi = gl.maximum(gl.minimum(end, (t + 1) * KT), lo)
    return t, lo - t * KT, hi - t * KT


def _sk_producer(a_desc, b_desc, a_bufs, b_bufs, full, empty, M, N, K, STAGES, GROUP_M, SPLIT):
    num_m, num_n, KT = _tiles(a_desc, b_desc, M, N, K, False)
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    dp_tiles, S, P_sk = _schedule(num_m * num_n, KT, SPLIT)
    it = produce_tiles(a_desc, b_desc, a_bufs, b_bufs, full, empty, M, N, K, STAGES, GROUP_M, False, dp_tiles)
    zero = gl.full([], 0, gl.int32)
    for u in gl.range(0, 2):
        t, lo, hi = _unit(u, S, P_sk, KT)
        pid_m, pid_n = grouped_tile(dp_tiles + t, num_m, num_n, GROUP_M)
        for k in gl.range(lo, hi):
            _produce(a_desc, b_desc, a_bufs, b_bufs, full, empty, it, pid_m * BM, pid_n * BN, k, zero, STAGES,
                     False)
            it += 1


def _tile_offsets(BM: gl.constexpr, BN: gl.constexpr, layout, row_stride=None):
    """Element offsets of a row-major [BM, BN] tile (rows ``row_stride`` apart, default BN) in
    ``layout``: each thread stores and loads the registers it holds."""
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
    return gl.expand_dims(rows, 1) * (BN if row_stride is None else row_stride) + gl.expand_dims(cols, 0)


def _fix_up(c_desc, c_bufs, partials, counters, acc, t, u, S, P_sk, KT, off_m, off_n):
    """This CTA computed part of stream-K tile t (its unit u): publish the part; the last of
    the tile's CTAs to arrive sums the parts in CTA order (its own from its registers) and
    stores the tile."""
    BM: gl.constexpr = acc.shape[0]
    BN: gl.constexpr = acc.shape[1]
    offs = _tile_offsets(BM, BN, acc.type.layout)
    pid = gl.program_id(0)
    gl.store(partials + (pid * 2 + u) * (BM * BN) + offs, acc)
    gl.thread_barrier()  # every thread's part is stored before the count releases it
    first = _owner(t * KT, S, P_sk)
    last = _owner((t + 1) * KT - 1, S, P_sk)
    arrived = gl.atomic_add(counters + t, 1)  # acq_rel, gpu scope
    with gl.if_(arrived == last - first):
        gl.store(counters + t, 0)  # every part has counted: ready for the next launch
        # a column block at a time: a sum and a part of the whole tile would not fit in registers
        EPI_N: gl.constexpr = c_desc.block_type.shape[1]
        for j, block in enumerate(column_chunks(acc, EPI_N)):
            # offsets made in the block's own layout (not cut from offs): the axis analysis
            # sees each thread's adjacent columns, and the loads go 64 bits at a time
            offs_j = _tile_offsets(BM, EPI_N, block.type.layout, BN) + j * EPI_N
            total = gl.zeros(offs_j.shape, gl.float32, offs_j.type.layout)
            for c in gl.range(first, last + 1):
                # this CTA's own part is still in its registers, bit for bit what it stored
                uc = (_range_start(c, S, P_sk) // gl.maximum(KT, 1) != t).to(gl.int32)
                other = gl.load(partials + (c * 2 + uc) * (BM * BN) + offs_j, mask=c != pid)
                total += gl.where(c == pid, block, other)
            store_block(c_desc, c_bufs, j, total, off_m, off_n)


def _sk_consumer(a_desc, b_desc, c_desc, partials, counters, a_bufs, b_bufs, c_bufs, full, empty, M, N, K,
                 STAGES, GROUP_M, SPLIT):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    acc_l: gl.constexpr = wgmma_layout(BM, BN, gl.num_warps())
    num_m, num_n, KT = _tiles(a_desc, b_desc, M, N, K, False)
    dp_tiles, S, P_sk = _schedule(num_m * num_n, KT, SPLIT)
    it = consume_tiles(a_desc, b_desc, c_desc, a_bufs, b_bufs, c_bufs, full, empty, M, N, K, STAGES, GROUP_M,
                       False, dp_tiles)
    for u in gl.range(0, 2):
        t, lo, hi = _unit(u, S, P_sk, KT)
        pid_m, pid_n = grouped_tile(dp_tiles + t, num_m, num_n, GROUP_M)
        acc = gl.zeros([BM, BN], gl.float32, acc_l)
        for k in gl.range(lo, hi):
            s = it % STAGES
            mbarrier.wait(full.index(s), (it // STAGES) & 1)
            acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=[acc])
            with gl.if_(k > lo):
                _release(empty, it - 1, STAGES)
            it += 1
        acc = warpgroup_mma_wait(0, deps=[acc])
        with gl.if_(hi > lo):
            _release(empty, it - 1, STAGES)
        # a unit that is a whole tile (only when a range is as long as a tile: SPLIT = 1, or
        # ranges shorter than one step) takes the same road: no second epilogue in registers
        with gl.if_(hi > lo):
            _fix_up(c_desc, c_bufs, partials, counters, acc, t, u, S, P_sk, KT, pid_m * BM, pid_n * BN)
    tma.store_wait(0)


@gt.jit
def matmul_hopper_streamk(a_desc, b_desc, c_desc, partials, counters, M, N, K, STAGES: gl.constexpr,
                          GROUP_M: gl.constexpr, SPLIT: gl.constexpr = 4):
    """C = A @ B with B [K, N]: descriptors as :func:`matmul_hopper_cluster_ws` with one CTA
    a cluster (``a_desc`` [BM, BK], ``b_desc`` [BK, BN], ``c_desc`` [BM, BN] or [BM, EPI_N]),
    plus the stream-K workspace (module docstring). Launch a persistent grid, one CTA per SM."""
    gl.static_assert(gl.num_ctas() == 1, "the stream-K GEMM runs one CTA a cluster")
    a_bufs, b_bufs, c_bufs, full, empty = _ring(a_desc, b_desc, c_desc, STAGES, False)
    gl.warp_specialize([
        (_sk_consumer, (a_desc, b_desc, c_desc, partials, counters, a_bufs, b_bufs, c_bufs, full, empty, M, N, K,
                        STAGES, GROUP_M, SPLIT)),
        (_sk_producer, (a_desc, b_desc, a_bufs, b_bufs, full, empty, M, N, K, STAGES, GROUP_M, SPLIT)),
    ], worker_num_warps=[1], worker_num_regs=[40])

"""Hopper GEMM in clusters of CTAs (launch with ``num_ctas=2``): the CTAs of a cluster compute
output tiles stacked along M that share one tile of B. Each CTA loads its own block of A and
1/num_ctas of B's block, multicast by TMA into every CTA of the cluster, so B crosses from L2
once per cluster instead of once per CTA (cuBLAS's sm_90 kernels do the same). With
``SHARE_A`` the cluster's tiles sit side by side along N and share A's tile instead (cuBLAS's
1x2 clusters; measured on the H100 it beat neither the B-sharing pairs at 4096^3 nor, for a
skinny M, the kernel without clusters: perf/README.md). ``SHARE_A=k`` (an int) makes the
cluster a grid of num_ctas/k tiles along M by k along N, sharing both: each A tile among the k
CTAs of its row, each B tile among the num_ctas/k of its column (CUTLASS's 2x2 clusters).

The ring: ``full[s]`` completes when stage s holds A and all of B (num_ctas TMA pieces land on
it, from this CTA and its peers); ``empty[s]`` (count num_ctas) completes when every CTA's
wgmma that read stage s has retired, since a refill writes into all of them. Loads run
STAGES - 2 steps ahead, so a stage is refilled a step after its release was sent. Persistent over
pairs of tiles in grouped order; ``cluster.barrier()`` after the inits (no peer multicasts onto
an mbarrier not yet initialised) and at the end (no CTA exits while a peer writes into it)."""
import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.hopper import (cluster, mbarrier, tma, warpgroup_mma,
                                                warpgroup_mma_wait)

from .matmul_hopper import (column_chunks, grouped_tile, output_buffers, ring_slot, store_block, store_tile,
                            wgmma_layout)


def _grid(SHARE_A):
    """(CTAs of a cluster along M, along N): they share B's tile along M, A's along N."""
    n: gl.constexpr = gl.num_ctas()
    share = getattr(SHARE_A, "value", SHARE_A)
    if isinstance(share, bool) or share is None:
        return (1, n) if share else (n, 1)
    gl.static_assert(share >= 1 and n % share == 0, "SHARE_A=k: k CTAs along N, a divisor of num_ctas")
    return n // share, share


def _rank_at(rank, SHARE_A):
    """(row, column) of CTA ``rank`` in the cluster's grid (M fastest)."""
    cm, _ = _grid(SHARE_A)
    return rank % cm, rank // cm


def _load_shared(desc, at, dim, full, buf, rank, SHARE_A, along_m):
    """This CTA's part of a tile that the CTAs of its grid column (``along_m``: B's tile, split
    along dim 1 among them) or grid row (A's, along dim 0) share, multicast into all of them.
    The part and its mask depend on the rank; a view's offsets are fixed at trace time, so
    each rank's load is its own predicated instruction."""
    cm, cn = _grid(SHARE_A)
    parts = cm if along_m else cn
    piece: gl.constexpr = desc.block_type.shape[dim]
    for r in gl.static_range(cm * cn):
        i, j = r % cm, r // cm
        mask = sum(1 << (x + cm * j) for x in range(cm)) if along_m else sum(1 << (i + cm * y) for y in range(cn))
        part = i if along_m else j
        where = list(at)
        where[dim] = where[dim] + part * piece
        tma.async_load(desc, where, full, buf.slice(part * piece, piece, dim=dim),
                       pred=rank == r, multicast=mask if parts > 1 else 0)


def _produce(a_desc, b_desc, a_bufs, b_bufs, full, empty, it, off_m, off_n, k, rank, STAGES, SHARE_A, part="both",
             B_KMAJOR=False):
    """Load ring step ``it`` (K step ``k``): this CTA's own operand block, and its part of the
    shared one (B's columns, or with SHARE_A A's rows) for every CTA of the cluster. With
    ``empty`` a pair (shared, own) of barrier arrays the two are loaded apart (``part`` "own"
    or "shared", each by its own warp): the own block waits only for this CTA's release. In a
    grid of CTAs (SHARE_A=k) both operands are shared, each among its grid row or column.
    ``B_KMAJOR``: B's blocks are [N, K] (its N along dim 0)."""
    n: gl.constexpr = gl.num_ctas()
    cm, cn = _grid(SHARE_A)
    BK: gl.constexpr = a_desc.block_type.shape[1]
    b_n = 0 if B_KMAJOR else 1   # B's N dim: where a shared B block is split among the CTAs
    a_at, b_at = [off_m, k * BK], ([off_n, k * BK] if B_KMAJOR else [k * BK, off_n])
    s, phase = ring_slot(it, STAGES)
    phase = phase ^ 1  # the first pass finds the ring empty: the phase before counts
    if cm > 1 and cn > 1:
        gl.static_assert(part == "both", "APART: one operand shared (SHARE_A True or False)")
        mbarrier.wait(empty.index(s), phase)
        mbarrier.expect(full.index(s), cn * a_desc.block_type.nbytes + cm * b_desc.block_type.nbytes)
        _load_shared(a_desc, a_at, 0, full.index(s), a_bufs.index(s), rank, SHARE_A, False)
        _load_shared(b_desc, b_at, b_n, full.index(s), b_bufs.index(s), rank, SHARE_A, True)
        return
    if cn > 1:
        own, shared, dim = (b_desc, b_at, b_bufs), (a_desc, a_at, a_bufs), 0
    else:
        own, shared, dim = (a_desc, a_at, a_bufs), (b_desc, b_at, b_bufs), b_n
    shared_empty, own_empty = empty if isinstance(empty, tuple) else (empty, empty)
    if part != "shared":
        # a coupled refill writes into every CTA's stage s: wait until all of them released it
        mbarrier.wait(own_empty.index(s), phase)
        # the peers' parts may land before this (the tx count runs below zero until it)
        mbarrier.expect(full.index(s), own[0].block_type.nbytes + n * shared[0].block_type.nbytes)
        tma.async_load(own[0], own[1], full.index(s), own[2].index(s))
    if part != "own":
        if part == "shared":
            mbarrier.wait(shared_empty.index(s), phase)
        _load_shared(shared[0], shared[1], dim, full.index(s), shared[2].index(s), rank, SHARE_A, cn == 1)


def _release(empty, it, STAGES, SHARE_A=False):
    """Ring step ``it``'s wgmma has retired here: tell every CTA that writes into this one's
    stages -- its grid row and column, the whole cluster when one operand is shared -- (and,
    with the loads apart, this CTA's own-block producer)."""
    n: gl.constexpr = gl.num_ctas()
    cm, cn = _grid(SHARE_A)
    s, _ = ring_slot(it, STAGES)
    if isinstance(empty, tuple):
        mbarrier.arrive(empty[1].index(s))
        empty = empty[0]
    if cm > 1 and cn > 1:
        rm, rn = _rank_at(cluster.cta_rank(), SHARE_A)
        for r in gl.static_range(n):
            mbarrier.arrive(empty.index(s), cta=r, pred=(r % cm == rm) | (r // cm == rn))
        return
    for r in gl.static_range(n):  # a cluster of one arrives locally (no mapa, no cluster scope)
        mbarrier.arrive(empty.index(s), cta=r if n > 1 else None)


def _tile_shape(a_desc, b_desc, SHARE_A, B_KMAJOR=False):
    """(BM, BN): a CTA's output tile; a shared operand's block is its part of the tile's."""
    cm, cn = _grid(SHARE_A)
    return a_desc.block_type.shape[0] * cn, b_desc.block_type.shape[0 if B_KMAJOR else 1] * cm


def _tiles(a_desc, b_desc, M, N, K, SHARE_A, B_KMAJOR=False):
    """(cluster tiles along M, along N, K steps) that every partition walks alike: a
    cluster's CTAs are stacked along M (sharing B), with SHARE_A side by side along N, with
    SHARE_A=k a grid of both."""
    cm, cn = _grid(SHARE_A)
    BM, BN = _tile_shape(a_desc, b_desc, SHARE_A, B_KMAJOR)
    k_tiles = gl.cdiv(K, a_desc.block_type.shape[1])
    return gl.cdiv(gl.cdiv(M, BM), cm), gl.cdiv(gl.cdiv(N, BN), cn), k_tiles


def _offsets(pid_m, pid_n, rank, BM, BN, SHARE_A):
    """This CTA's output tile origin: past the last tile (an odd count) a CTA still loads its
    part of the shared operand for its peers; its own reads are zeros and its store is clipped."""
    cm, cn = _grid(SHARE_A)
    rm, rn = _rank_at(rank, SHARE_A)
    return (pid_m * cm + rm) * BM, (pid_n * cn + rn) * BN


def _ring(a_desc, b_desc, c_desc, STAGES, SHARE_A, APART=False, B_KMAJOR=False):
    """The stages of A and B, the output buffers (one of c_desc's block for a whole tile, two
    for column blocks: one fills while the other's store drains), and the full/empty
    mbarriers, initialised and made visible to the cluster: (a_bufs, b_bufs, c_bufs, full, empty).
    With ``APART`` empty is a pair: (every CTA's release, count num_ctas; this CTA's, count 1)."""
    BM, BN = _tile_shape(a_desc, b_desc, SHARE_A, B_KMAJOR)
    BK: gl.constexpr = a_desc.block_type.shape[1]
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + ([BN, BK] if B_KMAJOR else [BK, BN]), b_desc.layout)
    c_bufs = output_buffers(c_desc, BM, BN)
    full = mbarrier.allocate_mbarrier(batch=STAGES)
    empty = mbarrier.allocate_mbarrier(batch=STAGES)
    own = mbarrier.allocate_mbarrier(batch=STAGES) if APART else None
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=sum(_grid(SHARE_A)) - 1)   # this CTA's grid row and column
        if APART:
            mbarrier.init(own.index(s), count=1)
    cluster.barrier()
    return a_bufs, b_bufs, c_bufs, full, ((empty, own) if APART else empty)


@gt.jit
def matmul_hopper_cluster(a_desc, b_desc, c_desc, M, N, K, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                          SHARE_A: gl.constexpr = False):
    """C = A @ B with B [K, N]. ``b_desc``'s block is B's block cut to 1/num_ctas of its
    columns ([BK, BN / num_ctas]); with SHARE_A, ``a_desc``'s block is A's cut to 1/num_ctas of
    its rows ([BM / num_ctas, BK]) and ``b_desc``'s is whole. ``c_desc``'s block is the output tile [BM, BN], or a column block of it
    [BM, EPI_N] (the epilogue then stores the tile in BN / EPI_N pieces through two buffers, which
    frees shared memory for another stage)."""
    n: gl.constexpr = gl.num_ctas()
    BM, BN = _tile_shape(a_desc, b_desc, SHARE_A)
    gl.static_assert(STAGES >= 3, "STAGES >= 3: loads run STAGES - 2 steps ahead")
    acc_l: gl.constexpr = wgmma_layout(BM, BN, gl.num_warps())
    a_bufs, b_bufs, c_bufs, full, empty = _ring(a_desc, b_desc, c_desc, STAGES, SHARE_A)
    rank = cluster.cta_rank()
    num_m, num_n, k_tiles = _tiles(a_desc, b_desc, M, N, K, SHARE_A)
    prod = gl.full([], 0, gl.int32)
    cons = gl.full([], 0, gl.int32)
    for tile in gl.range(gl.program_id(0) // n, num_m * num_n, gl.num_programs(0) // n):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        off_m, off_n = _offsets(pid_m, pid_n, rank, BM, BN, SHARE_A)
        for kk in gl.range(0, gl.minimum(k_tiles, STAGES - 2)):
            _produce(a_desc, b_desc, a_bufs, b_bufs, full, empty, prod, off_m, off_n, kk, rank, STAGES, SHARE_A)
            prod += 1
        acc = gl.zeros([BM, BN], gl.float32, acc_l)
        for k in gl.range(0, k_tiles):
            s, phase = ring_slot(cons, STAGES)
            mbarrier.wait(full.index(s), phase)
            acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=[acc])
            with gl.if_(k > 0):
                _release(empty, cons - 1, STAGES, SHARE_A)
            cons += 1
            # refill the stage step k - 2 used: its release (sent a step ago) has reached the
            # peers by now; refilling step k - 1's would wait here every step for a release
            # crossing SMs (measured on the H100: half the speed)
            with gl.if_(k + STAGES - 2 < k_tiles):
                _produce(a_desc, b_desc, a_bufs, b_bufs, full, empty, prod, off_m, off_n, k + STAGES - 2,
                         rank, STAGES, SHARE_A)
                prod += 1
        acc = warpgroup_mma_wait(0, deps=[acc])
        _release(empty, cons - 1, STAGES, SHARE_A)
        store_tile(c_desc, c_bufs, acc, off_m, off_n)
    tma.store_wait(0)
    cluster.barrier()


def produce_tiles(a_desc, b_desc, a_bufs, b_bufs, full, empty, M, N, K, STAGES, GROUP_M, SHARE_A, stop=None,
                  part="both", B_KMAJOR=False):
    """One warp: every TMA load of the ring (this CTA's own operand, its part of the shared
    one for all CTAs; or one of the two, ``part``), for the cluster's tiles below ``stop``
    (default: all). Returns the ring position reached."""
    n: gl.constexpr = gl.num_ctas()
    BM, BN = _tile_shape(a_desc, b_desc, SHARE_A, B_KMAJOR)
    num_m, num_n, k_tiles = _tiles(a_desc, b_desc, M, N, K, SHARE_A, B_KMAJOR)
    rank = cluster.cta_rank()
    it = gl.full([], 0, gl.int32)
    for tile in gl.range(gl.program_id(0) // n, num_m * num_n if stop is None else stop, gl.num_programs(0) // n):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        off_m, off_n = _offsets(pid_m, pid_n, rank, BM, BN, SHARE_A)
        for k in gl.range(0, k_tiles):
            _produce(a_desc, b_desc, a_bufs, b_bufs, full, empty, it, off_m, off_n, k, rank, STAGES, SHARE_A, part,
                     B_KMAJOR)
            it += 1
    return it


def consume_tiles(a_desc, b_desc, c_desc, a_bufs, b_bufs, c_bufs, full, empty, M, N, K, STAGES, GROUP_M, SHARE_A,
                  stop=None, SPREAD=True, B_KMAJOR=False):
    """The wgmma warpgroup(s): each stage released to every CTA once the wgmma after the one
    that read it is issued. A tile's epilogue waits for the next tile's wgmma: the tile,
    converted to c_desc's dtype, is carried over, and its stores through c_bufs run while
    that tile's wgmma do (the accumulator's own registers are free by then). With
    ``SPREAD`` column block j is stored after K step j's wgmma is issued, one block a step;
    without it all blocks after the first step, where the third waits for the first's TMA
    store with one wgmma step in flight. Measured on the H200 beside each other: 0.3-0.7%
    faster at 4096^3 and 4000^3 (perf/README.md). The cluster's tiles below ``stop``
    (default: all); returns the ring position reached. ``B_KMAJOR``: B's stages are [BN, BK]
    (K contiguous: what 8-bit and tf32 wgmma operands need), read through a permuted view."""
    n: gl.constexpr = gl.num_ctas()
    BM, BN = _tile_shape(a_desc, b_desc, SHARE_A, B_KMAJOR)
    acc_l: gl.constexpr = wgmma_layout(BM, BN, gl.num_warps())
    num_m, num_n, k_tiles = _tiles(a_desc, b_desc, M, N, K, SHARE_A, B_KMAJOR)
    rank = cluster.cta_rank()
    first = gl.program_id(0) // n
    it = gl.full([], 0, gl.int32)
    out = gl.zeros([BM, BN], c_desc.dtype, acc_l)  # the previous tile, not yet stored
    out_m = gl.full([], 0, gl.int32)
    out_n = gl.full([], 0, gl.int32)
    stop = num_m * num_n if stop is None else stop
    for tile in gl.range(first, stop, gl.num_programs(0) // n):
        pid_m, pid_n = grouped_tile(tile, num_m, num_n, GROUP_M)
        acc = gl.zeros([BM, BN], gl.float32, acc_l)
        blocks = column_chunks(out, c_desc.block_type.shape[1]) if SPREAD else [out]
        with gl.if_((k_tiles == 0) & (tile > first)):  # no wgmma to overlap with
            store_tile(c_desc, c_bufs, out, out_m, out_n)
        for k in gl.range(0, k_tiles):
            s, phase = ring_slot(it, STAGES)
            mbarrier.wait(full.index(s), phase)
            b = b_bufs.index(s).permute((1, 0)) if B_KMAJOR else b_bufs.index(s)
            acc = warpgroup_mma(a_bufs.index(s), b, acc, is_async=True)
            # one test a step once the blocks are out, not one a block (these run every K step)
            with gl.if_((k < len(blocks)) & (tile > first)):
                for j, block in enumerate(blocks):
                    with gl.if_(k == j):
                        if SPREAD:
                            store_block(c_desc, c_bufs, j, block, out_m, out_n)
                        else:
                            store_tile(c_desc, c_bufs, out, out_m, out_n)
            acc = warpgroup_mma_wait(1, deps=[acc])
            with gl.if_(k > 0):
                _release(empty, it - 1, STAGES, SHARE_A)
            it += 1
        for j, block in enumerate(blocks if SPREAD else []):  # K had fewer steps than the tile has blocks
            with gl.if_((k_tiles > 0) & (k_tiles <= j) & (tile > first)):
                store_block(c_desc, c_bufs, j, block, out_m, out_n)
        acc = warpgroup_mma_wait(0, deps=[acc])
        with gl.if_(k_tiles > 0):
            _release(empty, it - 1, STAGES, SHARE_A)
        out = acc.to(c_desc.dtype)
        out_m, out_n = _offsets(pid_m, pid_n, rank, BM, BN, SHARE_A)
    with gl.if_(first < stop):
        store_tile(c_desc, c_bufs, out, out_m, out_n)
    tma.store_wait(0)
    return it


def _ws_producer(a_desc, b_desc, a_bufs, b_bufs, full, empty, M, N, K, STAGES, GROUP_M, SHARE_A, part="both",
                 B_KMAJOR=False):
    produce_tiles(a_desc, b_desc, a_bufs, b_bufs, full, empty, M, N, K, STAGES, GROUP_M, SHARE_A, part=part,
                  B_KMAJOR=B_KMAJOR)


def _ws_consumer(a_desc, b_desc, c_desc, a_bufs, b_bufs, c_bufs, full, empty, M, N, K, STAGES, GROUP_M, SHARE_A,
                 SPREAD, B_KMAJOR=False):
    consume_tiles(a_desc, b_desc, c_desc, a_bufs, b_bufs, c_bufs, full, empty, M, N, K, STAGES, GROUP_M, SHARE_A,
                  SPREAD=SPREAD, B_KMAJOR=B_KMAJOR)


@gt.jit
def matmul_hopper_cluster_ws(a_desc, b_desc, c_desc, M, N, K, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                             SHARE_A: gl.constexpr = False, SPREAD: gl.constexpr = True,
                             APART: gl.constexpr = False, B_KMAJOR: gl.constexpr = False):
    """The cluster GEMM warp-specialized (CUTLASS's shape of it): a one-warp producer partition
    issues the loads and alone waits for stages to be released; the consumer warpgroup(s) only
    wait for loaded stages and release each to every CTA. Same descriptors as
    :func:`matmul_hopper_cluster`. Each tile is stored while the next one's wgmma run: with
    ``SPREAD`` one column block of c_desc a K step, without it every block after the first
    step (:func:`consume_tiles`). With ``APART`` two producer warps: one loads this CTA's own
    block as soon as this CTA released its stage, the other its part of the shared block once
    every CTA did, so the own block's stream never waits for a peer. With ``B_KMAJOR`` B is
    given as [N, K] (``b_desc``'s block [BN / num_ctas, BK]): the fp8 GEMM's layout."""
    a_bufs, b_bufs, c_bufs, full, empty = _ring(a_desc, b_desc, c_desc, STAGES, SHARE_A, APART, B_KMAJOR)
    producer = (a_desc, b_desc, a_bufs, b_bufs, full, empty, M, N, K, STAGES, GROUP_M, SHARE_A)
    consumer = (_ws_consumer, (a_desc, b_desc, c_desc, a_bufs, b_bufs, c_bufs, full, empty, M, N, K, STAGES,
                               GROUP_M, SHARE_A, SPREAD, B_KMAJOR))
    if APART:
        gl.warp_specialize([consumer, (_ws_producer, producer + ("own", B_KMAJOR)),
                            (_ws_producer, producer + ("shared", B_KMAJOR))],
                           worker_num_warps=[1, 1], worker_num_regs=[40, 40])
    else:
        gl.warp_specialize([consumer, (_ws_producer, producer + ("both", B_KMAJOR))], worker_num_warps=[1],
                           worker_num_regs=[40])
    cluster.barrier()

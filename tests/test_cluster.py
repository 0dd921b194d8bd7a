"""Clusters of CTAs (``num_ctas``): the language's rules, and the interpreter running a
cluster's CTAs together -- TMA multicast into every CTA of a mask, arrivals on a peer's
mbarrier, cluster barriers -- with the cluster GEMM against numpy and each mistake a cluster
kernel can make reported at its line."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import ArgumentValueError, InterpreterError, TraceError
from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster
from gluon_trace.language.nvidia.hopper import cluster, mbarrier, tma
from gluon_trace.nvidia.hopper import TensorDescriptor

from test_kernels import BF16, check, operands, padded

NV = gl.NVMMASharedLayout.get_default_for
HERE = __file__


def cluster_descs(a, b, c, bm, bn, bk, n, epi_n=None, share_a=False):
    """Descriptors for a cluster of ``n`` CTAs with [bm, bn] tiles: the shared operand's block
    (B's, or with share_a A's) is 1/n of the tile's; with share_a=k (an int, a grid of n/k by k
    CTAs) A's is 1/k of its rows and B's k/n of its columns."""
    ta = gl.bfloat16 if a.dtype == BF16 else gl.float16
    tc = gl.float32
    epi_n = epi_n or bn
    cn = (n if share_a else 1) if isinstance(share_a, bool) else share_a
    am, bn_ = bm // cn, bn // (n // cn)
    return (TensorDescriptor.from_tensor(a, [am, bk], NV([am, bk], ta)),
            TensorDescriptor.from_tensor(b, [bk, bn_], NV([bk, bn_], ta)),
            TensorDescriptor.from_tensor(c, [bm, epi_n], NV([bm, epi_n], tc)))


def run_gemm(rng, kernel, m, n, k, programs, bm=64, bn=64, bk=32, ctas=2, epi_n=None, share_a=False, **constexprs):
    """A cluster GEMM on the interpreter over fresh bf16 operands, its output poisoned with NaN,
    checked against numpy."""
    a, b = operands(rng, m, n, k, BF16)
    a, b = padded(a), padded(b)
    c = padded(np.full((m, n), np.nan, np.float32))
    if share_a is not False:
        constexprs["SHARE_A"] = share_a
    kernel[(programs,)](*cluster_descs(a, b, c, bm, bn, bk, ctas, epi_n, share_a), m, n, k, num_ctas=ctas,
                        backend="interpreter", target="sm_90a", **constexprs)
    check(c, a, b)


@pytest.mark.parametrize("m, n, k, programs", [(192, 128, 96, 4), (128, 64, 64, 2), (330, 200, 70, 2),
                                               (64, 256, 160, 6)])
def test_cluster_gemm_on_the_interpreter(rng, m, n, k, programs):
    """Two CTAs per cluster share B's tile (each loads half, multicast to both); odd tile
    counts along M leave a CTA loading B for its peer with nothing of its own to compute."""
    run_gemm(rng, matmul_hopper_cluster, m, n, k, programs, STAGES=3, GROUP_M=2)


@pytest.mark.parametrize("stages", [3, 5])
def test_cluster_gemm_ring_depths(rng, stages):
    run_gemm(rng, matmul_hopper_cluster, 128, 128, 300, 2, STAGES=stages, GROUP_M=2)


def test_cluster_gemm_of_four_ctas(rng):
    run_gemm(rng, matmul_hopper_cluster, 256, 128, 64, 4, bn=128, ctas=4, STAGES=3, GROUP_M=1)


@gt.jit
def ring_kernel(src, out, SYNC_AFTER_INIT: gl.constexpr, SYNC_AT_END: gl.constexpr, EVICT: gl.constexpr = ""):
    """CTA 0 multicasts one block to both CTAs; each CTA stores what landed in it, then tells
    the other it is done reading (a remote arrival) and waits for the other's word."""
    BM: gl.constexpr = src.block_type.shape[0]
    BN: gl.constexpr = src.block_type.shape[1]
    buf = gl.allocate_shared_memory(src.dtype, [BM, BN], src.layout)
    bar = mbarrier.allocate_mbarrier()
    done = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    mbarrier.init(done, count=1)
    if SYNC_AFTER_INIT:
        cluster.barrier()
    rank = cluster.cta_rank()
    mbarrier.expect(bar, src.block_type.nbytes)
    tma.async_load(src, [0, 0], bar, buf, pred=rank == 0, multicast=True, eviction_policy=EVICT)
    mbarrier.wait(bar, 0)
    lay: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [gl.num_warps(), 1], [1, 0])
    x = buf.load(lay)
    rows = gl.arange(0, BM, gl.SliceLayout(1, lay))
    cols = gl.arange(0, BN, gl.SliceLayout(0, lay))
    off = (gl.program_id(0) * BM + rows)[:, None] * BN + cols[None, :]
    gl.store(out + off, x)
    mbarrier.arrive(done, cta=1 - rank)
    with gl.if_(rank == 1):
        mbarrier.wait(done, 0)
    if SYNC_AT_END:
        cluster.barrier()


def _ring(sync_after_init=True, sync_at_end=True, programs=2):
    src = np.arange(16 * 32, dtype=np.float32).reshape(16, 32) * 0.5 - 7
    out = np.full((programs * 16, 32), np.nan, np.float32)
    d = TensorDescriptor.from_tensor(src, [16, 32], NV([16, 32], gl.float32))
    ring_kernel[(programs,)](d, out, SYNC_AFTER_INIT=sync_after_init, SYNC_AT_END=sync_at_end, num_ctas=2,
                             num_warps=1, backend="interpreter", target="sm_90a")
    return src, out


def test_multicast_lands_in_every_cta_of_the_mask():
    src, out = _ring(programs=4)
    for p in range(4):
        np.testing.assert_array_equal(out[16 * p:16 * (p + 1)], src)


def test_a_peer_used_before_the_cluster_barrier_after_init_is_an_error_at_the_line():
    with pytest.raises(InterpreterError) as e:
        _ring(sync_after_init=False)
    msg = str(e.value)
    assert "before that CTA" in msg and "cluster.barrier()" in msg
    assert "test_cluster.py" in msg and "tma.async_load(src" in msg


def test_a_cta_exiting_before_its_peer_arrives_on_it_is_an_error():
    with pytest.raises(InterpreterError) as e:
        _ring(sync_at_end=False)
    msg = str(e.value)
    assert "before CTA 0 exits" in msg and "cluster.barrier()" in msg
    assert "mbarrier.arrive(done, cta=1 - rank)" in msg


@gt.jit
def half_barrier(out):
    with gl.if_(cluster.cta_rank() == 0):
        cluster.barrier()
    gl.store(out + gl.program_id(0), 1.0)


def test_a_cluster_barrier_not_every_cta_reaches_is_a_deadlock_report():
    out = np.zeros(2, np.float32)
    with pytest.raises(InterpreterError) as e:
        half_barrier[(2,)](out, num_ctas=2, backend="interpreter", target="sm_90a")
    assert "deadlock" in str(e.value) and "1 of 2 CTAs arrived" in str(e.value)


def test_cluster_rank_is_the_program_within_its_cluster():
    @gt.jit
    def ranks(out):
        gl.store(out + gl.program_id(0), cluster.cta_rank())

    out = np.full(8, -1, np.int32)
    ranks[(8,)](out, num_ctas=4, backend="interpreter", target="sm_90a")
    np.testing.assert_array_equal(out, np.arange(8) % 4)
    assert ranks.trace(gl.pointer(gl.int32), num_ctas=4, target="interpreter").graph.num_ctas == 4


def test_num_ctas_is_checked_where_the_kernel_is_launched():
    out = np.zeros(8, np.int32)

    @gt.jit
    def k(out):
        gl.store(out + gl.program_id(0), gl.num_ctas())

    with pytest.raises(ArgumentValueError) as e:
        k[(3,)](out, num_ctas=2, backend="interpreter", target="sm_90a")
    assert "multiple of 2" in str(e.value) and "test_cluster.py" in str(e.value)
    with pytest.raises(ArgumentValueError) as e:
        k[(3,)](out, num_ctas=3, backend="interpreter", target="sm_90a")
    assert "1, 2, 4 or 8" in str(e.value)
    with pytest.raises(ArgumentValueError) as e:
        k.trace(gl.pointer(gl.int32), num_ctas=2, target="sm_80")
    assert "sm_90" in str(e.value)
    assert isinstance(e.value, ValueError)
    k[(4,)](out, num_ctas=2, backend="interpreter", target="sm_90a")
    assert list(out[:4]) == [2] * 4


@gt.jit
def one_load(src, MASK: gl.constexpr = 0, EVICT: gl.constexpr = ""):
    buf = gl.allocate_shared_memory(src.dtype, [16, 32], src.layout)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    tma.async_load(src, [0, 0], bar, buf, multicast=MASK, eviction_policy=EVICT)


def _one_block():
    return TensorDescriptor.from_tensor(np.zeros((16, 32), np.float32), [16, 32], NV([16, 32], gl.float32))


def test_multicast_needs_a_cluster():
    d, k = _one_block(), one_load
    with pytest.raises(TraceError) as e:
        k.trace(d, MASK=0b10, target="sm_90a")
    assert "num_ctas=2" in str(e.value) and "test_cluster.py" in str(e.value)
    # all CTAs of a cluster of one: an ordinary load
    assert "multicast" not in k.trace(d, MASK=True, target="sm_90a").graph.text
    with pytest.raises(TraceError) as e:
        k.trace(d, MASK=0b100, num_ctas=2, target="sm_90a")
    assert "cluster of 2" in str(e.value)


def test_an_unknown_eviction_policy_is_an_error_at_the_line():
    d, k = _one_block(), one_load
    with pytest.raises(TraceError) as e:
        k.trace(d, EVICT="evict_later", target="sm_90a")
    msg = str(e.value)
    assert "eviction_policy='evict_later'" in msg and "'evict_last'" in msg
    assert "test_cluster.py" in msg and "tma.async_load(src, [0, 0], bar, buf, multicast=MASK, eviction_policy=EVICT)" in msg
    assert 'eviction_policy": "evict_first"' not in k.trace(d, EVICT="", target="sm_90a").graph.text
    assert "evict_first" in k.trace(d, EVICT="evict_first", target="sm_90a").graph.text


def test_a_hinted_multicast_lands_as_an_unhinted_one_in_the_interpreter():
    src = np.arange(16 * 32, dtype=np.float32).reshape(16, 32) - 100.5
    d = TensorDescriptor.from_tensor(src, [16, 32], NV([16, 32], gl.float32))
    out = np.full((64, 32), np.nan, np.float32)
    ring_kernel[(4,)](d, out, SYNC_AFTER_INIT=True, SYNC_AT_END=True, EVICT="evict_last", num_ctas=2,
                      num_warps=1, backend="interpreter", target="sm_90a")
    np.testing.assert_array_equal(out, np.tile(src, (4, 1)))


def test_cluster_ops_are_refused_before_sm_90_at_the_line():
    @gt.jit
    def k(out):
        gl.store(out + gl.program_id(0), cluster.cta_rank())

    with pytest.raises(TraceError) as e:
        k.trace(gl.pointer(gl.int32), target="sm_80")
    assert "sm_90" in str(e.value) and "test_cluster.py" in str(e.value)


def test_a_cluster_barrier_inside_a_partition_is_refused():
    def worker():
        cluster.barrier()

    @gt.jit
    def k(out):
        gl.warp_specialize([(lambda: None, ()), (worker, ())], [1], [24])

    with pytest.raises(TraceError) as e:
        k.trace(gl.pointer(gl.int32), num_ctas=2, target="sm_90a")
    assert "warp_specialize" in str(e.value)


@pytest.mark.parametrize("m, n, k, programs", [(192, 128, 96, 4), (330, 200, 70, 2)])
def test_warp_specialized_cluster_gemm_on_the_interpreter(rng, m, n, k, programs):
    """warp_specialize inside a cluster kernel: each CTA's partitions join the cluster's
    scheduler; a producer warp per CTA loads (its part of B multicast), consumers release each
    stage to every CTA."""
    from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster_ws
    run_gemm(rng, matmul_hopper_cluster_ws, m, n, k, programs, STAGES=3, GROUP_M=2)


@pytest.mark.parametrize("ws", [False, True], ids=["plain", "warp-specialized"])
@pytest.mark.parametrize("epi_n", [16, 32])
def test_cluster_gemm_stores_tiles_in_column_blocks(rng, ws, epi_n):
    """c_desc's block a column block of the tile: the epilogue stores the accumulator in
    BN / EPI_N pieces through two buffers in turn (a store in flight while the next fills);
    several tiles a CTA, so stores from one tile are still draining when the next begins."""
    from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster_ws
    kernel = matmul_hopper_cluster_ws if ws else matmul_hopper_cluster
    run_gemm(rng, kernel, 256, 200, 96, 2, epi_n=epi_n, STAGES=3, GROUP_M=2)


@pytest.mark.parametrize("ws", [False, True], ids=["plain", "warp-specialized"])
@pytest.mark.parametrize("m, n, k, ctas, programs", [(64, 330, 96, 2, 2), (128, 512, 64, 4, 4), (150, 260, 70, 2, 4)])
def test_cluster_gemm_sharing_a(rng, ws, m, n, k, ctas, programs):
    """SHARE_A: a cluster's tiles side by side along N share A's tile, each CTA loading 1/ctas
    of its rows for all (the skinny-M shape); odd tile counts along N leave a CTA loading A
    for its peers with nothing of its own to compute."""
    from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster_ws
    kernel = matmul_hopper_cluster_ws if ws else matmul_hopper_cluster
    run_gemm(rng, kernel, m, n, k, programs, ctas=ctas, share_a=True, STAGES=3, GROUP_M=2)


@pytest.mark.parametrize("ws", [False, True], ids=["plain", "warp-specialized"])
@pytest.mark.parametrize("m, n, k, programs", [(128, 256, 96, 4), (200, 330, 70, 8), (64, 128, 64, 4)])
def test_cluster_gemm_in_a_grid_sharing_both(rng, ws, m, n, k, programs):
    """SHARE_A=2 on 4 CTAs: a 2x2 grid of tiles, each A tile multicast along its grid row and
    each B tile along its column (each CTA loads half of both); ragged edges and grids past
    the last tile row or column load their parts for the peers with nothing of their own."""
    from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster_ws
    kernel = matmul_hopper_cluster_ws if ws else matmul_hopper_cluster
    run_gemm(rng, kernel, m, n, k, programs, ctas=4, share_a=2, STAGES=3, GROUP_M=2)


def test_a_grid_that_does_not_divide_the_cluster_is_refused():
    from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster_ws
    z = padded(np.zeros((128, 128), BF16))
    with pytest.raises(TraceError) as e:
        matmul_hopper_cluster_ws.trace(*cluster_descs(z, z, padded(np.zeros((128, 128), np.float32)), 64, 64, 32, 4,
                                                      share_a=4), 128, 128, 128, STAGES=3, GROUP_M=2, SHARE_A=3,
                                       num_ctas=4, target="sm_90a")
    assert "a divisor of num_ctas" in str(e.value) and "matmul_hopper_cluster.py:" in str(e.value)


def test_cluster_gemm_as_clusters_of_one(rng):
    """num_ctas=1: the same kernel with no peer (each CTA loads all of B, releases stay in the
    SM) -- the 4096^3 sweep's fastest launch of it on the H100 in session 8."""
    from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster_ws
    run_gemm(rng, matmul_hopper_cluster_ws, 200, 300, 150, 3, ctas=1, epi_n=32, STAGES=4, GROUP_M=2)


@pytest.mark.parametrize("k, spread", [(32, True), (64, True), (96, True), (150, False)])
def test_cluster_ws_stores_column_blocks_over_the_next_tiles_k_steps(rng, k, spread):
    """Two column blocks of 32 a tile, several tiles a CTA: with SPREAD block j goes out after
    K step j of the next tile, and a K of one step stores the rest after the loop."""
    from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster_ws
    run_gemm(rng, matmul_hopper_cluster_ws, 200, 300, k, 2, ctas=1, epi_n=32, STAGES=4, GROUP_M=2, SPREAD=spread)


def test_cluster_gemm_refuses_an_output_block_that_does_not_divide_the_tile(rng):
    a, b = operands(rng, 128, 128, 64, BF16)
    c = np.full((128, 128), np.nan, np.float32)
    with pytest.raises(TraceError, match="c_desc's block must be"):
        matmul_hopper_cluster[(2,)](*cluster_descs(a, b, c, 64, 64, 32, 2, epi_n=128), 128, 128, 64, STAGES=3,
                                    GROUP_M=2, num_ctas=2, backend="interpreter", target="sm_90a")


def _run_with_release(rng, monkeypatch, release) -> str:
    """The warp-specialized cluster GEMM with ``release`` in place of its stage release; the
    message of the InterpreterError it must raise."""
    import gluon_trace.kernels.matmul_hopper_cluster as mod
    monkeypatch.setattr(mod, "_release", release)
    monkeypatch.setattr(mod.matmul_hopper_cluster_ws, "cache", {})  # trace anew, and drop the broken trace after
    m, n, k = 128, 64, 256
    a, b = operands(rng, m, n, k, BF16)
    c = padded(np.full((m, n), np.nan, np.float32))
    with pytest.raises(InterpreterError) as e:
        mod.matmul_hopper_cluster_ws[(2,)](*cluster_descs(padded(a), padded(b), c, 64, 64, 32, 2), m, n, k,
                                           STAGES=3, GROUP_M=1, num_ctas=2, backend="interpreter",
                                           target="sm_90a")
    return str(e.value)


def test_a_release_that_skips_the_peer_is_a_deadlock_naming_every_partition(rng, monkeypatch):
    """A consumer releasing a stage only in its own CTA: the peer's producer, which refills
    both CTAs' stage, waits forever; the report names the blocked partitions of both CTAs."""
    msg = _run_with_release(rng, monkeypatch, lambda empty, it, STAGES, SHARE_A=False: mbarrier.arrive(
        empty.index(it % STAGES), cta=cluster.cta_rank()))
    assert "deadlock" in msg and "worker partition 1" in msg and "CTA 1" in msg and "CTA 0" in msg
    blocked = [line for line in msg.splitlines() if "matmul_hopper_cluster.py:" in line and "mbarrier.wait" in line]
    assert len(blocked) == 4, msg  # each CTA's default task and its producer, each at its wait's line


def test_a_release_counted_twice_in_its_own_cta_is_a_race_on_the_peers_stage(rng, monkeypatch):
    """A consumer that fills its own CTA's empty barrier (both arrivals local) never waits for
    the peer: its producer's multicast then refills the peer's stage while the peer's wgmma may
    still read it -- a race the interpreter must report, not a wrong number."""
    def release_twice_locally(empty, it, STAGES, SHARE_A=False):
        mbarrier.arrive(empty.index(it % STAGES), cta=cluster.cta_rank())
        mbarrier.arrive(empty.index(it % STAGES), cta=cluster.cta_rank())

    msg = _run_with_release(rng, monkeypatch, release_twice_locally)
    assert "deadlock" not in msg, msg
    assert "tma.async_load overwrites shared memory" in msg and "warpgroup_mma" in msg, msg
    assert "matmul_hopper_cluster.py" in msg

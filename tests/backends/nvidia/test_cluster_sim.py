"""Clusters of several CTAs on the CPU simulator (ptxsim_cluster, with ptxsim_ws's scheduler and
ptxsim_races's detector): the cluster special registers, the multicast ring kernel and the 2-CTA
cluster GEMMs (plain and warp-specialized, sharing B or A) against the interpreter and numpy on
fresh random inputs, with the CTAs of a cluster interleaved in several orders; and each cluster
mistake -- a peer's mbarrier used before its init, a CTA exiting before a peer's arrival on it,
an empty barrier counting one CTA's releases -- reported."""
import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import ptxsim_hopper  # noqa: E402
import ptxsim_races  # noqa: E402
import ptxsim_ws  # noqa: E402

from gluon_trace import language as gl  # noqa: E402
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.kernels.matmul_hopper_cluster import (matmul_hopper_cluster,  # noqa: E402
                                                       matmul_hopper_cluster_ws)
from test_cluster import cluster_descs, ring_kernel  # noqa: E402
from test_kernels import BF16, operands, padded  # noqa: E402
from test_ws_sim import _check_gemm, _fresh, interpret, trace  # noqa: E402

NV = gl.NVMMASharedLayout.get_default_for


def simulate(text, grid, args, smem, order, races=True, seed=None):
    """ptxsim_races.run (ptxsim_ws.run without the detector); "random" on a fresh seed unless
    one is given, named if the run fails."""
    if order not in ("random", "warps"):
        seed = None
    elif seed is None:
        seed = int(np.random.default_rng().integers(2 ** 32))
    try:
        return (ptxsim_races if races else ptxsim_ws).run(text, grid, args, smem, order=order, seed=seed)
    except Exception as e:
        if seed is None:
            raise
        raise type(e)(f"ptxsim_ws order={order!r}, seed={seed}: {e}") from e


# -- the special registers, from hand-written PTX ------------------------------------------------------

SPECIALS = ["%ctaid.x", "%ctaid.y", "%cluster_ctarank", "%cluster_nctarank", "%cluster_ctaid.x",
            "%cluster_ctaid.y", "%clusterid.x", "%clusterid.y", "%nclusterid.x", "%nclusterid.y",
            "%cluster_nctaid.x", "%cluster_nctaid.y"]


def _specials_ptx(shape):
    words = len(SPECIALS)
    body = "\n".join(f"\tmov.u32 %r{10 + j}, {s};\n\t@%p1 st.global.u32 [%rd3+{4 * j}], %r{10 + j};"
                     for j, s in enumerate(SPECIALS))
    return f"""//
.version 8.0
.target sm_90a
.address_size 64

.visible .entry specials(
\t.param .u64 specials_param_0
)
.maxntid 64, 1, 1
.reqnctapercluster {shape[0]}, {shape[1]}, 1
{{
\t.reg .pred %p<3>;
\t.reg .b32 %r<{10 + words}>;
\t.reg .b64 %rd<4>;
\tld.param.u64 %rd1, [specials_param_0];
\tmov.u32 %r1, %tid.x;
\tsetp.eq.u32 %p1, %r1, 0;
\tmov.u32 %r2, %ctaid.x;
\tmov.u32 %r3, %ctaid.y;
\tmov.u32 %r4, %nctaid.x;
\tmad.lo.u32 %r5, %r3, %r4, %r2;
\tmul.lo.u32 %r6, %r5, {4 * words};
\tcvt.u64.u32 %rd2, %r6;
\tadd.u64 %rd3, %rd1, %rd2;
\tmov.pred %p2, %is_explicit_cluster;
\tbarrier.cluster.arrive.relaxed.aligned;
\tbarrier.cluster.wait.aligned;
{body}
\tret;
}}
"""


@pytest.mark.parametrize("shape, grid", [((2, 1), (4, 1)), ((2, 2), (4, 2)), ((1, 2), (3, 4))])
def test_cluster_special_registers_read_as_the_isa_defines_them(shape, grid):
    text = _specials_ptx(shape)
    from gluon_trace.backends.nvidia import ptxas
    from gluon_trace.errors import CompileError
    try:
        ptxas.locate()
    except CompileError:   # pragma: no cover (no ptxas: the simulator alone)
        pass
    else:
        ptxas.assemble(text, "sm_90a")   # the hand-written PTX is PTX ptxas takes
    nctas = grid[0] * grid[1]
    out = np.full((nctas, len(SPECIALS)), 0xFFFFFFFF, np.uint32)
    ptxsim_ws.run(text, grid, [out], 0, order="random", seed=0)
    X, Y = shape
    for y in range(grid[1]):
        for x in range(grid[0]):
            want = [x, y, x % X + X * (y % Y), X * Y, x % X, y % Y, x // X, y // Y, grid[0] // X, grid[1] // Y, X, Y]
            assert list(out[y * grid[0] + x]) == want, (x, y)


def test_a_grid_that_is_no_whole_number_of_clusters_is_refused():
    with pytest.raises(ValueError, match="no whole number of"):
        ptxsim_ws.run(_specials_ptx((2, 1)), (3, 1), [np.zeros((3, len(SPECIALS)), np.uint32)], 0)


# -- the multicast ring kernel ------------------------------------------------------------------------

ORDERS = ["pc", "cta", "cta_reversed", "random"]


def _ring_case(sync_after_init=True, sync_at_end=True, programs=4, warps=1, evict=""):
    src = np.random.default_rng().standard_normal((16, 32)).astype(np.float32)

    def args():
        out = np.full((programs * 16, 32), np.nan, np.float32)
        return [TensorDescriptor.from_tensor(src.copy(), [16, 32], NV([16, 32], gl.float32)), out]
    g, text, smem = trace(ring_kernel, args(), (programs,), SYNC_AFTER_INIT=sync_after_init,
                          SYNC_AT_END=sync_at_end, EVICT=evict, num_ctas=2, num_warps=warps)
    return g, text, smem, args, src


@pytest.mark.parametrize("order", ORDERS + ["warps"])
@pytest.mark.parametrize("warps", [1, 4])
def test_ring_kernel_multicasts_into_both_ctas(order, warps):
    """Rank 0 of each cluster multicasts one block into both CTAs; each stores what landed in it
    and arrives on the peer's mbarrier (mapa + shared::cluster). As the interpreter, bit for bit."""
    g, text, smem, args, src = _ring_case(warps=warps)
    ref = interpret(g, (4,), args())[1]
    out = args()
    sim = simulate(text, (4,), out, smem, order)
    np.testing.assert_array_equal(out[1], np.tile(src, (4, 1)))
    np.testing.assert_array_equal(out[1], ref)
    assert sim.peer_copies == 2 and sim.peer_arrivals == 4 * warps   # rank 0 into rank 1; each CTA to the other


@pytest.mark.parametrize("evict", ["evict_first", "evict_last"])
def test_a_multicast_with_an_l2_policy(evict):
    """A multicast carrying an L2 cache hint: the policy operand follows the ctaMask (the
    simulator reads each from its place), ptxas takes it, and the block lands in both CTAs."""
    from gluon_trace.backends.nvidia import ptxas
    g, text, smem, args, src = _ring_case(warps=4, evict=evict)
    assert re.search(r"\.multicast::cluster\.L2::cache_hint \[[^\]]+\], \[[^\]]+\], \[[^\]]+\], %h\d+, %rd\d+;", text)
    out = args()
    sim = simulate(text, (4,), out, smem, "random")
    np.testing.assert_array_equal(out[1], np.tile(src, (4, 1)))
    assert sim.peer_copies == 2 and sim.cache_hints == 2   # one hinted load a cluster
    if ptxas.find_path():
        ptxas.assemble(text, "sm_90a")


@pytest.mark.parametrize("order", ORDERS)
def test_ring_without_the_cluster_barrier_after_init_is_a_race_in_every_order(order):
    """Rank 0's multicast onto rank 1's mbarrier is not ordered after rank 1's mbarrier.init: the
    detector says so whatever order ran them (with rank 0 first, the copy even reaches the
    barrier before its init, which the simulator says without the detector)."""
    _, text, smem, args, _ = _ring_case(sync_after_init=False)
    race = r"cluster race: warp 0 of CTA [02] multicasts onto the mbarrier at shared \d+ of CTA [13], whose " \
        r"mbarrier\.init by warp 0 of CTA [13] nothing orders"
    early = r"CTA [02] multicasts onto the mbarrier at shared \d+ of CTA [13] before CTA [13] initialised it"
    with pytest.raises(RuntimeError, match={"cta": early, "random": f"{race}|{early}"}.get(order, race)):
        simulate(text, (4,), args(), smem, order)
    with pytest.raises(RuntimeError, match="CTA 0 multicasts onto the mbarrier at shared \\d+ of CTA 1 before CTA 1 "
                                           "initialised it"):
        simulate(text, (4,), args(), smem, "cta", races=False)


@pytest.mark.parametrize("order", ORDERS)
def test_ring_without_the_cluster_barrier_at_the_end_is_a_race_in_every_order(order):
    """Rank 0 never waits for rank 1's arrival on it: it may exit first. The detector finds the
    exit unordered after the arrival, or (where rank 0 ran ahead) the arrival finds it gone."""
    _, text, smem, args, _ = _ring_case(sync_at_end=False)
    race = r"cluster race: CTA [02] exits with nothing ordering its exit after warp 0 of CTA [13]'s arrival on its " \
        r"mbarrier at shared \d+"
    gone = r"CTA [13] arrives on CTA [02], which has exited"
    with pytest.raises(RuntimeError, match={"cta": gone, "random": f"{race}|{gone}"}.get(order, race)):
        simulate(text, (4,), args(), smem, order)
    with pytest.raises(RuntimeError, match="CTA 1 arrives on CTA 0, which has exited"):
        simulate(text, (4,), args(), smem, "cta", races=False)


def test_a_cluster_barrier_a_peer_never_reaches_is_a_deadlock_naming_both_ctas():
    """The ring with its remote arrivals dropped: rank 1 waits for rank 0's word forever, rank 0
    at the barrier.cluster at the end waits for rank 1."""
    _, text, smem, args, _ = _ring_case()
    bad, n = re.subn(r"\t@%p\d+ mbarrier\.arrive\.shared::cluster[^\n]*\n", "", text)
    assert n == 1
    with pytest.raises(RuntimeError) as e:
        simulate(bad, (4,), args(), smem, "cta", races=False)
    msg = str(e.value)
    assert msg.startswith("deadlock")
    for c in (0, 2):
        assert f"CTA {c} warp 0 waits on barrier.cluster (CTAs {c}, {c + 1}; 32 of 64 threads arrived)" in msg, msg
        assert re.search(rf"CTA {c + 1} warp 0 waits on the mbarrier at shared \d+ \(mbarrier\.try_wait[^;]*; phase 0, "
                         r"1 of 1 arrivals", msg), msg


# -- the cluster GEMMs ------------------------------------------------------------------------------

GEMMS = {"plain": (matmul_hopper_cluster, {}), "ws": (matmul_hopper_cluster_ws, {}),
         # the own block and the shared part loaded by two warps, each on its own release
         "ws-apart": (matmul_hopper_cluster_ws, {"APART": True})}
SHAPES = [  # (M, N, K, programs, SHARE_A): 64x64 tiles, BK 32, 3 stages, 2 CTAs a cluster
    (192, 128, 160, 2, False),   # 3 tiles along M: the second pair's rank 1 is past the end; 5 K steps wrap the ring
    (130, 70, 100, 4, False),    # ragged edges, a K that is no step multiple, two clusters
    (128, 192, 160, 2, True),    # SHARE_A: 3 tiles along N, a pair's rank 1 past the end
    (70, 130, 100, 4, True),     # SHARE_A, ragged
]


def _gemm_case(kernel, m, n, k, programs, share_a, stages=3, ctas=2, bm=64):
    a, b = (padded(x) for x in operands(np.random.default_rng(), m, n, k, BF16))

    def args():
        c = padded(np.full((m, n), np.nan, np.float32))
        return [*cluster_descs(_fresh(a), _fresh(b), c, bm, 64, 32, ctas, share_a=share_a), m, n, k]
    fn, extra = GEMMS[kernel]
    g, text, smem = trace(fn, args(), (programs,), STAGES=stages, GROUP_M=2, SHARE_A=share_a,
                          num_warps=4, num_ctas=ctas, **extra)
    return g, text, smem, args, a, b


@pytest.mark.parametrize("order", ["cta", "random"])
@pytest.mark.parametrize("m, n, k, programs, share_a", SHAPES)
@pytest.mark.parametrize("kernel", list(GEMMS))
def test_cluster_gemm(kernel, m, n, k, programs, share_a, order):
    """Each CTA loads its own block and its part of the shared one, multicast into both; each
    stage is released to both CTAs (remote arrivals); against numpy and the interpreter."""
    g, text, smem, args, a, b = _gemm_case(kernel, m, n, k, programs, share_a)
    ref = interpret(g, (programs,), args())
    out = args()
    sim = simulate(text, (programs,), out, smem, order)
    _check_gemm(a, b, out[2].base, ref[2].base, 2e-5)
    assert sim.peer_copies > 0 and sim.peer_arrivals > 0
    # a CTA running alone until it waits ("cta") must wait for its peer's part of the shared
    # block; a random schedule may happen never to find a stage unready
    assert sim.mbarrier_parks > 0 or order == "random"


WGMMA_RACE = (r"shared-memory race: warp \d of CTA ([01]) overwrites by a TMA load shared byte \d+ of CTA (?!\1)[01], "
              r"which a wgmma of warp 0 of CTA [01]'s warpgroup read with nothing ordering")
IN_FLIGHT = r"a TMA load into shared \d+\.\. overwrites bytes an in-flight wgmma reads in CTA [01]"
# a refill unordered after a wgmma's reads in either CTA (its own, or the peer it multicasts into)
ANY_WGMMA_RACE = (r"shared-memory race: warp \d of CTA [01] overwrites by a TMA load shared byte \d+ of CTA [01], "
                  r"which a wgmma of warp 0 of CTA [01]'s warpgroup read with nothing ordering")


@pytest.mark.parametrize("kernel", list(GEMMS))
def test_cluster_gemm_of_four_ctas_sharing_a(kernel):
    """Four CTAs side by side along N, each loading a quarter of A's 128-row block for all; 6
    tiles along N, so the second cluster tile's last two CTAs are past the end."""
    g, text, smem, args, a, b = _gemm_case(kernel, 128, 330, 96, 4, True, ctas=4, bm=128)
    assert ".reqnctapercluster 4, 1, 1" in text
    ref = interpret(g, (4,), args())
    out = args()
    sim = simulate(text, (4,), out, smem, "random")
    _check_gemm(a, b, out[2].base, ref[2].base, 2e-5)
    assert sim.peer_copies > 0 and sim.peer_arrivals > 0


@pytest.mark.parametrize("kernel", ["plain", "ws"])
@pytest.mark.parametrize("m, n, k, programs", [(128, 128, 96, 4), (100, 190, 70, 8)])
def test_cluster_gemm_in_a_2x2_grid(kernel, m, n, k, programs):
    """SHARE_A=2 on clusters of 4: each CTA loads half of its A tile for its grid row and half
    of its B tile for its column, and releases each stage to those three CTAs (its row and
    column), not the fourth; against numpy and the interpreter, with races checked."""
    g, text, smem, args, a, b = _gemm_case(kernel, m, n, k, programs, 2, ctas=4)
    assert ".reqnctapercluster 4, 1, 1" in text
    ref = interpret(g, (programs,), args())
    out = args()
    sim = simulate(text, (programs,), out, smem, "random")
    _check_gemm(a, b, out[2].base, ref[2].base, 2e-5)
    # each load multicasts into one peer; a stage's release goes to the CTA itself and two peers
    assert sim.peer_copies > 0 and sim.peer_arrivals > 0


def test_a_2x2_grid_releasing_to_its_row_only_is_a_race():
    """Without the column's releases (count 2 where the grid needs 3), a CTA refills a stage its
    column peer's wgmma may still read: the race detector says so."""
    _, text, smem, args, _, _ = _gemm_case("ws", 128, 128, 160, 4, 2, ctas=4)
    inits = re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], (\d+);", text)
    assert "12" in inits   # 3 CTAs x 4 warps a stage
    bad = re.sub(r"(mbarrier\.init\.shared::cta\.b64 \[%r\d+\]), 12;", r"\1, 8;", text)
    with pytest.raises(RuntimeError, match=r"shared-memory race: warp \d of CTA \d overwrites by a TMA load shared byte "
                                           r"\d+ of CTA \d, which a wgmma .* read with nothing ordering"):
        simulate(bad, (4,), args(), smem, "random", seed=0)


def _empty_counts_one_cta(text):
    """The empty barriers initialised for one CTA's releases (a kernel that wrote count=1 where
    the cluster needs count=num_ctas): 4 warps' arrivals, not 8."""
    bad, n = re.subn(r"(mbarrier\.init\.shared::cta\.b64 \[%r\d+\]), 8;", r"\1, 4;", text)
    assert n == 3
    return bad


def test_an_empty_barrier_counting_one_cta_deadlocks_the_plain_gemm():
    """Both CTAs' releases still arrive, 8 a stage on a count of 4: each release completes two
    phases, the producer's parity never comes round, and every CTA waits on its empty barrier."""
    _, text, smem, args, _, _ = _gemm_case("plain", 192, 128, 160, 2, False)
    bad = _empty_counts_one_cta(text)
    for order in ("pc", "random"):
        with pytest.raises(RuntimeError) as e:
            simulate(bad, (2,), args(), smem, order, seed=0)
        msg = str(e.value)
        assert "deadlock" in msg
        for cta in (0, 1):
            assert re.search(rf"CTA {cta} warps 0-3 waits on the mbarrier at shared \d+ \(mbarrier\.try_wait[^;]*; "
                             r"phase 0, 4 of 4 arrivals", msg), msg


@pytest.mark.parametrize("share_a", [False, True])
@pytest.mark.parametrize("order, seed", [("cta", None), ("cta_reversed", None), ("random", 0), ("random", 1)])
def test_an_empty_barrier_counting_one_cta_refills_a_stage_the_peer_still_reads(share_a, order, seed):
    """Warp-specialized: the producer waits for the empty phase only, which the first releases
    complete (from either CTA); its multicast then refills a stage unordered after a wgmma's
    reads (the detector, in every schedule). Without the detector the schedule decides how it
    shows: a refill under a wgmma still reading it, or (the surplus releases completing phases
    nobody waits for) a deadlock -- never a silent finish."""
    _, text, smem, args, _, _ = _gemm_case("ws", *((192, 128, 160, 2) if not share_a else (128, 192, 160, 2)),
                                           share_a)
    bad = _empty_counts_one_cta(text)
    with pytest.raises(RuntimeError, match=rf"{ANY_WGMMA_RACE}|{IN_FLIGHT}"):
        simulate(bad, (2,), args(), smem, order, seed=seed)
    with pytest.raises(RuntimeError, match=rf"{IN_FLIGHT}|deadlock: every live thread waits"):
        simulate(bad, (2,), args(), smem, order, races=False, seed=seed)
    simulate(text, (2,), args(), smem, order, seed=seed)


def test_gemm_without_the_cluster_barrier_after_init_is_a_race():
    """matmul_hopper_cluster with the barrier.cluster after its mbarrier inits dropped: each CTA's
    multicast onto its peer's full barrier is unordered after the peer's init."""
    _, text, smem, args, _, _ = _gemm_case("plain", 192, 128, 160, 2, False)
    pair = "\tbarrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;\n"
    assert text.count(pair) == 2
    bad = text.replace(pair, "", 1)
    with pytest.raises(RuntimeError, match=r"cluster race: warp \d of CTA [01] multicasts onto the mbarrier at shared "
                                           r"\d+ of CTA [01], whose mbarrier\.init by warp 0 of CTA [01] nothing orders"):
        simulate(bad, (2,), args(), smem, "pc")
    with pytest.raises(RuntimeError, match=r"CTA 0 (multicasts onto|arrives on) the mbarrier at shared \d+ of CTA 1 "
                                           "before CTA 1 initialised it"):
        simulate(bad, (2,), args(), smem, "cta", races=False)


def test_lockstep_simulator_refuses_cluster_instructions():
    """ptxsim_hopper's lockstep machine has no barrier.cluster: a cluster kernel needs ptxsim_ws."""
    _, text, smem, args, _ = _ring_case()
    with pytest.raises(NotImplementedError):
        ptxsim_hopper.run(text, (4,), args(), smem)


@pytest.mark.parametrize("order", ["pc", "cta", "random"])
@pytest.mark.parametrize("kernel", list(GEMMS))
def test_a_release_counted_twice_in_its_own_cta_is_a_race_on_the_peers_stage(kernel, order):
    """The releases' mapa dropped (each consumer warp arrives twice on its own CTA's empty
    barrier, none on the peer's): the counts add up, nothing deadlocks, but a producer refills
    the peer's stage with nothing ordering it after the peer's wgmma reads -- in every order,
    the lowest-pc one included, where no wgmma is still in flight to catch it (in the others the
    refill may come first under a wgmma in flight)."""
    _, text, smem, args, _, _ = _gemm_case(kernel, 192, 128, 160, 2, False)
    bad, n = re.subn(r"mapa\.shared::cluster\.u32 (%r\d+), (%r\d+), %r\d+;", r"mov.u32 \1, \2;", text)
    assert n == 4   # two releases (in the K loop, after it), each to both CTAs
    with pytest.raises(RuntimeError, match=WGMMA_RACE if order == "pc" else rf"{WGMMA_RACE}|{IN_FLIGHT}"):
        simulate(bad, (2,), args(), smem, order, seed=0)
    if order == "pc":   # no wgmma in flight when the refill comes: unseen without the detector
        sim = simulate(bad, (2,), args(), smem, order, races=False, seed=0)
        assert sim.peer_arrivals == 0


# -- B given K-major ([N, K]): the fp8 GEMM's layout ---------------------------------------------

ml_dtypes = pytest.importorskip("ml_dtypes")
E4M3 = ml_dtypes.float8_e4m3fn


@pytest.mark.parametrize("order", ["cta", "random"])
@pytest.mark.parametrize("m, n, k, programs, ctas, share_a", [
    (192, 130, 160, 2, 1, False),   # clusters of one: 3 x 3 tiles of 64x64 on 2 CTAs, 3 K steps (one ragged)
    (130, 192, 96, 2, 2, False),    # pairs sharing B: each CTA loads half of B's [64, 64] block's rows (N)
    (128, 190, 96, 4, 2, True),     # pairs sharing A, B ragged in N
])
def test_cluster_ws_with_k_major_fp8_b(m, n, k, programs, ctas, share_a, order):
    """matmul_hopper_cluster_ws with B_KMAJOR: B as [N, K] e4m3 (K contiguous: fp8 wgmma's B),
    its blocks [BN / (CTAs sharing it), BK] split along N among a cluster, read through a
    permuted view; on the race-checking simulator and the interpreter against numpy."""
    rng = np.random.default_rng()
    a = padded(rng.standard_normal((m, k)).astype(np.float32).astype(E4M3))
    bt = padded(rng.standard_normal((n, k)).astype(np.float32).astype(E4M3))
    bm, bn, bk = 64, 64, 64
    cn = ctas if share_a else 1
    am, bn_ = bm // cn, bn // (ctas // cn)

    def args():
        c = padded(np.full((m, n), np.nan, np.float32))
        return [TensorDescriptor.from_tensor(_fresh(a), [am, bk], NV([am, bk], gl.float8e4nv)),
                TensorDescriptor.from_tensor(_fresh(bt), [bn_, bk], NV([bn_, bk], gl.float8e4nv)),
                TensorDescriptor.from_tensor(c, [bm, bn], NV([bm, bn], gl.float32)), m, n, k]
    g, text, smem = trace(matmul_hopper_cluster_ws, args(), (programs,), STAGES=3, GROUP_M=2, SHARE_A=share_a,
                          B_KMAJOR=True, num_warps=4, num_ctas=ctas)
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n64k32\.f32\.e4m3\.e4m3", text)
    ref = interpret(g, (programs,), args())
    out = args()
    simulate(text, (programs,), out, smem, order)
    exact = a.astype(np.float64) @ bt.astype(np.float64).T
    tol = 1e-5 * np.abs(exact).max()
    np.testing.assert_allclose(ref[2].base[:, :n], exact, rtol=1e-5, atol=tol)
    np.testing.assert_allclose(out[2].base[:, :n], exact, rtol=1e-5, atol=tol)

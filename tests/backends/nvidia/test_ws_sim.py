"""Warp-specialized kernels' PTX run on the CPU (ptxsim_ws: ptxsim_hopper with threads that park
on mbarrier waits and named barriers), against the interpreter and numpy on fresh random inputs
with NaN-poisoned outputs: warp_specialize's handoff kernels, the ws and ping-pong GEMMs, the
cluster GEMM's ws form on clusters of one, and the stream-K GEMM (the fix-up's order checked by
running the CTAs one after another in both directions). A kernel that waits on a barrier nobody
arrives on is reported as a deadlock naming the barrier.
"""
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

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402
from gluon_trace.language.nvidia.hopper import mbarrier  # noqa: E402
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from test_warpspec import _rounds_expected, halves_plus_one, handoff, rounds  # noqa: E402
from test_cluster import cluster_descs  # noqa: E402
from test_kernels import BF16, check, operands, padded  # noqa: E402

NV = gl.NVMMASharedLayout.get_default_for


def trace(kernel, args, grid, target="sm_90a", **kw):
    """(graph, PTX, shared bytes) of ``kernel`` traced on ``args``."""
    g = kernel.trace(*args, target=target, **kw).graph
    text, _, smem = emit(g, target)
    return g, text, smem


def simulate(text, grid, args, smem, order="pc", races=True):
    """ptxsim_races.run (or without the race detector, ptxsim_ws.run); in a random order on a
    fresh seed, named if the run fails."""
    seed = int(np.random.default_rng().integers(2 ** 32)) if order in ("random", "warps") else None
    try:
        return (ptxsim_races if races else ptxsim_ws).run(text, grid, args, smem, order=order, seed=seed)
    except Exception as e:
        if seed is None:
            raise
        raise AssertionError(f"ptxsim_ws order={order!r}, seed={seed}: {e}") from e


def interpret(g, grid, args):
    get("interpreter").run(g, tuple(grid) + (1,) * (3 - len(grid)), args)
    return args


# -- warp_specialize's own kernels ------------------------------------------------------------------

ORDERS = ["pc", "random"]
ALL_ORDERS = ORDERS + ["warps"]   # warps drifting apart: slower, for the small kernels


@pytest.mark.parametrize("order", ALL_ORDERS)
@pytest.mark.parametrize("target", ["sm_90", "sm_90a"])
@pytest.mark.parametrize("worker_warps, num_warps", [(1, 4), (2, 4), (4, 8)])
def test_handoff(target, worker_warps, num_warps, order):
    """The worker fills shared memory and arrives on an mbarrier the default partition waits on;
    a scalar crosses in shared memory; each partition reduces with its own named barrier."""
    rng = np.random.default_rng()
    x = rng.standard_normal(256).astype(np.float32)
    n = int(rng.integers(2, 50))
    g, text, smem = trace(handoff, (x, np.zeros(258, np.float32), n), (3,), target, N=256,
                          WORKER_WARPS=worker_warps, num_warps=num_warps)
    ref = interpret(g, (3,), [x.copy(), np.full(258, np.nan, np.float32), n])[1]
    out = np.full(258, np.nan, np.float32)
    # every CTA stores the same outputs: a race (benign) the detector reports when CTAs interleave
    sim = simulate(text, (3,), [x.copy(), out, n], smem, order, races=False)
    np.testing.assert_allclose(out[:256], 2 * x + (n - 1), rtol=1e-6)
    sum_tol = 1e-6 * (np.abs(x).sum() + 2 * n)   # f32 sums in another order; the total may cancel to ~0
    np.testing.assert_allclose(out[256], x.sum(dtype=np.float64) + 2 * n, rtol=0, atol=sum_tol)
    assert out[257] == (2 * x).max()
    np.testing.assert_array_equal(out[[*range(256), 257]], ref[[*range(256), 257]])
    np.testing.assert_allclose(out[256], ref[256], rtol=0, atol=sum_tol)
    assert sim.mbarrier_parks > 0 or order != "pc"   # lowest pc first, the default partition waits


def test_handoff_deadlocks_on_the_lockstep_simulator():
    """Why ptxsim_ws exists: lowest-pc-first, the default partition spins on its mbarrier while
    the worker that arrives on it never runs."""
    x = np.random.default_rng().standard_normal(256).astype(np.float32)
    g, text, smem = trace(handoff, (x, np.zeros(258, np.float32), 3), (1,), "sm_90", N=256, WORKER_WARPS=2,
                          num_warps=4)
    with pytest.raises(RuntimeError, match="deadlock"):
        ptxsim_hopper.run(text, (1,), [x, np.full(258, np.nan, np.float32), 3], smem)


def test_partitions_with_128_bit_accesses():
    x = np.random.default_rng().standard_normal(1024).astype(np.float32)
    out = np.full(1024, np.nan, np.float32)
    _, text, smem = trace(halves_plus_one, (x, out), (1,), "sm_90", N=512, num_warps=4)
    ptxsim_ws.run(text, (1,), [x, out], smem)
    assert np.array_equal(out, x + 1)


@pytest.mark.parametrize("order", ALL_ORDERS)
@pytest.mark.parametrize("target", ["sm_90", "sm_90a"])
@pytest.mark.parametrize("worker_warps, num_warps, t", [(1, 4, 3), (2, 4, 1), (4, 8, 4)])
def test_warp_specialize_in_a_loop_and_twice(target, worker_warps, num_warps, t, order):
    """The general form: workers wait in a loop for the default partition's word (which op, or
    leave) at non-aligned CTA barriers."""
    x = np.random.default_rng().standard_normal(128).astype(np.float32)
    out = np.full(t * 128 + 1, np.nan, np.float32)
    _, text, smem = trace(rounds, (x, out, t), (2,), target, N=128, WORKER_WARPS=worker_warps,
                          num_warps=num_warps)
    simulate(text, (2,), [x, out, t], smem, order, races=False)   # both CTAs store the same outputs
    np.testing.assert_allclose(out, _rounds_expected(x, t), rtol=1e-5, atol=1e-4)   # the last: a sum of 128


# -- deadlocks -------------------------------------------------------------------------------------

def _wait_forever(buf, never, out_ptr, N):
    lay = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    mbarrier.wait(never, 0)
    gl.store(out_ptr + gl.arange(0, N, layout=lay), buf.load(lay))


def _fill(buf, bar, x_ptr, N):
    lay = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    buf.store(gl.load(x_ptr + gl.arange(0, N, layout=lay)))
    mbarrier.arrive(bar)


@gt.jit
def waits_on_the_wrong_barrier(x_ptr, out_ptr, N: gl.constexpr):
    """The worker arrives on ``bar``; the default partition waits on ``never`` (a bug)."""
    buf = gl.allocate_shared_memory(gl.float32, [N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    bar = mbarrier.allocate_mbarrier()
    never = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    mbarrier.init(never, count=1)
    gl.warp_specialize([(_wait_forever, (buf, never, out_ptr, N)), (_fill, (buf, bar, x_ptr, N))], [1], [48])


def test_a_wait_nobody_completes_is_a_deadlock_naming_the_barrier():
    x = np.random.default_rng().standard_normal(128).astype(np.float32)
    _, text, smem = trace(waits_on_the_wrong_barrier, (x, np.zeros(128, np.float32)), (2,), N=128, num_warps=4)
    # the two mbarriers' shared addresses, in allocation order (each init'ed at gt_smem + offset)
    inits = re.findall(r"mbarrier\.init\.shared::cta\.b64 \[(%r\d+)\]", text)
    offsets = [int(re.search(rf"add\.u32 {re.escape(r)}, %r\d+, (\d+);", text).group(1)) for r in inits]
    bar, never = offsets
    with pytest.raises(RuntimeError) as e:
        ptxsim_ws.run(text, (2,), [x, np.full(128, np.nan, np.float32)], smem)
    msg = str(e.value)
    assert msg.startswith("deadlock")
    for cta in (0, 1):   # the consumer on `never`, the worker (done) and the padding warps at the join
        assert re.search(rf"CTA {cta} warps 0-3 waits on the mbarrier at shared {never} \(mbarrier\.try_wait\.parity"
                         r"\S* %p\d+, \[%r\d+\], %r\d+; phase 0, 1 of 1 arrivals and 0 transaction bytes outstanding\)",
                         msg)
        assert f"CTA {cta} warps 4-7 waits on named barrier 0 (128 of 256 (the CTA) threads arrived)" in msg
    assert f"shared {bar} " not in msg


def test_named_barrier_counts_are_checked():
    """A bar.sync reached by more threads than its count raises; one whose count is more than
    the threads that reach it never completes (a deadlock naming it)."""
    x = np.random.default_rng().standard_normal(256).astype(np.float32)
    _, text, smem = trace(handoff, (x, np.zeros(258, np.float32), 3), (1,), N=256, WORKER_WARPS=2, num_warps=4)
    assert "bar.sync 1, 128;" in text
    for count, why in [(96, "128 threads arrive at barrier 1, whose count is 96"),
                       (256, r"CTA 0 warps 0-3 waits on named barrier 1 \(128 of 256 threads arrived\)")]:
        with pytest.raises(RuntimeError, match=why):
            ptxsim_ws.run(text.replace("bar.sync 1, 128;", f"bar.sync 1, {count};", 1), (1,),
                          [x, np.full(258, np.nan, np.float32), 3], smem)


# -- GEMMs ------------------------------------------------------------------------------------------

def _bf16_descs(a, b, c, bm, bn, bk, epi_n=None):
    return (TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], gl.bfloat16)),
            TensorDescriptor.from_tensor(b, [bk, bn], NV([bk, bn], gl.bfloat16)),
            TensorDescriptor.from_tensor(c, [bm, epi_n or bn], NV([bm, epi_n or bn], gl.bfloat16)))


def _fresh(x):
    """A copy of a padded() array, padded alike."""
    return x.base.copy()[:, :x.shape[1]]


def _gemm(kernel, m, n, k, programs, descs, c_dtype, order="pc", **kw):
    """The kernel's PTX on the simulator and its graph on the interpreter, each on fresh NaN-
    poisoned C; returns (A, B, simulated C, interpreted C, the simulator)."""
    rng = np.random.default_rng()
    a, b = (padded(x) for x in operands(rng, m, n, k, BF16))

    def args():
        c = padded(np.full((m, n), np.nan, np.float32).astype(c_dtype))
        return [*descs(_fresh(a), _fresh(b), c), m, n, k]
    g, text, smem = trace(kernel, args(), (programs,), **kw)
    ref = interpret(g, (programs,), args())
    sim_args = args()
    sim = simulate(text, (programs,), sim_args, smem, order)
    return a, b, sim_args[2].base, ref[2].base, sim


def _check_gemm(a, b, c_sim, c_ref, rtol):
    n = b.shape[1]
    check(c_sim[:, :n].astype(np.float32), a, b, rtol)
    np.testing.assert_allclose(c_sim[:, :n].astype(np.float32), c_ref[:, :n].astype(np.float32), rtol=rtol,
                               atol=rtol * np.abs(c_ref[:, :n].astype(np.float32)).max())


WS_GEMMS = [  # (kernel, M, N, K, BM, BN, BK, warps, stages, programs)
    (kernel, *shape) for kernel in ("matmul_hopper_ws", "matmul_hopper_pingpong") for shape in [
        (192, 128, 160, 64, 64, 32, 4, 3, 2),    # 6 tiles on 2 CTAs, 5 K steps: the ring wraps within a tile
        (130, 70, 100, 64, 64, 32, 4, 2, 3),     # ragged edges, a K that is not a step multiple, 2 stages
        (320, 64, 64, 64, 64, 32, 4, 3, 2)]      # odd tile counts per CTA (ping-pong: consumers take 2 and 1)
] + [("matmul_hopper_ws", 128, 128, 64, 128, 64, 32, 8, 3, 1),   # two consumer warpgroups
       ("matmul_hopper_ws", 128, 256, 96, 64, 128, 32, 8, 3, 2)]   # two, side by side along N (BM=64)


@pytest.mark.parametrize("kernel, m, n, k, bm, bn, bk, warps, stages, programs, order", [
    (*case, order) for case in WS_GEMMS for order in ORDERS] + [(*WS_GEMMS[0], "warps"), (*WS_GEMMS[3], "warps")])
def test_warp_specialized_gemm(kernel, m, n, k, bm, bn, bk, warps, stages, programs, order):
    """A one-warp TMA producer and consumer warpgroup(s) (ping-pong: two, taking tiles in turn)
    hand the ring's stages over on full/empty mbarriers; C is stored by TMA."""
    from gluon_trace.kernels import matmul_hopper_ws
    a, b, c_sim, c_ref, sim = _gemm(getattr(matmul_hopper_ws, kernel), m, n, k, programs,
                                    lambda a, b, c: _bf16_descs(a, b, c, bm, bn, bk), BF16, order,
                                    STAGES=stages, GROUP_M=2, num_warps=warps)
    _check_gemm(a, b, c_sim, c_ref, 1e-2)
    assert sim.mbarrier_parks > 0 or order != "pc"   # lowest pc first, the consumers wait for data


@pytest.mark.parametrize("kernel", ["matmul_hopper_ws", "matmul_hopper_cluster_ws"])
def test_two_warpgroups_split_a_64_row_tile_along_n(kernel):
    """8 consumer warps on a 64-row tile: each warpgroup takes half the columns (m64n64 per
    instruction). Both warpgroups stacked along M, as before, ran the same m64n128 wgmmas twice
    (the answer right, the skinny GEMM 0.80x cuBLAS on the H200)."""
    from gluon_trace.kernels import matmul_hopper_cluster, matmul_hopper_ws
    kern = getattr(matmul_hopper_ws, kernel, None) or getattr(matmul_hopper_cluster, kernel)
    a = padded(np.zeros((128, 256), BF16))
    b = padded(np.zeros((256, 256), BF16))
    c = padded(np.zeros((128, 256), BF16))
    args = [*_bf16_descs(a, b, c, 64, 128, 64), 128, 256, 256]
    _, text, _ = trace(kern, args, (2,), STAGES=4, GROUP_M=8, num_warps=8)
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", text))
    assert shapes == {"m64n64k16"}, shapes


def _without(text, pattern, nth, wait):
    """The PTX with the nth match of ``pattern`` dropped; a wait becomes ``mov.pred p, 1`` (it
    always succeeds, its spin loop stays)."""
    lines = text.split("\n")
    at = [i for i, line in enumerate(lines) if re.search(pattern, line)][nth]
    lines[at] = "\tmov.pred " + re.search(r"%p\d+", lines[at]).group(0) + ", 1;" if wait else ""
    return "\n".join(lines)


@pytest.mark.parametrize("bug, why", [
    ("the producer's wait for an empty stage", "a TMA load into shared \\d+\\.\\. overwrites bytes an in-flight wgmma"),
    ("the consumer's wait for a full stage", "wgmma reads shared bytes before the copies into them landed"),
    ("the consumer's release of a stage", r"deadlock(.|\n)*CTA 0 warp 4 waits on the mbarrier at shared (\d+)"),
])
def test_ws_gemm_handoff_bugs_are_caught(bug, why):
    """matmul_hopper_ws's PTX with one of its handoffs dropped, run with the producer free to run
    ahead (the random order): each is caught, where the lowest-pc order hides the first (the
    consumers, at lower program counters, always go first)."""
    from gluon_trace.kernels.matmul_hopper_ws import matmul_hopper_ws
    m, n, k = 192, 128, 160
    a, b = (padded(x) for x in operands(np.random.default_rng(), m, n, k, BF16))

    def args():
        c = padded(np.full((m, n), np.nan, np.float32).astype(BF16))
        return [*_bf16_descs(_fresh(a), _fresh(b), c, 64, 64, 32), m, n, k]
    _, text, smem = trace(matmul_hopper_ws, args(), (2,), STAGES=3, GROUP_M=2, num_warps=4)
    wait, arrive = r"mbarrier\.try_wait", r"mbarrier\.arrive\.shared"
    bad = {"the producer's wait for an empty stage": _without(text, wait, 1, True),
           "the consumer's wait for a full stage": _without(text, wait, 0, True),
           "the consumer's release of a stage": _without(text, arrive, 0, False)}[bug]
    for seed in range(2):
        with pytest.raises(RuntimeError, match=why):
            ptxsim_ws.run(bad, (2,), args(), smem, order="random", seed=seed)
    if bug == "the producer's wait for an empty stage":
        ptxsim_ws.run(bad, (2,), args(), smem)   # lowest pc first: passes unnoticed
    ptxsim_ws.run(text, (2,), args(), smem, order="random", seed=0)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("m, n, k, programs, epi_n, spread", [
    (192, 128, 224, 2, 32, True), (130, 200, 70, 3, 64, True), (192, 128, 224, 2, 32, False),
    (256, 128, 32, 2, 32, True),   # one K step, 4 column blocks: 3 are stored after the loop
    (256, 128, 64, 2, 32, True),   # two steps: blocks 0 and 1 in the loop, 2 and 3 after it
])
def test_cluster_ws_gemm_on_clusters_of_one(m, n, k, programs, epi_n, spread, order):
    """matmul_hopper_cluster_ws with num_ctas=1: a 4-stage ring, the C tile stored in column
    blocks (EPI_N < BN) through two alternating buffers, one block a K step of the next tile
    (SPREAD) or all after its first step, cluster.barrier() on a cluster of one (the CTA's barrier)."""
    from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster_ws
    a, b, c_sim, c_ref, sim = _gemm(matmul_hopper_cluster_ws, m, n, k, programs,
                                    lambda a, b, c: cluster_descs(a, b, c, 64, 128, 32, 1, epi_n), np.float32,
                                    order, STAGES=4, GROUP_M=2, num_warps=4, SPREAD=spread)
    _check_gemm(a, b, c_sim, c_ref, 2e-5)
    assert sim.mbarrier_parks > 0 or order != "pc"   # lowest pc first, the consumers wait for data


# -- stream-K ---------------------------------------------------------------------------------------

STREAMK = [  # (M, N, K, programs, partial tiles published, EPI_N, launches, constexprs): test_streamk's cases
    (192, 128, 160, 4, 4, None, 1, {}),   # 6 tiles on 4 CTAs: 4 whole, 2 of 5 steps cut over 4 CTAs
    (128, 128, 320, 3, 3, None, 1, {}),   # 4 tiles on 3: 3 whole, 1 of 10 steps cut in ranges of 3, 3, 4
    (64, 128, 96, 5, 5, None, 1, {}),     # 2 tiles on 5 CTAs, all stream-K: 6 steps in ranges of 1 or 2
    (320, 64, 160, 3, 4, None, 1, {}),    # ranges [0,3) [3,6) [6,10): CTA 1 ends tile 0 and starts tile 1
    (130, 70, 100, 4, 4, None, 1, {}),    # edge tiles along M and N, a K that is not a step multiple
    (128, 128, 64, 4, 0, None, 1, {}),    # tiles = CTAs: no stream-K at all
    (64, 64, 256, 6, 2, None, 1, {"SPLIT": 2}),   # one tile of 8 steps on 6 CTAs, cut in 2 parts
    (64, 64, 256, 6, 6, None, 1, {"SPLIT": 8}),   # cut in 6 parts, one a CTA: the last sums six
    (192, 128, 32, 4, 2, None, 1, {}),    # a K of one step: 2 tail tiles whole, through the workspace
    (192, 128, 224, 4, 4, 32, 2, {}),     # C in column blocks, two launches on one workspace
]


@pytest.mark.parametrize("m, n, k, programs, parts, epi_n, launches, constexprs", STREAMK)
def test_streamk_gemm(m, n, k, programs, parts, epi_n, launches, constexprs):
    """matmul_hopper_streamk's PTX: whole tiles as the ws cluster GEMM, the tail's K steps cut
    over the CTAs, parts published in the workspace and counted with atom.global.acq_rel.gpu.add,
    the last to count summing them in CTA order. The CTAs run one after another, lowest first and
    then highest first (and interleaved at random), so a different CTA
    finishes each cut tile: C must not change, bit for bit, and must match numpy and the
    interpreter; every counter is back at zero after each launch."""
    from gluon_trace.kernels.matmul_hopper_streamk import matmul_hopper_streamk, streamk_workspace
    rng = np.random.default_rng()
    a, b = (padded(x) for x in operands(rng, m, n, k, BF16))
    bm = bn = 64
    size, count = streamk_workspace(programs, bm, bn)
    kw = dict(STAGES=3, GROUP_M=2, num_warps=4, **constexprs)

    def args(partials, counters):
        c = padded(np.full((m, n), np.nan, np.float32))
        return [*cluster_descs(_fresh(a), _fresh(b), c, bm, bn, 32, 1, epi_n), partials, counters, m, n, k]

    def workspace():
        return np.full(size, np.nan, np.float32), np.zeros(count, np.int32)
    g, text, smem = trace(matmul_hopper_streamk, args(*workspace()), (programs,), **kw)
    assert "atom.global.acq_rel.gpu.add.u32" in text
    c_ref = interpret(g, (programs,), args(*workspace()))[2].base[:, :n]
    check(c_ref, a, b)
    outs, last = {}, {}
    for order in ("cta", "cta_reversed", "random"):
        partials, counters = workspace()
        for launch in range(launches):
            sim_args = args(partials, counters)
            sim = simulate(text, (programs,), sim_args, smem, order)
            c = sim_args[2].base[:, :n]
            check(c, a, b)
            np.testing.assert_allclose(c, c_ref, rtol=2e-5, atol=2e-5 * np.abs(c_ref).max())
            assert not counters.any(), "the last part of each tile sets its counter back to zero"
            if launch:
                assert np.array_equal(c.view(np.uint32), outs[order].view(np.uint32))
            outs[order] = c.copy()
        written = ~np.isnan(partials.reshape(2 * programs, bm * bn)).all(axis=1)
        assert written.sum() == parts
        # each counter counted 0, 1, ... in turn; the CTA that found the highest finished the tile
        by_tile = {}
        for cta, addr, old in sim.atomics:
            by_tile.setdefault(addr, []).append((old, cta))
        assert all(sorted(o for o, _ in v) == list(range(len(v))) for v in by_tile.values())
        assert sum(len(v) for v in by_tile.values()) == parts
        last[order] = {addr: max(v) for addr, v in by_tile.items()}
    for order in ("cta_reversed", "random"):
        assert np.array_equal(outs["cta"].view(np.uint32), outs[order].view(np.uint32)), order
    for addr, (top, cta) in last["cta"].items():   # lowest CTA first: the highest finishes, and back
        ctas = sorted(c for _, c in by_tile[addr])
        assert cta == ctas[-1] and last["cta_reversed"][addr][1] == ctas[0]
        assert top == 0 or ctas[0] != ctas[-1]


# -- attention --------------------------------------------------------------------------------------

@pytest.mark.parametrize("d, bn, consumers, ctas, causal, seq", [
    (64, 64, 2, None, False, 100),    # a (query block, head) tile per CTA, a ragged last KV tile
    (64, 64, 2, None, True, 130),     # causal: masked tiles skipped, the diagonal masked
    (64, 128, 3, 2, True, 200),       # three consumers, a persistent grid of 2 CTAs walking the tiles
    (128, 128, 2, None, False, 128),  # d 128: the 128B-swizzled operands, K = 8 wgmma steps
])
@pytest.mark.parametrize("order", ORDERS)
def test_attention_warp_specialized(d, bn, consumers, ctas, causal, seq, order):
    """attention_fwd_ws: a producer warp streams K and V through rings whose empty barriers
    count every consumer's release; the consumer warpgroups take query blocks in turn."""
    from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws
    from test_kernels import attention_reference
    rng = np.random.default_rng()
    bh, bm = 2, 64
    q, k, v = (rng.standard_normal((bh, seq, d)).astype(np.float32).astype(BF16) for _ in range(3))
    lq, lk = NV([bm, d], gl.bfloat16), NV([bn, d], gl.bfloat16)
    scale = 1.0 / np.sqrt(d)
    grid = (-(-seq // (consumers * bm)), bh) if ctas is None else (ctas,)

    def args():
        o = np.full((bh, seq, d), np.nan, BF16)
        return [TensorDescriptor.from_tensor(q.copy(), [1, bm, d], lq),
                TensorDescriptor.from_tensor(k.copy(), [1, bn, d], lk),
                TensorDescriptor.from_tensor(v.copy(), [1, bn, d], lk),
                TensorDescriptor.from_tensor(o, [1, bm, d], lq), seq, scale]
    g, text, smem = trace(attention_fwd_ws, args(), grid, CAUSAL=causal, CONSUMERS=consumers, num_warps=4)
    ref = interpret(g, grid, args())[3].base.astype(np.float32)
    sim_args = args()
    sim = simulate(text, grid, sim_args, smem, order)
    out = sim_args[3].base.astype(np.float32)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, attention_reference(q, k, v, scale, causal), atol=2e-2, rtol=2e-2)
    np.testing.assert_allclose(out, ref, atol=2e-2, rtol=2e-2)
    assert sim.mbarrier_parks > 0 or order != "pc"   # lowest pc first, the consumers wait for data



@pytest.mark.parametrize("d, pieces, causal, seq", [
    (128, 5, False, 160),   # 80-row KV tiles, 5-D boxes (one a K tile, one a V tile), two head-dim chunks
    (64, 3, True, 100),     # 48-row tiles, a box a piece (100 is no multiple of 16), causal
])
def test_attention_in_kv_pieces(d, pieces, causal, seq):
    """attention_fwd_ws with KV_PIECES: S one m64n(16P) wgmma a K step over K's chunk-major slots,
    P V one group over P's register pieces, K and V landing by 5-D boxes or a box a piece;
    the PTX against numpy and the interpreter."""
    from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws, piece_descriptors
    from test_kernels import attention_reference
    rng = np.random.default_rng()
    bh, bm = 2, 64
    q, k, v = (rng.standard_normal((bh, seq, d)).astype(np.float32).astype(BF16) for _ in range(3))
    lq = NV([bm, d], gl.bfloat16)
    scale = 1.0 / np.sqrt(d)
    grid = (-(-seq // (2 * bm)), bh)

    def args():
        o = np.full((bh, seq, d), np.nan, BF16)
        return [TensorDescriptor.from_tensor(q.copy(), [1, bm, d], lq), *piece_descriptors(k.copy(), v.copy(), pieces),
                TensorDescriptor.from_tensor(o, [1, bm, d], lq), seq, scale]
    g, text, smem = trace(attention_fwd_ws, args(), grid, CAUSAL=causal, KV_PIECES=pieces, num_warps=4)
    assert ("cp.async.bulk.tensor.5d" in text) == (seq % 16 == 0)
    ref = interpret(g, grid, args())[3].base.astype(np.float32)
    sim_args = args()
    simulate(text, grid, sim_args, smem, "random")
    out = sim_args[3].base.astype(np.float32)
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, attention_reference(q, k, v, scale, causal), atol=2e-2, rtol=2e-2)
    np.testing.assert_allclose(out, ref, atol=2e-2, rtol=2e-2)


def test_attention_split_tail():
    """attention_fwd_ws_split's PTX: 6 tiles (3 heads of 256 rows) on 4 CTAs, the 2 tail tiles'
    4 KV tiles cut in 2 parts each, each consumer publishing (O, m, l) and counting itself in with
    atom.global.acq_rel.gpu.add; the last to count combines in part order. The CTAs run lowest
    first, highest first and interleaved at random, so a different CTA combines each tile: O must
    not change, bit for bit, and must match numpy and the interpreter; the counters are back at
    zero."""
    from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws_split, attention_split_workspace
    from test_kernels import attention_reference
    rng = np.random.default_rng()
    bh, seq, d, bm, bn, programs = 3, 256, 64, 64, 64, 4
    q, k, v = (rng.standard_normal((bh, seq, d)).astype(np.float32).astype(BF16) for _ in range(3))
    lq, lk = NV([bm, d], gl.bfloat16), NV([bn, d], gl.bfloat16)
    size, count = attention_split_workspace(programs, bm, d)
    scale = 1.0 / np.sqrt(d)

    def args(parts, counters):
        o = np.full((bh, seq, d), np.nan, BF16)
        return [TensorDescriptor.from_tensor(q.copy(), [1, bm, d], lq),
                TensorDescriptor.from_tensor(k.copy(), [1, bn, d], lk),
                TensorDescriptor.from_tensor(v.copy(), [1, bn, d], lk),
                TensorDescriptor.from_tensor(o, [1, bm, d], lq), parts, counters, seq, scale]

    def workspace():
        return np.full(size, np.nan, np.float32), np.zeros(count, np.int32)
    g, text, smem = trace(attention_fwd_ws_split, args(*workspace()), (programs,), CAUSAL=False, num_warps=4)
    assert "atom.global.acq_rel.gpu.add.u32" in text
    ref = interpret(g, (programs,), args(*workspace()))[3].base.astype(np.float32)
    np.testing.assert_allclose(ref, attention_reference(q, k, v, scale, False), atol=2e-2, rtol=2e-2)
    outs, last = {}, {}
    for order in ("cta", "cta_reversed", "random"):
        parts, counters = workspace()
        sim_args = args(parts, counters)
        sim = simulate(text, (programs,), sim_args, smem, order)
        out = sim_args[3].base.astype(np.float32)
        assert not np.isnan(out).any()
        np.testing.assert_allclose(out, ref, atol=2e-2, rtol=2e-2)
        assert not counters.any(), "the last part of each tail tile sets its counter back to zero"
        assert (~np.isnan(parts.reshape(programs * 2, -1)).all(axis=1)).sum() == 4 * 2
        outs[order] = sim_args[3].base.copy()
        by_counter = {}
        for cta, addr, old in sim.atomics:
            by_counter.setdefault(addr, []).append((old, cta))
        assert len(by_counter) == 2 * 2 and all(sorted(o for o, _ in v) == [0, 1] for v in by_counter.values())
        last[order] = {addr: max(v)[1] for addr, v in by_counter.items()}
    for order in ("cta_reversed", "random"):
        assert np.array_equal(outs["cta"].view(np.uint16), outs[order].view(np.uint16)), order
    assert all(last["cta"][a] != last["cta_reversed"][a] for a in last["cta"])  # another CTA combined

# -- the scheduler on kernels that are not warp-specialized ----------------------------------------

@pytest.mark.parametrize("order", ORDERS)
def test_non_ws_kernels_run_as_in_lockstep(order):
    """The persistent Hopper GEMM (two warpgroups meeting at CTA barriers) gives bit for bit what
    ptxsim_hopper's lockstep machine gives, in either order."""
    from gluon_trace.kernels.matmul_hopper import matmul_hopper
    m, n, k = 192, 128, 96
    a, b = (padded(x) for x in operands(np.random.default_rng(), m, n, k, BF16))

    def args():
        c = padded(np.full((m, n), np.nan, np.float32).astype(BF16))
        return [*_bf16_descs(_fresh(a), _fresh(b), c, 128, 64, 32), m, n, k]
    _, text, smem = trace(matmul_hopper, args(), (2,), STAGES=3, GROUP_M=2, num_warps=8)
    lock, ws = args(), args()
    ptxsim_hopper.run(text, (2,), lock, smem)
    sim = simulate(text, (2,), ws, smem, order)
    check(ws[2].base[:, :n].astype(np.float32), a, b, 1e-2)
    assert np.array_equal(lock[2].base.view(np.uint16), ws[2].base.view(np.uint16))
    assert sim.mbarrier_parks == 0 or order != "pc"


def test_two_tma_loads_in_flight_over_one_buffer_raise():
    """copy2d with its TMA load issued twice before the wait: two asynchronous writes of the same
    bytes, either of which may land last."""
    from test_hopper import copy2d
    src = np.random.default_rng().standard_normal((64, 64)).astype(np.float32)
    lay = NV([32, 32], gl.float32)

    def args():
        return [TensorDescriptor.from_tensor(src.copy(), [32, 32], lay),
                TensorDescriptor.from_tensor(np.full((64, 64), np.nan, np.float32), [32, 32], lay)]
    _, text, smem = trace(copy2d, args(), (2, 2))
    load = re.search(r"\n(\t@%p\d+ cp\.async\.bulk\.tensor\.2d\.shared::cluster[^\n]*\n)", text).group(1)
    ok = args()
    ptxsim_ws.run(text, (2, 2), ok, smem)
    assert np.array_equal(ok[1].base, src)
    with pytest.raises(RuntimeError, match=r"a TMA load into CTA 0's shared byte \d+ while another copy into it "
                                           "is in flight"):
        ptxsim_ws.run(text.replace(load, load + load), (2, 2), args(), smem)


@pytest.mark.parametrize("order", ALL_ORDERS)
def test_bar_arrive_hands_over_like_an_mbarrier(order):
    """handoff with its mbarrier replaced by named barrier 3: the worker's 64 threads
    ``bar.arrive 3, 192`` where they arrived on the mbarrier, the default partition's 128
    ``bar.sync 3, 192`` where it waited. The same output; with a count of 256 nobody completes it."""
    x = np.random.default_rng().standard_normal(256).astype(np.float32)
    _, text, smem = trace(handoff, (x, np.zeros(258, np.float32), 3), (2,), "sm_90", N=256, WORKER_WARPS=2,
                          num_warps=4)
    wait = re.search(r"\$L_MBW_\d+:\n\tmbarrier\.try_wait[^\n]*\n\t@!%p\d+ bra \$L_MBW_\d+;\n", text).group(0)
    arrive = re.search(r"\tmbarrier\.arrive\.shared::cta\.b64 _, \[%r\d+\], 1;\n", text).group(0)
    named = text.replace(wait, "\tbar.sync 3, 192;\n").replace(arrive, "\tbar.arrive 3, 192;\n")
    out = np.full(258, np.nan, np.float32)
    simulate(named, (2,), [x, out, 3], smem, order, races=False)   # both CTAs store the same outputs
    np.testing.assert_allclose(out[:256], 2 * x + 2, rtol=1e-6)
    assert out[257] == (2 * x).max()
    with pytest.raises(RuntimeError, match=r"CTA 0 warps 0-3 waits on named barrier 3 \(192 of 256 threads arrived\)"):
        ptxsim_ws.run(named.replace(", 192;", ", 256;"), (2,), [x, np.full(258, np.nan, np.float32), 3], smem)


def streamk_case():
    """The stream-K GEMM on a 64x128x96 problem over 5 CTAs (64x64 tiles whose K steps are cut
    into parts): (PTX, shared bytes, a maker of fresh poisoned arguments, programs, A, B, N)."""
    from gluon_trace.kernels.matmul_hopper_streamk import matmul_hopper_streamk, streamk_workspace
    m, n, k, programs = 64, 128, 96, 5
    a, b = (padded(x) for x in operands(np.random.default_rng(), m, n, k, BF16))
    size, count = streamk_workspace(programs, 64, 64)

    def args():
        c = padded(np.full((m, n), np.nan, np.float32))
        return [*cluster_descs(_fresh(a), _fresh(b), c, 64, 64, 32, 1), np.full(size, np.nan, np.float32),
                np.zeros(count, np.int32), m, n, k]
    _, text, smem = trace(matmul_hopper_streamk, args(), (programs,), STAGES=3, GROUP_M=2, num_warps=4)
    return text, smem, args, programs, a, b, n


def test_streamk_broadcast_barrier_dropped_is_caught_when_warps_drift():
    """The stream-K fix-up broadcasts the counter thread 0 read through shared memory
    (st.shared; bar.sync 1, 128; ld.shared). Without that bar.sync the other warps may read the
    slot before it is written and disagree about who finishes the tile: the lockstep and
    warpgroup orders cannot show it, warps drifting apart can (a deadlock or a wrong C)."""
    text, smem, args, programs, a, b, n = streamk_case()
    broadcast = re.search(r"(\t@%p\d+ atom\.global\.acq_rel\.gpu\.add\.u32 (%r\d+), [^\n]*\n\tbar\.sync 1, 128;\n"
                          r"\t@%p\d+ st\.shared\.b32 (\[%r\d+\]), \2;\n)\tbar\.sync 1, 128;\n(\tld\.shared\.b32 %r\d+, \3;\n)",
                          text)
    assert broadcast
    bad = text.replace(broadcast.group(0), broadcast.group(1) + broadcast.group(4))
    for order in ("pc", "random"):
        s = args()
        ptxsim_ws.run(bad, (programs,), s, smem, order=order, seed=0)
        check(s[2].base[:, :n], a, b)
    for seed in range(4):   # seed 0 catches it today; the others are a margin should the schedule shift
        s = args()
        try:
            ptxsim_ws.run(bad, (programs,), s, smem, order="warps", seed=seed)
        except RuntimeError as e:
            assert "deadlock" in str(e)
            break
        if np.isnan(s[2].base[:, :n]).any() or s[4].any():
            break
    else:
        pytest.fail("no seed's warp order caught the missing barrier")
    s = args()
    ptxsim_ws.run(text, (programs,), s, smem, order="warps", seed=0)
    check(s[2].base[:, :n], a, b)


@pytest.mark.parametrize("a_evict, b_evict", [("evict_last", "evict_first"), ("evict_normal", "")])
def test_eviction_policies_reach_the_tma_loads(a_evict, b_evict):
    """tma.async_load's eviction_policy: each load carries an L2 cache hint made by createpolicy
    (the simulator checks the operand holds one), and the GEMM's answer is the interpreter's."""
    from gluon_trace.kernels import matmul_hopper_ws
    a, b, c_sim, c_ref, sim = _gemm(matmul_hopper_ws.matmul_hopper_ws, 192, 128, 160, 2,
                                    lambda a, b, c: _bf16_descs(a, b, c, 64, 64, 32), BF16, "random",
                                    STAGES=3, GROUP_M=2, num_warps=4, A_EVICT=a_evict, B_EVICT=b_evict)
    _check_gemm(a, b, c_sim, c_ref, 1e-2)
    tiles, k_steps = 3 * 2, 5
    assert sim.cache_hints == tiles * k_steps * (bool(a_evict) + bool(b_evict))
    _, text, _ = trace(matmul_hopper_ws.matmul_hopper_ws,
                       [*_bf16_descs(a, b, padded(np.zeros((192, 128), BF16)), 64, 64, 32), 192, 128, 160], (2,),
                       STAGES=3, GROUP_M=2, num_warps=4, A_EVICT=a_evict, B_EVICT=b_evict)
    hinted = re.findall(r"cp\.async\.bulk\.tensor\.2d\.\S+\.L2::cache_hint \[[^\]]+\], \[[^\]]+\], \[[^\]]+\], (%rd\d+);",
                        text)
    assert len(hinted) == bool(a_evict) + bool(b_evict)
    for ev in filter(None, (a_evict, b_evict)):
        assert re.search(rf"createpolicy\.fractional\.L2::{ev}\.b64 %rd\d+, 1\.0;", text)
    from gluon_trace.backends.nvidia import ptxas
    if ptxas.find_path():
        ptxas.assemble(text, "sm_90a")

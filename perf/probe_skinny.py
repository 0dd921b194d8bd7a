"""The skinny GEMM (M=128, N=K=8192) with and without clusters, timed in turn with cuBLAS.

    python perf/probe_skinny.py [MxNxK ...]     # default 128x8192x8192
    python perf/probe_skinny.py 128x8192x2048 128x8192x8192 128x8192x32768

Over several K the pairs' loss tells its kind: a gap in microseconds that stays put is a fixed
cost (the cluster launch, the cluster barriers at the start and the end); one that grows with K
is paid every step (the releases crossing SMs, the multicast).

cuBLAS runs this shape as 128 CTAs of 128x64 tiles, 8 stages of BK=64, in 1x2 clusters sharing
A (Nsight Compute on the H200: nvjet_sm90_tst_128x64_64x8_1x2). Ours at the same tile: the
warp-specialized kernel (no cluster), the cluster kernel as clusters of one, and in pairs
sharing A; and split along K through the stream-K kernel. Each is checked against torch first;
medians of rounds (bench_gemm.gpu_time). PROBE_RUNS=a,b keeps the runs whose names hold a or b.
PROMOTIONS=0,128 adds those runs again with A's and B's tensor maps at
those L2 promotions (bytes; the default is 256). LOAD_PROBES=1 adds the warp-specialized kernel's loads alone, and B's alone (PROBES below).
GEMM_FLUSH_L2=1 flushes the L2 before each timed call (as
triton.testing.do_bench does); BOTH_L2=1 times every run both ways, one after the other.
BACK_TO_BACK=1 also times each launched 50 times back
to back (its launch latency hidden; at small K the host's launch work shows instead).

What it found on the H200 (session 13, perf/README.md): the gap to cuBLAS grows with K from 2048
to 8192 (0.6 to 2.5 us) and reverses at 32768 (ours 1.12x: cuBLAS changes kernels); launched
back to back it stays (39.1 against 36.8 us), so it is the kernel, not its launch. The pairs pay
~2.3 us more at every K. Split-K pays ~6 us for its parts' round trip through L2 and its main
loop is no faster. A ring for A apart from B's (tried in matmul_hopper_ws, reverted) showed A's
L2 hits wait ~1.6 us under this load: A needs as many stages as B. The loads alone (LOAD_PROBES)
take 36.9-37.2 us at K=8192, cuBLAS's whole GEMM: B alone 35.1-35.3 us (3.8 TB/s), A's L2 reads
~1.9 us more, the wgmma and the epilogue the last ~2 us. Waiting for each step's wgmma to free
its stage at once (tried as matmul_hopper_ws MMA_IN_FLIGHT=0, reverted) was no faster: 39.1
against 39.0 us; nor was a 9th stage, made room for by storing C through the last stage's A
buffer (C_IN_RING, reverted): 0.936x against 0.947x at K=8192, 0.883x against 0.908x at 2048.
Session 14: 64x128 tiles (two tile rows at M=128, B's tile read by both) run at 0.973-0.979x
against 0.94-0.95x for 128x64; the L2 promotion of the tensor maps (PROMOTIONS) moves nothing;
the producer split in two (APART) helps no pair; a cold L2 (BOTH_L2) changes no ratio."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_gemm as bg  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.kernels import matmul_hopper_ws as ws  # noqa: E402
from gluon_trace.language.nvidia.hopper import mbarrier, tma  # noqa: E402

# Loads without the matrix products: the warp-specialized kernel's ring as it is, its consumer
# only waiting for each stage and releasing it (no wgmma, C left as it was). What the loads
# alone take says whether the skinny shape waits on them or on the consumer; with B alone
# (no A, an L2 hit for every CTA), what A's traffic costs. GROUP_M picks the probe (M = 128 is
# one tile row, where GROUP_M changes nothing else), so each is a trace of its own.
LOADS_ONLY, B_ONLY = 101, 102
_consumer, _producer = ws._consumer, ws._producer


def _probe_consumer(a_desc, b_desc, c_desc, a_bufs, b_bufs, c_smem, ready, empty, M, N, K, STAGES, GROUP_M):
    if getattr(GROUP_M, "value", GROUP_M) not in (LOADS_ONLY, B_ONLY):
        return _consumer(a_desc, b_desc, c_desc, a_bufs, b_bufs, c_smem, ready, empty, M, N, K, STAGES, GROUP_M)
    BM, BK, BN, num_m, num_n, k_tiles = ws._tiling(a_desc, b_desc, M, N, K)
    it = gl.full([], 0, gl.int32)
    for tile in gl.range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        for k in gl.range(0, k_tiles):
            mbarrier.wait(ready.index(it % STAGES), (it // STAGES) & 1)
            mbarrier.arrive(empty.index(it % STAGES))
            it += 1
    tma.store_wait(0)


def _probe_producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, STAGES, GROUP_M):
    if getattr(GROUP_M, "value", GROUP_M) != B_ONLY:
        return _producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, STAGES, GROUP_M)
    BM, BK, BN, num_m, num_n, k_tiles = ws._tiling(a_desc, b_desc, M, N, K)
    it = gl.full([], 0, gl.int32)
    for tile in gl.range(gl.program_id(0), num_m * num_n, gl.num_programs(0)):
        for k in gl.range(0, k_tiles):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), b_desc.block_type.nbytes)
            tma.async_load(b_desc, [k * BK, tile * BN], ready.index(s), b_bufs.index(s))
            it += 1


ws._consumer, ws._producer = _probe_consumer, _probe_producer
PROBES = {  # timed only: they compute no C
    "loads only ws 128x64x64/8/4": lambda a, b, c, s: bg.hopper_run((128, 64, 64, 8, 4), a, b, c, s,
                                                                    bg.matmul_hopper_ws, GROUP_M=LOADS_ONLY),
    "B loads only ws 128x64x64/8/4": lambda a, b, c, s: bg.hopper_run((128, 64, 64, 8, 4), a, b, c, s,
                                                                      bg.matmul_hopper_ws, GROUP_M=B_ONLY),
}

def _ws(cfg, a, b, c, shape, promotion=256):
    return bg.hopper_run(cfg, a, b, c, shape, bg.matmul_hopper_ws, promotion=promotion)


def _ws_pairs(cfg, a, b, c, shape, promotion=256):
    """The warp-specialized kernel launched in clusters of two with no cluster code: the two CTAs
    that read one block of B (64x128: the two tile rows) or of A (128x64: neighbouring columns)
    run on one GPC, so the second reads it from the L2 partition the first filled."""
    return bg.hopper_run(cfg, a, b, c, shape, bg.matmul_hopper_ws, promotion=promotion, num_ctas=2)


def _ws_quads(cfg, a, b, c, shape, promotion=256):
    return bg.hopper_run(cfg, a, b, c, shape, bg.matmul_hopper_ws, promotion=promotion, num_ctas=4)


def _cluster_ws(cfg, a, b, c, shape, promotion=256):
    return bg.cluster_run(cfg, a, b, c, shape, bg.matmul_hopper_cluster_ws, promotion)


def _cluster_ws_apart(cfg, a, b, c, shape, promotion=256):
    return bg.cluster_run(cfg, a, b, c, shape, bg.matmul_hopper_cluster_ws, promotion, APART=True)


RUNS = {  # name: (runner, config)
    "ws 128x64x64/8/4": (_ws, (128, 64, 64, 8, 4)),
    "ws 128x64x128/4/4": (_ws, (128, 64, 128, 4, 4)),
    "ws 128x64x64/8/8": (_ws, (128, 64, 64, 8, 8)),
    "ws 128x64x64/7/8": (_ws, (128, 64, 64, 7, 8)),
    "cluster-ws x1/8w": (_cluster_ws, (128, 64, 64, 8, 8, 1, 64)),
    "cluster-ws x1": (_cluster_ws, (128, 64, 64, 8, 4, 1, 64)),
    "cluster-ws x2 share A": (_cluster_ws, (128, 64, 64, 8, 4, 2, 64, True)),
    "cluster-ws x2 share A/6": (_cluster_ws, (128, 64, 64, 6, 4, 2, 64, True)),
    # 64x128 tiles: two along M=128, which in pairs share B's tile (B, the operand streamed from
    # memory, multicast; A's own rows from L2): cuBLAS's grid for this shape is (2, 64)
    "cluster-ws 64x128 x1": (_cluster_ws, (64, 128, 64, 8, 4, 1, 64)),
    "cluster-ws 64x128 x2 share B": (_cluster_ws, (64, 128, 64, 8, 4, 2, 64)),
    "cluster-ws 64x128 x2 share B apart": (_cluster_ws_apart, (64, 128, 64, 8, 4, 2, 64)),
    "ws 64x128x64/8/4": (_ws, (64, 128, 64, 8, 4)),
    # the same CTAs co-located in clusters of two (no multicast, no cluster barrier)
    "ws 64x128x64/8/4 co-located": (_ws_pairs, (64, 128, 64, 8, 4)),
    "ws 128x64x64/8/4 co-located": (_ws_pairs, (128, 64, 64, 8, 4)),
    "ws 64x128x64/8/8 co-located": (_ws_pairs, (64, 128, 64, 8, 8)),  # two consumer warpgroups, 64x64 each
    "ws 64x128x64/8/8": (_ws, (64, 128, 64, 8, 8)),
    "ws 64x128x64/8/4 co-located x4": (_ws_quads, (64, 128, 64, 8, 4)),
    "cluster-ws 64x128/8w x1": (_cluster_ws, (64, 128, 64, 8, 8, 1, 64)),
    "cluster-ws 64x128/8w x2 share B": (_cluster_ws, (64, 128, 64, 8, 8, 2, 64)),
    "ws 64x128x64/7/4 co-located": (_ws_pairs, (64, 128, 64, 7, 4)),
    "ws 64x128x128/4/4 co-located": (_ws_pairs, (64, 128, 128, 4, 4)),
    "ws 64x128x32/16/4": (_ws, (64, 128, 32, 16, 4)),
    # a 9th stage (or 18 of BK 32) in the room the epilogue's 32-column blocks leave
    "cluster-ws 64x128x64/9 x1 epi32": (_cluster_ws, (64, 128, 64, 9, 4, 1, 32)),
    "cluster-ws 64x128x32/18 x1 epi32": (_cluster_ws, (64, 128, 32, 18, 4, 1, 32)),
    "cluster-ws 64x128x128/4 x1": (_cluster_ws, (64, 128, 128, 4, 4, 1, 64)),
    # B's loads on this CTA's release alone, A's part on both (two producer warps)
    "cluster-ws x2 share A apart": (_cluster_ws_apart, (128, 64, 64, 8, 4, 2, 64, True)),
    "cluster-ws x2 share A apart/8w": (_cluster_ws_apart, (128, 64, 64, 8, 8, 2, 64, True)),
    # split-K through the stream-K kernel: 64 tiles of 128x128 (or 32 of 128x256) on 132 SMs all
    # go to the stream-K part, SPLIT CTAs a tile, each CTA one K range; A crosses from L2 half
    # (a quarter) as often as with 128 tiles of 128x64, B once; the parts meet in L2
    "split-K 2 128x128/6/4": (bg.streamk_run, (128, 128, 64, 6, 4, 64, 2)),
    "split-K 2 128x128/6/8": (bg.streamk_run, (128, 128, 64, 6, 8, 64, 2)),
    "split-K 4 128x256/4/8": (bg.streamk_run, (128, 256, 64, 4, 8, 64, 4)),
}


def main():
    for shape in sys.argv[1:] or ["128x8192x8192"]:
        probe(tuple(int(x) for x in shape.split("x")))


def probe(shape):
    m, n, k = shape
    a, b, ref, runs = bg.probe_case(shape)
    only = [w for w in os.environ.get("PROBE_RUNS", "").split(",") if w]  # names holding one of these
    for name, (make, cfg) in RUNS.items():
        if only and not any(w in name for w in only):
            continue
        try:
            run = bg.checked(name, lambda c: make(cfg, a, b, c, shape), shape, ref)
        except Exception as e:  # noqa: BLE001  (a configuration that does not build is reported, not fatal)
            print(f"  {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        if run is not None:
            runs[name] = run
    for promotion in [int(p) for p in os.environ.get("PROMOTIONS", "").split(",") if p]:
        # the same runs with A's and B's tensor maps at another L2 promotion (default 256 bytes)
        for name, (make, cfg) in RUNS.items():
            if (only and not any(w in name for w in only)) or make is bg.streamk_run:
                continue
            run = bg.checked(f"{name} L2 {promotion}", lambda c: make(cfg, a, b, c, shape, promotion), shape, ref)
            if run is not None:
                runs[f"{name} L2 {promotion}"] = run
    if os.environ.get("LOAD_PROBES"):
        for name, make in PROBES.items():
            runs[name] = make(a, b, torch.empty(m, n, device="cuda", dtype=torch.bfloat16), shape)
    bg.time_in_turn(runs, shape, rounds=7, reps=30)
    if os.environ.get("BOTH_L2"):  # the same runs again, each call from a cold L2 (do_bench's way)
        bg.FLUSH_L2 = not bg.FLUSH_L2
        print(f"{m}x{n}x{k}: again with the L2 {'flushed' if bg.FLUSH_L2 else 'warm'} before each call", flush=True)
        bg.time_in_turn(runs, shape, rounds=7, reps=30)
        bg.FLUSH_L2 = not bg.FLUSH_L2
    if os.environ.get("BACK_TO_BACK"):  # the same launches back to back: their launch latency hidden
        for name, run in runs.items():
            ts = sorted(bg.back_to_back_time(run) for _ in range(5))
            print(f"{m}x{n}x{k} back to back {name:28s} {ts[2] * 1e3:8.1f} us  (rounds {ts[0] * 1e3:.1f}-"
                  f"{ts[-1] * 1e3:.1f})", flush=True)


if __name__ == "__main__":
    main()

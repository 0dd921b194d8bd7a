"""GEMM on the GPU: the tensor-core kernels of gluon_trace/kernels/ beside cuBLAS (torch.matmul)
and Triton's tutorial matmul (when Triton is installed), measured in one run on one device.

    python perf/bench_gemm.py      # prints a table, writes perf/results/gemm-<device>.json

Kernels: the Hopper GEMM (TMA + mbarrier ring + wgmma, persistent), its warp-specialized form
(a producer warp issues TMA, consumer warpgroups run wgmma), and the Ampere-style path
(cp.async ring + mma.sync; the issue's "Ampere-path GEMM on the H100" row, a report).
Each configuration is checked against torch before it is timed. Times: CUDA events around
each launch after warm-up (the host's launch work hidden behind a GPU busy-wait several times
as long as the measured host time), median; the host time of one launch is reported too.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.kernels.matmul_ampere import matmul_ampere  # noqa: E402
from gluon_trace.kernels.matmul_hopper import matmul_hopper  # noqa: E402
from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster, matmul_hopper_cluster_ws  # noqa: E402
from gluon_trace.kernels.matmul_hopper_swap import matmul_hopper_swap, swap_descriptors  # noqa: E402
from gluon_trace.kernels.matmul_hopper_streamk import matmul_hopper_streamk, streamk_workspace  # noqa: E402
from gluon_trace.kernels.matmul_hopper_ws import matmul_hopper_pingpong, matmul_hopper_ws  # noqa: E402
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

HOPPER = [  # (BM, BN, BK, STAGES, num_warps[, EPI_N]): TMA + mbarrier ring + wgmma, persistent
    (128, 256, 64, 3, 8), (128, 128, 64, 4, 4), (128, 128, 64, 5, 8), (128, 256, 32, 6, 8),
    (256, 128, 64, 3, 8), (256, 128, 32, 6, 8),  # cuBLAS's tile shape at 4096^3 (without its clusters)
    (128, 256, 64, 4, 8, 64), (256, 128, 64, 4, 8, 32),  # 4 stages beside a column-block epilogue
]
WS = [  # the same, warp-specialized: a producer warp issues TMA, num_warps consumer warps run wgmma
    (128, 256, 64, 3, 8), (128, 128, 64, 4, 4), (128, 128, 64, 5, 8), (128, 64, 64, 8, 4), (128, 64, 128, 4, 4),
    (128, 256, 32, 6, 8), (256, 128, 64, 3, 8), (256, 128, 32, 6, 8),
    (64, 128, 64, 8, 4),  # M=128 as two tile rows: a 64x128 wgmma a step, B's tile read by both rows
    # (..., EPI_N, num_ctas): launched in clusters of two with no cluster code, so the two CTAs
    # reading one block of B run on one GPC (hopper_run)
    (64, 128, 64, 8, 4, 128, 2), (64, 128, 64, 8, 8, 128, 2), (128, 256, 64, 3, 8, 256, 2),
    # (..., B's L2 policy[, A's]): B streamed once (a skinny M), its lines first out of L2
    # (perf/probe_evict.py: 1.03-1.04x cuBLAS alone at M=128 on the H200, against 0.995x without)
    (64, 128, 64, 8, 4, 128, 2, "evict_first"), (64, 128, 64, 8, 4, 128, 2, "evict_first", "evict_last"),
]
CLUSTER = [  # (BM, BN, BK, STAGES, num_warps, num_ctas[, EPI_N]): clusters multicasting B's tile (cuBLAS's
    # sm_90 shape); EPI_N < BN stores the tile in column blocks through two buffers (room for a 4th stage)
    (128, 256, 32, 6, 8, 2), (256, 128, 32, 6, 8, 2), (128, 256, 64, 3, 8, 2), (128, 128, 64, 5, 4, 2),
    (128, 256, 32, 5, 8, 2), (128, 256, 64, 4, 8, 2, 64),
]
CLUSTER_WS = [  # the same, warp-specialized: a producer warp, num_warps consumer warps
    (128, 256, 64, 3, 8, 2), (128, 256, 32, 6, 8, 2), (256, 128, 32, 6, 8, 2), (128, 128, 64, 5, 4, 2),
    (128, 256, 64, 4, 8, 2, 64), (128, 256, 64, 4, 8, 2, 32), (256, 128, 64, 4, 8, 2, 32),
    (128, 256, 32, 8, 8, 2, 64),
    # (..., EPI_N, SHARE_A): tiles side by side along N sharing A's (a skinny M reads the same rows)
    (128, 64, 128, 4, 4, 2, 64, True), (128, 64, 128, 4, 4, 4, 64, True), (128, 128, 64, 4, 4, 2, 128, True),
    (128, 64, 64, 8, 4, 2, 64, True),
    (256, 128, 64, 4, 8, 2, 32, True), (128, 256, 64, 4, 8, 2, 64, True),  # cuBLAS's 4096^3 shape: 1x2 clusters
    (128, 256, 64, 4, 8, 1, 64),  # the same kernel without clusters: releases stay in the SM, B read twice
    # ... in groups of 16 tile rows: 144 MB of DRAM read at 4096^3 against 186 at 8 (probe_group.py)
    (128, 256, 64, 4, 8, 1, 64, False, 16),
    (128, 256, 32, 8, 8, 1, 64),  # the same bytes in 8 stages of BK=32: a release frees half as much, sooner
    (64, 128, 64, 8, 4, 1, 64), (64, 128, 64, 8, 4, 2, 64),  # the skinny shape's fastest (probe_skinny.py)
    (64, 128, 64, 8, 8, 1, 64), (64, 128, 64, 8, 8, 2, 64),  # two consumer warpgroups of 64x64 (cuBLAS's)
]
SWAP = [  # (PIECE_ROWS, PIECES, BK, STAGES, CONSUMERS[, GROUP_M[, EPI_BUFS[, OVERLAP]]]): matmul_hopper_swap's tiles of
    # PIECES x PIECE_ROWS rows by CONSUMERS x 64 columns, one m64n(rows) wgmma a consumer and K step.
    # 160x192 (cuBLAS's tile at 4000^3): 525 tiles, 3.98 waves on 132 SMs, where 128x256 makes 512
    # tiles of which the last wave fills 88%. 4 stages (two output buffers a consumer to fit) ran at 1.013x
    # cuBLAS at 4000^3 where 3 stages ran at 0.887x, BK 32 in 8 stages at 0.714x; the epilogue overlapped
    # with the next tile's first steps at 1.043x against 1.029x without (probe_swap, session 20)
    (32, 5, 64, 4, 3, 8, 2, 1), (32, 5, 64, 4, 3, 16, 2, 1), (32, 5, 64, 4, 3, 8, 2), (64, 3, 64, 3, 3),
]
STREAMK = [  # (BM, BN, BK, STAGES, num_warps, EPI_N, SPLIT): the warp-specialized kernel, one CTA an SM,
    # the tiles past the last full wave cut along K over every SM (at most SPLIT CTAs a tile)
    (128, 256, 64, 4, 8, 64, 4), (128, 256, 64, 4, 8, 64, 8), (128, 256, 64, 4, 8, 64, 2),
    (128, 128, 64, 5, 8, 128, 4), (128, 128, 64, 5, 4, 128, 4), (128, 256, 32, 8, 8, 64, 4),
]
PINGPONG = [  # two consumer warpgroups (num_warps each) taking tiles in turn, one producer warp
    (128, 128, 64, 5, 4), (64, 256, 64, 4, 4), (128, 128, 64, 4, 4),
]

CONFIGS = [  # (BM, BN, BK, STAGES, num_warps)
    (128, 128, 32, 4, 4), (128, 128, 32, 4, 8), (128, 128, 64, 3, 8), (128, 256, 32, 3, 8),
    (64, 128, 32, 4, 4),
]
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4000, 4000, 4000), (128, 8192, 8192)]
ROUNDS = 5


HOST_US: dict = {}  # id(fn) -> host time of one call, microseconds (reported beside GPU times)


def host_time(fn) -> float:
    """Seconds the host spends in one call (launch work; the GPU runs it asynchronously)."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


FLUSH_L2 = os.environ.get("GEMM_FLUSH_L2") == "1"  # time every call from a cold L2 (do_bench's way)
_FLUSH: list = []  # the 256 MB written before each timed call when FLUSH_L2


def flush_l2() -> None:
    """Evict the L2 (50 MB on the H100/H200) by writing 256 MB, as triton.testing.do_bench does:
    a call then finds neither its operands nor their tails from the call before in the cache."""
    if not _FLUSH:
        _FLUSH.append(torch.empty(256 << 20, dtype=torch.int8, device="cuda"))
    _FLUSH[0].zero_()


def gpu_time(fn, reps=30, warmup=3) -> float:
    """Median GPU milliseconds of ``fn``, the host's launch work hidden: before each timed call
    the GPU spins for several times as long as the host takes to launch (measured here), so
    the start event is not recorded long before the kernel can start. With ``FLUSH_L2`` the
    L2 is flushed before each timed call (GEMM_FLUSH_L2=1)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    host = min(host_time(fn) for _ in range(3))
    HOST_US[id(fn)] = host * 1e6
    torch.cuda.synchronize()
    spin = int(max(100_000, 4 * host * 2.0e9))  # cycles at ~2 GHz
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if FLUSH_L2:
            flush_l2()
        torch.cuda._sleep(spin)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


SUSTAIN_S = float(os.environ.get("GEMM_SUSTAIN_S", "1.5"))


def sustained_time(fn, seconds=None, ramp=0.3):
    """(median GPU ms a launch, host start, host end) of ``fn`` launched back to back for
    ``seconds`` (default GEMM_SUSTAIN_S) in chunks of ~5 ms, each timed by events, the first
    ``ramp`` seconds dropped. Unlike gpu_time, which lets the GPU idle before each call, this
    keeps it at its power cap (the H200 at 700 W throttles its SM clock there), as a training
    loop would: the two can rank kernels differently (perf/README.md, session 16)."""
    seconds = SUSTAIN_S if seconds is None else seconds
    ms = back_to_back_time(fn, reps=20)
    chunk = max(20, int(5.0 / ms))
    chunks = max(4, int(seconds * 1e3 / ms / chunk))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    timed = []
    for _ in range(chunks):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(chunk):
            fn()
        e.record()
        e.synchronize()
        if time.perf_counter() - t0 > ramp:
            timed.append(s.elapsed_time(e) / chunk)
    return statistics.median(timed) if timed else float("nan"), t0, time.perf_counter()


def sustained_ratios(anchor, contenders: dict, rounds=2, label=None) -> dict:
    """{name: [anchor's sustained time / the contender's]} over ``rounds`` rounds in turn; with
    ``label`` (e.g. "4096x4096x4096 bf16") the medians are printed on one line."""
    out = {name: [] for name in contenders}
    for _ in range(rounds):
        t_ref = sustained_time(anchor)[0]
        for name, fn in contenders.items():
            out[name].append(t_ref / sustained_time(fn)[0])
    if label:
        print(f"{label}, sustained ({SUSTAIN_S} s back to back, {rounds} rounds in turn), median ratio: "
              + ", ".join(f"{name} {statistics.median(r):.3f}" for name, r in out.items()), flush=True)
    return out


def back_to_back_time(fn, reps=50) -> float:
    """Mean GPU milliseconds of ``fn`` launched ``reps`` times back to back: each launch's start
    overlaps the one before, so this is the kernel's own time without its launch latency
    (beside gpu_time, which times a launch alone and includes it)."""
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(200_000)  # the host enqueues every launch before the first one starts
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / reps


_last_triton_kernel = None  # the compiled kernel of the last launch (perf/gemm_probe.py reads its PTX)


def triton_matmul():
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def kernel(a, b, c, M, N, K, sam, sbk, scm, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               GROUP: tl.constexpr):
        pid = tl.program_id(0)
        nm, nn = tl.cdiv(M, BM), tl.cdiv(N, BN)
        group = pid // (GROUP * nn)
        first = group * GROUP
        size = min(nm - first, GROUP)
        pm = first + (pid % (GROUP * nn)) % size
        pn = (pid % (GROUP * nn)) // size
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            ka = k * BK + rk
            x = tl.load(a + rm[:, None] * sam + ka[None, :], mask=(rm[:, None] < M) & (ka[None, :] < K), other=0.)
            y = tl.load(b + ka[:, None] * sbk + rn[None, :], mask=(ka[:, None] < K) & (rn[None, :] < N), other=0.)
            acc = tl.dot(x, y, acc)
        tl.store(c + rm[:, None] * scm + rn[None, :], acc.to(c.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))

    def run(a, b, c):
        m, k = a.shape
        n = b.shape[1]
        grid = (triton.cdiv(m, 128) * triton.cdiv(n, 256),)
        global _last_triton_kernel
        _last_triton_kernel = kernel[grid](a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0), BM=128,
                                           BN=256, BK=64, GROUP=8, num_warps=8, num_stages=3)
    return run


def ampere_run(cfg, a, b, c, shape):
    bm, bn, bk, stages, warps = cfg
    m, n, k = shape
    grid = (-(-m // bm), -(-n // bn))
    return lambda: matmul_ampere[grid](a, b, c, m, n, k, k, n, n, BM=bm, BN=bn, BK=bk, STAGES=stages,
                                       num_warps=warps)


def hopper_run(cfg, a, b, c, shape, kernel=matmul_hopper, GROUP_M=8, promotion=256, num_ctas=1, **constexprs):
    """A persistent kernel over min(SMs, tiles) CTAs. ``num_ctas`` > 1 launches them in clusters
    of that many with no cluster code in the kernel: neighbouring CTAs (the tiles of a group's
    rows, which share a block of B) then run on one GPC, so they read B from one L2 partition.
    ``constexprs`` go to the kernel besides the config's (e.g. matmul_hopper_ws's A_EVICT)."""
    bm, bn, bk, stages, warps = cfg[:5]
    epi_n = cfg[5] if len(cfg) > 5 else bn  # matmul_hopper only: the epilogue's column blocks
    num_ctas = cfg[6] if len(cfg) > 6 else num_ctas
    if len(cfg) > 7:  # matmul_hopper_ws only: the L2 eviction policies of B's and A's loads
        constexprs = dict(constexprs, B_EVICT=cfg[7], A_EVICT=cfg[8] if len(cfg) > 8 else "")
    m, n, k = shape
    lay = gl.NVMMASharedLayout.get_default_for
    gd = gl.float16 if a.dtype == torch.float16 else gl.bfloat16
    da = TensorDescriptor.from_tensor(a, [bm, bk], lay([bm, bk], gd), l2_promotion=promotion)
    db = TensorDescriptor.from_tensor(b, [bk, bn], lay([bk, bn], gd), l2_promotion=promotion)
    dc = TensorDescriptor.from_tensor(c, [bm, epi_n], lay([bm, epi_n], gd))
    programs = min(torch.cuda.get_device_properties(0).multi_processor_count, -(-m // bm) * -(-n // bn))
    kw = dict(STAGES=stages, GROUP_M=GROUP_M, num_warps=warps, backend="nvidia", **constexprs)
    if num_ctas > 1:
        from gluon_trace.nvidia import max_active_clusters
        kw["num_ctas"] = num_ctas
        ck = kernel.trace(da, db, dc, m, n, k, target="sm_90a", STAGES=stages, GROUP_M=GROUP_M, num_warps=warps,
                          num_ctas=num_ctas, **constexprs).compile("sm_90a")
        programs = min(max_active_clusters(ck, num_ctas), -(-programs // num_ctas)) * num_ctas
    return lambda: kernel[(programs,)](da, db, dc, m, n, k, **kw)


def swap_run(cfg, a, b, c, shape):
    """matmul_hopper_swap at ``cfg`` (SWAP's form), persistent over min(SMs, tiles) CTAs."""
    rows, pieces, bk, stages, consumers = cfg[:5]
    group_m = cfg[5] if len(cfg) > 5 else 8
    epi_bufs = cfg[6] if len(cfg) > 6 else 0
    overlap = bool(cfg[7]) if len(cfg) > 7 else False
    m, n, k = shape
    descs = swap_descriptors(a, b, c, rows, bk, gl.float16 if a.dtype == torch.float16 else gl.bfloat16)
    tiles = -(-m // (rows * pieces)) * -(-n // (64 * consumers))
    programs = min(torch.cuda.get_device_properties(0).multi_processor_count, tiles)
    return lambda: matmul_hopper_swap[(programs,)](*descs, m, n, k, STAGES=stages, GROUP_M=group_m,
                                                   CONSUMERS=consumers, PIECES=pieces, EPI_BUFS=epi_bufs, OVERLAP=overlap,
                                                   num_warps=4, backend="nvidia")


_GL = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.float8_e4m3fn: gl.float8e4nv}


def cluster_run(cfg, a, b, c, shape, kernel=matmul_hopper_cluster, promotion=256, swizzle=None, **constexprs):
    """A cluster kernel, persistent over as many clusters as the GPU runs at once (``constexprs``
    go to the kernel besides the config's; ``promotion``: A's and B's descriptors' L2 promotion;
    ``swizzle``: A's and B's NVMMA swizzle in bytes, default the widest their blocks allow). With
    ``B_KMAJOR=True`` among the constexprs, ``b`` is B's transpose [N, K]."""
    bm, bn, bk, stages, warps, n = cfg[:6]
    epi_n = cfg[6] if len(cfg) > 6 else bn
    share_a = len(cfg) > 7 and cfg[7]   # False, True or k: a grid of n/k by k CTAs sharing both
    cn = (n if share_a else 1) if isinstance(share_a, bool) else share_a
    m, nn, k = shape
    lay = gl.NVMMASharedLayout.get_default_for
    gd = _GL[a.dtype]
    ablk, bblk = [bm // cn, bk], [bk, bn // (n // cn)]
    if constexprs.get("B_KMAJOR"):
        bblk = bblk[::-1]
    if swizzle is not None:
        lay = lambda blk, dt: gl.NVMMASharedLayout(swizzle, dt.primitive_bitwidth)  # noqa: E731
    da = TensorDescriptor.from_tensor(a, ablk, lay(ablk, gd), l2_promotion=promotion)
    db = TensorDescriptor.from_tensor(b, bblk, lay(bblk, gd), l2_promotion=promotion)
    lay = gl.NVMMASharedLayout.get_default_for
    dc = TensorDescriptor.from_tensor(c, [bm, epi_n], lay([bm, epi_n], _GL[c.dtype]))
    group_m = cfg[8] if len(cfg) > 8 else 8
    kw = dict(STAGES=stages, GROUP_M=group_m, num_warps=warps, num_ctas=n,
              SHARE_A=share_a if isinstance(share_a, int) and not isinstance(share_a, bool) else bool(share_a),
              **constexprs)
    from gluon_trace.nvidia import max_active_clusters
    ck = kernel.trace(da, db, dc, m, nn, k, target="sm_90a", **kw).compile("sm_90a")
    tm, tn = -(-m // bm), -(-nn // bn)  # output tiles along M and N; a cluster takes n of them along one
    tiles = -(-tm // (n // cn)) * -(-tn // cn)
    clusters = min(max_active_clusters(ck, n), tiles)
    CLUSTERS_USED[cfg] = clusters
    return lambda: kernel[(clusters * n,)](da, db, dc, m, nn, k, backend="nvidia", **kw)


CLUSTERS_USED: dict = {}


def streamk_run(cfg, a, b, c, shape):
    """The stream-K kernel over one CTA per SM, with its workspace."""
    bm, bn, bk, stages, warps, epi_n, split = cfg
    m, n, k = shape
    lay = gl.NVMMASharedLayout.get_default_for
    gd = gl.float16 if a.dtype == torch.float16 else gl.bfloat16
    da = TensorDescriptor.from_tensor(a, [bm, bk], lay([bm, bk], gd))
    db = TensorDescriptor.from_tensor(b, [bk, bn], lay([bk, bn], gd))
    dc = TensorDescriptor.from_tensor(c, [bm, epi_n], lay([bm, epi_n], gd))
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    size, count = streamk_workspace(programs, bm, bn)
    partials = torch.empty(size, device="cuda", dtype=torch.float32)
    counters = torch.zeros(count, device="cuda", dtype=torch.int32)
    return lambda: matmul_hopper_streamk[(programs,)](da, db, dc, partials, counters, m, n, k, STAGES=stages,
                                                      GROUP_M=8, SPLIT=split, num_warps=warps, backend="nvidia")


def probe_case(shape, dtype=torch.bfloat16):
    """(A, B, fp32 reference, {"cublas": its launch}) on fresh random operands: what each
    probe script starts from (the device's name and the shape printed first)."""
    m, n, k = shape
    print(torch.cuda.get_device_name(), shape, flush=True)
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    c0 = torch.empty(m, n, device="cuda", dtype=dtype)
    return a, b, a.float() @ b.float(), {"cublas": lambda: torch.matmul(a, b, out=c0)}


def time_in_turn(runs: dict, shape, rounds=5, reps=20, anchor="cublas") -> dict:
    """Each of ``runs`` (name: launch) timed in turn, ``rounds`` times, with the ``anchor`` run
    among them; prints a line a run (median time, TFLOP/s, ratio to the anchor, the rounds'
    spread) and returns {name: median ms}."""
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            times[name].append(gpu_time(run, reps=reps))
    m, n, k = shape
    base = statistics.median(times[anchor])
    width = max(len(name) for name in runs)
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"{m}x{n}x{k} {name:{width}s} {t * 1e3:8.1f} us {2 * m * n * k / t / 1e9:6.0f} TFLOP/s  "
              f"x {anchor} {base / t:.3f}  (rounds {min(ts) * 1e3:.1f}-{max(ts) * 1e3:.1f} us; host "
              f"{HOST_US.get(id(runs[name]), 0):.0f} us a launch)", flush=True)
    return {name: statistics.median(ts) for name, ts in times.items()}


def against_cublas(shape, make_runs) -> None:
    """Fresh bf16 operands of ``shape``; ``make_runs(a, b)`` gives {label: make(c)} of our
    launches, each checked against torch (a wrong one is reported and left out); the rest are
    timed in turn with cuBLAS, alone and sustained (the probes' head-to-head)."""
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    runs = {"cublas": lambda: torch.matmul(a, b)}
    for label, make in make_runs(a, b).items():
        run = checked(label, make, shape, ref, report_ok=False)
        if run is not None:
            runs[label] = run
    time_in_turn(runs, shape)
    sustained_ratios(runs.pop("cublas"), runs, label=f"{m}x{n}x{k}")


def checked(label, make, shape, ref, report_ok=True):
    """``make(c)`` gives a launch writing C; run once into a NaN-poisoned C and compared with
    ``ref``: the launch, or None (reported) when the result is wrong."""
    c = torch.full(shape[:2], float("nan"), device="cuda", dtype=torch.bfloat16)
    run = make(c)
    run()
    torch.cuda.synchronize()
    err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
    if not err < 2e-2:
        print(f"  {label}: wrong result (rel err {err})", flush=True)
        return None
    if report_ok:
        print(f"{label}: rel err {err:.2e}", flush=True)
    return run


def fastest(name, configs, shape, ref, make):
    """(median ms, config) of the fastest configuration that computes the right answer; every
    one that fails or is wrong is reported, not raised."""
    best = None
    for cfg in configs:
        try:
            run = checked(f"{name} {shape} {cfg}", lambda c: make(cfg, c), shape, ref, report_ok=False)
            if run is None:
                continue
            t = gpu_time(run)
        except Exception as e:  # noqa: BLE001  (a configuration that fails is reported, not fatal)
            print(f"  {name} {shape} {cfg}: {type(e).__name__}: {str(e)[:300]}")
            continue
        if best is None or t < best[0]:
            best = (t, cfg, HOST_US.get(id(run), 0.0))
    return best


FP8 = [(128, 256, 128, 3, 8), (128, 128, 128, 4, 4), (128, 128, 128, 5, 8)]  # B K-major, matmul_hopper
# matmul_hopper_cluster_ws with B K-major (CLUSTER_WS's form): 4 stages of 48 KB and a 64-column epilogue
FP8_CLUSTER_WS = [(128, 256, 128, 4, 8, 1, 64), (128, 256, 128, 4, 8, 2, 64), (128, 256, 64, 8, 8, 1, 64)]


def fp8_row(m=8192, n=8192, k=8192):
    """fp8 e4m3 GEMM (bf16 out) against cuBLASLt through torch._scaled_mm (unit scales)."""
    a = (torch.randn(m, k, device="cuda") * 2).to(torch.float8_e4m3fn)
    bt = (torch.randn(n, k, device="cuda") * 2).to(torch.float8_e4m3fn)   # [N, K]: K-major B
    one = torch.ones((), device="cuda")
    flop = 2.0 * m * n * k
    ref = a.float() @ bt.float().T
    lt = lambda: torch._scaled_mm(a, bt.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    t_lt = gpu_time(lt)
    lay = gl.NVMMASharedLayout.get_default_for

    def persistent(cfg, c):
        bm, bn, bk, stages, warps = cfg
        da = TensorDescriptor.from_tensor(a, [bm, bk], lay([bm, bk], gl.float8e4nv))
        db = TensorDescriptor.from_tensor(bt, [bn, bk], lay([bn, bk], gl.float8e4nv))
        dc = TensorDescriptor.from_tensor(c, [bm, bn], lay([bm, bn], gl.bfloat16))
        progs = min(torch.cuda.get_device_properties(0).multi_processor_count, -(-m // bm) * -(-n // bn))
        return lambda: matmul_hopper[(progs,)](da, db, dc, m, n, k, STAGES=stages, GROUP_M=8,
                                               B_KMAJOR=True, num_warps=warps, backend="nvidia")

    def cluster_ws(cfg, c):
        return cluster_run(cfg, a, bt, c, (m, n, k), matmul_hopper_cluster_ws, B_KMAJOR=True)

    best = None
    for name, cfg, make in [("persistent", cfg, persistent) for cfg in FP8] + \
            [("cluster-ws", cfg, cluster_ws) for cfg in FP8_CLUSTER_WS]:
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        try:
            run = make(cfg, c)
            run()
            torch.cuda.synchronize()
            err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
            if not err < 2e-2:
                print(f"  fp8 {name} {cfg}: wrong result (rel err {err})")
                continue
            t = gpu_time(run)
        except Exception as e:  # noqa: BLE001  (a configuration that fails is reported, not fatal)
            print(f"  fp8 {name} {cfg}: {type(e).__name__}: {str(e)[:300]}")
            continue
        print(f"  fp8 {name} {cfg}: {flop / t / 1e9:.0f} TFLOP/s")
        if best is None or t < best[0]:
            best = (t, (name, cfg), run)
    row = {"shape": [m, n, k], "dtype": "float8e4nv", "cublaslt_tflops": flop / t_lt / 1e9}
    if best:
        # the best configuration again, in turn with cuBLASLt, timed alone and sustained
        in_turn = [gpu_time(lt, reps=15) / gpu_time(best[2], reps=15) for _ in range(ROUNDS)]
        sustained = sustained_ratios(lt, {"fp8": best[2]})["fp8"]
        row.update(fp8_tflops=flop / best[0] / 1e9, fp8_config=best[1], fp8_ratio_to_cublaslt=t_lt / best[0],
                   fp8_ratio_in_turn_median=statistics.median(in_turn), fp8_ratios_in_turn=in_turn,
                   fp8_sustained_ratio_median=statistics.median(sustained))
    print(f"{m}x{n}x{k} fp8 e4m3: ours {row.get('fp8_tflops', 0):.0f} TFLOP/s {row.get('fp8_config')} | "
          f"cuBLASLt (_scaled_mm) {row['cublaslt_tflops']:.0f} | ratio {row.get('fp8_ratio_to_cublaslt', 0):.3f}")
    if best:
        print(f"{m}x{n}x{k} fp8 e4m3: {ROUNDS} rounds in turn with cuBLASLt, median ratio "
              f"{row['fp8_ratio_in_turn_median']:.3f}; sustained ({SUSTAIN_S} s back to back, 2 rounds in turn) "
              f"{row['fp8_sustained_ratio_median']:.3f}")
    return row


def f16_row(m=8192, n=8192, k=8192):
    """float16 in and out at 8192^3: the persistent, warp-specialized and warp-specialized
    cluster kernels at their bf16 configurations (the cluster kernel in pairs sharing B, bf16's
    fastest at this size), each timed in turn with cuBLAS for ROUNDS rounds (median ratio)."""
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    ref = a.float() @ b.float()
    flop = 2.0 * m * n * k
    mm = lambda: torch.matmul(a, b)  # noqa: E731
    row = {"shape": [m, n, k], "dtype": "float16"}
    ratios, runs = {}, {}
    makers = (("hopper", lambda c: hopper_run((128, 256, 64, 3, 8), a, b, c, (m, n, k), matmul_hopper)),
              ("warp-specialized", lambda c: hopper_run((128, 256, 64, 3, 8), a, b, c, (m, n, k), matmul_hopper_ws)),
              ("cluster-ws", lambda c: cluster_run((128, 256, 64, 4, 8, 2, 64), a, b, c, (m, n, k),
                                                   matmul_hopper_cluster_ws)))
    for name, make in makers:
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
        run = make(c)
        run()
        torch.cuda.synchronize()
        err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
        if not err < 2e-2:
            print(f"  f16 {name}: wrong result (rel err {err})")
            continue
        ratios[name] = [gpu_time(mm, reps=15) / gpu_time(run, reps=15) for _ in range(ROUNDS)]
        row[f"{name}_tflops"] = flop / gpu_time(run) / 1e9
        runs[name] = run
    row["cublas_tflops"] = flop / gpu_time(mm) / 1e9
    sustained = sustained_ratios(mm, runs, label=f"{m}x{n}x{k} f16")
    row["head_to_head"] = {name: {"ratio_to_cublas_median": statistics.median(r), "ratios": r,
                                  "sustained_ratio_to_cublas_median": statistics.median(sustained[name])}
                           for name, r in ratios.items()}
    print(f"{m}x{n}x{k} f16: cuBLAS {row['cublas_tflops']:.0f} TFLOP/s; {ROUNDS} rounds in turn, median ratio: "
          + ", ".join(f"{name} {statistics.median(r):.3f} ({row[name + '_tflops']:.0f} TFLOP/s)"
                      for name, r in ratios.items()))
    return row


ALL_KERNELS = ("mma.sync", "hopper", "ws", "pingpong", "cluster", "clusterws", "swap", "streamk", "triton", "f16", "fp8")
KERNELS = set(ALL_KERNELS)


def main() -> int:
    import argparse
    global SHAPES, KERNELS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", help="e.g. 4096x4096x4096,4000x4000x4000 (default: the issue's four; none: only the f16/fp8 rows)")
    ap.add_argument("--kernels", help=f"a subset of {','.join(ALL_KERNELS)} (default: all)")
    ap.add_argument("--group-m", help="the cluster kernels' GROUP_M values to sweep, e.g. 4,8,16 (default 8)")
    ap.add_argument("--only-configs", help="cluster configs whose STAGES is this (e.g. 4), to shorten a sweep")
    opts = ap.parse_args()
    if opts.group_m or opts.only_configs:
        for lst in (CLUSTER, CLUSTER_WS):
            full = [c[:6] + (c[6] if len(c) > 6 else c[1], c[7] if len(c) > 7 else False) for c in lst]
            if opts.only_configs:
                full = [c for c in full if c[3] == int(opts.only_configs)]
            lst[:] = [c + (int(g),) for c in full for g in (opts.group_m or "8").split(",")]
    if opts.shapes:
        SHAPES = [] if opts.shapes == "none" else [tuple(int(x) for x in s.split("x")) for s in opts.shapes.split(",")]
    if opts.kernels:
        KERNELS = set(opts.kernels.split(","))
    dev = torch.cuda.get_device_name()
    rows, tri = [], triton_matmul()
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        flop = 2.0 * m * n * k
        mm = lambda: torch.matmul(a, b)  # noqa: E731
        cublas = gpu_time(mm)
        cublas_host = HOST_US.get(id(mm))
        t_tri = None
        if tri is not None and "triton" in KERNELS:
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            try:
                tri(a, b, c)
                t_tri = gpu_time(lambda: tri(a, b, c))
            except Exception as e:  # noqa: BLE001  (an anchor that does not run is reported, not fatal)
                print(f"triton failed on {m}x{n}x{k}: {e}")
        shape = (m, n, k)
        best = fastest("mma.sync", CONFIGS, shape, ref, lambda cfg, c: ampere_run(cfg, a, b, c, shape)) \
            if "mma.sync" in KERNELS else None
        best_h = fastest("hopper", HOPPER, shape, ref, lambda cfg, c: hopper_run(cfg, a, b, c, shape)) \
            if "hopper" in KERNELS else None
        best_ws = fastest("hopper-ws", WS, shape, ref,
                          lambda cfg, c: hopper_run(cfg, a, b, c, shape, matmul_hopper_ws)) \
            if "ws" in KERNELS else None
        best_pp = fastest("hopper-pingpong", PINGPONG, shape, ref,
                          lambda cfg, c: hopper_run(cfg, a, b, c, shape, matmul_hopper_pingpong)) \
            if "pingpong" in KERNELS else None
        best_cl = fastest("hopper-cluster", CLUSTER, shape, ref, lambda cfg, c: cluster_run(cfg, a, b, c, shape)) \
            if "cluster" in KERNELS else None
        best_cw = fastest("hopper-cluster-ws", CLUSTER_WS, shape, ref,
                          lambda cfg, c: cluster_run(cfg, a, b, c, shape, matmul_hopper_cluster_ws)) \
            if "clusterws" in KERNELS else None
        best_sw = fastest("hopper-swap", SWAP, shape, ref, lambda cfg, c: swap_run(cfg, a, b, c, shape)) \
            if "swap" in KERNELS else None
        best_sk = fastest("hopper-streamk", STREAMK, shape, ref, lambda cfg, c: streamk_run(cfg, a, b, c, shape)) \
            if "streamk" in KERNELS else None
        row = {"shape": [m, n, k], "cublas_tflops": flop / cublas / 1e9, "cublas_host_us": cublas_host,
               "triton_tflops": flop / t_tri / 1e9 if t_tri else None}
        if best:
            row.update(ours_tflops=flop / best[0] / 1e9, config=best[1],
                       ratio_to_cublas=cublas / best[0], ratio_to_triton=(t_tri / best[0]) if t_tri else None)
        if best_h:
            row.update(hopper_tflops=flop / best_h[0] / 1e9, hopper_config=best_h[1], hopper_host_us=best_h[2],
                       hopper_ratio_to_cublas=cublas / best_h[0])
            print(f"{m}x{n}x{k} bf16: ours (TMA + wgmma) {row['hopper_tflops']:.0f} TFLOP/s {best_h[1]} | "
                  f"ratio to cuBLAS {row['hopper_ratio_to_cublas']:.3f} | host {best_h[2]:.0f} us per launch")
        if best_ws:
            row.update(ws_tflops=flop / best_ws[0] / 1e9, ws_config=best_ws[1], ws_host_us=best_ws[2],
                       ws_ratio_to_cublas=cublas / best_ws[0])
            print(f"{m}x{n}x{k} bf16: ours (warp-specialized) {row['ws_tflops']:.0f} TFLOP/s {best_ws[1]} | "
                  f"ratio to cuBLAS {row['ws_ratio_to_cublas']:.3f} | host {best_ws[2]:.0f} us per launch")
        if best_pp:
            row.update(pingpong_tflops=flop / best_pp[0] / 1e9, pingpong_config=best_pp[1],
                       pingpong_host_us=best_pp[2], pingpong_ratio_to_cublas=cublas / best_pp[0])
            print(f"{m}x{n}x{k} bf16: ours (ping-pong) {row['pingpong_tflops']:.0f} TFLOP/s {best_pp[1]} | "
                  f"ratio to cuBLAS {row['pingpong_ratio_to_cublas']:.3f} | host {best_pp[2]:.0f} us per launch")
        if best_cl:
            row.update(cluster_tflops=flop / best_cl[0] / 1e9, cluster_config=best_cl[1],
                       cluster_clusters=CLUSTERS_USED.get(best_cl[1]), cluster_ratio_to_cublas=cublas / best_cl[0])
            print(f"{m}x{n}x{k} bf16: ours (clusters, B multicast) {row['cluster_tflops']:.0f} TFLOP/s {best_cl[1]} "
                  f"on {row['cluster_clusters']} clusters | ratio to cuBLAS {row['cluster_ratio_to_cublas']:.3f}")
        if best_cw:
            row.update(cluster_ws_tflops=flop / best_cw[0] / 1e9, cluster_ws_config=best_cw[1],
                       cluster_ws_ratio_to_cublas=cublas / best_cw[0])
            print(f"{m}x{n}x{k} bf16: ours (clusters, warp-specialized) {row['cluster_ws_tflops']:.0f} TFLOP/s "
                  f"{best_cw[1]} | ratio to cuBLAS {row['cluster_ws_ratio_to_cublas']:.3f}")
        if best_sw:
            row.update(swap_tflops=flop / best_sw[0] / 1e9, swap_config=best_sw[1], swap_ratio_to_cublas=cublas / best_sw[0])
            print(f"{m}x{n}x{k} bf16: ours (wgmma M along N, odd tiles) {row['swap_tflops']:.0f} TFLOP/s "
                  f"{best_sw[1]} | ratio to cuBLAS {row['swap_ratio_to_cublas']:.3f}")
        if best_sk:
            row.update(streamk_tflops=flop / best_sk[0] / 1e9, streamk_config=best_sk[1],
                       streamk_ratio_to_cublas=cublas / best_sk[0])
            print(f"{m}x{n}x{k} bf16: ours (stream-K tail) {row['streamk_tflops']:.0f} TFLOP/s "
                  f"{best_sk[1]} | ratio to cuBLAS {row['streamk_ratio_to_cublas']:.3f}")
        # head to head: the best of each kernel and cuBLAS timed in turn, several rounds (the
        # GPU's clock drifts with its power draw over a sweep: a ratio from one round is fairer)
        contenders = {}
        for name, best_k, kern in (("hopper", best_h, matmul_hopper), ("warp-specialized", best_ws, matmul_hopper_ws),
                                   ("ping-pong", best_pp, matmul_hopper_pingpong)):
            if best_k:
                c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                contenders[name] = hopper_run(best_k[1], a, b, c, shape, kern)
        if best_cl:
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            contenders["cluster"] = cluster_run(best_cl[1], a, b, c, shape)
        if best_cw:
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            contenders["cluster-ws"] = cluster_run(best_cw[1], a, b, c, shape, matmul_hopper_cluster_ws)
        if best_sw:
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            contenders["swap"] = swap_run(best_sw[1], a, b, c, shape)
        if best_sk:
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            contenders["stream-K"] = streamk_run(best_sk[1], a, b, c, shape)
        if tri is not None and t_tri and "triton" in KERNELS:
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            contenders["triton"] = lambda c=c: tri(a, b, c)
        ratios = {name: [] for name in contenders}
        for _ in range(ROUNDS):
            t_ref = gpu_time(mm, reps=15)
            for name, fn in contenders.items():
                ratios[name].append(t_ref / gpu_time(fn, reps=15))
        row["head_to_head"] = {name: {"ratio_to_cublas_median": statistics.median(r), "ratios": r}
                               for name, r in ratios.items()}
        print(f"{m}x{n}x{k} bf16, {ROUNDS} rounds in turn with cuBLAS, median ratio: " +
              ", ".join(f"{name} {statistics.median(r):.3f}" for name, r in ratios.items()))
        # the same, each launched back to back for seconds: the GPU at its power cap
        sustained = sustained_ratios(mm, contenders, label=f"{m}x{n}x{k} bf16")
        for name, r in sustained.items():
            row["head_to_head"][name]["sustained_ratio_to_cublas_median"] = statistics.median(r)
        rows.append(row)
        print(f"{m}x{n}x{k} bf16: ours (mma.sync) {row.get('ours_tflops', 0):.0f} TFLOP/s "
              f"{row.get('config')} | cuBLAS {row['cublas_tflops']:.0f} | Triton "
              f"{row['triton_tflops'] or 0:.0f} | ratio to cuBLAS {row.get('ratio_to_cublas', 0):.3f}")
    if "f16" in KERNELS:
        rows.append(f16_row())
    if "fp8" in KERNELS:
        rows.append(fp8_row())
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    name = dev.replace(" ", "_") + ("" if KERNELS == set(ALL_KERNELS) else "-" + "-".join(sorted(KERNELS)))
    with open(os.path.join(os.path.dirname(__file__), "results", f"gemm-{name}.json"), "w") as f:
        json.dump({"device": dev, "torch": torch.__version__, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

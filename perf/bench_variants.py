"""How long 64 softmax variants take to compile: trace + PTX emit + ptxas, in parallel.

Target: <= 3 s on the 2-core development machine, cold (fresh trace cache, fresh disk
cache). Run: ``python perf/bench_variants.py [--target sm_90] [--workers N] [--repeat 3]``.

``python perf/bench_variants.py --gemm`` (on a GPU host): a sweep of 200 variants of the
TMA + wgmma GEMM (gluon_trace/kernels/matmul_hopper.py; BM, BN, BK, STAGES, num_warps,
GROUP_M) on bf16 4096^3, compiled in worker processes and timed with CUDA events on every
GPU of the host (one worker process per GPU), with a progress bar; failing configurations
(too much shared memory, warps that do not fit the tile) are reported, not raised. Budget:
<= 5 minutes cold on one H100 (GEMM_BUDGET_S). ``--devices 0`` times on one GPU only.

Without the NVIDIA backend it measures what it can and says so: tracing alone, and the
assembler's floor (ptxas on a small hand-written kernel, 64 times through the same pool).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import gluon_trace as gt
from gluon_trace import testing as gtt
from gluon_trace import variants as gv
from gluon_trace.examples import SOFTMAX_SPECS, softmax_sweep
from gluon_trace.sweep_workers import per_config

BUDGET_S = 3.0
GEMM_BUDGET_S = 300.0


CONFIGS = [gt.Config(BLOCK=b, SPT=s, num_warps=w)
           for b in (256, 512, 1024, 2048) for s in (1, 2, 4, 8) for w in (1, 2, 4, 8)]

TINY_PTX = """.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 p, .param .u32 n)
{
  .reg .pred %p<2>; .reg .b32 %r<6>; .reg .f32 %f<3>; .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [p];
  ld.param.u32 %r1, [n];
  mov.u32 %r2, %tid.x;
  mov.u32 %r3, %ctaid.x;
  mad.lo.s32 %r4, %r3, 128, %r2;
  setp.ge.s32 %p1, %r4, %r1;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.s32 %rd3, %r4, 4;
  add.s64 %rd2, %rd2, %rd3;
  ld.global.f32 %f1, [%rd2];
  ex2.approx.f32 %f2, %f1;
  st.global.f32 [%rd2], %f2;
DONE:
  ret;
}
"""


def cold_run(target: str, workers: int) -> dict:
    """One cold compile of all 64 variants, in a fresh process (so no in-memory cache of
    the tracer or a backend helps) with a fresh disk cache; only compiling is timed."""
    env = dict(os.environ, GLUON_TRACE_CACHE_DIR=tempfile.mkdtemp(prefix="gt-bench-"))
    out = subprocess.run([sys.executable, __file__, "--single", "--target", target, "--workers", str(workers)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def single(target: str, workers: int) -> None:
    kernel = softmax_sweep  # this process is fresh: nothing is cached in memory yet
    t0 = time.perf_counter()
    sweep = gv.compile_variants(kernel, CONFIGS, *SOFTMAX_SPECS, target=target, workers=workers, progress=False)
    dt = time.perf_counter() - t0
    hits = sum(bool(v.compiled is not None and v.compiled.extra.get("disk_cache_hit")) for v in sweep)
    print(json.dumps({"seconds": dt, "ok": len(sweep.succeeded), "cache_hits": hits,
                      "failures": sweep.failures()}))


def ptxas_floor(workers: int) -> float | None:
    """Seconds for 64 ptxas runs of a tiny kernel through a pool of ``workers``."""
    try:
        from cuda.pathfinder import find_nvidia_binary_utility
        ptxas = find_nvidia_binary_utility("ptxas")
    except Exception:
        return None
    if not ptxas:
        return None
    d = tempfile.mkdtemp(prefix="gt-ptxas-")
    src = os.path.join(d, "k.ptx")
    with open(src, "w") as f:
        f.write(TINY_PTX)

    def one(i):
        subprocess.run([ptxas, "-arch=sm_90", src, "-o", os.path.join(d, f"k{i}.cubin")],
                       check=True, capture_output=True)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, range(len(CONFIGS))))
    return time.perf_counter() - t0


def gemm_configs(n: int = 200) -> list:
    """``n`` of the 240 combinations below (a fixed sample, so runs compare); some fail on
    purpose: BM=64 with 8 warps (wgmma's M tile would be 128) and rings too big for 227 KB."""
    import random
    every = [gt.Config(BM=bm, BN=bn, BK=bk, STAGES=s, GROUP_M=g, num_warps=w)
             for bm in (64, 128) for bn in (64, 128, 256) for bk in (32, 64) for s in (2, 3, 4, 5, 6)
             for w in (4, 8) for g in (1, 8)]
    return random.Random(0).sample(every, n)


def gemm_sweep(workers: int, devices, size: int = 4096, n: int = 200) -> int:
    import datetime
    from gluon_trace.kernels.matmul_hopper import matmul_hopper
    ok, why = gtt.backend_status("nvidia")
    if not ok:
        print(f"--gemm needs an NVIDIA GPU with torch: {why}")
        return 2
    import torch
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    ndev = torch.cuda.device_count() if devices is None else len(devices)
    print(f"[{torch.cuda.get_device_name()} x{ndev}, {when}] {n} variants of matmul_hopper, bf16 {size}^3, "
          f"{workers} compile workers")
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    args = (gv.descriptor(a, ["BM", "BK"]), gv.descriptor(b, ["BK", "BN"]), gv.descriptor(c, ["BM", "BN"]),
            size, size, size)
    grid = lambda meta: (min(sms, (size // meta["BM"]) * (size // meta["BN"])),)  # noqa: E731  persistent
    t0 = time.perf_counter()
    s = gv.sweep(matmul_hopper, gemm_configs(n), *args, grid=grid, target="sm_90a", workers=workers,
                 devices=devices)
    wall = time.perf_counter() - t0
    compile_s = sum(v.compile_s for v in s)
    print(f"{len(s.succeeded)} ran, {len(s.failed)} failed (reported below); compiled on {s.compiled_on}; "
          f"timed on {', '.join(s.devices)}")
    best = s.best
    if best is not None:
        tflops = 2.0 * size ** 3 / best.time_ms / 1e9
        print(f"best: {best.config.label}: {best.time_ms:.3f} ms = {tflops:.0f} TFLOP/s")
        run_args, cfg = per_config(matmul_hopper, args, best.config)
        matmul_hopper[grid({**best.config})](*run_args, **cfg, backend="nvidia")
        err = ((c.float() - (a @ b).float()).abs().max() / (a @ b).float().abs().max()).item()
        print(f"best configuration re-run against torch.matmul: max relative error {err:.1e}")
    fails = s.failures()
    if fails:
        print("\n".join(fails.splitlines()[:25]) + ("\n  ..." if len(fails.splitlines()) > 25 else ""))
    print(f"wall time {wall:.1f} s (compile {compile_s:.0f} CPU-s over the workers); budget {GEMM_BUDGET_S:.0f} s: "
          f"{'PASS' if wall <= GEMM_BUDGET_S else 'FAIL'}")
    return 0 if wall <= GEMM_BUDGET_S and best is not None else 1


def attention_sweep(devices, b: int = 4, h: int = 32, seq: int = 4096, d: int = 128, causal: bool = True) -> int:
    """The pipelined attention forward over BM, BN, STAGES and num_warps (bf16)."""
    from gluon_trace.kernels.attention_hopper import attention_fwd_pipelined
    ok, why = gtt.backend_status("nvidia")
    if not ok:
        print(f"--attention needs an NVIDIA GPU with torch: {why}")
        return 2
    import torch
    q, k, v = (torch.randn(b * h, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    cfgs = [gt.Config(BM=bm, BN=bn, STAGES=s, num_warps=w) for bm in (64, 128) for bn in (64, 128)
            for s in (3, 4) for w in (4, 8)]
    args = (gv.descriptor(q, [1, "BM", d]), gv.descriptor(k, [1, "BN", d]), gv.descriptor(v, [1, "BN", d]),
            gv.descriptor(o, [1, "BM", d]), seq, d ** -0.5)
    t0 = time.perf_counter()
    s = gv.sweep(attention_fwd_pipelined, cfgs, *args, grid=lambda meta: (seq // meta["BM"], b * h),
                 target="sm_90a", devices=devices, CAUSAL=causal)
    flop = 4.0 * b * h * seq * seq * d / (2 if causal else 1)
    print(s.table())
    if s.best is not None:
        print(f"best: {s.best.config.label}: {flop / s.best.time_ms / 1e9:.0f} TFLOP/s "
              f"({time.perf_counter() - t0:.0f} s for the sweep)")
    return 0 if s.best is not None else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--single", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--gemm", action="store_true", help="the 200-variant GEMM sweep on the GPU(s)")
    ap.add_argument("--devices", type=lambda t: [int(x) for x in t.split(",")], default=None,
                    help="GPU indices to time on (default: all)")
    ap.add_argument("--variants", type=int, default=200)
    ap.add_argument("--attention", action="store_true", help="sweep the pipelined attention forward on the GPU(s)")
    a = ap.parse_args()
    if a.attention:
        return attention_sweep(a.devices)
    if a.gemm:
        return gemm_sweep(a.workers, a.devices, n=a.variants)
    if a.single:
        single(a.target, a.workers)
        return 0
    print(f"{len(CONFIGS)} softmax variants, {a.workers} workers, {os.cpu_count()} CPUs, "
          f"best of {a.repeat} cold runs (each a fresh process with an empty disk cache)")

    ok, why = gtt.compile_status(a.target)
    target = a.target if ok else "interpreter"
    runs = [cold_run(target, a.workers) for _ in range(a.repeat)]
    best = min(runs, key=lambda r: r["seconds"])
    secs = [r["seconds"] for r in runs]
    if ok:
        print(f"trace + PTX emit + ptxas for {a.target}: {best['seconds']:.2f} s "
              f"(median {statistics.median(secs):.2f} s; {1e3 * best['seconds'] / len(CONFIGS):.1f} ms per "
              f"variant; {best['ok']} compiled, {best['cache_hits']} disk-cache hits); budget {BUDGET_S:.1f} s: "
              f"{'PASS' if best['seconds'] <= BUDGET_S else 'FAIL'}")
        if best["failures"]:
            print(best["failures"])
        return 0 if best["seconds"] <= BUDGET_S else 1

    print(f"NVIDIA backend not available ({why}):")
    print("  measuring tracing alone; the full figure needs the backend")
    print(f"  trace only: {best['seconds']:.3f} s for {best['ok']} variants "
          f"({1e3 * best['seconds'] / len(CONFIGS):.2f} ms per variant)")
    best = best["seconds"]
    floor = ptxas_floor(a.workers)
    if floor is None:
        print("  ptxas not found: no assembler floor")
    else:
        print(f"  ptxas floor: {floor:.2f} s for {len(CONFIGS)} runs of a 15-instruction kernel "
              f"({1e3 * floor * a.workers / len(CONFIGS):.0f} ms per ptxas run per worker)")
        print(f"  so trace + ptxas alone: {best + floor:.2f} s; what is left of the {BUDGET_S:.1f} s "
              f"budget for PTX emission: {BUDGET_S - best - floor:.2f} s "
              f"({1e3 * (BUDGET_S - best - floor) / len(CONFIGS) * a.workers:.0f} ms per variant per worker)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

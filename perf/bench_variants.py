"""How long 64 softmax variants take to compile: trace + PTX emit + ptxas, in parallel.

Target: <= 3 s on the 2-core development machine, cold (fresh trace cache, fresh disk
cache). Run: ``python perf/bench_variants.py [--target sm_90] [--workers N] [--repeat 3]``.

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

BUDGET_S = 3.0


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="sm_90")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--single", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
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

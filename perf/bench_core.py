"""Core figures on the CPU: tracing the DESIGN.md softmax, and the interpreter running it.

    python perf/bench_core.py          # prints a table and writes perf/results/core-<host>.json

Targets (issue 2): trace <= 2 ms; a 1024-program softmax over 1024 columns in the
interpreter well under a second. Issue 9: a 128x128-tile GEMM with K = 1024 (TMA + mbarrier
ring + wgmma, every synchronisation check on) interprets in a few seconds at most.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time

import numpy as np

from gluon_trace.examples import SOFTMAX_SPECS, softmax


def median_time(fn, repeat):
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> int:
    specs = SOFTMAX_SPECS

    def trace_fresh():
        softmax.cache.clear()  # measure a real trace, not a cache hit
        softmax.trace(*specs, BLOCK=1024)

    trace_fresh()
    t_trace = median_time(trace_fresh, 200)
    t_hit = median_time(lambda: softmax.trace(*specs, BLOCK=1024), 200)

    rows, cols = 1024, 1024
    x = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    out = np.full_like(x, np.nan)
    run = lambda: softmax[(rows,)](out, x, cols, cols, BLOCK=1024)  # noqa: E731
    run()
    t_interp = median_time(run, 5)
    ref = np.exp(x - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    err = float(np.abs(out - ref).max())

    t_gemm, gemm_err = gemm_interpreter()

    res = {
        "interpreter_gemm_128x128_k1024_s": t_gemm, "interpreter_gemm_max_rel_err": gemm_err,
        "host": platform.node(), "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
        "trace_softmax_ms": t_trace * 1e3, "trace_cache_hit_ms": t_hit * 1e3,
        "interpreter_softmax_1024x1024_s": t_interp, "interpreter_max_abs_err": err,
    }
    print("| figure | measured | target |")
    print("|---|---|---|")
    print(f"| trace softmax (fresh) | {t_trace * 1e3:.3f} ms | <= 2 ms |")
    print(f"| trace softmax (cache hit) | {t_hit * 1e3:.3f} ms | |")
    print(f"| interpreter softmax 1024 programs x 1024 cols | {t_interp:.3f} s | well under 1 s |")
    print(f"| interpreter max abs error vs numpy | {err:.1e} | |")
    print(f"| interpreter Hopper GEMM 128x128 tile, K=1024, checks on | {t_gemm:.3f} s | a few s |")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    path = os.path.join(os.path.dirname(__file__), "results", "core-cpu.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=2)
    return 0 if err < 1e-5 and gemm_err < 1e-4 else 1


def gemm_interpreter() -> tuple[float, float]:
    """One 128x128 output tile, K = 1024, bf16 in / f32 out, through matmul_hopper."""
    import ml_dtypes

    from gluon_trace import dtypes as dt
    from gluon_trace import language as gl
    from gluon_trace.kernels.matmul_hopper import matmul_hopper
    from gluon_trace.nvidia.hopper import TensorDescriptor

    rng = np.random.default_rng(0)
    m = n = 128
    k = 1024
    a = dt.round_bf16(rng.standard_normal((m, k)).astype(np.float32))
    b = dt.round_bf16(rng.standard_normal((k, n)).astype(np.float32))
    ta, tb = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    c = np.full((m, n), np.nan, np.float32)
    lay = gl.NVMMASharedLayout.get_default_for
    da = TensorDescriptor.from_tensor(ta, [128, 64], lay([128, 64], gl.bfloat16))
    db = TensorDescriptor.from_tensor(tb, [64, 128], lay([64, 128], gl.bfloat16))
    dc = TensorDescriptor.from_tensor(c, [128, 128], lay([128, 128], gl.float32))
    run = lambda: matmul_hopper[(1,)](da, db, dc, m, n, k, STAGES=3, GROUP_M=8)  # noqa: E731
    run()
    ref = a.astype(np.float64) @ b
    err = float(np.abs(c - ref).max() / np.abs(ref).max())
    return median_time(run, 3), err


if __name__ == "__main__":
    sys.exit(main())

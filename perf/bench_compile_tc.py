"""Compile time of the tensor-core kernels: trace + emit (PTX text), and trace + emit + ptxas,
for the Hopper GEMM (128x256x64, 3 stages, 8 warps) and attention (D128, causal, 8 warps) the
issue's targets name, and the kernels the benchmarks found fastest (the warp-specialized
attention, D128 causal, two consumer warpgroups, and its split-tail form, D128; the warp-specialized cluster GEMM with a
64-column epilogue, 4 stages; the swapped 160x192 GEMM; the stream-K GEMM), beside Triton's compile of its tutorial matmul
(the one perf/bench_gemm.py times) in the same run when Triton is installed. Fresh traces each
time (caches cleared), medians of several runs.

The Hopper GEMM's compile is also split into its phases (trace, emit, ptxas's wall time and the
part of it ptxas reports as its own "Compile time", the rest), and its ratio to Triton is taken
in ROUNDS rounds, each timing ours and then Triton's, so that a machine that slows down for a
while shows in the spread, not in one ratio. With PTXAS_ALT=<path> the GEMM is also compiled
with that ptxas (e.g. the pip wheel's, when the machine's own is another version).

    python perf/bench_compile_tc.py        # prints a table, writes perf/results/compile-tc.json
    ROUNDS=5 PTXAS_ALT=/path/to/ptxas python perf/bench_compile_tc.py
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.kernels.attention_hopper import attention_fwd  # noqa: E402
from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws, attention_fwd_ws_split  # noqa: E402
from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster_ws  # noqa: E402
from gluon_trace.kernels.matmul_hopper_streamk import matmul_hopper_streamk  # noqa: E402
from gluon_trace.kernels.matmul_hopper_swap import matmul_hopper_swap  # noqa: E402
from gluon_trace.kernels.matmul_hopper import matmul_hopper  # noqa: E402
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

NV = gl.NVMMASharedLayout.get_default_for


def _spec(blk, lead=()):
    return TensorDescriptor.type_spec(gl.bfloat16, list(lead) + list(blk), NV(list(blk), gl.bfloat16))


def gemm():
    matmul_hopper.cache.clear()
    return matmul_hopper.trace(_spec([128, 64]), _spec([64, 256]), _spec([128, 256]), gl.int32, gl.int32,
                               gl.int32, STAGES=3, GROUP_M=8, num_warps=8, target="sm_90a")


def attention():
    attention_fwd.cache.clear()
    return attention_fwd.trace(_spec([128, 128], [1]), _spec([64, 128], [1]), _spec([64, 128], [1]),
                               _spec([128, 128], [1]), gl.int32, gl.float32, CAUSAL=True, num_warps=8,
                               target="sm_90a")


def attention_ws():
    attention_fwd_ws.cache.clear()
    return attention_fwd_ws.trace(_spec([64, 128], [1]), _spec([128, 128], [1]), _spec([128, 128], [1]),
                                  _spec([64, 128], [1]), gl.int32, gl.float32, CAUSAL=True, num_warps=4,
                                  target="sm_90a")


def attention_split():
    attention_fwd_ws_split.cache.clear()
    # the persistent D128 kernel whose last, partial round of tiles is cut along KV
    return attention_fwd_ws_split.trace(_spec([64, 128], [1]), _spec([128, 128], [1]), _spec([128, 128], [1]),
                                        _spec([64, 128], [1]), gl.pointer(gl.float32), gl.pointer(gl.int32),
                                        gl.int32, gl.float32, CAUSAL=False, num_warps=4, target="sm_90a")


def gemm_cluster_ws():
    matmul_hopper_cluster_ws.cache.clear()
    # pairs of CTAs sharing B's [64, 256] tile, each loading half by multicast
    return matmul_hopper_cluster_ws.trace(_spec([128, 64]), _spec([64, 128]), _spec([128, 64]), gl.int32, gl.int32,
                                          gl.int32, STAGES=4, GROUP_M=8, num_warps=8, num_ctas=2, target="sm_90a")


def gemm_streamk():
    matmul_hopper_streamk.cache.clear()
    return matmul_hopper_streamk.trace(_spec([128, 64]), _spec([64, 256]), _spec([128, 64]), gl.pointer(gl.float32),
                                       gl.pointer(gl.int32), gl.int32, gl.int32, gl.int32, STAGES=4, GROUP_M=8,
                                       SPLIT=4, num_warps=8, target="sm_90a")


def gemm_swap():
    matmul_hopper_swap.cache.clear()
    # 160x192 tiles: 5 pieces of A's 32 rows, 3 consumer warpgroups, 4 stages, the epilogue overlapped
    return matmul_hopper_swap.trace(_spec([32, 64]), _spec([64, 64]), _spec([32, 64]), gl.int32, gl.int32, gl.int32,
                                    STAGES=4, GROUP_M=8, CONSUMERS=3, PIECES=5, EPI_BUFS=2, OVERLAP=True,
                                    num_warps=4, target="sm_90a")


KERNELS = {"gemm": gemm, "attention": attention, "attention_ws": attention_ws, "attention_split": attention_split,
           "gemm_cluster_ws": gemm_cluster_ws,
           "gemm_streamk": gemm_streamk, "gemm_swap": gemm_swap}


def _median(fn, n=7) -> float:
    fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _full(make):
    """trace + emit + ptxas, with a fresh binary cache each time."""
    def run():
        with tempfile.TemporaryDirectory() as d:
            os.environ["GLUON_TRACE_CACHE_DIR"] = d
            from gluon_trace.backends.nvidia import compiler
            compiler._memory.clear()
            make().compile("sm_90a")
    return run


def phases(make, n=7) -> dict:
    """Median milliseconds of each phase of a fresh compile: trace, emit, ptxas (its wall time,
    and the "Compile time" ptxas -v reports, which leaves out its start and its file I/O), and
    the rest (cache key, packing, the cache write)."""
    import re
    from gluon_trace.backends.nvidia import emitter, ptxas
    assemble, emit = ptxas.assemble, emitter.emit
    rec: dict = {}

    def timed_assemble(*a, **k):
        t0 = time.perf_counter()
        out = assemble(*a, **k)
        rec["ptxas"] = rec.get("ptxas", 0.0) + time.perf_counter() - t0
        m = re.search(r"Compile time = ([\d.]+) ms", out[1]["log"])
        rec["ptxas_self"] = rec.get("ptxas_self", 0.0) + (float(m.group(1)) / 1e3 if m else float("nan"))
        return out

    def timed_emit(*a, **k):
        t0 = time.perf_counter()
        out = emit(*a, **k)
        rec["emit"] = time.perf_counter() - t0
        return out

    runs = []
    ptxas.assemble, emitter.emit = timed_assemble, timed_emit
    try:
        for i in range(n + 1):
            rec.clear()
            with tempfile.TemporaryDirectory() as d:
                os.environ["GLUON_TRACE_CACHE_DIR"] = d
                from gluon_trace.backends.nvidia import compiler
                compiler._memory.clear()
                t0 = time.perf_counter()
                graph = make()
                rec["trace"] = time.perf_counter() - t0
                graph.compile("sm_90a")
                rec["total"] = time.perf_counter() - t0
            rec["rest"] = rec["total"] - rec["trace"] - rec["emit"] - rec["ptxas"]
            if i:  # the first warms imports and caches
                runs.append(dict(rec))
    finally:
        ptxas.assemble, emitter.emit = assemble, emit
    return {k: 1e3 * statistics.median(r[k] for r in runs) for k in runs[0]}


def triton_compile_s(n=3):
    """Seconds of Triton's first call of its tutorial matmul (perf/bench_gemm.py) with an empty
    cache, less a warm call: its JIT compile for this GPU, which needs the GPU (torch tensors)."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None, "no GPU: Triton's compile is timed through its first launch"
        from bench_gemm import triton_matmul
    except Exception as e:  # noqa: BLE001  (an anchor that cannot run is reported)
        return None, f"no torch/Triton ({type(e).__name__}: {e})"
    times = []
    for _ in range(n):
        with tempfile.TemporaryDirectory() as d:
            os.environ["TRITON_CACHE_DIR"] = d
            run = triton_matmul()  # a fresh @triton.jit function: no in-memory cache either
            if run is None:
                return None, "Triton is not installed"
            a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
            c = torch.empty_like(a)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            run(a, a, c)
            torch.cuda.synchronize()
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            run(a, a, c)
            torch.cuda.synchronize()
            times.append(first - (time.perf_counter() - t0))
    return statistics.median(times), None


def ptxas_alone(make, flags) -> float:
    """Median seconds of ptxas by itself on the kernel's PTX with ``flags`` (what the flags cost)."""
    import subprocess
    from gluon_trace.backends.nvidia import ptxas
    exe = ptxas.locate()[0]
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(make().ptx("sm_90a"))
        return _median(lambda: subprocess.run([exe, "-arch=sm_90a", "-v", *flags, src, "-o",
                                               os.path.join(d, "k.cubin")], capture_output=True, check=True), 5)


def _with_ptxas(path, fn):
    """fn() with ``path`` as the ptxas to use (the located one is forgotten before and after)."""
    from gluon_trace.backends.nvidia import ptxas
    old = os.environ.get(ptxas.ENV)
    os.environ[ptxas.ENV] = path
    ptxas._found = None
    try:
        return fn(), ptxas.locate()[1]
    finally:
        if old is None:
            del os.environ[ptxas.ENV]
        else:
            os.environ[ptxas.ENV] = old
        ptxas._found = None


def main() -> int:
    from gluon_trace.backends.nvidia import ptxas
    rows = {"ptxas": " ".join(ptxas.locate())}
    for name, make in KERNELS.items():
        rows[f"{name}_trace_emit_ms"] = 1e3 * _median(lambda: make().ptx("sm_90a"))
        rows[f"{name}_full_s"] = _median(_full(make), 3)
    for name, flags in (("lineinfo", ["-lineinfo"]), ("plain", []), ("O1", ["-O1", "-lineinfo"])):
        rows[f"gemm_ptxas_{name}_s"] = ptxas_alone(gemm, flags)
    print(f"ptxas {rows['ptxas']}")
    print("ptxas alone on the Hopper GEMM: " + ", ".join(f"{k[11:-2]} {v:.3f} s" for k, v in rows.items()
                                                         if k.startswith("gemm_ptxas_")))
    rows["gemm_phases_ms"] = phases(gemm)
    print("Hopper GEMM compile, median ms per phase: " + ", ".join(f"{k} {v:.1f}"
                                                                   for k, v in rows["gemm_phases_ms"].items()))
    alt = os.environ.get("PTXAS_ALT")
    if alt:
        rows["gemm_phases_alt_ms"], rows["ptxas_alt"] = _with_ptxas(alt, lambda: phases(gemm))
        print(f"the same with ptxas {rows['ptxas_alt']} ({alt}): " + ", ".join(
            f"{k} {v:.1f}" for k, v in rows["gemm_phases_alt_ms"].items()))
    t_tri, why = triton_compile_s()
    rows["triton_matmul_compile_s"] = t_tri
    if why:
        rows["triton_note"] = why
    print(f"trace + emit: Hopper GEMM {rows['gemm_trace_emit_ms']:.1f} ms (target <= 20), "
          f"attention {rows['attention_trace_emit_ms']:.1f} ms (target <= 40)")
    print(f"trace + emit + ptxas: Hopper GEMM {rows['gemm_full_s']:.3f} s, attention {rows['attention_full_s']:.3f} s")
    for name in list(KERNELS)[2:]:
        print(f"{name}: trace + emit {rows[f'{name}_trace_emit_ms']:.1f} ms, + ptxas {rows[f'{name}_full_s']:.3f} s")
    if t_tri:
        print(f"Triton's tutorial matmul compile: {t_tri:.3f} s -> ratio {rows['gemm_full_s'] / t_tri:.3f} "
              "(target <= 0.25)")
        rounds = []
        for _ in range(int(os.environ.get("ROUNDS", "3"))):
            ours = _median(_full(gemm), 3)
            theirs, _ = triton_compile_s()
            rounds.append((ours, theirs, ours / theirs))
        rows["rounds"] = rounds
        print("rounds (ours s, Triton s, ratio): " + "; ".join(f"{a:.3f} {b:.3f} {r:.3f}" for a, b, r in rounds)
              + f" -> median ratio {statistics.median(r for *_, r in rounds):.3f}")
    else:
        print(f"Triton anchor: {why}")
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    with open(os.path.join(os.path.dirname(__file__), "results", "compile-tc.json"), "w") as f:
        json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

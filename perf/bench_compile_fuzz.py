"""Compile time of random programs (gluon_trace.fuzz): the slowest among a few hundred.

    nice python perf/bench_compile_fuzz.py [--n 300] [--targets sm_90a,gfx942] [--timeout 180]

Each program is traced, emitted (PTX / AMDGCN) and assembled (ptxas; AMD assembler + linker)
with a fresh cache, in worker processes that take the programs in batches; a worker that
runs past ``--timeout`` seconds on one program is killed (with the assembler it started) and
that program is reported as a timeout. Prints a table of the slowest compiles per target
with the code size that explains them, and writes perf/results/compile-fuzz.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _worker(seeds: list[int], targets: list[str], cfg: dict, out_path: str, skip=()) -> None:
    """One JSON line per (program, target), flushed as soon as it is measured; the pairs in
    ``skip`` (seed, target) are not compiled (they timed out in an earlier worker)."""
    skip = {tuple(p) for p in skip}
    os.environ["GLUON_TRACE_CACHE_DIR"] = tempfile.mkdtemp(prefix="gt-bench-cache-")
    from gluon_trace import backend as backends
    from gluon_trace import fuzz
    from gluon_trace import language as gl
    from gluon_trace import dtypes as dt
    with open(out_path, "a") as out:
        for seed in seeds:
            for target in targets:
                if (seed, target) in skip:
                    continue
                warp = 64 if target in ("gfx90a", "gfx942") else 32
                prog = fuzz.random_program(seed, fuzz.FuzzConfig(warp_size=warp, **cfg))
                row = {"seed": seed, "target": target, "nodes": len(prog.nodes),
                       "values_per_thread": values_per_thread(prog)}
                out.write(json.dumps({**row, "started": True}) + "\n")
                out.flush()
                try:
                    kernel = fuzz.kernel_of(prog)
                    ptrs = [gl.pointer(dt.BY_NAME[n.dtype]) for n in prog.inputs] + \
                        [gl.pointer(dt.BY_NAME[prog.node(o).dtype]) for o in prog.outputs]
                    t0 = time.perf_counter()
                    traced = kernel.trace(*ptrs, gl.int32, gl.int32, gl.int32,
                                          num_warps=prog.num_warps, target=target)
                    t1 = time.perf_counter()
                    be = backends.for_target(target)
                    text = be.emit(traced.graph, target)
                    t2 = time.perf_counter()
                    ck = be.compile(traced.graph, target)
                    t3 = time.perf_counter()
                    # compile() emits again (its own cache is keyed by graph): the assembler's
                    # share is what compile took beyond the emit just timed
                    row.update(trace_s=t1 - t0, emit_s=t2 - t1, compile_s=t3 - t2,
                               assemble_s=max(0.0, (t3 - t2) - (t2 - t1)), total_s=(t1 - t0) + (t3 - t2), asm_lines=text.count("\n"),
                               registers=ck.registers, spill_bytes=ck.spill_bytes,
                               shared_bytes=ck.shared_bytes, numel=max(n.numel for n in prog.nodes))
                except Exception as e:  # noqa: BLE001 - a refusal is recorded, not timed
                    row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                out.write(json.dumps(row) + "\n")
                out.flush()


def values_per_thread(prog) -> int:
    """The most values one thread holds for one tile of the program (its registers for it,
    before 64-bit types double them): what the slow compiles have in common."""
    best = 1
    for n in prog.nodes:
        if n.layout is not None:
            best = max(best, 1 << len(n.layout.to_linear(n.shape).reg_bases))
    return best


def _run_batch(seeds, targets, cfg, timeout: float) -> list[dict]:
    """Run a worker over ``seeds``; on a timeout kill it and restart past that compile."""
    rows: list[dict] = []
    todo, skip = list(seeds), []
    while todo:
        fd, path = tempfile.mkstemp(suffix=".jsonl")
        os.close(fd)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(
            {"seeds": todo, "targets": targets, "cfg": cfg, "out": path, "skip": skip})]
        proc = subprocess.Popen(cmd, start_new_session=True)  # own group: kill ptxas with it
        last_progress, seen = time.monotonic(), 0
        while proc.poll() is None:
            time.sleep(0.2)
            with open(path) as f:
                n = sum(1 for _ in f)
            if n != seen:
                seen, last_progress = n, time.monotonic()
            elif time.monotonic() - last_progress > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
        with open(path) as f:
            lines = [json.loads(ln) for ln in f if ln.strip()]
        os.unlink(path)
        done = [r for r in lines if "started" not in r]
        rows += done
        finished = {r["seed"] for r in done if r["target"] == targets[-1]}
        started = [r for r in lines if "started" in r]
        if proc.returncode not in (0, None) and started and \
                not any(r["seed"] == started[-1]["seed"] and r["target"] == started[-1]["target"] for r in done):
            hung = started[-1]
            rows.append({**{k: hung[k] for k in ("seed", "target", "nodes", "values_per_thread")},
                         "timeout": True, "total_s": timeout})
            # the hung seed's other targets still run; those it finished do not run again
            skip += [(hung["seed"], hung["target"])] + [(r["seed"], r["target"]) for r in done
                                                        if r["seed"] == hung["seed"]]
            todo = [s for s in todo if s >= hung["seed"]]
        else:
            todo = [s for s in todo if s not in finished and s > max(finished, default=-1)]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--targets", default="sm_90a,gfx942")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per program")
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--max-numel", type=int, default=4096)
    ap.add_argument("--max-ops", type=int, default=12)
    ap.add_argument("--json", default=os.path.join(HERE, "results", "compile-fuzz.json"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        w = json.loads(args.worker)
        _worker(w["seeds"], w["targets"], w["cfg"], w["out"], w.get("skip", ()))
        return
    targets = args.targets.split(",")
    cfg = {"max_numel": args.max_numel, "max_ops": args.max_ops}
    seeds = list(range(args.seed, args.seed + args.n))
    t0 = time.time()
    rows = []
    for i in range(0, len(seeds), args.batch):
        rows += _run_batch(seeds[i:i + args.batch], targets, cfg, args.timeout)
    report(rows, targets, args, time.time() - t0)


def report(rows, targets, args, wall: float) -> None:
    result = {"programs": args.n, "seed": args.seed, "config": {"max_numel": args.max_numel,
              "max_ops": args.max_ops}, "timeout_s": args.timeout, "wall_s": wall, "targets": {}}
    print(f"{args.n} random programs (max_numel {args.max_numel}, max_ops {args.max_ops}), "
          f"wall {wall:.0f} s")
    for t in targets:
        rs = [r for r in rows if r["target"] == t]
        timed = sorted((r for r in rs if "total_s" in r), key=lambda r: -r["total_s"])
        errors: dict = {}
        for r in rs:
            if "error" in r:
                msg = re.sub(r"<gluon_trace.fuzz program \d+>:\d+: ", "", r["error"])[:110]
                errors.setdefault(msg, []).append(r["seed"])
        totals = sorted(r["total_s"] for r in timed)
        med = totals[len(totals) // 2] if totals else 0.0
        print(f"\n{t}: {sum(1 for r in timed if not r.get('timeout'))} compiled, {sum(1 for r in rs if r.get('timeout'))} timed out, "
              f"{sum(1 for r in rs if 'error' in r)} refused; median {med:.2f} s")
        print("  seed  total_s  trace_s  emit_s  asm_s  asm_lines  regs  spill_B  max_numel  values/thread")
        for r in timed[:10]:
            if r.get("timeout"):
                print(f"  {r['seed']:4d}  >{r['total_s']:.0f} (timeout; {r['values_per_thread']} values/thread)")
                continue
            print(f"  {r['seed']:4d}  {r['total_s']:7.2f}  {r['trace_s']:7.3f}  {r['emit_s']:6.2f}  "
                  f"{r['assemble_s']:5.2f}  {r['asm_lines']:9d}  {r['registers']:4d}  "
                  f"{r['spill_bytes']:7d}  {r['numel']:9d}  {r['values_per_thread']:13d}")
        for msg, seeds in sorted(errors.items(), key=lambda kv: -len(kv[1]))[:8]:
            print(f"  refused x{len(seeds)} (seeds {seeds[:5]}): {msg}")
        buckets = {}
        for r in timed:
            v = r["values_per_thread"]
            key = "<=64" if v <= 64 else "<=256" if v <= 256 else "<=1024" if v <= 1024 else ">1024"
            buckets.setdefault(key, []).append(r["total_s"])
        print("  values/thread  programs  median_s  max_s")
        for key in ("<=64", "<=256", "<=1024", ">1024"):
            b = sorted(buckets.get(key, []))
            if b:
                print(f"  {key:>13}  {len(b):8d}  {b[len(b) // 2]:8.2f}  {b[-1]:5.1f}")
        result["targets"][t] = {"compiled": sum(1 for r in timed if not r.get("timeout")),
                                "timeouts": [r["seed"] for r in rs if r.get("timeout")], "median_s": med,
                                "by_values_per_thread": {k: {"programs": len(v), "max_s": max(v)}
                                                         for k, v in buckets.items()},
                                "slowest": timed[:10], "refusals": errors}
    result["rows"] = rows
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f)
    print(f"\nwritten {args.json}")


if __name__ == "__main__":
    main()

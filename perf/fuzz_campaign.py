"""A differential fuzz campaign over seeds: each random program (gluon_trace.fuzz) runs in the
interpreter against the numpy reference, then is emitted for NVIDIA (sm_90, sm_80) and run on
the PTX simulator, and compiled for AMD (gfx942 with 64-wide waves, gfx1100 with 32) and run on
the AMDGCN simulator, each against the reference's bounds.

One JSON line per (seed, target) goes to ``--out``: ``status`` is ``ok``, ``refused`` (a
CompileError on a legal program), ``mismatch`` (outputs outside the bounds) or ``crash`` (any
other exception, a simulator's included; a run over ``--timeout`` seconds is a crash too),
with the message. A non-ok program also gets a reproducer under ``--failures``.

    nice python perf/fuzz_campaign.py --start 700000 --count 200 --preset small --out runs.jsonl
    nice python perf/fuzz_campaign.py --preset stacked --slots --targets sm_90,sm_80,gfx942,gfx1100 ...

Presets bound the tile size so one program runs in seconds on the simulators (they step every
thread in Python). ``summary FILES`` prints counts and the non-ok records; ``shrink REPRO
TARGET`` drops a reproducer's outputs (and the nodes only they need) while the target still
fails, and saves the smaller program as ``<repro>_min.py``.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "backends", "nvidia"))
sys.path.insert(0, os.path.join(ROOT, "tests", "backends", "amd"))

from gluon_trace import fuzz  # noqa: E402
from gluon_trace.errors import CompileError  # noqa: E402

from gluon_trace.fuzz.presets import PRESETS, preset_config  # noqa: E402
# interpNN: the interpreter on the programs of NN-wide warps; gfx90a (64-wide) runs with --targets
TARGETS = ("interp32", "interp64", "sm_90", "sm_80", "gfx942", "gfx1100")
WARP32 = ("interp32", "sm_90", "sm_80", "gfx1100")


ASSEMBLE_PTX = False  # --ptxas


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout("over the time limit")


def program(seed: int, preset: str, warp: int):
    return fuzz.random_program(seed, preset_config(preset, warp))


def run_interpreter(prog) -> list:
    out = fuzz.check_program(prog, targets=(), interpreter=True)
    return [m for _, m in out.failures]


def run_ptx(prog, target: str, inputs, args) -> None:
    from gluon_trace.backends.nvidia.emitter import emit
    graph = fuzz.trace_program(prog, target).graph
    text, _, smem = emit(graph, target)
    if any(n.op in ("shared", "atomic") for n in prog.nodes):
        # shared memory (an atomic's old values reach the copies through it too): the simulator
        # with ldmatrix/stmatrix and a race detector (the barriers the backend placed must
        # order every access by another warp)
        import ptxsim_races
        ptxsim_races.run(text, (1, 1, 1), args, smem)
    else:
        import ptxsim
        ptxsim.run(text, (1, 1, 1), args, smem)
    if ASSEMBLE_PTX:  # the simulator takes PTX that ptxas might refuse: assemble it too
        fuzz.compile_program(prog, target)


def run_amd(prog, target: str, inputs, args) -> None:
    import amdsim
    amdsim.simulate(fuzz.trace_program(prog, target), target, (1,), args)


def run_target(prog, target: str) -> list:
    if target.startswith("interp"):
        return run_interpreter(prog)
    inputs = fuzz.make_inputs(prog)
    args, poison = fuzz.kernel_args(prog, inputs)
    with np.errstate(all="ignore"):
        (run_ptx if target.startswith("sm_") else run_amd)(prog, target, inputs, args)
    got = fuzz.outputs_of(prog, args)
    return fuzz.mismatches(prog, got, fuzz.evaluate(prog, inputs, "bounded"), poison)


def check(seed: int, preset: str, target: str, timeout: float) -> dict:
    warp = 32 if target in WARP32 or target.startswith("sm_") else 64
    rec = {"seed": seed, "preset": preset, "target": target}
    t0 = time.perf_counter()
    prog = None
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(int(timeout))
    try:
        prog = program(seed, preset, warp)
        msgs = run_target(prog, target)
        rec["status"], rec["msg"] = ("mismatch", "\n".join(msgs)) if msgs else ("ok", "")
    except CompileError as e:
        rec["status"], rec["msg"] = "refused", f"{type(e).__name__}: {str(e)[:800]}"
    except Exception as e:  # noqa: BLE001 - every other exception on a legal program is a finding
        tb = traceback.extract_tb(e.__traceback__)[-1]
        rec["status"] = "crash"
        rec["msg"] = f"{type(e).__name__}: {str(e)[:800]} [{os.path.basename(tb.filename)}:{tb.lineno}]"
    finally:
        signal.alarm(0)
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    if rec["status"] != "ok" and prog is not None:
        rec["reproducer"] = fuzz.save_reproducer(prog, [(target, rec["msg"])],
                                                 name=f"{preset}_{seed}_{target}")
    return rec


def campaign(args) -> None:
    global ASSEMBLE_PTX
    ASSEMBLE_PTX = args.ptxas
    os.environ.setdefault("GLUON_TRACE_FUZZ_DIR", args.failures)
    targets = args.targets.split(",")
    with open(args.out, "a") as f:
        for seed in range(args.start, args.start + args.count):
            for target in targets:
                if args.slots and not _draws_slots(seed, args.preset, target):
                    continue
                rec = check(seed, args.preset, target, args.timeout)
                f.write(json.dumps(rec) + "\n")
                f.flush()


def _draws_slots(seed: int, preset: str, target: str) -> bool:
    from gluon_trace.fuzz.smem_stacked import draws_slots
    warp = 32 if target in WARP32 or target.startswith("sm_") else 64
    return draws_slots(program(seed, preset, warp))


def failure(prog, target: str) -> str:
    """What goes wrong running ``prog`` on ``target`` ('' when nothing does)."""
    try:
        return "\n".join(run_target(prog, target))
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e)[:800]}"


def fails(prog, target: str) -> bool:
    return bool(failure(prog, target))


def prune(prog, outputs: list):
    """The program storing only ``outputs``, without the nodes none of them needs."""
    by_name, need, todo = prog._by_name(), set(), list(outputs)
    while todo:
        n = by_name[todo.pop()]
        if n.name not in need:
            need.add(n.name)
            todo += list(n.uses)
    for n in prog.nodes:  # an atomic kept keeps its buffer an output: the buffer is its parameter
        if n.op == "atomic" and n.name in need and n.args[0] not in outputs:
            outputs = list(outputs) + [n.args[0]]
    nodes = [n for n in prog.nodes if n.name in need]
    return fuzz.Program(nodes, list(outputs), prog.num_warps, prog.warp_size, prog.n_valid,
                        prog.n_iter, prog.flag, prog.seed)


def shrink(path: str, target: str) -> None:
    """Drop outputs (and the nodes only they need) while ``target`` still fails; print the
    smallest program's kernel and save it beside ``path``."""
    scope: dict = {}
    exec(compile(open(path).read(), path, "exec"), scope)
    prog = fuzz.program_from_dict(scope["PROGRAM"])
    assert fails(prog, target), "the reproducer passes"
    changed = True
    while changed:
        changed = False
        for o in list(prog.outputs):
            if len(prog.outputs) > 1:
                cand = prune(prog, [x for x in prog.outputs if x != o])
                if len(cand.outputs) < len(prog.outputs) and fails(cand, target):
                    prog, changed = cand, True
    print(fuzz.kernel_source(prog))
    msg = failure(prog, target)
    print(msg)
    print(fuzz.save_reproducer(prog, [(target, msg)], directory=os.path.dirname(path),
                               name=os.path.basename(path)[:-3] + "_min"))


def summary(paths) -> None:
    counts = collections.defaultdict(collections.Counter)
    bad = []
    for p in paths:
        for line in open(p):
            r = json.loads(line)
            counts[(r["preset"], r["target"])][r["status"]] += 1
            if r["status"] != "ok":
                bad.append(r)
    for (preset, target), c in sorted(counts.items()):
        print(f"{preset:10s} {target:9s} " + " ".join(f"{k}={v}" for k, v in sorted(c.items())))
    for r in bad:
        print(f"{r['seed']} {r['preset']} {r['target']} {r['status']}: {r['msg'][:300]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    s = sub.add_parser("summary")
    s.add_argument("paths", nargs="+")
    s = sub.add_parser("shrink")
    s.add_argument("path")
    s.add_argument("target")
    ap.add_argument("--start", type=int, default=700000)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--out", default="fuzz_campaign.jsonl")
    ap.add_argument("--failures", default=".fuzz_failures")
    ap.add_argument("--ptxas", action="store_true", help="assemble the NVIDIA targets' PTX too")
    ap.add_argument("--slots", action="store_true",
                    help="only programs picking among slot views (the stacked preset's own family)")
    args = ap.parse_args()
    if args.cmd == "summary":
        summary(args.paths)
    elif args.cmd == "shrink":
        shrink(args.path, args.target)
    else:
        campaign(args)


if __name__ == "__main__":
    main()

"""Many random programs against one executor, with the CPU work spread over processes.

:func:`check_many` runs programs by seed: worker processes (one per CPU core, each in its own
process group) generate each program, check it in the interpreter against the reference
(exact), trace and compile it for the target (filling the disk cache) and evaluate the
reference's bounds; the main process only traces again (a disk-cache hit), runs the program
on the executor (the GPU, or a simulator) and compares. A compile that runs past
``budget_s`` is killed with its assembler and reported as over budget (seed listed), never
hangs the run. A progress line every ``progress_every`` programs tells how far a run got;
each failing program is saved as a reproducer, then shrunk (its random choices replayed with
some set to their simplest) within ``shrink_s`` seconds and saved again.

An executor is ``execute(prog, inputs, kernel, compiled) -> (got, poison)`` as
:func:`gluon_trace.fuzz.run_on_device` returns them; ``compiled`` is the backend's compiled
kernel for the target (the main process found it in the cache the workers filled).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait

from .evaluate import evaluate
from .program import Chooser, FuzzConfig, generate
from .runner import (kernel_of, make_inputs, mismatches, run_interpreter, save_reproducer)

REFUSED, DISAGREED, OVER_BUDGET = "refused", "disagreed", "over budget"


# ------------------------------------------------------------------------------ programs by choices
def recorded_program(seed: int, cfg: FuzzConfig | None = None):
    """(program, choices): ``random_program(seed)`` and the random ints it drew, which
    :func:`replayed_program` turns back into the same program."""
    rng, choices = random.Random(seed), []

    def draw(lo, hi):
        v = rng.randint(lo, hi)
        choices.append(v)
        return v
    return generate(Chooser(draw), cfg), choices


def replayed_program(choices: list, cfg: FuzzConfig | None = None):
    """The program the choices make; each is clamped to what is asked then, and past the
    end every choice is the simplest (so a shorter or smaller list is a simpler program)."""
    it = iter(choices)

    def draw(lo, hi):
        return min(max(next(it, lo), lo), hi)
    return generate(Chooser(draw), cfg)


def source_name(key) -> str:
    """The kernel's file name: fixed per program, so worker and main trace the same IR text
    (it holds locations) and the main process hits the disk cache the worker filled."""
    return f"<gluon_trace.fuzz {key}>"


def trace_as_launched(prog, target: str, kernel):
    """The TracedKernel a launch with real arrays gets: pointers (16-byte aligned, as
    allocators give them) and the run-time ints by value (their divisibility is traced)."""
    from .. import dtypes as dt
    from .. import language as gl
    ptrs = [gl.pointer(dt.BY_NAME[n.dtype]) for n in prog.inputs] + \
        [gl.pointer(dt.BY_NAME[prog.node(o).dtype]) for o in prog.outputs]
    return kernel.trace(*ptrs, prog.n_valid, prog.n_iter, prog.flag, num_warps=prog.num_warps, target=target)


# ------------------------------------------------------------------------------ the workers' part
@dataclass
class Task:
    key: object                  # the seed, or (seed, "shrink", i)
    seed: int | None = None      # generate from the seed ...
    choices: list | None = None  # ... or replay these choices


@dataclass
class Prepared:
    """What a worker found for one program (everything but running it on the target)."""
    key: object
    choices: list = field(default_factory=list)
    program: dict | None = None
    failures: list = field(default_factory=list)   # (where, message, kind)
    reference: dict | None = None                  # name -> Val, the bounded reference
    compile_s: float = 0.0


def prepare(task: Task, target: str, cfg: FuzzConfig | None) -> Prepared:
    from .program import program_to_dict
    if task.choices is None:
        prog, choices = recorded_program(task.seed, cfg)
    else:
        prog, choices = replayed_program(task.choices, cfg), list(task.choices)
    out = Prepared(task.key, choices, program_to_dict(prog))
    try:
        kernel = kernel_of(prog, fname=source_name(task.key))
    except Exception as e:  # noqa: BLE001 - the rendered source must always define a kernel
        out.failures.append(("render", f"{type(e).__name__}: {e}", REFUSED))
        return out
    inputs = make_inputs(prog)
    try:
        got, poison = run_interpreter(prog, inputs, kernel)
        out.failures += [("interpreter", m, DISAGREED)
                         for m in mismatches(prog, got, evaluate(prog, inputs, "exact"), poison)]
    except Exception as e:  # noqa: BLE001 - a refusal or crash of a legal program is a finding
        out.failures.append(("interpreter", f"{type(e).__name__}: {str(e)[:500]}", REFUSED))
    t0 = time.perf_counter()
    try:
        trace_as_launched(prog, target, kernel).compile(target)
    except Exception as e:  # noqa: BLE001
        out.failures.append((target, f"{type(e).__name__}: {str(e)[:500]}", REFUSED))
        return out
    finally:
        out.compile_s = time.perf_counter() - t0
    out.reference = evaluate(prog, inputs, "bounded")
    return out


def _serve(conn, target: str, cfg) -> None:
    os.setsid()  # its own process group: killing it on a budget overrun takes the assembler too
    conn.send("ready")
    while True:
        task = conn.recv()
        if task is None:
            return
        conn.send(prepare(task, target, cfg))


class _Worker:
    def __init__(self, ctx, target, cfg):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, target, cfg), daemon=True)
        self.proc.start()
        child.close()
        self.ready, self.task, self.started = False, None, 0.0

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker's own group (it called setsid)
        except (ProcessLookupError, PermissionError):
            self.proc.kill()
        self.proc.join()
        self.conn.close()


class Pool:
    """Worker processes that prepare tasks, each within ``budget_s`` seconds."""

    def __init__(self, workers: int, target: str, cfg: FuzzConfig | None, budget_s: float):
        self.ctx = mp.get_context("spawn")  # the main process may hold a CUDA context: never fork it
        self.target, self.cfg, self.budget_s = target, cfg, budget_s
        self.workers = [_Worker(self.ctx, target, cfg) for _ in range(max(1, workers))]
        self.queue: list[Task] = []

    def submit(self, tasks) -> None:
        self.queue.extend(tasks)

    def cancel(self) -> None:
        self.queue.clear()

    @property
    def busy(self) -> bool:
        return bool(self.queue) or any(w.task is not None for w in self.workers)

    def _dispatch(self) -> None:
        for w in self.workers:
            if w.ready and w.task is None and self.queue:
                w.task, w.started = self.queue.pop(0), time.monotonic()
                w.conn.send(w.task)

    def poll(self, timeout: float) -> list[Prepared]:
        """Results ready within ``timeout`` s (over-budget and crashed tasks as failures)."""
        self._dispatch()
        done = []
        for conn in wait([w.conn for w in self.workers], timeout):
            w = next(w for w in self.workers if w.conn is conn)
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                if not w.ready:  # it could not start (an import failing): no run would go better
                    raise RuntimeError(f"a fuzz worker process died while starting (exit code "
                                       f"{w.proc.exitcode}); see its output above") from None
                lost = self._replace(w, f"the worker preparing it died (exit code {w.proc.exitcode})", REFUSED)
                if lost is not None:
                    done.append(lost)
                continue
            if msg == "ready":
                w.ready = True
            elif time.monotonic() - w.started > self.budget_s:  # finished, but late
                done.append(Prepared(msg.key, msg.choices, None, [("compile", f"compile took "
                            f"{time.monotonic() - w.started:.1f} s, past its budget of {self.budget_s:g} s", OVER_BUDGET)]))
                w.task = None
            else:
                w.task = None
                done.append(msg)
        now = time.monotonic()
        for w in list(self.workers):
            if w.task is not None and now - w.started > self.budget_s:
                done.append(self._replace(w, f"compile ran past its budget of {self.budget_s:g} s "
                                             "(killed)", OVER_BUDGET))
        self._dispatch()
        return done

    def _replace(self, w: _Worker, why: str, kind: str) -> Prepared | None:
        """A new worker for ``w`` (killed); what its task (if any) came to."""
        task = w.task
        w.kill()
        self.workers[self.workers.index(w)] = _Worker(self.ctx, self.target, self.cfg)
        if task is None:
            return None
        return Prepared(task.key, list(task.choices or []), None, [("compile", why, kind)])

    def close(self) -> None:
        for w in self.workers:
            if w.task is None and w.proc.is_alive():
                try:
                    w.conn.send(None)
                except OSError:
                    pass
                w.proc.join(5)
            if w.proc.is_alive():
                w.kill()


# ------------------------------------------------------------------------------ the main process's part
@dataclass
class Report:
    total: int
    passed: list = field(default_factory=list)
    disagreed: list = field(default_factory=list)
    refused: list = field(default_factory=list)
    over_budget: list = field(default_factory=list)
    reproducers: dict = field(default_factory=dict)   # seed -> path (the shrunk one when shrunk)
    messages: dict = field(default_factory=dict)      # seed -> [(where, message)]
    recompiled: int = 0       # programs the main process compiled again (the cache missed)
    not_run: list = field(default_factory=list)       # seeds left when the deadline came
    elapsed_s: float = 0.0

    @property
    def checked(self) -> int:
        return len(self.passed) + len(self.disagreed) + len(self.refused)

    def line(self) -> str:
        return (f"{self.checked + len(self.over_budget)}/{self.total} programs: {len(self.passed)} passed, "
                f"{len(self.disagreed)} disagreed, {len(self.refused)} refused, "
                f"{len(self.over_budget)} over the compile budget; {self.elapsed_s:.0f} s"
                + (f"; {self.recompiled} compiled again in the main process" if self.recompiled else ""))


def _run(p: Prepared, target: str, execute) -> tuple[list, object]:
    """Failures of a prepared program on the executor (where, message, kind)."""
    from .program import program_from_dict
    failures = list(p.failures)
    if p.program is None or p.reference is None:
        return failures, None
    prog = program_from_dict(p.program)
    hit = None
    try:
        kernel = kernel_of(prog, fname=source_name(p.key))
        compiled = trace_as_launched(prog, target, kernel).compile(target)
        hit = compiled.extra.get("disk_cache_hit")
        got, poison = execute(prog, make_inputs(prog), kernel, compiled)
        failures += [(target, m, DISAGREED) for m in mismatches(prog, got, p.reference, poison)]
    except Exception as e:  # noqa: BLE001 - a refused or crashing legal program is a finding
        failures.append((target, f"{type(e).__name__}: {str(e)[:500]}", REFUSED))
    return failures, hit


def _kind(failures) -> str | None:
    kinds = {k for _, _, k in failures}
    for k in (OVER_BUDGET, DISAGREED, REFUSED):
        if k in kinds:
            return k
    return None


def check_many(seeds, execute, *, target: str, cfg: FuzzConfig | None = None, workers: int | None = None,
               budget_s: float = 120.0, progress_every: int = 100, shrink_s: float = 60.0,
               deadline_s: float | None = None, directory: str = ".fuzz_failures", log=None) -> Report:
    """Check the programs of ``seeds`` on ``execute`` (see the module's docstring)."""
    from .program import program_from_dict
    log = log or (lambda s: print(s, flush=True))
    seeds = list(seeds)
    t0 = time.monotonic()
    rep = Report(len(seeds))
    pool = Pool(workers or default_workers(), target, cfg, budget_s)
    failing: dict = {}  # seed -> (choices, where set)
    log(f"[fuzz] {len(seeds)} programs from seed {seeds[0] if seeds else 0} on {target}, "
        f"{len(pool.workers)} compile workers, {budget_s:g} s compile budget per program "
        "(a program past it is killed and counted as over budget, not run)")
    try:
        pool.submit(Task(s, seed=s) for s in seeds)
        next_line = progress_every
        while pool.busy:
            if deadline_s is not None and time.monotonic() - t0 > deadline_s and pool.queue:
                rep.not_run = [t.key for t in pool.queue]
                pool.cancel()
                log(f"[fuzz] deadline of {deadline_s:g} s: {len(rep.not_run)} programs not started")
            for p in pool.poll(0.05):
                failures, hit = _run(p, target, execute)
                rep.recompiled += hit is False
                kind = _kind(failures)
                {None: rep.passed, DISAGREED: rep.disagreed, REFUSED: rep.refused,
                 OVER_BUDGET: rep.over_budget}[kind].append(p.key)
                if kind in (DISAGREED, REFUSED):
                    pairs = [(w, m) for w, m, _ in failures]
                    rep.messages[p.key] = pairs
                    if p.program is not None:
                        rep.reproducers[p.key] = save_reproducer(program_from_dict(p.program), pairs, directory,
                                                                 name=f"seed_{p.key}")
                    failing[p.key] = (p.choices, {w for w, _ in pairs})
                rep.elapsed_s = time.monotonic() - t0
                if rep.checked + len(rep.over_budget) >= next_line:
                    log("[fuzz] " + rep.line())
                    next_line += progress_every
        if rep.over_budget:
            log(f"[fuzz] {len(rep.over_budget)} programs over the compile budget of {budget_s:g} s "
                f"(not run; compile time is issue 13's open item): seeds {sorted(rep.over_budget)}")
        shrink_end = time.monotonic() + shrink_s
        for seed, (choices, where) in sorted(failing.items()):
            if time.monotonic() >= shrink_end or not choices:
                break
            path = _shrink(pool, seed, choices, where, target, execute, shrink_end, directory)
            if path:
                rep.reproducers[seed] = path
                log(f"[fuzz] seed {seed} shrunk: {path}")
    finally:
        pool.close()
    rep.elapsed_s = time.monotonic() - t0
    log("[fuzz] done: " + rep.line())
    return rep


def _shrink(pool: Pool, seed, choices, where, target, execute, end: float, directory) -> str | None:
    """Greedy: try the choices cut short, then each choice set to its simplest (many tried at
    once on the workers); keep the first that still fails in the same place; repeat."""
    from .program import program_from_dict
    best, best_prog, best_msgs, n = list(choices), None, None, 0

    def candidates(cs):
        for k in (len(cs) // 2, 3 * len(cs) // 4):
            if 0 < k < len(cs):
                yield cs[:k]
        for i, v in enumerate(cs):
            for simpler in (0, v // 2):
                if simpler != v:
                    yield cs[:i] + [simpler] + cs[i + 1:]
    improved = True
    while improved and time.monotonic() < end:
        improved = False
        batch = list(candidates(best))
        for start in range(0, len(batch), len(pool.workers)):
            tasks = [Task((seed, "shrink", n + i), choices=c) for i, c in enumerate(batch[start:start + len(pool.workers)])]
            n += len(tasks)
            pool.submit(tasks)
            results = {}
            while pool.busy and time.monotonic() < end:
                for p in pool.poll(0.05):
                    results[p.key] = p
            pool.cancel()
            while pool.busy:  # a task already running when time ran out: let it finish or hit the budget
                for p in pool.poll(0.05):
                    results[p.key] = p
            for t in tasks:
                p = results.get(t.key)
                if p is None or p.program is None:
                    continue
                failures, _ = _run(p, target, execute)
                if _kind(failures) in (DISAGREED, REFUSED) and where & {w for w, _, _ in failures}:
                    best, best_prog, best_msgs = t.choices, p.program, [(w, m) for w, m, _ in failures]
                    improved = True
                    break
            if improved or time.monotonic() >= end:
                break
    if best_prog is None:
        return None
    return save_reproducer(program_from_dict(best_prog), best_msgs, directory, name=f"seed_{seed}_shrunk")


def default_workers() -> int:
    """$GLUON_TRACE_FUZZ_WORKERS, else one per CPU core but the one the main process
    launches and compares on."""
    return int(os.environ.get("GLUON_TRACE_FUZZ_WORKERS", "0")) or max(1, (os.cpu_count() or 2) - 1)


"""Variants and autotuning: many configurations of one kernel, compiled in parallel, timed,
the best picked and remembered.

A configuration is a dict of constexprs plus launch options (``num_warps``); ``configs``
may be any iterable of them (a list, a generator expression) or a function returning one
(called with no arguments, or with the kernel's named arguments). :func:`compile_variants`
traces and assembles every configuration on a thread pool: the tracer's builder is
thread-local, so tracing in threads is safe, and assemblers (ptxas, clang) are
subprocesses that run outside the GIL. :func:`benchmark` times the variants: with CUDA
events on a GPU (warm-up, median, L2 flushed by writing a 256 MB buffer before each run),
or with the wall clock of interpreter runs on the CPU, labelled as such. :func:`sweep`
does both. :func:`autotune` wraps a ``@gt.jit`` kernel as Triton's ``triton.autotune``
does: ``kernel[grid](...)`` tunes on its first call per key and keeps the choice in a
JSON file under the gluon_trace cache directory.

A configuration that fails (trace error, assembler error, too much shared memory, a
launch failure) is reported and skipped; only when every one fails is it an error.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import backend as backends
from .cache import cache_dir
from .errors import ArgumentError, CompileError, GluonTraceError, LaunchError, user_location
from .jit import LAUNCH_OPTIONS, JITFunction, TracedKernel

__all__ = ["Config", "Variant", "Sweep", "compile_variants", "benchmark", "sweep", "autotune", "make_timer", "time_one",
           "descriptor",
           "Autotuner", "L2_FLUSH_BYTES"]

L2_FLUSH_BYTES = 256 * 1024 * 1024


# ------------------------------------------------------------------------ configurations
class Config(dict):
    """One configuration: constexprs and launch options (``num_warps``; the kernel's
    default, 4, when absent).

    ``Config(BLOCK=128, num_warps=4)`` or ``Config({"BLOCK": 128}, num_warps=4)``; a plain
    dict works wherever a Config does."""

    def __init__(self, values=None, **kw):
        super().__init__(values or {}, **kw)

    @property
    def constexprs(self) -> dict:
        return {k: v for k, v in self.items() if k not in LAUNCH_OPTIONS}

    @property
    def options(self) -> dict:
        return {k: v for k, v in self.items() if k in LAUNCH_OPTIONS}

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.items())

    def __repr__(self) -> str:
        return f"Config({self.label})"

    def __hash__(self):
        return hash(tuple(sorted((k, repr(v)) for k, v in self.items())))


def _configs(configs, named_args: dict | None = None) -> list[Config]:
    if callable(configs) and not isinstance(configs, (list, tuple)):
        params = inspect.signature(configs).parameters
        configs = configs(named_args or {}) if params else configs()
    out = []
    for c in configs:
        if not isinstance(c, dict):
            raise ArgumentError(f"a configuration must be a dict of constexprs and num_warps, got {c!r}",
                                user_location())
        out.append(c if isinstance(c, Config) else Config(c))
    if not out:
        raise ArgumentError("no configurations to try", user_location())
    return out


def descriptor(tensor, block_shape, layout=None):
    """A TMA descriptor argument whose block shape names configuration keys:
    ``gv.sweep(matmul_hopper, configs, gv.descriptor(a, ["BM", "BK"]), ...)`` builds
    ``TensorDescriptor.from_tensor(a, [BM, BK], layout)`` per configuration (the layout
    defaults to NVMMASharedLayout.get_default_for the block). See ConfigDescriptor."""
    from .sweep_workers import ConfigDescriptor
    return ConfigDescriptor(tensor, block_shape, layout)


# ------------------------------------------------------------------------------ variants
@dataclass(eq=False)
class Variant:
    config: Config
    traced: TracedKernel | None = None
    compiled: object = None          # a CompiledKernel, for GPU targets
    error: str | None = None         # one paragraph: what went wrong
    stage: str | None = None         # where: "trace", "compile" or "run"
    compile_s: float = 0.0
    times_ms: list = field(default_factory=list)
    worker: int | None = None        # pid of the process that compiled it, when not this one
    device: str | None = None        # where it was timed
    timed_in: int | None = None      # pid of the process that timed it

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def time_ms(self) -> float | None:
        if not self.times_ms:
            return None
        t = sorted(self.times_ms)
        n = len(t)
        return t[n // 2] if n % 2 else (t[n // 2 - 1] + t[n // 2]) / 2

    def fail(self, stage: str, exc: BaseException) -> None:
        self.stage = stage
        if isinstance(exc, GluonTraceError):
            self.error = f"{type(exc).__name__}: {exc}"
        else:  # a library bug or an assembler crash: keep the innermost frame to find it
            import traceback
            tb = traceback.extract_tb(exc.__traceback__)
            where = f" ({os.path.basename(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
            self.error = f"{type(exc).__name__}: {exc}{where}"


class Sweep(list):
    """The variants of one kernel (a list of :class:`Variant`), with their timings."""

    def __init__(self, kernel, variants, target: str, timer: str | None = None):
        super().__init__(variants)
        self.kernel = kernel
        self.target = target
        self.timer = timer  # what the timings mean; None until benchmarked
        self.compiled_on = None  # "threads", "worker processes", "the executor given"
        self.devices: list = []  # names of the devices the timings ran on

    @property
    def succeeded(self) -> list:
        return [v for v in self if v.ok]

    @property
    def failed(self) -> list:
        return [v for v in self if not v.ok]

    @property
    def best(self) -> Variant | None:
        timed = [v for v in self if v.ok and v.times_ms]
        return min(timed, key=lambda v: v.time_ms) if timed else None

    def failures(self) -> str:
        if not self.failed:
            return ""
        lines = [f"{len(self.failed)} of {len(self)} configurations failed and were skipped:"]
        for v in self.failed:
            first = v.error.strip().split("\n")
            lines.append(f"  [{v.config.label}] at {v.stage}: {first[0]}")
            lines += [f"      {x}" for x in first[1:3]]
        return "\n".join(lines)

    def _columns(self):
        keys = []
        for v in self:
            keys += [k for k in v.config if k not in keys]
        gpu = any(v.compiled is not None for v in self)
        timed = any(v.times_ms for v in self)
        head = keys + (["time (ms)"] if timed else []) + (["regs", "smem (B)", "spills (B)"] if gpu else []) \
            + ["status"]
        rows = []
        for v in self:
            row = [v.config.get(k, "") for k in keys]
            if timed:
                row.append(f"{v.time_ms:.4f}" if v.time_ms is not None else "-")
            if gpu:
                c = v.compiled
                row += [c.registers, c.shared_bytes, c.spill_bytes] if c is not None else ["-"] * 3
            row.append("ok" if v.ok else f"failed at {v.stage}")
            rows.append(row)
        best = self.best
        return head, rows, (self.index(best) if best is not None else None)

    def table(self) -> str:
        from .display import table_text
        head, rows, mark = self._columns()
        out = [f"{len(self)} variants of {self.kernel.__name__} for {self.target}"
               + (f"; times: {self.timer}" if self.timer else "")]
        out.append(table_text(head, rows, mark))
        if mark is not None:
            out.append(f"* best: {self[mark].config.label} ({self[mark].time_ms:.4f} ms)")
        if self.failed:
            out.append(self.failures())
        return "\n".join(out)

    __str__ = table

    def __repr__(self) -> str:
        return f"<Sweep of {len(self)} variants of {self.kernel.__name__} for {self.target}>"

    def _repr_html_(self) -> str:
        import html
        from .display import table_html
        head, rows, mark = self._columns()
        out = [f"<div><b>{len(self)} variants</b> of <code>{html.escape(self.kernel.__name__)}</code> "
               f"for {html.escape(self.target)}"
               + (f"; times: <i>{html.escape(self.timer)}</i>" if self.timer else "") + "</div>",
               table_html(head, rows, mark)]
        if self.failed:
            out.append(f"<pre>{html.escape(self.failures())}</pre>")
        return "\n".join(out)

    def plot(self, x: str | None = None, ax=None):
        """Time against configuration: a line per setting of the other parameters when
        ``x`` names one (e.g. "BLOCK"), else one bar per configuration. Needs matplotlib;
        without it, prints :meth:`table` and returns None."""
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            print(self.table())
            print("(matplotlib is not installed: pip install matplotlib for a plot)")
            return None
        timed = [v for v in self if v.ok and v.times_ms]
        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
        best = self.best
        if x is not None:
            groups: dict = {}
            for v in timed:
                rest = ", ".join(f"{k}={val}" for k, val in v.config.items() if k != x)
                groups.setdefault(rest, []).append(v)
            for rest, vs in groups.items():
                vs.sort(key=lambda v: v.config.get(x))
                ax.plot([v.config.get(x) for v in vs], [v.time_ms for v in vs], marker="o", label=rest)
            xs = sorted({v.config.get(x) for v in timed}, key=str)
            if all(isinstance(val, int) and val > 0 for val in xs):
                xs.sort()
                ax.set_xscale("log", base=2)
                ax.set_xticks(xs, [str(val) for val in xs])
                ax.minorticks_off()
            if best is not None:
                ax.plot([best.config.get(x)], [best.time_ms], marker="*", markersize=16, color="gold",
                        markeredgecolor="black", linestyle="none", label="best")
            ax.set_xlabel(x)
            if len(groups) > 1:  # beside the axes: a legend inside would cover the lines
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        else:
            labels = [v.config.label for v in timed]
            ax.bar(range(len(timed)), [v.time_ms for v in timed],
                   color=["gold" if v is best else "tab:blue" for v in timed])
            ax.set_xticks(range(len(timed)), labels, rotation=75, fontsize=7, ha="right")
        ax.set_ylabel("time (ms)")
        ax.set_title(f"{self.kernel.__name__}: {self.timer or 'not timed'}", fontsize=9)
        return ax


# ------------------------------------------------------------------------ progress bars
class _TextBar:
    """A progress bar for when tqdm is not installed: one line, redrawn in place."""

    def __init__(self, total: int, desc: str, stream=None):
        self.total, self.desc, self.n = total, desc, 0
        self.stream = stream or sys.stderr
        self._draw()

    def _draw(self):
        width = 30
        done = width * self.n // max(self.total, 1)
        self.stream.write(f"\r{self.desc} [{'#' * done}{'.' * (width - done)}] {self.n}/{self.total}")
        self.stream.flush()

    def update(self, n: int = 1):
        self.n += n
        self._draw()

    def close(self):
        self.stream.write("\n")
        self.stream.flush()


class _NoBar:
    def update(self, n=1):
        pass

    def close(self):
        pass


def _progress(total: int, desc: str, enabled: bool):
    if not enabled:
        return _NoBar()
    try:
        import importlib.util
        if importlib.util.find_spec("ipywidgets") is not None:
            from tqdm.auto import tqdm
        else:  # tqdm.auto without ipywidgets warns in notebooks; the text bar works everywhere
            from tqdm.std import tqdm
        return tqdm(total=total, desc=desc, file=sys.stderr, leave=True)
    except ImportError:
        return _TextBar(total, desc)


# ----------------------------------------------------------------------------- compiling
def _default_target(args, options) -> str:
    name = options.get("backend") or backends.pick(list(args))
    return backends.get(name).default_target(list(args))


def _compile_one(kernel: JITFunction, v: Variant, args, fixed: dict, target: str) -> Variant:
    from .sweep_workers import per_config
    t0 = time.perf_counter()
    try:
        args, cfg = per_config(kernel, args, v.config)
        v.traced = kernel.trace(*args, **{**fixed, **cfg}, target=target)
    except Exception as e:
        v.fail("trace", e)
        return v
    if target != "interpreter":
        try:
            v.compiled = backends.for_target(target).compile(v.traced.graph, target)
        except Exception as e:
            v.fail("compile", e)
    v.compile_s = time.perf_counter() - t0
    return v


def _take_compiled(kernel: JITFunction, v: Variant, res: dict, args, fixed: dict, target: str) -> None:
    """Fill ``v`` from a compile worker's plain-data result."""
    v.worker = res.get("pid")
    v.compile_s = res.get("compile_s", 0.0)
    if res["error"] is not None:
        v.stage, v.error = res["stage"], res["error"]
    if res["graph"] is not None:
        from .sweep_workers import per_config
        args, cfg = per_config(kernel, args, v.config)
        bound, opts = kernel._bind(args, {**fixed, **cfg}, None)
        v.traced = TracedKernel(kernel, res["graph"], bound, {**opts, "target": target})
    v.compiled = res.get("compiled")


def _compile_on(pool, kernel, ref, variants, args, fixed, target, bar) -> list:
    """Compile on ``pool``; returns the variants a broken process pool left undone."""
    from concurrent.futures import as_completed
    from concurrent.futures.process import BrokenProcessPool
    from . import sweep_workers as sw
    specs = tuple(sw.spec_of(a) for a in args)
    futures = {}
    try:
        for v in variants:
            futures[pool.submit(sw.compile_task, ref or kernel, dict(v.config), specs, fixed, target)] = v
    except BrokenProcessPool:
        return list(variants)
    broken = []
    for f in as_completed(futures):
        v = futures[f]
        try:
            _take_compiled(kernel, v, f.result(), args, fixed, target)
        except BrokenProcessPool:
            broken.append(v)
            continue
        except Exception as e:  # the executor could not run it (pickling, a dead worker)
            v.stage, v.error = "compile", f"the executor failed: {sw.describe_failure(e)}"
        bar.update(1)
    return [v for v in variants if v in broken]


def compile_variants(kernel: JITFunction, configs, *args, target: str | None = None,
                     workers: int | None = None, executor=None, progress: bool = True, **fixed) -> Sweep:
    """Trace (and, for a GPU target, emit and assemble) ``kernel`` once per configuration.
    ``args`` are the kernel's arguments, real or type specs (``gl.pointer(gl.float32)``);
    ``fixed`` holds constexprs shared by all.

    Where the work runs: ``executor`` (any ``concurrent.futures.Executor``: a process
    pool, Ray's or Dask's) gets one task per configuration: the kernel by module path
    and name (:class:`~gluon_trace.sweep_workers.KernelRef`; a kernel defined in
    ``__main__`` goes as itself, which executors that pickle by value accept), type
    specs of the arguments (no data), plain dicts back. Without one, GPU targets
    compile in a pool of ``workers`` processes (default: one per CPU) kept for the whole
    session; the interpreter target, and kernels no worker process could import
    (defined in ``__main__`` or a notebook), are traced on threads here."""
    from concurrent.futures import ThreadPoolExecutor, as_completed  # here: `import gluon_trace` stays light
    from . import sweep_workers as sw
    options = {k: fixed[k] for k in LAUNCH_OPTIONS if k in fixed}
    if target is None:
        target = options.get("target") or _default_target(args, options)
    fixed = {k: v for k, v in fixed.items() if k not in ("target", "backend")}
    named = dict(zip([p.name for p in kernel.params], args)) | fixed
    variants = [Variant(c) for c in _configs(configs, named)]
    ref = sw.kernel_ref(kernel)
    pool, where = executor, "the executor given"
    if pool is None and target != "interpreter" and ref is not None and len(variants) > 1:
        pool, where = sw.default_compile_pool(workers), "worker processes"
    bar = _progress(len(variants), f"compiling {len(variants)} variants for {target}", progress)
    todo = variants
    if pool is not None:
        todo = _compile_on(pool, kernel, ref, variants, args, fixed, target, bar)
        if todo and executor is None:
            # the processes could not start: typically a script whose top level is not under
            # `if __name__ == "__main__":` (each worker re-imports it); threads still work
            sw.drop_compile_pool()
            where = ("threads (worker processes could not start; a script that starts them must "
                     "guard its top level with `if __name__ == \"__main__\":`)")
            for v in todo:
                v.stage = v.error = None
        else:
            for v in todo:
                v.stage, v.error = "compile", "the executor failed: its worker processes died (BrokenProcessPool)"
            todo = []
    if todo:
        if pool is None:
            where = "threads" + ("" if target == "interpreter" or ref is not None else
                                 f" ({kernel.__name__} is not importable by name (defined in __main__, a "
                                 "notebook or a function): worker processes could not find it)")
        workers = workers or os.cpu_count() or 1
        with ThreadPoolExecutor(max_workers=min(workers, len(todo))) as threads:
            for f in as_completed([threads.submit(_compile_one, kernel, v, args, fixed, target) for v in todo]):
                f.result()
                bar.update(1)
    bar.close()
    result = Sweep(kernel, variants, target)
    result.compiled_on = where
    if progress and result.failed:
        print(result.failures(), file=sys.stderr)
    return result


# ------------------------------------------------------------------------------- timing
class _WallTimer:
    label = "interpreter wall-clock on the CPU (median of {n} runs; not GPU time)"

    def __init__(self, reps: int | None = None, **_):
        self.reps = reps or 3

    def measure(self, fn, warmup: int | None = None) -> list[float]:
        for _ in range(1 if warmup is None else warmup):
            fn()
        out = []
        for _ in range(self.reps):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out


class _GpuTimer:
    """CUDA events around each run (torch's, which work on ROCm too); before each run
    a 256 MB buffer is zeroed so no run finds the previous one's data in L2. The flush
    is queued before the start event, so launch overhead hides behind it."""
    label = "GPU time (CUDA events, median of {n} runs after warm-up, L2 flushed)"

    def __init__(self, reps: int | None = None, flush_l2: bool = True, rep_ms: float = 40.0,
                 warmup_ms: float = 10.0):
        import torch
        self.torch = torch
        self.reps, self.rep_ms, self.warmup_ms = reps, rep_ms, warmup_ms
        self.buf = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda") if flush_l2 else None
        if not flush_l2:
            self.label = "GPU time (CUDA events, median of {n} runs after warm-up, L2 not flushed)"

    def _flush(self):
        if self.buf is not None:
            self.buf.zero_()

    def measure(self, fn, warmup: int | None = None) -> list[float]:
        torch = self.torch
        fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(5):
            fn()
        e.record()
        torch.cuda.synchronize()
        est = max(s.elapsed_time(e) / 5, 1e-3)
        for _ in range(warmup if warmup is not None else max(1, int(self.warmup_ms / est))):
            fn()
        n = self.reps or max(5, min(1000, int(self.rep_ms / est)))
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            self._flush()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        return [a.elapsed_time(b) for a, b in zip(starts, ends)]


def _grid3(grid, meta: dict) -> tuple:
    if callable(grid):
        grid = grid(meta)
    if isinstance(grid, int):
        grid = (grid,)
    return tuple(int(g) for g in grid) + (1,) * (3 - len(grid))


def _copy(a):
    return a.clone() if hasattr(a, "clone") else a.copy()


def _restore(dst, src):
    if hasattr(dst, "copy_"):
        dst.copy_(src)
    else:
        dst[...] = src


def make_timer(backend: str, reps=None, flush_l2: bool = True):
    return _WallTimer(reps) if backend == "interpreter" else _GpuTimer(reps, flush_l2)


def time_one(kernel: JITFunction, be, timer, args, fixed: dict, config: dict, grid3: tuple, opts: dict,
             loc=None, stream=None) -> list:
    """Times (ms) of one configuration on ``args`` (live on this process's device)."""
    from .sweep_workers import per_config
    args, config = per_config(kernel, args, config)
    bound, o = kernel._bind(args, {**fixed, **config}, loc)
    # the device the arguments live on decides, whatever target the sweep compiled for
    o["target"] = be.default_target(list(bound.values()))
    graph = kernel._trace(bound, o, loc).graph
    runtime = [val for k, val in bound.items() if k not in kernel.constexprs]
    saved = {k: _copy(bound[k]) for k in opts.get("restore_value", ())}
    reset = opts.get("reset_to_zero", ())

    def run_once():
        for k, val in saved.items():
            _restore(bound[k], val)
        for k in reset:
            bound[k][...] = 0
        be.run(graph, grid3, runtime, stream, loc=loc)

    times = timer.measure(run_once, opts.get("warmup"))
    for k, val in saved.items():  # leave the arguments as the caller gave them
        _restore(bound[k], val)
    return times


def _visible_gpus(name: str) -> list:
    if name == "interpreter":
        return [None]
    try:
        import torch
        return list(range(torch.cuda.device_count())) or [None]
    except ImportError:
        return [None]


def benchmark(variants: Sweep, *args, grid, reps: int | None = None, warmup: int | None = None,
              flush_l2: bool = True, restore_value=(), reset_to_zero=(), progress: bool = True,
              executor=None, devices=None, **fixed) -> Sweep:
    """Time each working variant on ``args`` (which decide the backend: numpy arrays run
    on the interpreter, GPU tensors on their GPU). ``grid`` may be a function of the
    arguments and the configuration (``lambda meta: (cdiv(n, meta["BLOCK"]),)``).
    ``restore_value`` / ``reset_to_zero`` name arguments a run changes (atomics,
    in-place updates): restored / zeroed before each run, outside the timing.

    Spreading: ``devices`` (default: every GPU torch sees; the interpreter has one) get
    the variants round-robin. With more than one, or with an ``executor``, batches of
    variants go out as tasks naming their device: the arguments travel as CPU copies and
    are rebuilt on that device, results come back as plain data. Without an executor
    each device gets its own worker process (:class:`~gluon_trace.sweep_workers.PerDevicePool`),
    so no two timings share a GPU; with a cluster's executor, give each task a GPU of
    its own. One device and no executor: timed here, in this process."""
    from . import sweep_workers as sw
    loc = user_location()
    options = {k: fixed.pop(k) for k in ("backend", "stream") if k in fixed}
    name = options.get("backend") or backends.pick(list(args))
    be = backends.get(name)
    topts = {"reps": reps, "flush_l2": flush_l2, "warmup": warmup, "restore_value": tuple(restore_value),
             "reset_to_zero": tuple(reset_to_zero)}
    devices = list(devices) if devices is not None else _visible_gpus(name)
    items = []
    for i, v in enumerate(variants):
        if not v.ok:
            continue
        try:
            a, cfg = sw.per_config(variants.kernel, args, v.config)
            bound, opts = variants.kernel._bind(a, {**fixed, **cfg}, loc)
            items.append((i, dict(v.config), _grid3(grid, {**v.config, **bound, **opts})))
        except Exception as e:
            v.fail("run", e)
    bar = _progress(len(items), f"timing on {name}" + (f" ({len(devices)} devices)" if len(devices) > 1 else ""),
                    progress)
    n_runs, label = [], None
    if executor is None and len(devices) <= 1:
        try:
            timer = make_timer(name, reps, flush_l2)
        except ImportError:
            raise LaunchError(f"timing on the {name} GPU uses torch's CUDA events: install torch",
                              loc) from None
        label = timer.label
        here = "cpu (interpreter)" if name == "interpreter" else sw._device_name(devices[0])
        for i, cfg, g3 in items:
            v = variants[i]
            try:
                v.times_ms = time_one(variants.kernel, be, timer, args, fixed, cfg, g3, topts, loc,
                                      options.get("stream"))
                v.device, v.timed_in = here, os.getpid()
                n_runs.append(len(v.times_ms))
            except Exception as e:
                v.fail("run", e)
            bar.update(1)
        variants.devices = [here]
    else:
        from concurrent.futures import as_completed
        import uuid
        ref = sw.kernel_ref(variants.kernel) or variants.kernel
        shipped = tuple(sw.ship(a) for a in args)
        pool = executor or sw.PerDevicePool(devices)
        token = uuid.uuid4().hex
        futures = {}
        for dev, idx in sw.split_over_devices(len(items), devices):
            batch = [items[j] for j in idx]
            futures[pool.submit(sw.time_task, ref, batch, shipped, fixed, name, device=dev, timer_opts=topts,
                                token=token)] = batch
        names = []
        try:
            for f in as_completed(futures):
                batch = futures[f]
                try:
                    out = f.result()
                except Exception as e:  # the executor could not run the batch
                    for i, _, _ in batch:
                        variants[i].stage, variants[i].error = "run", f"the executor failed: {sw.describe_failure(e)}"
                    bar.update(len(batch))
                    continue
                label = out["label"]
                if out["device_name"] not in names:
                    names.append(out["device_name"])
                for r in out["results"]:
                    v = variants[r["index"]]
                    if r["error"] is not None:
                        v.stage, v.error = "run", r["error"]
                    else:
                        v.times_ms, v.device = r["times_ms"], f"{out['device_name']} #{out['device']}"
                        v.timed_in = out["pid"]
                        n_runs.append(len(v.times_ms))
                bar.update(len(batch))
        finally:
            if executor is None:
                pool.shutdown()
        variants.devices = names
    bar.close()
    if label is None:
        label = (_WallTimer.label if name == "interpreter" else _GpuTimer.label)
    variants.timer = label.format(n=max(n_runs) if n_runs else 0)
    return variants


def sweep(kernel: JITFunction, configs, *args, grid, target: str | None = None, workers=None,
          reps=None, warmup=None, flush_l2=True, restore_value=(), reset_to_zero=(),
          progress: bool = True, executor=None, devices=None, **fixed) -> Sweep:
    """:func:`compile_variants`, then :func:`benchmark` on ``args``: returns the Sweep,
    whose ``.best`` is the fastest configuration. ``executor`` (any
    ``concurrent.futures.Executor``) runs both the compiling and the timing; ``devices``
    lists the GPUs to time on (default: all)."""
    s = compile_variants(kernel, configs, *args, target=target, workers=workers, executor=executor,
                         progress=progress, **fixed)
    return benchmark(s, *args, grid=grid, reps=reps, warmup=warmup, flush_l2=flush_l2,
                     restore_value=restore_value, reset_to_zero=reset_to_zero, progress=progress,
                     executor=executor, devices=devices, **{k: v for k, v in fixed.items() if k != "target"})


# ---------------------------------------------------------------------------- autotune
def _key_part(v):
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return (str(v.dtype), tuple(int(s) for s in v.shape))
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return repr(v)


def _device_of(values, backend: str) -> str:
    """The model of GPU the arguments live on (the best tile for an H100 is not an A100's)."""
    if backend == "interpreter":
        return "cpu"
    for v in values:
        dev = getattr(v, "device", None)
        if getattr(dev, "type", None) == "cuda":
            from .sweep_workers import _device_name
            return _device_name(dev.index or 0)
    return backend


class Autotuner:
    """A ``@gt.jit`` kernel that picks its configuration by timing, once per key.

    ``kernel[grid](...)`` works as for the kernel itself, minus the tuned constexprs and
    ``num_warps``. The choice per key lives in memory and in a JSON file under
    ``gluon_trace.cache.cache_dir()/autotune`` (tied to the kernel's source and the
    configurations), so a new process does not tune again."""

    def __init__(self, fn: JITFunction, configs, key, *, reps=None, warmup=None, flush_l2=True,
                 restore_value=(), reset_to_zero=(), workers=None, progress=True, cache=True,
                 executor=None, devices=None):
        if not isinstance(fn, JITFunction):
            raise ArgumentError("@gt.autotune wraps a @gt.jit kernel: put @gt.autotune(...) above @gt.jit",
                                user_location())
        self.fn = fn
        self.__name__ = fn.__name__
        self.configs = configs
        self.key = key
        self.bench = dict(reps=reps, warmup=warmup, flush_l2=flush_l2, restore_value=tuple(restore_value),
                          reset_to_zero=tuple(reset_to_zero))
        self.workers, self.progress, self.use_disk = workers, progress, cache
        self.executor, self.devices = executor, devices
        self.choices: dict = {}   # key -> Config
        self.last_sweep: Sweep | None = None
        self.tuned = 0            # tunings run by this object (a disk hit does not count)

    def __repr__(self) -> str:
        return f"<gt.autotune of {self.fn!r}, key={self.key!r}>"

    # -- keys and the disk file
    def _key(self, named: dict, backend: str):
        if callable(self.key):
            k = self.key(named)
            parts = (k if isinstance(k, tuple) else (k,))
        else:
            parts = tuple(named.get(n) for n in self.key)
        dtypes = tuple(str(v.dtype) for v in named.values() if hasattr(v, "dtype") and hasattr(v, "shape"))
        return tuple(_key_part(p) for p in parts) + (dtypes, backend, _device_of(named.values(), backend))

    @property
    def cache_file(self) -> Path:
        try:
            src = inspect.getsource(self.fn.fn)
        except (OSError, TypeError):
            src = self.fn.fn.__qualname__
        from . import __version__
        ident = json.dumps([src, __version__, repr(self.configs if isinstance(self.configs, (list, tuple))
                                                   else getattr(self.configs, "__qualname__", ""))],
                           default=str)
        digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
        return cache_dir() / "autotune" / f"{self.fn.__name__}-{digest}.json"

    def _load(self) -> dict:
        try:
            return json.loads(self.cache_file.read_text()).get("choices", {})
        except (OSError, ValueError, AttributeError):
            return {}

    def _save(self, key, cfg: Config, best: Variant, timer: str) -> None:
        path = self.cache_file
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            choices = self._load()
            choices[repr(key)] = {"config": dict(cfg), "time_ms": best.time_ms, "timer": timer,
                                  "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                json.dump({"kernel": self.fn.__name__, "choices": choices}, f, indent=1, default=str)
            os.replace(tmp, path)  # atomic: a reader never sees half a file
        except OSError:
            pass  # a read-only cache costs a re-tune in the next process, never a failure

    # -- choosing
    def best_config(self, *args, **kwargs) -> Config:
        """The configuration used for these arguments (tuning first if needed)."""
        return self._choose(args, kwargs, user_location(), grid=kwargs.pop("grid", None))[0]

    def _choose(self, args, kwargs, loc, grid):
        kwargs = dict(kwargs)
        options = {k: kwargs.pop(k) for k in LAUNCH_OPTIONS if k in kwargs}
        try:
            named = self.fn.signature.bind_partial(*args, **kwargs).arguments
        except TypeError as e:
            raise ArgumentError(f"{self.fn.__name__}{self.fn.signature}: {e}", loc) from None
        be = options.get("backend") or (backends.for_target(options["target"]).name if options.get("target")
                                        else backends.pick(list(named.values())))
        key = self._key(dict(named), be)
        if key in self.choices:
            return self.choices[key], key
        if self.use_disk:
            hit = self._load().get(repr(key))
            if hit is not None:
                self.choices[key] = Config(hit["config"])
                return self.choices[key], key
        if grid is None:
            raise ArgumentError(f"{self.fn.__name__} has no tuned configuration for key {key}: "
                                "launch it (kernel[grid](...)) to tune", loc)
        configs = _configs(self.configs, dict(named))
        for c in configs:
            clash = sorted(set(c) & (set(kwargs) | set(options)))
            if clash:
                raise ArgumentError(f"{', '.join(clash)} is chosen by the autotuner (it is in the "
                                    "configurations); do not pass it", loc)
        s = sweep(self.fn, configs, *args, grid=grid, workers=self.workers, progress=self.progress,
                  executor=self.executor, devices=self.devices, **kwargs, **options, **self.bench)
        self.last_sweep = s
        self.tuned += 1
        best = s.best
        if best is None:
            raise CompileError(f"every configuration of {self.fn.__name__} failed:\n{s.failures()}", loc)
        self.choices[key] = best.config
        if self.use_disk:
            self._save(key, best.config, best, s.timer)
        return best.config, key

    def __getitem__(self, grid):
        return _TunedLauncher(self, grid)

    def run(self, *args, grid, **kwargs):
        return _TunedLauncher(self, grid)(*args, **kwargs)

    def trace(self, *args, **kwargs) -> TracedKernel:
        """Trace with the configuration already chosen for these arguments."""
        cfg = self._choose(args, kwargs, user_location(), grid=None)[0]
        return self.fn.trace(*args, **kwargs, **cfg)


class _TunedLauncher:
    __slots__ = ("tuner", "grid")

    def __init__(self, tuner: Autotuner, grid):
        self.tuner, self.grid = tuner, grid

    def __call__(self, *args, **kwargs):
        cfg, _ = self.tuner._choose(args, kwargs, user_location(), self.grid)
        return self.tuner.fn[self.grid](*args, **kwargs, **cfg)


def autotune(configs, key, **options):
    """Decorator: ``@gt.autotune(configs=[Config(BLOCK=128, num_warps=4), ...], key=["n_cols"])``
    above ``@gt.jit``. ``key`` is a list of argument names or a function of the named
    arguments; options: ``reps``, ``warmup``, ``flush_l2``, ``restore_value``,
    ``reset_to_zero``, ``workers``, ``progress``, ``cache`` (keep choices on disk),
    ``executor`` and ``devices`` (where to compile and time: see :func:`benchmark`).
    Choices are kept per key, backend and device model."""
    return lambda fn: Autotuner(fn, configs, key, **options)

"""What a sweep sends to other processes (or machines), and what runs there.

A sweep's work crosses process boundaries in two places: compiling (trace + emit +
assemble; ptxas and the emitter hold the GIL in parts, so processes beat threads) and
timing (one worker process per GPU). Anything a ``concurrent.futures.Executor`` accepts
works: a ``ProcessPoolExecutor``, Ray's ``RayExecutor``, Dask's ``client.get_executor()``.
So everything sent must pickle with the standard library:

- kernels go as a :class:`KernelRef` (module path + name, imported by the worker);
- arguments go as :class:`Shipped` values: numpy arrays as they are, torch tensors as CPU
  copies with their strides and device index, TensorDescriptors as their base tensor plus
  the block shape and layout; for compiling, only type specs go (no data);
- results come back as plain dicts.
"""
from __future__ import annotations

import importlib
import math
import os
import time
from dataclasses import dataclass

import numpy as np

__all__ = ["KernelRef", "kernel_ref", "ConfigDescriptor", "per_config", "Shipped", "ship", "land", "spec_of", "compile_task", "time_task",
           "PerDevicePool", "default_compile_pool", "describe_failure"]


# ------------------------------------------------------------------------------- kernels
@dataclass(frozen=True)
class KernelRef:
    """A ``@gt.jit`` kernel by where it lives: ``module:qualname``."""
    module: str
    qualname: str

    def resolve(self):
        obj = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return getattr(obj, "fn", obj) if type(obj).__name__ == "Autotuner" else obj


def kernel_ref(kernel):
    """A KernelRef when ``kernel`` can be imported by name from its module, else None (a
    kernel defined in ``__main__``, a notebook or a function body: a worker process could
    not find it; executors that pickle by value, such as Ray's and Dask's, still can)."""
    fn = kernel.fn
    mod, qual = fn.__module__, fn.__qualname__
    if mod in (None, "__main__") or "<locals>" in qual:
        return None
    ref = KernelRef(mod, qual)
    try:
        return ref if ref.resolve() is kernel else None
    except Exception:
        return None


def _kernel(k):
    return k.resolve() if isinstance(k, KernelRef) else k


# ----------------------------------------------------------------------------- arguments
class ConfigDescriptor:
    """A TMA descriptor whose block shape comes from each configuration, as a Triton
    autotuner's pre_hook sets it: ``gv.descriptor(a, ["BM", "BK"])`` becomes
    ``TensorDescriptor.from_tensor(a, [cfg["BM"], cfg["BK"]], layout)`` for each
    configuration (``layout``: NVMMASharedLayout.get_default_for the block, leading 1s
    dropped, unless given).
    The names it uses are taken out of the configuration before the kernel sees it,
    unless the kernel has a parameter of that name."""

    def __init__(self, tensor, block_shape, layout=None, dtype=None):
        self.tensor, self.block_shape, self.layout = tensor, list(block_shape), layout
        self.dtype = dtype  # a gl dtype, for a spec (no tensor)

    @property
    def keys(self) -> set:
        return {b for b in self.block_shape if isinstance(b, str)}

    def block(self, config: dict) -> list:
        missing = [b for b in self.block_shape if isinstance(b, str) and b not in config]
        if missing:
            from .errors import ArgumentError
            raise ArgumentError(f"a descriptor's block_shape {self.block_shape} names {', '.join(missing)}, "
                                f"which this configuration does not set ({dict(config)})", None)
        return [int(config[b]) if isinstance(b, str) else int(b) for b in self.block_shape]

    def _layout(self, block, dtype):
        from . import language as gl
        if self.layout is not None:
            return self.layout
        core = list(block)
        while len(core) > 2 and core[0] == 1:  # [1, BM, D] boxes take the 2-D tile's layout, as kernels expect
            core = core[1:]
        return gl.NVMMASharedLayout.get_default_for(core, dtype)

    def resolve(self, config: dict):
        from .nvidia.hopper import TensorDescriptor, _describe_array
        block = self.block(config)
        if self.tensor is None:
            return TensorDescriptor.type_spec(self.dtype, block, self._layout(block, self.dtype))
        dtype = _describe_array(self.tensor, None)[3]
        return TensorDescriptor.from_tensor(self.tensor, block, self._layout(block, dtype))

    def __repr__(self):
        return f"descriptor({type(self.tensor).__name__}, block_shape={self.block_shape})"


def per_config(kernel, args, config: dict) -> tuple[tuple, dict]:
    """``args`` with each ConfigDescriptor built for ``config``, and ``config`` without the
    names only descriptors use."""
    if not any(isinstance(a, ConfigDescriptor) for a in args):
        return tuple(args), dict(config)
    used = set().union(*(a.keys for a in args if isinstance(a, ConfigDescriptor)))
    params = {p.name for p in kernel.params}
    return (tuple(a.resolve(config) if isinstance(a, ConfigDescriptor) else a for a in args),
            {k: v for k, v in config.items() if k not in used or k in params})


@dataclass
class Shipped:
    """A tensor in transit: contents (numpy, or a CPU torch tensor), its element strides,
    and the GPU it lived on (None: a numpy array for the interpreter)."""
    data: object
    shape: tuple
    strides: tuple
    device: int | None
    torch: bool


@dataclass
class ShippedDesc:
    base: Shipped
    block_shape: list
    layout: object
    padding: str


def _is_torch(a) -> bool:
    return type(a).__module__.startswith("torch") and hasattr(a, "data_ptr")


def ship(a):
    """``a`` in a form that pickles and can be rebuilt on another process's device."""
    if isinstance(a, np.ndarray):
        return Shipped(np.ascontiguousarray(a), a.shape, tuple(s // a.itemsize for s in a.strides), None, False)
    if _is_torch(a):
        dev = a.device.index if a.device.type == "cuda" else None
        return Shipped(a.detach().cpu().contiguous(), tuple(a.shape), tuple(a.stride()),
                       (dev or 0) if a.device.type == "cuda" else None, True)
    if type(a).__name__ == "TensorDescriptor" and hasattr(a, "block_shape"):
        return ShippedDesc(ship(a.base), list(a.block_shape), a.layout, a.padding)
    if isinstance(a, ConfigDescriptor):
        return ConfigDescriptor(ship(a.tensor), a.block_shape, a.layout, a.dtype)
    return a


def land(s, device: int | None):
    """Rebuild a shipped value; GPU tensors go to ``device`` (the worker's GPU), keeping
    their strides (a padded view stays padded: TMA needs 16-byte row strides)."""
    if isinstance(s, ConfigDescriptor):
        return ConfigDescriptor(land(s.tensor, device), s.block_shape, s.layout, s.dtype)
    if isinstance(s, ShippedDesc):
        from .nvidia.hopper import TensorDescriptor
        return TensorDescriptor.from_tensor(land(s.base, device), s.block_shape, s.layout, s.padding)
    if not isinstance(s, Shipped):
        return s
    span = 1 + sum((n - 1) * st for n, st in zip(s.shape, s.strides)) if all(s.shape) else 0
    if s.torch:
        import torch
        where = f"cuda:{device if device is not None else s.device}" if s.device is not None else "cpu"
        out = torch.empty_strided(s.shape, s.strides, dtype=s.data.dtype, device=where)
        out.copy_(s.data)
        return out
    flat = np.zeros(max(span, 1), s.data.dtype)
    item = s.data.itemsize
    out = np.lib.stride_tricks.as_strided(flat, s.shape, tuple(st * item for st in s.strides))
    out[...] = s.data
    return out


def spec_of(a):
    """What compiling needs of an argument: its type, no data (pointers to 16-byte aligned
    memory, as allocators give them; descriptors as their type spec)."""
    from . import dtypes as dt
    from . import language as gl
    if type(a).__name__ == "TensorDescriptor" and hasattr(a, "ir_type"):
        return a.ir_type
    if isinstance(a, ConfigDescriptor):
        from .nvidia.hopper import _describe_array
        return ConfigDescriptor(None, a.block_shape, a.layout, _describe_array(a.tensor, None)[3])
    if isinstance(a, np.ndarray):
        return gl.pointer(dt.from_numpy(a.dtype))
    if _is_torch(a):
        return gl.pointer(dt.from_torch(a.dtype))
    return a


# ----------------------------------------------------------------------------- the tasks
def describe_failure(exc: BaseException) -> str:
    from .errors import GluonTraceError
    if isinstance(exc, GluonTraceError):
        return f"{type(exc).__name__}: {exc}"
    import traceback
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" ({os.path.basename(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


def compile_task(kernel, config: dict, specs: tuple, fixed: dict, target: str) -> dict:
    """Trace one configuration and, for a GPU target, emit and assemble it. Returns the
    graph (it pickles) and the CompiledKernel, or where and why it failed."""
    from . import backend as backends
    t0 = time.perf_counter()
    out = {"graph": None, "compiled": None, "error": None, "stage": None, "pid": os.getpid()}
    try:
        kern = _kernel(kernel)
        specs, config = per_config(kern, specs, config)
        traced = kern.trace(*specs, **{**fixed, **config}, target=target)
        out["graph"] = traced.graph
    except Exception as e:
        out.update(error=describe_failure(e), stage="trace")
        return out
    if target != "interpreter":
        try:
            out["compiled"] = backends.for_target(target).compile(traced.graph, target)
        except Exception as e:
            out.update(error=describe_failure(e), stage="compile")
    out["compile_s"] = time.perf_counter() - t0
    return out


_TIMERS: dict = {}   # per worker process: one timer (and its 256 MB L2-flush buffer) per setting
_LANDED: dict = {}   # per worker process: arguments already rebuilt on this device, by sweep token


def time_task(kernel, items: list, shipped: tuple, fixed: dict, backend: str, device, timer_opts: dict,
              token: str | None = None) -> dict:
    """Time ``items`` ([(index, config, grid3)]) on one device: the arguments are rebuilt
    there once per sweep, each configuration traced, compiled (disk-cache hits when a
    compile worker built it), warmed up and timed. Failures come back per item."""
    from . import backend as backends
    from .variants import make_timer, time_one
    kern = _kernel(kernel)
    if device is not None and backend != "interpreter":
        import torch
        torch.cuda.set_device(device)
    key = (token, device)
    args = _LANDED.get(key) if token else None
    if args is None:
        args = [land(s, device) for s in shipped]
        if token:
            _LANDED.clear()  # one sweep's arguments at a time
            _LANDED[key] = args
    tkey = (backend, device, tuple(sorted(timer_opts.items())))
    timer = _TIMERS.get(tkey)
    if timer is None:
        timer = _TIMERS[tkey] = make_timer(backend, timer_opts.get("reps"), timer_opts.get("flush_l2", True))
    be = backends.get(backend)
    results = []
    for index, config, grid3 in items:
        try:
            times = time_one(kern, be, timer, args, fixed, config, grid3, timer_opts)
            results.append({"index": index, "times_ms": times, "error": None})
        except Exception as e:
            results.append({"index": index, "times_ms": [], "error": describe_failure(e)})
    name = "cpu (interpreter)" if backend == "interpreter" else _device_name(device)
    return {"results": results, "device": device, "device_name": name, "pid": os.getpid(),
            "label": timer.label}


def _device_name(device) -> str:
    try:
        import torch
        return torch.cuda.get_device_name(device or 0)
    except Exception:
        return f"device {device}"


# ----------------------------------------------------------------------------- executors
def _forkserver_context():
    import multiprocessing as mp
    methods = mp.get_all_start_methods()
    ctx = mp.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        # workers fork from a server that has imported these once: they start in milliseconds
        ctx.set_forkserver_preload(["numpy", "gluon_trace", "gluon_trace.variants"])
    return ctx


_COMPILE_POOL = None


def default_compile_pool(workers: int | None = None):
    """Process pool for compiling, started once per process and reused by every sweep
    (forkserver: fork-safe with CUDA initialised in the parent, and fast to start)."""
    global _COMPILE_POOL
    from concurrent.futures import ProcessPoolExecutor
    workers = workers or os.cpu_count() or 1
    if _COMPILE_POOL is None or _COMPILE_POOL[1] != workers:
        if _COMPILE_POOL is not None:
            _COMPILE_POOL[0].shutdown(wait=False)
        _COMPILE_POOL = (ProcessPoolExecutor(max_workers=workers, mp_context=_forkserver_context()), workers)
        import atexit
        atexit.register(_COMPILE_POOL[0].shutdown)
    return _COMPILE_POOL[0]


def drop_compile_pool() -> None:
    global _COMPILE_POOL
    if _COMPILE_POOL is not None:
        _COMPILE_POOL[0].shutdown(wait=False, cancel_futures=True)
        _COMPILE_POOL = None


class PerDevicePool:
    """An Executor with one worker process per device: ``submit(time_task, ..., device=d)``
    (the ``device`` argument of :func:`time_task`, by keyword or position) runs on device
    ``d``'s own process, so two timings never share a GPU. ``devices`` may be any labels
    (tests use a fake list)."""

    def __init__(self, devices):
        from concurrent.futures import ProcessPoolExecutor
        ctx = _forkserver_context()
        self.devices = list(devices)
        self.pools = {d: ProcessPoolExecutor(max_workers=1, mp_context=ctx) for d in self.devices}

    def submit(self, fn, *args, **kwargs):
        device = kwargs.get("device", args[5] if len(args) > 5 else None)
        pool = self.pools.get(device) or self.pools[self.devices[0]]
        return pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait=True, cancel_futures=False):
        for p in self.pools.values():
            p.shutdown(wait=wait, cancel_futures=cancel_futures)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()
        return False


def split_over_devices(n: int, devices: list, per_device_tasks: int = 4) -> list[tuple]:
    """(device, [indices]) batches: variant i on device i mod len(devices), each device's
    share cut into up to ``per_device_tasks`` batches (the progress bar moves per batch)."""
    out = []
    for j, d in enumerate(devices):
        mine = list(range(j, n, len(devices)))
        if not mine:
            continue
        size = max(1, math.ceil(len(mine) / per_device_tasks))
        out += [(d, mine[i:i + size]) for i in range(0, len(mine), size)]
    return out

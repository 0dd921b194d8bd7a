"""``@gt.jit``: specialization, the trace cache, and launch dispatch.

A kernel is traced once per specialization key: the constexpr values, each
argument's type, whether each integer is a multiple of 16 and each pointer 16-byte
aligned (as Triton does), ``num_warps`` and the target. Traces are cached in memory
on the :class:`JITFunction`; compiled binaries are cached by the backends.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np

from . import backend as backends
from . import dtypes as dt
from . import jit_deps
from .errors import ArgumentTypeError, ArgumentValueError, TraceError, user_location
from .ir import Block, Graph, TensorDescType, Type, Value
from .tracer import tracing
from .verifier import verify

LAUNCH_OPTIONS = ("num_warps", "backend", "target", "stream", "num_stages", "num_ctas", "maxnreg")


@dataclass(frozen=True)
class ArgSpec:
    """What the trace knows of one run-time argument."""

    dtype: dt.dtype
    divisible_by_16: bool = False
    type: Type | None = None  # for arguments that are not plain scalars/pointers (TMA descriptors)

    @property
    def attrs(self) -> dict:
        return {"divisibility": 16} if self.divisible_by_16 else {}


def _is_constexpr_annotation(ann) -> bool:
    from .language.core import constexpr
    if ann is constexpr:
        return True
    return isinstance(ann, str) and ann.split(".")[-1] == "constexpr"


def arg_spec(name: str, value, loc) -> ArgSpec:
    if isinstance(value, TensorDescType):  # a descriptor type spec (TensorDescriptor.type_spec)
        return ArgSpec(value.dtype, type=value)
    if type(value).__name__ == "TensorDescriptor" and hasattr(value, "ir_type"):
        return ArgSpec(value.dtype, type=value.ir_type)
    if isinstance(value, dt.dtype):
        # a type spec: pointers are assumed 16-byte aligned, as allocators give them
        return ArgSpec(value, value.is_ptr)
    if isinstance(value, bool) or isinstance(value, np.bool_):
        return ArgSpec(dt.int1)
    if isinstance(value, (int, np.integer)):
        v = int(value)
        if -2**31 <= v < 2**31:
            t = dt.int32
        elif -2**63 <= v < 2**63:
            t = dt.int64
        else:
            raise ArgumentValueError(f"argument `{name}` = {v} does not fit in 64 bits", loc)
        return ArgSpec(t, v % 16 == 0)
    if isinstance(value, (float, np.floating)):
        return ArgSpec(dt.float32)
    if isinstance(value, np.ndarray):
        return ArgSpec(dt.pointer(_element_type(name, value.dtype, loc)), value.ctypes.data % 16 == 0)
    mod = type(value).__module__
    if mod.startswith("torch") and hasattr(value, "data_ptr"):
        try:
            elem = dt.from_torch(value.dtype)
        except TypeError as e:
            raise ArgumentTypeError(f"argument `{name}`: {e}; convert it first (x.float(), or x.real "
                                    "and x.imag as two tensors)", loc) from None
        return ArgSpec(dt.pointer(elem), value.data_ptr() % 16 == 0)
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        return ArgSpec(dt.pointer(dt.from_numpy(np.dtype(cai["typestr"]))), cai["data"][0] % 16 == 0)
    raise ArgumentTypeError(
        f"argument `{name}` is a {type(value).__name__}; a kernel takes tensors/arrays, ints, floats, "
        "bools, type specs such as gl.pointer(gl.float32), or constexprs (annotate the parameter "
        "`: gl.constexpr`)", loc)


def _element_type(name: str, npdt: np.dtype, loc) -> dt.dtype:
    try:
        return dt.from_numpy(npdt)
    except TypeError:
        hint = ("pass the real and imaginary parts as two float arrays (a.real.copy(), a.imag.copy()) "
                "or a float view (a.view(np.float32))" if npdt.kind == "c" else
                "convert it to a numeric array first (e.g. a.astype(np.float32))" if npdt.kind == "O" else
                "pass an array of bool, int8-64, uint8-64, float16, float32 or float64")
        raise ArgumentTypeError(f"argument `{name}` is a numpy array of {npdt}, which a kernel "
                                f"cannot take; {hint}", loc) from None


class TracedKernel:
    """One specialization of a kernel: its IR, and doors to each backend's code for it."""

    def __init__(self, fn: "JITFunction", graph: Graph, bound: dict, options: dict):
        self.fn = fn
        self.graph = graph
        self._bound = bound
        self._options = options

    @property
    def ir(self) -> str:
        return self.graph.text

    @property
    def name(self) -> str:
        return self.graph.name

    def __str__(self) -> str:
        return self.ir

    def __repr__(self) -> str:
        return f"<TracedKernel {self.name} target={self.graph.target} hash={self.graph.hash[:12]}>"

    def _repr_html_(self) -> str:
        return self.graph._repr_html_()

    def for_target(self, target: str) -> "TracedKernel":
        if target == self.graph.target:
            return self
        return self.fn._trace(self._bound, {**self._options, "target": target}, user_location())

    def ptx(self, target: str = "sm_90") -> str:
        return backends.get("nvidia").emit(self.for_target(target).graph, target)

    def amdgcn(self, target: str = "gfx942") -> str:
        return backends.get("amd").emit(self.for_target(target).graph, target)

    def compile(self, target: str = "sm_90"):
        return backends.for_target(target).compile(self.for_target(target).graph, target)


class JITFunction:
    def __init__(self, fn):
        self.fn = fn
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self.signature = inspect.signature(fn)
        self.params = list(self.signature.parameters.values())
        self.constexprs = {p.name for p in self.params if _is_constexpr_annotation(p.annotation)}
        self.cache: dict = {}
        # launch fast path: functions a backend generated per specialization; each checks
        # that (grid, args, kwargs) still fit it, and launches (True) or declines (False)
        self._fast: list = []
        self._dispatch: dict = {}  # grid -> a backend's compiled kernel[grid] (see __getitem__)
        self._fast_keys: set = set()
        self._deps: tuple = ()  # the globals the cached traces read (jit_deps)

    def _drop_stale(self) -> None:
        """Forget every trace and launch path if a global the traces read was rebound."""
        if self._deps and not jit_deps.unchanged(self._deps):
            self.cache.clear()
            self._fast.clear()
            self._dispatch.clear()
            self._fast_keys.clear()
            self._deps = ()

    def __repr__(self) -> str:
        return f"<gt.jit kernel {self.__name__}>"

    # -- binding and specialization ---------------------------------------------------------
    def _bind(self, args, kwargs, loc) -> tuple[dict, dict]:
        options = {k: kwargs.pop(k) for k in LAUNCH_OPTIONS if k in kwargs}
        # Gluon's style: a kernel declaring ``num_warps: gl.constexpr`` (or num_ctas) reads the
        # launch option, and the launch passes it once, as an option
        for k, default in (("num_warps", 4), ("num_ctas", 1), ("num_stages", None)):
            if k in self.constexprs and k not in kwargs:
                v = options.get(k, default)
                if v is not None:
                    kwargs[k] = v
        try:
            ba = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            missing = [p.name for p in self.params if p.name not in kwargs and
                       p.default is inspect.Parameter.empty][len(args):]
            hint = ""
            if any(m in self.constexprs for m in missing):
                hint = f" (constexprs are passed by keyword: {', '.join(m + '=...' for m in missing if m in self.constexprs)})"
            raise ArgumentTypeError(f"{self.__name__}{self.signature}: {e}{hint}", loc) from None
        ba.apply_defaults()
        return dict(ba.arguments), options

    def _key(self, bound: dict, options: dict, loc) -> tuple:
        parts = []
        for name, v in bound.items():
            if name in self.constexprs:
                v = _frozen(getattr(v, "value", v))
                try:
                    hash(v)
                except TypeError:
                    raise ArgumentTypeError(f"constexpr `{name}` = {v!r} is not hashable", loc) from None
                parts.append((name, "c", type(v).__name__, v))
            else:
                parts.append((name, arg_spec(name, v, loc)))
        return (tuple(parts), options.get("num_warps", 4), options.get("target"),
                options.get("num_ctas", 1), options.get("maxnreg"))

    def trace(self, *args, **kwargs) -> TracedKernel:
        """Trace without launching; takes real arguments or type specs (gl.pointer(gl.float32))."""
        loc = user_location()
        bound, options = self._bind(args, dict(kwargs), loc)
        if "target" not in options:
            options["target"] = _default_target(options, list(bound.values()))
        return self._trace(bound, options, loc)

    def _trace(self, bound: dict, options: dict, loc) -> TracedKernel:
        self._drop_stale()
        key = self._key(bound, options, loc)
        hit = self.cache.get(key)
        if hit is not None:
            return TracedKernel(self, hit, bound, options)
        graph = self._build(bound, options, key, loc)
        self.cache[key] = graph
        self._deps = jit_deps.global_deps(self)
        return TracedKernel(self, graph, bound, options)

    def _build(self, bound, options, key, loc) -> Graph:
        target = options["target"]
        num_warps = int(options.get("num_warps", 4))
        if num_warps <= 0 or num_warps & (num_warps - 1):
            raise ArgumentValueError(f"num_warps={num_warps} must be a power of two", loc)
        num_ctas = options.get("num_ctas", 1)
        if not isinstance(num_ctas, int) or isinstance(num_ctas, bool) or num_ctas not in (1, 2, 4, 8):
            raise ArgumentValueError(f"num_ctas={num_ctas!r} must be 1, 2, 4 or 8 (CTAs per cluster)", loc)
        if num_ctas > 1 and target != "interpreter" and not (target.startswith("sm_") and int(
                "".join(ch for ch in target[3:] if ch.isdigit())) >= 90):
            raise ArgumentValueError(f"num_ctas={num_ctas}: clusters of CTAs need sm_90 or later; this "
                                     f"kernel is traced for {target}", loc)
        maxnreg = options.get("maxnreg")
        if maxnreg is not None and (not isinstance(maxnreg, int) or isinstance(maxnreg, bool)
                                    or not 24 <= maxnreg <= 256):
            raise ArgumentValueError(f"maxnreg={maxnreg!r} must be an int in [24, 256] (registers per thread)", loc)
        tpw = backends.for_target(target).threads_per_warp(target)
        body = Block()
        graph = Graph(self.__name__, [], [], [], body, num_warps, tpw, target,
                      {k: getattr(v, "value", v) for k, v in bound.items() if k in self.constexprs},
                      num_ctas=num_ctas, maxnreg=maxnreg if target.startswith("sm_") else None)
        call = {}
        from .language.tensor import wrap
        for (name, v), part in zip(bound.items(), key[0]):
            if name in self.constexprs:
                call[name] = getattr(v, "value", v)
                continue
            spec: ArgSpec = part[1]
            val = Value(spec.type or Type(spec.dtype), None, body, name)
            graph.args.append(val)
            graph.arg_names.append(name)
            graph.arg_attrs.append(spec.attrs)
            call[name] = wrap(val)
        with tracing(graph):
            out = self.fn(**call)
        if out is not None:
            raise TraceError(f"kernel {self.__name__} returned a value; kernels write results "
                             "through pointers with gl.store", loc)
        verify(graph)
        return graph

    # -- launch --------------------------------------------------------------------------------
    def __getitem__(self, grid):
        """``kernel[grid]``: a callable that launches. Where a backend offers a compiled
        dispatcher (the NVIDIA C launch path), one per constant grid is kept, so a repeated
        launch runs no Python of ours; else a :class:`Launcher`."""
        if self._deps:
            self._drop_stale()
        c = grid.__class__
        if c is not tuple and c is not int:
            return Launcher(self, grid)
        try:
            d = self._dispatch.get(grid)
        except TypeError:  # a tuple holding something unhashable
            return Launcher(self, grid)
        if d is not None:
            return d
        launcher = Launcher(self, grid)
        make = backends.dispatch_factory()
        if make is None:
            return launcher
        if len(self._dispatch) >= 256:  # grids that change every call: keep the table small
            self._dispatch.clear()
        d = self._dispatch[grid] = make(grid, self._fast, launcher)
        return d

    def run(self, *args, grid, **kwargs):
        return Launcher(self, grid)(*args, **kwargs)


def _frozen(v):
    """A constexpr as a cache key: lists (Gluon passes warps_per_cta=[4, 1] and block shapes as
    constexprs) as tuples, nested ones too; the kernel still receives the list."""
    if isinstance(v, (list, tuple)):
        return (type(v).__name__,) + tuple(_frozen(x) for x in v)
    return v


def _default_target(options: dict, args) -> str:
    name = options.get("backend") or backends.pick(args)
    return backends.get(name).default_target(args)


def _check_grid(given, grid, loc) -> tuple[int, int, int]:
    """The grid as 3 Python ints; floats are refused rather than truncated."""
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, (bool, np.bool_)):
        grid = (grid,)
    if not isinstance(grid, (tuple, list)) or not all(
            isinstance(g, (int, np.integer)) and not isinstance(g, (bool, np.bool_)) for g in grid):
        raise ArgumentTypeError(
            f"grid {given!r} must be an int or a tuple of up to 3 ints (the number of programs "
            "along each axis); for a size n and a block b write gl.cdiv(n, b), not n / b", loc)
    if not 1 <= len(grid) <= 3 or any(g < 0 for g in grid):
        raise ArgumentValueError(f"grid {given!r} must be 1 to 3 non-negative ints", loc)
    return tuple(int(g) for g in grid) + (1,) * (3 - len(grid))


class Launcher:
    __slots__ = ("fn", "grid")

    def __init__(self, fn: JITFunction, grid):
        self.fn = fn
        self.grid = grid

    def __call__(self, *args, **kwargs):
        fn = self.fn
        if fn._fast:
            stream = kwargs.pop("stream", None) if "stream" in kwargs else None
            for f in fn._fast:
                if f(self.grid, args, kwargs, stream):
                    return None
            if stream is not None:
                kwargs["stream"] = stream
        loc = user_location()
        bound, options = fn._bind(args, dict(kwargs), loc)
        name = options.get("backend")
        if name is None:
            target = options.get("target")
            name = backends.for_target(target).name if target else backends.pick(list(bound.values()))
        be = backends.get(name)
        options.setdefault("target", be.default_target(list(bound.values())))
        traced = fn._trace(bound, options, loc)
        grid = self.grid
        if callable(grid):
            grid = grid({**{k: getattr(v, "value", v) for k, v in bound.items()}, **options})
        grid = _check_grid(self.grid, grid, loc)
        n = traced.graph.num_ctas
        if grid[0] % n:
            raise ArgumentValueError(f"grid {tuple(grid)}: with num_ctas={n} the grid's x extent must be a "
                                     f"multiple of {n} (each cluster is {n} consecutive programs along x)", loc)
        runtime = [v for k, v in bound.items() if k not in fn.constexprs]
        out = be.run(traced.graph, grid, runtime, options.get("stream"), loc=loc)
        self._add_fast(be, traced, args, kwargs, loc)
        return out

    def _add_fast(self, be, traced, args, kwargs, loc) -> None:
        """After a checked launch, let the backend generate a fast path for this
        specialization: when every run-time argument came positionally, in order."""
        fn = self.fn
        make = getattr(be, "fast_launcher", None)
        names = [p.name for p in fn.params]
        if make is None or names[:len(args)] != [n for n in names if n not in fn.constexprs]:
            return
        exp = {k: v for k, v in kwargs.items() if k != "stream"}
        try:
            key = (traced.graph.hash, len(args), tuple(sorted(exp.items())))
            hash(key)
        except TypeError:
            return
        if key in fn._fast_keys:
            return
        specs = [part[1] for part in fn._key(dict(zip(names, args)), {}, loc)[0][:len(args)]]
        f = make(traced.graph, specs, exp)
        fn._fast_keys.add(key)  # tried: a backend that declined is not asked again each launch
        if f is not None:
            fn._fast.insert(0, f)
            del fn._fast[8:]


def jit(fn=None, **options):
    """Decorate a kernel function: ``@gt.jit``."""
    if fn is None:
        return lambda f: JITFunction(f)
    return JITFunction(fn)

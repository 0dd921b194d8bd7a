"""The backend registry: the core names backends as strings and imports them on first use.

A backend module (``gluon_trace.backends.<name>``) exposes ``BACKEND``, an object with:

- ``name`` and ``targets`` (target names it can emit for),
- ``threads_per_warp(target) -> int`` and ``default_target(args) -> str``,
- ``claims(arg) -> bool``: whether an argument (a tensor or array) lives on this backend,
- ``run(graph, grid, args, stream)``: execute a traced graph,
- ``RULES``: one lowering rule per IR op name (or an ``Unsupported`` entry).
"""
from __future__ import annotations

import importlib

from .errors import LaunchError

# name -> module path; order is the order in which arguments are offered to backends
_BACKENDS = {
    "nvidia": "gluon_trace.backends.nvidia",
    "amd": "gluon_trace.backends.amd",
    "interpreter": "gluon_trace.backends.interpreter",
}
_loaded: dict = {}


class Unsupported:
    """A backend's explicit "not on this target" entry for an op, with the reason."""

    def __init__(self, why: str):
        self.why = why

    def __repr__(self):
        return f"Unsupported({self.why!r})"


def rule_table() -> tuple[dict, "callable"]:
    """A backend's empty rule table and the decorator that fills it: ``@rule("add", "sub")``."""
    rules: dict = {}

    def rule(*op_names):
        def deco(fn):
            for n in op_names:
                rules[n] = fn
            return fn
        return deco

    return rules, rule


_dispatch_factory = None


def set_dispatch_factory(make) -> None:
    """A backend with a compiled ``kernel[grid]`` path registers ``make(grid, fast_list,
    fallback)`` here (the jit's fast-launcher list is shared with it, mutated in place)."""
    global _dispatch_factory
    _dispatch_factory = make


def dispatch_factory():
    return _dispatch_factory


def names() -> list[str]:
    return list(_BACKENDS)


def get(name: str):
    if name not in _BACKENDS:
        raise LaunchError(f"unknown backend {name!r}; choose one of {', '.join(_BACKENDS)}")
    if name not in _loaded:
        _loaded[name] = importlib.import_module(_BACKENDS[name]).BACKEND
    return _loaded[name]


def available(name: str) -> bool:
    try:
        get(name)
        return True
    except ImportError:
        return False


def for_target(target: str):
    """The backend that emits code for ``target`` (sm_90 -> nvidia, gfx942 -> amd)."""
    if target.startswith("sm_"):
        return get("nvidia")
    if target.startswith("gfx"):
        return get("amd")
    if target == "interpreter":
        return get("interpreter")
    raise LaunchError(f"unknown target {target!r}: use sm_80/sm_86/sm_89/sm_90/sm_90a, "
                      "gfx90a/gfx942/gfx1100 or 'interpreter'")


def pick(args) -> str:
    """The backend whose memory the tensor arguments live in (a TMA descriptor's tensor counts)."""
    for a in args:
        if type(a).__name__ == "TensorDescriptor" and hasattr(a, "base"):
            a = a.base
        elif type(a).__name__ == "ConfigDescriptor":  # gv.descriptor(t, [...]): built per configuration
            a = a.tensor
        mod = type(a).__module__
        if mod.startswith("torch") and hasattr(a, "device"):
            if a.device.type == "cuda":
                import torch
                return "amd" if getattr(torch.version, "hip", None) else "nvidia"
            return "interpreter"
        if hasattr(a, "__cuda_array_interface__"):
            return _gpu_vendor(a)
    return "interpreter"


# __cuda_array_interface__ says "GPU memory", not whose: CuPy on ROCm, hip-python and
# numba-hip arrays expose it too. What the object says of itself decides; else the GPU
# runtime this machine has; else NVIDIA.
_DLPACK_NVIDIA = {2, 3, 13}  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
_DLPACK_AMD = {10, 11}       # kDLROCM, kDLROCMHost
# vendor -> (device nodes its kernel driver creates, the Python bindings we launch with)
_RUNTIMES = {"nvidia": (("/dev/nvidiactl", "/dev/nvidia0"), "cuda.bindings"),
             "amd": (("/dev/kfd",), "hip")}


def _gpu_vendor(a) -> str:
    return _self_described(a) or _machine_vendor()


def _self_described(a) -> str | None:
    """"nvidia"/"amd" where the array says where it lives (without touching the GPU)."""
    dl = getattr(a, "__dlpack_device__", None)  # the array API's own answer (CuPy, JAX, ...)
    if callable(dl):
        try:
            kind = int(dl()[0])
        except Exception:  # a broken or unusual __dlpack_device__ says nothing
            kind = None
        if kind in _DLPACK_NVIDIA:
            return "nvidia"
        if kind in _DLPACK_AMD:
            return "amd"
    parts = type(a).__module__.split(".")
    if parts[0] == "cupy":  # CuPy is built for one of the two; it is imported already
        import sys
        rt = getattr(getattr(sys.modules.get("cupy"), "cuda", None), "runtime", None)
        is_hip = getattr(rt, "is_hip", None)
        if isinstance(is_hip, bool):
            return "amd" if is_hip else "nvidia"
    if "hip" in parts or "rocm" in parts:  # hip-python (hip._util.types), numba.hip
        return "amd"
    for owner in (a, getattr(a, "device", None)):
        for attr in ("type", "platform"):  # "cuda" proves nothing: hipified code says it too
            v = getattr(owner, attr, None) if owner is not None else None
            if isinstance(v, str) and v.lower() in ("hip", "rocm"):
                return "amd"
    return None


def _machine_vendor() -> str:
    """The vendor whose driver (device node) and bindings are both here; NVIDIA when
    that does not single one out. Nothing is imported or initialized to find out."""
    global _machine_cache
    if _machine_cache is None:
        import importlib.util
        import os

        def present(nodes, module):
            if not any(os.path.exists(n) for n in nodes):
                return False
            try:
                return importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                return False
        have = {v: present(*r) for v, r in _RUNTIMES.items()}
        _machine_cache = "amd" if have["amd"] and not have["nvidia"] else "nvidia"
    return _machine_cache


_machine_cache = None


def refuse_types(graph, backend_name: str, refuse, why: str) -> None:
    """Raise a CompileError at the first op (or argument) whose types ``refuse(dtype)`` is true
    for: a type the backend cannot lower yet, named at the user's line before any emission."""
    from .errors import CompileError

    def bad(t):
        d = t.dtype
        return refuse(d) or (d.is_ptr and refuse(d.element))
    for v, name in zip(graph.args, graph.arg_names):
        if bad(v.type):
            raise CompileError(f"argument `{name}` is {v.type.dtype}: {why}", _first_use(graph, v))
    for op in graph.body.walk():
        for v in list(op.operands) + list(op.results):
            if bad(v.type):
                raise CompileError(f"{op.name} on {v.type.dtype}: {why}", op.loc)


def refuse_ops(graph, names, why: str) -> None:
    """Raise a CompileError naming the user's line of the first op in ``names`` (or the
    first TMA descriptor argument, when those ops are refused): what a backend cannot lower
    yet, said before anything else about the kernel is looked at."""
    from .errors import CompileError
    from .ir import TensorDescType
    if "tma_load" in names:
        for v, name in zip(graph.args, graph.arg_names):
            if isinstance(v.type, TensorDescType):
                raise CompileError(f"argument `{name}` is a TMA descriptor: {why}", _first_use(graph, v))
    for op in graph.body.walk():
        if op.name in names:
            raise CompileError(f"{op.name}: {why}", op.loc)


def _first_use(graph, v):
    """The user's line of the first op that uses ``v`` (an argument), for errors about it."""
    for op in graph.body.walk():
        if v in op.operands:
            return op.loc
    return None

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
    """The backend whose memory the tensor arguments live in."""
    for a in args:
        mod = type(a).__module__
        if mod.startswith("torch") and hasattr(a, "device"):
            if a.device.type == "cuda":
                import torch
                return "amd" if getattr(torch.version, "hip", None) else "nvidia"
            return "interpreter"
        if hasattr(a, "__cuda_array_interface__"):
            return "nvidia"
    return "interpreter"

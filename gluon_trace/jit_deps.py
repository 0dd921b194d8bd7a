"""What a traced kernel read from its module's globals, so a cached trace is dropped when one
of them is rebound -- a notebook cell redefining a helper the kernel calls, or a module-level
constant (``BLOCK = 256``) changed and re-run.

The trace cache is keyed on the launch arguments alone; the kernel's Python body also reads
global names: helper functions (followed into their own globals), constants, layouts. Those
are found from the code objects' names (``co_names``, nested code included) when a trace is
built, and compared on later launches: functions by identity (a redefinition is a new
function), other values by equality (re-running ``BLOCK = 128`` keeps the trace). The
library's own functions and classes, modules, and unhashable values are not followed: they
do not change under a running kernel, and checking them would cost every launch."""
from __future__ import annotations

import types

_MISSING = object()


def _names(code: types.CodeType) -> set[str]:
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return names


def _library(obj) -> bool:
    return str(getattr(obj, "__module__", "") or "").startswith("gluon_trace")


def global_deps(fn, seen: set | None = None) -> tuple:
    """((globals dict, name, value, compared by identity only), ...) that ``fn``'s body and
    the helpers it calls read."""
    from .jit import JITFunction
    seen = set() if seen is None else seen
    if isinstance(fn, JITFunction):
        fn = fn.fn
    code, g = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
    if code is None or g is None or id(code) in seen:
        return ()
    seen.add(id(code))
    out = []
    for name in sorted(_names(code)):
        obj = g.get(name, _MISSING)
        if obj is _MISSING or isinstance(obj, (types.ModuleType, type)):
            continue
        if isinstance(obj, (types.FunctionType, JITFunction)):
            if not _library(obj):
                out.append([g, name, obj, True])
                out.extend(global_deps(obj, seen))
            continue
        if callable(obj):
            continue
        try:
            hash(obj)
        except TypeError:
            continue
        out.append([g, name, obj, False])
    return tuple(out)


def unchanged(deps: tuple) -> bool:
    """Whether every recorded global still holds what the trace read. Identity first (the
    common case, a few tens of ns each on every launch); a value rebound to an equal one is
    adopted, so the next check is by identity again."""
    for dep in deps:
        g, name, obj, by_identity = dep
        cur = g.get(name, _MISSING)
        if cur is obj:
            continue
        if by_identity or type(cur) is not type(obj):
            return False
        try:
            if not cur == obj:
                return False
        except Exception:  # noqa: BLE001 - a value that cannot say: assume it changed
            return False
        dep[2] = cur
    return True

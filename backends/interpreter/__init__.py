"""The numpy interpreter: runs any traced graph on the CPU; the reference semantics."""
from __future__ import annotations

import numpy as np

from gluon_trace.addressing import contiguous_pointer_args, not_contiguous
from gluon_trace.errors import ArgumentError

from .interpreter import RULES, run
from .memory import Memory


class InterpreterBackend:
    name = "interpreter"
    targets = ("interpreter",)
    RULES = RULES

    def threads_per_warp(self, target: str) -> int:
        return 32

    def default_target(self, args) -> str:
        return "interpreter"

    def run(self, graph, grid, args, stream=None, loc=None):
        mem = Memory()
        values = []
        contiguous = contiguous_pointer_args(graph)
        for i, (v, name, a) in enumerate(zip(graph.args, graph.arg_names, args)):
            t = v.type.dtype
            if t.is_ptr:
                if isinstance(a, (int, float)):
                    raise ArgumentError(f"argument `{name}` must be an array for the interpreter", loc)
                if i in contiguous and not _dense(a):
                    strides = a.strides if isinstance(a, np.ndarray) else a.stride()
                    raise ArgumentError(not_contiguous(name, graph.name, f"shape {tuple(a.shape)}, strides "
                                                       f"{tuple(strides)}"), loc)
                values.append(np.int64(mem.add(a, name, loc)))
            elif t.is_floating:
                values.append(t.np.type(a))
            elif t.is_bool:
                values.append(np.bool_(a))
            else:
                values.append(t.np.type(int(a)))
        run(graph, grid, values, mem)


def _dense(a) -> bool:
    """C-contiguous, as a GPU launcher would require (numpy arrays, torch CPU tensors)."""
    if isinstance(a, np.ndarray):
        return a.flags.c_contiguous
    is_contiguous = getattr(a, "is_contiguous", None)
    return bool(is_contiguous()) if callable(is_contiguous) else True


BACKEND = InterpreterBackend()

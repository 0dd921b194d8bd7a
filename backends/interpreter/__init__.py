"""The numpy interpreter: runs any traced graph on the CPU; the reference semantics."""
from __future__ import annotations

import numpy as np

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
        for v, name, a in zip(graph.args, graph.arg_names, args):
            t = v.type.dtype
            if t.is_ptr:
                if isinstance(a, (int, float)):
                    raise ArgumentError(f"argument `{name}` must be an array for the interpreter", loc)
                values.append(np.int64(mem.add(a, name, loc)))
            elif t.is_floating:
                values.append(t.np.type(a))
            elif t.is_bool:
                values.append(np.bool_(a))
            else:
                values.append(t.np.type(int(a)))
        run(graph, grid, values, mem)


BACKEND = InterpreterBackend()

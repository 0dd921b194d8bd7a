"""Shared memory (LDS), barriers, MMA and warp specialization on AMD.

Not lowered yet: the language, IR and interpreter define these ops; their AMDGCN is the work
of the "AMD tensor cores" issue. Until then each op is an explicit entry that refuses with
this reason at compile time, naming the user's line.
"""
from __future__ import annotations

from gluon_trace.backend import Unsupported
from gluon_trace.ops_memory import MEMORY_OPS

_WHY = ("shared memory, barriers and matrix-core ops run in the interpreter; the AMD backend "
        "does not lower them yet (run with backend='interpreter')")

RULES = {name: Unsupported(_WHY) for name in MEMORY_OPS}


def refuse_unlowered(graph) -> None:
    from gluon_trace.backend import refuse_ops
    refuse_ops(graph, MEMORY_OPS, _WHY)

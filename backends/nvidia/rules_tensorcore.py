"""Shared memory, async copies, TMA, mbarriers, MMA and warp specialization on NVIDIA.

Not lowered yet: the language, IR and interpreter define these ops (and the interpreter runs
them); their PTX is the work of the "NVIDIA tensor cores" issue. Until then each op is an
explicit entry that refuses with this reason at compile time, naming the user's line.
"""
from __future__ import annotations

from gluon_trace.backend import Unsupported
from gluon_trace.ops_memory import MEMORY_OPS

from .emitter import RULES

_WHY = ("shared memory, async copies, barriers and tensor-core ops run in the interpreter; the "
        "NVIDIA backend does not lower them yet (run with backend='interpreter')")

for _name in MEMORY_OPS:
    RULES.setdefault(_name, Unsupported(_WHY))


def refuse_unlowered(graph) -> None:
    from gluon_trace.backend import refuse_ops
    refuse_ops(graph, MEMORY_OPS, _WHY)

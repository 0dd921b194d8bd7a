"""The AMD rule table for the memory-hierarchy and matrix-core ops (``MEMORY_OPS``).

Shared memory (LDS), barriers and async copies are lowered in lds.py (and the modules it
names); NVIDIA-only ops (mbarriers, TMA, wgmma, mma.sync, the async-proxy fence) refuse with what
to write on AMD instead. Every op still without a lowering is an explicit entry that refuses at
compile time, naming the user's line.
"""
from __future__ import annotations

from gluon_trace.backend import Unsupported
from gluon_trace.ops_memory import MEMORY_OPS

from .lds import RULES as _LDS
from .mfma import RULES as _MMA  # mfma, wmma, dot_fma

_WHY = ("the AMD backend does not lower this op yet; it runs in the interpreter "
        "(backend='interpreter')")

RULES = {name: Unsupported(_WHY) for name in MEMORY_OPS}
RULES["warp_specialize"] = Unsupported(
    "warp specialization is not lowered on AMD (CDNA/RDNA have no named barriers or setmaxnreg); "
    "write the kernel without gl.warp_specialize, or run it with backend='interpreter'")
RULES.update(_LDS)
RULES.update(_MMA)


def refuse_unlowered(graph) -> None:
    """Refuse, before anything else, the first op whose entry is still Unsupported."""
    for op in graph.body.walk():
        rule = RULES.get(op.name)
        if isinstance(rule, Unsupported):
            from gluon_trace.backend import refuse_ops
            refuse_ops(graph, {op.name} | ({"tma_load"} if op.name.startswith("tma") else set()),
                       rule.why)

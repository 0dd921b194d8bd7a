"""Shared memory, async copies, TMA, mbarriers, MMA and warp specialization on NVIDIA.

Lowered: shared buffers and views (rules_smem_views.py), smem load/store (rules_smem.py),
thread_barrier and cp.async with its groups (rules_async_copy.py), mma_v2 (rules_mma.py), dot_fma
(rules_fma.py), mbarriers, fence_async_shared, TMA and wgmma (rules_hopper.py, descriptors in
wgmma.py), warp specialization (warpspec.py). The rest (the AMD-only MMAs) stays an explicit
entry that refuses at compile time, naming the user's line.
"""
from __future__ import annotations

from gluon_trace.backend import Unsupported
from gluon_trace.ops_memory import MEMORY_OPS

from . import (rules_async_copy, rules_fma, rules_hopper, rules_mma, rules_smem, rules_smem_views,  # noqa: F401
               warpspec)  # (they register their rules)
from .emitter import RULES

_WHY = ("warp specialization runs in the interpreter; the NVIDIA backend does not lower it "
        "yet (run with backend='interpreter')")
_AMD = "this is an AMD instruction; NVIDIA GPUs run mma_v2"
_AMD_OPS = ("mfma", "wmma")
_OWN = {_n: _AMD for _n in _AMD_OPS}

UNLOWERED = tuple(n for n in MEMORY_OPS if n not in RULES)

for _name in UNLOWERED:
    RULES[_name] = Unsupported(_OWN.get(_name, _WHY))


def refuse_unlowered(graph) -> None:
    """The first unlowered op (or TMA descriptor argument), before anything else is emitted."""
    from gluon_trace.backend import refuse_ops
    for op in graph.body.walk():
        if op.name in UNLOWERED and op.name in _OWN:
            refuse_ops(graph, (op.name,), _OWN[op.name])
    refuse_ops(graph, tuple(n for n in UNLOWERED if n not in _OWN), _WHY)

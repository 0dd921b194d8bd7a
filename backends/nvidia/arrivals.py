"""mbarriers every thread arrives on by itself.

``mbarrier.arrive`` is one arrival by the partition: lowered as one thread's arrive it needs a
``bar.sync`` of the partition first, so that the other threads' earlier work (a wgmma that read
the slot being released) is done. In a K loop that barrier costs every step. Where every
arrival on an mbarrier comes from ``mbarrier.arrive`` in partitions of one size T, the barrier
is initialised with count x T instead and each thread arrives for itself: the phase completes
once every thread of every arriving partition got there, with each thread's arrive releasing
its own earlier accesses (CUTLASS's consumer release), and no thread waits for its warps.

An mbarrier that other CTAs of a cluster arrive on (``mbarrier.arrive(bar, cta=r)`` for all its
arrivals) is counted in warps instead: lane 0 of each warp arrives after its warp's work, as
CUTLASS's consumers signal each CTA of a multicast from one thread a warp. An mbarrier that a TMA
load or a cp.async signals, that ``mbarrier.expect`` arrives on, whose arrivals mix the two
kinds, or that reaches an op this analysis does not know (a loop carrying it) keeps the
single-thread form.
"""
from __future__ import annotations

from gluon_trace.ir import Graph

_VIEWS = {"smem_index", "smem_slice", "smem_permute", "smem_reshape", "smem_reinterpret"}
_NEUTRAL = {"mbarrier_init", "mbarrier_wait", "mbarrier_invalidate"}
_MAX_COUNT = (1 << 20) - 1  # mbarrier's pending-count field


def per_thread_arrivals(graph: Graph) -> dict:
    """{mbarrier value (the allocation or a view of it): threads per arriving partition} for
    the mbarriers whose arrivals are all per-thread."""
    roots, inits = {}, {}
    for op in graph.body.walk():
        if op.name == "smem_alloc" and _is_mbarrier(op):
            roots[op.result] = op
        elif op.name in _VIEWS and op.operands and op.operands[0] in roots:
            roots[op.result] = roots[op.operands[0]]
    sizes: dict = {}   # allocation -> set of arriving partitions' thread counts (None: not eligible)

    def visit(block, threads):
        for op in block.ops:
            if op.name == "warp_specialize":
                warps = [graph.num_warps] + [int(w) for w in op.attrs["worker_num_warps"]]
                for region, w in zip(op.regions, warps):
                    visit(region, 32 * w)
                continue
            for v in op.operands:
                root = roots.get(v)
                if root is None or op.name in _VIEWS:
                    continue
                if op.name == "mbarrier_arrive":
                    # arrivals from a cluster's CTAs (cta=...) come one per warp, lane 0 of each
                    # (a remote arrive from every thread would be 32x the traffic): counted in warps
                    s = sizes.setdefault(root, set())
                    if s is not None:
                        s.add((threads // 32, "warp") if op.attrs.get("remote") else (threads, "thread"))
                elif op.name == "mbarrier_init":
                    inits.setdefault(root, []).append(int(op.attrs["count"]))
                elif op.name not in _NEUTRAL:
                    sizes[root] = None
            for region in op.regions:
                visit(region, threads)
    visit(graph.body, 32 * graph.num_warps)
    out = {}
    for root, s in sizes.items():
        if not s or len(s) != 1:
            continue
        t, unit = next(iter(s))
        if max(inits.get(root, [1])) * t > _MAX_COUNT:
            continue
        for v, r in roots.items():
            if r is root:
                out[v] = t if unit == "thread" else Warps(t)
    return out


class Warps(int):
    """An arrival multiplier counted in warps: lane 0 of each warp arrives (remote arrivals)."""


def _is_mbarrier(op) -> bool:
    layout = getattr(op.result.type, "layout", None)
    return type(layout).__name__ == "MBarrierLayout"

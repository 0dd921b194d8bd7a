"""Clusters of CTAs in the interpreter: the CTAs of one cluster run together.

They share one :class:`SyncState` (one vector clock per CTA, so a peer's multicast writes and
arrivals order accesses exactly as a local partition's do) and are scheduled like warp
partitions (:class:`rules_mma.Scheduler`): each runs until it blocks on an mbarrier wait or a
cluster barrier. Each CTA allocates its own shared buffers; a multicast or a remote arrival
finds the peer's buffer made by the same allocation. The mistakes a cluster kernel can make
that a single CTA cannot are errors at the line: using a peer's buffer or mbarrier before the
peer allocated or initialised it (a ``cluster.barrier()`` after the inits is missing), and
writing to or arriving on a CTA that has already exited (one at the end is missing).
"""
from __future__ import annotations

import numpy as np

from gluon_trace.errors import InterpreterError

from .interpreter import RULES, _exec, rule
from .rules_memory import _bar, _view, arrive, state
from .sync import MBarrier, SyncState, View, merge


class Cluster:
    def __init__(self, n: int):
        self.n = n
        self.buffers: list[dict] = [{} for _ in range(n)]   # per rank: allocation op -> Buffer
        self.done = [False] * n
        self.gen = 0                                         # cluster barriers completed
        self.waiting = 0
        self.clock = np.zeros(1, np.int64)
        self.gen_clock: dict[int, np.ndarray] = {}
        self.barrier_locs: list = []
        # per rank: (component, time, what, loc) of each write or arrival a peer made into it;
        # the CTA must not exit before its clock has seen each (else the GPU may run it late)
        self.incoming: list[list] = [[] for _ in range(n)]


def run_clusters(graph, grid, env0: dict, make_program) -> None:
    from .barrier_check import BarrierCheck
    from .rules_mma import Scheduler
    n = graph.num_ctas
    for z in range(grid[2]):
        for y in range(grid[1]):
            for x0 in range(0, grid[0], n):
                c = Cluster(n)
                s = SyncState()
                progs, comps, names = [], [], []
                for r in range(n):
                    p = make_program((x0 + r, y, z), dict(env0))
                    if r == 0:
                        s.barrier_check = BarrierCheck(p.barriers or frozenset())
                        comp = 0
                    else:
                        comp = s.new_component()
                        s.clocks[comp] = np.zeros(s.ncomp, np.int64)
                        s.clocks[comp][comp] = 1
                        s.fences[comp] = 0
                    p.sync, p.cluster, p.rank = s, c, r
                    s.partition_names[comp] = f"CTA {r} of the cluster at x={x0}"
                    progs.append(p)
                    comps.append(comp)
                    names.append(s.partition_names[comp])

                def body(r):
                    def go():
                        p = progs[r]
                        try:
                            _exec(p, graph.body, p.env)
                            _check_exit(p, c, r)
                        finally:
                            c.done[r] = True
                    return go

                sched = Scheduler(s, comps, names)
                s.scheduler = sched
                sched.run([body(r) for r in range(n)])
                from .rules_memory import check_stores_retired
                check_stores_retired(progs[0])  # one SyncState for the cluster: every CTA's stores


def _check_exit(p, c: Cluster, r: int) -> None:
    for stamp, what, loc in c.incoming[r]:
        if not _ordered_after(p, stamp):
            raise InterpreterError(
                f"{what} reaches CTA {r} of the cluster, and nothing orders it before CTA {r} exits "
                "(on the GPU it may run after that CTA exited)", loc,
                notes=("end the kernel with cluster.barrier(), so no CTA exits while a peer may still "
                       "write to its shared memory or arrive on its mbarriers",))


def note_incoming(p, rank: int, stamp, what: str, loc) -> None:
    if p.cluster is not None and int(rank) != p.rank:
        p.cluster.incoming[int(rank)].append((stamp, what, loc))


def _ordered_after(p, stamp) -> bool:
    """Whether this CTA's clock has seen the peer's event at ``stamp`` (a barrier between):
    running after it in the interpreter's order is not enough, the GPU may run it later."""
    if stamp is None:
        return True
    s = state(p)
    vc = s.clock()
    comp, t = stamp
    return comp < vc.size and vc[comp] >= t


def peer_view(p, v: View, rank, op, what: str) -> View:
    """The view ``v`` names in CTA ``rank`` of this program's cluster."""
    c = p.cluster
    rank = int(rank)
    n = 1 if c is None else c.n
    if not 0 <= rank < n:
        raise InterpreterError(f"{what}: CTA rank {rank} is not in a cluster of {n} CTAs", op.loc,
                               notes=("launch with num_ctas=... to run in clusters",) if n == 1 else ())
    if c is None or rank == p.rank:
        return v
    if c.done[rank]:
        raise InterpreterError(
            f"{what} reaches CTA {rank} of the cluster after it exited", op.loc,
            notes=("end the kernel with cluster.barrier(), so no CTA exits while a peer may still "
                   "write to its shared memory or arrive on its mbarriers",))
    buf = c.buffers[rank].get(getattr(v.buf, "alloc_op", None))
    if buf is None or not _ordered_after(p, buf.stamp):
        raise InterpreterError(
            f"{what} reaches CTA {rank}'s copy of the buffer allocated at line "
            f"{v.buf.loc.line if v.buf.loc else '?'} before that CTA allocated it (nothing orders the "
            "two)", op.loc,
            notes=("call cluster.barrier() after allocating and initialising the mbarriers, so every "
                   "CTA of the cluster has them before a peer uses them",))
    return View(buf, v.offs, v.dtype)


def peer_bar(p, v: View, rank, op, what: str) -> MBarrier:
    bar = state(p).bars.get(v.key())
    if bar is None or not bar.valid or not _ordered_after(p, bar.stamp):
        raise InterpreterError(
            f"{what} reaches CTA {int(rank)}'s mbarrier before that CTA initialised it", op.loc,
            notes=("call cluster.barrier() after the mbarrier inits, so every CTA of the cluster has "
                   "initialised its barriers before a peer arrives on them or multicasts to them",))
    return bar


@rule("cluster_cta_id")
def _cta_id(p, op):
    return np.int32(p.rank)


@rule("cluster_barrier")
def _cluster_barrier(p, op):
    s, c = state(p), p.cluster
    s.barrier_check.barrier(s.current)
    if c is None:
        return
    gen = c.gen
    c.clock = merge(c.clock, s.release())
    c.waiting += 1
    c.barrier_locs.append(op.loc)
    if c.waiting == c.n:
        c.gen_clock[gen] = c.clock
        c.gen, c.waiting, c.clock, c.barrier_locs = gen + 1, 0, np.zeros(1, np.int64), []
    else:
        def describe():
            left = [r for r in range(c.n) if c.done[r]]
            why = f"; CTA {', '.join(map(str, left))} exited without reaching it" if left else ""
            return f"{op.loc}: cluster.barrier() with {c.waiting} of {c.n} CTAs arrived{why}"
        s.scheduler.block(lambda: c.gen != gen, describe)
    s.acquire(c.gen_clock[gen])


def remote_arrive(p, op, v: View, rank, count: int) -> None:
    pv = peer_view(p, _view(v, op), rank, op, "mbarrier.arrive(cta=...)")
    bar = _bar(p, op, v) if pv is v else peer_bar(p, pv, rank, op, "mbarrier.arrive(cta=...)")
    s = state(p)
    note_incoming(p, rank, (s.current, int(s.clock()[s.current])), "mbarrier.arrive(cta=...)", op.loc)
    arrive(s, bar, op, count)


assert "cluster_barrier" in RULES

"""Where a partition's threads must meet before touching shared memory again (Triton's
Membar): one analysis, shared by every backend.

Users write no barrier for ordinary data movement through shared memory within a partition:
a ``smem.store`` followed by a ``smem.load`` of the same buffer by other threads of the
partition needs every thread's store done first, and a store that reuses a buffer needs every
thread's earlier load done. Accesses are tracked per allocation since the last barrier; an
access that conflicts with one of them (read after write, write after read, write after
write) gets a barrier before it. Async-proxy accesses count too: a TMA store or a wgmma reading
a buffer reads it, a TMA load or cp.async into it writes it (they are issued by some threads
on behalf of all). Loops are analysed to a fixed point over the back edge; the branches of an
``if`` from the same entry state, merged after; warp partitions separately (their barriers are
their own named barriers).
"""
from __future__ import annotations

from .ir import Block, Graph, Op

_READS = {"smem_load": (0,), "tma_store": None, "wgmma": None}  # (wgmma: A's K pieces trail its operands)
_WRITES = {"smem_store": (0,), "async_copy_load": (0,), "tma_load": None}
_VIEWS = {"smem_index", "smem_slice", "smem_permute", "smem_reshape", "smem_reinterpret"}


def barriers(graph: Graph, plan=None) -> set[Op]:
    """The ops that need a barrier of their partition's threads right before them. With a
    :mod:`smem_plan` plan, buffers that share bytes (disjoint live ranges, one offset) conflict
    too; without one, only accesses to the same allocation do."""
    roots = _roots(graph)
    out: set[Op] = set()
    span = {}
    if plan is not None:
        for b in plan.buffers:
            if b.op is not None and b.op.name == "smem_alloc":
                span[b.op] = (b.offset, b.offset + b.size)

    def overlap(a, b) -> bool:
        if a is b:
            return True
        if a in span and b in span:
            (x0, x1), (y0, y1) = span[a], span[b]
            return x0 < y1 and y0 < x1
        return False
    _block(graph.body, frozenset(), roots, out, overlap)
    return out


def _roots(graph: Graph) -> dict:
    """value -> the allocations (smem_alloc ops) it may view. A view carried by a loop or
    chosen by a branch may be any of the values flowing into it (buffers swapped every
    iteration, a slot picked in a branch): unions, to a fixed point over the back edges."""
    roots: dict = {}

    def join(dst, srcs) -> bool:
        got = set().union(*(roots.get(v, ()) for v in srcs))
        if got and not got <= roots.get(dst, set()):
            roots[dst] = roots.get(dst, set()) | got
            return True
        return False
    changed = True
    while changed:
        changed = False
        for op in graph.body.walk():
            if op.name == "smem_alloc":
                roots[op.result] = {op}
            elif op.name in _VIEWS:
                changed |= join(op.result, [op.operands[0]])
            elif op.name == "for":
                body = op.regions[0]
                for i, (arg, init, res) in enumerate(zip(body.args[1:], op.operands[3:], op.results)):
                    y = body.yielded(i)
                    flow = [init] if y is None else [init, y]
                    changed |= join(arg, flow)
                    changed |= join(res, flow)
            elif op.name == "if":
                for i, res in enumerate(op.results):
                    flow = [v for v in (r.yielded(i) for r in op.regions) if v is not None]
                    changed |= join(res, flow)
    return roots


def _accesses(op: Op, roots) -> tuple[set, set]:
    def pick(spec):
        vals = op.operands if spec is None else [op.operands[i] for i in spec if i < len(op.operands)]
        if op.name == "tma_load":  # (desc, coords..., bar, smem): only the destination is written
            vals = [op.operands[-2] if op.attrs.get("pred") else op.operands[-1]]
        return {a for v in vals for a in roots.get(v, ())}
    reads = pick(_READS[op.name]) if op.name in _READS else set()
    writes = pick(_WRITES[op.name]) if op.name in _WRITES else set()
    if op.name == "smem_alloc" and op.operands:
        writes.add(op)
    return reads, writes


def _pending(state: frozenset) -> frozenset:
    """What a barrier leaves of the state: the cp.async copies still in flight ('p'), whose
    bytes land at a later wait_group, after any barrier placed before it."""
    return frozenset(x for x in state if x[1] == "p")


def _block(block: Block, state: frozenset, roots, out: set, overlap) -> frozenset:
    """``state``: (allocation, 'r' | 'w') accessed since the last barrier, and (allocation, 'p')
    for cp.async copies issued but not yet waited for."""
    for op in block.ops:
        if op.name == "thread_barrier":
            state = _pending(state)
            continue
        if op.name == "async_copy_wait_group":
            # each thread's copies land for it here; other threads read them only after a barrier
            state = frozenset((a, "w" if k == "p" else k) for a, k in state)
            continue
        if op.name == "for":
            body = op.regions[0]
            entry = state
            for _ in range(3):  # the back edge brings the body's exit state to its entry
                exit_ = _block(body, entry, roots, out, overlap)
                if exit_ <= entry:
                    break
                entry = entry | exit_
            state = entry | exit_
            continue
        if op.name == "if":
            a = _block(op.regions[0], state, roots, out, overlap)
            b = _block(op.regions[1], state, roots, out, overlap)
            state = a | b
            continue
        if op.name == "warp_specialize":
            for r in op.regions:
                _block(r, state, roots, out, overlap)
            state = _pending(state)  # partitions join: the op ends with every warp
            continue
        reads, writes = _accesses(op, roots)
        if not reads and not writes:
            continue
        conflict = any(kind == "w" and any(overlap(x, a) for a in reads | writes)
                       or kind == "r" and any(overlap(x, a) for a in writes) for x, kind in state)
        if conflict:
            out.add(op)
            state = _pending(state)
        if op.name == "tma_load":
            # its bytes become visible through the mbarrier each reader waits on itself; a bar.sync
            # would order nothing here (only the WAR/WAW hazard before the copy is issued needs one)
            writes = set()
        kind = "p" if op.name == "async_copy_load" else "w"  # a cp.async writes at its wait_group
        state = state | {(a, "r") for a in reads} | {(a, kind) for a in writes}
    return state

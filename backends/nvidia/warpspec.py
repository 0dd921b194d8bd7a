"""``warp_specialize`` on NVIDIA: partitions on their own warps, named barriers, setmaxnreg.

The CTA runs the default partition's warps first (warps ``0 .. num_warps-1``, the warps every
layout outside the op is written for) and the workers' warps after them. Code shape::

    prologue (every thread)
    @worker bra $L_ws_meet           workers skip the code before the op
    ... code before the op ...       default warps only; their barriers: bar.sync 1, N
    st.shared captures               scalars/descriptors the workers use, by thread 0
  $L_ws_meet:
    bar.sync 0                       the whole CTA: the captures and mbarrier inits are there
    @worker bra $L_ws_workers
    setmaxnreg.inc                   (sm_90a, whole warpgroups) the default takes the registers
    ... default partition ...
    barrier.sync 0                   join: every partition has finished
    ... code after the op ...
    ret
  $L_ws_workers:
    ld.shared ...                    captures into the same virtual registers the worker code reads
    per worker: setmaxnreg.dec, its own thread index (tid - first thread), its code with
    bar.sync 2+i, 32*warps for its barriers; then to the join

``bar.sync`` is ``barrier.sync.aligned``: every thread of the CTA must reach the same
instruction (compute-sanitizer's synccheck reports "divergent thread(s)" otherwise). The first
meeting is one such instruction, which the workers jump to; the join is reached from each
partition's own code, so it is the non-aligned ``barrier.sync``. Inside a partition every
participating thread runs the same code, so its named ``bar.sync id, n`` stays aligned.

Why captures go through shared memory: the workers never ran the code before the op, so a
scalar it computed (a loop bound, a buffer's run-time base) has no value in their registers.
Writing them once and reading them after the CTA barrier costs a few bytes and no
recomputation, and the worker keeps reading the very register names the default computed.

A kernel with several warp_specialize ops, or one inside a loop or branch, takes the general
form: the workers wait at the top of a loop (``barrier.sync 0``); at each op the default
partition writes the op's number and its captures to shared memory and meets them there, runs
its own part, and joins them (``barrier.sync 0`` again) while they go back to wait; at its end
it writes -1 and meets them once more, and they leave. The CTA is as wide as the widest op;
registers do not move (each op would want its own split).

Register moves need the warpgroup granularity of ``setmaxnreg``: they are used on sm_90a
when the default partition is whole warpgroups. Workers next to each other, each narrower
than a warpgroup, that ask for the same registers share warpgroups (a group: one
``setmaxnreg`` that all its warps execute, then each warp goes to its worker), and each group
is padded to whole warpgroups (the padding warps go straight to the join). Two one-warp producers thus take one warpgroup, not two: the
CTA stays at 384 threads beside two consumer warpgroups, whose ``.maxnreg`` would otherwise
fall to 128. ``.maxnreg`` sets the starting budget so that the CTA's pool is what the
partitions ask for.
"""
from __future__ import annotations

from dataclasses import dataclass

from gluon_trace.errors import CompileError
from gluon_trace.ir import Graph

from . import ptx
from .emitter import rule

WARPGROUP = 4
REGFILE = 65536


@dataclass(frozen=True)
class WarpPlan:
    default_warps: int
    bases: tuple        # first warp of each worker
    warps: tuple        # warps each worker's code runs on
    spans: tuple        # warps each register group occupies (padded to warpgroups when registers move)
    worker_regs: tuple  # setmaxnreg target of each register group (empty: no register moves)
    default_regs: int   # setmaxnreg target of the default partition (0: none)
    start_regs: int     # the kernel's .maxnreg when registers move (0: none)
    total_warps: int
    ops: tuple = ()     # general form (several ops, or one in a loop/branch): every op, in order
    groups: tuple = ()  # the workers (indices) of each register group, in order; one each without moves

    @property
    def moves_registers(self) -> bool:
        return bool(self.worker_regs)


def find_ops(graph: Graph) -> list:
    """Every warp_specialize op of the kernel (the language refuses one inside a partition)."""
    return [op for op in graph.body.walk() if op.name == "warp_specialize"]


def find_op(graph: Graph):
    """The op of the one-op form (the kernel's only warp_specialize, at its top level)."""
    ops = find_ops(graph)
    if len(ops) == 1 and ops[0] in graph.body.ops:
        return ops[0]
    return None


def _groups(warps: tuple, regs: tuple, move: bool) -> tuple:
    """Runs of neighbouring workers narrower than a warpgroup asking for the same registers
    (a worker of whole warpgroups, or any without moves, stays alone: three 4-warp attention
    consumers grouped ran 5% slower on the H200, the code after their shared setmaxnreg the same)."""
    groups = []
    for i in range(len(warps)):
        narrow = warps[i] % WARPGROUP != 0
        if (move and narrow and groups and regs[groups[-1][-1]] == regs[i]
                and all(warps[j] % WARPGROUP for j in groups[-1])):
            groups[-1].append(i)
        else:
            groups.append([i])
    return tuple(tuple(g) for g in groups)


def _bases(nw: int, spans: tuple) -> tuple:
    bases, b = [], nw
    for s in spans:
        bases.append(b)
        b += s
    return tuple(bases)


def _check_width(total: int, nw: int, warps, op, padded: bool) -> None:
    if total * 32 > 1024:
        raise CompileError(f"warp_specialize needs {total} warps ({nw} default + workers {list(warps)}"
                           f"{' padded to warpgroups' if padded else ''}); a CTA has at most 32", op.loc)


def plan(graph: Graph, target: str) -> WarpPlan | None:
    ops = find_ops(graph)
    if not ops:
        return None
    nw = graph.num_warps
    op = find_op(graph)
    if op is None:
        # general form: the workers wait in a loop for the default partition to start each op;
        # no register moves (each op would want its own), the CTA as wide as the widest op
        widest = max(sum(int(w) for w in x.attrs["worker_num_warps"]) for x in ops)
        total = nw + widest
        wide = max(ops, key=lambda x: sum(int(w) for w in x.attrs["worker_num_warps"]))
        _check_width(total, nw, [int(w) for w in wide.attrs["worker_num_warps"]], wide, False)
        return WarpPlan(nw, (), (), (), (), 0, 0, total, tuple(ops))
    warps = tuple(int(w) for w in op.attrs["worker_num_warps"])
    regs = tuple(int(r) for r in op.attrs["worker_num_regs"])
    move = target == "sm_90a" and nw % WARPGROUP == 0
    groups = _groups(warps, regs, move)
    used = [sum(warps[i] for i in g) for g in groups]
    spans = tuple(-(-u // WARPGROUP) * WARPGROUP for u in used) if move else tuple(used)
    total = nw + sum(spans)
    _check_width(total, nw, warps, op, move)
    bases = tuple(b + sum(warps[j] for j in g[:g.index(i)]) for g, b in zip(groups, _bases(nw, spans)) for i in g)
    w_regs, d_regs, start = (), 0, 0
    if move:
        start = min(REGFILE // (32 * total) // 8 * 8, 248, (graph.maxnreg or 256) // 8 * 8)
        g_regs = tuple(regs[g[0]] for g in groups)
        pool = start * 32 * total - sum(32 * s * r for s, r in zip(spans, g_regs))
        d_regs = min(pool // (32 * nw) // 8 * 8, 256)
        if d_regs >= 24:
            w_regs = g_regs
        else:  # the workers ask for more than the CTA has: no moves
            d_regs, start = 0, 0
    return WarpPlan(nw, bases, warps, spans, w_regs, d_regs, start, total, groups=groups)


def launch_warps(graph: Graph, target: str) -> int:
    p = plan(graph, target)
    return p.total_warps if p else graph.num_warps


def captured(op) -> list:
    """Values defined outside the op that a worker partition reads, in first-use order. What is
    inside is found by walking the region, not from each value's ``block``: schedule.hoist_stores
    gives the backend a copy of each block it reorders, whose values still name the original."""
    out, seen = [], set()
    for region in op.regions[1:]:
        inside = set(region.args)
        for inner in region.walk():
            inside.update(inner.results)
            for r in inner.regions:
                inside.update(r.args)
        for inner in region.walk():
            for v in inner.operands:
                if v.block is not None and v not in inside and v not in seen:
                    seen.add(v)
                    out.append(v)
    return out


def _reg_class(name: str) -> str:
    for cls, prefix in sorted(ptx.PREFIX.items(), key=lambda kv: -len(kv[1])):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return cls
    raise CompileError(f"internal: {name!r} is not a register")


def _capture_regs(em, values) -> list[str]:
    """The registers of ``values`` that the code before the op computed: not those the kernel
    prologue sets (parameters, buffer bases, thread indices), which every warp ran."""
    every = {ln.split(None, 2)[1].rstrip(",;") for ln in em.prologue if len(ln.split(None, 2)) > 2}
    regs = []
    for v in values:
        for r in em.vals[v]:
            if getattr(r, "xreg", None) is not None:  # (one captured register per value)
                raise CompileError("a shared-memory view chosen by a branch among views placed differently (a "
                                   "run-time XOR: smem_join.py) is passed to warp_specialize; pass the "
                                   "buffer and slice it inside the partition", em.loc)
            r = getattr(r, "base", r)  # a shared view: its run-time base register
            if isinstance(r, str) and r.startswith("%") and r not in regs and r not in every:
                regs.append(r)
    return regs


_ST = {"b16": "b16", "b32": "b32", "f32": "b32", "b64": "b64", "f64": "b64"}


def capture_bytes(graph: Graph, p: WarpPlan) -> int:
    """Shared bytes the captures take (and, in the general form, the word saying which op runs)."""
    if p.ops:
        return 8 + 8 * max(len(captured(op)) for op in p.ops)
    return 8 * len(captured(find_op(graph)))


def _store_captures(em, op, first: int) -> list[str]:
    regs = _capture_regs(em, captured(op))
    if first + 8 * len(regs) > em.ws_capture_bytes:
        raise CompileError("internal: more warp_specialize captures than reserved", op.loc)
    base = em.smem_start()
    owner = em.owner_pred(None)
    for j, r in enumerate(regs):
        cls = _reg_class(r)
        at = f"[{base}+{em.ws_capture_off + first + 8 * j}]"
        if cls == "pred":
            x = em.ins("b32", f"selp.u32 {{d}}, 1, 0, {r};")
            em.emit(f"@{owner} st.shared.b32 {at}, {x};")
        else:
            em.emit(f"@{owner} st.shared.{_ST[cls]} {at}, {r};")
    return regs


def _load_captures(em, regs, first: int) -> list[tuple[str, object]]:
    base = em.smem_start()
    out = []
    for j, r in enumerate(regs):
        cls = _reg_class(r)
        at = f"[{base}+{em.ws_capture_off + first + 8 * j}]"
        if cls == "pred":
            x = em.reg("b32")
            out += [(f"ld.shared.b32 {x}, {at};", None), (f"setp.ne.u32 {r}, {x}, 0;", None)]
        else:
            out.append((f"ld.shared.{_ST[cls]} {r}, {at};", None))
    return out


def _general(em, op):
    """The general form: the default partition says which op runs (a word in shared memory),
    meets the workers waiting at the top of their loop, runs its part, and joins them; the
    workers run that op's partitions and go back to wait. ``barrier.sync`` (not the aligned
    ``bar.sync``) throughout: the default meets them from another instruction."""
    k = em.ws.ops.index(op)
    regs = _store_captures(em, op, 8)
    owner = em.owner_pred(None)
    em.emit(f"@{owner} st.shared.u32 [{em.smem_start()}+{em.ws_capture_off}], {k};")
    em.emit("barrier.sync 0;")
    saved = em.loc
    with em.scope():
        outs = em.run_block(op.regions[0], [])
    em.loc = saved
    em.emit("barrier.sync 0;")
    _, _, warp = em.tid()
    nw = em.ws.default_warps
    warps = tuple(int(w) for w in op.attrs["worker_num_warps"])
    bases = _bases(nw, warps)
    loop, _ = em.ws_labels
    head, join = em.label(f"ws_op{k}"), em.label(f"ws_join{k}")
    tail = [(f"{head}:", None)] + _load_captures(em, regs, 8)
    labels = [em.label(f"ws_op{k}_worker{i + 1}") for i in range(len(warps))]
    for i, lab in enumerate(labels):
        t, q = em.reg("b32"), em.reg("pred")
        tail += [(f"sub.u32 {t}, {warp}, {bases[i]};", None), (f"setp.lt.u32 {q}, {t}, {warps[i]};", None),
                 (f"@{q} bra {lab};", None)]
    tail.append((f"bra.uni {join};", None))  # warps this op leaves idle
    for i, (lab, region) in enumerate(zip(labels, op.regions[1:])):
        pro, lines = em.partition(i + 1, bases[i], warps[i], region)
        tail += [(f"{lab}:", None)] + [(x, None) for x in pro] + lines + [(f"bra.uni {join};", None)]
    tail += [(f"{join}:", None), ("barrier.sync 0;", None), (f"bra.uni {loop};", None)]
    em.ws_ops_tail.append((k, head, tail))
    return outs


def general_tail(em) -> list[tuple[str, object]]:
    """The end of the default partition (it tells the workers to leave) and the workers' loop."""
    loop, leave = em.ws_labels
    base = em.smem_start()
    owner = em.owner_pred(None)
    done = [(f"@{owner} st.shared.u32 [{base}+{em.ws_capture_off}], -1;", None), ("barrier.sync 0;", None),
            ("ret;", None)]
    word, stop = em.reg("b32"), em.reg("pred")
    lines = [(f"{loop}:", None), ("barrier.sync 0;", None), (f"ld.shared.u32 {word}, [{base}+{em.ws_capture_off}];", None),
             (f"setp.lt.s32 {stop}, {word}, 0;", None), (f"@{stop} bra {leave};", None)]
    for k, head, _ in sorted(em.ws_ops_tail, key=lambda x: x[0]):
        q = em.reg("pred")
        lines += [(f"setp.eq.s32 {q}, {word}, {k};", None), (f"@{q} bra {head};", None)]
    lines.append((f"bra.uni {leave};", None))
    for _, _, tail in sorted(em.ws_ops_tail, key=lambda x: x[0]):
        lines += tail
    lines.append((f"{leave}:", None))
    return done + lines


@rule("warp_specialize")
def _warp_specialize(em, op):
    p = em.ws
    if p.ops:
        return _general(em, op)
    regs = _store_captures(em, op, 0)
    _, _, warp = em.tid()  # the CTA-wide warp index, from the kernel prologue
    # the workers jumped here from the kernel's start: one barrier instruction for the whole CTA
    em.emit(f"{em.ws_labels[2]}:")
    em.emit("bar.sync 0;")
    em.emit(f"@{worker_pred(em)} bra {em.ws_labels[0]};")
    if p.moves_registers and p.default_regs != p.start_regs:
        kind = "inc" if p.default_regs > p.start_regs else "dec"
        em.emit(f"setmaxnreg.{kind}.sync.aligned.u32 {p.default_regs};")
    saved = em.loc
    with em.scope():
        outs = em.run_block(op.regions[0], [])
    em.loc = saved
    em.emit("barrier.sync 0;")
    _workers(em, op, regs, warp)
    return outs


def _workers(em, op, regs, warp) -> None:
    """The workers' code: each register group's warps branch to the group and execute its
    setmaxnreg; a lone worker's code follows (its padding warps go to the join), several
    workers' warps then branch each to its own."""
    p = em.ws
    head, join, _ = em.ws_labels
    tail = [(f"{head}:", None)] + _load_captures(em, regs, 0)
    labels = [em.label(f"ws_worker{i + 1}") for i in range(len(p.warps))]
    group_labels = [labels[g[0]] if len(g) == 1 else em.label(f"ws_group{k + 1}") for k, g in enumerate(p.groups)]
    for k, (g, lab) in enumerate(zip(p.groups, group_labels)):
        t, q = em.reg("b32"), em.reg("pred")
        tail += [(f"sub.u32 {t}, {warp}, {p.bases[g[0]]};", None), (f"setp.lt.u32 {q}, {t}, {p.spans[k]};", None),
                 (f"@{q} bra {lab};", None)]
    tail.append((f"bra.uni {join};", None))

    def code(i):
        pro, lines = em.partition(i + 1, p.bases[i], p.warps[i], op.regions[1 + i])
        return [(x, None) for x in pro] + lines + [(f"bra.uni {join};", None)]
    for k, (g, lab) in enumerate(zip(p.groups, group_labels)):
        tail.append((f"{lab}:", None))
        if p.moves_registers and p.worker_regs[k] != p.start_regs:
            r = p.worker_regs[k]
            kind = "dec" if r < p.start_regs else "inc"  # inc waits for the registers others give back
            tail.append((f"setmaxnreg.{kind}.sync.aligned.u32 {r};", None))
        if len(g) == 1:
            i = g[0]
            if p.spans[k] > p.warps[i]:  # warpgroup padding: nothing to run
                t, q = em.reg("b32"), em.reg("pred")
                tail += [(f"sub.u32 {t}, {warp}, {p.bases[i]};", None),
                         (f"setp.ge.u32 {q}, {t}, {p.warps[i]};", None), (f"@{q} bra {join};", None)]
            tail += code(i)
            continue
        for i in g:
            t, q = em.reg("b32"), em.reg("pred")
            tail += [(f"sub.u32 {t}, {warp}, {p.bases[i]};", None), (f"setp.lt.u32 {q}, {t}, {p.warps[i]};", None),
                     (f"@{q} bra {labels[i]};", None)]
        tail.append((f"bra.uni {join};", None))  # the group's padding warps
        for i in g:
            tail += [(f"{labels[i]}:", None)] + code(i)
    tail += [(f"{join}:", None), ("barrier.sync 0;", None)]
    # the cluster barriers the default partition passes after the op: the workers meet them too
    tail += [("barrier.cluster.arrive.aligned;", None), ("barrier.cluster.wait.aligned;", None)] * \
        _cluster_barriers(em, after=True)
    em.ws_tail.extend(tail)


def worker_pred(em) -> str:
    """The predicate 'this thread is a worker's', set at the start of the kernel body."""
    q = getattr(em, "ws_pred", None)
    if q is None:
        q = em.ws_pred = em.reg("pred")
    return q


def worker_branch(em) -> list[tuple[str, object]]:
    """The first lines of the kernel body: worker warps skip to the CTA's first meeting."""
    t, _, _ = em.tid()
    q = worker_pred(em)
    to = em.ws_labels[0] if em.ws.ops else em.ws_labels[2]  # the general form's loop, or the one meeting
    lines = [(f"setp.ge.u32 {q}, {t}, {32 * em.ws.default_warps};", None)]
    n = _cluster_barriers(em, after=False)
    if n:  # every thread of the cluster meets there: the parked workers too, in the same order
        skip = em.label("ws_default")
        lines.append((f"@!{q} bra {skip};", None))
        lines += [("barrier.cluster.arrive.aligned;", None), ("barrier.cluster.wait.aligned;", None)] * n
        lines += [(f"bra.uni {to};", None), (f"{skip}:", None)]
    else:
        lines.append((f"@{q} bra {to};", None))
    return lines


def _cluster_barriers(em, after: bool) -> int:
    """The cluster barriers the default partition passes before (or after) its warp_specialize:
    top-level ones only (the workers, parked or gone, cannot follow its control flow)."""
    from gluon_trace.errors import CompileError
    if em.g.num_ctas == 1:  # the default partition's own barrier stands for it (rules_hopper)
        return 0
    n, seen = 0, False
    for op in em.g.body.ops:
        if op.name == "warp_specialize":
            seen = True
            continue
        if seen != after:
            continue
        if op.name == "cluster_barrier":
            n += 1
        elif any(o.name == "cluster_barrier" for r in op.regions for o in r.walk()):
            raise CompileError("cluster.barrier() inside a loop or branch in a warp-specialized kernel: the "
                               "worker warps cannot meet it; call it at the kernel's top level", op.loc)
    return n

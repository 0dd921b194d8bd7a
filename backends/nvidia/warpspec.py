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

Register moves need the warpgroup granularity of ``setmaxnreg``: they are used on sm_90a
when the default partition is whole warpgroups; each worker is then padded to whole
warpgroups (the padding warps go straight to the join). ``.maxnreg`` sets the starting
budget so that the CTA's pool is what the partitions ask for.
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
    spans: tuple        # warps each worker occupies (padded to warpgroups when registers move)
    worker_regs: tuple  # setmaxnreg target of each worker (empty: no register moves)
    default_regs: int   # setmaxnreg target of the default partition (0: none)
    start_regs: int     # the kernel's .maxnreg when registers move (0: none)
    total_warps: int

    @property
    def moves_registers(self) -> bool:
        return bool(self.worker_regs)


def find_op(graph: Graph):
    ops = [op for op in graph.body.walk() if op.name == "warp_specialize"]
    if not ops:
        return None
    top = [op for op in graph.body.ops if op.name == "warp_specialize"]
    if len(ops) > 1 or not top:
        bad = next(op for op in ops if op not in top) if len(top) < len(ops) else ops[1]
        raise CompileError("the NVIDIA backend lowers one warp_specialize per kernel, at the kernel's top "
                           "level (not inside a loop or branch)", bad.loc,
                           notes=("put the loop inside the partitions; the interpreter runs this form",))
    return ops[0]


def plan(graph: Graph, target: str) -> WarpPlan | None:
    op = find_op(graph)
    if op is None:
        return None
    nw = graph.num_warps
    warps = tuple(int(w) for w in op.attrs["worker_num_warps"])
    regs = tuple(int(r) for r in op.attrs["worker_num_regs"])
    move = target == "sm_90a" and nw % WARPGROUP == 0
    spans = tuple(-(-w // WARPGROUP) * WARPGROUP for w in warps) if move else warps
    total = nw + sum(spans)
    if total * 32 > 1024:
        raise CompileError(f"warp_specialize needs {total} warps ({nw} default + workers {list(warps)}"
                           f"{' padded to warpgroups' if move else ''}); a CTA has at most 32", op.loc)
    bases, b = [], nw
    for s in spans:
        bases.append(b)
        b += s
    w_regs, d_regs, start = (), 0, 0
    if move:
        start = min(REGFILE // (32 * total) // 8 * 8, 248)
        pool = start * 32 * total - sum(32 * s * r for s, r in zip(spans, regs))
        d_regs = min(pool // (32 * nw) // 8 * 8, 256)
        if d_regs >= 24:
            w_regs = regs
        else:  # the workers ask for more than the CTA has: no moves
            d_regs, start = 0, 0
    return WarpPlan(nw, tuple(bases), warps, spans, w_regs, d_regs, start, total)


def launch_warps(graph: Graph, target: str) -> int:
    p = plan(graph, target)
    return p.total_warps if p else graph.num_warps


def captured(op) -> list:
    """Values defined outside the op that a worker partition reads, in first-use order."""
    out, seen = [], set()
    for region in op.regions[1:]:
        for inner in region.walk():
            for v in inner.operands:
                if v.block is not None and not v.block.is_within(region) and v not in seen:
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
            r = getattr(r, "base", r)  # a shared view: its run-time base register
            if isinstance(r, str) and r.startswith("%") and r not in regs and r not in every:
                regs.append(r)
    return regs


_ST = {"b16": "b16", "b32": "b32", "f32": "b32", "b64": "b64", "f64": "b64"}


@rule("warp_specialize")
def _warp_specialize(em, op):
    p = em.ws
    regs = _capture_regs(em, captured(op))
    if 8 * len(regs) > em.ws_capture_bytes:
        raise CompileError("internal: more warp_specialize captures than reserved", op.loc)
    base = em.smem_start()
    owner = em.owner_pred(None)
    for j, r in enumerate(regs):
        cls = _reg_class(r)
        if cls == "pred":
            x = em.ins("b32", f"selp.u32 {{d}}, 1, 0, {r};")
            em.emit(f"@{owner} st.shared.b32 [{base}+{em.ws_capture_off + 8 * j}], {x};")
        else:
            em.emit(f"@{owner} st.shared.{_ST[cls]} [{base}+{em.ws_capture_off + 8 * j}], {r};")
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
    p = em.ws
    head, join, _ = em.ws_labels
    tail = [(f"{head}:", None)]
    base = em.smem_start()
    for j, r in enumerate(regs):
        cls = _reg_class(r)
        at = f"[{base}+{em.ws_capture_off + 8 * j}]"
        if cls == "pred":
            x = em.reg("b32")
            tail += [(f"ld.shared.b32 {x}, {at};", None), (f"setp.ne.u32 {r}, {x}, 0;", None)]
        else:
            tail.append((f"ld.shared.{_ST[cls]} {r}, {at};", None))
    labels = [em.label(f"ws_worker{i + 1}") for i in range(len(p.warps))]
    for i, lab in enumerate(labels):
        t, q = em.reg("b32"), em.reg("pred")
        tail += [(f"sub.u32 {t}, {warp}, {p.bases[i]};", None), (f"setp.lt.u32 {q}, {t}, {p.spans[i]};", None),
                 (f"@{q} bra {lab};", None)]
    tail.append((f"bra.uni {join};", None))
    for i, (lab, region) in enumerate(zip(labels, op.regions[1:])):
        tail.append((f"{lab}:", None))
        if p.moves_registers and p.worker_regs[i] != p.start_regs:
            r = p.worker_regs[i]
            kind = "dec" if r < p.start_regs else "inc"  # inc waits for the registers others give back
            tail.append((f"setmaxnreg.{kind}.sync.aligned.u32 {r};", None))
        if p.spans[i] > p.warps[i]:  # warpgroup padding: nothing to run
            t, q = em.reg("b32"), em.reg("pred")
            tail += [(f"sub.u32 {t}, {warp}, {p.bases[i]};", None), (f"setp.ge.u32 {q}, {t}, {p.warps[i]};", None),
                     (f"@{q} bra {join};", None)]
        pro, lines = em.partition(i + 1, p.bases[i], p.warps[i], region)
        tail += [(x, None) for x in pro] + lines
        tail.append((f"bra.uni {join};", None))
    tail += [(f"{join}:", None), ("barrier.sync 0;", None)]
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
    return [(f"setp.ge.u32 {q}, {t}, {32 * em.ws.default_warps};", None), (f"@{q} bra {em.ws_labels[2]};", None)]

"""``s_waitcnt`` placement over allocated (physical) registers.

Memory instructions return out of band: a VMEM load bumps ``vmcnt`` until its data
arrive, LDS/SMEM ops bump ``lgkmcnt``. VMEM results arrive in issue order, so waiting
``vmcnt(k)`` (at most k still outstanding) guarantees every load with k or more
loads issued after it. The pass keeps, for every physical register with a pending
write, how many events of the same counter were issued after it, and before an
instruction that reads or overwrites such a register it waits with exactly that count
-- so independent loads overlap and a wait happens at the first use. SMEM returns
out of order, so while one is pending an lgkm wait must be 0. Before ``s_barrier``
all LDS traffic is drained (other waves read what this one wrote). Joins (labels,
loop back edges) merge the states of their predecessors, iterated to a fixed point.

gfx9 counts stores on vmcnt too; gfx11 counts them on vscnt, which we never need.
An LDS DMA load (lds_dma.py) writes no register: a token in its ``imp`` stands for one, read
by the ``lds_dma_wait`` pseudo instruction of its copy's wait, which becomes the wait and goes.
"""
from __future__ import annotations

from .mir import Fixed, Inst, Label, phys_units_of

COUNTER = {"vmem_load": "vm", "vmem_atomic": "vm", "smem": "lgkm", "lds_load": "lgkm",
           "lds_store": "lgkm"}


def _event(inst: Inst, target) -> str | None:
    if inst.kind == "vmem_store":
        return "vs" if target.stores_use_vscnt else "vm"
    return COUNTER.get(inst.kind)


def _tokens(inst: Inst):
    """LDS DMA loads (lds_dma.py) write no register: their completion tokens stand for one."""
    return [("dma", x.name) for x in inst.imp if isinstance(x, Fixed) and x.cls == "dma"]


def _units(xs):
    return phys_units_of(xs, [])


class State:
    __slots__ = ("pending", "out", "smem")

    def __init__(self, pending=None, out=None, smem=False):
        self.pending = pending if pending is not None else {}   # unit -> {counter: k}
        self.out = out if out is not None else {"vm": 0, "lgkm": 0, "vs": 0}
        self.smem = smem

    def copy(self):
        return State({u: dict(c) for u, c in self.pending.items()}, dict(self.out), self.smem)

    def merge(self, o: "State") -> "State":
        p = {u: dict(c) for u, c in self.pending.items()}
        for u, cs in o.pending.items():
            d = p.setdefault(u, {})
            for c, k in cs.items():
                d[c] = min(d.get(c, k), k)
        return State(p, {c: max(self.out[c], o.out[c]) for c in self.out}, self.smem or o.smem)

    def __eq__(self, o):
        return self.pending == o.pending and self.out == o.out and self.smem == o.smem


class WaitcntPass:
    def __init__(self, target):
        self.t = target
        self.max = {"vm": target.vmcnt_max, "lgkm": target.lgkmcnt_max, "vs": 63}

    def needed(self, st: State, inst: Inst) -> dict:
        need: dict = {}
        pending = st.pending
        if pending:
            units = phys_units_of(inst.defs, phys_units_of(inst.uses, []))
            if inst.kind == "lds_dma_wait":
                units += _tokens(inst)
            for u in units:
                cs = pending.get(u)
                if cs:
                    for c, k in cs.items():
                        need[c] = min(need.get(c, k), k)
        if inst.kind == "barrier" and st.out["lgkm"] > 0:
            need["lgkm"] = 0
        if "lgkm" in need and st.smem:
            need["lgkm"] = 0
        return need

    def apply_wait(self, st: State, need: dict) -> None:
        for c, k in need.items():
            for u in list(st.pending):
                cs = st.pending[u]
                if c in cs and cs[c] >= k:
                    del cs[c]
                    if not cs:
                        del st.pending[u]
            st.out[c] = min(st.out[c], k)
            if c == "lgkm" and k == 0:
                st.smem = False

    def issue(self, st: State, inst: Inst) -> None:
        c = _event(inst, self.t)
        for u in _units(inst.defs):  # a plain write replaces a (waited-for) pending write
            st.pending.pop(u, None)
        if c is None:
            return
        mx = self.max[c]
        for u in list(st.pending):
            cs = st.pending[u]
            if c in cs:
                cs[c] += 1
                if cs[c] >= mx:  # the counter saturates: that event has completed
                    del cs[c]
                    if not cs:
                        del st.pending[u]
        st.out[c] = min(st.out[c] + 1, mx)
        if inst.kind == "smem":
            st.smem = True
        for u in _units(inst.defs) + _tokens(inst):
            st.pending.setdefault(u, {})[c] = 0

    def step(self, st: State, inst: Inst):
        need = self.needed(st, inst)
        if need:
            self.apply_wait(st, need)
        self.issue(st, inst)
        return need

    # -- control flow ----------------------------------------------------------------------
    def run(self, code: list) -> list:
        blocks = _blocks(code)
        label_block = {}
        for b, (s, e) in enumerate(blocks):
            if isinstance(code[s], Label):
                label_block[code[s].name] = b
        succ = []
        for b, (s, e) in enumerate(blocks):
            last = code[e - 1]
            nxt = [b + 1] if b + 1 < len(blocks) else []
            if isinstance(last, Inst) and last.kind == "branch":
                succ.append([label_block[last.target]])
            elif isinstance(last, Inst) and last.kind == "cbranch":
                succ.append([label_block[last.target]] + nxt)
            elif isinstance(last, Inst) and last.kind == "end":
                succ.append([])
            else:
                succ.append(nxt)
        ins = [None] * len(blocks)
        ins[0] = State()
        seen: dict = {}
        work = [0]
        rounds = 0
        # A block is stepped again only when its in-state changed, and merges only move each
        # (unit, counter) entry down and each outstanding count up, within the counters' ranges:
        # the lattice's height bounds the rounds. (A fixed 50 a block was too few for a loop
        # picking its shared-memory view by three branches: 760 rounds for 15 blocks.)
        units = {u for inst in code if isinstance(inst, Inst)
                 for u in phys_units_of(inst.defs, phys_units_of(inst.uses, []))}
        height = (len(units) + 1) * len(self.max) * (max(self.max.values()) + 2)
        while work:
            rounds += 1
            if rounds > len(blocks) * height + 100:
                raise RuntimeError("s_waitcnt dataflow did not converge")
            b = work.pop(0)
            st = ins[b].copy()
            s, e = blocks[b]
            waits = {}
            for j in range(s, e):
                inst = code[j]
                if isinstance(inst, Inst):
                    need = self.step(st, inst)
                    if need:
                        waits[j] = need
            # the waits of the block from this in-state: the last pass reuses them when its
            # in-state is still this one (a straight-line program is stepped once, not twice)
            seen[b] = (ins[b], waits)
            for n in succ[b]:
                new = st if ins[n] is None else ins[n].merge(st)
                if ins[n] is None or not (new == ins[n]):
                    ins[n] = new
                    if n not in work:
                        work.append(n)
        out = []
        for b, (s, e) in enumerate(blocks):
            if b in seen and seen[b][0] is ins[b]:
                waits = seen[b][1]
            else:
                waits = {}
                st = ins[b].copy() if ins[b] is not None else State()
                for j in range(s, e):
                    if isinstance(code[j], Inst):
                        need = self.step(st, code[j])
                        if need:
                            waits[j] = need
            for j in range(s, e):
                inst = code[j]
                if j in waits:
                    out.append(self.render(waits[j], inst))
                if getattr(inst, "kind", None) != "lds_dma_wait":  # (its wait is made)
                    out.append(inst)
        return out

    def render(self, need: dict, at: Inst) -> Inst:
        parts = []
        if "vm" in need:
            parts.append(f"vmcnt({need['vm']})")
        if "lgkm" in need:
            parts.append(f"lgkmcnt({need['lgkm']})")
        if parts:
            return Inst("s_waitcnt", suffix=" ".join(parts), kind="waitcnt", loc=at.loc)
        return Inst("s_waitcnt_vscnt", uses=["null", f"{need['vs']:#x}"], kind="waitcnt", loc=at.loc)


def _blocks(code: list):
    starts = {0}
    for k, x in enumerate(code):
        if isinstance(x, Label):
            starts.add(k)
        elif isinstance(x, Inst) and x.kind in ("branch", "cbranch", "end") and k + 1 < len(code):
            starts.add(k + 1)
    starts = sorted(starts)
    return [(s, starts[i + 1] if i + 1 < len(starts) else len(code)) for i, s in enumerate(starts)]


def insert_waits(code: list, target) -> list:
    return WaitcntPass(target).run(code)

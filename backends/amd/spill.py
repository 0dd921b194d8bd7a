"""Spilling: what the register allocator does when a kernel needs more registers than fit.

Running out of registers is a speed problem, never a kernel that cannot be built, so the
allocator (``regalloc.allocate``) calls in here until the program fits:

* ``choose_victims`` sweeps the linearized program keeping the register pressure of one
  class; wherever it exceeds the budget it takes the live values whose next mention is
  furthest away (weighted by how often, and how deep in loops, they are mentioned), and
  never one the instruction at that point reads or writes (spilling it would not help).
* ``spill_vgprs`` rewrites every mention of a victim VGPR: a fresh short-lived register
  is loaded from the victim's scratch slot before an instruction that reads it and stored
  back after one that writes it (spill everywhere). Scratch accesses honour EXEC like the
  instruction they serve, so a def under a partial mask updates only those lanes of the
  slot, as it would have updated only those lanes of the register. A reload under a
  partial mask fills only the active lanes: right for everything this backend runs under
  one (memory accesses, atomics' waterfall loops); a cross-lane read (DPP, ds_bpermute)
  under a partial mask would need its reload under the full mask -- none exists today.
* ``spill_sgprs`` does the same for SGPRs into lanes of a VGPR (``v_writelane_b32`` /
  ``v_readlane_b32``, as LLVM does): those ignore EXEC, so a uniform value survives any
  mask, and they cost no memory traffic.
* ``drop_redundant_reloads``, once registers are assigned, removes a reload whose
  register still holds the slot.

Each reload is followed by its use, so ``s_waitcnt`` (which sees scratch loads as VMEM
loads, and stores on vmcnt/vscnt) waits right there: spilled code is correct, not fast.
A reload needs no wait for an earlier store of its slot: one lane's accesses to one
address complete in order (LLVM relies on the same).

Scratch is the private segment, addressed per lane. gfx942 and gfx1100 have architected
flat scratch: the hardware sets the wave's scratch base and ``scratch_*`` instructions take
the per-lane offset (the immediate, or a VGPR past its 4 KiB reach). gfx90a reaches it through the private
segment buffer resource the dispatch puts in s[0:3] plus the wave's offset in a system
SGPR, with single-dword ``buffer_*`` accesses (the swizzled scratch buffer does not do
multi-dword ones); taking those SGPRs moves the kernarg pointer and workgroup ids up.
"""
from __future__ import annotations

import heapq
from bisect import bisect_right
from itertools import accumulate, compress

from .mir import Fixed, Imm, Inst, Neg, Reg, Sub, mention_lists, strip

IMM_MAX = 4096  # the instructions' immediate offset reaches bytes [0, 4096)


class Scratch:
    """The spill frame of one kernel: slots in the private segment (bytes per lane) and
    the lanes of VGPRs that hold spilled SGPRs, plus the target's way of reaching them."""

    def __init__(self, target, kernarg: Reg, wgid: list):
        self.t = target
        self.kernarg, self.wgid = kernarg, wgid
        self.bytes = 0                   # private segment bytes per lane
        self.vslots: dict = {}           # Reg id -> byte offset of dword 0
        self.sslots: dict = {}           # Reg id -> (lane VGPR, first lane) per dword
        self.lane_regs: list = []        # VGPRs holding spilled SGPRs
        self.lanes_used = 0
        self.spilled_v = 0               # dwords
        self.spilled_s = 0
        self.frozen: set = set()         # ids of spill temporaries and lane VGPRs
        self.rsrc = self.wave_offset = None

    @property
    def private_buffer(self) -> bool:
        """gfx90a: scratch through the private segment buffer (no architected flat scratch)."""
        return self.t.name == "gfx90a"

    def _enable(self) -> None:
        if self.rsrc is not None or not self.private_buffer:
            return
        # user SGPRs in dispatch order: private segment buffer s[0:3], kernarg pointer
        # s[4:5]; then the system SGPRs: workgroup ids s6..s8, the wave's scratch offset s9
        self.rsrc = Reg("s", 4, fixed=0)
        self.kernarg.fixed = self.kernarg.phys = 4
        for k, r in enumerate(self.wgid):
            r.fixed = r.phys = 6 + k
        self.wave_offset = Reg("s", 1, fixed=9)

    @property
    def user_sgprs(self) -> int:
        return 6 if self.rsrc is not None else 2

    # -- slots ---------------------------------------------------------------------------
    def vslot(self, reg: Reg) -> int:
        if reg.id not in self.vslots:
            self._enable()
            if reg.size > 1:
                self.bytes = -(-self.bytes // 8) * 8
            self.vslots[reg.id] = self.bytes
            self.bytes += 4 * reg.size
            self.spilled_v += reg.size
        return self.vslots[reg.id]

    def sslot(self, reg: Reg) -> list:
        if reg.id not in self.sslots:
            out = []
            for _ in range(reg.size):
                k = self.lanes_used % self.t.wave
                if k == 0:
                    lane = Reg("v")
                    self.lane_regs.append(lane)
                    self.frozen.add(lane.id)
                out.append((self.lane_regs[-1], k))
                self.lanes_used += 1
            self.sslots[reg.id] = out
            self.spilled_s += reg.size
        return self.sslots[reg.id]

    def temp(self, cls: str, size: int) -> Reg:
        r = Reg(cls, size)
        self.frozen.add(r.id)
        return r

    # -- scratch accesses ------------------------------------------------------------------
    def _access(self, offset: int, size: int):
        """(per-lane address operand, immediate suffix, setup instructions) for a slot."""
        if offset + 4 * size <= IMM_MAX:
            return None, (f"offset:{offset}" if offset else ""), []
        addr = self.temp("v", 1)  # past the immediate's reach: the offset in a VGPR
        return addr, "", [Inst("v_mov_b32", [addr], [Imm(offset)], kind="valu")]

    def store(self, src, offset: int, loc) -> list:
        """Instructions writing the VGPR operand ``src`` (any width) to the slot."""
        out = []
        for k, n in self._pieces(src.size):
            part = src if n == src.size else _dwords_of(src, k, n)
            addr, sfx, pre = self._access(offset + 4 * k, n)
            if self.private_buffer:
                uses = [part, addr or "off", self.rsrc, self.wave_offset]
                out += pre + [Inst("buffer_store_dword", [], uses, _join(sfx, addr), "vmem_store")]
            else:
                out += pre + [Inst("scratch_store_" + _width(n), [], [addr or "off", part, "off"],
                                   sfx, "vmem_store")]
        return _at(out, loc)

    def load(self, dst, offset: int, loc) -> list:
        out = []
        for k, n in self._pieces(dst.size):
            part = dst if n == dst.size else _dwords_of(dst, k, n)
            addr, sfx, pre = self._access(offset + 4 * k, n)
            if self.private_buffer:
                uses = [addr or "off", self.rsrc, self.wave_offset]
                out += pre + [Inst("buffer_load_dword", [part], uses, _join(sfx, addr), "vmem_load")]
            else:
                out += pre + [Inst("scratch_load_" + _width(n), [part], [addr or "off", "off"],
                                   sfx, "vmem_load")]
        return _at(out, loc)

    def _pieces(self, size: int):
        """(first dword, dwords) per access: one dword at a time through the swizzled
        private segment buffer, up to four with flat scratch (registers of more than four
        dwords, MFMA accumulators, one at a time too)."""
        step = 1 if self.private_buffer or size > 4 else 4  # wider (MFMA C/D): dword by dword
        return [(k, min(step, size - k)) for k in range(0, size, step)]


def _width(n: int) -> str:
    return "dword" if n == 1 else f"dwordx{n}"


def _dwords_of(x, k: int, n: int):
    """Dwords k..k+n-1 of a register operand: a Sub for one, else a view register."""
    if n == 1:
        return Sub(x, k) if isinstance(x, Reg) else x
    raise AssertionError("multi-dword pieces of a wider register are not needed yet")


def _join(sfx: str, addr) -> str:
    return " ".join(x for x in ("offen" if addr is not None else "", sfx) if x)


def _at(insts, loc):
    for i in insts:
        i.loc = loc
    return insts


# -- choosing what to spill ----------------------------------------------------------------------

def _loop_depth(code: list, loops: list) -> list:
    if not loops:
        return [0] * len(code)
    ends = {id(x) for h, b in loops for x in (h, b)}
    pos = {id(x): k for k, x in enumerate(code) if id(x) in ends}
    delta = [0] * (len(code) + 1)
    for h, b in loops:
        delta[pos[id(h)]] += 1
        delta[pos[id(b)] + 1] -= 1
    out, d = [], 0
    for k in range(len(code)):
        d += delta[k]
        out.append(d)
    return out


def choose_victims(code: list, iv: dict, loops: list, cls: str, budget: int, frozen: set,
                   sites: list | None = None, mentions: dict | None = None) -> list:
    """Registers of class ``cls`` to spill so that at most ``budget`` dwords are live at
    every instruction (a spilled register still counts where it is mentioned: its
    temporary lives there). ``sites``, when given, receives the indices of the
    instructions that mention a victim (what the rewrite visits); ``mentions`` is the
    program's ``mention_lists`` when the caller has it."""
    if mentions is None:
        mentions = mention_lists(code)
    # (mention costs: each mention weighs 8 ** its loop depth, up to 4 deep)
    weight = [8 ** min(d, 4) for d in _loop_depth(code, loops)] if loops else None
    # the live dwords at each instruction before spilling (C-speed prefix sums), less the
    # victims' from where they are spilled to their end: the sweep visits only the points
    # over budget, not every instruction
    n = len(code)
    delta = [0] * (n + 1)
    starts: list = [None] * n
    for r, (s, e) in iv.items():
        if r.cls == cls:
            s = max(s, 0)
            delta[s] += r.size
            delta[e + 1] -= r.size
            if r.fixed is None and r.id not in frozen:
                if starts[s] is None:
                    starts[s] = [r]
                else:
                    starts[s].append(r)
    pressure = list(accumulate(delta))
    pick = _Furthest(n, mentions, iv, weight)
    spilled: set = set()
    gone: list = []        # heap of (end, dwords) of victims: no longer live from their spill
    freed = 0              # dwords of victims live at this point
    victims = []
    soon: list = []        # heap of (next mention, id, victim, its index in the mentions)
    last = -1
    k = 0
    while True:
        # the next point over budget with the victims' dwords off, or where that changes:
        # a victim's interval ends, or a victim is mentioned (its temporary counts there)
        until = n
        if gone:
            until = min(until, gone[0][0] + 1)
        if soon:
            until = min(until, soon[0][0])
        k = _first_over(pressure, k, until, budget + freed)
        if k == n:
            break
        while gone and gone[0][0] < k:
            freed -= heapq.heappop(gone)[1]
        while soon and soon[0][0] == k:
            _, rid, r, j = heapq.heappop(soon)
            if j + 1 < len(mentions[r]):
                heapq.heappush(soon, (mentions[r][j + 1], rid, r, j + 1))
        here = _named(code[k], cls)
        need = pressure[k] - freed
        if spilled:
            need += sum(d for r, d in here.items() if r in spilled)
        if need <= budget:
            k += 1
            continue
        for rs in filter(None, starts[last + 1:k + 1]):
            for r in rs:
                pick.add(r, k)
        pick.catch_up(k)
        last = k
        # a register the instruction names whole would come straight back as a temporary;
        # one it names a dword of still frees the rest
        for r in pick.furthest(k, here):
            freed += r.size
            heapq.heappush(gone, (iv[r][1], r.size))
            ks = mentions[r]
            j = bisect_right(ks, k)
            if j < len(ks):
                heapq.heappush(soon, (ks[j], r.id, r, j))
            need -= r.size - here.get(r, 0)
            spilled.add(r)
            victims.append(r)
            if need <= budget:
                break
        pick.restore()
        k += 1
    if sites is not None:
        sites += sorted({k for r in victims for k in mentions[r]})
    return victims


_NONE: dict = {}


def _named(inst, cls: str) -> dict:
    """{register of class ``cls``: dwords of it the instruction names}."""
    if type(inst) is not Inst:
        return _NONE
    regs: dict = {}
    for xs in (inst.defs, inst.uses):
        for x in xs:
            t = type(x)
            if t is Neg:
                x = x.x
                t = type(x)
            if t is Reg:
                if x.cls == cls:
                    regs[x] = x.size
            elif t is Sub:
                r = x.reg
                if r.cls == cls and regs.get(r, 0) < r.size:
                    regs[r] = regs.get(r, 0) + 1  # (a dword named twice counts twice)
    return regs


def _first_over(values: list, lo: int, hi: int, limit: int) -> int:
    """The first j in [lo, hi) with values[j] > limit, else hi (C-speed in growing chunks:
    the next one is usually near, sometimes thousands of points away)."""
    step = 64
    while lo < hi:
        top = min(hi, lo + step)
        for j in compress(range(lo, top), map(limit.__lt__, values[lo:top])):
            return j
        lo = top
        step *= 2
    return hi


class _Furthest:
    """The spill candidates live at the sweep's point, best first: furthest next mention
    (in instructions past the last mention, the interval's end plus the program's length)
    times dwords over the register's mention cost, ties to the lowest id. Scoring every
    live register wherever the pressure is over budget made the sweep quadratic; here the
    registers are grouped by (dwords, cost), within which the order is by next mention
    alone and does not change as the sweep moves, so each group is a heap updated only
    when a register's next mention passes, and a pick compares the groups' tops. Entries
    go stale lazily: a register spilled, past its interval's end, or with a newer entry."""

    def __init__(self, n: int, mentions: dict, iv: dict, weight: list | None = None):
        self.n, self.mentions, self.iv, self.weight = n, mentions, iv, weight
        self.cost: dict = {}      # register -> its mentions' weight (None: one each)
        self.nxt: dict = {}       # candidate -> its next mention (as the score counts it)
        self.groups: dict = {}    # (dwords, cost) -> heap of (-next, id, reg), stale ones included
        self.due: list = []       # heap of (next mention, id, reg): where an entry goes stale
        self.taken: list = []     # entries popped by furthest() but not spilled
        self.k = 0                # the sweep's point at the last furthest()

    def add(self, r, k: int) -> None:
        """``r`` is live from here on: its next mention is the first one after ``k``."""
        ks = self.mentions[r]
        j = bisect_right(ks, k)
        if j < len(ks):
            m = ks[j]
            heapq.heappush(self.due, (m, r.id, r))
        else:
            m = self.iv[r][1] + self.n
        self.nxt[r] = m
        cost = self.cost.get(r)
        if cost is None:
            w = self.weight
            cost = self.cost[r] = len(ks) if w is None else sum(w[q] for q in ks)
        key = (r.size, cost)
        heap = self.groups.get(key)
        if heap is None:
            heap = self.groups[key] = []
        heapq.heappush(heap, (-m, r.id, r))

    def catch_up(self, k: int) -> None:
        """The sweep is at ``k``: candidates whose next mention it reached get the one after."""
        due, nxt, iv = self.due, self.nxt, self.iv
        while due and due[0][0] <= k:
            m, _, r = heapq.heappop(due)
            if nxt.get(r) == m and iv[r][1] >= k:
                self.add(r, k)

    def _top(self, heap, here: dict):
        """The heap's best live candidate not named whole at this point (those are set aside
        in ``taken`` until ``restore``)."""
        nxt, iv, k = self.nxt, self.iv, self.k
        while heap:
            m, _, r = heap[0]
            if nxt.get(r) != -m or iv[r][1] < k:
                heapq.heappop(heap)  # spilled, dead, or its next mention moved
            elif here.get(r, 0) >= r.size:
                self.taken.append((heap, heapq.heappop(heap)))
            else:
                return heap[0]
        return None

    def furthest(self, k: int, here: dict):
        """Yield candidates best first; each one yielded is spilled (it leaves the set)."""
        self.k = k
        while True:
            best = None
            for (size, cost), heap in self.groups.items():
                top = self._top(heap, here)
                if top is None:
                    continue
                key = (-((-top[0] - k) * size / cost), top[1])
                if best is None or key < best[0]:
                    best = (key, heap)
            if best is None:
                return
            _, _, r = heapq.heappop(best[1])
            del self.nxt[r]
            yield r

    def restore(self) -> None:
        for heap, entry in self.taken:
            heapq.heappush(heap, entry)
        self.taken.clear()


# -- rewriting ---------------------------------------------------------------------------------

def _rewrite(code: list, victims: list, reload, writeback, sc: Scratch, sites=None) -> list:
    """Replace every mention of a victim by a temporary: ``reload(temp, reg, index)``
    before an instruction reading it, ``writeback(temp, reg, index)`` after one writing it
    (index None: the whole register; k: its dword k). ``sites``: the indices of the
    instructions that mention a victim, when the caller knows them (``choose_victims``)."""
    vic = {r.id for r in victims}
    if sites is None:
        sites = [k for k, inst in enumerate(code)
                 if isinstance(inst, Inst) and any(r.id in vic for r in inst.mentioned())]
    out = []
    done = 0
    for k in sites:  # the instructions between them are kept as they are
        out += code[done:k]
        out += _rewrite_one(code[k], vic, reload, writeback, sc)
        done = k + 1
    out += code[done:]
    return out


def _rewrite_one(inst: Inst, vic: set, reload, writeback, sc: Scratch) -> list:
    """``inst`` with its victims swapped for temporaries, between their reloads and stores."""
    whole: dict = {}    # victim id -> temp for the whole register
    parts: dict = {}    # (victim id, k) -> temp for one dword
    for x in (*inst.defs, *inst.uses):
        x = strip(x)
        if isinstance(x, Reg) and x.id in vic and x.id not in whole:
            whole[x.id] = (x, sc.temp(x.cls, x.size))
    for x in (*inst.defs, *inst.uses):
        x = strip(x)
        if isinstance(x, Sub) and x.reg.id in vic and x.reg.id not in whole \
                and (x.reg.id, x.index) not in parts:
            parts[(x.reg.id, x.index)] = (x.reg, sc.temp(x.reg.cls, 1))

    def swap(x):
        base = strip(x)
        new = base
        if isinstance(base, Reg) and base.id in whole:
            new = whole[base.id][1]
        elif isinstance(base, Sub) and base.reg.id in vic:
            if base.reg.id in whole:
                new = Sub(whole[base.reg.id][1], base.index)
            else:
                new = parts[(base.reg.id, base.index)][1]
        if new is base:
            return x
        return type(x)(new) if x is not base else new

    read = _dwords(inst.uses, vic)
    written = _dwords(inst.defs, vic)
    pre, post = [], []
    for rid, (reg, t) in whole.items():
        pre += _each(reload, t, reg, read.get(rid, ()), inst.loc)
        post += _each(writeback, t, reg, written.get(rid, ()), inst.loc)
    for (rid, k), (reg, t) in parts.items():
        if k in read.get(rid, ()):
            pre += reload(t, reg, k, inst.loc)
        if k in written.get(rid, ()):
            post += writeback(t, reg, k, inst.loc)
    inst.defs = [swap(x) for x in inst.defs]
    inst.uses = [swap(x) for x in inst.uses]
    return pre + [inst] + post


def _dwords(xs, vic) -> dict:
    """{victim id: the dwords of it that operands ``xs`` name}."""
    out: dict = {}
    for x in xs:
        x = strip(x)
        if isinstance(x, Reg) and x.id in vic:
            out.setdefault(x.id, set()).update(range(x.size))
        elif isinstance(x, Sub) and x.reg.id in vic:
            out.setdefault(x.reg.id, set()).add(x.index)
    return out


def _each(move, t, reg, ks, loc) -> list:
    """``move`` for the dwords ``ks`` of the whole-register temporary ``t``: all at once
    when it is all of them, else one by one (a def of r[1] must not store r[0])."""
    if not ks:
        return []
    if len(ks) == reg.size:
        return move(t, reg, None, loc)
    out = []
    for k in sorted(ks):
        out += move(Sub(t, k), reg, k, loc)
    return out


def spill_vgprs(code: list, victims: list, sc: Scratch, sites=None) -> list:
    def reload(t, reg, k, loc):
        off = sc.vslot(reg) + 4 * (k or 0)
        return sc.load(t, off, loc)

    def writeback(t, reg, k, loc):
        off = sc.vslot(reg) + 4 * (k or 0)
        return sc.store(t, off, loc)
    return _rewrite(code, victims, reload, writeback, sc, sites)


def spill_sgprs(code: list, victims: list, sc: Scratch, sites=None) -> list:
    def lanes(reg, k):
        slots = sc.sslot(reg)
        return slots if k is None else [slots[k]]

    def reload(t, reg, k, loc):
        return [Inst("v_readlane_b32", [t if t.size == 1 else Sub(t, j)], [lane, Imm(n)],
                     kind="valu", loc=loc) for j, (lane, n) in enumerate(lanes(reg, k))]

    def writeback(t, reg, k, loc):
        # the lane VGPR is read as well as written: its other lanes hold other SGPRs
        return [Inst("v_writelane_b32", [lane], [t if t.size == 1 else Sub(t, j), Imm(n)],
                     kind="valu", loc=loc, imp=[lane]) for j, (lane, n) in enumerate(lanes(reg, k))]
    return _rewrite(code, victims, reload, writeback, sc, sites)


# -- after allocation: reloads of a value a register still holds ----------------------------------

def drop_redundant_reloads(code: list) -> list:
    """Remove a reload whose registers already hold that slot: loaded or stored by an
    earlier spill access in the same block, neither the registers nor the slot written
    since, and EXEC not widened since (``s_and_saveexec`` only narrows it; any other EXEC
    write forgets everything, as do labels and branches). Temporaries are short-lived and
    take the lowest free register, so back-to-back uses of one spilled value often land
    in the same register."""
    holds: dict = {}     # physical VGPR -> slot byte offset it holds
    out = []
    for inst in code:
        if not isinstance(inst, Inst) or inst.kind in ("branch", "cbranch", "end"):
            holds.clear()
            out.append(inst)
            continue
        slot = _spill_slot(inst)
        if slot is not None and inst.kind == "vmem_load":
            dst = _vgpr_units(inst.defs[0])
            if all(holds.get(u) == slot + 4 * k for k, u in enumerate(dst)):
                continue
        exec_written = False
        for d in inst.defs:
            if type(d) is Fixed:
                exec_written = exec_written or d.name.startswith("exec")
            elif holds:
                for u in _vgpr_units(d):
                    holds.pop(u, None)
        if exec_written and not inst.op.startswith("s_and_saveexec"):
            holds.clear()
        if slot is not None:
            units = _vgpr_units(inst.defs[0] if inst.kind == "vmem_load" else _store_data(inst))
            if inst.kind == "vmem_store":
                written = {slot + 4 * k for k in range(len(units))}
                for u in [u for u, s in holds.items() if s in written]:
                    del holds[u]
            for k, u in enumerate(units):
                holds[u] = slot + 4 * k
        elif inst.kind == "vmem_store" and inst.op.startswith(("scratch_", "buffer_")):
            holds.clear()  # a slot past the immediate's reach, addressed through a VGPR
        out.append(inst)
    return out


def _spill_slot(inst: Inst):
    """The slot offset of a spill access addressed by its immediate alone, else None."""
    if not inst.op.startswith(("scratch_", "buffer_")) or "offen" in inst.suffix:
        return None
    if inst.op.startswith("scratch_") and inst.uses[0] != "off":
        return None
    for part in inst.suffix.split():
        if part.startswith("offset:"):
            return int(part[len("offset:"):])
    return 0


def _store_data(inst: Inst):
    return inst.uses[0] if inst.op.startswith("buffer_") else inst.uses[1]


def _vgpr_units(x) -> list:
    x = strip(x)
    if isinstance(x, Reg) and x.cls == "v" and x.phys is not None:
        return [x.phys + k for k in range(x.size)]
    if isinstance(x, Sub) and x.reg.cls == "v" and x.reg.phys is not None:
        return [x.reg.phys + x.index]
    return []

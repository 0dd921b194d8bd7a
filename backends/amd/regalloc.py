"""Register allocation: linear scan over the linearized program.

Each virtual register lives from its first to its last mention; a register live into
a loop header (defined before the loop, mentioned inside or after it) stays live to
the loop's back edge, so the next iteration still finds it. Branch arms are laid out
one after the other, which is conservative and correct. Two registers that share an
instruction never share a physical register (no early-clobber cases to reason about).
Pairs are even-aligned (needed on gfx90a+/SGPR pairs), SGPR quads 4-aligned.

A kernel that needs more than the target allows spills (spill.py): SGPRs into VGPR
lanes, VGPRs into scratch, until it fits; only an instruction that alone needs more
registers than exist is a CompileError (naming the kernel, the count and the line).
"""
from __future__ import annotations

import heapq

from gluon_trace.errors import CompileError

from .mir import Inst, Label, mention_lists
from .spill import Scratch, choose_victims, drop_redundant_reloads, spill_sgprs, spill_vgprs


def live_intervals(code: list, loops: list, mentions: dict | None = None) -> dict:
    """{Reg: [start, end]} over instruction indices of ``code`` (from ``mentions``, its
    ``mention_lists``, when the caller has them)."""
    if mentions is None:
        mentions = mention_lists(code)
    iv = {r: [-1 if r.fixed is not None else ks[0], ks[-1]] for r, ks in mentions.items()}
    spans = _loop_spans(code, loops)
    changed = True
    while changed:
        changed = False
        for start, end in spans:
            for r, (s, e) in iv.items():
                if s < start <= e and e < end:
                    iv[r][1] = end
                    changed = True
    return iv


def _loop_spans(code: list, loops: list) -> list:
    """(header index, back-edge index) of each loop."""
    if not loops:
        return []
    ends = {id(x) for h, b in loops for x in (h, b)}
    pos = {id(x): k for k, x in enumerate(code) if id(x) in ends}
    return [(pos[id(h)], pos[id(b)]) for h, b in loops]


class Allocation:
    def __init__(self):
        self.vgprs = 0
        self.sgprs = 0
        self.agprs = 0                     # MFMA accumulators (agpr.py), CDNA only
        self.peak_at = {"v": None, "s": None, "a": None}
        self.code: list = []               # the program, with spill code when it spilled
        self.scratch: Scratch | None = None
        self.intervals: dict = {}          # the scan's live intervals (the spiller reuses them)
        self.mentions: dict = {}           # and its mention_lists


class _File:
    """One register file during the scan: which units are busy (bit q of ``mask``) and until
    when. The lowest free block comes from bit arithmetic over the whole file at once (a
    kernel far over budget has thousands live: a linear search per value made the first
    scan quadratic, and heaps of candidate units cost more than the ints' word loops)."""

    def __init__(self):
        self.mask = 0             # bit q set: unit q busy
        self.top = 0              # units ever taken (the file's size so far)
        self.ends: list = []      # heap of (end, first unit, size)
        self.grid: dict = {}      # align -> int with a bit at every multiple of align (grown)

    def expire(self, start: int) -> None:
        ends = self.ends
        if ends and ends[0][0] < start:
            mask = self.mask
            while ends and ends[0][0] < start:
                _, p, n = heapq.heappop(ends)
                mask &= ~(((1 << n) - 1) << p)
            self.mask = mask

    def is_busy(self, q: int) -> bool:
        return bool(self.mask >> q & 1)

    def _starts(self, align: int, end: int) -> int:
        """Bits 0, align, 2 align, ... below ``end``."""
        g = self.grid.get(align)
        if g is None or g.bit_length() < end:
            n = max(2 * end, 256)
            g = self.grid[align] = ((1 << (align * (n // align))) - 1) // ((1 << align) - 1)
        return g & ((1 << end) - 1)

    def lowest(self, size: int, align: int) -> int:
        mask = self.mask
        if size == 1:
            return (~mask & (mask + 1)).bit_length() - 1  # the lowest clear bit
        end = -(-self.top // align) * align  # aligned, and free from there on
        free = ~mask & ((1 << (end + size)) - 1)
        fit = free
        for i in range(1, size):
            fit &= free >> i  # bit p: units p .. p + i all free
        fit &= self._starts(align, end)
        return (fit & -fit).bit_length() - 1 if fit else end

    def take(self, p: int, size: int, end: int) -> None:
        self.mask |= ((1 << size) - 1) << p
        if p + size > self.top:
            self.top = p + size
        heapq.heappush(self.ends, (end, p, size))


def _scan(code: list, loops: list, vgpr_align2: bool) -> Allocation:
    mentions = mention_lists(code)
    iv = live_intervals(code, loops, mentions)
    # (start, -size, id) is unique per register: the tuples sort without comparing the rest
    order = sorted([(s, -r.size, r.id, r, e) for r, (s, e) in iv.items()])
    files = {"v": _File(), "s": _File(), "a": _File()}
    result = Allocation()
    peak = {"v": 0, "s": 0, "a": 0}
    push = heapq.heappush
    for start, _, _, reg, end in order:  # (_File's expire, lowest and take, inlined)
        cls = reg.cls
        f = files[cls]
        if f.ends and f.ends[0][0] < start:
            f.expire(start)
        size = reg.size
        if reg.fixed is not None:
            p = reg.fixed
        elif size == 1:
            mask = f.mask
            p = reg.phys = (~mask & (mask + 1)).bit_length() - 1
        else:
            align = min(size, 4) if cls == "s" else (2 if vgpr_align2 else 1)
            p = reg.phys = f.lowest(size, align)
        f.mask |= ((1 << size) - 1) << p
        top = p + size
        if top > f.top:
            f.top = top
        push(f.ends, (end, p, size))
        if top > peak[cls]:
            peak[cls] = top
            result.peak_at[cls] = start
    result.vgprs, result.sgprs, result.agprs = peak["v"], peak["s"], peak["a"]
    result.intervals = iv
    result.mentions = mentions
    return result


MAX_ROUNDS = 48


def allocate(code: list, loops: list, *, name: str, vgpr_limit: int, sgpr_limit: int,
             target: str, num_warps: int, vgpr_align2: bool = True,
             scratch: Scratch | None = None) -> Allocation:
    """Physical registers for ``code``; with ``scratch``, spill until the limits hold.
    Each round spills what the pressure sweep says must go; when fragmentation (aligned
    pairs) still leaves the scan over the limit, the next sweep aims lower."""
    budget = {"v": vgpr_limit, "s": sgpr_limit}
    limit = {"v": vgpr_limit, "s": sgpr_limit}
    spilled: set = set()
    for _ in range(MAX_ROUNDS):
        result = _scan(code, loops, vgpr_align2)
        have = {"v": result.vgprs, "s": result.sgprs}
        over = [c for c in ("s", "v") if have[c] > limit[c]]
        if not over:
            if scratch is not None and scratch.bytes:
                code = drop_redundant_reloads(code)
            result.code, result.scratch = code, scratch
            return result
        if scratch is None:
            break
        cls = over[0]  # SGPRs first: their spills take VGPR lanes
        if cls in spilled:
            # still over after spilling to the budget: the excess is fragmentation and spill
            # temporaries, which the same budget would find again a victim at a time (each
            # round a scan, a sweep and a rewrite of the whole program): aim lower now
            budget[cls] -= have[cls] - limit[cls]
            spilled.discard(cls)
            if budget[cls] < 4:
                break
        sites: list = []
        victims = choose_victims(code, result.intervals, loops, cls, budget[cls], scratch.frozen, sites,
                                 result.mentions)
        if victims:
            code = (spill_sgprs if cls == "s" else spill_vgprs)(code, victims, scratch, sites)
            spilled.add(cls)
        else:
            budget[cls] -= max(2, have[cls] - limit[cls])
            if budget[cls] < 4:
                break
    for cls, what in (("v", "VGPRs"), ("s", "SGPRs")):
        have = result.vgprs if cls == "v" else result.sgprs
        if have > limit[cls]:
            k = result.peak_at[cls]
            loc = None
            if k is not None and 0 <= k < len(code) and isinstance(code[k], Inst):
                loc = code[k].loc
            how = ("; the values the instruction there needs at once do not fit"
                   if scratch is not None else "")
            raise CompileError(
                f"kernel {name} needs {have} {what} on {target} but at most {limit[cls]} fit "
                f"(num_warps={num_warps}){how}. Use smaller tiles, fewer live values, or "
                "fewer warps", loc)
    raise AssertionError("unreachable")


def check_assigned(code: list) -> None:
    for inst in code:
        if isinstance(inst, Label):
            continue
        for r in inst.mentioned():
            assert r.phys is not None, f"unallocated {r!r} in {inst!r}"

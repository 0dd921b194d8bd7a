"""Registers kept in ``.local`` memory, chosen by us, where a kernel holds far more values at
once than a thread has registers.

ptxas's time on a program grows with how many values are live at once (roughly the square),
not with its length: fuzz seed 53 (4096 bfloat16 values a thread, a loop carrying a tile)
took it ~85 CPU-s and 3.6 GB, while 40k lines of the same program with few values live take
it 2 s. Above a trigger we therefore do the spilling ourselves, in the simplest form that is
correct under any control flow: each chosen register gets a slot in one ``.local`` array,
every instruction writing it is followed by a ``st.local`` of it, and every instruction
reading it (or writing it under a guard, so that the fresh register holds the old value where
the guard is false) is preceded by an ``ld.local`` into a fresh register that the instruction
uses instead. A predicate's slot holds 0 or 1 (``selp`` before the store, ``setp`` after the
load). Kernels under the trigger (all the library kernels) are returned unchanged.

Liveness is computed on the final PTX: basic blocks split at labels and after branches, the
usual backward dataflow (a register live around a back edge is live over the whole loop), then
the stretches of lines where each register is live. While the most crowded line holds more
than the budget, the registers live there with the longest live range per use are chosen.
The slots are addressed from a base register that changes every SPAN lines (see SPAN): with
constant addresses ptxas undoes the spilling.
"""
from __future__ import annotations

import re

import numpy as np

# When to spill: a kernel whose lines hold more than TRIGGER 32-bit registers (or PRED_TRIGGER
# predicates) live at once at some point. The library and test kernels stay well below (the most:
# an FMA dot of float64 tiles, 596 words; the warp-specialized attention 239 words, 52
# predicates): ptxas compiles those in seconds and spills what it must itself. The fuzzer's
# huge tiles go far above (seed 97 3,210 words and 1,026 predicates, seed 111 4,106).
TRIGGER = 1024
PRED_TRIGGER = 256
# How far to spill once triggered: what a thread's 255 registers hold with room for ptxas's
# own addresses and temporaries (our count is of PTX virtual registers, which ptxas may
# schedule into fewer or more), and a few predicates (the hardware has 7; ptxas moves the rest
# into general registers).
BUDGET = 192
PRED_BUDGET = 32
# Lines (of those reading or writing a kept register) addressed from one value of the slots'
# base register. ptxas moves loads up and forwards stores to loads where it can prove two
# addresses the same, which rebuilt the long live ranges: with the slots at constant addresses
# ptxas -O3 took as long as without spilling (seed 97: 21.0 s before, 22.6 s spilled). A load
# cannot move above the line that last changed its base, nor a store reach a load of another
# stretch. (Seed 97: 7.9 s with 64, 8.2 s with 256; seed 53 no better with 16.)
SPAN = 64
# Straight-line stretches longer than this many lines are cut into pieces of this many, each
# behind a branch around it on tid.y != 0: never taken (our blocks are one-dimensional), but
# ptxas cannot know, and its time grows faster than linearly with a block's length (spilled seed
# 53: 52 -> 35 s of ptxas -O3 with pieces of 2000; seed 97: 7.9 -> 5.6 s; a side exit to a
# trap instead of a branch around did not help: ptxas schedules across it).
CUT = 2000
ARRAY = "gt_spill"

_REG = re.compile(r"%(?:rd|fd|r|f|h|p)\d+")
_WGMMA = re.compile(r"\s*(?:@!?%p\d+\s+)?wgmma\.")
_WORDS = {"r": 1, "f": 1, "h": 1, "rd": 2, "fd": 2, "p": 0}  # 32-bit words a register takes
_CLASS = {"r": "b32", "f": "f32", "h": "b16", "rd": "b64", "fd": "f64", "p": "pred"}
_MEM = {"r": "b32", "f": "f32", "h": "b16", "rd": "b64", "fd": "f64", "p": "b32"}  # ld/st.local type
_BYTES = {"r": 4, "f": 4, "h": 2, "rd": 8, "fd": 8, "p": 4}
# opcodes whose first operand is written and not read, and the others only read
_WRITE_FIRST = frozenset("""add sub mul mad mul24 mad24 neg abs min max and or xor not cnot shl shr
    bfe bfi prmt popc clz brev selp setp set mov cvt fma rcp sqrt rsqrt ex2 lg2 sin cos tanh div
    rem testp copysign lop3 shf ld ldu atom shfl vote cvta mapa activemask""".split())
_GUARD = re.compile(r"@!?%p\d+ ")
_OPERANDS = re.compile(r"\{[^}]*\}|\[[^\]]*\]|[^,]+")


def _kind(reg: str) -> str:
    return reg[1:].rstrip("0123456789")


def _parse(text: str):
    """(label, branch target or '', ends the block?, guard, written, read, exact) of a line;
    ``exact`` False for an instruction whose operands we do not know the roles of: then its
    registers count as read and written (the rewrite loads before and stores after it)."""
    t = text.strip()
    if not t or t.startswith("//") or t.startswith("."):
        return None, "", False, None, (), (), True
    if t.endswith(":"):
        return t[:-1], "", False, None, (), (), True
    guard = None
    if t[0] == "@":
        guard, t = t.split(" ", 1)
    op, _, rest = t.rstrip(";").partition(" ")
    base = op.split(".", 1)[0]
    gr = [guard.lstrip("@!")] if guard else []
    if base == "bra":
        return None, rest.strip(), guard is None, guard, (), gr, True
    if base in ("ret", "exit", "trap"):
        return None, "", guard is None, guard, (), gr, True
    regs = _REG.findall(rest)
    if base in _WRITE_FIRST:
        first = _OPERANDS.match(rest).group(0)
        if not first.lstrip().startswith("["):
            w = _REG.findall(first)
            r = _REG.findall(rest[len(first):])
            return None, "", False, guard, w, r + gr, True
    return None, "", False, guard, regs, regs + gr, False


def _liveness(info, reg_id):
    """The stretches [(first, last line, register id)] where each register is live, or None
    if a branch leaves the lines."""
    n = len(info)
    starts = {0}
    for i, (lab, tgt, ends, *_rest) in enumerate(info):
        if lab is not None:
            starts.add(i)
        elif (tgt or ends) and i + 1 < n:
            starts.add(i + 1)
    starts = sorted(starts)
    labels = {}
    bounds = list(zip(starts, starts[1:] + [n]))
    for b, (s, _) in enumerate(bounds):
        if info[s][0] is not None:
            labels[info[s][0]] = b
    succ, gen, kill = [], [], []
    for b, (s, e) in enumerate(bounds):
        g, k = set(), set()
        for i in range(e - 1, s - 1, -1):
            _, _, _, guard, w, r, exact = info[i]
            if exact and guard is None:
                for x in w:
                    g.discard(reg_id[x])
                    k.add(reg_id[x])
            g.update(reg_id[x] for x in r)
        gen.append(g)
        kill.append(k)
        last = info[e - 1]
        out = []
        if last[1]:
            if last[1] not in labels:
                return None
            out.append(labels[last[1]])
        if not last[2] and b + 1 < len(bounds):
            out.append(b + 1)
        succ.append(out)
    live_in = [set() for _ in bounds]
    live_out = [set() for _ in bounds]
    changed = True
    while changed:
        changed = False
        for b in range(len(bounds) - 1, -1, -1):
            o = set().union(*(live_in[x] for x in succ[b]))
            li = gen[b] | (o - kill[b])
            if o != live_out[b] or li != live_in[b]:
                live_out[b], live_in[b] = o, li
                changed = True
    segs = []
    for b, (s, e) in enumerate(bounds):
        end = dict.fromkeys(live_out[b], e - 1)
        for i in range(e - 1, s - 1, -1):
            _, _, _, guard, w, r, exact = info[i]
            for x in w:
                k = reg_id[x]
                if k not in end:
                    segs.append((i, i, k))  # written and never read: still takes a register here
                elif exact and guard is None:
                    segs.append((i, end.pop(k), k))
            for x in r:
                k = reg_id[x]
                if k not in end:
                    end[k] = i
        for k, last in end.items():
            segs.append((s, last, k))
    return np.array(segs, np.int64).reshape(-1, 3)


def _pressure(seg, weight, n: int):
    """Sum of ``weight`` over the registers live at each of ``n`` lines."""
    d = np.zeros(n + 1, np.int64)
    np.add.at(d, seg[:, 0], weight[seg[:, 2]])
    np.subtract.at(d, seg[:, 1] + 1, weight[seg[:, 2]])
    return np.cumsum(d[:n])


def choose(texts: list[str], budget: int = BUDGET, pred_budget: int = PRED_BUDGET, keep=frozenset(),
           trigger: int = TRIGGER, pred_trigger: int = PRED_TRIGGER, info=None) -> set[str]:
    """The registers (none of ``keep``) to keep in ``.local`` so that no line has more than
    ``budget`` 32-bit registers or ``pred_budget`` predicates live (as far as spilling gets
    there); none unless some line has more than ``trigger`` or ``pred_trigger``. ``info``: the
    lines' _parse, when the caller has it."""
    info = info or [_parse(t) for t in texts]
    reg_id = {}
    for *_x, w, r, _e in info:
        for x in (*w, *r):
            if x not in reg_id:
                reg_id[x] = len(reg_id)
    names = list(reg_id)
    words = np.array([_WORDS[_kind(x)] for x in names], np.int64)
    preds = (words == 0).astype(np.int64)
    if words.sum() <= trigger and preds.sum() <= pred_trigger:
        return set()  # (most kernels: fewer registers in all than the budget)
    seg = _liveness(info, reg_id)
    if seg is None:
        return set()
    n = len(texts)
    if _pressure(seg, words, n).max() <= trigger and _pressure(seg, preds, n).max() <= pred_trigger:
        return set()
    spillable = np.zeros(len(names), bool)  # defined in the lines and not kept
    spillable[[reg_id[x] for *_x, w, _r, _e in info for x in w]] = True
    spillable[[reg_id[x] for x in keep if x in reg_id]] = False
    pairs = np.array([(i, reg_id[x]) for i, (*_x, w, r, _e) in enumerate(info) for x in {*w, *r}],
                     np.int64).reshape(-1, 2)
    pairs = pairs[np.argsort(pairs[:, 1], kind="stable")]
    occ = np.split(pairs[:, 0], np.searchsorted(pairs[:, 1], np.arange(1, len(names))))
    uses = np.bincount(pairs[:, 1], minlength=len(names))
    length = np.bincount(seg[:, 2], seg[:, 1] - seg[:, 0] + 1, minlength=len(names))
    score = length / (1 + uses)
    order = np.argsort(seg[:, 2], kind="stable")
    by_reg = np.split(order, np.searchsorted(seg[order, 2], np.arange(1, len(names))))
    chosen = np.zeros(len(names), bool)
    for weight, limit in ((preds, pred_budget), (words, budget)):
        pressure = _pressure(seg, weight, n)
        while True:
            i = int(pressure.argmax())
            excess = int(pressure[i]) - limit
            if excess <= 0:
                break
            here = np.unique(seg[(seg[:, 0] <= i) & (seg[:, 1] >= i), 2])
            here = here[spillable[here] & ~chosen[here] & (weight[here] > 0)]
            if not len(here):
                break  # nothing more to spill where it is most crowded
            here = here[np.argsort(-score[here], kind="stable")]
            take = here[:int(np.searchsorted(np.cumsum(weight[here]), excess)) + 1]
            for k in take:
                chosen[k] = True
                for j in by_reg[k]:
                    pressure[seg[j, 0]:seg[j, 1] + 1] -= weight[k]
                pressure[occ[k]] += weight[k]  # the fresh register around each use or definition
    return {names[k] for k in np.nonzero(chosen)[0]}


def rewrite(texts: list[str], chosen: set[str], counts: dict, info=None) -> tuple[list[list[str]], int]:
    """For each line, the lines replacing it (each write of a chosen register stored to its
    slot, each read loaded from it into a fresh register), and the bytes of slots used.
    ``counts`` ({register class: highest number}) is advanced by the fresh registers."""
    slot, size = {}, 0
    # 8-byte slots first (aligned), then in register order (the same PTX every run)
    for x in sorted(chosen, key=lambda x: (-_BYTES[_kind(x)], _kind(x), int(x.lstrip("%rdfhp")))):
        slot[x] = size
        size += _BYTES[_kind(x)]
    # the slots are addressed from a base register that every SPAN lines has a zero ptxas cannot
    # see through added to it (tid.y: 0 in our one-dimensional blocks, .maxntid N, 1, 1)
    zero32, zero, base = f"%r{counts['b32'] + 1}", f"%rd{counts['b64'] + 1}", f"%rd{counts['b64'] + 2}"
    counts["b32"] += 1
    counts["b64"] += 2
    out = []
    since = 0
    for i, t in enumerate(texts):
        _, _, _, guard, w, r, exact = info[i] if info else _parse(t)
        regs = [x for x in (*w, *r) if x in slot]
        if not regs:
            out.append([t])
            continue
        pre, post = [], []
        if since >= SPAN:
            pre.append(f"add.s64 {base}, {base}, {zero};")
            since = 0
        since += 1
        fresh = {}
        for x in dict.fromkeys(regs):
            cls = _CLASS[_kind(x)]
            counts[cls] += 1
            fresh[x] = f"%{_kind(x)}{counts[cls]}"
        body = _REG.sub(lambda m: fresh.get(m.group(0), m.group(0)), t)
        for x in fresh:
            at = f"[{base}+{slot[x]}]"
            ty = _MEM[_kind(x)]
            # a guarded write loads first too: the fresh register then holds the value either
            # way and is stored unguarded (one definition and one store: a plain live range)
            load = x in r or not exact or guard is not None
            if _kind(x) == "p":  # a predicate's slot holds 0 or 1
                counts["b32"] += 1
                word = f"%r{counts['b32']}"
                if load:
                    pre += [f"ld.local.b32 {word}, {at};", f"setp.ne.b32 {fresh[x]}, {word}, 0;"]
                if x in w:
                    post += [f"selp.b32 {word}, 1, 0, {fresh[x]};", f"st.local.b32 {at}, {word};"]
                continue
            if load:
                pre.append(f"ld.local.{ty} {fresh[x]}, {at};")
            if x in w:
                post.append(f"st.local.{ty} {at}, {fresh[x]};")
        out.append(pre + [body] + post)
    out[0][:0] = [f"mov.u32 {zero32}, %tid.y;", f"cvt.u64.u32 {zero}, {zero32};", f"mov.u64 {base}, {ARRAY};"]
    return out, size


def _boundary(text: str) -> bool:
    """A line a cut piece must not hold: labels, branches, and what all the warp (or block)
    executes together."""
    g = _GUARD.match(text)
    t = text[g.end():] if g else text
    return (text.endswith(":") or t.startswith(("bra", "ret", "exit", "trap", "bar", "membar", "fence"))
            or ".sync" in t or ".aligned" in t)


def cut_stretches(lines: list, counts: dict, length: int = CUT) -> list:
    """``lines`` ([(text, loc)]) with each straight stretch of more than ``length`` lines split
    into pieces, each behind ``@p bra`` to its end, p = (tid.y != 0)."""
    marks = [_boundary(t) for t, _ in lines]
    runs, start = [], None
    for i, b in enumerate(marks + [True]):
        if not b and start is None:
            start = i
        elif b and start is not None:
            if i - start > length:
                runs.append((start, i))
            start = None
    if not runs:
        return lines
    counts["b32"] += 1
    counts["pred"] += 1
    tid, never = f"%r{counts['b32']}", f"%p{counts['pred']}"
    out = [(f"mov.u32 {tid}, %tid.y;", None), (f"setp.ne.u32 {never}, {tid}, 0;", None)]
    k, at = 0, 0
    for s, e in runs:
        out.extend(lines[at:s])
        for a in range(s, e, length):
            k += 1
            out.append((f"@{never} bra $L_spill_cut_{k};", None))
            out.extend(lines[a:min(a + length, e)])
            out.append((f"$L_spill_cut_{k}:", None))
        at = e
    out.extend(lines[at:])
    return out


_TOKEN = re.compile(r"%(?:rd|fd|r|f|h|p)\d+|\n")
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$?\w+);")


def pressure_bound(text: str) -> tuple[int, int]:
    """(32-bit words, predicates) live at the most crowded line, estimated in a few C-speed
    passes over the text (the exact liveness walks every line in Python: 20-40 ms on the
    warp-specialized attention kernel, which has 4,000 registers but 250 words live). Each
    register counts as live from its first to its last mention, widened to a whole loop where
    that stretch crosses the loop's top or bottom. The dataflow can find a little more (a
    register only ever written under a guard is live back to the kernel's start there); on 2,300
    random programs it was never more than 8 above this. Used only to skip the exact count
    where this is far under the trigger: being low could cost ptxas time, never a result."""
    toks = _TOKEN.findall(text)
    names = list(dict.fromkeys(toks))
    if "\n" in names:
        names.remove("\n")
    index = {x: i for i, x in enumerate(names)}
    index["\n"] = len(names)
    ids = np.fromiter(map(index.__getitem__, toks), np.int64, len(toks))
    line = np.cumsum(ids == len(names))
    first, last = np.zeros(len(names) + 1, np.int64), np.zeros(len(names) + 1, np.int64)
    first[ids[::-1]] = line[::-1]  # repeated indices: the last assignment stays
    last[ids] = line
    first, last = first[:-1], last[:-1]
    labels, branches = {}, []
    for i, t in enumerate(text.split("\n")):  # str tests: a regex over the text took 7 ms here
        if t.endswith(":"):
            labels[t.strip()[:-1]] = i
        elif "bra" in t:
            m = _BRANCH.search(t)
            if m:
                branches.append((m.group(1), i))
    loops = [(labels[x], i) for x, i in branches if x in labels and labels[x] <= i]
    loops.sort(key=lambda tb: tb[1] - tb[0])  # inner loops first: one pass widens nested ones
    for _ in range(8):  # (loops that overlap without nesting may need another)
        grown = False
        for top, bottom in loops:
            cross = ((first < top) & (last >= top) & (last < bottom)) | ((first > top) & (first <= bottom) & (last > bottom))
            if cross.any():
                np.minimum(first, top, out=first, where=cross)
                np.maximum(last, bottom, out=last, where=cross)
                grown = True
        if not grown:
            break
    kinds = [x[1:3] if x[2] == "d" else x[1] for x in names]
    words = np.array([_WORDS[k] for k in kinds], np.int64)
    preds = np.array([k == "p" for k in kinds], np.int64)
    n = int(line[-1]) + 2 if len(line) else 2

    def most(weight):
        d = np.bincount(first, weight, minlength=n + 1) - np.bincount(last + 1, weight, minlength=n + 1)
        return int(np.cumsum(d).max()) if len(d) else 0
    return most(words), most(preds)


def spill_registers(em) -> list:
    """The emitter's lines ([(text, loc)]) with registers kept in ``.local`` above the budget;
    ``em``'s register counts and local declarations grow with what that needs."""
    c = em.counts
    if c["b32"] + c["f32"] + c["b16"] + 2 * (c["b64"] + c["f64"]) <= TRIGGER and c["pred"] <= PRED_TRIGGER:
        return em.lines  # fewer registers in all than the trigger: most kernels stop here
    texts = [t for t, _ in em.lines]
    words, preds = pressure_bound("\n".join(texts))
    if words <= TRIGGER // 2 and preds <= PRED_TRIGGER // 2:
        return em.lines  # (big library kernels: thousands of registers, a few hundred live)
    keep = {x for p in em.prologue for x in _REG.findall(p)}
    # wgmma reads and writes its registers asynchronously, until the wait_group that retires it:
    # a store after it (or a reload into a fresh register before it) would see the old value
    keep |= {x for t in texts if _WGMMA.match(t) for x in _REG.findall(t)}
    info = [_parse(t) for t in texts]
    chosen = choose(texts, BUDGET, PRED_BUDGET, keep, TRIGGER, PRED_TRIGGER, info)
    if not chosen:
        return em.lines
    new, size = rewrite(texts, chosen, em.counts, info)
    em.local_decls.append(f".local .align 8 .b8 {ARRAY}[{size}];")
    return cut_stretches([(t, loc) for group, (_, loc) in zip(new, em.lines) for t in group], em.counts, CUT)

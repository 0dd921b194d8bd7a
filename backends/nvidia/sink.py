"""Shared-memory loads moved down to their first reader, where a tile is too large for the
register file.

A layout conversion reads its whole tile back from shared memory, and the next op (a store,
say) then uses it: with 4096 values a thread, all 4096 are live at once between the two, and
ptxas spends most of its time spilling them (fuzz seed 53, its tile ``v8`` alone: 26 s; with
each load next to the store that reads it: 8 s). Here, within a stretch with no barrier or
other synchronisation, each ``ld.shared`` whose stretch loads more registers than a thread
can have is placed right before the first line that reads one of its results, so values are
loaded as they are consumed. Smaller stretches keep the order the rules gave them (ptxas
schedules those well, and no kernel that fits in registers changes).

Moving a load later is exact when nothing between writes what it reads or its address: the
lines it moves past are pure instructions, global loads and stores, and other shared loads
(no shared-memory write, barrier, fence, atomic, branch or label); one that writes a register
the load reads or writes, or reads its result, places the load before it.
"""
from __future__ import annotations

import re

from .dce import _def

LIMIT = 256  # registers a thread can have
_REG = re.compile(r"%[a-z]+\d+")
_LOAD = re.compile(r"(?:@!?%p\d+ )?ld\.(shared|global)(?:\.v\d)?\.\w+ (\{[^}]*\}|%[a-z]+\d+), \[[^\]]*\];")
_STORE = re.compile(r"(?:@!?%p\d+ )?st\.global(?:\.v\d)?\.\w+ \[[^\]]*\], [^;]*;")  # plain: no .release


def _effects(text: str):
    """(registers written, registers read, shared load?) of a line a load may move past, or
    None for a line it may not."""
    d = _def(text)
    if d is not None:
        return d[0], d[1], False
    if "ld." not in text and "st." not in text:
        return None
    m = _LOAD.fullmatch(text)
    if m:
        dsts = _REG.findall(m.group(2))
        return dsts, [r for r in _REG.findall(text) if r not in dsts], m.group(1) == "shared"
    if _STORE.fullmatch(text):
        return [], _REG.findall(text), False
    return None


def sink_shared_loads(lines: list) -> list:
    """``lines`` ([(text, loc)]) with the shared loads of oversized stretches moved down."""
    if sum(t.count("%", 0, t.find("[")) for t, _ in lines if "ld.shared" in t) <= LIMIT:
        return lines  # (no stretch can be oversized: most kernels pay only this count)
    eff = [_effects(t) for t, _ in lines]
    out, i, n = [], 0, len(lines)
    while i < n:
        if eff[i] is None:
            out.append(lines[i])
            i += 1
            continue
        j = i
        while j < n and eff[j] is not None:
            j += 1
        loaded = sum(len(e[0]) for e in eff[i:j] if e[2])
        if loaded > LIMIT:
            out.extend(_sink(lines[i:j], eff[i:j]))
        else:
            out.extend(lines[i:j])
        i = j
    return out


def _sink(lines: list, eff: list) -> list:
    out, pending = [], {}  # pending: index -> (line, written, read), in the original order
    by_written, by_read = {}, {}
    for k, (line, (w, r, shared)) in enumerate(zip(lines, eff)):
        # a load this line reads, overwrites or whose address it changes goes first
        due = {x for reg in (*w, *r) for x in by_written.get(reg, ())}
        due.update(x for reg in w for x in by_read.get(reg, ()))
        for x in sorted(due):
            line_x, wx, rx = pending.pop(x)
            out.append(line_x)
            for reg in wx:
                by_written[reg].discard(x)
            for reg in rx:
                by_read[reg].discard(x)
        if shared:
            pending[k] = (line, w, r)
            for reg in w:
                by_written.setdefault(reg, set()).add(k)
            for reg in r:
                by_read.setdefault(reg, set()).add(k)
        else:
            out.append(line)
    out.extend(p[0] for p in pending.values())
    return out

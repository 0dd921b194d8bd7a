"""Dropping instructions whose result no instruction reads, before the PTX is written.

The rules make each element's registers as they go, and some are never read: a tile's
offsets ``add.s32 base, c`` where only addresses ``[p + imm]`` read the offsets, a 16-bit
value widened to f32 when only its bits are stored or carried. ptxas removes them too; what
changes is the PTX: in the slowest random program (fuzz seed 53, 4096 bfloat16 values per
thread) 46k of 125k lines were dead. (ptxas's time on it barely moved without them: what
costs it is values live at once, see sink.py.)

Flow-insensitive, so loops and branches need no care: the registers read by lines with an
effect (loads, stores, shuffles, barriers, branches: all but the pure instructions) are live,
and so, transitively, are those read by a pure instruction (an arithmetic, move, conversion or
compare, maybe guarded) defining a live one. The pure instructions defining none are dropped,
a value carried around a loop whose result nothing reads included.
"""
from __future__ import annotations

import re

_REG = re.compile(r"%[a-z]+\d+")
# the opcodes whose only effect is their destination register(s)
_PURE = frozenset("""add sub mul mad mul24 mad24 neg abs min max and or xor not cnot shl shr
    bfe bfi prmt popc clz brev selp setp set mov cvt fma rcp sqrt rsqrt ex2 lg2 sin cos div rem
    testp copysign lop3 shf""".split())
_GUARD = re.compile(r"@!?%p\d+ ")


def _def(text: str):
    """(destination registers, source registers) of a removable line: ``[@guard ]opcode.mods
    dst, ...;`` or ``mov.bN {dst, dst}, src;``, one instruction of a pure opcode; else None."""
    g = text[:1] == "@"
    at = 0
    if g:
        m = _GUARD.match(text)
        if m is None:
            return None
        at = m.end()
    dot = text.find(".", at)
    if dot < 0 or text[at:dot] not in _PURE or text.find(";") != len(text) - 1:
        return None
    sp = text.find(" ", dot)
    if sp < 0:
        return None
    if text[sp + 1:sp + 2] == "{":
        close = text.find("}", sp)
        if close < 0:
            return None
        k = text.count("%", sp, close)
    else:
        k = 1
    regs = _REG.findall(text)
    if len(regs) < g + k:
        return None
    if k == 1 and not text.startswith(regs[g] + ",", sp + 1):
        return None  # (``setp d|e``, ``{d}``, or no register first: not a definition known here)
    dsts, srcs = regs[g:g + k], regs[:g] + regs[g + k:]
    if (dsts[0] in srcs) if k == 1 else any(r in dsts for r in srcs):
        srcs = [r for r in srcs if r not in dsts]  # its reads by its own definitions keep nothing alive
    return dsts, srcs


def live_lines(texts: list[str]) -> list[bool]:
    """For each line, whether it stays (False: a pure instruction whose results are unread)."""
    defs, by_reg, live, work = {}, {}, set(), []
    for i, t in enumerate(texts):
        d = _def(t)
        if d is None:
            work.extend(_REG.findall(t))
        else:
            defs[i] = d
            for r in d[0]:
                by_reg.setdefault(r, []).append(i)
    while work:  # marking from the lines with an effect: a cycle read by none of them dies too
        r = work.pop()
        if r in live:
            continue
        live.add(r)
        for i in by_reg.get(r, ()):
            work.extend(defs[i][1])
    return [i not in defs or any(r in live for r in defs[i][0]) for i in range(len(texts))]

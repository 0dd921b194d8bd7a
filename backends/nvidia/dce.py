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
# ``[@guard ]opcode.mods dst, srcs;`` or ``mov.bN {dst, dst}, src;``: one instruction
_DEF = re.compile(r"(?:@!?(%p\d+) )?([a-z0-9]+)\.[^ ;]* (%[a-z]+\d+|\{%[a-z]+\d+(?:, %[a-z]+\d+)*\}), ([^;]*);")


def _def(text: str):
    """(destination registers, source registers) of a removable line (one instruction of a
    pure opcode writing registers), else None."""
    m = _DEF.fullmatch(text)
    if m is None or m.group(2) not in _PURE:
        return None
    dst = m.group(3)
    dsts = _REG.findall(dst) if dst[0] == "{" else [dst]
    srcs = _REG.findall(m.group(4))
    if m.group(1):
        srcs.append(m.group(1))
    if dsts[0] in srcs or (len(dsts) > 1 and any(r in dsts for r in srcs)):
        srcs = [r for r in srcs if r not in dsts]  # its reads by its own definitions keep nothing alive
    return dsts, srcs


def live_lines(texts: list[str]) -> list[bool]:
    """For each line, whether it stays (False: a pure instruction whose results are unread)."""
    defs = [_def(t) for t in texts]
    needed = set()  # registers read by a line that stays
    for t, d in zip(texts, defs):
        if d is None:
            needed.update(_REG.findall(t))
    keep = [d is None for d in defs]
    todo = [i for i, d in enumerate(defs) if d is not None]
    while True:  # sweeps from the end until one keeps nothing more (a loop's back edge needs two)
        rest, grew = [], False
        for i in reversed(todo):
            dsts, srcs = defs[i]
            if any(r in needed for r in dsts):
                keep[i] = grew = True
                needed.update(srcs)
            else:
                rest.append(i)
        if not grew:
            return keep
        todo = rest[::-1]

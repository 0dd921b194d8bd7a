"""Dropping instructions whose result no instruction reads, before the PTX is written.

The rules make each element's registers as they go, and some are never read: a tile's
offsets ``add.s32 base, c`` where only addresses ``[p + imm]`` read the offsets, a 16-bit
value widened to f32 when only its bits are stored or carried. ptxas removes them too, but
only after reading them: in the slowest random program (fuzz seed 53, 4096 bfloat16 values
per thread) 42k of 125k instructions were dead, and parsing them into ptxas's IR is part of
what it spends minutes on.

Flow-insensitive, so loops and branches need no care: a register that no remaining line
mentions outside its own definitions is dead, and so is each pure instruction defining it
(an arithmetic, move, conversion or compare, maybe guarded; never a load, store, shuffle,
barrier or anything else with an effect). Removing one may free its sources: a worklist
runs until none is left.
"""
from __future__ import annotations

import re
from collections import Counter

_REG = re.compile(r"%[a-z]+\d+")
# the opcodes whose only effect is their destination register(s)
_PURE = frozenset("""add sub mul mad mul24 mad24 neg abs min max and or xor not cnot shl shr
    bfe bfi prmt popc clz brev selp setp set mov cvt fma rcp sqrt rsqrt ex2 lg2 sin cos div rem
    testp copysign lop3 shf""".split())
# ``[@guard ]opcode.modifiers dst, ...;`` or ``mov.bN {dst, dst}, src;``: one instruction
_DEF = re.compile(r"(?:@!?%p\d+ )?([a-z0-9]+)[.\w]* (%[a-z]+\d+|\{%[a-z]+\d+(?:, %[a-z]+\d+)*\}), [^;]*;")


def _def(text: str):
    """(destination registers, source registers) of a removable line, else None."""
    m = _DEF.fullmatch(text)
    if m is None or m.group(1) not in _PURE:
        return None
    dst = m.group(2)
    dsts = _REG.findall(dst)
    # (a register's reads by its own definitions, ``shl.b32 %r5, %r5, 16``, keep nothing alive)
    srcs = [r for r in _REG.findall(text[:m.start(2)]) + _REG.findall(text[m.end(2):]) if r not in dsts]
    return dsts, srcs


def live_lines(texts: list[str]) -> list[bool]:
    """For each line, whether it stays (False: a pure instruction whose results are unread)."""
    defs, uses, by_reg = {}, Counter(), {}
    for i, t in enumerate(texts):
        d = _def(t)
        if d is None:
            uses.update(_REG.findall(t))
        else:
            defs[i] = d
            uses.update(d[1])
            for r in d[0]:
                by_reg.setdefault(r, []).append(i)
    keep = [True] * len(texts)
    work = [r for r in by_reg if not uses[r]]
    while work:
        r = work.pop()
        for i in by_reg.pop(r, ()):
            dsts, srcs = defs[i]
            if not keep[i] or any(uses[x] for x in dsts):
                continue
            keep[i] = False
            for s in srcs:
                uses[s] -= 1
                if not uses[s] and s in by_reg:
                    work.append(s)
    return keep

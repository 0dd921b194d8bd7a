"""Dead instructions: VALU results, LDS and global loads that nothing reads.

The emitter makes some values speculatively -- every element of a packed 16-bit load is
widened where it is loaded, though an LDS store or an MMA operand takes the loaded dwords
as they are -- and relies on this pass to drop what no instruction reads. A dead load also
takes its ``s_waitcnt`` with it (waitcnt.py waits at a register's first reader). Kept: anything
writing a register the hardware owns (vcc, exec, scc), a precoloured register, or memory.
"""
from __future__ import annotations

from .mir import Fixed, Imm, Inst, Label, Reg, Sub, strip

_PURE = ("valu", "lds_load", "vmem_load")


def _reg(x):
    x = strip(x)
    if isinstance(x, Reg):
        return x
    if isinstance(x, Sub):
        return x.reg
    return None


def _removable(inst: Inst) -> bool:
    if not isinstance(inst, Inst) or inst.kind not in _PURE or not inst.defs:
        return False
    for d in inst.defs:
        r = _reg(d)
        if r is None or r.fixed is not None:
            return False
    return True


def remove_dead(code: list) -> list:
    """``code`` without the pure instructions whose results no instruction reads (to a fixed point)."""
    while True:
        read: set = set()
        for i in code:
            if isinstance(i, Inst):
                for x in list(i.uses) + list(i.imp):
                    r = _reg(x)
                    if r is not None:
                        read.add(r.id)
        kept = [i for i in code if not (_removable(i) and all(_reg(d).id not in read for d in i.defs))]
        if len(kept) == len(code):
            return code
        code = kept


def _writes_exec(i: Inst) -> bool:
    return any(isinstance(strip(d), Fixed) and strip(d).name.startswith("exec") for d in i.defs) \
        or "exec" in i.op


def reuse_literals(code: list) -> list:
    """A literal the emitter moved into a VGPR again in the same block (VOP3 and VOPC operands
    take no literal: attention's -inf for each masked score, exp2's range constants each
    call) reads the first copy instead, while EXEC is unchanged in between (a v_mov writes only
    the active lanes); the copies left unread go (remove_dead). Both registers must be
    written only by their v_mov, and the second read only later in its block."""
    ndefs: dict = {}
    for i in code:
        if isinstance(i, Inst):
            for r in i.regs("defs"):
                ndefs[r.id] = ndefs.get(r.id, 0) + 1
    block_of, b = [], 0
    for i in code:
        if isinstance(i, Label):
            b += 1
        block_of.append(b)
        if isinstance(i, Inst) and i.kind in ("branch", "cbranch", "end"):
            b += 1
    uses_at: dict = {}
    for k, i in enumerate(code):
        if isinstance(i, Inst):
            for r in i.regs("uses"):
                uses_at.setdefault(r.id, []).append(k)
    alias: dict = {}
    seen: dict = {}  # literal bits -> first register holding it (this block, this EXEC)
    for k, i in enumerate(code):
        if isinstance(i, Label) or (isinstance(i, Inst) and (i.kind in ("branch", "cbranch", "end")
                                                             or _writes_exec(i))):
            seen = {}
            continue
        if not (i.op == "v_mov_b32" and len(i.defs) == 1 and isinstance(i.uses[0], Imm)
                and i.uses[0].size == 1 and not i.uses[0].is_inline and isinstance(i.defs[0], Reg)):
            continue
        d = i.defs[0]
        if d.fixed is not None or ndefs.get(d.id) != 1:
            continue
        first = seen.get(i.uses[0].bits)
        if first is None:
            seen[i.uses[0].bits] = d
        elif all(block_of[p] == block_of[k] and p > k for p in uses_at.get(d.id, [])):
            alias[d.id] = first
    if not alias:
        return code

    def sub(x):
        y = strip(x)
        if isinstance(y, Reg) and y.id in alias:
            return alias[y.id]
        return x
    return [Inst(i.op, i.defs, [sub(x) for x in i.uses], i.suffix, i.kind, i.loc, i.target, i.imp)
            if isinstance(i, Inst) and any(r.id in alias for r in i.regs("uses")) else i for i in code]

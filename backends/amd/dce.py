"""Dead instructions: VALU results, LDS and global loads that nothing reads.

The emitter makes some values speculatively -- every element of a packed 16-bit load is
widened where it is loaded, though an LDS store or an MMA operand takes the loaded dwords
as they are -- and relies on this pass to drop what no instruction reads. A dead load also
takes its ``s_waitcnt`` with it (waitcnt.py waits at a register's first reader). Kept: anything
writing a register the hardware owns (vcc, exec, scc), a precoloured register, or memory.
"""
from __future__ import annotations

from .mir import Inst, Reg, Sub, strip

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

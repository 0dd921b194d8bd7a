"""Registers with a physical number already assigned, for tests of the passes that run
after register allocation (s_waitcnt placement, hazard nops)."""
from gluon_trace.backends.amd.mir import Reg


def v(n, size=1):
    r = Reg("v", size)
    r.phys = n
    return r


def s(n, size=1):
    r = Reg("s", size)
    r.phys = n
    return r

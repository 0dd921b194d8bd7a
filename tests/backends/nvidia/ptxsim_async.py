"""ptxsim_tc with cp.async copies that land late, and mbarriers (sm_80 and sm_90 forms).

ptxsim_tc lands a copy the moment it is issued, which cannot show a kernel waiting too little.
Here a thread's copies stay in flight until something makes them land: its
``cp.async.wait_group N`` (all but its newest N committed groups) or ``wait_all``, or an
mbarrier that tracks them (``cp.async.mbarrier.arrive[.noinc]``) being waited on. Landing is as
late as the rules allow, and a shared-memory read of bytes a copy has not yet written raises
RuntimeError ("... before the copies into them landed").

mbarriers (keyed by CTA and shared address): ``mbarrier.init`` (count), ``mbarrier.arrive``
(optional count), ``mbarrier.try_wait.parity`` / ``test_wait.parity`` (true once the phase of
that parity completed), ``cp.async.mbarrier.arrive``: +1 to the pending count now unless
``.noinc``, and a -1 deferred until the thread's copies so far land. A waiter settles the
deferred arrivals of the barrier it waits on (landing their copies) before testing the phase;
a phase completes when the pending count reaches zero, and the count is reset for the next.
"""
from __future__ import annotations

import numpy as np

from ptxsim import Kernel, Mem
from ptxsim_tc import TCSim


class _Copy:
    __slots__ = ("cta", "addr", "data", "landed")

    def __init__(self, cta, addr, data):
        self.cta, self.addr, self.data, self.landed = cta, addr, data, False


class AsyncSim(TCSim):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.busy = np.zeros(self.smem.shape, np.int32)  # in-flight copies over each byte
        self.open: dict[int, list] = {}    # thread -> copies not yet committed
        self.groups: dict[int, list] = {}  # thread -> committed groups, oldest first
        self.bars: dict = {}               # (cta, addr) -> [count, pending, phase, deferred]

    # -- copies ------------------------------------------------------------------------------
    def _land(self, copies) -> None:
        for c in copies:
            if not c.landed:
                n = len(c.data)
                self.smem[c.cta, c.addr:c.addr + n] = np.frombuffer(c.data, np.uint8)
                self.busy[c.cta, c.addr:c.addr + n] -= 1
                c.landed = True

    def _issued(self, i: int) -> list:
        return self.open.get(i, []) + [c for g in self.groups.get(i, []) for c in g]

    def op_cp(self, parts, args, m, active):
        if parts[1] != "async":
            raise NotImplementedError(".".join(parts))
        kind = parts[2]
        idx = np.nonzero(m)[0]
        if kind == "commit_group":
            for i in idx:
                self.groups.setdefault(i, []).append(self.open.pop(i, []))
            return None
        if kind in ("wait_group", "wait_all"):
            keep = int(args[0]) if kind == "wait_group" else 0
            for i in idx:
                gs = self.groups.get(i, [])
                while len(gs) > keep:
                    self._land(gs.pop(0))
                if kind == "wait_all":
                    self._land(self.open.pop(i, []))
            return None
        if kind == "mbarrier":  # cp.async.mbarrier.arrive[.noinc].shared::cta.b64 [bar]
            noinc = "noinc" in parts
            addr = self._addr(args[0])
            for i in idx:
                bar = self._bar(self.cta[i], int(addr[i]))
                if not noinc:
                    bar[1] += 1
                bar[3].append(list(self._issued(i)))
            return None
        # a copy: read the source now, write the destination when it lands
        before = self.smem.copy()
        super().op_cp(parts, args, m, active)
        size = int(args[2])
        d = self._addr(args[0])
        for i in idx:
            a, c = int(d[i]), self.cta[i]
            cp = _Copy(c, a, self.smem[c, a:a + size].tobytes())
            self.busy[c, a:a + size] += 1
            self.open.setdefault(i, []).append(cp)
        self.smem[:] = before
        return None

    def _check_read(self, addr_arg, nbytes, m) -> None:
        a = self._addr(addr_arg)
        for i in np.nonzero(m)[0]:
            x = int(a[i])
            if self.busy[self.cta[i], x:x + nbytes].any():
                raise RuntimeError(f"thread {i} reads shared bytes {x}..{x + nbytes} before the copies "
                                   "into them landed")

    def op_ld(self, parts, args, m, active):
        if parts[1] == "shared":
            vec = next((int(p[1:]) for p in parts if p[:1] == "v" and p[1:].isdigit()), 1)
            self._check_read(args[1], vec * int(parts[-1][1:]) // 8, m)
        return super().op_ld(parts, args, m, active)

    def op_ldmatrix(self, parts, args, m, active):
        self._check_read(args[1], 16, m)
        return super().op_ldmatrix(parts, args, m, active)

    # -- mbarriers ----------------------------------------------------------------------------
    def _bar(self, cta, addr):
        bar = self.bars.get((int(cta), addr))
        if bar is None:
            raise RuntimeError(f"mbarrier at shared {addr} used before mbarrier.init")
        return bar

    def _arrive(self, bar, n: int) -> None:
        bar[1] -= n
        if bar[1] < 0:
            raise RuntimeError("more arrivals on an mbarrier than its phase expects")
        if bar[1] == 0:
            bar[2] ^= 1
            bar[1] = bar[0]

    def op_fence(self, parts, args, m, active):
        return None

    def op_mbarrier(self, parts, args, m, active):
        op = parts[1]
        idx = np.nonzero(m)[0]
        if op == "init":
            addr, count = self._addr(args[0]), self.val(args[1], "u32")
            for i in idx:
                self.bars[(int(self.cta[i]), int(addr[i]))] = [int(count[i]), int(count[i]), 0, []]
            return None
        if op == "arrive":
            if "expect_tx" in parts:
                raise NotImplementedError("mbarrier.arrive.expect_tx (TMA) in ptxsim_async")
            addr = self._addr(args[1])
            count = self.val(args[2], "u32") if len(args) > 2 else np.ones(self.N, np.uint32)
            for i in idx:
                self._arrive(self._bar(self.cta[i], int(addr[i])), int(count[i]))
            return None
        if op in ("try_wait", "test_wait") and "parity" in parts:
            addr, par = self._addr(args[1]), self.val(args[2], "u32")
            ok = np.zeros(self.N, bool)
            for i in idx:
                bar = self._bar(self.cta[i], int(addr[i]))
                while bar[3]:  # the tracked copies land, each thread's arrival follows
                    self._land(bar[3].pop(0))
                    self._arrive(bar, 1)
                ok[i] = bar[2] != (int(par[i]) & 1)
            self.set(args[0], ok, m)
            return None
        if op == "inval":
            return None
        raise NotImplementedError(".".join(parts))


def run(ptx: str, grid, args: list, smem_bytes: int) -> None:
    """Run a kernel on numpy arrays (changed in place) and scalars."""
    k = Kernel(ptx)
    mem = Mem()
    params = [mem.add(a) if isinstance(a, np.ndarray) else a for a in args]
    AsyncSim(k, grid, params, mem, smem_bytes).run()

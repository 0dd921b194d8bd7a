"""ptxsim_ws with a shared-memory race detector: happens-before by vector clocks, one per warp.

A schedule can only show a race by making it happen; this checks every shared-memory access
against the synchronisation the kernel did, whatever the order the simulator ran it in. Each
warp of a CTA has a vector clock over the CTA's warps (lanes of one warp count as one agent).
Releases publish the warp's clock and start its next epoch; acquires join what was published:
- a named barrier (``bar``/``barrier``, ``.sync`` or ``.arrive``) publishes every arriving warp's
  clock; the warps that wait there (``sync``) acquire the join when it completes;
- an mbarrier arrival (``mbarrier.arrive`` with or without ``expect_tx``) publishes into the
  barrier's current phase; a wait that succeeds on a parity acquires that parity's last
  completed phase;
- ``barrier.cluster.arrive`` publishes, ``barrier.cluster.wait`` acquires the generation's join.
Shared memory remembers, per byte, its last generic writer (warp, epoch) and each warp's last
read. ``ld``/``st.shared``, ``ldmatrix``/``stmatrix`` and the source of a TMA store (a read by
the issuing warp) must be ordered after the last write by another warp; a write, and the
destination of a TMA load at issue, after the other warps' reads as well. A TMA store reads
its source until the ``cp.async.bulk.wait_group.read`` that retires it: that is when the read
is the issuing warp's. Bytes a TMA load or a
cp.async copy landed have no generic writer (the barrier or wait that lands them orders them:
ptxsim_async/ptxsim_hopper raise on reads before landing). wgmma's shared operands are the
async proxy's and are checked by ptxsim_hopper (fence.proxy.async, in-flight reads).
Not modelled: global memory (atomics and plain stores are sequentially consistent here).
"""
from __future__ import annotations

import numpy as np

import ptxsim_hopper
from ptxsim_ws import WSSim


class RaceSim(WSSim):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        W = self.W = -(-self.k.nthreads // 32)
        self.vc = np.zeros((self.nctas, W, W), np.int64)
        self.vc[:, np.arange(W), np.arange(W)] = 1
        S = self.smem.shape[1]
        self.lw_warp = np.full((self.nctas, S), -1, np.int16)   # last generic writer, -1: none
        self.lw_time = np.zeros((self.nctas, S), np.int64)      # its epoch then
        self.rd_time = np.zeros((W, self.nctas, S), np.int64)   # each warp's epoch at its last read
        self.named_clock: dict = {}                            # (cta, id) -> join of the arrivals
        self.cl_clock = np.zeros((self.nctas, W), np.int64)
        self.cl_done: dict = {}                                # (cta, generation) -> its join
        self.wid = (self.tid // 32).astype(np.int64)
        self.store_warp: dict = {}                             # id(TMA store in flight) -> issuing warp

    # -- clocks ------------------------------------------------------------------------------------
    def _warps(self, mask):
        """(cta, warp) pairs with a thread in ``mask``."""
        pairs = np.unique(np.stack([self.cta[mask], self.wid[mask]], axis=1), axis=0)
        return [(int(c), int(w)) for c, w in pairs]

    def _release(self, mask, into) -> None:
        """Publish the clocks of ``mask``'s warps into ``into(cta)`` (an array to max into) and
        start their next epochs."""
        for c, w in self._warps(mask):
            acc = into(c)
            np.maximum(acc, self.vc[c, w], out=acc)
            self.vc[c, w, w] += 1

    def _acquire(self, mask, clock_of) -> None:
        for c, w in self._warps(mask):
            clock = clock_of(c)
            if clock is not None:
                np.maximum(self.vc[c, w], clock, out=self.vc[c, w])

    def _arrive_named(self, parts, args, m, wait: bool) -> None:
        ident = self.val(args[0], "u32")
        for c in np.unique(self.cta[m]):
            key = (int(c), int(ident[np.argmax(m & (self.cta == c))]))
            clock = self.named_clock.setdefault(key, np.zeros(self.W, np.int64))
            self._release(m & (self.cta == c), lambda _c: clock)
        super()._arrive_named(parts, args, m, wait)

    def _try_release(self, key) -> None:
        waiting = self.nbars[key][2]
        super()._try_release(key)
        if key not in self.nbars:   # complete: the waiters acquire everyone's arrivals
            clock = self.named_clock.pop(key)
            self._acquire(waiting, lambda _c: clock)

    def _cluster(self, parts, m):
        if parts[2] == "arrive":
            self._release(m, lambda c: self.cl_clock[c])
            return super()._cluster(parts, m)
        out = super()._cluster(parts, m)
        done = m & ~self.cl_waiting     # their generation is complete already: acquire it now
        self._acquire(done, lambda c: self.cl_done.get((c, int(self.cl_mine[np.argmax(done & (self.cta == c))]))))
        return out

    def _cluster_release(self, c: int) -> None:
        gen, waiting = int(self.cl_gen[c]), self.cl_waiting & (self.cta == c)
        super()._cluster_release(c)
        if self.cl_gen[c] != gen:
            self.cl_done[(c, gen)] = self.cl_clock[c].copy()
            self.cl_clock[c] = 0
            self._acquire(waiting, lambda _c: self.cl_done[(c, gen)])

    def op_mbarrier(self, parts, args, m, active):
        op = parts[1]
        if op == "arrive":
            addr = self._addr(args[1])
            for i in np.nonzero(m)[0]:
                c, w = int(self.cta[i]), int(self.wid[i])
                np.maximum(self._bar(c, int(addr[i]))[6], self.vc[c, w], out=self._bar(c, int(addr[i]))[6])
            for c, w in self._warps(m):
                self.vc[c, w, w] += 1
        out = super().op_mbarrier(parts, args, m, active)
        if op == "init":
            addr = self._addr(args[0])
            for i in np.nonzero(m)[0]:
                bar = self._bar(self.cta[i], int(addr[i]))
                del bar[6:]
                bar.extend([np.zeros(self.W, np.int64), {}])   # [6] this phase's join, [7] parity -> last done
        elif op in ("try_wait", "test_wait"):
            ok = m & self.R[args[0]]
            addr, par = self._addr(args[1]), self.val(args[2], "u32")
            for i in np.nonzero(ok)[0]:
                c, w = int(self.cta[i]), int(self.wid[i])
                done = self._bar(c, int(addr[i]))[7].get(int(par[i]) & 1)
                if done is not None:
                    np.maximum(self.vc[c, w], done, out=self.vc[c, w])
        return out

    def _complete(self, bar) -> None:
        if bar[1] == 0 and bar[4] == 0 and len(bar) > 6:
            bar[7][bar[2]] = bar[6].copy()
            bar[6][:] = 0
        super()._complete(bar)

    # -- shared-memory accesses -----------------------------------------------------------------
    def _access(self, threads, addrs, write: bool, what: str) -> None:
        """``threads`` (k,) access shared bytes ``addrs`` (k, n) of their CTAs: checked, then
        remembered."""
        at = self._check(threads, addrs, write, what)
        if at is None:
            return
        c, w, a = at
        if write:
            self.lw_warp[c, a] = w
            self.lw_time[c, a] = self.vc[c, w, w]
            self.rd_time[:, c, a] = 0
        else:
            self.rd_time[w, c, a] = self.vc[c, w, w]

    def _check(self, threads, addrs, write: bool, what: str):
        """Raise if the access is not ordered after the other warps' last write (and, for a
        write, their reads); returns its (CTAs, warps, bytes), flattened, or None."""
        if not len(threads):
            return None
        n = addrs.shape[1]
        c = np.repeat(self.cta[threads], n)
        w = np.repeat(self.wid[threads], n)
        a = addrs.reshape(-1)
        if a.min() < 0 or a.max() >= self.smem.shape[1]:
            return None   # out of range: the access itself raises
        lw = self.lw_warp[c, a].astype(np.int64)
        raw = (lw >= 0) & (lw != w) & (self.lw_time[c, a] > self.vc[c, w, np.maximum(lw, 0)])
        if raw.any():
            j = int(np.argmax(raw))
            raise RuntimeError(f"shared-memory race: warp {w[j]} of CTA {c[j]} {what} shared byte {a[j]}, which "
                               f"warp {lw[j]} wrote with no barrier or mbarrier ordering them")
        if write:
            knows = self.vc[c, w, :].T                                   # (W, k*n)
            war = (self.rd_time[:, c, a] > knows) & (np.arange(self.W)[:, None] != w[None, :])
            if war.any():
                r, j = (int(x[0]) for x in np.nonzero(war))
                raise RuntimeError(f"shared-memory race: warp {w[j]} of CTA {c[j]} {what} shared byte {a[j]}, which "
                                   f"warp {r} read with no barrier or mbarrier ordering them")
        return c, w, a

    def _clear(self, cta, addrs) -> None:
        self.lw_warp[cta, addrs] = -1
        self.rd_time[:, cta, addrs] = 0

    def _rows(self, addr_arg, m, nbytes):
        threads = np.nonzero(m)[0]
        base = self._addr(addr_arg)[threads]
        return threads, base[:, None] + np.arange(nbytes)[None, :]

    def op_ld(self, parts, args, m, active):
        if parts[1] == "shared":
            n = len(args[0][1:-1].split(",")) if args[0].startswith("{") else 1
            self._access(*self._rows(args[1], m, n * int(parts[-1][1:]) // 8), False, "reads")
        return super().op_ld(parts, args, m, active)

    def op_st(self, parts, args, m, active):
        if parts[1] == "shared":
            n = len(args[1][1:-1].split(",")) if args[1].startswith("{") else 1
            self._access(*self._rows(args[0], m, n * int(parts[-1][1:]) // 8), True, "writes")
        return super().op_st(parts, args, m, active)

    def _matrix_rows(self, parts, addr_arg, m):
        nmat = int(next(p for p in parts if p.startswith("x"))[1:])
        lanes = m & (self.tid % 32 < 8 * nmat)
        return self._rows(addr_arg, lanes, 16)

    def op_ldmatrix(self, parts, args, m, active):
        self._access(*self._matrix_rows(parts, args[1], m), False, "reads (ldmatrix)")
        return super().op_ldmatrix(parts, args, m, active)

    def op_stmatrix(self, parts, args, m, active):
        self._access(*self._matrix_rows(parts, args[0], m), True, "writes (stmatrix)")
        return super().op_stmatrix(parts, args, m, active)

    def _tma_boxes(self, map_reg_arg, smem_arg, m):
        """(issuing threads, their boxes' shared byte addresses) of a TMA copy."""
        treg, _ = self._tensor_operand(map_reg_arg)
        maps, at = self.val(treg, "u64"), self._addr(smem_arg)
        out = [(i, self._tmap(int(maps[i])).smem_addresses(int(at[i])).reshape(-1)) for i in np.nonzero(m)[0]]
        return out

    def _tma_load(self, parts, args, m):
        for i, addrs in self._tma_boxes(args[1], args[0], m):
            self._access(np.array([i]), addrs[None, :], True, "overwrites by a TMA load")
        super()._tma_load(parts, args, m)

    def _tma_store(self, parts, args, m):
        boxes = self._tma_boxes(args[0], args[1], m)
        for i, addrs in boxes:
            self._check(np.array([i]), addrs[None, :], False, "stores by TMA")
        super()._tma_store(parts, args, m)
        for i, _ in boxes:
            self.store_warp[id(self.bulk_open[i][-1])] = int(self.wid[i])

    def _retire_store(self, st) -> None:
        """The store reads its source until the wait that retires it: the read is the issuing
        warp's at that epoch, so the warps that overwrite the source must be ordered after it."""
        super()._retire_store(st)
        w = self.store_warp.pop(id(st))
        self.rd_time[w, st.cta, st.addrs] = self.vc[st.cta, w, w]

    def _land_tma(self, bar, ld) -> None:
        super()._land_tma(bar, ld)
        self._clear(ld.cta, ld.addrs)

    def _land(self, copies) -> None:
        for cp in copies:
            if not cp.landed:
                self._clear(cp.cta, np.arange(cp.addr, cp.addr + len(cp.data)))
        super()._land(copies)


def run(ptx: str, grid, args: list, smem_bytes: int, max_steps: int = 2_000_000, order: str = "pc",
        seed=None) -> RaceSim:
    """ptxsim_ws.run with the race detector; returns the simulator."""
    return ptxsim_hopper.run(ptx, grid, args, smem_bytes, max_steps, sim_class=RaceSim, order=order, seed=seed)

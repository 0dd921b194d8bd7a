"""ptxsim_ws with a race detector for shared and global memory: happens-before by vector clocks,
one per warp of the grid.

A schedule can only show a race by making it happen; this checks every access against the
synchronisation the kernel did, whatever order the simulator ran it in. Each warp has a vector
clock over the grid's warps (lanes of one warp count as one agent). Releases publish the
warp's clock and start its next epoch; acquires join what was published:
- a named barrier (``bar``/``barrier``, ``.sync`` or ``.arrive``) publishes every arriving warp's
  clock; the warps that wait there (``sync``) acquire the join when it completes;
- an mbarrier arrival (``mbarrier.arrive`` with or without ``expect_tx``) publishes into the
  barrier's current phase; a wait that succeeds on a parity acquires that parity's last
  completed phase;
- ``barrier.cluster.arrive`` (not ``.relaxed``) publishes into its cluster's generation,
  ``barrier.cluster.wait`` acquires the generation's join (every CTA of the cluster: ptxsim_cluster);
- a global atomic with ``.release`` / ``.acq_rel`` publishes into its address, one with
  ``.acquire`` / ``.acq_rel`` joins what that address holds (releases are never undone: a later
  RMW continues the release sequence). Scopes are not told apart.
Shared memory remembers, per byte, its last generic writer (warp, epoch) and each warp's last
read. ``ld``/``st.shared``, ``ldmatrix``/``stmatrix`` and the source of a TMA store (a read by
the issuing warp) must be ordered after the last write by another warp; a write, and the
destination of a TMA load at issue, after the other warps' reads as well. A TMA store reads
its source until the ``cp.async.bulk.wait_group.read`` that retires it: that is when the read
is the issuing warp's. Bytes a TMA load or a cp.async copy landed have no generic writer (the
barrier or wait that lands them orders them: ptxsim_async/ptxsim_hopper raise on reads before
landing). A wgmma reads its shared operands until the ``wgmma.wait_group`` that retires it: a
later write of them (a TMA refill included) must be ordered after that wait in one of the
warpgroup's warps (their release of the stage); the rest of wgmma's operand rules are
ptxsim_hopper's (fence.proxy.async, in-flight reads). Global memory: plain ``ld``/``st.global``
must be ordered after the last plain write by another warp of any CTA (a write after another
warp's read is not checked there, nor TMA's global side).

One instruction's own writes are compared with each other too: the simulator runs every thread
standing at a program counter at once ("pc", "cta": every warp of the CTA or grid; "random": a
warpgroup), and checking each against the bytes' last writer before recording any would miss
two warps storing one byte in one step. Two warps (of one CTA, or of any CTA in global memory)
writing one byte in one instruction race, whatever they write (a plain store's same-value race
is benign on the hardware but still a hazard to compute-sanitizer's racecheck: reported). Lanes
of one warp writing one byte in one instruction do not race (the hardware keeps one lane's value,
which one undefined): accepted when they write the same value, reported when the values differ
(the simulator keeps the highest lane's, so a result would depend on the pick). ``stmatrix``'s
values are not compared: lanes of a warp naming one row are reported.

Clusters (ptxsim_cluster): an arrival on a peer's mbarrier (``mapa`` + ``.shared::cluster``)
publishes into that barrier's phase as a local one does; a multicast TMA load writes at issue, as
the issuing warp, into each CTA of its mask (ordered after the reads there). A peer's use of an
mbarrier -- an arrival, a copy signalling it -- must be ordered after that barrier's
``mbarrier.init`` (a ``barrier.cluster`` between them), and a CTA's exit after every peer's
arrival on it (its copies land only when one of its waiters saw them, so they need no check);
else RuntimeError ("cluster race: ..."), whatever order the simulator ran them in.
"""
from __future__ import annotations

import numpy as np

import ptxsim_hopper
from ptxsim import _BITS
from ptxsim_ws import WSSim


class RaceSim(WSSim):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        W = self.W = -(-self.k.nthreads // 32)
        G = self.nctas * W                      # warps of the grid; warp g is warp g % W of CTA g // W
        self.vc = np.eye(G, dtype=np.int64)     # vc[g]: what warp g knows of every warp's epochs
        S = self.smem.shape[1]
        self.lw_warp = np.full((self.nctas, S), -1, np.int32)  # last generic writer (grid warp), -1: none
        self.lw_time = np.zeros((self.nctas, S), np.int64)      # its epoch then
        self.rd_time = np.zeros((W, self.nctas, S), np.int64)   # each warp's epoch at its last read
        self.gl: dict = {}                                     # global buffer -> (last writer, its epoch)
        self.sync_clock: dict = {}                             # global address -> join of its releases
        self.named_clock: dict = {}                            # (cta, id) -> join of the arrivals
        self.cl_clock = np.zeros((self.nclusters, G), np.int64)
        self.cl_done: dict = {}                                # (cluster, generation) -> its join
        self.gw = (self.cta * W + self.tid // 32).astype(np.int64)
        self.store_warp: dict = {}                             # id(TMA store in flight) -> issuing warp
        self.incoming = {c: [] for c in range(self.nctas)}     # CTA -> (peer warp, epoch, mbarrier) arrivals
        self.wg_rd = np.full((self.nctas, S, 4), -1, np.int64)  # the warps whose wgmma.wait_group retired a read
        self.wg_rd_time = np.zeros((self.nctas, S, 4), np.int64)  # of each byte, and their epochs then

    def _name(self, g: int) -> str:
        return f"warp {g % self.W} of CTA {g // self.W}"

    # -- clocks ------------------------------------------------------------------------------------
    def _warps(self, mask):
        return [int(g) for g in np.unique(self.gw[mask])]

    def _release(self, mask, into) -> None:
        """Publish the clocks of ``mask``'s warps into ``into(cta)`` (an array to max into) and
        start their next epochs."""
        for g in self._warps(mask):
            acc = into(g // self.W)
            np.maximum(acc, self.vc[g], out=acc)
            self.vc[g, g] += 1

    def _acquire(self, mask, clock_of) -> None:
        for g in self._warps(mask):
            clock = clock_of(g // self.W)
            if clock is not None:
                np.maximum(self.vc[g], clock, out=self.vc[g])

    def _arrive_named(self, parts, args, m, wait: bool) -> None:
        ident = self.val(args[0], "u32")
        for c in np.unique(self.cta[m]):
            key = (int(c), int(ident[np.argmax(m & (self.cta == c))]))
            clock = self.named_clock.setdefault(key, np.zeros(len(self.vc), np.int64))
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
            if "relaxed" not in parts:   # .relaxed: no release
                self._release(m, lambda c: self.cl_clock[self.cid[c]])
            return super()._cluster(parts, m)
        out = super()._cluster(parts, m)
        done = m & ~self.cl_waiting     # their generation is complete already: acquire it now
        self._acquire(done, lambda c: self.cl_done.get(
            (int(self.cid[c]), int(self.cl_mine[np.argmax(done & (self.cta == c))]))))
        return out

    def _cluster_release(self, k: int) -> None:
        gen, waiting = int(self.cl_gen[k]), self.cl_waiting & (self.clus == k)
        super()._cluster_release(k)
        if self.cl_gen[k] != gen:
            self.cl_done[(k, gen)] = self.cl_clock[k].copy()
            self.cl_clock[k] = 0
            self._acquire(waiting, lambda _c: self.cl_done[(k, gen)])

    def op_mbarrier(self, parts, args, m, active):
        op = parts[1]
        if op == "arrive":   # on this CTA's mbarrier or (shared::cluster) on a peer's
            addr = self._addr(args[1])
            for i in np.nonzero(m)[0]:
                c, at = self._where(int(i), int(addr[i]), "arrives on") if "shared::cluster" in parts \
                    else (int(self.cta[i]), int(addr[i]))
                bar = self._peer_bar(int(i), c, at, "arrives on")
                np.maximum(bar[6], self.vc[self.gw[i]], out=bar[6])
        out = super().op_mbarrier(parts, args, m, active)
        if op == "arrive":   # the arriving warps' next epochs (a peer's arrival was recorded at this one)
            for g in self._warps(m):
                self.vc[g, g] += 1
        elif op == "init":
            addr = self._addr(args[0])
            for i in np.nonzero(m)[0]:
                bar = self._bar(self.cta[i], int(addr[i]))
                g = int(self.gw[i])
                del bar[6:]
                # [6] this phase's join, [7] parity -> last done, [8] the init (warp, its epoch)
                bar.extend([np.zeros(len(self.vc), np.int64), {}, (g, int(self.vc[g, g]))])
        elif op in ("try_wait", "test_wait"):
            ok = m & self.R[args[0]]
            addr, par = self._addr(args[1]), self.val(args[2], "u32")
            for i in np.nonzero(ok)[0]:
                done = self._bar(self.cta[i], int(addr[i]))[7].get(int(par[i]) & 1)
                if done is not None:
                    np.maximum(self.vc[self.gw[i]], done, out=self.vc[self.gw[i]])
        return out

    def _after_init(self, i: int, cta: int, addr: int, bar, what: str) -> None:
        """A peer's use of ``cta``'s mbarrier must be ordered after its init (a barrier.cluster
        between them), whatever order the simulator ran them in."""
        if cta == self.cta[i] or len(bar) < 9:
            return
        g, (w, t) = int(self.gw[i]), bar[8]
        if self.vc[g, w] < t:
            raise RuntimeError(f"cluster race: {self._name(g)} {what} the mbarrier at shared {addr} of CTA {cta}, "
                               f"whose mbarrier.init by {self._name(w)} nothing orders before it (a "
                               "barrier.cluster between the init and the peers' use is missing)")

    def _remote_arrival(self, i: int, cta: int, addr: int, bar) -> None:
        """A peer's arrival: after the mbarrier's init, and before ``cta`` exits."""
        super()._remote_arrival(i, cta, addr, bar)
        if cta != self.cta[i]:
            self._after_init(i, cta, addr, bar, "arrives on")
            g = int(self.gw[i])
            self.incoming[cta].append((g, int(self.vc[g, g]), addr))

    def _exit(self, m) -> None:
        """A CTA's exit must be ordered after every peer's arrival on its mbarriers (its
        copies are: they land only when a waiter in the CTA saw them complete)."""
        super()._exit(m)
        for c in np.unique(self.cta[m]):
            if not self._exited(int(c)):
                continue
            mine = self.vc[int(c) * self.W:(int(c) + 1) * self.W]
            for g, t, addr in self.incoming.pop(int(c), []):
                if not (mine[:, g] >= t).any():
                    raise RuntimeError(f"cluster race: CTA {c} exits with nothing ordering its exit after "
                                       f"{self._name(g)}'s arrival on its mbarrier at shared {addr} (a "
                                       "barrier.cluster before the CTAs of a cluster exit is missing)")

    def _complete(self, bar) -> None:
        if bar[1] == 0 and bar[4] == 0 and len(bar) > 6:
            bar[7][bar[2]] = bar[6].copy()
            bar[6][:] = 0
        super()._complete(bar)

    def op_atom(self, parts, args, m, active):
        """An acquire (acq_rel) atomic joins what earlier releases on its address published; a
        release (acq_rel) one publishes its warp's clock there, in the order the atomics act."""
        addr = self._addr(args[1])
        acq = any(p in ("acquire", "acq_rel") for p in parts)
        rel = any(p in ("release", "acq_rel") for p in parts)
        for i in np.nonzero(m)[0]:
            g, at = int(self.gw[i]), int(addr[i])
            clock = self.sync_clock.setdefault(at, np.zeros(len(self.vc), np.int64))
            if acq:
                np.maximum(self.vc[g], clock, out=self.vc[g])
            if rel:
                np.maximum(clock, self.vc[g], out=clock)
        for g in self._warps(m) if rel else ():
            self.vc[g, g] += 1
        return super().op_atom(parts, args, m, active)

    # -- global-memory accesses -----------------------------------------------------------------
    def _global(self, threads, addrs, write: bool, what: str, data=None) -> None:
        """Plain global loads and stores: ordered after the last write by another warp (any
        CTA), a store's bytes after the other warps' stores of them in the same instruction; no
        read tracking (a write after another warp's read is not checked)."""
        if not len(threads):
            return
        n = addrs.shape[1]
        g = np.repeat(self.gw[threads], n)
        a = addrs.reshape(-1)
        if write:
            self._one_step(threads, a, data, "global-memory", what,
                           lambda j: f"byte {a[j] & ((1 << 40) - 1)} of buffer {(a[j] >> 40) - 1}")
        k, off = (a >> 40) - 1, a & ((1 << 40) - 1)
        for b in np.unique(k):
            if not 0 <= b < len(self.mem.bufs):
                continue   # the access itself raises
            sel = k == b
            o, gs = off[sel], g[sel]
            if o.max() >= self.mem.bufs[b].size:
                continue
            lw, lt = self.gl.setdefault(int(b), (np.full(self.mem.bufs[b].size, -1, np.int32),
                                                 np.zeros(self.mem.bufs[b].size, np.int64)))
            w = lw[o].astype(np.int64)
            bad = (w >= 0) & (w != gs) & (lt[o] > self.vc[gs, np.maximum(w, 0)])
            if bad.any():
                j = int(np.argmax(bad))
                raise RuntimeError(f"global-memory race: {self._name(gs[j])} {what} byte {o[j]} of buffer {b}, which "
                                   f"{self._name(w[j])} wrote with nothing ordering them (a barrier, or a release "
                                   "and an acquire on one address)")
            if write:
                lw[o] = gs
                lt[o] = self.vc[gs, gs]

    # -- shared-memory accesses -----------------------------------------------------------------
    def _access(self, threads, addrs, write: bool, what: str, ctas=None, data=None) -> None:
        """``threads`` (k,) access shared bytes ``addrs`` (k, n) of their CTAs (or of ``ctas``):
        checked, then remembered. ``data`` (k, n): the bytes a write stores, for comparing lanes
        of one warp that store one byte; None: unknown (any such pair is reported)."""
        at = self._check(threads, addrs, write, what, ctas, data)
        if at is None:
            return
        c, g, a = at
        if write:
            self.lw_warp[c, a] = g
            self.lw_time[c, a] = self.vc[g, g]
            self.rd_time[:, c, a] = 0
            self.wg_rd[c, a] = -1
        else:
            self.rd_time[g % self.W, c, a] = self.vc[g, g]

    def _check(self, threads, addrs, write: bool, what: str, ctas=None, data=None):
        """Raise if the access is not ordered after the other warps' last write (and, for a
        write, their reads and the other warps' writes of its bytes in this instruction);
        returns its (CTAs, grid warps, bytes), flattened, or None."""
        if not len(threads):
            return None
        n = addrs.shape[1]
        c = np.repeat(self.cta[threads] if ctas is None else ctas, n)
        g = np.repeat(self.gw[threads], n)
        a = addrs.reshape(-1)
        if a.min() < 0 or a.max() >= self.smem.shape[1]:
            return None   # out of range: the access itself raises
        lw = self.lw_warp[c, a].astype(np.int64)
        raw = (lw >= 0) & (lw != g) & (self.lw_time[c, a] > self.vc[g, np.maximum(lw, 0)])
        if raw.any():
            j = int(np.argmax(raw))
            raise RuntimeError(f"shared-memory race: {self._name(g[j])} {what} shared byte {a[j]}, which "
                               f"warp {lw[j] % self.W} wrote with no barrier or mbarrier ordering them"
                               + (f" (in CTA {c[j]})" if lw[j] // self.W != g[j] // self.W else ""))
        if write:
            self._one_step(threads, c * self.smem.shape[1] + a, data, "shared-memory", what,
                           lambda j: f"shared byte {a[j]}" + (f" of CTA {c[j]}" if ctas is not None else ""))
            ws, wt = self.wg_rd[c, a], self.wg_rd_time[c, a]                     # (k*n, 4)
            done = (ws < 0).all(axis=1) | (ws == g[:, None]).any(axis=1) | \
                ((ws >= 0) & (self.vc[g[:, None], np.maximum(ws, 0)] >= wt)).any(axis=1)
            if not done.all():
                j = int(np.argmax(~done))
                raise RuntimeError(f"shared-memory race: {self._name(g[j])} {what} shared byte {a[j]} of CTA {c[j]}, "
                                   f"which a wgmma of {self._name(ws[j][0])}'s warpgroup read with nothing ordering "
                                   "the write after the wgmma.wait_group that retired it")
            readers = c[None, :] * self.W + np.arange(self.W)[:, None]          # (W, k*n) grid warps
            war = (self.rd_time[:, c, a] > self.vc[g[None, :], readers]) & (readers != g[None, :])
            if war.any():
                r, j = (int(x[0]) for x in np.nonzero(war))
                raise RuntimeError(f"shared-memory race: {self._name(g[j])} {what} shared byte {a[j]}, which "
                                   f"warp {r} read with no barrier or mbarrier ordering them"
                                   + (f" (in CTA {c[j]})" if c[j] != g[j] // self.W else ""))
        return c, g, a

    def _one_step(self, threads, keys, data, space: str, what: str, byte) -> None:
        """One instruction's writes among themselves: ``keys`` (k*n,) name the bytes the
        ``threads`` (k,) write, n each (``data`` (k, n) their values, or None); two warps writing
        one byte race, lanes of one warp may only if they write one value. ``byte(j)``: the
        byte of ``keys[j]``, in words."""
        n = len(keys) // len(threads)
        t = np.repeat(threads, n)
        g = self.gw[t]
        order = np.lexsort((t, g, keys))    # by byte, then warp, then lane
        ks, gs, ts = keys[order], g[order], t[order]
        again = ks[1:] == ks[:-1]           # a byte the previous thread wrote too
        if not again.any():
            return
        other = again & (gs[1:] != gs[:-1])
        if other.any():
            j = int(np.argmax(other))
            first, second = int(gs[j]), int(gs[j + 1])
            raise RuntimeError(f"{space} race: {self._name(second)} {what} {byte(order[j + 1])}, which "
                               f"{'warp ' + str(first % self.W) if first // self.W == second // self.W else self._name(first)} "
                               "wrote in the same instruction with no barrier or mbarrier ordering them")
        vs = None if data is None else np.asarray(data).reshape(-1)[order]
        differ = again if vs is None else again & (vs[1:] != vs[:-1])
        if differ.any():
            j = int(np.argmax(differ))
            lanes = f"lanes {ts[j] % 32} and {ts[j + 1] % 32} of {self._name(int(gs[j]))}"
            raise RuntimeError(f"{space} conflict: {lanes} write different values to {byte(order[j])} in one "
                               "instruction (the hardware keeps one, which one is undefined)"
                               if vs is not None else
                               f"{space} conflict: {lanes} both write {byte(order[j])} in one instruction "
                               f"({what}: the values are not compared)")

    def _clear(self, cta, addrs) -> None:
        self.lw_warp[cta, addrs] = -1
        self.rd_time[:, cta, addrs] = 0
        self.wg_rd[cta, addrs] = -1

    def op_wgmma(self, parts, args, m, active):
        """A wgmma reads its shared operands until the wgmma.wait_group that retires it: the read
        is done once that wait returns in any warp of its warpgroup, so a later write of those
        bytes must be ordered after one of theirs (a warp of the warpgroup itself is)."""
        before = list(self.wg_reads) if parts[1] == "wait_group" else ()
        out = super().op_wgmma(parts, args, m, active)
        for rd in before:
            if not any(rd is x for x in self.wg_reads):
                cta, first, _, addrs = rd
                sel = np.zeros(self.N, bool)
                sel[first:first + 128] = m[first:first + 128]
                ws = (self._warps(sel) + [-1] * 4)[:4]
                self.wg_rd[cta, addrs] = ws
                self.wg_rd_time[cta, addrs] = [self.vc[g, g] if g >= 0 else 0 for g in ws]
        return out

    def _rows(self, addr_arg, m, nbytes):
        threads = np.nonzero(m)[0]
        base = self._addr(addr_arg)[threads]
        return threads, base[:, None] + np.arange(nbytes)[None, :]

    def op_ld(self, parts, args, m, active):
        if parts[1] in ("shared", "global"):
            n = len(args[0][1:-1].split(",")) if args[0].startswith("{") else 1
            rows = self._rows(args[1], m, n * int(parts[-1][1:]) // 8)
            (self._access if parts[1] == "shared" else self._global)(*rows, False, "reads")
        return super().op_ld(parts, args, m, active)

    def op_st(self, parts, args, m, active):
        if parts[1] in ("shared", "global"):
            ins = [x.strip() for x in args[1][1:-1].split(",")] if args[1].startswith("{") else [args[1]]
            bits = int(parts[-1][1:])
            threads, addrs = self._rows(args[0], m, len(ins) * bits // 8)
            # each thread's bytes, in address order (little-endian, component after component)
            data = np.concatenate([np.ascontiguousarray(np.asarray(self.val(x, f"b{bits}"))[threads])
                                   .view(_BITS[str(bits)]).view(np.uint8).reshape(len(threads), bits // 8)
                                   for x in ins], axis=1)
            (self._access if parts[1] == "shared" else self._global)(threads, addrs, True, "writes", data=data)
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

    def _tma_write(self, i: int, cta: int, addrs, bar_at: int, bar) -> None:
        """A TMA load writes at issue, as the issuing warp, into each CTA it copies into (a
        multicast's peers too): ordered after the reads there, and a peer's mbarrier after its init."""
        super()._tma_write(i, cta, addrs, bar_at, bar)
        self._after_init(i, cta, bar_at, bar, "multicasts onto")
        self._access(np.array([i]), addrs[None, :], True, "overwrites by a TMA load", np.array([cta]))

    def _tma_store(self, parts, args, m):
        boxes = self._tma_boxes(args[0], args[1], m)
        for i, addrs in boxes:
            self._check(np.array([i]), addrs[None, :], False, "stores by TMA")
        super()._tma_store(parts, args, m)
        for i, _ in boxes:
            self.store_warp[id(self.bulk_open[i][-1])] = int(self.gw[i])

    def _retire_store(self, st) -> None:
        """The store reads its source until the wait that retires it: the read is the issuing
        warp's at that epoch, so the warps that overwrite the source must be ordered after it."""
        super()._retire_store(st)
        g = self.store_warp.pop(id(st))
        self.rd_time[g % self.W, st.cta, st.addrs] = self.vc[g, g]

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

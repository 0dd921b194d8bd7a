"""ptxsim_hopper with a scheduler that lets waiting threads yield, for warp-specialized kernels.

ptxsim runs the group of threads at the lowest program counter, so a consumer partition spinning
on an mbarrier that a producer partition completes would spin forever. Here a thread can be
*parked*, and the next group is picked among the threads that are not:
- ``mbarrier.try_wait`` / ``test_wait`` that fails, when the next instruction is the spin loop's
  ``@!p bra`` back to it, parks the thread until that mbarrier changes (an arrival, an
  expect_tx, a TMA load issued onto it or landed, a phase flip); it then retries.
- ``bar.sync`` / ``barrier.sync`` / ``bar.arrive`` ``id[, count]`` (named barriers, counted in
  threads): arriving threads park until ``count`` threads of the CTA have arrived at ``id``
  (``bar.arrive`` counts without parking). With no count, every thread of the CTA that has not
  exited. A different count at one barrier, or more arrivals than the count, raises.
- ``barrier.cluster.arrive`` (``.aligned``, ``.relaxed``) / ``wait``: ``wait`` parks until every
  live thread of every CTA of the thread's cluster (ptxsim_cluster: ``.reqnctapercluster``; a
  CTA alone without it) has arrived since the thread's own last arrive.
If every live thread is parked, that is a deadlock: RuntimeError naming, for each warp, the
barrier it waits on (its shared address, phase, arrivals and transaction bytes outstanding).
A peer's arrival or multicast onto a CTA that has exited raises (ptxsim_cluster).

``order`` picks among unparked threads: "pc" (lowest program counter, every CTA at once, as
ptxsim), "cta" (the lowest-numbered CTA with a thread ready runs; a CTA runs alone until it
waits or exits), "cta_reversed" (the highest first), "random" (at each step a warpgroup, 128
threads of a CTA, drawn from those with a thread ready, runs its lowest program counter: a
producer warp may run far ahead of its consumers, CTAs interleave) or "warps" (a warp drawn
at each step, so the warps of one partition drift apart too and a missing barrier between
them can show; a warpgroup-wide instruction, wgmma or setmaxnreg, waits until every live warp
of its warpgroup stands at it, then runs for all). "random" and "warps" take a ``seed``. Global
atomics act in the order the simulator reaches them, so the CTA orders make a different CTA the
last to arrive at a counter. ``setmaxnreg`` is a no-op that must be executed by whole
warpgroups. Kernels that never wait on another partition run in the "pc" order exactly as in
ptxsim_hopper (the barriers complete at once).
"""
from __future__ import annotations

import numpy as np

from ptxsim_cluster import ClusterSim
from ptxsim_hopper import load_kernel  # noqa: F401  (load_kernel: for callers)
import ptxsim_hopper

_ORDERS = ("pc", "cta", "cta_reversed", "random", "warps")
_WARPGROUP_WIDE = ("wgmma", "setmaxnreg")


class WSSim(ClusterSim):
    def __init__(self, *a, order: str = "pc", seed=None, **kw):
        super().__init__(*a, **kw)
        if order not in _ORDERS:
            raise ValueError(f"order must be one of {_ORDERS}, got {order!r}")
        self.order, self.rng = order, np.random.default_rng(seed)
        per_cta = -(-self.k.nthreads // 128)
        self.group = (self.cta * per_cta + self.tid // 128).astype(np.int64)   # warpgroups, by CTA
        self.ngroups = self.nctas * per_cta
        self.warp = np.arange(self.N) // 32 if self.k.nthreads % 32 == 0 else None
        self.parked = np.zeros(self.N, bool)
        self.live = np.ones(self.N, bool)
        self.pc = 0
        self.mwaits: dict = {}     # (cta, shared addr) -> [barrier state when they parked, waiting mask, pc]
        self.nbars: dict = {}      # (cta, id) -> [expected threads or None (the CTA), arrived, waiting mask]
        self.cl_gen = np.zeros(self.nclusters, np.int64)      # completed cluster-barrier generations
        self.cl_count = np.zeros(self.nclusters, np.int64)    # arrivals in the current one
        self.cl_mine = np.full(self.N, -1, np.int64)      # the generation a thread last arrived in
        self.cl_waiting = np.zeros(self.N, bool)
        self.mbarrier_parks = 0    # failed waits that parked a group of threads
        self.atomics: list = []    # (CTA, global address, the value it found), in the order they acted

    # -- scheduling ------------------------------------------------------------------------------
    def run(self, max_steps: int = 2_000_000):
        pcs = np.zeros(self.N, np.int64)
        n = len(self.k.ins)
        steps = 0
        while self.live.any():
            ready = self.live & ~self.parked
            if not ready.any():
                raise RuntimeError(self._deadlock(pcs))
            if self.order == "random":
                groups = np.nonzero(np.bincount(self.group[ready], minlength=self.ngroups))[0]
                ready &= self.group == groups[self.rng.integers(len(groups))]
            elif self.order == "warps":
                ready = self._pick_warp(ready, pcs)
            elif self.order != "pc":
                ctas = self.cta[ready]
                ready &= self.cta == (ctas.min() if self.order == "cta" else ctas.max())
            pc = pcs[ready].min()
            active = ready & (pcs == pc)
            if pc >= n:
                self._exit(active)
                continue
            ins = self.k.ins[pc]
            steps += 1
            if steps > max_steps:
                raise RuntimeError("simulation did not finish (an endless loop?)")
            nxt = np.where(active, pc + 1, pcs)
            if ins[0] == "op":
                _, pred, parts, args = ins
                m = active
                if pred is not None:
                    p = self.get(pred[0])
                    m = active & (~p if pred[1] else p)
                self.pc = pc
                target = self.exec(parts, args, m, active)
                if target is not None:
                    nxt = np.where(m, self.k.labels[target], nxt)
                elif parts[0] == "ret":
                    self._exit(m)
                if parts[0] in ("mbarrier", "cp") and self.mwaits:
                    self._wake_mbarrier_waiters()
            pcs = nxt
        self._check_exit()

    def _pick_warp(self, ready, pcs):
        """The ready threads of a random warp; at a warpgroup-wide instruction, those of its whole
        warpgroup once every live warp of it stands there (else another warp)."""
        warps = np.nonzero(np.bincount(self.warp[ready], minlength=self.N // 32))[0]
        for w in self.rng.permutation(warps):
            sel = ready & (self.warp == w)
            pc = pcs[sel].min()
            ins = self.k.ins[pc] if pc < len(self.k.ins) else ("end",)
            if ins[0] != "op" or ins[2][0] not in _WARPGROUP_WIDE:
                return sel
            grp = self.live & (self.group == self.group[32 * w])
            if (pcs[grp] == pc).all() and not self.parked[grp].any():
                return grp
        stuck = sorted({int(pcs[32 * w]) for w in warps})
        raise RuntimeError("deadlock: every ready warp stands at a warpgroup-wide instruction the rest of its "
                           f"warpgroup does not reach (instructions {stuck})")

    def _exit(self, m) -> None:
        """Threads leave: barriers that wait for every thread of the CTA may now be complete."""
        self.live &= ~m
        for c in np.unique(self.cta[m]):
            for key, nb in list(self.nbars.items()):
                if key[0] == c and nb[0] is None:
                    self._try_release(key)
        for k in np.unique(self.clus[m]):
            self._cluster_release(int(k))

    def _cta_live(self, c: int) -> int:
        return int((self.live & (self.cta == c)).sum())

    def _cluster_live(self, k: int) -> int:
        return int((self.live & (self.clus == k)).sum())

    def _exited(self, cta: int) -> bool:
        return not (self.live & (self.cta == cta)).any()

    # -- mbarriers --------------------------------------------------------------------------------
    def _state(self, key):
        bar = self.bars[key]
        return bar[1], bar[2], bar[4], len(bar[3]), len(bar[5])

    def _spin_check(self, args, idx) -> None:
        """Replaced by parking: a wait that cannot complete shows as every thread parked."""

    def op_mbarrier(self, parts, args, m, active):
        out = super().op_mbarrier(parts, args, m, active)
        if parts[1] in ("try_wait", "test_wait"):
            failed = m & ~self.R[args[0]]
            if failed.any() and self._spins(args[0]):
                addr = self._addr(args[1])
                for i in np.nonzero(failed)[0]:
                    key = (int(self.cta[i]), int(addr[i]))
                    w = self.mwaits.get(key)
                    if w is None:   # everyone parked here parked at the current state (a change wakes all)
                        w = self.mwaits[key] = [self._state(key), np.zeros(self.N, bool), self.pc]
                    w[1][i] = True
                self.parked |= failed
                self.mbarrier_parks += 1
        return out

    def _spins(self, pred: str) -> bool:
        """The wait is a spin loop: the next instruction branches back to it when it fails."""
        nxt = self.k.ins[self.pc + 1] if self.pc + 1 < len(self.k.ins) else ("nop",)
        return (nxt[0] == "op" and nxt[1] == (pred, True) and nxt[2][0] == "bra"
                and self.k.labels.get(nxt[3][0], -1) <= self.pc)

    def _wake_mbarrier_waiters(self) -> None:
        for key, (state, mask, _) in list(self.mwaits.items()):
            if self._state(key) != state:
                self.parked &= ~mask
                del self.mwaits[key]

    def op_atom(self, parts, args, m, active):
        out = super().op_atom(parts, args, m, active)
        addr, old = self._addr(args[1]), self.get(args[0])
        self.atomics += [(int(self.cta[i]), int(addr[i]), int(old[i])) for i in np.nonzero(m)[0]]
        return out

    def _tma_load(self, parts, args, m):
        super()._tma_load(parts, args, m)
        if (self.busy > 1).any():   # two asynchronous writes in flight over one byte: either may land last
            c, at = (int(x[0]) for x in np.nonzero(self.busy > 1))
            raise RuntimeError(f"a TMA load into CTA {c}'s shared byte {at} while another copy into it is in flight")

    # -- named barriers ---------------------------------------------------------------------------
    def _arrive_named(self, parts, args, m, wait: bool) -> None:
        ident = self.val(args[0], "u32")
        count = self.val(args[1], "u32") if len(args) > 1 else None
        for c in np.unique(self.cta[m]):
            here = m & (self.cta == c)
            ids = np.unique(ident[here])
            if len(ids) != 1:
                raise RuntimeError(f"CTA {c}: one {'.'.join(parts)} names barriers {list(ids)}")
            key = (int(c), int(ids[0]))
            want = None if count is None else np.unique(count[here])
            if want is not None and len(want) != 1:
                raise RuntimeError(f"CTA {c}: one {'.'.join(parts)} gives thread counts {list(want)}")
            want = None if want is None else int(want[0])
            nb = self.nbars.get(key)
            if nb is None:
                nb = self.nbars[key] = [want, 0, np.zeros(self.N, bool)]
            elif nb[0] != want:
                raise RuntimeError(f"CTA {c}: barrier {key[1]} is used with thread counts {nb[0]} and {want} "
                                   "at once")
            nb[1] += int(here.sum())
            if wait:
                nb[2] |= here
                self.parked |= here
            self._try_release(key)

    def _try_release(self, key) -> None:
        nb = self.nbars[key]
        want = nb[0] if nb[0] is not None else self._cta_live(key[0])
        if nb[1] > want:
            raise RuntimeError(f"CTA {key[0]}: {nb[1]} threads arrive at barrier {key[1]}, whose count is {want}")
        if nb[1] == want:
            self.parked &= ~nb[2]
            del self.nbars[key]

    def op_bar(self, parts, args, m, active):
        if parts[1] == "warp":   # bar.warp.sync: a warp is in lockstep here
            return None
        if parts[1] not in ("sync", "arrive"):
            raise NotImplementedError(".".join(parts))
        self._arrive_named(parts, args, m, wait=parts[1] == "sync")
        return None

    def op_barrier(self, parts, args, m, active):
        if parts[1] == "cluster":
            return self._cluster(parts, m)
        if parts[1] not in ("sync", "arrive"):
            raise NotImplementedError(".".join(parts))
        self._arrive_named(parts, args, m, wait=parts[1] == "sync")
        return None

    # -- barrier.cluster: every live thread of the cluster's CTAs --------------------------------------
    def _cluster(self, parts, m):
        if parts[2] == "arrive":
            for i in np.nonzero(m)[0]:
                k = int(self.clus[i])
                if self.cl_mine[i] == self.cl_gen[k]:
                    raise RuntimeError(f"thread {i} arrives twice at barrier.cluster before it completes")
                self.cl_mine[i] = self.cl_gen[k]
                self.cl_count[k] += 1
            for k in np.unique(self.clus[m]):
                self._cluster_release(int(k))
        elif parts[2] == "wait":
            if (self.cl_mine[m] < 0).any():
                raise RuntimeError("barrier.cluster.wait by a thread that never arrived")
            wait = m & (self.cl_mine >= self.cl_gen[self.clus])
            self.cl_waiting |= wait
            self.parked |= wait
        else:
            raise NotImplementedError(".".join(parts))
        return None

    def _cluster_release(self, k: int) -> None:
        if self.cl_count[k] and self.cl_count[k] >= self._cluster_live(k):
            self.cl_gen[k] += 1
            self.cl_count[k] = 0
            mine = self.cl_waiting & (self.clus == k)
            self.parked &= ~mine
            self.cl_waiting &= ~mine

    def op_setmaxnreg(self, parts, args, m, active):
        groups = m.reshape(-1, 128)
        if not (groups.all(axis=1) | ~groups.any(axis=1)).all():
            raise RuntimeError("setmaxnreg executed by part of a warpgroup")
        return None

    # -- deadlock report --------------------------------------------------------------------------
    def _why(self, i: int) -> str:
        for key, (_, mask, pc) in self.mwaits.items():
            if mask[i]:
                bar = self.bars[key]
                _, _, parts, args = self.k.ins[pc]
                return (f"the mbarrier at shared {key[1]} ({'.'.join(parts)} {', '.join(args)}; phase {bar[2]}, "
                        f"{bar[1]} of {bar[0]} arrivals and {bar[4]} transaction bytes outstanding)")
        for key, nb in self.nbars.items():
            if nb[2][i]:
                want = nb[0] if nb[0] is not None else f"{self._cta_live(key[0])} (the CTA)"
                return f"named barrier {key[1]} ({nb[1]} of {want} threads arrived)"
        if self.cl_waiting[i]:
            k = int(self.clus[i])
            ctas = "" if self.csize == 1 else f"CTAs {', '.join(str(c) for c in self.members[k])}; "
            return f"barrier.cluster ({ctas}{self.cl_count[k]} of {self._cluster_live(k)} threads arrived)"
        return "nothing (not parked)"

    def _deadlock(self, pcs) -> str:
        lines, last = [], None
        for w in range(self.N // 32):
            lanes = np.nonzero(self.live[32 * w:32 * w + 32])[0] + 32 * w
            if not len(lanes):
                continue
            c, warp = int(self.cta[lanes[0]]), (w * 32 % self.k.nthreads) // 32
            why = "; ".join(sorted({self._why(int(i)) for i in lanes}))
            if last and last[0] == c and last[2] == why and last[1][-1] == warp - 1:
                last[1].append(warp)
            else:
                last = [c, [warp], why]
                lines.append(last)
        parts = [f"CTA {c} warp{'s' if len(ws) > 1 else ''} {ws[0]}{'-' + str(ws[-1]) if len(ws) > 1 else ''} "
                 f"waits on {why}" for c, ws, why in lines]
        return "deadlock: every live thread waits:\n  " + "\n  ".join(parts)


def run(ptx: str, grid, args: list, smem_bytes: int, max_steps: int = 2_000_000, order: str = "pc",
        seed=None) -> WSSim:
    """ptxsim_hopper.run on the scheduler above; returns the simulator."""
    return ptxsim_hopper.run(ptx, grid, args, smem_bytes, max_steps, sim_class=WSSim, order=order, seed=seed)

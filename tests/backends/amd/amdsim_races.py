"""amdsim with a strict LDS race detector (opt-in, as ptxsim_races is for ptxsim).

amdsim runs a work-group's waves one after another from one s_barrier to the next, so the
accesses between two barriers happened in an order the hardware does not promise: an
s_barrier is the only thing the backend's code orders LDS accesses of different waves with
(it never syncs waves through LDS atomics or flags, and amdsim refuses an s_barrier with LDS
operations in flight, so a barrier also means every earlier ds_* of every wave completed).
Each work-group therefore has an *epoch* that every s_barrier advances, and per LDS byte this
remembers its last writer (wave, epoch, pc) and its readers this epoch (the last one and
one other, with their pcs). An access races when another wave touched the byte in the same epoch and one
of the two is a write:
- a read of a byte another wave wrote, a write of a byte another wave read or wrote;
- two waves writing one byte race whatever they write. amdsim's built-in check
  (amdsim.LdsRaceCheck) lets a wave rewrite a byte with the value it holds -- copies of an
  element that several waves store -- which is benign on the hardware in value but still two
  unordered writes; this one reports it, so a backend that lets only one wave of each set of
  copies write can be held to it;
- lanes of one wave writing one byte in one instruction do not race (the hardware keeps one
  lane's value, which one undefined): accepted when they write one value, reported when the
  values differ (amdsim keeps the highest lane's, so a result would depend on the pick).
Two waves "in one instruction" are two accesses of one epoch, so the rules above cover them.
A ds_write2's two halves are checked one after the other (as one wave's, in order). An LDS
DMA (amdsim_dma) counts as the issuing wave's write, at issue and again when it lands.
The report names both instructions (pc and text), the waves and the byte.
"""
from __future__ import annotations

import numpy as np

import amdsim
from amdsim import SimError


class LdsRaces:
    """Per LDS byte of one work-group: last writer and this epoch's readers."""

    def __init__(self, size):
        self.epoch = 0
        self.w_epoch = np.full(size, -1, np.int64)
        self.w_wave = np.full(size, -1, np.int64)
        self.w_pc = np.full(size, -1, np.int64)
        self.r_epoch = np.full(size, -1, np.int64)
        self.r_wave = np.full(size, -1, np.int64)   # the last reader this epoch, and its pc
        self.r_pc = np.full(size, -1, np.int64)
        self.r_other = np.full(size, -1, np.int64)  # a reader this epoch other than r_wave (-1: none)
        self.r_other_pc = np.full(size, -1, np.int64)

    def access(self, w, addrs, n, pc, data=None, lds=None):
        """Wave ``w``'s access at ``pc`` of ``n`` bytes at each of ``addrs`` (its active
        lanes'); ``data`` (lanes x n bytes): what a write stores, None for a read."""
        write = data is not None
        if not len(addrs):
            return
        idx = (np.asarray(addrs, np.int64)[:, None] + np.arange(n)).ravel()
        keep = (idx >= 0) & (idx < self.w_epoch.size)   # out of range: the access itself raises
        idx = idx[keep]
        e, me = self.epoch, w.wid
        raw = (self.w_epoch[idx] == e) & (self.w_wave[idx] != me)
        # a reader other than me: r_wave, or else r_other (never r_wave, so not me either)
        war = (self.r_epoch[idx] == e) & ((self.r_wave[idx] != me) | (self.r_other[idx] >= 0)) if write \
            else np.zeros(len(idx), bool)
        if raw.any() or war.any():
            j = int(np.argmax(raw)) if raw.any() else int(np.argmax(war))
            b = int(idx[j])
            if raw[j]:
                other, verb, opc = f"wave {self.w_wave[b]}", "wrote", self.w_pc[b]
            elif self.r_wave[b] != me:
                other, verb, opc = f"wave {self.r_wave[b]}", "read", self.r_pc[b]
            else:
                other, verb, opc = f"wave {self.r_other[b]}", "read", self.r_other_pc[b]
            raise SimError(f"LDS race: wave {me} {'writes' if write else 'reads'} LDS byte {b} at pc {pc} "
                           f"(`{w.sim.text(pc)}`), which {other} {verb} at pc {opc} (`{w.sim.text(int(opc))}`) "
                           "with no s_barrier between them")
        if write:
            self._lanes_agree(w, idx, np.asarray(data, np.uint8).ravel()[keep], pc)
            self.w_epoch[idx] = e
            self.w_wave[idx] = me
            self.w_pc[idx] = pc
        else:
            fresh = self.r_epoch[idx] != e
            moved = ~fresh & (self.r_wave[idx] != me)       # another wave read it last: now r_other
            self.r_other[idx] = np.where(fresh, -1, np.where(moved, self.r_wave[idx], self.r_other[idx]))
            self.r_other_pc[idx] = np.where(moved, self.r_pc[idx], self.r_other_pc[idx])
            self.r_wave[idx] = me
            self.r_pc[idx] = pc
            self.r_epoch[idx] = e

    @staticmethod
    def _lanes_agree(w, idx, vals, pc):
        """Lanes of one wave writing one byte in one instruction: only with one value."""
        order = np.argsort(idx, kind="stable")
        ks, vs = idx[order], vals[order]
        differ = (ks[1:] == ks[:-1]) & (vs[1:] != vs[:-1])
        if differ.any():
            j = int(np.argmax(differ))
            raise SimError(f"LDS conflict: lanes of wave {w.wid} write different values ({vs[j]:#04x}, "
                           f"{vs[j + 1]:#04x}) to LDS byte {ks[j]} in one instruction at pc {pc} "
                           f"(`{w.sim.text(pc)}`; the hardware keeps one, which one is undefined)")


class RaceSim(amdsim.Sim):
    lds_check = LdsRaces


def simulate(traced, target: str, grid, args, **kw):
    """amdsim.simulate with the strict LDS race detector; returns the simulator."""
    return amdsim.simulate(traced, target, grid, args, sim_class=RaceSim, **kw)

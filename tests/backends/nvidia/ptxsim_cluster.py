"""ptxsim_hopper extended with clusters of several CTAs (``.reqnctapercluster``).

Written from the PTX ISA (distributed shared memory, ``mapa``, the cluster special registers,
``cp.async.bulk.tensor``'s ``.multicast::cluster``), not from our emitter.

A kernel declaring ``.reqnctapercluster X, Y, Z`` is launched as clusters of X*Y*Z CTAs: CTA
(x, y, z) is in cluster (x // X, y // Y, z // Z) with rank x % X + X * (y % Y + Y * (z % Z)); a
grid that is not a whole number of clusters in each dimension raises ValueError (the driver
refuses such a launch). Without the directive every CTA is a cluster of one. ``%cluster_ctarank``,
``%cluster_nctarank``, ``%cluster_ctaid``, ``%cluster_nctaid``, ``%clusterid``, ``%nclusterid``
and ``%is_explicit_cluster`` read as the ISA defines them. Each CTA keeps its own shared memory.

shared::cluster addresses: ``mapa.shared::cluster d, a, r`` gives ``(r + 1) << 24 | a``'s offset,
CTA r's copy of the byte ``a`` names (an encoding of ours). An instruction taking a
shared::cluster address decodes it; one below 2**24 is a shared::cta address, which the ISA lets
stand for the executing CTA's own byte. (The GPU puts even a CTA's own shared::cta window past
rank 0 above 2**24; here every CTA's starts at 0, so a kernel mixing the two address kinds up is
not caught.) Decoded so far: ``mbarrier.arrive[.expect_tx].shared::cluster`` and
``mbarrier.expect_tx.shared::cluster`` (on a peer's mbarrier: its waiters parked in ptxsim_ws
wake), and the destination and mbarrier of ``cp.async.bulk.tensor...shared::cluster``. A
``.multicast::cluster`` load with ``ctaMask`` writes the box at the destination's offset in every
CTA of the mask, each copy tracked by (and counted against the transaction bytes of) the
mbarrier at the same offset in that CTA; each copy lands when a waiter in its CTA needs it, and
every ptxsim_hopper check applies in each CTA (in-flight wgmma reads, two copies in flight).
``ld``/``st.shared::cluster`` (reading a peer's buffers directly) raise NotImplementedError.

Mistakes only a cluster can make raise RuntimeError naming both CTAs: an arrival or a copy onto
a peer's mbarrier before the peer initialised it (a ``barrier.cluster`` after the inits is
missing), and one onto a CTA that has exited (one before exiting is missing; the scheduler of
ptxsim_ws knows when a CTA has exited). ``barrier.cluster`` itself is ptxsim_ws's.
"""
from __future__ import annotations

import re

import numpy as np

from ptxsim import _np
from ptxsim_hopper import HopperSim

_WINDOW = 24                       # shared::cluster addresses: (rank + 1) << 24 | offset
_OFFSET = (1 << _WINDOW) - 1


class ClusterSim(HopperSim):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        m = re.search(r"\.reqnctapercluster\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", self.k.text)
        self.explicit = m is not None
        self.cshape = tuple(int(x) if x else 1 for x in m.groups()) if m else (1, 1, 1)
        if any(g % s for g, s in zip(self.grid, self.cshape)):
            raise ValueError(f"a grid of {self.grid} CTAs is no whole number of {self.cshape} clusters")
        self.csize = int(np.prod(self.cshape))
        self.nclusterid = tuple(g // s for g, s in zip(self.grid, self.cshape))
        self.nclusters = int(np.prod(self.nclusterid))
        cta = np.arange(self.nctas)
        xyz = [c[::self.k.nthreads].astype(np.int64) for c in self.ctaid]   # per CTA
        inner = [v % s for v, s in zip(xyz, self.cshape)]
        outer = [v // s for v, s in zip(xyz, self.cshape)]
        X, Y, _ = self.cshape
        self.crank = inner[0] + X * (inner[1] + Y * inner[2])               # per CTA
        self.cid = outer[0] + self.nclusterid[0] * (outer[1] + self.nclusterid[1] * outer[2])
        self.members = np.zeros((self.nclusters, self.csize), np.int64)    # cluster, rank -> CTA
        self.members[self.cid, self.crank] = cta
        self.clus = self.cid[self.cta]                                      # per thread
        self.peer_arrivals = 0     # mbarrier arrivals on another CTA's mbarrier
        self.peer_copies = 0       # TMA boxes written into another CTA's shared memory

    def _special(self, a, t):
        name, _, axis = a.partition(".")
        d = "xyz".index(axis) if axis else None
        per_cta = {"%cluster_ctarank": lambda: self.crank,
                   "%cluster_ctaid": lambda: self.ctaid[d][::self.k.nthreads] % self.cshape[d],
                   "%clusterid": lambda: self.ctaid[d][::self.k.nthreads] // self.cshape[d]}
        const = {"%cluster_nctarank": lambda: self.csize, "%cluster_nctaid": lambda: self.cshape[d],
                 "%nclusterid": lambda: self.nclusterid[d], "%is_explicit_cluster": lambda: int(self.explicit)}
        if name in per_cta:
            v = np.asarray(per_cta[name]())[self.cta].astype(np.uint32)
        elif name in const:
            v = np.full(self.N, const[name](), np.uint32)
        else:
            return super()._special(a, t)
        return v.astype(bool) if t == "pred" else v.astype(_np(t))

    def _exited(self, cta: int) -> bool:
        """Every thread of ``cta`` has exited (the lockstep machine does not say: never)."""
        return False

    # -- shared::cluster addresses --------------------------------------------------------------
    def op_mapa(self, parts, args, m, active):
        if "shared::cluster" not in parts:
            raise NotImplementedError(f"ptxsim_cluster: {'.'.join(parts)} (generic addresses)")
        t = parts[-1]
        a = self.val(args[1], t).astype(np.int64) & _OFFSET
        r = self.val(args[2], "u32").astype(np.int64)
        if (r[m] >= self.csize).any():
            raise IndexError(f"mapa to CTA rank {int(r[m].max())} of a cluster of {self.csize}")
        self.set(args[0], (((r + 1) << _WINDOW) | a).astype(np.uint64), m)
        return None

    def _where(self, i: int, addr: int, what: str):
        """(CTA, shared offset) a shared::cluster address used by thread ``i`` names."""
        c = int(self.cta[i])
        if addr <= _OFFSET:
            return c, addr
        r = (addr >> _WINDOW) - 1
        if r >= self.csize:
            raise IndexError(f"shared::cluster address {hex(addr)}: rank {r} in a cluster of {self.csize}")
        peer = int(self.members[self.cid[c], r])
        if peer != c and self._exited(peer):
            raise RuntimeError(f"CTA {c} {what} CTA {peer}, which has exited (a barrier.cluster before "
                               "the CTAs of a cluster exit is missing)")
        return peer, addr & _OFFSET

    def _peer_bar(self, i: int, cta: int, addr: int, what: str):
        """The mbarrier at ``addr`` of ``cta``, used by thread ``i`` (of that CTA or a peer)."""
        if (cta, addr) not in self.bars and cta != self.cta[i]:
            raise RuntimeError(f"CTA {int(self.cta[i])} {what} the mbarrier at shared {addr} of CTA {cta} before "
                               f"CTA {cta} initialised it (a barrier.cluster between the init and the peers' "
                               "use is missing)")
        return self._bar(cta, addr)

    def op_mbarrier(self, parts, args, m, active):
        if "shared::cluster" not in parts:
            return super().op_mbarrier(parts, args, m, active)
        op = parts[1]
        if op not in ("arrive", "expect_tx"):
            raise NotImplementedError(f"ptxsim_cluster: {'.'.join(parts)}")
        arrive = op == "arrive"
        if arrive and args[0] != "_":
            raise RuntimeError(f"{'.'.join(parts)} returns no state: its destination must be _")
        at = args[1] if arrive else args[0]
        addr = self._addr(at)
        tx = self.val(args[2] if arrive else args[1], "u32") if "expect_tx" in parts else None
        count = self.val(args[2], "u32") if arrive and tx is None and len(args) > 2 else np.ones(self.N, np.uint32)
        what = "arrives on" if arrive else "expects bytes on"
        for i in np.nonzero(m)[0]:
            c, off = self._where(int(i), int(addr[i]), what)
            bar = self._peer_bar(int(i), c, off, what)
            self._remote_arrival(int(i), c, off, bar)
            if tx is not None:
                bar[4] += int(tx[i])
            if arrive:
                self._arrive(bar, int(count[i]))
                self.peer_arrivals += c != self.cta[i]
        return None

    def _remote_arrival(self, i: int, cta: int, addr: int, bar) -> None:
        """Thread ``i`` arrives on (or expects bytes on) ``cta``'s mbarrier (a hook)."""

    def op_ld(self, parts, args, m, active):
        if "shared::cluster" in parts:
            raise NotImplementedError(f"ptxsim_cluster: {'.'.join(parts)} (a peer's shared memory read directly)")
        return super().op_ld(parts, args, m, active)

    def op_st(self, parts, args, m, active):
        if "shared::cluster" in parts:
            raise NotImplementedError(f"ptxsim_cluster: {'.'.join(parts)} (a peer's shared memory written directly)")
        return super().op_st(parts, args, m, active)

    # -- TMA loads into several CTAs --------------------------------------------------------------
    def _tma_destinations(self, i: int, parts, args, dst: int, bar: int) -> list:
        c, d = self._where(i, dst, "copies into")
        cb, b = self._where(i, bar, "signals")
        if not any(p.startswith("multicast") for p in parts):
            if cb != c:
                raise RuntimeError(f"a TMA load into CTA {c} signals an mbarrier of CTA {cb} (the ISA wants "
                                   "both in one CTA)")
            return [(c, d, b, self._peer_bar(i, c, b, "copies onto"))]
        mask = int(self.val(args[3], "u16")[i])
        if mask >> self.csize:
            raise IndexError(f"a multicast's ctaMask {bin(mask)} names CTAs past the cluster of {self.csize}")
        out = []
        for r in range(self.csize):
            if mask >> r & 1:
                peer = int(self.members[self.clus[i], r])
                if peer != self.cta[i] and self._exited(peer):
                    raise RuntimeError(f"CTA {int(self.cta[i])} multicasts into CTA {peer}, which has exited (a "
                                       "barrier.cluster before the CTAs of a cluster exit is missing)")
                out.append((peer, d, b, self._peer_bar(i, peer, b, "multicasts onto")))
                self.peer_copies += peer != self.cta[i]
        return out


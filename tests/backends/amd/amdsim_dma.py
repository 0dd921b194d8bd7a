"""LDS DMA on the simulator: ``buffer_load_dword vOff, s[rsrc], soff offen lds`` (gfx942).

Each active lane reads the dword at V#.base + soffset + voffset (zero when voffset + 4 passes
num_records) and it lands at LDS byte M0 + 4 * lane -- when the load retires (``s_waitcnt
vmcnt``), not at issue. Until then its bytes are *pending*: an LDS access of a pending byte by
any wave is an error (a missing wait, or a missing barrier after it), and so is a barrier-free
write by another wave (the race check counts the DMA as a write from issue). The V# must be a
raw buffer (stride 0) with gfx9's dword3 0x27000, M0 dword-aligned inside the allocation, the
instruction offset 0 (whether it also moves the LDS address is not modelled) and M0 written at
least one instruction before the load (the gfx9 M0 -> LDS DMA hazard).
"""
from __future__ import annotations

import numpy as np

from gluon_trace.backends.amd.mir import Fixed

M32 = 0xFFFFFFFF
DWORD3 = 0x00027000


def is_dma(i) -> bool:
    return i.op.startswith("buffer_") and i.suffix.split()[-1:] == ["lds"]


def step(sim, w, i) -> None:
    from amdsim import SimError, render
    if i.op != "buffer_load_dword" or sim.t.name != "gfx942":
        raise SimError(f"`{render(i)}`: no LDS DMA simulation for {i.op} on {sim.t.name}")
    if "offset:" in i.suffix or "offen" not in i.suffix.split():
        raise SimError(f"`{render(i)}`: only `offen` with instruction offset 0 is simulated")
    prev = sim.code[w.pc - 2] if w.pc >= 2 else None
    if prev is not None and any(isinstance(d, Fixed) and d.name == "m0" for d in getattr(prev, "defs", [])):
        raise SimError(f"`{render(i)}` right after an M0 write: the hazard needs one wait state")
    vaddr, rsrc, soff = i.uses
    words = [int(w.s[rsrc.phys + k]) for k in range(4)]
    base = words[0] | ((words[1] & 0xFFFF) << 32)
    stride = (words[1] >> 16) & 0x3FFF
    if stride or words[3] != DWORD3:
        raise SimError(f"`{render(i)}`: V# {[hex(x) for x in words]} is not a raw buffer (stride 0, "
                       f"dword3 {DWORD3:#x})")
    num_records = words[2]
    m0 = int(w.m0)
    if m0 % 4:
        raise SimError(f"`{render(i)}`: M0 = {m0} is not dword-aligned")
    voff = w.read(vaddr)[0].astype(np.int64) & M32
    so = w.sval(soff)
    act = w.mask_lanes(w.exec)
    lanes = np.nonzero(act)[0]
    where = m0 + 4 * lanes.astype(np.int64)
    if len(lanes) and where.max() + 4 > sim.lds.size:
        raise SimError(f"`{render(i)}`: LDS DMA to byte {where.max()} beyond the {sim.lds.size} allocated")
    new = np.zeros((len(lanes), 4), np.uint8)
    for j, l in enumerate(lanes):
        if int(voff[l]) + 4 <= num_records:
            val = sim.mem.read(base + so + int(voff[l]), 4)
            new[j] = np.frombuffer(val.to_bytes(4, "little"), np.uint8)
    check_pending(sim, w, where, 4)
    sim.lds_track.access(w, where, 4, pc=w.pc - 1, data=new, lds=sim.lds)
    idx = (where[:, None] + np.arange(4)).ravel()
    sim.lds_pending[idx] += 1
    pc = w.pc - 1

    def land():
        sim.lds_pending[idx] -= 1
        sim.lds_track.access(w, where, 4, pc=pc, data=new, lds=sim.lds)
        for j in range(len(lanes)):
            sim.lds[where[j]:where[j] + 4] = new[j]
    w.issue("vm", [("lds", None, land)])


def check_pending(sim, w, addrs, n) -> None:
    """An LDS access of bytes a DMA has not yet written (any wave's) is an error."""
    if not len(addrs) or not sim.lds_pending.any():
        return
    idx = (np.asarray(addrs, np.int64)[:, None] + np.arange(n)).ravel()
    idx = idx[(idx >= 0) & (idx < sim.lds_pending.size)]
    if sim.lds_pending[idx].any():
        b = int(idx[np.nonzero(sim.lds_pending[idx])[0][0]])
        from amdsim import SimError
        raise SimError(f"LDS byte {b} accessed at pc {w.pc - 1} (wave {w.wid}) while an LDS DMA into it "
                       "is in flight (missing s_waitcnt vmcnt, or barrier after it)")

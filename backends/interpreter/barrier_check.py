"""Checks that the barriers the backends insert are enough.

Within a partition users write no barrier for ordinary shared-memory traffic: every backend
puts ``bar.sync`` / ``s_barrier`` where :func:`gluon_trace.membar.barriers` says. The
interpreter runs a partition as one agent, so it checks that placement instead: each byte
remembers which thread last touched it (the lowest thread that owns the element in the
access's register layout), whether it wrote, and the barrier epoch of the partition at the
time; an access by another thread in the same epoch that conflicts (either side writes) means
the placement missed a hazard, a library bug, reported with both lines.
"""
from __future__ import annotations

import functools

import numpy as np

from gluon_trace.errors import InterpreterError


@functools.lru_cache(maxsize=256)
def thread_of(layout, shape: tuple) -> np.ndarray:
    """For each element (row-major), the lowest (warp, lane) that holds it, as warp*lanes+lane."""
    lin = layout.to_linear(shape)
    c = lin.coords()                                  # [warps, lanes, regs, ndim]
    w, l, r, nd = c.shape
    flat = np.ravel_multi_index(tuple(c.reshape(-1, nd).T), shape) if nd else np.zeros(w * l * r, np.int64)
    tid = np.repeat(np.arange(w * l, dtype=np.int64), r)
    out = np.full(int(np.prod(shape)) if shape else 1, -1, np.int64)
    out[flat[::-1]] = tid[::-1]                       # the lowest thread writes last: it wins
    out.flags.writeable = False
    return out


class BarrierCheck:
    def __init__(self, need):
        self.need = need          # ops with a backend barrier right before them
        self.epoch: dict[int, int] = {}

    def barrier(self, part: int) -> None:
        self.epoch[part] = self.epoch.get(part, 0) + 1

    def access(self, s, view, op, layout, write: bool) -> None:
        part = s.current
        if op in self.need:
            self.barrier(part)
        epoch = self.epoch.get(part, 0)
        buf = view.buf
        if getattr(buf, "g_tid", None) is None:
            n = buf.data.size
            buf.g_tid = np.full(n, -1, np.int64)
            buf.g_epoch = np.zeros(n, np.int64)
            buf.g_part = np.full(n, -1, np.int64)
            buf.g_write = np.zeros(n, bool)
            buf.g_loc = np.zeros(n, np.int64)
        size = max(view.dtype.bits // 8, 1)
        tids = np.repeat(thread_of(layout, tuple(view.offs.shape)), size)
        b = view.byte_index()
        prev = buf.g_tid[b]
        clash = ((prev >= 0) & (prev != tids) & (buf.g_part[b] == part) & (buf.g_epoch[b] == epoch)
                 & (buf.g_write[b] | write))
        if clash.any():
            i = int(np.argmax(clash))
            raise InterpreterError(
                f"{op.name}: thread {int(tids[i])} touches shared memory that thread {int(prev[i])} "
                f"{'wrote' if buf.g_write[b[i]] else 'read'} at {s.line(buf.g_loc[b[i]])} with no barrier "
                "between them; the backends' barrier placement (gluon_trace.membar) missed this hazard",
                op.loc, notes=("a library bug: please report it; gl.thread_barrier() works around it",))
        buf.g_tid[b] = tids
        buf.g_epoch[b] = epoch
        buf.g_part[b] = part
        buf.g_write[b] = write
        buf.g_loc[b] = s.loc_id(op.loc)

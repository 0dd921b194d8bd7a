"""Shared memory and its synchronisation, as the interpreter models them, per program.

Shared buffers are byte arrays; a descriptor value is a :class:`View`: the buffer plus the
element offset of each logical coordinate (the shared layout's offsets, indexed, sliced,
permuted or reshaped like the view). Every byte remembers who wrote it last and when, who
read it, and which asynchronous operation may still read it, so a missing wait or barrier
is an error that names both lines, decided by happens-before rather than by the order the
interpreter happened to run things in.

Happens-before is kept with vector clocks. Components are the running partitions and every
asynchronous operation (a cp.async, a TMA copy, an async wgmma, a TMA store). A partition's
write is stamped with its own clock entry; a read by another partition is ordered after it
only if that partition's clock has caught up, which happens by waiting on an mbarrier phase
the writer arrived on (or on the group/phase an async operation completes in). An async
operation's component is set in a partition's clock when it waits for it (wait_group,
mbarrier wait, warpgroup_mma_wait, store_wait) or learns of that wait through a barrier.
Within one partition ordinary shared-memory accesses are in program order: the backends
insert the barriers that needs (as Gluon's compiler does), so they are not the user's
business here.
"""
from __future__ import annotations

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace.errors import InterpreterError

from .memory import from_storage, to_storage


def _grow(vc: np.ndarray, n: int) -> np.ndarray:
    if vc.size >= n:
        return vc
    out = np.zeros(max(n, 2 * vc.size), np.int64)
    out[:vc.size] = vc
    return out


def merge(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # ``a`` grows to exactly ``b``'s length: growing either by doubling here would let two
    # clocks merged in turn double each other without bound
    if a.size < b.size:
        out = np.zeros(b.size, np.int64)
        out[:a.size] = a
        a = out
    else:
        a = a.copy()
    a[:b.size] = np.maximum(a[:b.size], b)
    return a


class Event:
    """One asynchronous operation: what it is, where, and the clock of its issue."""
    __slots__ = ("comp", "kind", "loc", "clock", "note")

    def __init__(self, comp, kind, loc, clock):
        self.comp, self.kind, self.loc, self.clock = comp, kind, loc, clock
        self.note = None  # a likelier cause, added to a report about this operation


class Buffer:
    """One allocation's bytes and, per byte, the last writer, its time and line, and readers."""

    def __init__(self, nbytes: int, loc, name: str):
        self.data = np.full(nbytes, 0xA5, np.uint8)  # poison: no byte reads as a plausible value
        self.writer = np.full(nbytes, -1, np.int64)
        self.wtime = np.zeros(nbytes, np.int64)
        self.wloc = np.zeros(nbytes, np.int64)
        self.wfence = np.zeros(nbytes, np.int64)
        self.areader = np.full(nbytes, -1, np.int64)
        self.aloc = np.zeros(nbytes, np.int64)
        self.rtime: dict[int, np.ndarray] = {}
        self.rloc: dict[int, np.ndarray] = {}
        self.loc, self.name = loc, name


class View:
    """A descriptor's value: a buffer, element offsets of the logical coordinates, a dtype."""
    __slots__ = ("buf", "offs", "dtype")

    def __init__(self, buf: Buffer, offs: np.ndarray, dtype: dt.dtype):
        self.buf, self.offs, self.dtype = buf, offs, dtype

    def byte_index(self) -> np.ndarray:
        size = max(self.dtype.bits // 8, 1)
        return (self.offs.reshape(-1, 1) * size + np.arange(size)).reshape(-1)

    def key(self) -> tuple:
        """Identifies one mbarrier: the buffer and its element offset."""
        return (id(self.buf), int(self.offs.reshape(-1)[0]))


class MBarrier:
    __slots__ = ("count", "pending", "tx", "phase", "arrive_clock", "events", "done_clock",
                 "init_loc", "expect_locs", "expected", "arrived", "valid", "stamp", "copy_locs", "inflight")

    def __init__(self, count: int, loc):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0
        self.arrive_clock = np.zeros(1, np.int64)
        self.events: list[Event] = []
        self.done_clock = np.zeros(1, np.int64)
        self.init_loc, self.expect_locs = loc, []
        self.expected = self.arrived = 0
        self.valid = True
        self.stamp = None  # (component, time) of the init, in a cluster (peers must see it)
        self.copy_locs = []  # this phase's async_copy.mbarrier_arrive(increment_count=True): no arrival
        self.inflight = []   # (phase index, loc) of TMA loads no wait has yet seen complete


class SyncState:
    """Everything one program's shared memory and synchronisation needs."""

    def __init__(self):
        self.ncomp = 1
        self.current = 0                       # component of the running partition
        self.clocks = {0: np.array([1], np.int64)}
        self.fences = {0: 0}
        self.locs: list = [None]
        self.loc_ids: dict = {}
        self.events: dict[int, Event] = {}
        self.bars: dict[tuple, MBarrier] = {}
        self.copy_uncommitted: dict[int, list] = {}
        self.copy_groups: dict[int, list] = {}
        self.mma_groups: dict[int, list] = {}
        self.store_groups: dict[int, list] = {}
        self.partition_names = {0: "the default partition"}
        self.partition_comps: set[int] = set()  # worker partitions' components (no warp_specialize there)
        self.scheduler = None
        self.barrier_check = None  # barrier_check.BarrierCheck, set by rules_memory.state

    # -- clocks ------------------------------------------------------------------------------
    def new_component(self) -> int:
        c = self.ncomp
        self.ncomp += 1
        return c

    def clock(self, comp: int | None = None) -> np.ndarray:
        comp = self.current if comp is None else comp
        vc = _grow(self.clocks[comp], self.ncomp)
        self.clocks[comp] = vc
        return vc

    def acquire(self, clock: np.ndarray) -> None:
        self.clocks[self.current] = merge(self.clock(), clock)

    def release(self) -> np.ndarray:
        """The clock a release (arrive) publishes; later writes get a later stamp."""
        vc = self.clock()
        snap = vc.copy()
        vc[self.current] += 1
        return snap

    def observe(self, ev: Event) -> None:
        self.acquire(ev.clock)
        self.clock()[ev.comp] = max(self.clock()[ev.comp], 1)

    def loc_id(self, loc) -> int:
        i = self.loc_ids.get(loc)
        if i is None:
            i = self.loc_ids[loc] = len(self.locs)
            self.locs.append(loc)
        return i

    def who(self, comp: int) -> str:
        ev = self.events.get(comp)
        if ev is not None:
            return ev.kind
        return self.partition_names.get(comp, f"partition {comp}")

    def line(self, loc_id: int) -> str:
        loc = self.locs[int(loc_id)]
        return f"line {loc.line}" if loc is not None else "an unknown line"

    def event(self, kind: str, loc) -> Event:
        ev = Event(self.new_component(), kind, loc, self.clock().copy())
        self.events[ev.comp] = ev
        return ev

    # -- checked accesses ----------------------------------------------------------------------
    def check_read(self, view: View, op, what: str, as_comp: int | None = None) -> np.ndarray:
        buf, b = view.buf, view.byte_index()
        vc = self.clock()
        w = buf.writer[b]
        if (w < 0).any():
            i = int(np.argmax(w < 0))
            raise InterpreterError(
                f"{what} reads shared memory that nothing has written (the buffer allocated at "
                f"line {buf.loc.line if buf.loc else '?'}, byte {int(b[i])})", op.loc,
                notes=("store to it, copy into it and wait, or load only the part that was written",))
        bad = vc[w] < buf.wtime[b]
        if bad.any():
            i = int(np.argmax(bad))
            self._unordered(op, what, int(w[i]), int(buf.wloc[b[i]]), "write")
        comp = self.current if as_comp is None else as_comp
        rt = buf.rtime.get(comp)
        if rt is None:
            rt = buf.rtime[comp] = np.zeros(buf.data.size, np.int64)
            buf.rloc[comp] = np.zeros(buf.data.size, np.int64)
        rt[b] = vc[self.current]
        buf.rloc[comp][b] = self.loc_id(op.loc)
        return b

    def _unordered(self, op, what, comp, loc_id, kind):
        ev = self.events.get(comp)
        if ev is not None:
            fix = {"cp.async copy": "async_copy.wait_group(n) (after commit_group) first",
                   "TMA load": "mbarrier.wait(bar, phase) on the barrier it completes on first",
                   "async warpgroup_mma": "warpgroup_mma_wait(0, deps=[...]) first",
                   "TMA store": "tma.store_wait(0) first"}.get(ev.kind, "wait for it first")
            if kind == "write":
                msg = (f"{what} touches shared memory that the {ev.kind} at {self.line(loc_id)} writes "
                       "asynchronously, before waiting for it")
            else:
                msg = (f"{what} overwrites shared memory that the {ev.kind} at {self.line(loc_id)} may "
                       "still be reading (the buffer is reused too early)")
            raise InterpreterError(msg, op.loc, notes=(f"call {fix}",) + ((ev.note,) if ev.note else ()))
        me = self.partition_names.get(self.current, "this partition")
        other = self.partition_names.get(comp, f"partition {comp}")
        verb = "written" if kind == "write" else "read"
        raise InterpreterError(
            f"race: {what} in {me} and the shared memory {verb} by {other} at {self.line(loc_id)} "
            "are not ordered by any mbarrier", op.loc,
            notes=("make one partition arrive on an mbarrier after its access and the other wait on "
                   "that phase before its own",))

    def check_write(self, view: View, op, what: str) -> np.ndarray:
        buf, b = view.buf, view.byte_index()
        vc = self.clock()
        w = buf.writer[b]
        bad = (w >= 0) & (vc[np.maximum(w, 0)] < buf.wtime[b])
        if bad.any():
            i = int(np.argmax(bad))
            self._unordered(op, what, int(w[i]), int(buf.wloc[b[i]]), "write")
        for comp, rt in buf.rtime.items():
            if comp == self.current:
                continue
            bad = vc[comp] < rt[b]
            if bad.any():
                i = int(np.argmax(bad))
                self._unordered(op, what, comp, int(buf.rloc[comp][b[i]]), "read")
        a = buf.areader[b]
        bad = (a >= 0) & (vc[np.maximum(a, 0)] < 1)
        if bad.any():
            i = int(np.argmax(bad))
            self._unordered(op, what, int(a[i]), int(buf.aloc[b[i]]), "read")
        buf.areader[b] = -1
        return b

    def write(self, view: View, values, op, what: str, writer: Event | None = None,
              raw: bool = False) -> None:
        """Store ``values`` (logical shape of the view; already in storage form if ``raw``)
        through the view's offsets."""
        b = self.check_write(view, op, what)
        buf = view.buf
        values = np.asarray(values)
        storage = values.astype(view.dtype.np_storage) if raw else to_storage(values, view.dtype)
        storage = np.ascontiguousarray(storage).reshape(-1)
        buf.data[b] = storage.view(np.uint8)
        if writer is None:
            buf.writer[b] = self.current
            buf.wtime[b] = self.clock()[self.current]
            buf.wfence[b] = self.fences.get(self.current, 0)
        else:
            buf.writer[b] = writer.comp
            buf.wtime[b] = 1
        buf.wloc[b] = self.loc_id(op.loc)

    def read(self, view: View, op, what: str, reader: Event | None = None) -> np.ndarray:
        b = self.check_read(view, op, what)
        buf = view.buf
        if reader is not None:
            mine = buf.writer[b] == self.current
            stale = mine & (buf.wfence[b] >= self.fences.get(self.current, 0))
            if stale.any():
                i = int(np.argmax(stale))
                raise InterpreterError(
                    f"{what} reads, through the async proxy, shared memory this partition stored at "
                    f"{self.line(buf.wloc[b[i]])} with no fence_async_shared() in between", op.loc,
                    notes=("call fence_async_shared() after the stores and before the async op",))
            buf.areader[b] = reader.comp
            buf.aloc[b] = self.loc_id(op.loc)
        raw = buf.data[b].view(view.dtype.np_storage).reshape(view.offs.shape)
        return from_storage(raw.copy(), view.dtype)

    def fence(self) -> None:
        self.fences[self.current] = self.fences.get(self.current, 0) + 1

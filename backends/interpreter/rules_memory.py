"""Interpreter rules for shared memory, barriers, async copies and TMA (see sync.py)."""
from __future__ import annotations

import math

import numpy as np

from gluon_trace.errors import InterpreterError
from gluon_trace.ops_memory import element_offsets

from .interpreter import RULES, rule
from .memory import to_storage
from .barrier_check import BarrierCheck
from .sync import Buffer, MBarrier, SyncState, View


def state(p) -> SyncState:
    s = p.sync
    if s is None:
        s = p.sync = SyncState()
        s.barrier_check = BarrierCheck(p.barriers or frozenset())
    return s


class OutOfRange:
    """The view ``smem.index(i)`` gives for an i outside the buffer: an error only where
    something accesses memory through it. Gluon kernels compute such a view under a false
    predicate (``mbarrier.arrive(bars.index((i - 1) % n), pred=i >= 1)`` at i = 0: -1 % n is
    -1), which the GPU never dereferences."""
    __slots__ = ("i", "n", "loc")

    def __init__(self, i, n, loc):
        self.i, self.n, self.loc = i, n, loc

    def error(self, op) -> InterpreterError:
        where = f" (the view made at line {self.loc.line})" if self.loc and op.loc != self.loc else ""
        return InterpreterError(f"{op.name} uses smem.index({self.i}){where}, out of bounds for a buffer of "
                                f"{self.n} along its leading dim", op.loc,
                                notes=("wrap the ring index, e.g. (i % NUM_STAGES); a negative one with "
                                       "(i + NUM_STAGES - 1) % NUM_STAGES (% keeps the dividend's sign)",))


def _view(v, op, i=0) -> View:
    if isinstance(v, OutOfRange):
        raise v.error(op)
    if not isinstance(v, View):
        raise InterpreterError(f"{op.name}: operand {i} is not a shared-memory buffer", op.loc)
    return v


# -- allocation and views -----------------------------------------------------------------------

@rule("smem_alloc")
def _alloc(p, op, *init):
    t = op.results[0].type
    offs, elems = element_offsets(t.layout, t.shape, t.dtype.bits)
    nbytes = max(elems * t.dtype.bits // 8, 1)
    view = View(Buffer(nbytes, op.loc, f"buffer at line {op.loc.line if op.loc else '?'}"), offs, t.dtype)
    view.buf.alloc_op = op
    if p.cluster is not None:  # a peer's multicast or arrival finds this CTA's copy by the op
        p.cluster.buffers[p.rank][op] = view.buf
        st = state(p)
        view.buf.stamp = (st.current, int(st.clock()[st.current]))  # a peer must be ordered after it
    if init:
        s = state(p)
        s.barrier_check.access(s, view, op, op.operands[0].type.layout, True)
        s.write(view, init[0], op, "allocate_shared_memory(value=...)")
    return view


@rule("smem_index")
def _index(p, op, v, i):
    if isinstance(v, OutOfRange):
        return v
    v = _view(v, op)
    i = int(i)
    n = v.offs.shape[0]
    if not 0 <= i < n:
        return OutOfRange(i, n, op.loc)
    return View(v.buf, v.offs[i], v.dtype)


@rule("smem_slice")
def _slice(p, op, v):
    if isinstance(v, OutOfRange):
        return v
    v = _view(v, op)
    a = op.attrs
    idx = [slice(None)] * v.offs.ndim
    idx[a["dim"]] = slice(a["start"], a["start"] + a["length"])
    return View(v.buf, v.offs[tuple(idx)], v.dtype)


@rule("smem_permute")
def _permute(p, op, v):
    if isinstance(v, OutOfRange):
        return v
    v = _view(v, op)
    return View(v.buf, np.transpose(v.offs, op.attrs["order"]), v.dtype)


@rule("smem_reshape")
def _reshape(p, op, v):
    if isinstance(v, OutOfRange):
        return v
    v = _view(v, op)
    return View(v.buf, np.reshape(v.offs, op.attrs["shape"]), v.dtype)


@rule("smem_reinterpret")
def _reinterpret(p, op, v):
    if isinstance(v, OutOfRange):
        return v
    v = _view(v, op)
    t = op.results[0].type
    offs, elems = element_offsets(t.layout, t.shape, t.dtype.bits)
    base = int(v.offs.min()) * max(v.dtype.bits // 8, 1)
    size = max(t.dtype.bits // 8, 1)
    if base % size:
        raise InterpreterError("reinterpret of a view that does not start on an element boundary", op.loc)
    if base + elems * size > v.buf.data.size:
        raise InterpreterError("reinterpret reaches past the end of the allocation", op.loc)
    return View(v.buf, offs + base // size, t.dtype)


@rule("smem_load")
def _load(p, op, v):
    s, v = state(p), _view(v, op)
    s.barrier_check.access(s, v, op, op.attrs["layout"], False)
    return s.read(v, op, "smem.load()")


@rule("smem_store")
def _store(p, op, v, value):
    s, v = state(p), _view(v, op)
    s.barrier_check.access(s, v, op, op.operands[1].type.layout, True)
    s.write(v, np.broadcast_to(value, v.offs.shape), op, "smem.store()")


# -- barriers -----------------------------------------------------------------------------------

@rule("thread_barrier")
def _thread_barrier(p, op):
    s = state(p)
    s.barrier_check.barrier(s.current)


def _bar(p, op, v, need_init=True) -> MBarrier | None:
    v = _view(v, op)
    bar = state(p).bars.get(v.key())
    if need_init and (bar is None or not bar.valid):
        raise InterpreterError("this mbarrier is used before mbarrier.init (or after invalidate)", op.loc,
                               notes=(f"the barrier was allocated at line {v.buf.loc.line}" if v.buf.loc
                                      else "initialize it with mbarrier.init(bar, count=...)",))
    return bar


@rule("mbarrier_init")
def _mb_init(p, op, v):
    v = _view(v, op)
    old = state(p).bars.get(v.key())
    if old is not None and old.valid and old.pending != old.count:
        raise InterpreterError(f"mbarrier.init on a barrier with arrivals pending since the init at line "
                               f"{old.init_loc.line}", op.loc)
    s = state(p)
    bar = s.bars[v.key()] = MBarrier(op.attrs["count"], op.loc)
    if p.cluster is not None:
        bar.stamp = (s.current, int(s.clock()[s.current]))


@rule("mbarrier_invalidate")
def _mb_invalidate(p, op, v, *pred):
    if pred and not bool(pred[0]):
        return
    _bar(p, op, v).valid = False


def arrive(s: SyncState, bar: MBarrier, op, count: int, events=()) -> None:
    bar.arrive_clock = _merge(bar.arrive_clock, s.release())
    bar.events.extend(events)
    bar.pending -= count
    if bar.pending < 0:
        raise InterpreterError(f"more arrivals on this mbarrier than the count {bar.count} it was "
                               f"initialized with (line {bar.init_loc.line})", op.loc)
    complete_if_done(s, bar, op)
    if s.scheduler is not None:
        s.scheduler.yield_()


def _merge(a, b):
    from .sync import merge
    return merge(a, b)


def complete_if_done(s: SyncState, bar: MBarrier, op) -> None:
    if bar.pending:
        return
    if bar.tx < 0:
        where = ", ".join(f"line {l.line}" for l in bar.expect_locs) or "no mbarrier.expect"
        raise InterpreterError(f"{-bar.tx} more bytes arrived on this mbarrier than were expected "
                               f"({bar.expected} expected at {where}, {bar.arrived} arrived)", op.loc,
                               notes=("make mbarrier.expect's byte count the sum of the copies' "
                                      "block_type.nbytes",))
    if bar.tx:
        return
    clock = bar.arrive_clock
    for ev in bar.events:
        clock = _merge(clock, ev.clock)
        if clock.size <= ev.comp:
            clock = _merge(clock, np.zeros(ev.comp + 1, np.int64))
        clock[ev.comp] = max(clock[ev.comp], 1)
    bar.done_clock = clock
    bar.phase += 1
    bar.pending, bar.tx, bar.events = bar.count, 0, []
    bar.arrive_clock = np.zeros(1, np.int64)
    bar.expected = bar.arrived = 0
    bar.expect_locs = []
    bar.copy_locs = []
    if s.scheduler is not None:
        s.scheduler.changed()


@rule("mbarrier_expect")
def _mb_expect(p, op, v, *pred):
    if pred and not bool(pred[0]):
        return
    s, bar = state(p), _bar(p, op, v)
    n = op.attrs["bytes"]
    bar.tx += n
    bar.expected += n
    bar.expect_locs.append(op.loc)
    arrive(s, bar, op, 1)


@rule("mbarrier_arrive")
def _mb_arrive(p, op, v, *rest):
    if op.attrs.get("pred") and not bool(rest[0]):
        return
    if op.attrs.get("remote"):
        from .cluster import remote_arrive
        remote_arrive(p, op, v, rest[-1], op.attrs["count"])
        return
    arrive(state(p), _bar(p, op, v), op, op.attrs["count"])


def _describe_wait(bar: MBarrier, parity: int) -> str:
    missing = f"{bar.pending} of {bar.count} arrivals missing"
    if bar.tx > 0:
        missing += (f", {bar.tx} of the {bar.expected} bytes expected at "
                    + ", ".join(f"line {l.line}" for l in bar.expect_locs) + " not arrived")
    if bar.pending and bar.copy_locs:
        missing += (f"; the async_copy.mbarrier_arrive at line {bar.copy_locs[0].line} adds no arrival of its "
                    "own (increment_count=True: it only holds the phase until its copies land): follow it "
                    "with mbarrier.arrive, or pass increment_count=False to make it the arrival")
    return (f"phase parity {parity} of the mbarrier initialized at line {bar.init_loc.line} "
            f"({bar.phase} phases completed; {missing})")


@rule("mbarrier_wait")
def _mb_wait(p, op, v, phase, *rest):
    if op.attrs.get("pred") and not bool(rest[0]):
        return
    s, bar = state(p), _bar(p, op, v)
    parity = int(phase) & 1

    def ready() -> bool:
        return (bar.phase & 1) != parity

    if not ready():
        if s.scheduler is None:
            raise InterpreterError(
                f"deadlock: mbarrier.wait waits for {_describe_wait(bar, parity)}, and nothing else "
                "runs that could complete it", op.loc,
                notes=("check the phase (it flips every completed phase), the init count and the "
                       "expect byte count",))
        s.scheduler.block(ready, lambda: f"{op.loc}: mbarrier.wait for {_describe_wait(bar, parity)}")
    if bar.phase:
        s.acquire(bar.done_clock)
    if bar.inflight:  # the phase seen complete, and every one before it: their loads have landed
        seen = bar.phase - 1 if (bar.phase - 1) & 1 == parity else bar.phase - 2
        bar.inflight = [x for x in bar.inflight if x[0] > seen]


# -- Ampere async copies -------------------------------------------------------------------------

@rule("async_copy_load")
def _copy(p, op, v, ptr, *mask):
    s, v = state(p), _view(v, op)
    elem = v.dtype
    ptr = np.asarray(ptr)
    if mask:
        m = np.broadcast_to(mask[0], ptr.shape)
        data = np.zeros(ptr.shape, elem.np)
        if m.any():
            data[m] = p.mem.load(ptr[m], elem, op)
    else:
        data = p.mem.load(ptr, elem, op)
    ev = s.event("cp.async copy", op.loc)
    s.write(v, data, op, "async_copy.async_load", writer=ev)
    s.copy_uncommitted.setdefault(s.current, []).append(ev)


@rule("async_copy_commit_group")
def _commit(p, op):
    s = state(p)
    s.copy_groups.setdefault(s.current, []).append(s.copy_uncommitted.pop(s.current, []))


@rule("async_copy_wait_group")
def _wait_group(p, op):
    s = state(p)
    groups = s.copy_groups.get(s.current, [])
    while len(groups) > op.attrs["num_outstanding"]:
        for ev in groups.pop(0):
            s.observe(ev)


@rule("async_copy_mbarrier_arrive")
def _copy_arrive(p, op, v):
    s, bar = state(p), _bar(p, op, v)
    evs = list(s.copy_uncommitted.get(s.current, []))
    for g in s.copy_groups.get(s.current, []):
        evs += g
    if op.attrs["increment_count"]:
        bar.events.extend(evs)  # net zero on the pending count: the arrival happens on completion
        bar.copy_locs.append(op.loc)
        bar.arrive_clock = _merge(bar.arrive_clock, s.release())
        complete_if_done(s, bar, op)
    else:
        arrive(s, bar, op, 1, evs)


# -- TMA -----------------------------------------------------------------------------------------

def _box(desc, coords):
    """(index tuple into the global array, index tuple into the block) of the in-bounds part."""
    g, b = [], []
    for c, n, size in zip(coords, desc.shape, desc.block_shape):
        lo, hi = max(c, 0), min(c + size, n)
        if hi <= lo:
            return None
        g.append(slice(lo, hi))
        b.append(slice(lo - c, hi - c))
    return tuple(g), tuple(b)


def _store_row_ends(desc, arr, cut, coords, raw) -> None:
    """What the H100 does with a box that ends past a row's end: it writes the whole 16-byte
    piece holding the row's last element (the piece lies within the row's pitch, a multiple of
    16 bytes: the tensor's own memory or its padding). Modelled so CPU and GPU agree."""
    item = arr.itemsize
    w, c, size = desc.shape[-1], coords[-1], desc.block_shape[-1]
    per = 16 // item if item < 16 else 1
    edge = -(-w // per) * per
    stop = min(c + size, edge)
    if arr.ndim < 2 or stop <= w or arr.strides[-1] != item or arr.strides[-2] < edge * item:
        return
    wide = np.lib.stride_tricks.as_strided(arr, shape=arr.shape[:-1] + (edge,), strides=arr.strides)
    wide[cut[0][:-1] + (slice(w, stop),)] = raw[cut[1][:-1] + (slice(w - c, stop - c),)]


def global_array(p, desc, op):
    arr = p.tma_arrays.get(id(desc)) if p.tma_arrays else None
    if arr is None:
        raise InterpreterError("this TMA descriptor's tensor is not addressable by the interpreter", op.loc)
    return arr


@rule("tma_load")
def _tma_load(p, op, desc, *rest):
    n = op.operands[0].type.rank
    coords, bar_v, v = [int(c) for c in rest[:n]], rest[n], rest[n + 1]
    if op.attrs.get("pred") and not bool(rest[n + 2]):
        return
    s, v = state(p), _view(v, op)
    bar = _bar(p, op, bar_v)
    arr = global_array(p, desc, op)  # raw storage (bfloat16 as its bits)
    elem = v.dtype
    block = np.zeros(tuple(desc.block_shape), dtype=arr.dtype)
    if desc.padding == "nan":
        block[...] = to_storage(np.full(block.shape, np.nan, np.float32), elem)
    cut = _box(desc, coords)
    if cut is not None:
        block[cut[1]] = arr[cut[0]]
    ev = s.event("TMA load", op.loc)
    nbytes = math.prod(desc.block_shape) * elem.bits // 8
    mask = op.attrs.get("multicast", 0)
    if not mask:
        targets = [(v, bar)]
    else:  # the block lands in each CTA of the mask, and completes on each one's barrier
        from .cluster import note_incoming, peer_bar, peer_view
        n = 1 if p.cluster is None else p.cluster.n
        if mask >> n:
            raise InterpreterError(f"tma.async_load multicast mask {mask:#b} names CTAs outside the "
                                   f"cluster of {n}", op.loc)
        targets = []
        for r in range(n):
            if mask >> r & 1:
                pv = peer_view(p, v, r, op, "tma.async_load(multicast=...)")
                pb = bar if pv is v else peer_bar(p, peer_view(p, _view(bar_v, op), r, op,
                                                                "tma.async_load(multicast=...)"),
                                                  r, op, "tma.async_load(multicast=...)")
                targets.append((pv, pb))
                note_incoming(p, r, (ev.comp, 1), "tma.async_load(multicast=...)", op.loc)
    if bar.phase and bar.pending == bar.count and not bar.expected:
        # its bytes count towards a phase no expect announced: the phase before it completed
        # without it, typically because an expect counted fewer bytes than its copies
        ev.note = (f"its mbarrier's phase {bar.phase - 1} had already completed when this load was issued, "
                   f"so the load counts toward phase {bar.phase}: did the expect of phase {bar.phase - 1} count "
                   "fewer bytes than its copies? (expect the sum of their block_type.nbytes)")
    for tv, tb in targets:
        tb.inflight.append((tb.phase, op.loc))
        s.write(tv, block, op, "tma.async_load", writer=ev, raw=True)
        tb.tx -= nbytes
        tb.arrived += nbytes
        tb.events.append(ev)
        complete_if_done(s, tb, op)


@rule("tma_store")
def _tma_store(p, op, desc, *rest):
    n = op.operands[0].type.rank
    coords, v = [int(c) for c in rest[:n]], _view(rest[n], op)
    s = state(p)
    ev = s.event("TMA store", op.loc)
    data = s.read(v, op, "tma.async_store", reader=ev)
    why = desc.store_error() if hasattr(desc, "store_error") else None
    if why:  # what the GPU would do (write past the row) is refused, identically on every backend
        raise InterpreterError(why, op.loc)
    arr = global_array(p, desc, op)
    if not arr.flags.writeable:
        raise InterpreterError("tma.async_store into a read-only tensor", op.loc)
    cut = _box(desc, coords)
    if cut is not None:
        raw = to_storage(np.asarray(data), v.dtype)
        arr[cut[0]] = raw[cut[1]]
        _store_row_ends(desc, arr, cut, coords, raw)
    s.store_groups.setdefault(s.current, []).append(ev)


@rule("tma_store_wait")
def _store_wait(p, op):
    s = state(p)
    groups = s.store_groups.get(s.current, [])
    while len(groups) > op.attrs["pendings"]:
        s.observe(groups.pop(0))


def check_stores_retired(p) -> None:
    """At a CTA's exit: every TMA store waited for, every TMA load seen complete by a wait. The
    GPU frees the CTA's shared memory when it exits, while a store may still be reading it
    (ptxsim refuses such a kernel too) or a load still writing it (into the next CTA's)."""
    s = p.sync
    if s is None:
        return
    for bar in s.bars.values():
        if bar.inflight:
            ph, loc = bar.inflight[0]
            raise InterpreterError(
                f"the kernel ends with the TMA load at line {loc.line} possibly in flight: no mbarrier.wait saw "
                f"the phase it completes (phase {ph} of the mbarrier initialized at line {bar.init_loc.line}), "
                "so it may still be writing shared memory when the program exits", loc,
                notes=("issue only the loads the kernel consumes (a producer running more iterations than its "
                       "consumer?), or wait on their phase before the end",))
    for groups in s.store_groups.values():
        if groups:
            raise InterpreterError(
                f"the kernel ends with the TMA store at line {groups[0].loc.line} in flight: it may still be "
                "reading shared memory when the program exits and its shared memory is reused", groups[0].loc,
                notes=("call tma.store_wait(0) after the last tma.async_store (in the partition that issued it)",))


@rule("fence_async_shared")
def _fence(p, op):
    state(p).fence()


@rule("tensordesc_dim")
def _tensordesc_dim(p, op, desc):
    return np.int32(desc.shape[op.attrs["dim"]])


assert all(n in RULES for n in ("smem_alloc", "tma_load"))

"""Interpreter rules for the MMA ops and warp specialization.

MMAs compute from correctly rounded inputs (float32 operands of mma_v2/wgmma as tf32:
round to nearest, ties away from zero, as cvt.rna.tf32.f32) with exact products, summed in
float64 and rounded once to the accumulator's type; integer MMAs wrap to int32. ``dot_fma``
is a chain of FMAs along K in order, each rounded to the accumulator's type.

An ``is_async`` wgmma's result is a :class:`Pending` value until a ``warpgroup_mma_wait``
retires its group; any other op that reads it is an error naming both lines (it may be
passed on as the next wgmma's accumulator, or carried by a loop, as on the hardware).
"""
from __future__ import annotations

import threading

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace.errors import InterpreterError
from gluon_trace.ops_mma import wgmma_operands

from .interpreter import fix, fma, rule, run_block
from .rules_memory import OutOfRange, state
from .sync import View, merge


class Pending:
    """The value of an async wgmma not yet retired by warpgroup_mma_wait."""
    __slots__ = ("value", "event", "loc")

    def __init__(self, value, event, loc):
        self.value, self.event, self.loc = value, event, loc


# ops that may hold a Pending without reading it
PASS_PENDING = frozenset({"wgmma", "wgmma_wait", "for", "if", "yield", "warp_specialize"})


def pending_error(op, pend: Pending) -> InterpreterError:
    return InterpreterError(
        f"{op.name} reads the result of the async warpgroup_mma at line {pend.loc.line} before a "
        "warpgroup_mma_wait retires it", op.loc,
        notes=("call warpgroup_mma_wait(0, deps=[acc]) and use the value it returns",))


def _tf32(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    finite = np.isfinite(x)
    rounded = ((bits + 0x1000) & ~np.uint64(0x1FFF)).astype(np.uint32).view(np.float32)
    return np.where(finite, rounded, x)


def _inputs(x, op, which, dtype: dt.dtype, precision: str):
    if isinstance(x, Pending):
        raise pending_error(op, x)
    x = np.asarray(x)
    if dtype.name == "float32" and precision == "tf32":
        x = _tf32(x)
    return x


def _matmul(a, b, acc, acc_dtype: dt.dtype, use_acc=True):
    if acc_dtype.is_int:
        out = a.astype(np.int64) @ b.astype(np.int64)
        if use_acc:
            out = out + np.asarray(acc).astype(np.int64)
        return out.astype(np.int32)  # wraps
    out = a.astype(np.float64) @ b.astype(np.float64)
    if use_acc:
        out = out + np.asarray(acc, np.float64)
    return fix(out, acc_dtype)


def _mma(p, op, a, b, acc):
    t = op.operands[0].type.dtype
    prec = op.attrs.get("input_precision") or "tf32"
    a, b = _inputs(a, op, "A", t, prec), _inputs(b, op, "B", t, prec)
    if isinstance(acc, Pending):
        raise pending_error(op, acc)
    return _matmul(a, b, acc, op.results[0].type.dtype)


rule("mma_v2", "mfma", "wmma")(_mma)


@rule("dot_fma")
def _dot_fma(p, op, a, b, acc):
    t = op.results[0].type.dtype
    out = np.asarray(acc)
    a, b = np.asarray(a), np.asarray(b)
    if t.is_int:  # products and sums wrap in the accumulator's type, in any order
        with np.errstate(all="ignore"):
            return fix(a.astype(np.int64) @ b.astype(np.int64) + out.astype(np.int64), t)
    for k in range(a.shape[1]):  # each step rounded once, as fma.rn / v_fma round
        out = fma(a[:, k, None], b[None, k], out, t)
    return out


@rule("wgmma")
def _wgmma(p, op, *operands):
    s = state(p)
    terms, b, accs, use_acc = wgmma_operands(operands, op.attrs)
    is_async = op.attrs.get("is_async")
    t = op.operands[1].type.dtype
    prec = op.attrs.get("precision") or "tf32"
    ev = s.event("async warpgroup_mma" if is_async else "warpgroup_mma", op.loc)
    for x in (*terms, b):
        if isinstance(x, OutOfRange):
            raise x.error(op)
    for i, x in enumerate(terms):
        if isinstance(x, View):
            x = s.read(x, op, "warpgroup_mma (operand A)", reader=ev)
        terms[i] = _inputs(x, op, "A", t, prec)
    if not isinstance(b, View):
        raise InterpreterError("warpgroup_mma: B is not a shared-memory buffer", op.loc)
    b = _inputs(s.read(b, op, "warpgroup_mma (operand B)", reader=ev), op, "B", t, prec)
    if op.attrs.get("k_pieces") is not None:  # one product over K = the pieces' K, rounded once
        a = np.concatenate(terms, axis=1)
        b = np.concatenate(list(b), axis=-2)
    else:
        a = terms[0]
    pieces = op.attrs.get("pieces") is not None   # b [P, K, n]: accumulator i takes b[i]
    outs = []
    for i, acc in enumerate(accs):
        if isinstance(acc, Pending):
            acc = acc.value
        outs.append(_matmul(a, b[i] if pieces else b, acc, op.results[i].type.dtype, use_acc=bool(use_acc)))
    if not is_async:
        s.observe(ev)  # a synchronous wgmma has finished reading when it returns
        return tuple(outs) if pieces else outs[0]
    s.mma_groups.setdefault(s.current, []).append(ev)
    pend = [Pending(o, ev, op.loc) for o in outs]
    return tuple(pend) if pieces else pend[0]


@rule("wgmma_wait")
def _wgmma_wait(p, op, *deps):
    s = state(p)
    groups = s.mma_groups.get(s.current, [])
    while len(groups) > op.attrs["num_outstanding"]:
        s.observe(groups.pop(0))
    vc = s.clock()
    out = []
    for d in deps:
        if isinstance(d, Pending) and vc[d.event.comp] >= 1:
            d = d.value
        out.append(d)
    return tuple(out)


# -- warp specialization -------------------------------------------------------------------------

class _Abort(BaseException):
    """Unwinds a partition's thread when another one failed or everything deadlocked."""


class Scheduler:
    """Runs partitions one at a time, each until it blocks on an mbarrier wait or ends; then
    the next one that can go on. When none can, every blocked wait is reported."""

    def __init__(self, sync, comps: list[int], names: list[str]):
        self.sync, self.comps, self.names = sync, comps, names
        self.cv = threading.Condition()
        self.turn = 0
        self.status = ["ready"] * len(comps)
        self.waits: list = [None] * len(comps)
        self.error: BaseException | None = None
        self.abort = False
        self.me = threading.local()

    def run(self, bodies) -> None:
        first = [threading.Thread(target=self._body, args=(i, f), daemon=True) for i, f in enumerate(bodies)]
        self.threads = list(first)  # spawn() adds to it while these run
        for t in first:
            t.start()
        with self.cv:
            while not self.abort and any(s != "done" for s in self.status):
                self.cv.wait()
        for t in list(self.threads):
            t.join()
        if self.error is not None:
            raise self.error

    def spawn(self, bodies, comps: list[int], names: list[str]) -> list[int]:
        """Add tasks from a running one (a CTA of a cluster forking its warp partitions); they
        start when the caller blocks or yields. Returns their indices for :meth:`join`."""
        with self.cv:
            base = len(self.status)
            self.comps.extend(comps)
            self.names.extend(names)
            self.status.extend(["ready"] * len(bodies))
            self.waits.extend([None] * len(bodies))
            ids = list(range(base, base + len(bodies)))
            threads = [threading.Thread(target=self._body, args=(i, f), daemon=True) for i, f in zip(ids, bodies)]
            self.threads.extend(threads)
        for t in threads:
            t.start()
        return ids

    def join(self, ids: list[int], describe) -> None:
        """Block the calling task until the tasks ``ids`` have ended."""
        if not all(self.status[j] == "done" for j in ids):
            self.block(lambda: all(self.status[j] == "done" for j in ids), describe)

    def _body(self, i, fn) -> None:
        self.me.index = i
        with self.cv:
            while self.turn != i and not self.abort:
                self.cv.wait()
            if self.abort:
                return
        self.sync.current = self.comps[i]
        try:
            with np.errstate(all="ignore"):
                fn()
        except _Abort:
            return
        except BaseException as e:  # noqa: BLE001  (handed to the launching thread)
            with self.cv:
                if self.error is None:
                    self.error = e
                self.abort = True
                self.cv.notify_all()
            return
        with self.cv:
            self.status[i] = "done"
            self._next(i)

    def changed(self) -> None:
        """A barrier phase completed: blocked partitions are re-checked at the next switch."""

    def _can_run(self, j) -> bool:
        st = self.status[j]
        return st == "ready" or (st == "blocked" and self.waits[j][0]())

    def yield_(self) -> None:
        """Let the next partition that can run go first (after each arrive: interleaving at
        release points exposes races a run-to-block order would hide)."""
        i = self.me.index
        with self.cv:
            n = len(self.status)
            for k in range(1, n):
                j = (i + k) % n
                if self._can_run(j):
                    self.turn = j
                    self.cv.notify_all()
                    break
            else:
                return
            while self.turn != i and not self.abort:
                self.cv.wait()
            if self.abort:
                raise _Abort()
        self.sync.current = self.comps[i]

    def block(self, ready, describe) -> None:
        i = self.me.index
        with self.cv:
            self.status[i] = "blocked"
            self.waits[i] = (ready, describe)
            self._next(i)
            while self.turn != i and not self.abort:
                self.cv.wait()
            if self.abort:
                raise _Abort()
            self.status[i] = "ready"
        self.sync.current = self.comps[i]

    def _next(self, i) -> None:
        n = len(self.status)
        for k in range(1, n + 1):
            j = (i + k) % n
            if self._can_run(j):
                self.turn = j
                self.cv.notify_all()
                return
        if all(s == "done" for s in self.status):
            self.turn = -1
            self.cv.notify_all()
            return
        lines = [f"  {self.names[j]}: {self.waits[j][1]()}" for j in range(n) if self.status[j] == "blocked"]
        first = next(j for j in range(n) if self.status[j] == "blocked")
        self.error = InterpreterError(
            "deadlock: every partition that has not finished waits on an mbarrier phase that can no "
            "longer complete:\n" + "\n".join(lines), None,
            notes=(f"first blocked: {self.names[first]}",
                   "check each wait's phase, the init counts and the expect byte counts"))
        self.abort = True
        self.cv.notify_all()


def _fork_clocks(s, names: list[str]) -> list[int]:
    """New components for worker partitions, their clocks forked from the running one's."""
    fork = s.clock().copy()
    comps = []
    for name in names:
        c = s.new_component()
        comps.append(c)
        s.partition_names[c] = name
        s.partition_comps.add(c)
        vc = merge(fork, np.zeros(s.ncomp, np.int64))
        vc[c] = 1
        s.clocks[c] = vc
        s.fences[c] = 0
    return comps


def _warp_specialize_in_cluster(p, op, s):
    """In a cluster the CTAs already run as tasks of one scheduler: the workers join it as new
    tasks, the default partition runs on in this CTA's task, which then waits for them."""
    parent = s.current
    me = s.partition_names.get(parent, "this CTA")
    names = [f"{me}, worker partition {k}" for k in range(1, len(op.regions))]
    comps = _fork_clocks(s, names)

    def body(k):
        return lambda: run_block(p, op.regions[k], [])

    sched = s.scheduler
    ids = sched.spawn([body(k) for k in range(1, len(op.regions))], comps, names)
    results = run_block(p, op.regions[0], [])
    sched.join(ids, lambda: f"{op.loc}: the end of warp_specialize, waiting for its worker partitions")
    joined = s.clock()
    for c in comps:
        joined = merge(joined, s.clocks[c])
    s.clocks[parent] = joined
    return tuple(results)


@rule("warp_specialize")
def _warp_specialize(p, op):
    s = state(p)
    if s.current in s.partition_comps or (s.scheduler is not None and p.cluster is None):
        raise InterpreterError("warp_specialize inside a partition", op.loc)
    if p.cluster is not None:
        return _warp_specialize_in_cluster(p, op, s)
    parent = s.current
    names = ["the default partition"] + [f"worker partition {k}" for k in range(1, len(op.regions))]
    comps = [parent] + _fork_clocks(s, names[1:])
    results: list = []

    def body(k):
        def run():
            out = run_block(p, op.regions[k], [])
            if k == 0:
                results.extend(out)
        return run

    sched = Scheduler(s, comps, names)
    s.scheduler = sched
    try:
        sched.run([body(k) for k in range(len(op.regions))])
    finally:
        s.scheduler = None
        s.current = parent
    joined = s.clock()
    for c in comps[1:]:
        joined = merge(joined, s.clocks[c])
    s.clocks[parent] = joined
    return tuple(results)

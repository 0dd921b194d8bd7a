"""Side effects inside a combine function on NVIDIA.

The interpreter calls a reduce's combine once per pair of its tree (n - 1 calls per output).
A store inside runs on every thread that combines a pair (threads holding copies store the
same value again); it used to be emitted as one thread's scalar store, which lost most calls
(6-7 of 63 on a 64-element reduce). Each case logs every call at an address no other call
writes (the combine keeps its left operand, so each call's right operand is the first index
of a distinct subtree) and compares the log with the interpreter's on the PTX simulator. A
store inside a scan's combine, and an atomic or print inside any combine, are not part of the
language: refused where they are written, at trace time, so the interpreter refuses them too.
A combine that loads still compiles."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from gluon_trace.errors import TraceError  # noqa: E402


@gt.jit
def logged_reduce(x, log, out, M: gl.constexpr, N: gl.constexpr, L: gl.constexpr, AXIS: gl.constexpr):
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    v = gl.load(x + gl.expand_dims(r, 1) * N + gl.expand_dims(c, 0))

    def first(a, b):
        gl.store(log + b, a * 1000 + b)
        return a
    o = gl.arange(0, M if AXIS == 1 else N, layout=gl.SliceLayout(AXIS, L))
    gl.store(out + o, gl.reduce(v, AXIS, first))


CASES = [  # layout, M, N, axis, warps
    (gl.BlockedLayout([1, 2], [2, 16], [1, 1], [1, 0]), 2, 32, 1, 1),     # registers + lanes
    (gl.BlockedLayout([2, 1], [8, 4], [2, 1], [1, 0]), 32, 4, 0, 2),      # + warps
    (gl.BlockedLayout([1, 1], [4, 8], [1, 4], [1, 0]), 4, 32, 1, 4),
    (gl.BlockedLayout([1, 1], [8, 4], [1, 1], [1, 0]), 4, 4, 1, 1),       # broadcast lanes
    (gl.BlockedLayout([1, 4], [16, 2], [2, 2], [0, 1]), 8, 16, 0, 4),
    (gl.DistributedLinearLayout([[0, 4]], [[0, 1], [1, 0], [0, 2], [2, 0], [0, 9]], [[4, 0]], [],
                                [8, 16]), 8, 16, 1, 2),                  # a mixed lane basis
    (gl.BlockedLayout([2, 2], [4, 8], [1, 2], [1, 0]), 16, 32, 1, 2),
]


@pytest.mark.parametrize("L, M, N, axis, warps", CASES)
def test_a_store_in_a_reduce_combine_runs_once_per_pair(L, M, N, axis, warps):
    tr = logged_reduce.trace(gl.pointer(gl.int32), gl.pointer(gl.int32), gl.pointer(gl.int32),
                             M=M, N=N, L=L, AXIS=axis, num_warps=warps, target="sm_90")
    x = np.arange(M * N, dtype=np.int32)
    text, _, smem = emit(tr.graph, "sm_90")
    logs, outs = [], []
    for run in ("interpreter", "ptxsim"):
        log, out = np.full(M * N, -7, np.int32), np.full(max(M, N), -9, np.int32)
        if run == "interpreter":
            get("interpreter").run(tr.graph, (1, 1, 1), [x, log, out])
        else:
            ptxsim.run(text, (1, 1, 1), [x, log, out], smem)
        logs.append(log)
        outs.append(out)
    calls = (M if axis == 1 else N) * ((N if axis == 1 else M) - 1)
    assert (logs[0] != -7).sum() == calls  # the premise: one address per call
    np.testing.assert_array_equal(logs[1], logs[0])
    np.testing.assert_array_equal(outs[1], outs[0])


@gt.jit
def combine_with(x, log, out, KIND: gl.constexpr):
    offs = gl.arange(0, 64, layout=gl.BlockedLayout([2], [32], [1], [0]))

    def comb(a, b):
        if KIND == "atomic":
            gl.atomic_add(log + b, 1)
        elif KIND == "print":
            gl.device_print("pair ", a, b)
        elif KIND == "store" or KIND == "scan_store":
            gl.store(log + b, a)
        else:
            a = a + gl.load(log + b) * 0
        return gl.minimum(a, b)

    v = gl.load(x + offs)
    if KIND == "atomic" or KIND == "store":  # reduces; the other kinds scan
        gl.store(out, gl.reduce(v, 0, comb))
    else:
        gl.store(out + offs, gl.associative_scan(v, 0, comb))


def _ptx(kind):
    p = gl.pointer(gl.int32)
    return combine_with.trace(p, p, p, KIND=kind, num_warps=1, target="sm_90").ptx("sm_90")


def test_the_interpreter_calls_a_reduce_combine_once_per_pair():
    """The tree's pairs (2i, 2i+1), then (4i, 4i+2), ...: with a combine that keeps its left
    operand, the call whose right operand is index b has left operand b - lowbit(b)."""
    p = gl.pointer(gl.int32)
    tr = combine_with.trace(p, p, p, KIND="store", num_warps=1, target="sm_90")
    x = np.arange(64, dtype=np.int32)
    log, out = np.full(64, -7, np.int32), np.full(64, -9, np.int32)
    get("interpreter").run(tr.graph, (1, 1, 1), [x, log, out])
    b = np.arange(1, 64)
    assert out[0] == 0 and log[0] == -7 and (log[1:] == b - (b & -b)).all()


@pytest.mark.parametrize("kind, op, where", [("atomic", "atomic_rmw", "reduce"), ("print", "print", "scan"),
                                             ("scan_store", "store", "scan")])
def test_other_side_effects_in_a_combine_are_refused_where_written(kind, op, where):
    """At trace time, for every backend and the interpreter alike, naming the line in the combine."""
    p = gl.pointer(gl.int32)
    with pytest.raises(TraceError) as e:
        combine_with.trace(p, p, p, KIND=kind, num_warps=1, target="sm_90")
    msg = str(e.value)
    assert f"`{op}` inside a {where}'s combine function" in msg and "store them after it" in msg
    assert "test_combine_side_effects.py" in msg


def test_a_combine_that_loads_still_compiles():
    assert "ld.global" in _ptx("load")

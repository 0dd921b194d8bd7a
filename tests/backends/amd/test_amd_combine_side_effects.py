"""Side effects inside a combine function on AMD.

A store inside a reduce's combine runs once per pair the interpreter combines (n - 1 calls per
output, on its tree's pairs); lanes holding copies of a pair store the same value again. Each
case below logs every call at an address no other call writes (the combine keeps its left
operand, so each call's right operand is the first index of a distinct subtree) and compares
the log with the interpreter's on the simulator: registers, lanes, warps, broadcast lanes and
a linear layout that goes through the LDS fallback. A store inside a scan's combine, and an
atomic or print inside any combine, are not part of the language (refused at trace time where
they are written, the interpreter included): the backends' scans call the combine on other
pairs than the interpreter's, and lane copies would repeat an atomic or print."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import amdsim  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402
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


CASES = [  # target, layout, M, N, axis, warps
    ("gfx942", gl.BlockedLayout([1, 2], [2, 32], [1, 1], [1, 0]), 2, 64, 1, 1),       # regs + lanes
    ("gfx942", gl.BlockedLayout([2, 1], [8, 8], [2, 1], [1, 0]), 32, 8, 0, 2),        # + warps (LDS)
    ("gfx942", gl.BlockedLayout([1, 1], [8, 8], [1, 4], [1, 0]), 8, 32, 1, 4),
    ("gfx942", gl.BlockedLayout([1, 1], [16, 4], [1, 1], [1, 0]), 4, 4, 1, 1),        # broadcast lanes
    ("gfx942", gl.BlockedLayout([1, 4], [32, 2], [2, 2], [0, 1]), 8, 16, 0, 4),
    ("gfx942", gl.DistributedLinearLayout([[0, 4]], [[0, 1], [1, 0], [0, 2], [2, 0], [0, 8], [4, 0]],
                                          [[0, 3]], [], [8, 16]), 8, 16, 1, 2),      # LDS fallback
    ("gfx1100", gl.BlockedLayout([1, 2], [4, 8], [2, 1], [1, 0]), 8, 16, 1, 2),
    ("gfx90a", gl.BlockedLayout([2, 2], [8, 8], [1, 2], [1, 0]), 16, 32, 1, 2),
]


@pytest.mark.usefixtures("amd_toolchain")
@pytest.mark.parametrize("target, L, M, N, axis, warps", CASES)
def test_a_store_in_a_reduce_combine_runs_once_per_pair(target, L, M, N, axis, warps):
    tr = logged_reduce.trace(gl.pointer(gl.int32), gl.pointer(gl.int32), gl.pointer(gl.int32),
                             M=M, N=N, L=L, AXIS=axis, num_warps=warps, target=target)
    x = np.arange(M * N, dtype=np.int32)
    logs, outs = [], []
    for run in ("interpreter", "simulator"):
        log, out = np.full(M * N, -7, np.int32), np.full(max(M, N), -9, np.int32)
        if run == "interpreter":
            get("interpreter").run(tr.graph, (1, 1, 1), [x, log, out])
        else:
            amdsim.simulate(tr, target, (1,), [x, log, out])
        logs.append(log)
        outs.append(out)
    calls = (M if axis == 1 else N) * ((N if axis == 1 else M) - 1)
    assert (logs[0] != -7).sum() == calls  # the premise: one address per call
    np.testing.assert_array_equal(logs[1], logs[0])
    np.testing.assert_array_equal(outs[1], outs[0])


@gt.jit
def combine_with(x, log, out, KIND: gl.constexpr, W: gl.constexpr):
    offs = gl.arange(0, 2 * W, layout=gl.BlockedLayout([2], [W], [1], [0]))

    def comb(a, b):
        if KIND == "atomic":
            gl.atomic_add(log + b, 1)
        elif KIND == "print":
            gl.device_print("pair ", a, b)
        elif KIND == "scan_store":
            gl.store(log + b, a)
        else:
            a = a + gl.load(log + b) * 0
        return gl.minimum(a, b)

    v = gl.load(x + offs)
    if KIND == "atomic":
        gl.store(out, gl.reduce(v, 0, comb))
    else:
        gl.store(out + offs, gl.associative_scan(v, 0, comb))


def _amdgcn(kind, target):
    w = 32 if target == "gfx1100" else 64
    p = gl.pointer(gl.int32)
    return combine_with.trace(p, p, p, KIND=kind, W=w, num_warps=1, target=target).amdgcn(target)


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
@pytest.mark.parametrize("kind, op, where", [("atomic", "atomic_rmw", "reduce"), ("print", "print", "scan"),
                                             ("scan_store", "store", "scan")])
def test_other_side_effects_in_a_combine_are_refused_where_written(kind, op, where, target):
    with pytest.raises(TraceError) as e:
        _amdgcn(kind, target)
    msg = str(e.value)
    assert f"`{op}` inside a {where}'s combine function" in msg and "store them after it" in msg
    assert "test_amd_combine_side_effects.py" in msg


def test_a_scan_combine_that_loads_still_compiles():
    assert "global_load" in _amdgcn("load", "gfx942")

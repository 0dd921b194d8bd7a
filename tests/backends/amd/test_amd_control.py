"""Loops and branches (backends/amd/control.py) on the AMDGCN simulator against numpy and the
interpreter. The emitter keeps ``x + c`` apart until an operand needs it in a register; the
copy of a yielded value into the loop's or branch's home register materializes it, and that
register is only computed on the path that ran (fuzz seed 710047, "long" preset: both arms
of an if yielding ``v + INT_MIN`` stored the address register on the else path)."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

import amdsim

pytestmark = pytest.mark.usefixtures("amd_toolchain")
TARGETS = [("gfx90a", 64), ("gfx942", 64), ("gfx1100", 32)]
POISON = 0x5A5A5A5A


def _layout(lanes):
    return gl.BlockedLayout([2], [lanes], [2], [0])


def make_branch(lanes):
    L = _layout(lanes)
    n = 4 * lanes

    @gt.jit
    def same_offset_in_both_arms(inp, out, flag):
        o = gl.arange(0, n, layout=L)
        v = gl.load(inp + o)
        with gl.if_(flag > 0):
            v = (v - -2147483648).to(gl.int32)
        with gl.else_():
            v = (v + -2147483648).to(gl.int32)
        gl.store(out + o, v)
    return same_offset_in_both_arms


def make_loop(lanes):
    L = _layout(lanes)
    n = 4 * lanes

    @gt.jit
    def offset_yielded_then_reused(inp, out, out2, n_iter):
        o = gl.arange(0, n, layout=L)
        acc = gl.load(inp + o)
        for i in gl.range(0, n_iter):
            acc = acc + 5
        gl.store(out + o, acc)
        gl.store(out2 + o, acc + 5)   # the same ``home + 5`` the body copied in
    return offset_yielded_then_reused


def _wrap32(x):
    return ((np.asarray(x, np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


def _run(kernel, target, args, sig):
    ref = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    kernel[(1,)](*ref, num_warps=2, backend="interpreter", target=target)
    tk = kernel.trace(*sig, num_warps=2, target=target)
    with np.errstate(all="ignore"):
        amdsim.simulate(tk, target, (1,), args)
    return ref


@pytest.mark.parametrize("target, lanes", TARGETS)
@pytest.mark.parametrize("flag", [0, 1])
def test_branch_arms_yielding_the_same_offset(target, lanes, flag):
    n = 4 * lanes
    x = np.random.default_rng(flag).integers(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)
    args = [x, np.full(n, POISON, np.int32), flag]
    ref = _run(make_branch(lanes), target, args,
               (gl.pointer(gl.int32), gl.pointer(gl.int32), gl.int32))
    want = _wrap32(x.astype(np.int64) + 2 ** 31)
    np.testing.assert_array_equal(ref[1], want)
    np.testing.assert_array_equal(args[1], want, err_msg=f"{target} flag={flag}")


@pytest.mark.parametrize("target, lanes", TARGETS)
@pytest.mark.parametrize("n_iter", [0, 1, 3])
def test_loop_offset_reused_after_the_loop(target, lanes, n_iter):
    n = 4 * lanes
    x = np.random.default_rng(10 + n_iter).integers(-1000, 1000, n).astype(np.int32)
    args = [x, np.full(n, POISON, np.int32), np.full(n, POISON, np.int32), n_iter]
    ref = _run(make_loop(lanes), target, args,
               (gl.pointer(gl.int32), gl.pointer(gl.int32), gl.pointer(gl.int32), gl.int32))
    for k, extra in ((1, 0), (2, 5)):
        want = x + 5 * n_iter + extra
        np.testing.assert_array_equal(ref[k], want)
        np.testing.assert_array_equal(args[k], want, err_msg=f"{target} n_iter={n_iter} out{k}")

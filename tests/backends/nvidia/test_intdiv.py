"""``//`` and ``%`` by constants as multiply-high and shifts (backends/nvidia/intdiv.py): the
magic numbers against Python's integers, and the emitted code on the PTX simulator against
the interpreter, edge values (INT_MIN, -1, 0, the extremes) and fresh random ones."""
import os
import random
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backend import get

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia import intdiv  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

DIVISORS = [2, 3, 4, 5, 6, 7, 8, 10, 12, 25, 64, 100, 641, 1000, 4096, 12345, 2**30 + 1, 2**31 - 1]


def _wrap(x):
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >> 31 else x


def _trunc_div(n, d):
    q = abs(n) // abs(d)
    return q if (n >= 0) == (d > 0) else -q


def _signed_by_magic(n, d):
    m, s = intdiv.magic_signed(d)
    q = (n * m) >> 32
    if d > 0 and m < 0:
        q = _wrap(q + n)
    elif d < 0 and m > 0:
        q = _wrap(q - n)
    q >>= s
    return _wrap(q + ((q & 0xFFFFFFFF) >> 31))


def _unsigned_by_magic(n, d):
    m, add, s = intdiv.magic_unsigned(d)
    q = (n * m) >> 32
    if not add:
        return q >> s
    return ((((n - q) & 0xFFFFFFFF) >> 1) + q & 0xFFFFFFFF) >> (s - 1)


def test_magic_numbers_divide_exactly():
    rng = random.Random(7)
    for d in DIVISORS + [-x for x in DIVISORS]:
        ns = [0, 1, -1, 2**31 - 1, -2**31, -2**31 + 1, abs(d), -abs(d), abs(d) - 1]
        for n in ns + [rng.randint(-2**31, 2**31 - 1) for _ in range(2000)]:
            assert _signed_by_magic(n, d) == _wrap(_trunc_div(n, d)), (n, d)
    for d in DIVISORS + [2**32 - 1, 2**31 + 5, 3_000_000_000]:
        for n in [0, 1, 2**32 - 1, 2**31, 2**31 - 1] + [rng.randint(0, 2**32 - 1) for _ in range(2000)]:
            assert _unsigned_by_magic(n, d) == n // d, (n, d)


L = gl.BlockedLayout([2], [32], [4], [0])


@gt.jit
def div_const(x_ptr, q_ptr, r_ptr, D: gl.constexpr):
    offs = gl.arange(0, 256, layout=L)
    x = gl.load(x_ptr + offs)
    gl.store(q_ptr + offs, x // D)
    gl.store(r_ptr + offs, x % D)


@pytest.mark.parametrize("np_t, gl_t", [(np.int32, gl.int32), (np.uint32, gl.uint32), (np.int8, gl.int8),
                                        (np.uint16, gl.uint16)])
@pytest.mark.parametrize("d", [1, -1, 2, -4, 3, 7, -10, 64, 100, -641, 127])
def test_division_by_constants_matches_the_interpreter(np_t, gl_t, d):
    info = np.iinfo(np_t)
    if info.min == 0 and d < 0:
        d = int(np.array(d).astype(np_t))  # an unsigned type holds a negative constant wrapped
    d = int(np.clip(d, info.min, info.max))  # (a constant the type cannot hold is refused at trace)
    rng = np.random.default_rng(abs(d) * 31 + info.bits)
    x = rng.integers(info.min, info.max, 256, dtype=np_t, endpoint=True)
    x[:6] = [info.min, info.max, 0, 1, info.min + 1, info.max - 1]
    if info.min < 0:
        x[6:8] = [-1, -2]
    g = div_const.trace(gl.pointer(gl_t), gl.pointer(gl_t), gl.pointer(gl_t), D=d, target="sm_90").graph
    text, _, smem = emit(g, "sm_90")
    body = text[text.index("{"):]
    assert "\tdiv." not in body and "\trem." not in body  # strength-reduced: not ptxas's generic sequence
    outs = []
    for runner in (lambda a: get("interpreter").run(g, (1, 1, 1), a), lambda a: ptxsim.run(text, (1, 1, 1), a, smem)):
        args = [x.copy(), np.full(256, 0x5A, np_t), np.full(256, 0x5A, np_t)]
        with np.errstate(all="ignore"):
            runner(args)
        outs.append(args[1:])
    np.testing.assert_array_equal(outs[1][0], outs[0][0])
    np.testing.assert_array_equal(outs[1][1], outs[0][1])
    if d not in (1, -1):
        assert not (outs[0][0] == 0x5A).all()


@gt.jit
def div_runtime(x_ptr, y_ptr, q_ptr, r_ptr):
    offs = gl.arange(0, 256, layout=L)
    x = gl.load(x_ptr + offs)
    y = gl.load(y_ptr + offs)
    gl.store(q_ptr + offs, x // y)
    gl.store(r_ptr + offs, x % y)


@pytest.mark.parametrize("np_t, gl_t", [(np.int64, gl.int64), (np.int32, gl.int32), (np.uint64, gl.uint64)])
def test_division_by_run_time_values_at_the_extremes(np_t, gl_t):
    """div/rem by a run-time divisor (PTX div.s64, rem.s64, ...) on the simulator: by INT_MIN
    a small dividend gives 0 (fuzz seed 810205, ints preset: ptxsim's |INT64_MIN| overflowed and
    gave +-1), INT_MIN / -1 wraps, x // 0 is -1 and x % 0 is x; against the interpreter and
    Python's integers."""
    info = np.iinfo(np_t)
    edges = [info.min, info.max, 0, 1, -1, 2, -2, info.min + 1, 3, 2204422842]
    edges = [int(np.array(e).astype(np_t)) for e in edges]
    rng = np.random.default_rng(info.bits)
    x = rng.integers(info.min, info.max, 256, dtype=np_t, endpoint=True)
    y = rng.integers(info.min, info.max, 256, dtype=np_t, endpoint=True)
    x[:100] = np.repeat(np.array(edges, np_t), 10)
    y[:100] = np.tile(np.array(edges, np_t), 10)
    g = div_runtime.trace(*[gl.pointer(gl_t)] * 4, target="sm_90").graph
    text, _, smem = emit(g, "sm_90")
    outs = []
    for runner in (lambda a: get("interpreter").run(g, (1, 1, 1), a), lambda a: ptxsim.run(text, (1, 1, 1), a, smem)):
        args = [x.copy(), y.copy(), np.full(256, 0x5A, np_t), np.full(256, 0x5A, np_t)]
        with np.errstate(all="ignore"):
            runner(args)
        outs.append(args[2:])
    bits = info.bits
    for i in range(256):
        n, d = int(x[i]), int(y[i])
        q = -1 if d == 0 else _trunc_div(n, d)
        r = n if d == 0 else n - _trunc_div(n, d) * d
        want = [int(np.array(v & ((1 << bits) - 1)).astype(np.uint64).astype(np_t)) for v in (q, r)]
        assert [int(outs[0][0][i]), int(outs[0][1][i])] == want, ("interpreter", n, d)
        assert [int(outs[1][0][i]), int(outs[1][1][i])] == want, ("ptxsim", n, d)

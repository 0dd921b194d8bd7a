"""Run-time loops and branches: carried values, aliasing, escapes."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import TraceError

L1 = gl.BlockedLayout([1], [32], [2], [0])


@gt.jit
def rowsum_loop(out_ptr, in_ptr, n_cols, BLOCK: gl.constexpr):
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=L1)
    acc = gl.zeros([BLOCK], gl.float32, layout=L1)
    p = in_ptr + row * n_cols
    for start in gl.range(0, n_cols, BLOCK):
        acc += gl.load(p + cols, mask=start + cols < n_cols, other=0.0)  # in-place update
        p += BLOCK  # a carried pointer
    gl.store(out_ptr + row, gl.sum(acc, axis=0))


def test_loop_carries_rebound_and_inplace_values(rng):
    x = rng.standard_normal((5, 300)).astype(np.float32)
    out = np.full(5, np.nan, np.float32)
    rowsum_loop[(5,)](out, x, 300, BLOCK=64, num_warps=2)
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5, atol=1e-5)
    ir = rowsum_loop.trace(out, x, 300, BLOCK=64, num_warps=2).ir
    assert "for " in ir and ir.count("yield") == 2  # the reduction and the loop


@gt.jit
def alias_kernel(out_ptr, n):
    a = gl.full([64], 1.0, gl.float32, layout=L1)
    b = a  # b names the same tile, but the loop changes only a
    for i in gl.range(0, n):
        a = a * 2.0
        c = b + 0.0  # noqa: F841  (b must still be the value from before the loop)
    offs = gl.arange(0, 64, layout=L1)
    gl.store(out_ptr + offs, a + b)


def test_two_names_for_one_tile_keep_python_meaning():
    out = np.full(64, np.nan, np.float32)
    alias_kernel[(1,)](out, 5, num_warps=2)
    assert np.all(out == 2.0 ** 5 + 1.0)


@gt.jit
def swap_kernel(out_ptr, n):
    offs = gl.arange(0, 64, layout=L1)
    a = offs.to(gl.float32)
    b = a * 0.0 - 1.0
    for i in gl.range(0, n):
        a, b = b, a
    gl.store(out_ptr + offs, a)
    gl.store(out_ptr + 64 + offs, b)


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_swap_in_loop(n):
    out = np.full(128, np.nan, np.float32)
    swap_kernel[(1,)](out, n, num_warps=2)
    a, b = np.arange(64, dtype=np.float32), np.full(64, -1.0, np.float32)
    if n % 2:
        a, b = b, a
    assert np.array_equal(out[:64], a) and np.array_equal(out[64:], b)


@gt.jit
def nested_kernel(out_ptr, n, m):
    offs = gl.arange(0, 64, layout=L1)
    acc = gl.zeros([64], gl.int32, layout=L1)
    for i in gl.range(0, n):
        for j in gl.range(0, m, 2):
            acc = acc + offs * 0 + 1
        acc = acc * 2
    gl.store(out_ptr + offs, acc)


def test_nested_loops_with_step():
    out = np.full(64, -5, np.int32)
    nested_kernel[(1,)](out, 3, 5, num_warps=2)
    want = 0
    for _ in range(3):
        want = (want + 3) * 2
    assert np.all(out == want)


@gt.jit
def branch_kernel(out_ptr, flag):
    offs = gl.arange(0, 64, layout=L1)
    x = offs.to(gl.float32)
    y = x
    with gl.if_(flag > 0):
        x = x * 2.0
    with gl.else_():
        y = y - 1.0
    gl.store(out_ptr + offs, x + y * 100.0)


@pytest.mark.parametrize("flag", [0, 1])
def test_if_else_rebinds_names(flag):
    out = np.full(64, np.nan, np.float32)
    branch_kernel[(1,)](out, flag, num_warps=2)
    base = np.arange(64, dtype=np.float32)
    want = base * 2 + base * 100 if flag else base + (base - 1) * 100
    np.testing.assert_allclose(out, want)


@gt.jit
def if_only_kernel(out_ptr, flag):
    pid = gl.program_id(0)
    v = pid * 10
    with gl.if_(pid == flag):
        v = v + 1
    gl.store(out_ptr + pid, v)


def test_if_without_else():
    out = np.full(4, -1, np.int32)
    if_only_kernel[(4,)](out, 2)
    assert out.tolist() == [0, 10, 21, 30]


@gt.jit
def fori_kernel(out_ptr, n):
    offs = gl.arange(0, 64, layout=L1)
    init = (gl.zeros([64], gl.float32, layout=L1), offs)

    def body(i, carry):
        s, o = carry
        return s + o.to(gl.float32) * i.to(gl.float32), o

    s, _ = gl.fori_loop(0, n, body, init)
    gl.store(out_ptr + offs, s)


def test_fori_loop():
    out = np.full(64, np.nan, np.float32)
    fori_kernel[(1,)](out, 4, num_warps=2)
    np.testing.assert_allclose(out, np.arange(64) * (0 + 1 + 2 + 3))


@gt.jit
def escape_kernel(out_ptr, n):
    for i in gl.range(0, n):
        t = gl.full([64], 1.0, gl.float32, layout=L1)
    gl.store(out_ptr + gl.arange(0, 64, layout=L1), t)


def test_value_escaping_a_loop_names_both_lines():
    with pytest.raises(TraceError) as e:
        escape_kernel.trace(gl.pointer(gl.float32), gl.int32, num_warps=2)
    msg = str(e.value)
    assert "test_control_flow.py" in msg and "without being carried" in msg
    line_def = escape_kernel.fn.__code__.co_firstlineno + 3
    line_use = line_def + 1
    assert f"line {line_def}" in msg and f":{line_use}:" in msg and f"line {line_def - 1}" in msg


@gt.jit
def type_change_kernel(out_ptr, n):
    acc = gl.zeros([64], gl.float32, layout=L1)
    for i in gl.range(0, n):
        acc = acc.to(gl.float16)
    gl.store(out_ptr + gl.arange(0, 64, layout=L1), acc)


def test_carried_value_changing_type_is_an_error():
    with pytest.raises(TraceError, match="changes type") as e:
        type_change_kernel.trace(gl.pointer(gl.float16), gl.int32, num_warps=2)
    assert "test_control_flow.py" in str(e.value)


@gt.jit
def bool_kernel(out_ptr, n):
    x = gl.arange(0, 64, layout=L1)
    if x > 3:
        gl.store(out_ptr + x, x)


def test_python_if_on_a_tile_suggests_where_and_if_():
    with pytest.raises(TraceError) as e:
        bool_kernel.trace(gl.pointer(gl.int32), gl.int32, num_warps=2)
    msg = str(e.value)
    assert "gl.where" in msg and "gl.if_" in msg and "test_control_flow.py" in msg


@gt.jit
def else_alone_kernel(out_ptr):
    with gl.else_():
        pass


def test_else_without_if():
    with pytest.raises(TraceError, match="must directly follow"):
        else_alone_kernel.trace(gl.pointer(gl.int32))


@gt.jit
def unrolled_kernel(out_ptr, N: gl.constexpr):
    offs = gl.arange(0, 64, layout=L1)
    acc = gl.zeros([64], gl.int32, layout=L1)
    for k in range(N):  # a Python loop unrolls at trace time
        acc = acc + k
    gl.store(out_ptr + offs, acc)


def test_python_range_unrolls():
    k = unrolled_kernel.trace(gl.pointer(gl.int32), N=4, num_warps=2)
    assert "for " not in k.ir and k.ir.count(" add ") == 4
    out = np.zeros(64, np.int32) - 1
    unrolled_kernel[(1,)](out, N=4, num_warps=2)
    assert np.all(out == 6)

"""Which pointer arguments a kernel addresses as contiguous (gluon_trace/addressing.py)."""
import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.addressing import contiguous_pointer_args

L1 = gl.BlockedLayout([4], [32], [4], [0])
P = gl.pointer(gl.float32)


def _args(kernel, *args, **kw):
    return contiguous_pointer_args(kernel.trace(*args, **kw).graph)


@gt.jit
def add(out, x, y, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L1)
    m = offs < n  # n only masks: the addresses assume dense arrays
    gl.store(out + offs, gl.load(x + offs, mask=m) + gl.load(y + offs, mask=m), mask=m)


@gt.jit
def rows(out, x, stride_x, n, BLOCK: gl.constexpr):
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=L1)
    v = gl.load(x + row * stride_x + cols, mask=cols < n)  # the caller's row stride
    gl.store(out + row * BLOCK + cols, v, mask=cols < n)  # out: dense rows of BLOCK


@gt.jit
def looped(out, x, n, BLOCK: gl.constexpr):
    acc = gl.zeros([BLOCK], gl.float32, layout=L1)
    for i in gl.range(0, n, BLOCK):  # the offsets depend on the loop's bound n
        acc = acc + gl.load(x + i + gl.arange(0, BLOCK, layout=L1))
    gl.store(out + gl.arange(0, BLOCK, layout=L1), acc)
    gl.store(out, gl.load(x))  # element 0 alone says nothing


@gt.jit
def mixed(out, x, s):
    i = gl.arange(0, 128, layout=L1)
    gl.store(out + i, gl.load(x + i))
    gl.store(out + i * s, gl.load(x + i))  # one strided access frees out


def test_index_only_addressing_assumes_contiguity():
    assert _args(add, P, P, P, 1000, BLOCK=512) == {0, 1, 2}


def test_a_runtime_stride_in_the_offsets_frees_that_argument():
    assert _args(rows, P, P, 4096, 1000, BLOCK=1024) == {0}


def test_loops_and_element_zero():
    assert _args(looped, P, P, 4096, BLOCK=512) == {0}


def test_one_strided_access_is_enough():
    assert _args(mixed, P, P, 3) == {1}


def test_the_interpreter_refuses_a_view_where_the_kernel_assumes_contiguity():
    import sys

    import numpy as np
    import pytest

    from gluon_trace.errors import ArgumentError
    x = np.arange(2048, dtype=np.float32)
    out = np.full(1024, np.nan, np.float32)
    with pytest.raises(ArgumentError) as e:
        add[(2,)](out, x[::2], x[:1024], 1024, BLOCK=512)
    assert e.value.loc.line == sys._getframe().f_lineno - 1
    assert "`x` is not contiguous" in str(e.value) and "strides (8,)" in str(e.value)
    assert np.isnan(out).all()  # nothing ran
    add[(2,)](out, x[::2].copy(), x[:1024], 1024, BLOCK=512)
    np.testing.assert_array_equal(out, x[::2] + x[:1024])


def test_a_strided_kernel_takes_a_view():
    import numpy as np
    x = np.arange(64 * 1024, dtype=np.float32).reshape(64, 1024)
    out = np.full((64, 1024), np.nan, np.float32)
    rows[(64,)](out, x[:, 24:], 1024, 1000, BLOCK=1024)  # rows of 1000, row stride 1024
    np.testing.assert_array_equal(out[:, :1000], x[:, 24:])

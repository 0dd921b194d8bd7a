"""Every kind of bad input gets a clear error that names the user's line."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import ArgumentError, LayoutError, TraceError

L = gl.BlockedLayout([1], [32], [4], [0])
L_OTHER = gl.BlockedLayout([2], [32], [4], [0])
HERE = "test_errors.py"


def _line_of(fn, text):
    import inspect
    src, start = inspect.getsourcelines(fn.fn)
    for i, s in enumerate(src):
        if text in s:
            return start + i
    raise AssertionError(text)


@gt.jit
def simple(out_ptr, n, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=L)
    gl.store(out_ptr + offs, offs, mask=offs < n)


def test_wrong_argument_count():
    with pytest.raises(ArgumentError) as e:
        simple[(1,)](np.zeros(128, np.int32), BLOCK=128)
    assert HERE in str(e.value) and "missing" in str(e.value)


def test_missing_constexpr_says_pass_by_keyword():
    with pytest.raises(ArgumentError) as e:
        simple[(1,)](np.zeros(128, np.int32), 5)
    assert "BLOCK=..." in str(e.value) and HERE in str(e.value)


def test_wrong_argument_type():
    with pytest.raises(ArgumentError) as e:
        simple[(1,)](np.zeros(128, np.int32), "five", BLOCK=128)
    assert "`n` is a str" in str(e.value) and HERE in str(e.value)


@gt.jit
def mismatch(out_ptr):
    a = gl.arange(0, 128, layout=L)
    b = gl.arange(0, 128, layout=L_OTHER)
    gl.store(out_ptr + a, a + b)


def test_layout_mismatch_names_both_and_suggests_convert():
    with pytest.raises(LayoutError) as e:
        mismatch.trace(gl.pointer(gl.int32))
    msg = str(e.value)
    assert "size_per_thread=(1,)" in msg and "size_per_thread=(2,)" in msg
    assert "convert_layout" in msg
    assert f"{HERE}:{_line_of(mismatch, 'a + b')}" in msg


@gt.jit
def shape_mismatch(out_ptr):
    a = gl.arange(0, 128, layout=L)
    b = gl.arange(0, 64, layout=L)
    gl.store(out_ptr + a, a + b)


def test_shape_mismatch():
    with pytest.raises(TraceError) as e:
        shape_mismatch.trace(gl.pointer(gl.int32))
    assert "[128]" in str(e.value) and "[64]" in str(e.value)
    assert f"{HERE}:{_line_of(shape_mismatch, 'a + b')}" in str(e.value)


@gt.jit
def bad_axis(out_ptr):
    a = gl.arange(0, 128, layout=L)
    gl.store(out_ptr, gl.sum(a, axis=1))


def test_reduction_axis_out_of_range():
    with pytest.raises(TraceError) as e:
        bad_axis.trace(gl.pointer(gl.int32))
    assert "axis 1 is out of range" in str(e.value)
    assert f"{HERE}:{_line_of(bad_axis, 'gl.sum')}" in str(e.value)


@gt.jit
def non_pow2(out_ptr):
    a = gl.arange(0, 100, layout=L)
    gl.store(out_ptr + a, a)


def test_non_power_of_two_arange():
    with pytest.raises(TraceError) as e:
        non_pow2.trace(gl.pointer(gl.int32))
    assert "power of two" in str(e.value)
    assert f"{HERE}:{_line_of(non_pow2, 'arange')}" in str(e.value)


@gt.jit
def float_bitwise(out_ptr):
    a = gl.arange(0, 128, layout=L).to(gl.float32)
    gl.store(out_ptr + gl.arange(0, 128, layout=L), a & a)


def test_bitwise_on_floats():
    with pytest.raises(TraceError) as e:
        float_bitwise.trace(gl.pointer(gl.float32))
    assert "not defined on floats" in str(e.value)
    assert f"{HERE}:{_line_of(float_bitwise, 'a & a')}" in str(e.value)


@gt.jit
def store_to_int(out_ptr, n):
    offs = gl.arange(0, 128, layout=L)
    gl.store(n + offs, offs)


def test_store_to_non_pointer():
    with pytest.raises(TraceError) as e:
        store_to_int.trace(gl.pointer(gl.int32), gl.int32)
    assert "needs a pointer" in str(e.value)
    assert f"{HERE}:{_line_of(store_to_int, 'gl.store')}" in str(e.value)


@gt.jit
def wrong_warp(out_ptr):
    offs = gl.arange(0, 128, layout=gl.BlockedLayout([1], [16], [4], [0]))
    gl.store(out_ptr + offs, offs)


def test_layout_threads_not_matching_warp_size():
    with pytest.raises(LayoutError) as e:
        wrong_warp.trace(gl.pointer(gl.int32))
    assert "16 threads per warp" in str(e.value) and "32 threads" in str(e.value)
    assert f"{HERE}:{_line_of(wrong_warp, 'arange')}" in str(e.value)


def test_layout_warps_not_matching_num_warps():
    with pytest.raises(LayoutError, match="num_warps=8"):
        simple.trace(gl.pointer(gl.int32), gl.int32, BLOCK=128, num_warps=8)


@gt.jit
def returns_value(out_ptr):
    return gl.arange(0, 128, layout=L)


def test_kernel_returning_a_value():
    with pytest.raises(TraceError, match="returned a value"):
        returns_value.trace(gl.pointer(gl.int32))


@gt.jit
def no_layout(out_ptr):
    a = gl.zeros([128], gl.float32)
    gl.store(out_ptr, gl.sum(a))


def test_tile_without_layout():
    with pytest.raises(LayoutError, match="needs a layout") as e:
        no_layout.trace(gl.pointer(gl.float32))
    assert HERE in str(e.value)


@gt.jit
def expand_wrong(out_ptr):
    a = gl.arange(0, 128, layout=L)
    b = a[:, None]
    gl.store(out_ptr, gl.sum(gl.sum(b, 1), 0))


def test_expand_dims_needs_a_slice_layout():
    with pytest.raises(LayoutError) as e:
        expand_wrong.trace(gl.pointer(gl.int32))
    assert "SliceLayout(1" in str(e.value) and f"{HERE}:{_line_of(expand_wrong, '[:, None]')}" in str(e.value)


def test_gl_outside_a_kernel():
    with pytest.raises(TraceError, match="only be called while a kernel is traced") as e:
        gl.program_id(0)
    assert HERE in str(e.value)


def test_bad_num_warps():
    with pytest.raises(ArgumentError, match="power of two"):
        simple.trace(gl.pointer(gl.int32), gl.int32, BLOCK=128, num_warps=3)


@gt.jit
def other_without_mask(out_ptr, in_ptr):
    offs = gl.arange(0, 128, layout=L)
    gl.store(out_ptr + offs, gl.load(in_ptr + offs, other=0.0))


def test_other_without_mask():
    with pytest.raises(TraceError, match="needs a `mask`"):
        other_without_mask.trace(gl.pointer(gl.float32), gl.pointer(gl.float32))


@gt.jit
def pointer_plus_float(out_ptr):
    gl.store(out_ptr + 1.5, 1.0)


def test_pointer_plus_float():
    with pytest.raises(TraceError, match="pointer offsets must be integers"):
        pointer_plus_float.trace(gl.pointer(gl.float32))


def test_unknown_backend():
    from gluon_trace.errors import LaunchError
    with pytest.raises(LaunchError, match="unknown backend"):
        simple[(1,)](np.zeros(128, np.int32), 5, BLOCK=128, backend="tpu")


# -- errors behave like Python's builtins ------------------------------------------------------

def _this_line(err) -> int:
    return err.loc.line


def test_argument_count_and_keyword_errors_are_type_errors():
    import inspect
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(TypeError) as e:
        simple[(1,)](np.zeros(128, np.int32), BLOCK=128)
    assert isinstance(e.value, ArgumentError) and _this_line(e.value) == line
    with pytest.raises(TypeError) as e:
        simple[(1,)](np.zeros(128, np.int32), 5, BLOCK=128, colour=3)
    assert "colour" in str(e.value) and HERE in str(e.value)


def test_wrong_argument_type_is_a_type_error():
    with pytest.raises(TypeError) as e:
        simple[(1,)]("not an array", 5, BLOCK=128)
    assert isinstance(e.value, ArgumentError) and HERE in str(e.value)


@pytest.mark.parametrize("arr", [np.zeros(128, np.complex64), np.zeros(128, object)],
                         ids=["complex", "object"])
def test_array_of_unsupported_dtype_names_it_and_the_line(arr):
    import inspect
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(TypeError) as e:
        simple[(1,)](arr, 5, BLOCK=128, backend="interpreter")
    err = e.value
    assert isinstance(err, ArgumentError) and err.loc.line == line
    assert str(arr.dtype) in str(err) and "out_ptr" in str(err)
    assert ("imag" in str(err)) == (arr.dtype.kind == "c")


@pytest.mark.parametrize("grid", [(1.5,), 2.0, (1, 0.5), ("1",)])
def test_grid_of_non_ints_is_a_type_error(grid):
    import inspect
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(TypeError) as e:
        simple[grid](np.zeros(128, np.int32), 5, BLOCK=128, backend="interpreter")
    assert isinstance(e.value, ArgumentError) and e.value.loc.line == line
    assert "gl.cdiv" in str(e.value)


@pytest.mark.parametrize("grid", [(-1,), (1, 1, 1, 1), ()])
def test_grid_of_bad_ints_is_a_value_error(grid):
    with pytest.raises(ValueError) as e:
        simple[grid](np.zeros(128, np.int32), 5, BLOCK=128, backend="interpreter")
    assert isinstance(e.value, ArgumentError) and HERE in str(e.value)


def test_numpy_int_grid_still_launches():
    out = np.zeros(128, np.int32)
    simple[(np.int64(1),)](out, 5, BLOCK=128, backend="interpreter")
    assert out[:5].tolist() == [0, 1, 2, 3, 4] and not out[5:].any()


def test_bad_num_warps_is_a_value_error():
    with pytest.raises(ValueError) as e:
        simple[(1,)](np.zeros(128, np.int32), 5, BLOCK=128, num_warps=3, backend="interpreter")
    assert isinstance(e.value, ArgumentError) and "power of two" in str(e.value)


@gt.jit
def uses_len(out_ptr, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=L)
    n = len(offs)
    gl.store(out_ptr + offs, offs + n)


def test_len_of_a_tile_is_a_type_error_naming_the_line():
    with pytest.raises(TypeError) as e:
        uses_len[(1,)](np.zeros(128, np.int32), BLOCK=128, backend="interpreter")
    err = e.value
    assert isinstance(err, TraceError)
    assert err.loc.line == _line_of(uses_len, "len(offs)") and "x.shape[0]" in str(err)


@gt.jit
def reads_past(out_ptr, x_ptr, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=L)
    gl.store(out_ptr + offs, gl.load(x_ptr + offs + 1))


def test_out_of_bounds_in_the_interpreter_is_an_index_error():
    from gluon_trace.errors import InterpreterError
    with pytest.raises(IndexError) as e:
        reads_past[(1,)](np.zeros(128, np.float32), np.zeros(128, np.float32), BLOCK=128,
                         backend="interpreter")
    err = e.value
    assert isinstance(err, InterpreterError)
    assert err.loc.line == _line_of(reads_past, "gl.load(") and "out of bounds" in str(err)


def test_error_hierarchy_keeps_library_bases():
    from gluon_trace import errors as E
    assert issubclass(E.TraceTypeError, E.TraceError) and issubclass(E.TraceTypeError, TypeError)
    assert issubclass(E.ArgumentTypeError, E.ArgumentError) and not issubclass(E.ArgumentTypeError, ValueError)
    assert issubclass(E.ArgumentValueError, E.ArgumentError) and not issubclass(E.ArgumentValueError, TypeError)
    assert issubclass(E.OutOfBoundsError, E.InterpreterError) and issubclass(E.OutOfBoundsError, IndexError)

"""Loads, stores, masks, atomics and bounds checks in the interpreter."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import InterpreterError

L = gl.BlockedLayout([1], [32], [4], [0])


@gt.jit
def masked_copy(out_ptr, in_ptr, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    m = offs < n
    gl.store(out_ptr + offs, gl.load(in_ptr + offs, mask=m, other=-1.0) + 1.0, mask=m)


@pytest.mark.parametrize("n", [1, 127, 128, 300])
def test_masked_copy_leaves_the_rest_untouched(n, rng):
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(n + 5, np.nan, np.float32)
    masked_copy[(gl.cdiv(n, 128),)](out, x, n, BLOCK=128)
    np.testing.assert_allclose(out[:n], x + 1)
    assert np.isnan(out[n:]).all()


@gt.jit
def other_kernel(out_ptr, in_ptr, n):
    offs = gl.arange(0, 128, layout=L)
    a = gl.load(in_ptr + offs, mask=offs < n, other=7)
    b = gl.load(in_ptr + offs, mask=offs < n)
    gl.store(out_ptr + offs, a * 1000 + b)


def test_masked_lanes_read_other_or_zero(rng):
    x = rng.integers(1, 100, 50).astype(np.int32)
    out = np.full(128, -1, np.int32)
    other_kernel[(1,)](out, x, 50)
    assert np.array_equal(out[:50], x * 1000 + x)
    assert np.all(out[50:] == 7000)


@gt.jit
def unmasked_oob(out_ptr, in_ptr):
    offs = gl.arange(0, 128, layout=L)
    gl.store(out_ptr + offs, gl.load(in_ptr + offs))


def test_out_of_bounds_load_is_an_error_naming_the_line():
    x = np.ones(100, np.float32)
    out = np.zeros(128, np.float32)
    with pytest.raises(InterpreterError) as e:
        unmasked_oob[(1,)](out, x)
    msg = str(e.value)
    assert "out of bounds" in msg and "load" in msg and "test_memory.py" in msg
    assert "element offset 100" in msg and "100 float32" in msg
    assert np.all(out == 0)  # nothing was written before the fault


def test_out_of_bounds_store_is_an_error():
    x = np.ones(128, np.float32)
    out = np.zeros(64, np.float32)
    with pytest.raises(InterpreterError, match="store out of bounds"):
        unmasked_oob[(1,)](out, x)


@gt.jit
def atomics(counter_ptr, max_ptr, xchg_ptr, cas_ptr, vals_ptr, old_ptr):
    offs = gl.arange(0, 128, layout=L)
    v = gl.load(vals_ptr + offs)
    old = gl.atomic_add(counter_ptr + offs * 0, 1)   # every lane hits one address
    gl.store(old_ptr + offs, old)
    gl.atomic_max(max_ptr + offs % 4, v)
    gl.atomic_xchg(xchg_ptr + offs, v, mask=offs < 10)
    gl.atomic_cas(cas_ptr + offs, offs * 0 + 5, v)


def test_atomics(rng):
    vals = rng.integers(-100, 100, 128).astype(np.int32)
    counter = np.array([10], np.int32)
    mx = np.full(4, -1000, np.int32)
    xchg = np.full(128, 3, np.int32)
    cas = np.where(np.arange(128) % 2 == 0, 5, 6).astype(np.int32)
    old = np.full(128, -1, np.int32)
    atomics[(2,)](counter, mx, xchg, cas, vals, old)
    assert counter[0] == 10 + 256
    assert sorted(old.tolist()) == list(range(10 + 128, 10 + 256))  # second program wins last
    assert mx.tolist() == [vals[i::4].max() for i in range(4)]
    assert np.array_equal(xchg[:10], vals[:10]) and np.all(xchg[10:] == 3)
    want = np.where(np.arange(128) % 2 == 0, vals, 6)
    assert np.array_equal(cas, want)


@gt.jit
def f16_kernel(out_ptr, a_ptr, b_ptr):
    offs = gl.arange(0, 128, layout=L)
    a = gl.load(a_ptr + offs)
    b = gl.load(b_ptr + offs)
    gl.store(out_ptr + offs, (a * b + a).to(gl.float16))


def test_float16_rounds_after_each_op(rng):
    a = rng.standard_normal(128).astype(np.float16)
    b = rng.standard_normal(128).astype(np.float16)
    out = np.zeros(128, np.float16)
    f16_kernel[(1,)](out, a, b)
    assert np.array_equal(out, (a * b) + a)  # numpy rounds float16 after each op too


@gt.jit
def wrap_kernel(out_ptr, a_ptr):
    offs = gl.arange(0, 128, layout=L)
    a = gl.load(a_ptr + offs)
    gl.store(out_ptr + offs, a * 3 + 2_000_000_000)


def test_int32_wraps_around(rng):
    a = rng.integers(-2**31, 2**31 - 1, 128).astype(np.int32)
    out = np.zeros(128, np.int32)
    wrap_kernel[(1,)](out, a)
    want = ((a.astype(np.int64) * 3 + 2_000_000_000 + 2**31) % 2**32 - 2**31).astype(np.int32)
    assert np.array_equal(out, want)


@gt.jit
def cdiv_mod(out_ptr, a_ptr, b_ptr):
    offs = gl.arange(0, 128, layout=L)
    a = gl.load(a_ptr + offs)
    b = gl.load(b_ptr + offs)
    gl.store(out_ptr + offs, a // b)
    gl.store(out_ptr + 128 + offs, a % b)


def test_integer_division_truncates_like_c(rng):
    a = rng.integers(-1000, 1000, 128).astype(np.int32)
    b = rng.integers(1, 30, 128).astype(np.int32) * rng.choice([-1, 1], 128).astype(np.int32)
    out = np.zeros(256, np.int32)
    cdiv_mod[(1,)](out, a, b)
    q = np.trunc(a / b).astype(np.int32)
    assert np.array_equal(out[:128], q) and np.array_equal(out[128:], a - q * b)


@gt.jit
def hint_kernel(out_ptr, n):
    n = gl.multiple_of(n, 16)
    gl.store(out_ptr, n)


def test_multiple_of_hint_is_checked():
    out = np.zeros(1, np.int32)
    hint_kernel[(1,)](out, 32)
    assert out[0] == 32
    with pytest.raises(InterpreterError, match="not a multiple of 16"):
        hint_kernel[(1,)](out, 33)


L4 = gl.BlockedLayout([4], [32], [1], [0])


@gt.jit
def hinted_rows(x_ptr, out_ptr, BM: gl.constexpr):
    offs = gl.max_contiguous(gl.multiple_of(gl.program_id(0) * BM + gl.arange(0, BM, layout=L4), BM), BM)
    gl.store(out_ptr + offs, gl.load(x_ptr + offs))


def test_multiple_of_on_a_base_plus_arange_says_to_hint_the_base():
    """Triton's tutorials hint pid * BM + arange as a multiple of BM; here the hint covers every
    element, so the run refuses it, names the line and says what to write instead."""
    x = np.arange(256, dtype=np.float32)
    with pytest.raises(InterpreterError, match="1 is not a multiple of 128") as e:
        hinted_rows[(2,)](x, np.zeros_like(x), BM=128, num_warps=1)
    assert "test_memory.py" in str(e.value) and "hint the base: gl.multiple_of(base, n)" in str(e.value)


def test_bfloat16_through_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    a = torch.randn(128, dtype=torch.bfloat16)
    b = torch.randn(128, dtype=torch.bfloat16)
    out = torch.zeros(128, dtype=torch.bfloat16)
    f16_kernel[(1,)](out, a, b)
    assert torch.equal(out, a * b + a)

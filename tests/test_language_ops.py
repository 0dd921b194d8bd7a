"""The rest of the gl.* surface, each op against numpy."""
import math

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import TraceError

L1 = gl.BlockedLayout([2], [32], [2], [0])
L2 = gl.BlockedLayout([1, 4], [8, 4], [2, 1], [1, 0])
L2T = gl.BlockedLayout([4, 1], [4, 8], [1, 2], [0, 1])

MATH = {
    "exp": (gl.exp, np.exp), "exp2": (gl.exp2, np.exp2), "log": (gl.log, np.log),
    "log2": (gl.log2, np.log2), "sqrt": (gl.sqrt, np.sqrt),
    "rsqrt": (gl.rsqrt, lambda x: 1 / np.sqrt(x)), "sin": (gl.sin, np.sin),
    "cos": (gl.cos, np.cos), "erf": (gl.erf, np.vectorize(math.erf)),
    "floor": (gl.floor, np.floor), "ceil": (gl.ceil, np.ceil), "abs": (gl.abs, np.abs),
}


def unary_kernel(fn):
    @gt.jit
    def k(out_ptr, in_ptr):
        offs = gl.arange(0, 128, layout=L1)
        gl.store(out_ptr + offs, fn(gl.load(in_ptr + offs)))
    return k


@pytest.mark.parametrize("name", sorted(MATH))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_math(name, dtype, rng):
    ours, ref = MATH[name]
    x = rng.uniform(0.1, 4.0, 128).astype(dtype)
    if name in ("sin", "cos", "erf", "floor", "ceil", "abs"):
        x = (x - 2).astype(dtype)
    out = np.full(128, np.nan, dtype)
    unary_kernel(ours)[(1,)](out, x, num_warps=2)
    want = ref(x.astype(np.float64)).astype(dtype)
    tol = {np.float16: 2e-3, np.float32: 1e-6, np.float64: 1e-12}[dtype]
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


@gt.jit
def casts(f_ptr, i_ptr, u_ptr, b_ptr, h_ptr, in_ptr):
    offs = gl.arange(0, 128, layout=L1)
    x = gl.load(in_ptr + offs)
    gl.store(i_ptr + offs, x.to(gl.int32))
    gl.store(u_ptr + offs, x.to(gl.int32).to(gl.uint8))
    gl.store(b_ptr + offs, (x > 0).to(gl.int8))
    gl.store(h_ptr + offs, x.to(gl.float16))
    gl.store(f_ptr + offs, x.to(gl.int32, bitcast=True).to(gl.float32, bitcast=True) + 0.0)


def test_casts(rng):
    x = rng.uniform(-300, 300, 128).astype(np.float32)
    outs = [np.zeros(128, t) for t in (np.float32, np.int32, np.uint8, np.int8, np.float16)]
    casts[(1,)](*outs, x, num_warps=2)
    f, i, u, b, h = outs
    assert np.array_equal(i, np.trunc(x).astype(np.int32))
    assert np.array_equal(u, np.trunc(x).astype(np.int32).astype(np.uint8))
    assert np.array_equal(b, (x > 0).astype(np.int8))
    assert np.array_equal(h, x.astype(np.float16))
    assert np.array_equal(f, x)


@gt.jit
def shifts(out_ptr, a_ptr, u_ptr):
    offs = gl.arange(0, 128, layout=L1)
    a = gl.load(a_ptr + offs)
    u = gl.load(u_ptr + offs)
    gl.store(out_ptr + offs, a >> 3)
    gl.store(out_ptr + 128 + offs, (u >> 3).to(gl.int32, bitcast=True))
    gl.store(out_ptr + 256 + offs, a << 4)
    gl.store(out_ptr + 384 + offs, ~a)


def test_shifts_arithmetic_for_signed_logical_for_unsigned(rng):
    a = rng.integers(-2**20, 2**20, 128).astype(np.int32)
    u = rng.integers(0, 2**32, 128, dtype=np.uint64).astype(np.uint32)
    out = np.zeros(512, np.int32)
    shifts[(1,)](out, a, u, num_warps=2)
    assert np.array_equal(out[:128], a >> 3)
    assert np.array_equal(out[128:256], (u >> 3).view(np.int32))
    assert np.array_equal(out[256:384], a << 4)
    assert np.array_equal(out[384:], ~a)


@gt.jit
def layout_ops(out_ptr, in_ptr, M: gl.constexpr, N: gl.constexpr):
    rows = gl.arange(0, M, layout=gl.SliceLayout(1, L2))
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, L2))
    x = gl.load(in_ptr + rows[:, None] * N + cols[None, :])
    y = gl.convert_layout(x, L2T)                      # same values, other threads
    t = gl.permute(y, (1, 0))                          # (N, M), layout inferred
    r = gl.reshape(x, (M * N,))                        # row-major flattening
    offs_t = gl.permute(gl.convert_layout(rows[:, None] * 1 + cols[None, :] * M, L2T), (1, 0))
    gl.store(out_ptr + offs_t, t)
    flat = gl.reshape(rows[:, None] * N + cols[None, :], (M * N,))
    gl.store(out_ptr + M * N + flat, r * 2.0)


def test_convert_permute_reshape(rng):
    m, n = 8, 16
    x = rng.standard_normal((m, n)).astype(np.float32)
    out = np.full(2 * m * n, np.nan, np.float32)
    layout_ops[(1,)](out, x, M=m, N=n, num_warps=2)
    assert np.array_equal(out[:m * n].reshape(n, m), x.T)
    assert np.array_equal(out[m * n:], x.reshape(-1) * 2)


@gt.jit
def broadcast_kernel(out_ptr, M: gl.constexpr, N: gl.constexpr):
    rows = gl.arange(0, M, layout=gl.SliceLayout(1, L2))[:, None]
    cols = gl.arange(0, N, layout=gl.SliceLayout(0, L2))[None, :]
    a, b = gl.broadcast(rows, cols)
    c = gl.expand_dims(gl.arange(0, N, layout=gl.SliceLayout(0, L2)), 0)
    gl.store(out_ptr + a * N + b, a * 1000 + b + c * 0 + gl.where(a > b, 1, 0))


def test_broadcast_and_expand_dims():
    out = np.full(8 * 16, -1, np.int32)
    broadcast_kernel[(1,)](out, M=8, N=16, num_warps=2)
    r, c = np.meshgrid(np.arange(8), np.arange(16), indexing="ij")
    assert np.array_equal(out.reshape(8, 16), r * 1000 + c + (r > c))


@gt.jit
def static_kernel(out_ptr, N: gl.constexpr):
    gl.static_assert(N % 2 == 0, "N must be even")
    gl.store(out_ptr, N)


def test_static_assert():
    static_kernel.trace(gl.pointer(gl.int32), N=4)
    with pytest.raises(TraceError, match="N must be even"):
        static_kernel.trace(gl.pointer(gl.int32), N=3)


@gt.jit
def print_kernel(out_ptr):
    offs = gl.arange(0, 64, layout=L1)
    gl.device_print("offs=", offs)
    gl.store(out_ptr + offs, offs)


def test_device_print(capsys):
    out = np.zeros(64, np.int32)
    print_kernel[(2,)](out, num_warps=1 * 2)
    text = capsys.readouterr().out
    assert "pid (0, 0, 0) offs=" in text and "pid (1, 0, 0) offs=" in text


@gt.jit
def clamp_fma(out_ptr, a_ptr, b_ptr):
    offs = gl.arange(0, 128, layout=L1)
    a = gl.load(a_ptr + offs)
    b = gl.load(b_ptr + offs)
    gl.store(out_ptr + offs, gl.clamp(gl.fma(a, b, 1.0), -1.0, 1.0) + gl.div_rn(a, b) * 0.0
             + gl.fdiv(a, b) - a / b)


def test_clamp_fma_div(rng):
    a = rng.standard_normal(128).astype(np.float32)
    b = rng.uniform(0.5, 2, 128).astype(np.float32)
    out = np.zeros(128, np.float32)
    clamp_fma[(1,)](out, a, b, num_warps=2)
    np.testing.assert_allclose(out, np.clip(a * b + 1, -1, 1), rtol=1e-6, atol=1e-6)


@gt.jit
def scalar_kernel(out_ptr, x, y):
    gl.store(out_ptr, gl.maximum(x, y) * 2 + (x // 3) + gl.cdiv(x, 4) + gl.full([], 5, gl.int32))


def test_scalar_arithmetic():
    out = np.zeros(1, np.int32)
    scalar_kernel[(1,)](out, 17, 9)
    assert out[0] == 17 * 2 + 17 // 3 + 5 + 5


@gt.jit
def timed_loop(out, n):
    """Clock readings around a loop, one row of four a program."""
    t0 = gl.globaltimer()
    c0 = gl.clock64()
    acc = gl.full([], 0.0, gl.float32)
    for i in gl.range(0, n):
        acc += 1.0
    t1 = gl.globaltimer()
    c1 = gl.clock64()
    row = out + gl.program_id(0) * 5
    gl.store(row, t0)
    gl.store(row + 1, t1)
    gl.store(row + 2, c0)
    gl.store(row + 3, c1)
    gl.store(row + 4, acc.to(gl.int64))


def test_clock_reads_are_int64_and_never_go_back():
    """gl.globaltimer() / gl.clock64(): an int64 scalar each, a fresh reading each call (two
    reads of one clock are two ops, not merged), later readings not smaller."""
    out = np.full((3, 5), -1, np.int64)
    timed_loop[(3,)](out, 2000, backend="interpreter")
    assert (out[:, 4] == 2000).all()
    assert (out[:, 1] > out[:, 0]).all() and (out[:, 3] > out[:, 2]).all()
    assert (out[1:, 0] >= out[:-1, 1]).all()  # the interpreter runs programs one after another
    g = timed_loop.trace(gl.pointer(gl.int64), gl.int32).graph
    reads = [op for op in g.body.walk() if op.name == "read_timer"]
    assert [op.attrs["clock"] for op in reads] == ["globaltimer", "clock64", "globaltimer", "clock64"]
    assert all(op.results[0].type.dtype == gl.int64 for op in reads)

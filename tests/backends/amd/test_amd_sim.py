"""The emitted machine code, run on a small AMDGCN simulator (amdsim.py), against the
interpreter: instruction selection, thread/lane indexing, EXEC masks, LDS exchanges,
cross-lane reductions, loops and atomics -- and, because the simulator poisons
registers until their loads are waited for, s_waitcnt placement."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import dtypes as dt
from gluon_trace import language as gl

import amd_corpus as C
import amdsim

TARGETS = ["gfx90a", "gfx942", "gfx1100"]


pytestmark = pytest.mark.usefixtures("amd_toolchain")


def run_both(kernel, make_args, grid, target, outs, cx=None, nw=4, rtol=1e-6, atol=1e-6,
             exact=False):
    cx = cx or {}
    ref = make_args()
    kernel[grid](*ref, **cx, num_warps=nw, backend="interpreter")
    got = make_args()
    tk = kernel.trace(*got, **cx, num_warps=nw, target=target)
    amdsim.simulate(tk, target, grid, got)
    for k in outs:
        if exact:
            np.testing.assert_array_equal(got[k], ref[k], err_msg=f"output {k} on {target}")
        else:
            np.testing.assert_allclose(got[k], ref[k], rtol=rtol, atol=atol,
                                       err_msg=f"output {k} on {target}")


def rand(seed, n, dtype=np.float32, scale=1.0):
    r = np.random.default_rng(seed)
    return (r.standard_normal(n) * scale).astype(dtype)


@pytest.mark.parametrize("target", TARGETS)
def test_elementwise_masked(target):
    n = 2500
    run_both(C.add_kernel, lambda: [np.zeros(n, np.float32), rand(1, n), rand(2, n), n],
             (3,), target, [0], dict(BLOCK=1024), exact=True)


@pytest.mark.parametrize("target", TARGETS)
def test_float_math(target):
    n = 700
    run_both(C.math_kernel, lambda: [np.zeros(n, np.float32), rand(3, n, scale=3.0), n],
             (2,), target, [0], dict(BLOCK=512), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_integer_ops(target):
    n = 300

    def args():
        r = np.random.default_rng(4)
        x = r.integers(-10**6, 10**6, n).astype(np.int32)
        y = r.integers(-1000, 1000, n).astype(np.int32)
        y[y == 0] = 7
        return [np.zeros(n, np.int32), x, y, n]
    run_both(C.int_kernel, args, (2,), target, [0], dict(BLOCK=256), exact=True)


@pytest.mark.parametrize("target", TARGETS)
def test_dtypes(target):
    n = 200

    def args():
        r = np.random.default_rng(5)
        h = r.standard_normal(n).astype(np.float16)
        b = dt.f32_to_bf16_bits(r.standard_normal(n).astype(np.float32))
        d = r.standard_normal(n)
        c = r.integers(-128, 127, n).astype(np.int8)
        u = r.integers(0, 255, n).astype(np.uint8)
        return [np.zeros(n, np.float16), np.zeros(n, np.uint16), np.zeros(n), np.zeros(n, np.int8),
                np.zeros(n, np.uint8), h, b, d, c, u, n]
    P = gl.pointer
    specs = [P(gl.float16), P(gl.bfloat16), P(gl.float64), P(gl.int8), P(gl.uint8)] * 2 + [gl.int32]
    ref = args()
    # bfloat16 buffers are uint16 arrays: trace with type specs, run the interpreter on the graph
    from gluon_trace.backends.interpreter import BACKEND as INTERP
    tk_ref = C.dtype_kernel.trace(*specs, BLOCK=256, num_warps=4, target="interpreter")
    INTERP.run(tk_ref.graph, (1, 1, 1), ref)
    got = args()
    tk = C.dtype_kernel.trace(*specs, BLOCK=256, num_warps=4, target=target)
    amdsim.simulate(tk, target, (1,), got)
    for k in range(5):
        if k == 1:
            np.testing.assert_allclose(dt.bf16_bits_to_f32(got[k]), dt.bf16_bits_to_f32(ref[k]),
                                       rtol=1e-2)
        else:
            np.testing.assert_allclose(got[k].astype(np.float64), ref[k].astype(np.float64),
                                       rtol=2e-3 if k == 0 else 1e-12, err_msg=f"output {k}")


@pytest.mark.parametrize("target", TARGETS)
def test_casts(target):
    n = 256

    def args():
        x = rand(6, n, scale=1e4)
        i = np.random.default_rng(7).integers(-10**5, 10**5, n).astype(np.int32)
        return [np.zeros(n, np.int32), np.zeros(n, np.float32), np.zeros(n, np.int64), x, i, n]

    def args_pos():  # float -> uint32 of a negative value is undefined (numpy and GPUs differ)
        a = args()
        a[3] = np.abs(a[3])
        return a
    run_both(C.cast_kernel, args_pos, (1,), target, [0, 1, 2], dict(BLOCK=256), exact=True)


@pytest.mark.parametrize("target", TARGETS)
def test_scalar_arguments_and_uniform_code(target):
    g = 5
    run_both(C.scalar_kernel, lambda: [np.zeros(2 * g, np.float32), rand(8, g), 1.5, 7, 100],
             (g,), target, [0], exact=True)


@pytest.mark.parametrize("target", TARGETS)
def test_2d_tiles_broadcast_expand_dims(target):
    M, N = 45, 30
    run_both(C.tile2d_kernel, lambda: [np.zeros(M * N, np.float32), rand(9, M * N), rand(10, N),
                                       M, N, N], (2,), target, [0], dict(BM=32, BN=32), exact=True)


@pytest.mark.parametrize("target", TARGETS)
def test_reductions_on_each_axis(target):
    M, N = 30, 50
    run_both(C.reduce_kernel, lambda: [np.zeros(64, np.float32), np.zeros(32, np.float32),
                                       rand(11, M * N), M, N], (1,), target, [0, 1],
             dict(BM=32, BN=64), exact=True)


@pytest.mark.parametrize("target", TARGETS)
def test_argmax_with_ties(target):
    n = 300

    def args():
        x = np.round(rand(12, 4 * n, scale=3)).astype(np.float32)  # many ties
        return [np.zeros(4, np.int32), x, n]
    run_both(C.argmax_kernel, args, (4,), target, [0], dict(BLOCK=512), exact=True)


@pytest.mark.parametrize("target", TARGETS)
def test_cumsum(target):
    n = 200
    run_both(C.cumsum_kernel, lambda: [np.zeros(n, np.float32), rand(13, n), n], (1,), target, [0],
             dict(BLOCK=256), exact=True)


@pytest.mark.parametrize("target", TARGETS)
def test_convert_layout(target):
    M, N = 27, 32
    run_both(C.convert_kernel, lambda: [np.zeros(M * N, np.float32), rand(14, M * N), M, N], (1,),
             target, [0], dict(BM=32, BN=32), exact=True)


@pytest.mark.parametrize("target", TARGETS)
def test_loop_with_carried_values_and_branches(target):
    rows, cols = 3, 700
    run_both(C.loop_kernel, lambda: [np.zeros(rows, np.float32), rand(15, rows * cols), cols],
             (rows,), target, [0], dict(BLOCK=256), exact=True)


@pytest.mark.parametrize("target", TARGETS)
def test_atomics(target):
    n = 600

    def args():
        x = np.random.default_rng(16).integers(0, 1000, n).astype(np.int32)
        return [np.zeros(16, np.int32), np.zeros(2, np.float32), np.zeros(3, np.int32), x, n]
    ref = args()
    C.atomic_kernel[(3,)](*ref, BLOCK=256, backend="interpreter")
    got = args()
    tk = C.atomic_kernel.trace(*got, BLOCK=256, target=target)
    amdsim.simulate(tk, target, (3,), got)
    np.testing.assert_array_equal(got[0], ref[0])            # histogram
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-6)    # float sum (order differs) and max
    assert got[2][0] == ref[2][0] == 3                        # one scalar atomic per program
    assert got[2][1] == ref[2][1]                             # cas chain
    assert 0 <= got[2][2] < 3


@pytest.mark.parametrize("target", TARGETS)
def test_softmax(target):
    rows, cols = 3, 1000
    run_both(C.softmax_kernel, lambda: [np.zeros(rows * cols, np.float32), rand(17, rows * cols, scale=4),
                                        cols, cols], (rows,), target, [0], dict(BLOCK=1024),
             rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("target", TARGETS)
def test_layernorm(target):
    rows, cols = 2, 300
    run_both(C.layernorm_kernel, lambda: [np.zeros(rows * cols, np.float32), rand(18, rows * cols),
                                          rand(19, cols), rand(20, cols), cols, 1e-5],
             (rows,), target, [0], dict(BLOCK=512), rtol=1e-5, atol=1e-6)


def test_simulator_catches_a_missing_wait():
    """Remove one s_waitcnt from a kernel: the simulator must notice."""
    from gluon_trace.backends.amd import compiler
    P = gl.pointer(gl.float32)
    tk = C.add_kernel.trace(P, P, P, gl.int32, BLOCK=1024, target="gfx942")
    real = compiler.lower

    def broken(graph, target):
        e = real(graph, target)
        k = next(i for i, x in enumerate(e.code) if getattr(x, "op", "") == "s_waitcnt"
                 and "vmcnt" in x.suffix)
        del e.code[k]
        return e
    n = 100
    args = [np.zeros(n, np.float32), rand(1, n), rand(2, n), n]
    compiler.lower = broken
    try:
        with pytest.raises(amdsim.SimError, match="missing s_waitcnt"):
            amdsim.simulate(tk, "gfx942", (1,), args)
    finally:
        compiler.lower = real


@pytest.mark.parametrize("target", TARGETS)
def test_vectorized_when_sizes_are_multiples_of_16(target):
    """n specialized as a multiple of 16: the four registers of a thread share one mask
    and become one dwordx4 load/store per operand (masked, partly out of range)."""
    n = 2512  # a multiple of 16, not of the 1024-element block
    args = lambda: [np.zeros(n, np.float32), rand(21, n), rand(22, n), n]  # noqa: E731
    tk = C.add_kernel.trace(*args(), BLOCK=1024, target=target)
    text = tk.amdgcn(target)
    reps = 1024 // (4 * (32 if target == "gfx1100" else 64) * 4)  # register repeats of the tile
    assert text.count("global_load_dwordx4") == 2 * reps
    assert text.count("global_store_dwordx4") == reps
    assert "global_load_dword " not in text
    run_both(C.add_kernel, args, (3,), target, [0], dict(BLOCK=1024), exact=True)


@gt.jit
def hinted_copy(out_ptr, x_ptr, start, BLOCK: gl.constexpr):
    lay = gl.BlockedLayout([4], [gl.threads_per_warp()], [1], [0])
    s = gl.multiple_of(start, 4)
    offs = s + gl.arange(0, BLOCK, layout=lay)
    gl.store(out_ptr + offs, gl.load(x_ptr + offs) * 3.0)


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_multiple_of_hint_enables_vector_access(target):
    n = 1000
    tk = hinted_copy.trace(np.zeros(n, np.float32), rand(23, n), 4 * 7 + 0, BLOCK=256,
                           num_warps=1, target=target)
    text = tk.amdgcn(target)
    assert "global_load_dwordx4" in text and "global_store_dwordx4" in text
    out, x = np.zeros(n, np.float32), rand(23, n)
    amdsim.simulate(tk, target, (1,), [out, x, 12])
    np.testing.assert_array_equal(out[12:12 + 256], x[12:12 + 256] * 3)
    assert not out[:12].any() and not out[12 + 256:].any()


@gt.jit
def int64_kernel(out_ptr, x_ptr, y_ptr, u_ptr, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=C.blocked1d(1))
    mask = offs < n
    x = gl.load(x_ptr + offs, mask=mask, other=1)
    y = gl.load(y_ptr + offs, mask=mask, other=1)
    u = gl.load(u_ptr + offs, mask=mask, other=1)
    r = x // y + x % y * 7 + (x >> 3) + (x << 2) + gl.maximum(x, y) - gl.minimum(x, y) + x * y
    r = r + gl.where(x < y, 1, 0).to(gl.int64) + (u // 5).to(gl.int64) + (u % 7).to(gl.int64)
    r = r + (x >> (y & 63)) + (u >> (u & 70)).to(gl.int64)
    gl.store(out_ptr + offs, r, mask=mask)


@pytest.mark.parametrize("target", ["gfx90a", "gfx1100"])
def test_int64_arithmetic_including_division(target):
    n = 150

    def args():
        r = np.random.default_rng(24)
        x = r.integers(-2**62, 2**62, n, dtype=np.int64)
        y = r.integers(-2**40, 2**40, n, dtype=np.int64)
        y[y == 0] = 3
        y[:10] = r.integers(-9, 9, 10)
        y[y == 0] = -1
        u = r.integers(0, 2**64 - 1, n, dtype=np.uint64)
        return [np.zeros(n, np.int64), x, y, u, n]
    run_both(int64_kernel, args, (2,), target, [0], dict(BLOCK=128), exact=True)


@gt.jit
def control_kernel(out_ptr, x_ptr, n, step, BLOCK: gl.constexpr):
    L = C.blocked1d(2)
    offs = gl.arange(0, BLOCK, layout=L)
    acc = gl.zeros([BLOCK], gl.float32, layout=L)
    total = gl.full([], 0.0, gl.float32)
    count = gl.full([], 0, gl.int32)
    for i in gl.range(n - 1, -1, step):          # a runtime, negative step
        x = gl.load(x_ptr + i * BLOCK + offs)
        s = gl.sum(x, axis=0)                     # LDS inside the loop: barriers each trip
        with gl.if_(s > 0.0):
            acc = acc + x
            count = count + 1
        with gl.else_():
            acc = acc - x * 0.5
        for j in gl.range(0, 3):                  # nested loop carrying a scalar
            total = total + s * (j + 1).to(gl.float32)
    gl.store(out_ptr + offs, acc)
    gl.store(out_ptr + BLOCK, total)
    gl.store(out_ptr + BLOCK + 1, count.to(gl.float32))


@pytest.mark.parametrize("target", TARGETS)
def test_loops_branches_and_lds_inside_loops(target):
    B, n = 256, 5
    run_both(control_kernel, lambda: [np.zeros(B + 2, np.float32), rand(25, n * B), n, -2],
             (1,), target, [0], dict(BLOCK=B), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("target, lanes", [("gfx942", 64), ("gfx1100", 32)])
@pytest.mark.parametrize("npt, gdt", [(np.uint8, gl.uint8), (np.uint16, gl.uint16), (np.int8, gl.int8)])
def test_bitwise_not_of_narrow_unsigned_widens_right(target, lanes, npt, gdt, amd_toolchain):
    """~x of a uint8/uint16 flips its own bits only: (~x).to(int32) is 255 - x for uint8 (the
    fuzzer found -1, -4, -7 on gfx942/gfx1100: the register's upper bits were flipped too)."""
    L = gl.BlockedLayout([1], [lanes], [1], [0])

    @gt.jit
    def k(out, x):
        offs = gl.arange(0, lanes, layout=L)
        gl.store(out + offs, (~gl.load(x + offs)).to(gl.int32))
    x = (np.arange(lanes) * 3).astype(npt)
    out = np.full(lanes, -12345, np.int32)
    traced = k.trace(gl.pointer(gl.int32), gl.pointer(gdt), target=target, num_warps=1)
    amdsim.simulate(traced, target, (1, 1, 1), [out, x])
    assert np.array_equal(out, (~x).astype(np.int32))


@pytest.mark.parametrize("op", ["v_min_f32", "v_max_f32", "v_min_f64", "v_max_f64"])
def test_min_max_order_signed_zeros_as_the_isa(op):
    """-0 < +0 for v_min/v_max (the ISA's LT_NEG_ZERO / GT_NEG_ZERO) in either operand order;
    a NaN gives the other operand. Long arrays: numpy's fmin picks a zero by lane position."""
    dtype = np.float32 if op.endswith("32") else np.float64
    rng = np.random.default_rng(7)
    a = rng.choice(np.array([0.0, -0.0, 1.5, -2.0, np.nan], dtype), 300)
    b = rng.choice(np.array([0.0, -0.0, 1.5, -2.0, np.nan], dtype), 300)
    mx = "max" in op
    for x, y in ((a, b), (b, a)):
        r = amdsim.fminmax(op, x, y)
        zeros = (x == 0) & (y == 0)
        want_neg = (np.signbit(x) & np.signbit(y)) if mx else (np.signbit(x) | np.signbit(y))
        assert np.array_equal(np.signbit(r[zeros]), want_neg[zeros])
        ref = np.where(np.isnan(x), y, np.where(np.isnan(y), x, np.maximum(x, y) if mx else np.minimum(x, y)))
        assert np.array_equal(r, ref, equal_nan=True)


@pytest.mark.parametrize("target, lanes", [("gfx942", 64), ("gfx1100", 32)])
def test_min_over_warps_of_signed_zeros(target, lanes, amd_toolchain):
    """gl.min across lanes and warps of ±0 data, where copies of the tile (lanes and warps
    broadcast along the last dimension) write their partials to LDS: every copy computes the
    same -0, so no two waves write different bytes (fuzz seed 790092, "big" preset, gfx1100:
    an LDS race was reported where the simulator's min returned +0 in some lanes)."""
    L0 = gl.BlockedLayout([4, 2, 2], [2, 2, lanes // 4], [1, 2, 4], [2, 0, 1])
    L1 = gl.BlockedLayout([1, 1, 1], [2, 4, lanes // 8], [4, 1, 2], [2, 1, 0])

    @gt.jit
    def k(inp, out):
        a0 = gl.arange(0, 8, layout=gl.SliceLayout(1, gl.SliceLayout(2, L0)))
        a1 = gl.arange(0, 64, layout=gl.SliceLayout(0, gl.SliceLayout(2, L0)))
        a2 = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(1, L0)))
        o = gl.expand_dims(gl.expand_dims(a0, 1), 2) * 128 + \
            gl.expand_dims(gl.expand_dims(a1, 0), 2) * 2 + gl.expand_dims(gl.expand_dims(a2, 0), 1)
        m = gl.min(gl.convert_layout(gl.load(inp + o), L1), axis=0, keep_dims=True)
        b1 = gl.arange(0, 64, layout=gl.SliceLayout(0, gl.SliceLayout(2, L1)))
        b2 = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(1, L1)))
        gl.store(out + gl.expand_dims(gl.expand_dims(b1, 0), 2) * 2 + gl.expand_dims(gl.expand_dims(b2, 0), 1), m)
    rng = np.random.default_rng(3)
    x = np.where(rng.random(1024) < 0.5, -0.0, 0.0).astype(np.float32)
    x[rng.random(1024) < 0.05] = 1.0
    out = np.full(128, np.nan, np.float32)
    traced = k.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), target=target, num_warps=8)
    amdsim.simulate(traced, target, (1,), [x, out])
    cols = x.reshape(8, 64, 2)
    assert np.array_equal(out, cols.min(axis=0).reshape(-1))
    assert np.array_equal(np.signbit(out), np.signbit(cols).any(axis=0).reshape(-1))


@pytest.mark.parametrize("target", TARGETS)
def test_clock_reads(target):
    """gl.globaltimer() / gl.clock64(): s_memrealtime / s_memtime on CDNA, the GET_REALTIME
    message on RDNA3, each waited for (the simulator poisons the pair until lgkmcnt retires it);
    readings grow, one read a call, the loop between them."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    from test_language_ops import timed_loop
    out = np.full((2, 5), -1, np.int64)
    tk = timed_loop.trace(out, 50, num_warps=4, target=target)
    amdsim.simulate(tk, target, (2,), [out, 50])
    assert (out[:, 4] == 50).all() and (out[:, 1] > out[:, 0]).all() and (out[:, 3] > out[:, 2]).all()
    asm = tk.amdgcn(target)
    if target == "gfx1100":
        assert asm.count("s_sendmsg_rtn_b64") == 4 and "sendmsg(MSG_RTN_GET_REALTIME)" in asm
    else:
        assert asm.count("s_memrealtime") == 2 and asm.count("s_memtime") == 2
    assert tk.compile(target).binary  # the assembler takes them

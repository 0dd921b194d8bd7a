"""gfx1100 code run on an emulator we did not write (tinygrad's RDNA3 emulator, emulator.py),
against the interpreter: a misreading of the ISA that our emitter and our own simulator
(amdsim.py) share would pass test_amd_sim.py, but not this. Outputs start poisoned (NaN, or
an integer sentinel), so an element a kernel should write and does not is seen too.

Run with ``GLUON_TRACE_TINYGRAD=<tinygrad checkout> pytest -m amd_emulator
tests/backends/amd/test_amd_emulator.py`` (README, AMD backend); without the checkout the
emulator tests skip and say why."""
import os
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import dtypes as dt
from gluon_trace import fuzz
from gluon_trace import language as gl
from gluon_trace.backends.interpreter import BACKEND as INTERP

import amd_corpus as C
import amdsim
import emulator
import test_amd_layouts_sim as layouts_cases
import test_amd_sim as sim_cases
import test_amd_spill as spill_cases

TARGET = "gfx1100"
P = gl.pointer
f32, i32 = gl.float32, gl.int32


def _emulator_or_skip():
    try:
        emulator.load()
    except emulator.EmulatorMissing as e:
        pytest.skip(f"tinygrad's RDNA3 emulator is not available: {e}")


@pytest.fixture
def emu(amd_toolchain):
    _emulator_or_skip()


def poison(n, dtype):
    d = np.dtype(dtype)
    if d.kind == "f":
        return np.full(n, np.nan, d)
    return np.full(n, np.iinfo(d).min if d.kind == "i" else np.iinfo(d).max, d)


def rand(seed, n, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)


def ints(seed, n, lo, hi, dtype=np.int32):
    return np.random.default_rng(seed).integers(lo, hi, n).astype(dtype)


def run_or_xfail(tk, grid, args):
    """Run on the emulator; what it cannot do is an expected failure saying what."""
    try:
        emulator.run(tk, grid, args)
    except emulator.EmulatorCannot as e:
        pytest.xfail(str(e))


def compare(kernel, make_args, grid, outs, cx=None, nw=4, specs=None, rtol=0.0, atol=0.0):
    """Interpreter and emulator on equal fresh arguments; outputs ``outs`` must agree (exactly
    where no tolerance is given; poison left in place must be left in both)."""
    cx = cx or {}
    ref, got = make_args(), make_args()
    trace_args = specs if specs is not None else ref
    tk_ref = kernel.trace(*trace_args, **cx, num_warps=nw, target="interpreter")
    INTERP.run(tk_ref.graph, tuple(grid) + (1,) * (3 - len(grid)), ref)
    tk = kernel.trace(*(specs if specs is not None else got), **cx, num_warps=nw, target=TARGET)
    run_or_xfail(tk, grid, got)
    for k in outs:
        r, g = ref[k], got[k]
        if isinstance(outs, dict) and outs[k] == "bf16":
            r, g = dt.bf16_bits_to_f32(r), dt.bf16_bits_to_f32(g)
        if rtol or atol:
            np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64), rtol=rtol,
                                       atol=atol, equal_nan=True, err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(g, r, err_msg=f"output {k}")
    return tk


@gt.jit
def loop_branch_kernel(out_ptr, x_ptr, n_cols, BLOCK: gl.constexpr):
    """A runtime loop carrying a tile, then a branch on the program id (no reduction)."""
    L = C.blocked1d(1)
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=L)
    acc = gl.zeros([BLOCK], gl.float32, layout=L)
    p = x_ptr + row * n_cols
    for start in gl.range(0, n_cols, BLOCK):
        acc = gl.maximum(acc, gl.load(p + cols, mask=start + cols < n_cols, other=0.0)) + 0.5
        p += BLOCK
    with gl.if_(row == 0):
        acc = acc * 2.0
    with gl.else_():
        acc = acc - 1.0
    gl.store(out_ptr + row * BLOCK + cols, acc)


@gt.jit
def convert_pairs_kernel(out_ptr, x_ptr, M: gl.constexpr, N: gl.constexpr, A: gl.constexpr,
                         B: gl.constexpr, NW: gl.constexpr):
    """A tile loaded in layout A, moved through LDS into layout B, stored from B."""
    LA, LB = layouts_cases.make(A, NW), layouts_cases.make(B, NW)
    r = gl.expand_dims(gl.arange(0, M, layout=gl.SliceLayout(1, LA)), 1)
    c = gl.expand_dims(gl.arange(0, N, layout=gl.SliceLayout(0, LA)), 0)
    y = gl.convert_layout(gl.load(x_ptr + r * N + c), LB)
    rb = gl.expand_dims(gl.arange(0, M, layout=gl.SliceLayout(1, LB)), 1)
    cb = gl.expand_dims(gl.arange(0, N, layout=gl.SliceLayout(0, LB)), 0)
    gl.store(out_ptr + cb * M + rb, y - 1.0)


# (size_per_thread rows, cols, log2 lanes along rows, log2 warps along rows, order) pairs:
# copies in lanes and warps (tile smaller than the layout), repeats in registers, both orders
CONVERT_PAIRS = [
    (8, 64, (1, 4, 0, 0, (1, 0)), (4, 1, 5, 2, (0, 1)), 4),
    (32, 16, (2, 2, 3, 1, (1, 0)), (1, 1, 0, 0, (0, 1)), 2),
    (2, 16, (1, 1, 1, 1, (0, 1)), (4, 4, 6, 2, (1, 0)), 4),
    (16, 32, (1, 2, 2, 0, (1, 0)), (2, 1, 4, 0, (0, 1)), 1),
]


def _convert_case(m, n, a, b, nw):
    return (convert_pairs_kernel, lambda: [poison(m * n, np.float32), rand(30 + m, m * n)], (1,),
            [0], dict(M=m, N=n, A=a, B=b, NW=nw), dict(nw=nw))


# Each case: name -> (kernel, argument maker, grid, outputs, constexprs, options)
def _dtype_args():
    n = 200
    r = np.random.default_rng(5)
    return [poison(n, np.float16), np.full(n, 0x7FC1, np.uint16), poison(n, np.float64),
            poison(n, np.int8), poison(n, np.uint8),
            r.standard_normal(n).astype(np.float16),
            dt.f32_to_bf16_bits(r.standard_normal(n).astype(np.float32)),
            r.standard_normal(n), r.integers(-128, 127, n).astype(np.int8),
            r.integers(0, 255, n).astype(np.uint8), n]


def _int_args():
    n = 300
    y = ints(4, n, -1000, 1000)
    y[y == 0] = 7
    return [poison(n, np.int32), ints(3, n, -10**6, 10**6), y, n]


def _int64_args():
    n = 150
    r = np.random.default_rng(24)
    x = r.integers(-2**62, 2**62, n, dtype=np.int64)
    y = r.integers(-2**40, 2**40, n, dtype=np.int64)
    y[:10] = r.integers(-9, 9, 10)
    y[y == 0] = -1
    return [poison(n, np.int64), x, y, r.integers(0, 2**64 - 1, n, dtype=np.uint64), n]


def _cast_args():
    n = 256
    return [poison(n, np.int32), poison(n, np.float32), poison(n, np.int64),
            np.abs(rand(6, n, scale=1e4)), ints(7, n, -10**5, 10**5), n]


SPECS_DTYPES = [P(gl.float16), P(gl.bfloat16), P(gl.float64), P(gl.int8), P(gl.uint8)] * 2 + [i32]

CASES = {
    "add": (C.add_kernel, lambda: [poison(2500, np.float32), rand(1, 2500), rand(2, 2500), 2500],
            (3,), [0], dict(BLOCK=1024), {}),
    "add_vector": (C.add_kernel, lambda: [poison(2512, np.float32), rand(21, 2512), rand(22, 2512),
                                          2512], (3,), [0], dict(BLOCK=1024), {}),
    "math": (C.math_kernel, lambda: [poison(700, np.float32), rand(3, 700, scale=3.0), 700],
             (2,), [0], dict(BLOCK=512), dict(rtol=2e-5, atol=2e-5)),
    "int": (C.int_kernel, _int_args, (2,), [0], dict(BLOCK=256), {}),
    "int64": (sim_cases.int64_kernel, _int64_args, (2,), [0], dict(BLOCK=128), {}),
    "dtypes": (C.dtype_kernel, _dtype_args, (1,), {0: "f", 1: "bf16", 2: "f", 3: "i", 4: "i"},
               dict(BLOCK=256), dict(specs=SPECS_DTYPES, rtol=2e-3)),
    "casts": (C.cast_kernel, _cast_args, (1,), [0, 1, 2], dict(BLOCK=256), {}),
    "scalar": (C.scalar_kernel, lambda: [poison(10, np.float32), rand(8, 5), 1.5, 7, 100],
               (5,), [0], {}, {}),
    "tile2d": (C.tile2d_kernel, lambda: [poison(45 * 30, np.float32), rand(9, 45 * 30), rand(10, 30),
                                         45, 30, 30], (2,), [0], dict(BM=32, BN=32), {}),
    "reduce": (C.reduce_kernel, lambda: [poison(64, np.float32), poison(32, np.float32),
                                         rand(11, 30 * 50), 30, 50], (1,), [0, 1],
               dict(BM=32, BN=64), {}),
    "argmax": (C.argmax_kernel, lambda: [poison(4, np.int32), np.round(rand(12, 1200, scale=3)), 300],
               (4,), [0], dict(BLOCK=512), {}),
    "cumsum": (C.cumsum_kernel, lambda: [poison(200, np.float32), rand(13, 200), 200], (1,), [0],
               dict(BLOCK=256), {}),
    "convert": (C.convert_kernel, lambda: [poison(27 * 32, np.float32), rand(14, 27 * 32), 27, 32],
                (1,), [0], dict(BM=32, BN=32), {}),
    "loop": (C.loop_kernel, lambda: [poison(3, np.float32), rand(15, 3 * 700), 700], (3,), [0],
             dict(BLOCK=256), {}),
    "control": (sim_cases.control_kernel, lambda: [poison(258, np.float32), rand(25, 5 * 256), 5, -2],
                (1,), [0], dict(BLOCK=256), dict(rtol=1e-6, atol=1e-5)),
    "loop_branch": (loop_branch_kernel, lambda: [poison(3 * 256, np.float32), rand(26, 3 * 700), 700],
                    (3,), [0], dict(BLOCK=256), {}),
    "reshape": (layouts_cases.reshape_kernel, lambda: [poison(512, np.float32), rand(27, 512)], (1,),
                [0], dict(M=16, N=32), dict(nw=2)),
    **{f"convert_{k}": _convert_case(*p) for k, p in enumerate(CONVERT_PAIRS)},
    "softmax": (C.softmax_kernel, lambda: [poison(3000, np.float32), rand(17, 3000, scale=4), 1000,
                                           1000], (3,), [0], dict(BLOCK=1024),
                dict(rtol=1e-5, atol=1e-8)),
    "layernorm": (C.layernorm_kernel, lambda: [poison(600, np.float32), rand(18, 600), rand(19, 300),
                                               rand(20, 300), 300, 1e-5], (2,), [0],
                  dict(BLOCK=512), dict(rtol=1e-5, atol=1e-6)),
    "spill": (spill_cases.four_wide_tiles, lambda: [poison(4096, np.float32)] +
              [rand(s, 4096) for s in range(4)], (1,), [0], dict(BLOCK=4096),
              dict(nw=1, rtol=1e-6)),
}


@pytest.mark.amd_emulator
@pytest.mark.parametrize("name", list(CASES))
def test_corpus_kernel_on_the_emulator(emu, name):
    kernel, make_args, grid, outs, cx, opts = CASES[name]
    compare(kernel, make_args, grid, outs, cx, **opts)


@pytest.mark.amd_emulator
def test_atomics_on_the_emulator(emu):
    """Atomics: order-free results must agree, order-dependent ones be consistent."""
    n = 600

    def args():
        return [np.zeros(16, np.int32), np.zeros(2, np.float32), np.zeros(3, np.int32),
                ints(16, n, 0, 1000), n]
    ref, got = args(), args()
    C.atomic_kernel[(3,)](*ref, BLOCK=256, backend="interpreter")
    run_or_xfail(C.atomic_kernel.trace(*got, BLOCK=256, target=TARGET), (3,), got)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-6)
    assert got[2][0] == ref[2][0] == 3 and got[2][1] == ref[2][1] and 0 <= got[2][2] < 3


@pytest.mark.amd_emulator
def test_the_emulator_sees_a_broken_kernel(emu, monkeypatch, tmp_path):
    """The comparison can fail: with b * 2.0 assembled as b * 4.0 (the inline constant
    swapped in the text handed to the assembler) the emulator's result differs."""
    from gluon_trace.backends.amd import assembler
    real = assembler.assemble

    def broken(text, target, kernel):
        assert "v_mul_f32" in text and ", 2.0," in text, "add_kernel has no b * 2.0 to break"
        return real(text.replace(", 2.0,", ", 4.0,"), target, kernel)
    monkeypatch.setattr(assembler, "assemble", broken)
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path))  # build it anew
    with pytest.raises(AssertionError, match="output 0"):
        compare(C.add_kernel, CASES["add"][1], (3,), [0], dict(BLOCK=1024))


def test_a_missing_checkout_is_reported_with_what_to_do(monkeypatch):
    monkeypatch.setattr(emulator, "_EMU", None)
    monkeypatch.delenv(emulator.ENV, raising=False)
    with pytest.raises(emulator.EmulatorMissing, match="GLUON_TRACE_TINYGRAD is not set"):
        emulator.load()
    monkeypatch.setenv(emulator.ENV, "/nonexistent/tinygrad")
    with pytest.raises(emulator.EmulatorMissing, match="has no test/mockgpu/amd/emu.py"):
        emulator.load()


def test_a_test_package_imported_from_elsewhere_is_reported(monkeypatch, tmp_path):
    """tinygrad keeps the emulator in its `test` package; another one already imported (the
    standard library's, say) would shadow it."""
    import types
    (tmp_path / "test" / "mockgpu" / "amd").mkdir(parents=True)
    (tmp_path / "test" / "mockgpu" / "amd" / "emu.py").write_text("")
    other = types.ModuleType("test")
    other.__file__ = "/usr/lib/python3/test/__init__.py"
    monkeypatch.setitem(sys.modules, "test", other)
    monkeypatch.setattr(emulator, "_EMU", None)
    monkeypatch.setenv(emulator.ENV, str(tmp_path))
    with pytest.raises(emulator.EmulatorMissing, match="already imported"):
        emulator.load()


def test_a_write_past_a_buffer_is_caught_by_its_guard_bytes():
    a = np.arange(4, dtype=np.float32)
    buf = emulator._HostBuffer(a)
    buf.raw[emulator.GUARD + a.nbytes] = 0  # the byte just past the array
    with pytest.raises(AssertionError, match="kernel wrote outside argument out"):
        buf.copy_back("out")
    buf = emulator._HostBuffer(a)
    buf.raw[emulator.GUARD:emulator.GUARD + 4] = np.frombuffer(np.float32(7).tobytes(), np.uint8)
    buf.copy_back("out")
    assert a[0] == 7 and a[1] == 1


@gt.jit
def four_wide_tiles_two_warps(out_ptr, a_ptr, b_ptr, c_ptr, d_ptr, BLOCK: gl.constexpr):
    lay = gl.BlockedLayout([1], [gl.threads_per_warp()], [2], [0])
    offs = gl.arange(0, BLOCK, layout=lay)
    a, b = gl.load(a_ptr + offs), gl.load(b_ptr + offs)
    c, d = gl.load(c_ptr + offs), gl.load(d_ptr + offs)
    gl.store(out_ptr + offs, (a * b + c * d) - a * d + (b - c))


@pytest.mark.amd_emulator
def test_a_spilling_kernel_with_several_warps_is_refused_saying_why(emu):
    n = 2 * 32 * 128  # two warps, 4 x 128 live values per lane: spills
    args = [poison(n, np.float32)] + [rand(s, n) for s in range(4)]
    tk = four_wide_tiles_two_warps.trace(*args, BLOCK=n, num_warps=2, target=TARGET)
    assert tk.compile(TARGET).spill_bytes > 0
    with pytest.raises(emulator.EmulatorCannot, match="one scratch area"):
        emulator.run(tk, (1,), args)


@gt.jit
def saturating_casts(o32, o8, x_ptr, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=C.blocked1d(1, 1))
    x = gl.load(x_ptr + offs)
    gl.store(o32 + offs, x.to(gl.int32))
    gl.store(o8 + offs, x.to(gl.int8))


@pytest.mark.amd_emulator
@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "emulator bug: its V_CVT_I32_F32 gives INT_MIN for NaN, +inf and values above INT_MAX "
    "(the host's truncating conversion) where the ISA saturates and maps NaN to 0"))
def test_float_to_int_saturates_and_maps_nan_to_zero(emu):
    x = np.zeros(32, np.float32)
    x[:8] = [np.nan, np.inf, -np.inf, 3e9, -3e9, 1.5, -2.5, 300.0]
    compare(saturating_casts, lambda: [poison(32, np.int32), poison(32, np.int8), x.copy()], (1,),
            [0, 1], dict(BLOCK=32), nw=1)


N_FUZZ = int(os.environ.get("GLUON_TRACE_FUZZ_EMULATOR", "30"))
SEED0 = int(os.environ.get("GLUON_TRACE_FUZZ_EMULATOR_SEED", "0"))


def run_program(prog, execute) -> list:
    """Mismatches of one fuzzer program run by ``execute(traced, grid, args)`` against the
    numpy reference's bounds (which allow any summation order and the math instructions)."""
    inputs = fuzz.make_inputs(prog)
    args, poison = fuzz.kernel_args(prog, inputs)
    execute(fuzz.trace_program(prog, TARGET), (1,), args)
    ref = fuzz.evaluate(prog, inputs, "bounded")
    return fuzz.mismatches(prog, fuzz.outputs_of(prog, args), ref, poison)


@pytest.mark.amd_emulator
def test_random_programs_on_the_emulator(emu):
    """GLUON_TRACE_FUZZ_EMULATOR fuzzer programs (default 30, seeds from
    GLUON_TRACE_FUZZ_EMULATOR_SEED, default 0) on the emulator.
    A disagreement is run on our simulator too: "emulator alone" is its bug or a misreading
    of the ISA our emitter and simulator share (to be settled by reading the ISA guide);
    "both" is our bug. Each is saved as a reproducer under .fuzz_failures/amd_emulator/."""
    config = fuzz.FuzzConfig(warp_size=32)
    directory = os.path.join(fuzz.failure_dir(), "amd_emulator")
    failures, cannot = [], 0
    for seed in range(SEED0, SEED0 + N_FUZZ):
        prog = fuzz.random_program(seed, config)
        try:
            msgs = run_program(prog, emulator.run)
        except emulator.EmulatorCannot:
            cannot += 1
            continue
        if msgs:
            ours = run_program(prog, lambda tk, grid, args: amdsim.simulate(tk, TARGET, grid, args))
            path = fuzz.save_reproducer(prog, [("gfx1100 emulator", m) for m in msgs], directory,
                                        name=f"seed_{seed}")
            who = "both" if ours else "emulator alone"
            failures.append(f"seed {seed} ({who}): {msgs[0][:300]}\n    reproducer: {path}")
    ran = N_FUZZ - cannot
    assert cannot <= N_FUZZ // 2, f"the emulator could run only {ran} of {N_FUZZ} programs"
    assert not failures, f"{len(failures)} of {ran} programs disagree:\n" + "\n".join(failures)


@gt.jit
def fma64_kernel(out_ptr, a_ptr, b_ptr, c_ptr, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=C.blocked1d(1, 1))
    a, b, c = gl.load(a_ptr + offs), gl.load(b_ptr + offs), gl.load(c_ptr + offs)
    gl.store(out_ptr + offs, gl.fma(a, b, c))


@pytest.mark.amd_emulator
# found by the emulator (fuzzer seed 318): the interpreter's float64 fma fell back to unfused
# a * b + c when the product overflowed (NaN for 1e200 * 1e200 - inf where v_fma_f64 gives -inf);
# fixed in the interpreter, so this runs as a plain test now
def test_float64_fma_with_an_overflowing_product_is_fused(emu):
    def args():
        a, b, c = np.ones(32), np.ones(32), np.zeros(32)
        a[:3], b[:3], c[:3] = [1e200, 1e200, 3.0], [1e200, -1e200, 5.0], [-np.inf, np.inf, 1.0]
        return [poison(32, np.float64), a, b, c]
    compare(fma64_kernel, args, (1,), [0], dict(BLOCK=32), nw=1)

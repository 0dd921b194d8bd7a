"""IEEE division by a shared divisor (backends/nvidia/rules_division.py): the method is
checked bit for bit against numpy's correctly rounded division, then the emitted PTX in
the simulator against the interpreter on inputs that take both of its paths."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402
from gluon_trace.backends.nvidia import rules_division as rd  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

F32 = np.float32


def bits(x):
    return np.abs(x).view(np.uint32)


def safe(a, b):
    """The emitted range check, in numpy."""
    ab, bb = bits(a).astype(np.int64), bits(b).astype(np.int64)
    lo = np.maximum(bb - rd.BELOW, rd.A_LO)
    hi = np.minimum(bb + rd.ABOVE, rd.A_HI)
    return (bb >= rd.B_LO) & (bb < rd.B_HI) & ((ab == 0) | ((ab >= lo) & (ab < hi)))


def markstein(a, b):
    with np.errstate(all="ignore"):
        y = F32(1) / b
        q0 = a * y
        r = ptxsim.fma_f32(-q0, b, a)
        return np.where(r == 0, q0, ptxsim.fma_f32(r, y, q0))


def log_uniform(rng, n, lo, hi):
    x = np.exp2(rng.uniform(lo, hi, n)).astype(F32)
    return x * rng.choice(F32([-1, 1]), n)


def adversarial(rng, n):
    """Significands at the edges: all ones, just above one, exact quotients, midpoints."""
    e = rng.integers(-60, 60, n).astype(np.float64)
    m = rng.choice(np.array([1.0, 2 - 2.0 ** -23, 1 + 2.0 ** -23, 1.5, 1 + 2.0 ** -12, 2 - 2.0 ** -12]), n)
    jitter = rng.integers(-3, 4, n) * 2.0 ** -23
    return ((m + jitter) * np.exp2(e)).astype(F32)


@pytest.mark.parametrize("seed", range(4))
def test_the_method_is_correctly_rounded_in_its_window(seed):
    rng = np.random.default_rng(seed)
    n = 1 << 20
    zeros = rng.choice(F32([0.0, -0.0]), 1024)
    a = np.concatenate([log_uniform(rng, n, -101.9, 125.9), adversarial(rng, n), log_uniform(rng, n, -20, 20),
                        zeros])
    b = np.concatenate([log_uniform(rng, n, -125.9, 125.9), adversarial(rng, n), adversarial(rng, n),
                        log_uniform(rng, 1024, -100, 100)])
    q = markstein(a, b)
    ok = safe(a, b)
    assert ok.mean() > 0.5  # the window covers most of these draws
    with np.errstate(all="ignore"):
        want = a / b
    bad = np.flatnonzero(ok & (q.view(np.uint32) != want.view(np.uint32)))
    assert bad.size == 0, [(float(a[i]), float(b[i]), float(q[i]), float(want[i])) for i in bad[:5]]


def test_the_window_excludes_what_the_method_gets_wrong():
    """Outside the window the method does fail, so the check is needed: find such cases."""
    rng = np.random.default_rng(7)
    n = 1 << 18
    a = np.concatenate([log_uniform(rng, n, -149, -120), F32([0.0, -0.0, np.inf, np.nan, 1.0, 1.0])])
    b = np.concatenate([log_uniform(rng, n, -3, 3), F32([3.0, 3.0, 1.0, 1.0, 0.0, np.inf])])
    q = markstein(a, b)
    with np.errstate(all="ignore"):
        want = a / b
    wrong = q.view(np.uint32) != want.view(np.uint32)
    assert wrong.any()  # subnormal quotients, -0 / b, 1 / 0 ...
    assert not (wrong & safe(a, b)).any()


@gt.jit
def row_divide(out_ptr, num_ptr, den_ptr, BLOCK: gl.constexpr, ROWS: gl.constexpr):
    L = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, BLOCK, layout=gl.SliceLayout(0, L))
    offs = r[:, None] * BLOCK + c[None, :]
    x = gl.load(num_ptr + offs)
    d = gl.load(den_ptr + r)
    gl.store(out_ptr + offs, x / d[:, None])


@gt.jit
def elementwise_divide(out_ptr, a_ptr, b_ptr, BLOCK: gl.constexpr):
    L = gl.BlockedLayout([4], [32], [4], [0])
    i = gl.arange(0, BLOCK, layout=L)
    gl.store(out_ptr + i, gl.load(a_ptr + i) / gl.load(b_ptr + i))


def _trace_rows(dtype=gl.float32, block=256):
    return row_divide.trace(gl.pointer(dtype), gl.pointer(dtype), gl.pointer(dtype), BLOCK=block, ROWS=16,
                            num_warps=4, target="sm_90")


def test_shared_divisors_use_one_reciprocal_and_one_branch():
    text, _, _ = emit(_trace_rows().graph, "sm_90")
    # 16 rows over 4 warps x 4 lanes: each thread holds 1 row of 32 elements -> 1 divisor
    assert text.count("rcp.rn.f32") == 1
    assert text.count("div.rn.f32") == 32  # the fallback, behind one branch
    assert text.count("bra ") + text.count("bra.uni ") == 2
    short, _, _ = emit(_trace_rows(block=64).graph, "sm_90")  # 8 per divisor: below MIN_SHARE
    assert "rcp.rn.f32" not in short and short.count("div.rn.f32") == 8
    text2, _, _ = emit(elementwise_divide.trace(gl.pointer(gl.float32), gl.pointer(gl.float32),
                                                gl.pointer(gl.float32), BLOCK=512, target="sm_90").graph, "sm_90")
    assert "rcp.rn.f32" not in text2 and text2.count("div.rn.f32") == 4  # distinct divisors: plain div.rn


def _special_rows(rng):
    num = rng.standard_normal((16, 256)).astype(F32)
    den = np.abs(rng.standard_normal(16)).astype(F32) + F32(0.5)
    num[1, :8] = F32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3e-39, 3e38])  # numerators out of the window
    den[2], den[3], den[4], den[5], den[6] = 0.0, np.inf, 1e-40, 3e37, np.nan      # divisors out of it
    num[7] *= F32(1e-30)                                                        # quotients near the edge
    den[8] = F32(1e-36)
    return num, den


@pytest.mark.parametrize("dtype", [gl.float32, gl.float16])
def test_simulated_division_matches_the_interpreter_bit_for_bit(dtype):
    rng = np.random.default_rng(3)
    num, den = _special_rows(rng)
    if dtype == gl.float16:
        with np.errstate(over="ignore"):
            num, den = num.astype(np.float16), den.astype(np.float16)
    graph = _trace_rows(dtype).graph
    text, _, smem = emit(graph, "sm_90")
    ref = np.full(num.shape, np.nan, num.dtype)
    sim = ref.copy()
    with np.errstate(all="ignore"):
        get("interpreter").run(graph, (1, 1, 1), [ref, num.copy(), den.copy()])
        ptxsim.run(text, (1, 1, 1), [sim, num.copy(), den.copy()], smem)
        want = num / den[:, None]
    np.testing.assert_array_equal(ref.view(np.uint16 if dtype == gl.float16 else np.uint32),
                                  want.view(np.uint16 if dtype == gl.float16 else np.uint32))
    np.testing.assert_array_equal(sim.view(np.uint16 if dtype == gl.float16 else np.uint32),
                                  ref.view(np.uint16 if dtype == gl.float16 else np.uint32))

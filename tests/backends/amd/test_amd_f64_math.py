"""float64 exp/exp2/log/log2/sin/cos/erf on AMD: lower() expands them into core ops
(gluon_trace.decompose); the kernels emit, assemble and link for every target and the
simulated machine code agrees with the interpreter (numpy's functions) within the
expansions' ulp bounds, on fresh inputs over the whole double range (huge sin/cos
arguments take the Payne-Hanek branch)."""
import os
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

import amdsim

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import decompose_cases as C  # noqa: E402

TARGETS = ["gfx90a", "gfx942", "gfx1100"]
FN = {"exp": gl.exp, "exp2": gl.exp2, "log": gl.log, "log2": gl.log2, "sin": gl.sin, "cos": gl.cos,
      "erf": gl.erf}


pytestmark = pytest.mark.usefixtures("amd_toolchain")


@gt.jit
def f64_math(out, x, n, OP: gl.constexpr, BLOCK: gl.constexpr):
    tpw = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([BLOCK // (4 * tpw)], [tpw], [4], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    m = offs < n
    v = gl.load(x + offs, mask=m, other=1.0)
    gl.store(out + offs, FN[OP](v), mask=m)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", C.OPS)
def test_f64_math_matches_interpreter(op, target, rng):
    x = C.inputs(op, rng, 700)
    n = x.size
    ref = np.full(n, np.nan)
    f64_math[(-(-n // 256),)](ref, x, n, OP=op, BLOCK=256, num_warps=4, backend="interpreter")
    got = np.full(n, 1234.5)
    tk = f64_math.trace(got, x, n, OP=op, BLOCK=256, num_warps=4, target=target)
    amdsim.simulate(tk, target, (-(-n // 256),), [got, x.copy(), n])
    u = C.ulps(got, ref)
    i = int(np.argmax(u))
    assert u.max() <= C.BOUND[op], f"{op} on {target}: x={x[i]!r} got {got[i]!r} want {ref[i]!r}"


def test_scalar_and_loop_f64_math_on_amd(rng):
    """A uniform (scalar) value, a loop body and a combine body: the expansion keeps
    scalars scalar (a huge one takes the Payne-Hanek branch) and rewrites regions."""
    @gt.jit
    def k(out, x, sp, n):
        lay = gl.BlockedLayout([2], [gl.threads_per_warp()], [4], [0])
        offs = gl.arange(0, 8 * gl.threads_per_warp(), layout=lay)
        v = gl.load(x + offs, mask=offs < n, other=0.25)
        s = gl.load(sp)                                # a float64 scalar
        acc = v * 0.0 + gl.sin(s)
        for i in gl.range(0, 2):
            acc += gl.cos(v + i.to(gl.float64)) * gl.exp(s * 1e-7)
        # a combine body: its scalars are per element (sin's huge-argument path runs inline)
        r = gl.reduce(acc, 0, lambda a, b: gl.maximum(a, b) + gl.sin(b * 1e9) * 0.0)
        gl.store(out + offs, acc + r, mask=offs < n)
    for target in ("gfx942", "gfx1100"):
        n = 200
        x = rng.uniform(-4, 4, n)
        for s in (rng.uniform(-3, 3), rng.uniform(-3e7, 3e7)):
            sp = np.array([s])
            ref = np.full(n, np.nan)
            k[(1,)](ref, x, sp, n, num_warps=4, backend="interpreter")
            got = np.full(n, np.nan)
            tk = k.trace(got, x, sp, n, num_warps=4, target=target)
            amdsim.simulate(tk, target, (1,), [got, x.copy(), sp, n])
            # acc + r adds terms up to ~20 in size, each within an ulp: where they cancel the
            # result is small but its error is an ulp of the terms (~3.6e-15 each), not of it
            np.testing.assert_allclose(got, ref, rtol=1e-14, atol=5e-14)


def test_an_unexpanded_f64_exp_is_an_error_at_its_line(monkeypatch):
    """lower() always expands; without the expansion the emitter says so at the user's line."""
    from gluon_trace import decompose
    from gluon_trace.backends.amd.compiler import lower

    @gt.jit
    def k(o, x_ptr):
        gl.store(o, gl.exp(gl.load(x_ptr)))  # EXP64

    g = k.trace(gl.pointer(gl.float64), gl.pointer(gl.float64), num_warps=1, target="gfx942").graph
    assert "v_fma_f64" in lower(g, "gfx942").text
    monkeypatch.setattr(decompose, "expand_math", lambda graph, names: graph)
    with pytest.raises(gt.CompileError, match="float64 exp reached the AMD emitter unexpanded") as e:
        lower(g, "gfx942")
    assert "EXP64" in str(e.value)

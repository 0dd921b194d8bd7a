"""float64 exp/exp2/log/log2/sin/cos/erf on NVIDIA: emit() expands them into core ops
(gluon_trace.decompose, the code the AMD backend gets too); ptxas accepts the kernels
for sm_80 and sm_90a without spills, and the PTX simulator agrees with the interpreter
(numpy's functions) within the expansions' ulp bounds on fresh inputs over the whole
double range (huge sin/cos arguments take the Payne-Hanek branch)."""
import os
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backend import get
from gluon_trace.errors import CompileError

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import decompose_cases as C  # noqa: E402
import ptxsim  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia import ptxas  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

try:
    ptxas.locate()
    WHY = None
except CompileError as e:  # pragma: no cover
    WHY = str(e)

FN = {"exp": gl.exp, "exp2": gl.exp2, "log": gl.log, "log2": gl.log2, "sin": gl.sin, "cos": gl.cos,
      "erf": gl.erf}
L = gl.BlockedLayout([4], [32], [4], [0])


@gt.jit
def f64_math(out, x, n, OP: gl.constexpr):
    offs = gl.program_id(0) * 512 + gl.arange(0, 512, layout=L)
    m = offs < n
    v = gl.load(x + offs, mask=m, other=1.0)
    gl.store(out + offs, FN[OP](v), mask=m)


@pytest.fixture(autouse=True, scope="module")
def _fresh_cache(tmp_path_factory):
    old = os.environ.get("GLUON_TRACE_CACHE_DIR")
    os.environ["GLUON_TRACE_CACHE_DIR"] = str(tmp_path_factory.mktemp("gtcache-f64"))
    yield
    if old is None:
        os.environ.pop("GLUON_TRACE_CACHE_DIR", None)
    else:
        os.environ["GLUON_TRACE_CACHE_DIR"] = old


def _trace(op, target="sm_90"):
    P = gl.pointer(gl.float64)
    return f64_math.trace(P, P, gl.int32, OP=op, target=target)


@pytest.mark.skipif(WHY is not None, reason=f"ptxas not found: {WHY}")
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_f64_math_assembles(target):
    from batch import assemble_many
    ptxs = [_trace(op, target).ptx(target) for op in C.OPS]
    for op, p in zip(C.OPS, ptxs):
        assert ".loc" in p and "cvt.rn.f32.f64" not in p, op  # no float32 shortcut left
    errors, spilled = assemble_many(ptxs, target)
    assert not errors, errors
    assert not any(spilled.values()), spilled


@pytest.mark.parametrize("op", C.OPS)
def test_f64_math_simulated_matches_interpreter(op, rng):
    x = C.inputs(op, rng, 900)
    n = x.size
    grid = (-(-n // 512), 1, 1)
    g = _trace(op).graph
    ref = np.full(n, np.nan)
    get("interpreter").run(g, grid, [ref, x.copy(), n])
    text, _, smem = emit(g, "sm_90")
    got = np.full(n, 1234.5)
    with np.errstate(all="ignore"):
        ptxsim.run(text, grid, [got, x.copy(), n], smem)
    u = C.ulps(got, ref)
    i = int(np.argmax(u))
    assert u.max() <= C.BOUND[op], f"{op}: x={x[i]!r} got {got[i]!r} want {ref[i]!r}"


@gt.jit
def scalar_loop(out, x, sp, n):
    offs = gl.arange(0, 512, layout=L)
    v = gl.load(x + offs, mask=offs < n, other=0.25)
    s = gl.load(sp)                                  # a float64 scalar
    acc = v * 0.0 + gl.sin(s) + gl.erf(s * 1e-7)
    for i in gl.range(0, 2):
        acc += gl.cos(v + i.to(gl.float64)) * gl.log2(gl.abs(s) + 2.0)
    # a combine body: its scalars are per element (sin's huge-argument path runs inline)
    r = gl.reduce(acc, 0, lambda a, b: gl.maximum(a, b) + gl.sin(b * 1e9) * 0.0)
    gl.store(out + offs, acc, mask=offs < n)
    gl.store(out + 512, r)


def test_f64_math_scalars_loops_and_combine_bodies(rng):
    n = 300
    x = rng.uniform(-4, 4, n)
    g = scalar_loop.trace(gl.pointer(gl.float64), gl.pointer(gl.float64), gl.pointer(gl.float64),
                          gl.int32, target="sm_90").graph
    text, _, smem = emit(g, "sm_90")
    for s in (rng.uniform(-3, 3), rng.uniform(-3e7, 3e7)):
        sp = np.array([s])
        ref = np.full(513, np.nan)
        get("interpreter").run(g, (1, 1, 1), [ref, x.copy(), sp, n])
        got = np.full(513, np.nan)
        with np.errstate(all="ignore"):
            ptxsim.run(text, (1, 1, 1), [got, x.copy(), sp, n], smem)
        # each element sums terms of size up to ~10 (cos * log2), each within 1 ulp: a few ulp of
        # 10 absolute where they cancel (seen: 3.6e-15 at -0.215 for a random draw)
        np.testing.assert_allclose(got[:n], ref[:n], rtol=1e-14, atol=2e-14)
        np.testing.assert_allclose(got[512], ref[512], rtol=1e-12, atol=2e-14)


def test_an_unexpanded_f64_sin_is_an_error_at_its_line():
    """emit() always expands; the emitter handed the raw graph says so at the user's line."""
    from gluon_trace.backends.nvidia import _rules
    from gluon_trace.backends.nvidia.emitter import Emitter
    _rules()

    @gt.jit
    def k(o, x_ptr):
        gl.store(o, gl.sin(gl.load(x_ptr)))  # SIN64

    g = k.trace(gl.pointer(gl.float64), gl.pointer(gl.float64), target="sm_90").graph
    with pytest.raises(CompileError, match="float64 sin reached the NVIDIA emitter unexpanded") as e:
        Emitter(g, "sm_90").render()
    assert "SIN64" in str(e.value)

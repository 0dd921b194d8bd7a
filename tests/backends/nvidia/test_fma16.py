"""``gl.fma`` on float16/bfloat16 rounds the exact a*b+c once (fma.rn.f16 / fma.rn.bf16), as the
interpreter does: on the PTX simulator and on the GPU, bit for bit, on fresh random values
spanning the types' ranges, subnormals, and the case the GPU fuzzer found (seed 61649): in bf16,
fma(-1.16e18, -6, -6) lies just below a tie; a detour through fma.rn.f64 lost the -6 and rounded
the tie up."""
import os
import sys

import ml_dtypes
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backend import get

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

L = gl.BlockedLayout([2], [32], [4], [0])
N = 256
TYPES = {"bfloat16": (gl.bfloat16, ml_dtypes.bfloat16), "float16": (gl.float16, np.float16)}


@gt.jit
def fma_k(a_ptr, b_ptr, c_ptr, out_ptr):
    offs = gl.arange(0, N, layout=L)
    gl.store(out_ptr + offs, gl.fma(gl.load(a_ptr + offs), gl.load(b_ptr + offs), gl.load(c_ptr + offs)))


def _inputs(name, rng):
    npt = TYPES[name][1]
    scale = 1e18 if name == "bfloat16" else 30.0
    a, b, c = ((rng.standard_normal(N) * scale ** rng.uniform(0, 1, N)).astype(np.float32) for _ in range(3))
    c[: N // 4] = a[: N // 4] * b[: N // 4] * rng.uniform(-1, 1, N // 4).astype(np.float32) * 1e-3  # tiny addends
    if name == "float16":
        a[N // 4: N // 2] = rng.uniform(-6e-5, 6e-5, N // 4)  # subnormal products and sums
    else:
        a[0], b[0], c[0] = -1157965255398276637.0, -6.0, -6.0
    return [x.astype(npt) for x in (a, b, c)]


def _run(runner, name, a, b, c):
    out = np.full(N, np.nan, TYPES[name][1])
    args = [a.copy(), b.copy(), c.copy(), out]
    with np.errstate(all="ignore"):
        runner(args)
    return args[3].view(np.uint16)


@pytest.mark.parametrize("name", list(TYPES))
def test_fma_16bit_rounds_once_on_the_simulator(name):
    a, b, c = _inputs(name, np.random.default_rng(len(name)))
    gt_t = gl.pointer(TYPES[name][0])
    g = fma_k.trace(gt_t, gt_t, gt_t, gt_t, target="sm_90").graph
    text, _, smem = emit(g, "sm_90")
    assert f"fma.rn.{'bf16' if name == 'bfloat16' else 'f16'} " in text and "f64" not in text
    ref = _run(lambda x: get("interpreter").run(g, (1, 1, 1), x), name, a, b, c)
    sim = _run(lambda x: ptxsim.run(text, (1, 1, 1), x, smem), name, a, b, c)
    np.testing.assert_array_equal(sim, ref)
    if name == "bfloat16":  # the fuzzer's case: just below the tie 193.5 * 2**55, down to 193
        assert np.float32(ref[:1].view(ml_dtypes.bfloat16)[0]) == np.float32(193 * 2.0 ** 55)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(TYPES))
def test_gpu_fma_16bit_rounds_once(name):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    a, b, c = _inputs(name, np.random.default_rng())
    gt_t = gl.pointer(TYPES[name][0])
    g = fma_k.trace(gt_t, gt_t, gt_t, gt_t, target="sm_90").graph
    ref = _run(lambda x: get("interpreter").run(g, (1, 1, 1), x), name, a, b, c)
    tt = {"bfloat16": torch.bfloat16, "float16": torch.float16}[name]
    dev = [torch.from_numpy(x.view(np.int16).copy()).cuda().view(tt) for x in (a, b, c)]
    out = torch.full((N,), float("nan"), dtype=tt, device="cuda")
    fma_k[(1,)](*dev, out, backend="nvidia")
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.view(torch.int16).cpu().numpy().view(np.uint16), ref)

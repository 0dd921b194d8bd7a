"""fp8 on NVIDIA (backends/nvidia/fp8.py): loads, stores, conversions and shared memory of
float8e4nv / float8e5, run on the PTX simulator against the interpreter on edge and random
values (the simulator's cvt follows the PTX ISA, rounding by gluon_trace.fp8, which is checked
against ml_dtypes); the fp8 GEMM's wgmma and mma.sync assembled by ptxas; sm_80 refused at the
user's line. GPU: the same kernels and the fp8 GEMM against torch."""
import os
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import CompileError
from gluon_trace.kernels.matmul_hopper import matmul_hopper
from gluon_trace.nvidia.hopper import TensorDescriptor

ml_dtypes = pytest.importorskip("ml_dtypes")
pytest.importorskip("gluon_trace.backends.nvidia")
sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

from gluon_trace.backend import get  # noqa: E402
from gluon_trace.backends.nvidia import ptxas  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

FORMATS = [("float8e4nv", ml_dtypes.float8_e4m3fn), ("float8e5", ml_dtypes.float8_e5m2)]


@gt.jit
def round_trip(out_ptr, q_ptr, in_ptr, F8: gl.constexpr, VEC: gl.constexpr):
    """q = x.to(fp8) stored as bytes; out = q loaded back, widened to float32."""
    L = gl.BlockedLayout([VEC], [32], [4], [0])
    offs = gl.arange(0, 128 * VEC, layout=L)
    x = gl.load(in_ptr + offs)
    gl.store(q_ptr + offs, x.to(F8))
    gl.store(out_ptr + offs, gl.load(q_ptr + offs).to(gl.float32) * 1.0)


@gt.jit
def through_shared(out_ptr, in_ptr, N: gl.constexpr):
    """fp8 bytes into shared memory in one layout, out in a transposed one, then to float32."""
    A = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    B = gl.BlockedLayout([4, 1], [4, 8], [1, 4], [0, 1])
    r = gl.arange(0, N, layout=gl.SliceLayout(1, A))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, A))
    x = gl.load(in_ptr + r[:, None] * N + c[None, :])
    buf = gl.allocate_shared_memory(x.dtype, [N, N], gl.SwizzledSharedLayout(4, 1, 4, [1, 0]))
    buf.store(x)
    y = buf.load(B)
    rb = gl.arange(0, N, layout=gl.SliceLayout(1, B))
    cb = gl.arange(0, N, layout=gl.SliceLayout(0, B))
    gl.store(out_ptr + rb[:, None] * N + cb[None, :], y.to(gl.float32))


def _edges(n, rng, fmt):
    big = 448.0 if fmt == "float8e4nv" else 57344.0
    x = (rng.standard_normal(n) * rng.choice([1e-3, 1.0, 30.0, 1e3], n)).astype(np.float32)
    edge = [0.0, -0.0, np.inf, -np.inf, big, -big, big * 1.06, 1e30, -1e30, 2.0 ** -9, 2.0 ** -17,
            1.5 * 2.0 ** -7, 0.0625 + 2.0 ** -8]
    x[:len(edge)] = edge
    return x


def _both(graph, grid, args, smem_target="sm_90"):
    text, _, smem = emit(graph, smem_target)
    ref = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    sim = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    with np.errstate(all="ignore"):
        get("interpreter").run(graph, grid, ref)
        ptxsim.run(text, grid, sim, smem)
    return ref, sim, text


@pytest.mark.parametrize("fmt, ml", FORMATS)
@pytest.mark.parametrize("vec", [1, 4, 16])
def test_round_trip_on_the_simulator_matches_the_interpreter(fmt, ml, vec):
    rng = np.random.default_rng(vec)
    x = _edges(128 * vec, rng, fmt)
    out = np.full(x.shape, np.nan, np.float32)
    q = np.full(x.shape, 0x5A, np.uint8).view(ml)
    f8 = getattr(gl, fmt)
    g = round_trip.trace(out, q, x, F8=f8, VEC=vec, target="sm_90").graph
    ref, sim, text = _both(g, (1, 1, 1), [out, q, x])
    assert f"cvt.rn.satfinite.{'e4m3' if fmt == 'float8e4nv' else 'e5m2'}x2.f32" in text
    assert np.array_equal(sim[1].view(np.uint8), ref[1].view(np.uint8))          # the same bytes
    np.testing.assert_array_equal(sim[0], ref[0])
    expect = np.clip(x, -float(ml_dtypes.finfo(ml).max), float(ml_dtypes.finfo(ml).max)).astype(ml)
    np.testing.assert_array_equal(ref[0], expect.astype(np.float32))              # ml_dtypes agrees


@pytest.mark.parametrize("fmt, ml", FORMATS)
def test_fp8_through_shared_memory(fmt, ml):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((32, 32)) * 8).astype(np.float32).astype(ml)
    out = np.full((32, 32), np.nan, np.float32)
    g = through_shared.trace(out, x, N=32, target="sm_90").graph
    ref, sim, _ = _both(g, (1, 1, 1), [out, x])
    np.testing.assert_array_equal(sim[0], x.astype(np.float32))
    np.testing.assert_array_equal(ref[0], x.astype(np.float32))


def _assemble(text, locs, name, target):
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(str(e))
    return ptxas.assemble(text, target, locs, name)[1]


@pytest.mark.parametrize("fmt", ["float8e4nv", "float8e5"])
def test_fp8_hopper_gemm_assembles_with_fp8_wgmma(fmt):
    f8 = getattr(gl, fmt)
    NV = gl.NVMMASharedLayout.get_default_for
    spec = lambda blk, t: TensorDescriptor.type_spec(t, blk, NV(blk, t))  # noqa: E731
    g = matmul_hopper.trace(spec([128, 128], f8), spec([256, 128], f8), spec([128, 256], gl.bfloat16),
                            gl.int32, gl.int32, gl.int32, STAGES=3, GROUP_M=8, B_KMAJOR=True, num_warps=8,
                            target="sm_90a").graph
    text, locs, _ = emit(g, "sm_90a")
    kind = "e4m3" if fmt == "float8e4nv" else "e5m2"
    assert f"wgmma.mma_async.sync.aligned.m64n256k32.f32.{kind}.{kind}" in text
    _assemble(text, locs, "matmul_hopper", "sm_90a")


def test_fp8_is_refused_before_sm89_at_the_users_line():
    g = round_trip.trace(gl.pointer(gl.float32), gl.pointer(gl.float8e4nv), gl.pointer(gl.float32),
                         F8=gl.float8e4nv, VEC=4, target="sm_80").graph
    with pytest.raises(CompileError, match="fp8 needs sm_89") as e:
        emit(g, "sm_80")
    assert "test_fp8.py" in str(e.value)
    emit(g, "sm_89")  # and lowered from sm_89 on


# -- GPU ---------------------------------------------------------------------------------------

def _gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a machine with an NVIDIA GPU")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs sm_89 or newer")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("fmt, ml", FORMATS)
def test_gpu_round_trip_matches_the_interpreter(fmt, ml):
    torch = _gpu()
    x = _edges(128 * 16, np.random.default_rng(5), fmt)
    tq = torch.float8_e4m3fn if fmt == "float8e4nv" else torch.float8_e5m2
    out_np, q_np = np.full(x.shape, np.nan, np.float32), np.zeros(x.shape, np.uint8).view(ml)
    f8 = getattr(gl, fmt)
    round_trip[(1,)](out_np, q_np, x, F8=f8, VEC=16, backend="interpreter", target="sm_90a")
    xt = torch.from_numpy(x).cuda()
    out, q = torch.full_like(xt, float("nan")), torch.zeros(x.shape, dtype=tq, device="cuda")
    round_trip[(1,)](out, q, xt, F8=f8, VEC=16, backend="nvidia")
    torch.cuda.synchronize()
    assert np.array_equal(q.view(torch.uint8).cpu().numpy(), q_np.view(np.uint8))
    np.testing.assert_array_equal(out.cpu().numpy(), out_np)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(512, 512, 512), (1000, 520, 336), (256, 2048, 1024)])
@pytest.mark.parametrize("fmt", ["float8e4nv", "float8e5"])
def test_gpu_fp8_gemm_matches_torch(m, n, k, fmt):
    torch = _gpu()
    tq = torch.float8_e4m3fn if fmt == "float8e4nv" else torch.float8_e5m2
    f8 = getattr(gl, fmt)
    NV = gl.NVMMASharedLayout.get_default_for
    a = (torch.randn(m, k, device="cuda") * 2).to(tq)
    bt = (torch.randn(n, k, device="cuda") * 2).to(tq)      # B as [N, K]: K-major, as 8-bit wgmma needs
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    da = TensorDescriptor.from_tensor(a, [128, 128], NV([128, 128], f8))
    db = TensorDescriptor.from_tensor(bt, [128, 128], NV([128, 128], f8))
    dc = TensorDescriptor.from_tensor(c, [128, 128], NV([128, 128], gl.bfloat16))
    tiles = -(-m // 128) * -(-n // 128)
    matmul_hopper[(min(tiles, 132),)](da, db, dc, m, n, k, STAGES=4, GROUP_M=8, B_KMAJOR=True, num_warps=4,
                                      backend="nvidia")
    torch.cuda.synchronize()
    ref = a.double() @ bt.double().T
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())

"""warpgroup_mma with a list of accumulators (pieces): B a stacked shared view [P, K, n],
each accumulator [M, n] taking one piece, so a tile N that is no power of two (160 = 5 x 32)
runs as one m64n(P*n) instruction a K step. Run on ptxsim_hopper against the interpreter and
numpy on fresh random inputs, NaN-poisoned outputs; the PTX checked for the fused shape."""
import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from test_hopper_sim import _grid_ptrs, run_both  # noqa: E402

NV = gl.NVMMASharedLayout.get_default_for


@gt.jit
def wgmma_pieces(c_ptr, a_ptr, b_ptr, c0_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr,
                 P: gl.constexpr, B_T: gl.constexpr, A_REGS: gl.constexpr, INSTR_N: gl.constexpr,
                 IS_ASYNC: gl.constexpr, DT: gl.constexpr = gl.float16, WN: gl.constexpr = 1):
    """C[:, p*N:(p+1)*N] = A @ B[:, p*N:(p+1)*N] + C0[...] for p < P, one warpgroup_mma over
    P pieces. B_T: B is given as [P*N, K] and its pieces are K-major slots [P, N, K]; else
    B is [K, P*N] and its pieces MN-major slots [P, K, N]."""
    W: gl.constexpr = P * N
    KI: gl.constexpr = 256 // DT.primitive_bitwidth     # the instruction's K: 32 bytes
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps() // WN, WN],
                                                    instr_shape=[16, INSTR_N, KI])
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    if B_T:
        bufs = gl.allocate_shared_memory(DT, [P, N, K], NV([N, K], DT))
        for p in gl.static_range(P):
            bufs.index(p).store(gl.load(_grid_ptrs(b_ptr + p * N * K, N, K, ld, K)))
        b_op = bufs.permute((0, 2, 1))
    else:
        b_op = gl.allocate_shared_memory(DT, [P, K, N], NV([K, N], DT))
        for p in gl.static_range(P):
            b_op.index(p).store(gl.load(_grid_ptrs(b_ptr + p * N, K, N, ld, W)))
    if A_REGS:
        a_op = gl.load(_grid_ptrs(a_ptr, M, K, gl.DotOperandLayout(0, acc_l, k_width=32 // DT.primitive_bitwidth), K))
    else:
        a_op = gl.allocate_shared_memory(DT, [M, K], NV([M, K], DT),
                                         gl.load(_grid_ptrs(a_ptr, M, K, ld, K)))
    fence_async_shared()
    accs = [gl.load(_grid_ptrs(c0_ptr + p * N, M, N, acc_l, W)) for p in range(P)]
    outs = warpgroup_mma(a_op, b_op, accs, is_async=IS_ASYNC)
    if IS_ASYNC:
        outs = warpgroup_mma_wait(0, deps=outs)
    for p in gl.static_range(P):
        gl.store(_grid_ptrs(c_ptr + p * N, M, N, acc_l, W), outs[p])


def _operands(m, k, w, b_t, dtype, rng):
    if dtype == "int8":
        a = rng.integers(-128, 128, (m, k)).astype(np.int8)
        b = rng.integers(-128, 128, (w, k) if b_t else (k, w)).astype(np.int8)
        return a, b, rng.integers(-2**20, 2**20, (m, w)).astype(np.int32)
    host = np.float32 if dtype == "float32" else np.float16
    a = rng.standard_normal((m, k)).astype(host)
    b = rng.standard_normal((w, k) if b_t else (k, w)).astype(host)
    if dtype == "float32":   # tf32 keeps 10 bits: operands that have no more are exact
        a, b = (x.astype(np.float16).astype(np.float32) for x in (a, b))
    return a, b, rng.standard_normal((m, w)).astype(np.float32)


def _run(m, n, k, p, b_t, a_regs, instr_n, warps=4, is_async=True, dtype="float16", wn=1):
    rng = np.random.default_rng()
    w = p * n
    a, b, c0 = _operands(m, k, w, b_t, dtype, rng)
    poison = np.iinfo(np.int32).min if dtype == "int8" else np.nan

    def args():
        return [np.full((m, w), poison, c0.dtype), a.copy(), b.copy(), c0.copy()]
    ref, sim, text = run_both(wgmma_pieces, args, (1,), num_warps=warps, M=m, N=n, K=k, P=p, B_T=b_t,
                              A_REGS=a_regs, INSTR_N=instr_n, IS_ASYNC=is_async, DT=getattr(gl, dtype), WN=wn)
    if dtype == "int8":
        exact = a.astype(np.int64) @ (b.T if b_t else b).astype(np.int64) + c0
        np.testing.assert_array_equal(ref[0], exact)
        np.testing.assert_array_equal(sim[0], exact)
        return text
    exact = a.astype(np.float64) @ (b.T if b_t else b).astype(np.float64) + c0
    tol = 1e-4 * np.abs(exact).max()
    np.testing.assert_allclose(ref[0], exact, rtol=1e-5, atol=tol)
    np.testing.assert_allclose(sim[0], exact, rtol=1e-5, atol=tol)
    np.testing.assert_allclose(sim[0], ref[0], rtol=1e-5, atol=tol)
    return text


def _shapes(text):
    return re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k", text)


@pytest.mark.parametrize("m, n, k, p, b_t, a_regs, instr_n, warps, is_async, fused", [
    (64, 32, 64, 5, True, False, 32, 4, True, 160),      # the 160-wide tile: K-major pieces
    (64, 32, 32, 5, False, False, 32, 4, True, 160),     # MN-major pieces (LBO = a piece)
    (64, 64, 32, 3, True, True, 64, 4, False, 192),      # A from registers, synchronous
    (128, 32, 32, 3, True, False, 32, 8, True, 96),      # two warpgroups along M
    (64, 64, 16, 5, True, False, 64, 4, True, 256),      # 320 columns: a 256 and a 64
    (64, 64, 32, 2, True, False, 32, 4, True, 128),      # two instructions a piece, fused
])
def test_pieces_match_the_interpreter_and_fuse(m, n, k, p, b_t, a_regs, instr_n, warps, is_async, fused):
    text = _run(m, n, k, p, b_t, a_regs, instr_n, warps, is_async)
    shapes = _shapes(text)
    steps = k // 16
    assert int(shapes[0]) == fused, shapes
    # every column once a K step, for each 64 rows a warpgroup owns
    assert sum(map(int, shapes)) == (m // 64) // (warps // 4) * p * n * steps


@pytest.mark.parametrize("n, p, instr_n, a_regs, shapes", [
    (64, 3, 32, False, ["32"] * 6),      # each warpgroup owns half of every piece: not adjacent, not fused
    (64, 2, 32, True, ["32"] * 4),
    (128, 2, 64, False, ["64"] * 4),
    (64, 2, 64, False, ["128"] * 2),     # warps along N replicate a 64-wide piece: both own all, fused
])
def test_pieces_with_two_warpgroups_along_n(n, p, instr_n, a_regs, shapes):
    """Two warpgroups side by side along N (warps_per_cta [4, 2]). A thread's tiles of piece p
    start at p * n + (its tile) * instr_n in B, not at consecutive instr_n steps: the first
    draft put the second piece's descriptor at column 32 instead of 64 and computed garbage."""
    text = _run(64, n, 32, p, True, a_regs, instr_n, warps=8, wn=2)
    assert _shapes(text) == shapes


@pytest.mark.parametrize("dtype, n, p, k, shapes", [
    ("int8", 32, 5, 64, ["160"] * 2),            # 8-bit integers: N past 32 a multiple of 16
    ("int8", 8, 5, 32, ["32", "8"]),             # 40 is no integer wgmma's N: 32 + 8
    ("float32", 32, 3, 16, ["96"] * 2),          # tf32: K-major pieces, k8
])
def test_pieces_of_other_types(dtype, n, p, k, shapes):
    text = _run(64, n, k, p, True, False, n, dtype=dtype)
    assert _shapes(text) == shapes


@pytest.mark.gpu
@pytest.mark.parametrize("n, p, b_t, a_regs", [(32, 5, True, False), (32, 5, False, False), (64, 3, True, True),
                                               (64, 5, True, False)])
def test_gpu_pieces_match_numpy(n, p, b_t, a_regs):
    """The fused m64n(P*n) instruction (and, for 320 columns, a 256 and a 64) on the GPU."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    rng = np.random.default_rng()
    m, k, w = 64, 64, p * n
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((w, k) if b_t else (k, w)).astype(np.float16)
    c0 = rng.standard_normal((m, w)).astype(np.float32)
    dev = [torch.full((m, w), float("nan"), device="cuda"), *(torch.from_numpy(x).cuda() for x in (a, b, c0))]
    wgmma_pieces[(1,)](*dev, M=m, N=n, K=k, P=p, B_T=b_t, A_REGS=a_regs, INSTR_N=n, IS_ASYNC=True, num_warps=4,
                       backend="nvidia")
    torch.cuda.synchronize()
    exact = a.astype(np.float64) @ (b.T if b_t else b).astype(np.float64) + c0
    np.testing.assert_allclose(dev[0].cpu().numpy(), exact, rtol=1e-5, atol=1e-4 * np.abs(exact).max())


def _random_case(seed):
    """A random pieces configuration (drawn reproducibly from ``seed``; the data is fresh)."""
    r = np.random.default_rng(seed)
    dtype = str(r.choice(["float16", "float16", "int8"]))
    warps, wn = [(4, 1), (8, 1), (8, 2)][r.integers(3)]
    m = 64 * (warps // 4 // wn)
    n = int(r.choice([8, 16, 32, 64]))
    instr_n = int(r.choice([x for x in (8, 16, 32, 64) if x <= n]))
    p = int(r.integers(1, 7))
    b_t = True if dtype == "int8" else bool(r.integers(2))
    a_regs = bool(r.integers(2))
    k = int(r.choice([32, 64])) if dtype == "int8" else int(r.choice([16, 32, 64]))
    return dict(m=m, n=n, k=k, p=p, b_t=b_t, a_regs=a_regs, instr_n=instr_n, warps=warps,
                is_async=bool(r.integers(2)), dtype=dtype, wn=wn)


@pytest.mark.parametrize("seed", range(16))
def test_random_pieces(seed):
    """Random piece counts, widths, instruction N, warp arrangements, operand majorness and
    types: the simulator agrees with the interpreter and numpy, and every column of every
    piece is multiplied exactly once a K step."""
    case = _random_case(seed)
    if case["p"] == 1:   # warpgroup_mma_wait hands back one tile for one dep: still pieces, one slot
        case["p"] = 2
    text = _run(**case)
    ki = 256 // (8 if case["dtype"] == "int8" else 16)
    steps = case["k"] // ki
    rows = (case["m"] // 64) // (case["warps"] // 4 // case["wn"])
    own_n = min(case["n"], max(case["instr_n"], case["n"] // case["wn"]))   # a warpgroup's columns of a piece
    assert sum(map(int, _shapes(text))) == rows * case["p"] * own_n * steps

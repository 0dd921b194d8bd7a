"""gl.dot_fma on NVIDIA (backends/nvidia/rules_fma.py).

CPU: kernels over several BlockedLayouts (tiles smaller than, equal to and larger than the
layout's coverage; K of 1 to 32; one to four warps) in float32, float16, bfloat16, float64 and
integer types are emitted, run on the PTX simulator against the interpreter bit for bit on fresh
random inputs with poisoned outputs, and assembled by ptxas for sm_80 and sm_90a; the shipped
matmul_fma example likewise at odd shapes. The interpreter's chain rounds each step once (as
fma.rn does): a case where rounding the f64 sum again would differ pins it. A layout that spreads
K across threads is a CompileError at the user's line (the op's own layout check already
makes one impossible). GPU (``pytest -m gpu``): the same kernels
against the interpreter and matmul_fma against torch.
"""
import os
import sys
import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim_tc  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402
from gluon_trace.errors import CompileError, GluonTraceError  # noqa: E402
from gluon_trace.kernels.matmul_fma import matmul_fma  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia import ptxas  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

BF16 = ml_dtypes.bfloat16
NP = {"float32": np.float32, "float16": np.float16, "bfloat16": BF16, "float64": np.float64,
      "int32": np.int32, "int8": np.int8, "uint16": np.uint16, "int16": np.int16, "int64": np.int64}


def _blocked(spt, tpw, wpc, order=(1, 0)):
    return gl.BlockedLayout(list(spt), list(tpw), list(wpc), list(order))


@gt.jit
def fma_k(c_ptr, a_ptr, b_ptr, c0_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr,
          P: gl.constexpr):
    a_l: gl.constexpr = gl.DotOperandLayout(0, P, k_width=1)
    b_l: gl.constexpr = gl.DotOperandLayout(1, P, k_width=1)
    ra = gl.arange(0, M, layout=gl.SliceLayout(1, a_l))
    ka = gl.arange(0, K, layout=gl.SliceLayout(0, a_l))
    kb = gl.arange(0, K, layout=gl.SliceLayout(1, b_l))
    nb = gl.arange(0, N, layout=gl.SliceLayout(0, b_l))
    a = gl.load(a_ptr + ra[:, None] * K + ka[None, :])
    b = gl.load(b_ptr + kb[:, None] * N + nb[None, :])
    rc = gl.arange(0, M, layout=gl.SliceLayout(1, P))
    nc = gl.arange(0, N, layout=gl.SliceLayout(0, P))
    offs = rc[:, None] * N + nc[None, :]
    gl.store(c_ptr + offs, gl.dot_fma(a, b, gl.load(c0_ptr + offs)))


def _rand(rng, shape, name):
    d = NP[name]
    if np.dtype(d).kind in "iu":
        info = np.iinfo(d)
        lo, hi = max(info.min, -(1 << 20)), min(info.max, 1 << 20)
        return rng.integers(lo, hi, shape, endpoint=True).astype(d)
    return rng.standard_normal(shape).astype(np.float32).astype(d)


def _poison(shape, name):
    d = NP[name]
    if np.dtype(d).kind in "iu":
        return np.full(shape, np.iinfo(d).min + 1, d)
    return np.full(shape, np.nan, d)


# (M, N, K, layout, warps): coverage equal to the tile, smaller (the layout repeats), larger
# (threads hold copies), column-major order, warps along N, one warp
LAYOUTS = [
    (16, 32, 8, _blocked([1, 4], [4, 8], [4, 1]), 4),
    (64, 64, 16, _blocked([2, 2], [8, 4], [2, 2]), 4),
    (8, 8, 4, _blocked([1, 1], [4, 8], [4, 1]), 4),
    (32, 16, 32, _blocked([2, 1], [4, 8], [1, 4], (0, 1)), 4),
    (4, 64, 2, _blocked([1, 2], [1, 32], [1, 2]), 2),
    (16, 16, 1, _blocked([4, 4], [4, 8], [1, 1]), 1),
]
DTYPES = ["float32", "float16", "bfloat16", "float64", "int32", "int8", "uint16", "int64"]


def _run(m, n, k, lay, warps, name, target="sm_80", seed=None):
    rng = np.random.default_rng(seed)
    a, b, c0 = _rand(rng, (m, k), name), _rand(rng, (k, n), name), _rand(rng, (m, n), name)
    args = [_poison((m, n), name), a, b, c0]
    graph = fma_k.trace(*args, M=m, N=n, K=k, P=lay, num_warps=warps).graph
    text, locs, smem = emit(graph, target)
    ref, sim = [x.copy() for x in args], [x.copy() for x in args]
    get("interpreter").run(graph, (1, 1, 1), ref)
    with np.errstate(all="ignore"):
        ptxsim_tc.run(text, (1, 1, 1), sim, smem)
    return text, locs, ref[0], sim[0]


@pytest.mark.parametrize("shape", LAYOUTS, ids=lambda s: f"{s[0]}x{s[1]}x{s[2]}_w{s[4]}")
@pytest.mark.parametrize("name", DTYPES)
def test_simulated_matches_interpreter_bitwise(shape, name):
    m, n, k, lay, warps = shape
    _, _, ref, got = _run(m, n, k, lay, warps, name, seed=zlib.crc32(f"{shape}{name}".encode()))
    assert not (got.dtype.kind == "f" and np.isnan(got.astype(np.float64)).any()), "unwritten outputs"
    assert np.array_equal(got.view(np.uint8), ref.view(np.uint8)), f"{name} {shape[:3]}: differs"


def test_chain_order_and_rounding_match_numpy():
    """The interpreter's chain (what the PTX must match) is sequential k = 0..K-1, each step
    rounded once to f16: checked against exact rationals rounded the same way."""
    m, n, k, lay, warps = LAYOUTS[0]
    _, _, ref, got = _run(m, n, k, lay, warps, "float16", seed=7)
    rng = np.random.default_rng(7)
    a, b, c0 = _rand(rng, (m, k), "float16"), _rand(rng, (k, n), "float16"), _rand(rng, (m, n), "float16")
    exp = c0.copy()
    for kk in range(k):
        for i in range(m):
            for j in range(n):
                x = Fraction(float(a[i, kk])) * Fraction(float(b[kk, j])) + Fraction(float(exp[i, j]))
                exp[i, j] = np.float16(float(x))  # exact rational -> f64 -> f16: one rounding here
    assert np.array_equal(ref.view(np.uint16), exp.view(np.uint16))
    assert np.array_equal(got.view(np.uint16), exp.view(np.uint16))


def test_each_step_rounds_once():
    """3 * (1 + 2**-7) - 2**-100 in bfloat16: the exact value lies just below a tie, so one rounding
    gives 3 + 2**-6; rounding the float64 sum first (a tie) and then to bfloat16 would give 3 + 2**-5.
    The float64 chain likewise needs the exact product (0.1 * 10 - 1 is 2**-54 exactly as an fma)."""
    lay = _blocked([1, 1], [4, 8], [1, 1])
    for name, a0, b0, c0, want in (("bfloat16", 3.0, 1 + 2 ** -7, -2.0 ** -100, 3 + 2 ** -6),
                                   ("float64", 0.1, 10.0, -1.0, 2.0 ** -54)):
        d = NP[name]
        args = [_poison((4, 8), name), np.full((4, 1), a0, d), np.full((1, 8), b0, d), np.full((4, 8), c0, d)]
        graph = fma_k.trace(*args, M=4, N=8, K=1, P=lay, num_warps=1).graph
        text, _, smem = emit(graph, "sm_80")
        ref, sim = [x.copy() for x in args], [x.copy() for x in args]
        get("interpreter").run(graph, (1, 1, 1), ref)
        ptxsim_tc.run(text, (1, 1, 1), sim, smem)
        assert (ref[0].astype(np.float64) == want).all(), name
        assert (sim[0].astype(np.float64) == want).all(), name


def test_instructions():
    """One fma per output and K step on the 16-bit patterns (no f64 detour), mad.lo for integers."""
    m, n, k, lay, warps = LAYOUTS[0]  # 16x32 outputs over 128 threads: 4 a thread, K = 8
    for name, ins in (("float16", "fma.rn.f16 "), ("bfloat16", "fma.rn.bf16 "), ("float32", "fma.rn.f32 "),
                      ("int32", "mad.lo.s32 ")):
        text = _run(m, n, k, lay, warps, name)[0]
        assert text.count(ins) == 4 * k, name
        assert "cvt.f64" not in text and "fma.rn.f64" not in text, name


def test_16_bit_rows_pair_into_f16x2():
    """A thread holding a 4x8 block of 16-bit outputs over K = 16 (LAYOUTS[1]): two outputs of a row
    per fma.rn.f16x2 / bf16x2 (the bitwise tests above run this shape), fewer instructions than
    one fma each; a 4x4 block with K = 1 stays scalar (packing would cost more than it saves)."""
    def count(text):
        body = text[text.index("{", text.index(".entry")):]
        return sum(1 for ln in body.splitlines()
                   if ln.strip() and not ln.strip().startswith((".", "//", "$", "{", "}")))
    from gluon_trace.backends.nvidia import rules_fma
    m, n, k, lay, warps = LAYOUTS[1]
    for name, x2 in (("float16", "fma.rn.f16x2 "), ("bfloat16", "fma.rn.bf16x2 ")):
        text = _run(m, n, k, lay, warps, name)[0]
        assert text.count(x2) == 16 * k and x2[:-3] + " " not in text
        pairs = rules_fma._pairs
        try:
            rules_fma._pairs = lambda outputs, K: []
            scalar = _run(m, n, k, lay, warps, name)[0]
        finally:
            rules_fma._pairs = pairs
        assert scalar.count(x2[:-3] + " ") == 32 * k and count(text) < count(scalar) - 100
    m, n, k, lay, warps = LAYOUTS[5]
    assert "x2 " not in _run(m, n, k, lay, warps, "float16")[0]


def _matmul_args(rng, m, n, k, dtype):
    a, b = _rand(rng, (m, k), dtype), _rand(rng, (k, n), dtype)
    return [a, b, np.full((m, n), np.nan, np.float32), m, n, k, k, n, n]


MATMULS = [(64, 64, 64, "float32"), (37, 53, 29, "float32"), (17, 96, 40, "float16"), (80, 8, 70, "bfloat16")]
KW = dict(BM=32, BN=32, BK=8)


@pytest.mark.parametrize("m, n, k, dtype", MATMULS)
def test_matmul_fma_simulated(m, n, k, dtype):
    """The shipped example (K loop, masked edges, converts to f32) against the interpreter, bit for bit."""
    rng = np.random.default_rng(zlib.crc32(f"{m}{n}{k}{dtype}".encode()))
    args = _matmul_args(rng, m, n, k, dtype)
    grid = (-(-m // KW["BM"]), -(-n // KW["BN"]), 1)
    graph = matmul_fma.trace(*args, **KW).graph
    text, _, smem = emit(graph, "sm_80")
    ref, sim = [x.copy() if isinstance(x, np.ndarray) else x for x in args], \
        [x.copy() if isinstance(x, np.ndarray) else x for x in args]
    get("interpreter").run(graph, grid, ref)
    ptxsim_tc.run(text, grid, sim, smem)
    assert not np.isnan(sim[2]).any()
    assert np.array_equal(sim[2].view(np.uint32), ref[2].view(np.uint32))
    exp = args[0].astype(np.float64) @ args[1].astype(np.float64)
    np.testing.assert_allclose(ref[2], exp, rtol=1e-4, atol=1e-4 * np.abs(exp).max())


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_assembles(target):
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(str(e))
    for name in ("float32", "float16", "bfloat16", "float64", "int8", "int64"):
        for shape in (LAYOUTS[1], LAYOUTS[3]):
            text, locs = _run(*shape, name, target=target)[:2]
            ptxas.assemble(text, target, locs, f"dot_fma_{name}")
    graph = matmul_fma.trace(*_matmul_args(np.random.default_rng(0), 64, 64, 64, "float16"), **KW).graph
    text, locs, _ = emit(graph, target)
    ptxas.assemble(text, target, locs, "matmul_fma")


def test_operand_layout_off_the_accumulator_is_refused_at_the_users_line():
    """An operand layout over another parent is refused by the op where the user calls gl.dot_fma."""
    @gt.jit
    def k(c_ptr, P: gl.constexpr, Q: gl.constexpr):
        a = gl.full([16, 16], 1.0, gl.float32, gl.DotOperandLayout(0, Q, k_width=1))
        b = gl.full([16, 16], 2.0, gl.float32, gl.DotOperandLayout(1, P, k_width=1))
        rc = gl.arange(0, 16, layout=gl.SliceLayout(1, P))
        nc = gl.arange(0, 16, layout=gl.SliceLayout(0, P))
        gl.store(c_ptr + rc[:, None] * 16 + nc[None, :], gl.dot_fma(a, b, gl.zeros([16, 16], gl.float32, P)))
    with pytest.raises(GluonTraceError, match="operand A must be in gl.DotOperandLayout") as e:
        k.trace(np.zeros((16, 16), np.float32), P=_blocked([1, 1], [4, 8], [4, 1]),
                Q=_blocked([1, 1], [8, 4], [4, 1]))
    assert e.value.loc is not None and e.value.loc.line > 0


def test_k_spread_over_threads_is_refused():
    """A DotOperandLayout over the accumulator's BlockedLayout always holds all of K in each thread
    (mma_layouts._fma_operand); the rule still checks it, so a layout that spread K over lanes
    would be a CompileError at the op's line, not a wrong kernel."""
    from types import SimpleNamespace

    from gluon_trace.backends.nvidia.rules_fma import _check_threads
    from gluon_trace.errors import SourceLoc
    from gluon_trace.layouts import LinearLayout
    acc = LinearLayout((4, 8), ((1, 0),), ((0, 1), (0, 2), (0, 4), (2, 0)), ())
    good = LinearLayout((4, 4), ((0, 1), (0, 2), (1, 0)), ((0, 0), (0, 0), (0, 0), (2, 0)), ())
    spread = LinearLayout((4, 4), ((1, 0), (0, 2)), ((0, 1), (0, 0), (0, 0), (2, 0)), ())
    loc = SourceLoc(__file__, 12)
    _check_threads(SimpleNamespace(loc=loc), good, acc, 0, "A")
    with pytest.raises(CompileError, match="operand A's layout spreads K") as e:
        _check_threads(SimpleNamespace(loc=loc), spread, acc, 0, "A")
    assert e.value.loc is loc


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([(1, 0), (0, 1)]), st.sampled_from([1, 2, 4, 8, 16, 32]), st.sampled_from([1, 2, 4]),
       st.lists(st.sampled_from([1, 2, 4]), min_size=2, max_size=2),
       st.sampled_from([(16, 16, 4), (32, 8, 8), (8, 64, 2), (64, 32, 16)]),
       st.sampled_from(["float32", "float16", "bfloat16", "int16"]))
def test_random_layouts_simulated(order, lane0, warp0, spt, shape, name):
    """Random BlockedLayouts (lanes and warps split any way, either order) over a few tile shapes."""
    lay = _blocked(spt, [lane0, 32 // lane0], [warp0, 4 // warp0], order)
    _, _, ref, got = _run(*shape, lay, 4, name, seed=zlib.crc32(f"{lay}{shape}{name}".encode()))
    assert np.array_equal(got.view(np.uint8), ref.view(np.uint8)), f"{name} {shape} {lay}"


# -- GPU ---------------------------------------------------------------------------------------

def _gpu():
    try:
        import torch
        if torch.cuda.is_available():
            return torch
    except ImportError:
        pass
    pytest.skip("no CUDA GPU (torch.cuda)")


def _dev(torch, a):
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def _host(torch, t, like):
    if like.dtype == BF16:
        return t.cpu().view(torch.int16).numpy().view(BF16)
    return t.cpu().numpy()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", LAYOUTS, ids=lambda s: f"{s[0]}x{s[1]}x{s[2]}_w{s[4]}")
@pytest.mark.parametrize("name", DTYPES)
def test_gpu_matches_interpreter_bitwise(shape, name):
    torch = _gpu()
    m, n, k, lay, warps = shape
    rng = np.random.default_rng()
    a, b, c0 = _rand(rng, (m, k), name), _rand(rng, (k, n), name), _rand(rng, (m, n), name)
    args = [_poison((m, n), name), a, b, c0]
    ref = [x.copy() for x in args]
    get("interpreter").run(fma_k.trace(*args, M=m, N=n, K=k, P=lay, num_warps=warps).graph, (1, 1, 1), ref)
    dev = [_dev(torch, x) for x in args]
    fma_k[(1,)](*dev, M=m, N=n, K=k, P=lay, num_warps=warps)
    torch.cuda.synchronize()
    got = _host(torch, dev[0], args[0])
    assert np.array_equal(got.view(np.uint8), ref[0].view(np.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(256, 256, 256), (1000, 520, 333), (16, 2048, 512), (2048, 24, 100)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gpu_matmul_fma_matches_torch(m, n, k, dtype):
    torch = _gpu()
    td = getattr(torch, dtype)
    a = torch.randn(m, k, device="cuda", dtype=td)
    b = torch.randn(k, n, device="cuda", dtype=td)
    c = torch.full((m, n), float("nan"), device="cuda")
    matmul_fma[(-(-m // 64), -(-n // 64))](a, b, c, m, n, k, k, n, n, BM=64, BN=64, BK=16, num_warps=4)
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())

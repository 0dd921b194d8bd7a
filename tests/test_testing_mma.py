"""MMA property testing: every drawn instruction, k_width, shared layout and pipeline depth is
valid for its target (the kernels that use them trace and agree with numpy in the
interpreter), and the accumulation tolerance holds for any summation order yet catches a
single missing K term."""
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings, strategies as st
from hypothesis.errors import NoSuchExample

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace import testing as gtt
from gluon_trace.errors import LayoutError, TraceError
from gluon_trace.language.amd.cdna3 import mfma
from gluon_trace.language.amd.rdna3 import wmma
from gluon_trace.language.nvidia.ampere import mma_v2
from gluon_trace.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

FEW = settings(max_examples=12, deadline=None, derandomize=True, database=None,
               suppress_health_check=list(HealthCheck))
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32,
      "float8e4nv": ml_dtypes.float8_e4m3fn, "float8e5": ml_dtypes.float8_e5m2,
      "float8e4b8": ml_dtypes.float8_e4m3fnuz, "float8e5b16": ml_dtypes.float8_e5m2fnuz}
OPS = {"mma_v2": mma_v2, "mfma": mfma, "wmma": wmma}


def register_mma_kernel(instr):
    op = OPS[instr.op]

    @gt.jit
    def mma_kernel(a_ptr, b_ptr, c_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr):
        ra = gl.arange(0, M, layout=gl.SliceLayout(1, instr.a))
        ka = gl.arange(0, K, layout=gl.SliceLayout(0, instr.a))
        kb = gl.arange(0, K, layout=gl.SliceLayout(1, instr.b))
        nb = gl.arange(0, N, layout=gl.SliceLayout(0, instr.b))
        a = gl.load(a_ptr + ra[:, None] * K + ka[None, :])
        b = gl.load(b_ptr + kb[:, None] * N + nb[None, :])
        acc = op(a, b, gl.zeros([M, N], gl.float32, instr.acc))
        rm = gl.arange(0, M, layout=gl.SliceLayout(1, instr.acc))
        cn = gl.arange(0, N, layout=gl.SliceLayout(0, instr.acc))
        gl.store(c_ptr + rm[:, None] * N + cn[None, :], acc)
    return mma_kernel


def operands(rng, instr, m, n, k):
    t = NP[instr.dtype.name]
    a = rng.standard_normal((m, k)).astype(np.float32).astype(t)
    b = rng.standard_normal((k, n)).astype(np.float32).astype(t)
    if instr.dtype.name == "float32":  # tf32 on NVIDIA: inputs with tf32's 10-bit mantissa are exact
        a, b = (np.asarray(x.view(np.uint32) & 0xFFFFE000).view(np.float32) for x in (a, b))
    return a, b


@FEW
@given(st.data(), st.sampled_from(["sm_80", "sm_89", "gfx942", "gfx1100"]), st.sampled_from([1, 2, 4]))
def test_drawn_register_mmas_trace_and_match_numpy_within_the_accumulation_bound(data, target, warps):
    instr = data.draw(gtt.mma_instrs(target, num_warps=warps, ops=("mma_v2", "mfma", "wmma")))
    m = instr.tile[0] * data.draw(st.sampled_from([1, 2]))
    n = instr.tile[1] * data.draw(st.sampled_from([1, 2]))
    k = instr.instr[2] * data.draw(st.sampled_from([1, 2, 4]))
    a, b = operands(np.random.default_rng(data.draw(st.integers(0, 2**16))), instr, m, n, k)
    c = np.empty((m, n), np.float32)
    tol = gtt.mma_tolerance(a, b)
    gtt.assert_kernel_matches(register_mma_kernel(instr), lambda a, b, c: a.astype(np.float64) @ b.astype(np.float64),
                              a, b, c, grid=(1,), outputs=["c_ptr"], backends=("interpreter",), tolerance=tol,
                              M=m, N=n, K=k, num_warps=warps, target=target)


@FEW
@given(st.data(), st.sampled_from(["float16", "bfloat16"]))
def test_drawn_wgmma_with_drawn_nvmma_operand_layouts_matches_numpy(data, dtype):
    instr = data.draw(gtt.mma_instrs("sm_90a", num_warps=4, dtypes=(dtype,), ops=("wgmma",)))
    m, n, k = 64, instr.tile[1], 16 * data.draw(st.sampled_from([1, 2, 4]))
    sa = data.draw(gtt.shared_layouts([m, k], instr.dtype, kinds=("nvmma",)).filter(lambda l: not l.transposed))
    sb = data.draw(gtt.shared_layouts([k, n], instr.dtype, kinds=("nvmma",)).filter(lambda l: not l.transposed))
    ld = gl.BlockedLayout([1, 1], [4, 8], [4, 1], [1, 0])

    @gt.jit
    def wgmma_kernel(a_ptr, b_ptr, c_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr):
        ra = gl.arange(0, M, layout=gl.SliceLayout(1, ld))
        ka = gl.arange(0, K, layout=gl.SliceLayout(0, ld))
        kb = gl.arange(0, K, layout=gl.SliceLayout(1, ld))
        nb = gl.arange(0, N, layout=gl.SliceLayout(0, ld))
        a_s = gl.allocate_shared_memory(a_ptr.dtype.element, [M, K], sa, gl.load(a_ptr + ra[:, None] * K + ka[None, :]))
        b_s = gl.allocate_shared_memory(b_ptr.dtype.element, [K, N], sb, gl.load(b_ptr + kb[:, None] * N + nb[None, :]))
        fence_async_shared()
        acc = warpgroup_mma(a_s, b_s, gl.zeros([M, N], gl.float32, instr.acc))
        rm = gl.arange(0, M, layout=gl.SliceLayout(1, instr.acc))
        cn = gl.arange(0, N, layout=gl.SliceLayout(0, instr.acc))
        gl.store(c_ptr + rm[:, None] * N + cn[None, :], acc)

    a, b = operands(np.random.default_rng(data.draw(st.integers(0, 2**16))), instr, m, n, k)
    gtt.assert_kernel_matches(wgmma_kernel, lambda a, b, c: a.astype(np.float64) @ b.astype(np.float64),
                              a, b, np.empty((m, n), np.float32), grid=(1,), outputs=["c_ptr"],
                              backends=("interpreter",), tolerance=gtt.mma_tolerance(a, b),
                              M=m, N=n, K=k, num_warps=4, target="sm_90a")



@FEW
@given(st.data())
def test_drawn_wgmma_pieces_match_numpy(data):
    """A drawn warpgroup_mma over pieces (P accumulators of ``width`` columns, B a stack of P
    shared slots, K-major or not, A from shared memory or registers; with K pieces, Q operands
    of A along K and B stacked Q times) in the interpreter against numpy: C[:, p*w:(p+1)*w] =
    A @ B[:, p*w:(p+1)*w] for every piece."""
    pc = data.draw(gtt.wgmma_pieces("sm_90a", num_warps=4))
    instr, P, W, Q = pc.instr, pc.pieces, pc.width, pc.k_pieces
    assert P >= 2 and W % instr.tile[1] == 0 and W & (W - 1) == 0 and pc.columns <= 256 and 1 <= Q <= 3
    m, kq = 64, instr.instr[2] * data.draw(st.sampled_from([1, 2]))   # kq: K of one K piece
    k = Q * kq
    dt_ = getattr(gl, instr.dtype.name)
    ld = gl.BlockedLayout([1, 1], [4, 8], [4, 1], [1, 0])

    def grid(ptr, rows, cols, layout, stride):
        r = gl.arange(0, rows, layout=gl.SliceLayout(1, layout))
        c = gl.arange(0, cols, layout=gl.SliceLayout(0, layout))
        return ptr + r[:, None] * stride + c[None, :]

    @gt.jit
    def pieces_kernel(a_ptr, b_ptr, c_ptr, M: gl.constexpr, K: gl.constexpr):
        if pc.b_kmajor:   # B given as [P*W, K]: slots [Q, P, W, KQ], seen as [Q, P, KQ, W]
            bufs = gl.allocate_shared_memory(dt_, [Q, P, W, kq], gl.NVMMASharedLayout.get_default_for([W, kq], dt_))
            for q in gl.static_range(Q):
                for p in gl.static_range(P):
                    bufs.index(q).index(p).store(gl.load(grid(b_ptr + p * W * K + q * kq, W, kq, ld, K)))
            b_op = bufs.permute((0, 1, 3, 2))
        else:             # B given as [K, P*W]: slots [Q, P, KQ, W]
            b_op = gl.allocate_shared_memory(dt_, [Q, P, kq, W], gl.NVMMASharedLayout.get_default_for([kq, W], dt_))
            for q in gl.static_range(Q):
                for p in gl.static_range(P):
                    b_op.index(q).index(p).store(gl.load(grid(b_ptr + q * kq * P * W + p * W, kq, W, ld, P * W)))
        if pc.a_regs:
            terms = [gl.load(grid(a_ptr + q * kq, M, kq, instr.a, K)) for q in range(Q)]
        else:
            a_bufs = gl.allocate_shared_memory(dt_, [Q, M, kq], gl.NVMMASharedLayout.get_default_for([M, kq], dt_))
            for q in gl.static_range(Q):
                a_bufs.index(q).store(gl.load(grid(a_ptr + q * kq, M, kq, ld, K)))
            terms = [a_bufs.index(q) for q in range(Q)]
        fence_async_shared()
        accs = [gl.zeros([M, W], gl.float32, instr.acc) for _ in range(P)]
        if Q == 1:   # the plain form: one A, B [P, K, W]
            mma = warpgroup_mma(terms[0], b_op.index(0), accs, is_async=True)
        else:
            mma = warpgroup_mma(terms, b_op, accs, is_async=True)
        outs = warpgroup_mma_wait(0, deps=mma)
        for p in gl.static_range(P):
            gl.store(grid(c_ptr + p * W, M, W, instr.acc, P * W), outs[p])

    a, b = operands(np.random.default_rng(data.draw(st.integers(0, 2**16))), instr, m, pc.columns, k)
    b_in = np.ascontiguousarray(b.T) if pc.b_kmajor else b
    gtt.assert_kernel_matches(pieces_kernel, lambda a, b_in, c: a.astype(np.float64) @ b.astype(np.float64),
                              a, b_in, np.empty((m, pc.columns), np.float32), grid=(1,), outputs=["c_ptr"],
                              backends=("interpreter",), tolerance=gtt.mma_tolerance(a, b), M=m, K=k, num_warps=4,
                              target="sm_90a")


def test_wgmma_pieces_draws_tiles_that_are_not_powers_of_two():
    widths = {p.columns for p in _all(gtt.wgmma_pieces(), 150)}
    assert any(c & (c - 1) for c in widths) and max(widths) <= 256
    assert find(gtt.wgmma_pieces(), lambda p: p.columns == 160 and not p.b_kmajor).width in (8, 16, 32)
    assert all(p.b_kmajor for p in _all(gtt.wgmma_pieces(dtypes=("float8e4nv", "float32")), 40))

def test_instruction_strategies_cover_each_target_and_refuse_what_is_not_there():
    seen = {t: {(i.op, i.dtype.name) for i in _all(gtt.mma_instrs(t), 120)}
            for t in ("sm_80", "sm_89", "sm_90a", "gfx942", "gfx1100")}
    assert ("mma_v2", "bfloat16") in seen["sm_80"] and not any("float8" in d for _, d in seen["sm_80"])
    assert ("mma_v2", "float8e4nv") in seen["sm_89"] and not any(o == "wgmma" for o, _ in seen["sm_89"])
    assert ("wgmma", "float16") in seen["sm_90a"] and ("mfma", "float8e5b16") in seen["gfx942"]
    assert seen["gfx1100"] <= {("wmma", "float16"), ("wmma", "bfloat16")}
    with pytest.raises(ValueError):
        gtt.mma_instrs("interpreter")
    with pytest.raises(ValueError):
        gtt.mma_instrs("sm_90a", num_warps=2, ops=("wgmma",))


@FEW
@given(st.data())
def test_k_widths_are_exactly_what_the_mma_accepts(data):
    instr = data.draw(gtt.mma_instrs(data.draw(st.sampled_from(["sm_80", "gfx942"])), ops=("mma_v2", "mfma")))
    kw = data.draw(gtt.k_widths(instr.acc, instr.dtype))
    op = OPS[instr.op]
    m, n, k = instr.tile[0], instr.tile[1], instr.instr[2] * 2

    def trace(width):
        a_l = gl.DotOperandLayout(0, instr.acc, k_width=width)
        b_l = gl.DotOperandLayout(1, instr.acc, k_width=width)

        @gt.jit
        def kern(c_ptr):
            acc = op(gl.zeros([m, k], instr.dtype, a_l), gl.zeros([k, n], instr.dtype, b_l),
                     gl.zeros([m, n], gl.float32, instr.acc))
            rm = gl.arange(0, m, layout=gl.SliceLayout(1, instr.acc))
            gl.store(c_ptr + rm, gl.sum(acc, 1))
        return kern.trace(gl.pointer(gl.float32), num_warps=4, target=instr.target)
    trace(kw)
    with pytest.raises(TraceError) as e:
        trace(kw * 4)
    assert "k_width" in str(e.value)


@FEW
@given(st.data(), st.sampled_from(["float16", "float32", "int8"]))
def test_drawn_shared_layouts_round_trip_any_tile(data, dtype):
    shape = (data.draw(st.sampled_from([8, 16, 32])), data.draw(st.sampled_from([16, 32, 64])))
    t = getattr(gl, dtype)
    lay = data.draw(gtt.shared_layouts(shape, t))
    ld = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    st_l = gl.BlockedLayout([2, 1], [4, 8], [1, 4], [0, 1])

    @gt.jit
    def round_trip(x_ptr, y_ptr, R: gl.constexpr, C: gl.constexpr):
        r = gl.arange(0, R, layout=gl.SliceLayout(1, ld))
        c = gl.arange(0, C, layout=gl.SliceLayout(0, ld))
        smem = gl.allocate_shared_memory(x_ptr.dtype.element, [R, C], lay)
        smem.store(gl.load(x_ptr + r[:, None] * C + c[None, :]))
        r2 = gl.arange(0, R, layout=gl.SliceLayout(1, st_l))
        c2 = gl.arange(0, C, layout=gl.SliceLayout(0, st_l))
        gl.store(y_ptr + r2[:, None] * C + c2[None, :], smem.load(st_l))

    x = np.random.default_rng(1).integers(-100, 100, shape).astype(t.np)
    gtt.assert_kernel_matches(round_trip, lambda x, y: x, x, np.empty_like(x), grid=(1,), outputs=[1],
                              backends=("interpreter",), R=shape[0], C=shape[1])


def test_nvmma_swizzles_fit_the_rows_and_the_contiguous_bytes():
    # 16 fp16 columns = 32 bytes: no 64/128-byte swizzle; transposed, 16 rows of 8 contiguous
    # fp16 (16 bytes): none at all
    widths = {l.swizzle_byte_width for l in _all(gtt.shared_layouts([8, 16], gl.float16, kinds=("nvmma",)))}
    assert widths == {0, 32}
    widths = {l.swizzle_byte_width for l in _all(gtt.shared_layouts([4, 256], gl.float16, kinds=("nvmma",)))}
    assert widths == {0}  # fewer than 8 rows: no swizzle


def _all(strategy, n=200):
    out = []

    @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(x):
        out.append(x)
    collect()
    return out


def test_pipeline_depths_fit_the_targets_shared_memory():
    stage = (128 * 64 + 64 * 256) * 2          # a 128x256x64 bf16 GEMM stage: 48 KB
    depths = set(_all(gtt.pipeline_depths("sm_90a", stage, reserved=128 * 256 * 2)))
    assert max(depths) == (232448 - 65536) // stage == 3 and min(depths) == 1
    assert set(_all(gtt.pipeline_depths("sm_80", 16384, min_stages=2))) == set(range(2, 9))
    with pytest.raises(NoSuchExample):
        find(gtt.pipeline_depths("gfx942", 16384), lambda s: s > 4, settings=settings(database=None))
    with pytest.raises(ValueError) as e:
        gtt.pipeline_depths("gfx942", 40000, min_stages=2)
    assert "65536" in str(e.value)


def test_the_accumulation_bound_holds_in_any_order_and_catches_one_missing_term():
    rng = np.random.default_rng(11)
    for k in (16, 256, 4096):
        a = rng.standard_normal((8, k)).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((k, 8)).astype(ml_dtypes.bfloat16)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        tol = gtt.mma_tolerance(a, b)
        for _ in range(3):                   # f32 sums in a random order, as tiles and K loops do
            order = rng.permutation(k)
            prods = (a[:, order].astype(np.float32)[:, :, None] * b[order].astype(np.float32)[None])
            acc = np.zeros((8, 8), np.float32)
            for i in range(k):
                acc += prods[:, i]
            assert (np.abs(acc - exact) <= tol.atol).all()
        # one term left out is caught
        short = exact - a[:, -1:].astype(np.float64) @ b[-1:].astype(np.float64)
        assert (np.abs(short - exact) > tol.atol).any()
    assert "K=4096" in str(tol) and "2^-24" in str(tol)
    assert "2^-14" in str(gtt.mma_tolerance(a, b, acc_bits=14))
    assert gtt.mma_tolerance(a, b, out="bfloat16").rtol == 2.0 ** -8


def test_a_kernel_dropping_the_last_k_step_fails_with_the_bound_named():
    instr = find(gtt.mma_instrs("sm_80", dtypes=("bfloat16",)), lambda i: True, settings=settings(database=None))
    rng = np.random.default_rng(2)
    a, b = operands(rng, instr, instr.tile[0], instr.tile[1], 64)
    with pytest.raises(AssertionError) as e:
        gtt.assert_kernel_matches(register_mma_kernel(instr),
                                  lambda a, b, c: a[:, :48].astype(np.float64) @ b[:48].astype(np.float64),
                                  a, b, np.empty((instr.tile[0], instr.tile[1]), np.float32), grid=(1,),
                                  outputs=["c_ptr"], backends=("interpreter",), tolerance=gtt.mma_tolerance(a, b),
                                  M=instr.tile[0], N=instr.tile[1], K=64, target="sm_80")
    assert "bound: float32 accumulation of K=64" in str(e.value)


def test_mma_tolerance_misuse_names_the_calling_line():
    from gluon_trace.errors import ArgumentError
    a = np.ones((4, 8), np.float16)
    with pytest.raises(ArgumentError) as e:
        gtt.mma_tolerance(a, a)  # shapes-do-not-chain
    assert "[M, K] and B [K, N]" in str(e.value) and f"test_testing_mma.py:{_line('# shapes-do-not-chain')}" in str(e.value)
    with pytest.raises(ArgumentError) as e:
        gtt.mma_tolerance(a, a.T, acc="f32")
    assert "acc='f32'" in str(e.value)


def _line(text):
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line and "_line(" not in line)

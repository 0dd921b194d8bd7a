"""fp8 on gfx942 (the FNUZ formats float8e4b8 / float8e5b16): conversions to and from
f32/f16/bf16 and the fp8 MFMAs, run on amdsim (whose fp8 instructions, amdsim_fp8.py, decode
with ml_dtypes, not with gluon_trace.fp8) against the interpreter and ml_dtypes/numpy: random
and edge inputs (overflow, NaN, subnormals, -0), poisoned outputs; operands loaded as fp8,
rounded from f32 in the kernel, or staged through LDS; and the refusals a user can hit."""
import ml_dtypes
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import fp8
from gluon_trace import language as gl
from gluon_trace.kernels.matmul_amd_8bit import matmul_fp8
from gluon_trace.language.amd.cdna3 import mfma

import amdsim

pytestmark = pytest.mark.usefixtures("amd_toolchain")

FORMATS = [("float8e4b8", ml_dtypes.float8_e4m3fnuz), ("float8e5b16", ml_dtypes.float8_e5m2fnuz)]
WIDE = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def edge_values(rng, name, n):
    top = fp8.FORMATS[name][2]
    x = rng.standard_normal(n) * np.exp2(rng.integers(-22, 18, n))
    special = [np.nan, np.inf, -np.inf, 0.0, -0.0, -1e-30, top, -top, top * 1.03, top * 1.07, -top * 1.07,
               top * 2, 2.0 ** -(fp8.FORMATS[name][1] + 3)]
    x[:len(special)] = special
    return x.astype(np.float32)


@gt.jit
def convert_kernel(out_ptr, out16_ptr, bits_ptr, in_ptr, F8: gl.constexpr, SRC: gl.constexpr, N: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([4], [gl.threads_per_warp()], [gl.num_warps()], [0])
    offs = gl.arange(0, N, layout=L)
    q = gl.load(in_ptr + offs).to(SRC).to(F8)
    gl.store(bits_ptr + offs, q)                          # bytes to memory
    back = gl.load(bits_ptr + offs)                       # and back (a load of fp8)
    gl.store(out_ptr + offs, back.to(gl.float32))
    gl.store(out16_ptr + offs, q.to(gl.float16))


@pytest.mark.parametrize("src", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name, ml", FORMATS)
def test_conversions_on_amdsim(rng, name, ml, src):
    n = 1024
    x = edge_values(rng, name, n)
    with np.errstate(over="ignore"):
        xs = x.astype(WIDE[src]).astype(np.float32)       # the value .to(SRC) holds
    want = xs.astype(ml)
    runs = {}
    for backend in ("amdsim", "interpreter"):
        out = np.full(n, 7.0, np.float32)
        o16 = np.full(n, 7.0, np.float16)
        bits = np.full(n, 0x5A, np.uint8).view(ml)
        cx = dict(F8=getattr(gl, name), SRC=getattr(gl, src), N=n)
        if backend == "amdsim":
            tk = convert_kernel.trace(out, o16, bits, x, **cx, num_warps=4, target="gfx942")
            text = tk.amdgcn("gfx942")
            kind = "fp8" if name == "float8e4b8" else "bf8"
            assert f"v_cvt_pk_{kind}_f32" in text and f"v_cvt_f32_{kind}" in text
            amdsim.simulate(tk, "gfx942", (1,), [out, o16, bits, x])
        else:
            convert_kernel[(1,)](out, o16, bits, x, **cx, backend="interpreter", target="gfx942")
        assert np.array_equal(bits.view(np.uint8), want.view(np.uint8)), backend
        assert np.array_equal(out, want.astype(np.float32), equal_nan=True), backend
        assert np.array_equal(o16.astype(np.float32), want.astype(np.float32), equal_nan=True), backend
        runs[backend] = bits.view(np.uint8).copy()
    assert (runs["amdsim"] == 0x80).any() and (runs["amdsim"] == 0).any()   # overflow and underflow seen


# -- the fp8 MFMAs ------------------------------------------------------------------------------------

@gt.jit
def fp8_mma_kernel(c_ptr, a_ptr, b_ptr, M, N, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                   F8: gl.constexpr, IM: gl.constexpr, TR: gl.constexpr, SOURCE: gl.constexpr,
                   F8B: gl.constexpr = None, KW: gl.constexpr = 8):
    """acc += A @ B over K in BK steps. SOURCE: "fp8" loads fp8 arrays straight into the operand
    layouts, "f32" loads f32 and rounds in the kernel, "lds" stages fp8 tiles through LDS. B is
    in F8B when given (gfx942 mixes the two formats), else in F8."""
    FB: gl.constexpr = F8 if F8B is None else F8B
    W: gl.constexpr = gl.num_warps()
    T: gl.constexpr = gl.threads_per_warp()
    IK: gl.constexpr = 16 if IM == 32 else 32
    acc_l: gl.constexpr = gl.amd.AMDMFMALayout(version=3, instr_shape=[IM, IM, IK], transposed=TR,
                                               warps_per_cta=[2, W // 2])
    a_l: gl.constexpr = gl.DotOperandLayout(0, acc_l, k_width=KW)   # 16: two MFMAs a register group
    b_l: gl.constexpr = gl.DotOperandLayout(1, acc_l, k_width=KW)
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [T // 4, 4], [W, 1], [1, 0])
    la: gl.constexpr = ld if SOURCE == "lds" else a_l
    lb: gl.constexpr = ld if SOURCE == "lds" else b_l
    rm = gl.arange(0, BM, layout=gl.SliceLayout(1, la))
    ka = gl.arange(0, BK, layout=gl.SliceLayout(0, la))
    kb = gl.arange(0, BK, layout=gl.SliceLayout(1, lb))
    rn = gl.arange(0, BN, layout=gl.SliceLayout(0, lb))
    if SOURCE == "lds":
        sl: gl.constexpr = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])
        a_s = gl.allocate_shared_memory(F8, [BM, BK], sl)
        b_s = gl.allocate_shared_memory(FB, [BK, BN], sl)
    acc = gl.zeros([BM, BN], gl.float32, acc_l)
    for k0 in gl.range(0, K, BK):
        am = (rm[:, None] < M) & (k0 + ka[None, :] < K)
        bm = (k0 + kb[:, None] < K) & (rn[None, :] < N)
        a = gl.load(a_ptr + rm[:, None] * K + k0 + ka[None, :], mask=am, other=0.0).to(F8)
        b = gl.load(b_ptr + (k0 + kb[:, None]) * N + rn[None, :], mask=bm, other=0.0).to(FB)
        if SOURCE == "lds":
            gl.thread_barrier()
            a_s.store(a)
            b_s.store(b)
            gl.thread_barrier()
            a = a_s.load(a_l)
            b = b_s.load(b_l)
        acc = mfma(a, b, acc)
    cm = gl.arange(0, BM, layout=gl.SliceLayout(1, acc_l))
    cn = gl.arange(0, BN, layout=gl.SliceLayout(0, acc_l))
    gl.store(c_ptr + cm[:, None] * N + cn[None, :], acc, mask=(cm[:, None] < M) & (cn[None, :] < N))


CASES = [("fp8-32x32", dict(im=32)), ("fp8-16x16-transposed", dict(im=16, tr=True)),
         ("f32-32x32-odd", dict(im=32, source="f32", m=50, n=37, k=72)),
         ("f32-16x16", dict(im=16, source="f32")),
         ("lds-32x32-odd-k", dict(im=32, source="lds", k=80)), ("lds-16x16", dict(im=16, source="lds", tr=True)),
         ("kpack2-32x32", dict(im=32, kw=16)), ("kpack2-16x16-lds", dict(im=16, kw=16, source="lds", bk=64))]


@pytest.mark.parametrize("name, ml", FORMATS)
@pytest.mark.parametrize("case, kw", CASES, ids=[c for c, _ in CASES])
def test_fp8_mfma_gemm(rng, name, ml, case, kw):
    m, n, k = kw.get("m", 64), kw.get("n", 64), kw.get("k", 64)
    source = kw.get("source", "fp8")
    scale = 4.0 if name == "float8e4b8" else 64.0
    a32 = (rng.standard_normal((m, k)) * scale).astype(np.float32)
    b32 = (rng.standard_normal((k, n)) * scale).astype(np.float32)
    a32[0, :4] = [1e-3, -2e-3, 3e-4, 0.0]                  # subnormal / zero operands
    if source == "f32":
        a, b = a32, b32
    else:
        a, b = a32.astype(ml), b32.astype(ml)
    exact = a32.astype(ml).astype(np.float64) @ b32.astype(ml).astype(np.float64)
    assert np.isfinite(exact).all()
    cx = dict(BM=64, BN=64, BK=kw.get("bk", 32), F8=getattr(gl, name), IM=kw["im"], TR=kw.get("tr", False),
              SOURCE=source, KW=kw.get("kw", 8))
    got = np.full((m, n), np.nan, np.float32)
    ref = np.full((m, n), np.nan, np.float32)
    tk = fp8_mma_kernel.trace(got, a, b, m, n, k, **cx, num_warps=4, target="gfx942")
    kind = "fp8" if name == "float8e4b8" else "bf8"
    ins = f"v_mfma_f32_{'32x32x16' if kw['im'] == 32 else '16x16x32'}_{kind}_{kind}"
    assert ins in tk.amdgcn("gfx942")
    amdsim.simulate(tk, "gfx942", (1,), [got, a, b, m, n, k])
    fp8_mma_kernel[(1,)](ref, a, b, m, n, k, **cx, num_warps=4, backend="interpreter", target="gfx942")
    # products of fp8 values are exact in f32; sums of at most K of them differ only in order
    tol = 1e-5 * (np.abs(a32.astype(ml).astype(np.float64)) @ np.abs(b32.astype(ml).astype(np.float64))) + 1e-30
    assert np.all(np.abs(got - exact) <= tol), np.max(np.abs(got - exact) / tol)
    assert np.all(np.abs(ref - exact) <= tol)


@pytest.mark.parametrize("name, ml", FORMATS)
def test_matmul_amd_gemm_on_fp8(rng, name, ml):
    """The example GEMM's K loop carries fp8 tiles: global -> LDS as bytes, each lane's 8 operand
    bytes back as one ds_read_b64 straight into the MFMA (no unpacking or converts in the loop)."""
    M, N, K = 100, 60, 96
    scale = 4.0 if name == "float8e4b8" else 64.0
    a = (rng.standard_normal((M, K)) * scale).astype(ml)
    b = (rng.standard_normal((K, N)) * scale).astype(ml)
    got = np.full((M, N), np.nan, np.float32)
    ref = np.full((M, N), np.nan, np.float32)
    args = (M, N, K, K, N, N)
    cx = dict(BM=64, BN=64, BK=32)
    tk = matmul_fp8.trace(a, b, got, *args, **cx, num_warps=4, target="gfx942")
    text = tk.amdgcn("gfx942")
    kind = "fp8" if name == "float8e4b8" else "bf8"
    assert f"v_mfma_f32_32x32x16_{kind}_{kind}" in text and "ds_read_b64" in text and "v_cvt" not in text
    amdsim.simulate(tk, "gfx942", (2, 1), [a, b, got, *args])
    matmul_fp8[(2, 1)](a, b, ref, *args, **cx, num_warps=4, backend="interpreter", target="gfx942")
    av, bv = a.astype(np.float64), b.astype(np.float64)
    tol = 1e-5 * (np.abs(av) @ np.abs(bv)) + 1e-30
    assert np.all(np.abs(got - av @ bv) <= tol) and np.all(np.abs(ref - av @ bv) <= tol)


MIXED = [("fp8-bf8-32x32", dict(im=32, fa="float8e4b8", fb="float8e5b16")),
         ("bf8-fp8-16x16-transposed", dict(im=16, tr=True, fa="float8e5b16", fb="float8e4b8")),
         ("fp8-bf8-32x32-transposed-f32", dict(im=32, tr=True, source="f32", fa="float8e4b8", fb="float8e5b16")),
         ("bf8-fp8-16x16-lds", dict(im=16, source="lds", fa="float8e5b16", fb="float8e4b8"))]


@pytest.mark.parametrize("case, kw", MIXED, ids=[c for c, _ in MIXED])
def test_mixed_fp8_bf8_mfma(rng, case, kw):
    """A in one FNUZ format and B in the other: v_mfma_*_fp8_bf8 / _bf8_fp8 (srcA's format
    first, so a transposed accumulator, which puts B in srcA, swaps the suffixes)."""
    m = n = k = 64
    mla, mlb = (dict(FORMATS)[kw[f]] for f in ("fa", "fb"))
    source = kw.get("source", "fp8")
    a32 = (rng.standard_normal((m, k)) * 8).astype(np.float32)
    b32 = (rng.standard_normal((k, n)) * 8).astype(np.float32)
    a, b = (a32, b32) if source == "f32" else (a32.astype(mla), b32.astype(mlb))
    av, bv = a32.astype(mla).astype(np.float64), b32.astype(mlb).astype(np.float64)
    exact = av @ bv
    cx = dict(BM=64, BN=64, BK=32, F8=getattr(gl, kw["fa"]), F8B=getattr(gl, kw["fb"]), IM=kw["im"],
              TR=kw.get("tr", False), SOURCE=source)
    got = np.full((m, n), np.nan, np.float32)
    ref = np.full((m, n), np.nan, np.float32)
    tk = fp8_mma_kernel.trace(got, a, b, m, n, k, **cx, num_warps=4, target="gfx942")
    fa, fb = ("fp8" if kw[f] == "float8e4b8" else "bf8" for f in ("fa", "fb"))
    first, second = (fb, fa) if kw.get("tr") else (fa, fb)
    assert f"_{first}_{second} " in tk.amdgcn("gfx942")
    amdsim.simulate(tk, "gfx942", (1,), [got, a, b, m, n, k])
    fp8_mma_kernel[(1,)](ref, a, b, m, n, k, **cx, num_warps=4, backend="interpreter", target="gfx942")
    tol = 1e-5 * (np.abs(av) @ np.abs(bv)) + 1e-30
    assert np.all(np.abs(got - exact) <= tol) and np.all(np.abs(ref - exact) <= tol)


def test_mixed_formats_only_on_mfma():
    from gluon_trace.language.nvidia.ampere import mma_v2

    @gt.jit
    def k(p):
        acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1], instr_shape=[16, 8])
        a = gl.zeros([64, 32], gl.float8e4nv, gl.DotOperandLayout(0, acc_l, k_width=4))
        b = gl.zeros([32, 64], gl.float8e5, gl.DotOperandLayout(1, acc_l, k_width=4))
        mma_v2(a, b, gl.zeros([64, 64], gl.float32, acc_l))
    with pytest.raises(gt.TraceError) as e:
        k.trace(gl.pointer(gl.float32), target="sm_90a")
    assert "both operands need one dtype" in str(e.value) and "test_amd_fp8.py" in str(e.value)


def test_rounded_operands_are_packed_from_f32():
    """Operands rounded from f32 in the kernel go to the MFMA as two v_cvt_pk and one v_perm per
    dword, not one convert and mask per byte."""
    a = np.zeros((64, 16), np.float32)
    b = np.zeros((16, 32), np.float32)
    cx = dict(BM=64, BN=32, BK=16, F8=gl.float8e4b8, IM=32, TR=False, SOURCE="f32")
    text = fp8_mma_kernel.trace(np.zeros((64, 32), np.float32), a, b, 64, 32, 16, **cx, num_warps=2,
                                target="gfx942").amdgcn("gfx942")
    # one MFMA per wave: 8 bytes of A and 8 of B a lane, 4 dwords, 2 cvt_pk and a v_perm each
    assert text.count("v_mfma_f32_32x32x16_fp8_fp8") == 1
    assert text.count("v_cvt_pk_fp8_f32") == 8 and text.count("v_perm_b32") == 4
    assert "0xff," not in text
    # stored to LDS: the same, for each dword a ds_write takes
    cx["SOURCE"] = "lds"
    text = fp8_mma_kernel.trace(np.zeros((64, 32), np.float32), a, b, 64, 32, 16, **cx, num_warps=2,
                                target="gfx942").amdgcn("gfx942")
    dwords = sum({"ds_write_b64": 2, "ds_write_b32": 1, "ds_write2_b32": 2, "ds_write2_b64": 4}.get(
        ln.split()[0], 0) for ln in text.splitlines() if ln.strip().startswith("ds_write"))
    assert dwords and text.count("v_cvt_pk_fp8_f32") == 2 * dwords and "0xff," not in text


def test_mfma_passes_and_hazards():
    from gluon_trace.backends.amd import mfma as mf
    import amdsim_fp8
    for ins, p in (("v_mfma_f32_32x32x16_fp8_fp8", 8), ("v_mfma_f32_16x16x32_bf8_bf8", 4),
                   ("v_mfma_f32_32x32x16_bf8_fp8", 8), ("v_mfma_f32_16x16x32_fp8_bf8", 4)):
        assert mf.passes(ins) == p == amdsim_fp8.PASSES[ins[len("v_mfma_f32_"):]]


@pytest.mark.parametrize("ins, p", [("v_mfma_f32_32x32x16_fp8_fp8", 8), ("v_mfma_f32_16x16x32_bf8_bf8", 4),
                                     ("v_mfma_f32_32x32x16_bf8_fp8", 8), ("v_mfma_f32_16x16x32_fp8_bf8", 4)])
def test_fp8_mfma_result_read_waits_p_plus_3(ins, p):
    """hazards.py: a VALU reading an fp8 MFMA's D waits P + 3 states (CDNA3 ISA 7.6), a VALU
    writing srcA 2 states before the MFMA reads it."""
    from gluon_trace.backends.amd.hazards import fix_hazards
    from gluon_trace.backends.amd.mir import Imm, Inst
    from gluon_trace.backends.amd.target import TARGETS
    from physregs import v
    nd = 16 if "32x32" in ins else 4
    d = v(20, nd)
    code = [Inst("v_mov_b32", [v(4)], [Imm(1)], kind="valu"),
            Inst(ins, [d], [v(4, 2), v(6, 2), d], kind="valu"),
            Inst("v_add_f32", [v(2)], [v(20), v(3)], kind="valu")]
    out = [x for x in fix_hazards(code, TARGETS["gfx942"]) if isinstance(x, Inst)]
    at = next(j for j, x in enumerate(out) if x.op == ins)

    def waits(part):
        return sum(int(x.uses[0]) + 1 for x in part if x.op == "s_nop")
    assert waits(out[1:at]) == 2 and waits(out[at + 1:]) == p + 3 and out[-1].op == "v_add_f32"


def test_simulator_fp8_tables_match_amds_matrix_calculator():
    """amdsim's fp8 MFMA operand and result tables (all eight fp8/bf8 combinations) against AMD's
    Matrix Instruction Calculator (set GLUON_TRACE_MATRIX_CALCULATOR to its matrix_calculator.py):
    A/B byte j of lane l is k = 8 * (l // M) + j of row/column l % M, D as the other MFMAs."""
    import os
    import amdsim_fp8 as F
    import amdsim_mma as S
    from test_amd_mfma import _calculator_table
    path = os.environ.get("GLUON_TRACE_MATRIX_CALCULATOR")
    if not path:
        pytest.skip("set GLUON_TRACE_MATRIX_CALCULATOR to AMD's matrix_calculator.py to run this")
    for shape, (M, K, _) in F.SHAPES.items():
        ins = "v_mfma_f32_" + shape
        kpl = K // (64 // M)
        for mat in "AB":
            for (x, y), cells in _calculator_table(path, "cdna3", ins, mat).items():
                i, k = (x, y) if mat == "A" else (y, x)
                j = k % kpl
                assert cells == {(j // 4, i % M + M * (k // kpl), 8 * (j % 4))}, (ins, mat, x, y, cells)
        rows, cols = S._d_map(M)
        for (i, n), cells in _calculator_table(path, "cdna3", ins, "D").items():
            ((r, ln, _),) = cells
            assert (rows[ln, r], cols[ln, r]) == (i, n), (ins, i, n, cells)


# -- refusals -----------------------------------------------------------------------------------------

@gt.jit
def widen_kernel(out_ptr, in_ptr):
    L: gl.constexpr = gl.BlockedLayout([4], [gl.threads_per_warp()], [gl.num_warps()], [0])
    offs = gl.arange(0, 256, layout=L)
    gl.store(out_ptr + offs, gl.load(in_ptr + offs).to(gl.float32))


@pytest.mark.parametrize("ocp, fnuz", [("float8e4nv", "float8e4b8"), ("float8e5", "float8e5b16")])
def test_ocp_fp8_refused_on_gfx942(ocp, fnuz):
    k = widen_kernel.trace(gl.pointer(gl.float32), gl.pointer(getattr(gl, ocp)), num_warps=4)
    with pytest.raises(gt.CompileError) as e:
        k.amdgcn("gfx942")
    msg = str(e.value)
    assert f"gl.{fnuz} (for {ocp})" in msg and "FNUZ" in msg and "test_amd_fp8.py" in msg


@pytest.mark.parametrize("target", ["gfx90a", "gfx1100"])
def test_fp8_refused_before_gfx942(target):
    k = widen_kernel.trace(gl.pointer(gl.float32), gl.pointer(gl.float8e4b8), num_warps=2)
    with pytest.raises(gt.CompileError) as e:
        k.amdgcn(target)
    assert "fp8 needs gfx942" in str(e.value) and target in str(e.value) and "test_amd_fp8.py" in str(e.value)


@pytest.mark.parametrize("fnuz, ocp", [("float8e4b8", "float8e4nv"), ("float8e5b16", "float8e5")])
def test_fnuz_refused_on_nvidia(fnuz, ocp):
    k = widen_kernel.trace(gl.pointer(gl.float32), gl.pointer(getattr(gl, fnuz)), num_warps=4)
    with pytest.raises(gt.CompileError) as e:
        k.ptx("sm_90a")
    msg = str(e.value)
    assert f"gl.{ocp} (for {fnuz})" in msg and "no NVIDIA instruction" in msg and "test_amd_fp8.py" in msg


# -- tinygrad's CDNA emulator (marker amd_emulator) ---------------------------------------------------

@pytest.mark.amd_emulator
@pytest.mark.parametrize("name, ml", FORMATS)
@pytest.mark.parametrize("source", ["fp8", "f32"])
def test_fp8_mfma_on_tinygrads_cdna_emulator(rng, name, ml, source):
    """The fp8 MFMA GEMM (16x16x32; operands loaded as bytes, or rounded in the kernel by
    v_cvt_pk and packed by v_perm) run by tinygrad's CDNA emulator, an executor we did not write.

    tinygrad (a9069c1) decodes and encodes gfx942's fp8/bf8 as the OCP formats (bias 7 / 15), where
    gfx942 has the FNUZ ones (bias 8 / 16). Away from the codes the two read differently (0x80,
    the top exponent), the same byte is worth twice as much in OCP, so the emulator must compute
    4 * (A @ B) from the bytes of our run, and round 2x to those same bytes: that checks the lane
    tables, the packing and the byte order without trusting our simulator, but not the bias.
    Its f32 -> fp8 also flushes subnormal results to (signed) zero, so the inputs stay normal."""
    import emulator
    try:
        emulator.load()
    except emulator.EmulatorMissing as e:
        pytest.skip(f"tinygrad's emulator is not available: {e}")
    m, n, k = 64, 64, 64
    scale = 4.0 if name == "float8e4b8" else 64.0
    def normal_values(shape):  # magnitudes in [scale / 4, 4 * scale): fp8 normals in both readings
        return (rng.choice([-1.0, 1.0], shape) * scale * np.exp2(rng.uniform(-2, 2, shape))).astype(np.float32)
    a32, b32 = normal_values((m, k)), normal_values((k, n))
    a8, b8 = a32.astype(ml), b32.astype(ml)
    for x in (a8, b8):   # no code the two formats read as different kinds of value
        bits = x.view(np.uint8)
        assert not ((bits & 0x7F) == 0x7F).any() and not (bits == 0x80).any() and not ((bits & 0x7C) == 0x7C).any()
    cx = dict(BM=64, BN=64, BK=32, F8=getattr(gl, name), IM=16, TR=False, SOURCE=source)
    ref = np.full((m, n), np.nan, np.float32)
    a, b = (a8, b8) if source == "fp8" else (a32, b32)
    fp8_mma_kernel[(1,)](ref, a, b, m, n, k, **cx, num_warps=4, backend="interpreter", target="gfx942")
    got = np.full((m, n), np.nan, np.float32)
    ea, eb = (a8, b8) if source == "fp8" else (2 * a32, 2 * b32)
    tk = fp8_mma_kernel.trace(got, ea, eb, m, n, k, **cx, num_warps=4, target="gfx942")
    ck = emulator.run(tk, (1,), [got, ea, eb, m, n, k], target="gfx942")
    assert ("v_cvt_pk_" in ck.asm) == (source == "f32") and "v_mfma_f32_16x16x32" in ck.asm
    # the same products, summed in another order: as close as the other MFMA emulator tests ask
    np.testing.assert_allclose(got, 4 * ref, rtol=1e-5, atol=1e-5 * np.sqrt(k) * 4 * scale ** 2)
    assert np.mean(got == 4 * ref) > 0.9   # not merely within tolerance: mostly the very same sums


# -- gl.device_print of fp8 values ------------------------------------------------------------------

@gt.jit
def print_fp8_kernel(x_ptr, F8: gl.constexpr):
    offs = gl.arange(0, 128, layout=gl.BlockedLayout([2], [gl.threads_per_warp()], [1], [0]))
    q = gl.load(x_ptr + offs).to(F8)
    gl.device_print("q=", q)


@pytest.mark.parametrize("name, ml", FORMATS)
def test_device_print_of_fp8(rng, monkeypatch, name, ml):
    """The byte an fp8 element is printed as its value, as the interpreter prints it (NaN included)."""
    from test_amd_print import check
    x = edge_values(rng, name, 128)
    lines = check(print_fp8_kernel, lambda: [x.copy()], (1,), dict(F8=getattr(gl, name)), 1, "gfx942", monkeypatch)
    assert any("nan" in ln for ln in lines) and len(lines) == 128


@gt.jit
def other_types_kernel(bits_i_ptr, bits_d_ptr, out_i_ptr, out_d_ptr, out_b_ptr, out_q_ptr, i_ptr, d_ptr,
                       F8: gl.constexpr, G8: gl.constexpr, N: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([2], [gl.threads_per_warp()], [gl.num_warps()], [0])
    offs = gl.arange(0, N, layout=L)
    qi = gl.load(i_ptr + offs).to(F8)          # int32 -> fp8
    qd = gl.load(d_ptr + offs).to(F8)          # float64 -> fp8: one rounding
    gl.store(bits_i_ptr + offs, qi)
    gl.store(bits_d_ptr + offs, qd)
    gl.store(out_i_ptr + offs, qd.to(gl.int32))       # fp8 -> int32 (truncating)
    gl.store(out_d_ptr + offs, qd.to(gl.float64))
    gl.store(out_b_ptr + offs, qd.to(gl.int1).to(gl.int32))
    gl.store(out_q_ptr + offs, qd.to(G8))            # one fp8 format to the other


def nearest_codes(x, name, ml):
    """Codes of the fp8 values nearest float64 x, found among all 256 (ml_dtypes' own cast from
    float64 goes through float32, which rounds twice); past the top, NaN (0x80)."""
    codes = np.arange(256, dtype=np.uint8)
    vals = codes.view(ml).astype(np.float64)
    ok = ~np.isnan(vals) & ~((vals == 0) & (codes != 0))
    codes, vals = codes[ok], vals[ok]
    d = np.abs(x[:, None] - vals[None, :])
    best = np.where(d == d.min(axis=1, keepdims=True), codes[None, :] & 1, 2)   # a tie goes to the even code
    out = codes[np.argmin(best, axis=1)]
    mant, _, top, _ = fp8.FORMATS[name]
    half_ulp = 2.0 ** (np.floor(np.log2(top)) - mant - 1)   # the tie above the top rounds up, past it
    return np.where(np.abs(x) >= top + half_ulp, np.uint8(0x80), out)


@pytest.mark.parametrize("name, ml", FORMATS)
def test_conversions_with_other_types_on_amdsim(rng, name, ml):
    n = 512
    top = fp8.FORMATS[name][2]
    ints = rng.integers(-int(top) * 2, int(top) * 2, n).astype(np.int32)
    ints[:4] = [0, -1, 2**31 - 1, -2**31]
    x = rng.standard_normal(n) * np.exp2(rng.integers(-12, 12, n))
    # float64 values just past an fp8 rounding tie, which rounding through f32 to nearest would lose
    ulp = 2.0 ** (np.floor(np.log2(np.abs(x[:64]) + 1e-300)) - fp8.FORMATS[name][0])
    x[:64] = (np.round(x[:64] / ulp) + 0.5) * ulp * (1 + 2.0 ** -40)
    other = "float8e5b16" if name == "float8e4b8" else "float8e4b8"
    results = []
    for backend in ("amdsim", "interpreter"):
        outs = [np.full(n, 0x5A, np.uint8).view(ml), np.full(n, 0x5A, np.uint8).view(ml),
                np.full(n, -7, np.int32), np.full(n, 7.5, np.float64), np.full(n, -7, np.int32),
                np.full(n, 0x5A, np.uint8).view(dict(FORMATS)[other])]
        cx = dict(F8=getattr(gl, name), G8=getattr(gl, other), N=n)
        if backend == "amdsim":
            tk = other_types_kernel.trace(*outs, ints, x, **cx, num_warps=2, target="gfx942")
            amdsim.simulate(tk, "gfx942", (1,), [*outs, ints, x])
        else:
            other_types_kernel[(1,)](*outs, ints, x, **cx, num_warps=2, backend="interpreter", target="gfx942")
        results.append(outs)
    for got, ref in zip(*results):
        assert np.array_equal(got.view(np.uint8) if got.itemsize == 1 else got,
                              ref.view(np.uint8) if ref.itemsize == 1 else ref, equal_nan=True)
    bits_i, bits_d, out_i, out_d, out_b, out_q = results[1]
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.array_equal(bits_i.view(np.uint8), ints.astype(np.float64).astype(ml).view(np.uint8))
        assert np.array_equal(bits_d.view(np.uint8), nearest_codes(x, name, ml))
        v = bits_d.astype(np.float64)
        assert np.array_equal(out_d, v, equal_nan=True) and np.array_equal(out_b, (v != 0).astype(np.int32))
        assert np.array_equal(out_q.view(np.uint8), v.astype(np.float32).astype(out_q.dtype).view(np.uint8))


@gt.jit
def lds_widen_kernel(out_ptr, in_ptr, F8: gl.constexpr, OUT: gl.constexpr):
    """fp8 tiles through LDS and widened (dequantizing fp8 weights for an f16 MMA, say)."""
    T: gl.constexpr = gl.threads_per_warp()
    ld: gl.constexpr = gl.BlockedLayout([1, 4], [T // 8, 8], [gl.num_warps(), 1], [1, 0])
    use: gl.constexpr = gl.BlockedLayout([1, 8], [T // 4, 4], [gl.num_warps(), 1], [1, 0])
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, ld))
    cols = gl.arange(0, 32, layout=gl.SliceLayout(0, ld))
    q = gl.load(in_ptr + rows[:, None] * 32 + cols[None, :])
    s = gl.allocate_shared_memory(F8, [64, 32], gl.SwizzledSharedLayout(vec=4, per_phase=1, max_phase=4,
                                                                          order=[1, 0]))
    s.store(q)
    gl.thread_barrier()
    w = s.load(use).to(OUT)
    r2 = gl.arange(0, 64, layout=gl.SliceLayout(1, use))
    c2 = gl.arange(0, 32, layout=gl.SliceLayout(0, use))
    gl.store(out_ptr + r2[:, None] * 32 + c2[None, :], w)


@pytest.mark.parametrize("out", ["float32", "float16"])
@pytest.mark.parametrize("name, ml", FORMATS)
def test_lds_bytes_widened_two_at_a_time(rng, name, ml, out):
    """Every code (NaN, subnormals included), read from LDS a dword at a time, widened by
    v_cvt_pk_f32_fp8/bf8 (SDWA WORD_1 for bytes 2-3): two instructions a dword, no byte extracts."""
    q = rng.permutation(np.tile(np.arange(256, dtype=np.uint8), 8)).reshape(64, 32).view(ml)
    odt = np.float32 if out == "float32" else np.float16
    got = np.full((64, 32), 3.0, odt)
    tk = lds_widen_kernel.trace(got, q, F8=getattr(gl, name), OUT=getattr(gl, out), num_warps=2, target="gfx942")
    text = tk.amdgcn("gfx942")
    kind = "fp8" if name == "float8e4b8" else "bf8"
    # 64 x 32 bytes over 128 lanes: 16 a lane, 4 dwords, 8 paired converts, half of them SDWA
    assert text.count(f"v_cvt_pk_f32_{kind}") == 8 and text.count("src0_sel:WORD_1") == 4
    import re
    assert not re.search(r"v_bfe_u32 v\d+, v\d+, (8|16|24), 8\b", text) and f"v_cvt_f32_{kind}" not in text
    amdsim.simulate(tk, "gfx942", (1,), [got, q])
    ref = np.full((64, 32), 3.0, odt)
    lds_widen_kernel[(1,)](ref, q, F8=getattr(gl, name), OUT=getattr(gl, out), num_warps=2, backend="interpreter")
    want = q.astype(np.float32).astype(odt)
    assert np.array_equal(got, want, equal_nan=True) and np.array_equal(ref, want, equal_nan=True)


@gt.jit
def constants_kernel(out_ptr, in_ptr, n, F8: gl.constexpr, N: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([4], [gl.threads_per_warp()], [gl.num_warps()], [0])
    offs = gl.arange(0, N, layout=L)
    q = gl.load(in_ptr + offs, mask=offs < n, other=1.5)            # masked fp8 load, fp8 `other`
    big = gl.full([N], 3.25, F8, layout=L)                           # an fp8 constant tile
    q = gl.where(offs % 3 == 0, big, q)                              # select between fp8 values
    gl.store(out_ptr + offs, q.to(gl.float32))
    gl.store(out_ptr + N + offs, gl.zeros([N], F8, layout=L).to(gl.float32) + offs.to(gl.float32))


@pytest.mark.parametrize("name, ml", FORMATS)
def test_constants_masks_and_selects(rng, name, ml):
    n, N = 300, 512
    x = (rng.standard_normal(N) * 8).astype(ml)
    outs = []
    for backend in ("amdsim", "interpreter"):
        out = np.full(2 * N, np.nan, np.float32)
        if backend == "amdsim":
            tk = constants_kernel.trace(out, x, n, F8=getattr(gl, name), N=N, num_warps=4, target="gfx942")
            amdsim.simulate(tk, "gfx942", (1,), [out, x, n])
        else:
            constants_kernel[(1,)](out, x, n, F8=getattr(gl, name), N=N, num_warps=4, backend="interpreter")
        outs.append(out)
    offs = np.arange(N)
    want = np.where(offs % 3 == 0, np.float32(3.25).astype(ml).astype(np.float32),
                    np.where(offs < n, x.astype(np.float32), np.float32(1.5)))
    for out in outs:
        assert np.array_equal(out[:N], want) and np.array_equal(out[N:], offs.astype(np.float32))

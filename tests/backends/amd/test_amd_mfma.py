"""MFMA (gfx90a, gfx942), WMMA (gfx1100) and dot_fma (all three) lowered by backends/amd/mfma.py,
run on amdsim (whose matrix instructions, amdsim_mma.py, follow the ISA tables, and which fails
a read of an MFMA result before its wait states) against the interpreter and numpy: random
inputs, poisoned outputs, every shape and dtype, operands loaded straight into their
DotOperandLayouts or converted there, a gl.range K loop with masks on odd M/N/K, and the
refusals a user can hit."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import dtypes as dtypes_mod
from gluon_trace import language as gl
from gluon_trace.language.amd.cdna3 import mfma
from gluon_trace.language.amd.rdna3 import wmma

import amdsim

pytestmark = pytest.mark.usefixtures("amd_toolchain")

DT = {"float32": gl.float32, "float16": gl.float16, "bfloat16": gl.bfloat16, "int8": gl.int8,
      "int32": gl.int32, "float8e4nv": gl.float8e4nv}
POISON = {np.float32: np.float32(np.nan), np.int32: np.int32(-123456789)}
VERSION = {"gfx90a": 2, "gfx942": 3}


@gt.jit
def mma_kernel(c_ptr, a_ptr, b_ptr, M, N, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
               OP: gl.constexpr, D: gl.constexpr, ACC: gl.constexpr, IM: gl.constexpr, IK: gl.constexpr,
               KW: gl.constexpr, V: gl.constexpr, TR: gl.constexpr, WM: gl.constexpr, CONVERT: gl.constexpr,
               TPW: gl.constexpr = None):
    W: gl.constexpr = gl.num_warps()
    T: gl.constexpr = gl.threads_per_warp()
    if OP == "mfma":
        acc_l: gl.constexpr = gl.amd.AMDMFMALayout(version=V, instr_shape=[IM, IM, IK], transposed=TR,
                                                   warps_per_cta=[WM, W // WM], tiles_per_warp=TPW)
    elif OP == "wmma":
        acc_l: gl.constexpr = gl.amd.AMDWMMALayout(version=1, transposed=TR, warps_per_cta=[WM, W // WM],
                                                   tiles_per_warp=TPW)
    else:
        acc_l: gl.constexpr = gl.BlockedLayout([1, 2], [T // 4, 4], [WM, W // WM], [1, 0])
    a_l: gl.constexpr = gl.DotOperandLayout(0, acc_l, k_width=KW)
    b_l: gl.constexpr = gl.DotOperandLayout(1, acc_l, k_width=KW)
    ld: gl.constexpr = gl.BlockedLayout([1, 4], [T // 4, 4], [W, 1], [1, 0])
    la: gl.constexpr = ld if CONVERT else a_l
    lb: gl.constexpr = ld if CONVERT else b_l
    rm = gl.arange(0, BM, layout=gl.SliceLayout(1, la))
    ka = gl.arange(0, BK, layout=gl.SliceLayout(0, la))
    kb = gl.arange(0, BK, layout=gl.SliceLayout(1, lb))
    rn = gl.arange(0, BN, layout=gl.SliceLayout(0, lb))
    acc = gl.zeros([BM, BN], DT[ACC], acc_l)
    for k0 in gl.range(0, K, BK):
        am = (rm[:, None] < M) & (k0 + ka[None, :] < K)
        bm = (k0 + kb[:, None] < K) & (rn[None, :] < N)
        a = gl.load(a_ptr + rm[:, None] * K + k0 + ka[None, :], mask=am, other=0).to(DT[D])
        b = gl.load(b_ptr + (k0 + kb[:, None]) * N + rn[None, :], mask=bm, other=0).to(DT[D])
        if CONVERT:
            a = gl.convert_layout(a, a_l)
            b = gl.convert_layout(b, b_l)
        if OP == "mfma":
            acc = mfma(a, b, acc)
        elif OP == "wmma":
            acc = wmma(a, b, acc)
        else:
            acc = gl.dot_fma(a, b, acc)
    cm = gl.arange(0, BM, layout=gl.SliceLayout(1, acc_l))
    cn = gl.arange(0, BN, layout=gl.SliceLayout(0, acc_l))
    out = acc.to(gl.float32) if ACC != "int32" else acc
    gl.store(c_ptr + cm[:, None] * N + cn[None, :], out, mask=(cm[:, None] < M) & (cn[None, :] < N))


def inputs(d, m, n, k, seed):
    """Random operands exactly representable in ``d`` (f32 / int32 arrays the kernel converts)."""
    r = np.random.default_rng(seed)
    if d in ("int8", "int32"):
        lo, hi = (-128, 128) if d == "int8" else (-3000, 3000)
        return r.integers(lo, hi, (m, k)).astype(np.int32), r.integers(lo, hi, (k, n)).astype(np.int32)
    a, b = r.standard_normal((m, k)).astype(np.float32), r.standard_normal((k, n)).astype(np.float32)
    if d == "float16":
        return a.astype(np.float16).astype(np.float32), b.astype(np.float16).astype(np.float32)
    if d == "bfloat16":
        return dtypes_mod.round_bf16(a), dtypes_mod.round_bf16(b)
    return a, b


def run(target, op, d, m, n, k, *, acc=None, bm=None, bn=None, bk=None, im=32, ik=None, kw=None,
        tr=False, wm=2, convert=False, nw=4, seed=0, v=None, tpw=None):
    acc = acc or ("int32" if d == "int8" else "float32")
    a, b = inputs(d, m, n, k, seed)
    out_np = np.int32 if acc == "int32" else np.float32
    cx = dict(BM=bm or m, BN=bn or n, BK=bk or k, OP=op, D=d, ACC=acc, IM=im, IK=ik or 1, KW=kw or 1,
              V=v or VERSION.get(target, 3), TR=tr, WM=wm, CONVERT=convert, TPW=tpw)
    got = np.full((m, n), POISON[out_np], out_np)
    ref = np.full((m, n), POISON[out_np], out_np)
    tk = mma_kernel.trace(got, a, b, m, n, k, **cx, num_warps=nw, target=target)
    sim = amdsim.simulate(tk, target, (1,), [got, a, b, m, n, k])
    mma_kernel[(1,)](ref, a, b, m, n, k, **cx, num_warps=nw, backend="interpreter", target=target)
    if op == "mfma" and d == "float32":  # the IR's f32 MMA takes tf32 inputs (as the interpreter)
        from gluon_trace.backends.interpreter.rules_mma import _tf32
        a, b = _tf32(a), _tf32(b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    if acc == "int32":
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(ref, exact.astype(np.int64).astype(np.int32))
    else:
        tol = 2e-3 if acc == "float16" else 1e-5
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.sqrt(k))
        np.testing.assert_allclose(ref, exact, rtol=10 * tol, atol=10 * tol * np.sqrt(k))
    return tk, sim


# (dtype, instruction M, its K on gfx90a, on gfx942)
MFMA_CASES = [("float16", 32, 8, 8), ("float16", 16, 16, 16), ("bfloat16", 32, 8, 8),
              ("bfloat16", 16, 16, 16), ("int8", 32, 8, 16), ("int8", 16, 16, 32),
              ("float32", 32, 2, 2), ("float32", 16, 4, 4)]


@pytest.mark.parametrize("target", ["gfx90a", "gfx942"])
@pytest.mark.parametrize("d,im,k90,k94", MFMA_CASES, ids=[f"{c[0]}-{c[1]}" for c in MFMA_CASES])
def test_mfma_shapes(target, d, im, k90, k94):
    """Each MFMA, operands loaded in their DotOperandLayouts: two instruction tiles per warp
    along N, two K steps."""
    ik = k90 if target == "gfx90a" else k94
    kpl = ik // (64 // im)
    run(target, "mfma", d, 2 * im, 4 * im, 2 * ik, ik=ik, im=im, kw=kpl, seed=hash((target, d, im)) % 1000)


@pytest.mark.parametrize("target", ["gfx90a", "gfx942"])
@pytest.mark.parametrize("im", [32, 16])
def test_mfma_transposed_kpack_convert(target, im):
    """transposed=True (B feeds srcA), k_width twice the instruction's (two MFMAs per register
    group), operands converted from a blocked layout, a K loop with masks on odd sizes."""
    ik = 8 if im == 32 else 16
    run(target, "mfma", "float16", 2 * im - 3, 2 * im - 5, 3 * ik + 5, bm=2 * im, bn=2 * im, bk=2 * ik,
        im=im, ik=ik, kw=2 * ik // (64 // im), tr=True, convert=True, seed=7)


@pytest.mark.parametrize("target", ["gfx90a", "gfx942"])
def test_mfma_k_loop_odd_sizes_bf16(target):
    run(target, "mfma", "bfloat16", 45, 37, 61, bm=64, bn=64, bk=16, im=32, ik=8, kw=4, seed=3)


def test_mfma_int8_k_loop_gfx942():
    run("gfx942", "mfma", "int8", 30, 20, 70, bm=32, bn=32, bk=32, im=16, ik=32, kw=8, wm=2, seed=5)


def test_mfma_f16_accumulator():
    """float16 accumulator: the f32 MFMA chain rounded once per op, as the interpreter rounds."""
    run("gfx942", "mfma", "float16", 64, 64, 16, acc="float16", im=32, ik=8, kw=4, seed=11)


def test_mfma_one_warp_broadcast():
    """More warps than tiles along M: the warps along M compute copies."""
    run("gfx90a", "mfma", "float16", 32, 64, 16, im=32, ik=8, kw=4, wm=2, seed=12)


@pytest.mark.parametrize("d", ["float16", "bfloat16"])
@pytest.mark.parametrize("tr", [False, True])
def test_wmma(d, tr):
    run("gfx1100", "wmma", d, 32, 64, 32, kw=16, tr=tr, seed=13 + tr)


def test_wmma_k_loop_convert_masked():
    run("gfx1100", "wmma", "float16", 27, 29, 37, bm=32, bn=32, bk=16, kw=16, convert=True, seed=17)


@pytest.mark.parametrize("target", ["gfx90a", "gfx942", "gfx1100"])
@pytest.mark.parametrize("d", ["float32", "int32"])
def test_dot_fma(target, d):
    run(target, "dot_fma", d, 19, 23, 13, acc=d, bm=32, bn=32, bk=8,
        seed=19, convert=target == "gfx942")


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5, 24, 70])  # 24, 70: the AGPR attempt does not fit; VGPRs spill
def test_random_matrix_layouts(seed):
    """Random targets, dtypes, instruction shapes, tiles_per_warp, warp grids, transposition and
    kpack, tile sizes a few instruction tiles large: the layouts' register numbering as Triton
    grows it must still give each instruction the ISA's fragment."""
    r = np.random.default_rng(100 + seed)
    target = ["gfx90a", "gfx942", "gfx1100"][seed % 3]
    nw = int(r.choice([1, 2, 4]))
    wm = int(r.choice([w for w in (1, 2, 4) if w <= nw]))
    tpw = (int(r.choice([1, 2])), int(r.choice([1, 2])))
    tr = bool(r.integers(2))
    if target == "gfx1100":
        op, d, im, ik, kw = "wmma", str(r.choice(["float16", "bfloat16"])), 16, 16, 16
        kt = 16
    else:
        op, d = "mfma", str(r.choice(["float16", "bfloat16", "int8", "float32"]))
        im = int(r.choice([32, 16]))
        ik = dict(MFMA_CASES_K[target])[(d, im)]
        kw = ik // (64 // im) * int(r.choice([1, 2]) if d != "float32" else 1)
        kt = kw * (64 // im)
    bm = im * tpw[0] * wm * int(r.choice([1, 2]))
    bn = im * tpw[1] * (nw // wm) * int(r.choice([1, 2]))
    bk = kt * int(r.choice([1, 2]))
    m, n, k = bm - int(r.integers(0, 5)), bn - int(r.integers(0, 5)), bk + int(r.integers(0, bk))
    run(target, op, d, m, n, k, bm=bm, bn=bn, bk=bk, im=im, ik=ik, kw=kw, tr=tr, wm=wm, nw=nw,
        tpw=tpw, seed=seed, convert=bool(r.integers(2)))


def test_mfma_accumulators_spill(monkeypatch, tmp_path):
    """A 128x128 f32 accumulator in one wave (256 registers of it alone): it fits the AGPRs
    exactly (each MFMA accumulating in place); in VGPRs (the fallback when AGPRs do not fit) the
    16-dword MFMA accumulators spill to scratch a dword at a time and come back right."""
    tk, sim = run("gfx942", "mfma", "float16", 128, 128, 16, im=32, ik=8, kw=4, wm=1, nw=1, seed=37)
    assert not any(sim.text(k).startswith("scratch_") for k in range(len(sim.code)))
    assert tk.for_target("gfx942").compile("gfx942").extra["agprs"] == 256
    from gluon_trace.backends.amd import compiler
    monkeypatch.setattr(compiler, "agpr_variants", lambda code, t: iter(()))
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path))  # (binaries built with AGPRs)
    tk, sim = run("gfx942", "mfma", "float16", 128, 128, 16, im=32, ik=8, kw=4, wm=1, nw=1, seed=37)
    assert any(sim.text(k).startswith("scratch_store") for k in range(len(sim.code)))


MFMA_CASES_K = {t: [((d, im), k90 if t == "gfx90a" else k94) for d, im, k90, k94 in MFMA_CASES]
                for t in ("gfx90a", "gfx942")}


@pytest.mark.parametrize("kind,m,k", [("mfma", 32, 8), ("mfma", 16, 16), ("mfma", 32, 16), ("mfma", 16, 32),
                                      ("wmma", 16, 16)])
def test_simulator_tables_match_layouts(kind, m, k):
    """amdsim_mma's fragment maps (from the ISA text) and gluon_trace's layouts (mma_layouts.py)
    were written apart; one instruction tile, one warp: every (lane, register) agrees."""
    import amdsim_mma as S
    from gluon_trace.mma_layouts import AMDMFMALayout, AMDWMMALayout, DotOperandLayout
    lanes = 64 if kind == "mfma" else 32
    if kind == "mfma":
        acc = AMDMFMALayout(version=3, instr_shape=[m, m, k], warps_per_cta=[1, 1])
        rows, cols = S._d_map(m)
        kpl = k // (64 // m)
    else:
        acc = AMDWMMALayout(version=1, warps_per_cta=[1, 1])
        ln, v = np.arange(32)[:, None], np.arange(8)[None, :]
        rows, cols = 2 * v + ln // 16, np.broadcast_to(ln % 16, (32, 8))
        kpl = 16
    lin = acc.to_linear((m, m), 1, lanes)
    for lane in range(lanes):
        for r in range(rows.shape[1]):
            assert tuple(lin.coord(r, lane, 0)) == (rows[lane, r], cols[lane, r])
    a = DotOperandLayout(0, acc, k_width=kpl).to_linear((m, k), 1, lanes)
    b = DotOperandLayout(1, acc, k_width=kpl).to_linear((k, m), 1, lanes)
    for lane in range(lanes):
        for j in range(kpl):
            kk = kpl * (lane // m) + j if kind == "mfma" else j
            assert tuple(a.coord(j, lane, 0)) == (lane % m, kk)
            assert tuple(b.coord(j, lane, 0)) == (kk, lane % m)


# -- wait states ------------------------------------------------------------------------------------

def test_mfma_hazards_needed_and_present(monkeypatch):
    """The simulator fails a read of an MFMA result (and of a VALU result by an MFMA) without
    the wait states; the backend's s_nops make the same kernel pass."""
    from gluon_trace.backends.amd import hazards
    tk, sim = run("gfx90a", "mfma", "float16", 64, 64, 16, im=32, ik=8, kw=4, seed=21)
    text = [sim.text(k) for k in range(len(sim.code))]
    assert any(t.startswith("s_nop") for t in text)
    monkeypatch.setattr(hazards, "mfma_waits", lambda *a: 0)
    with pytest.raises(amdsim.SimError, match="wait states"):
        run("gfx90a", "mfma", "float16", 64, 64, 16, im=32, ik=8, kw=4, seed=22, bk=8)


def test_mfma_hazard_rules():
    """mfma_waits on hand-made sequences: D read by a VALU needs P + 3, srcC the same registers
    none, a VALU-written srcA 2, and a write over an in-flight srcC P - 1."""
    from gluon_trace.backends.amd.hazards import MfmaUnits, mfma_waits
    from gluon_trace.backends.amd.mir import Inst, Reg
    from gluon_trace.backends.amd.target import TARGETS

    def reg(p, n=1):
        r = Reg("v", n)
        r.phys = p
        return r
    d, c, a, b = reg(0, 16), reg(16, 16), reg(32, 2), reg(34, 2)
    mf = Inst("v_mfma_f32_32x32x8_f16", [d], [a, b, c], kind="valu")
    chain = Inst("v_mfma_f32_32x32x8_f16", [reg(40, 16)], [a, b, d], kind="valu")
    read = Inst("v_add_f32", [reg(60)], [reg(3), reg(61)], kind="valu")
    war = Inst("v_mov_b32", [reg(20)], [reg(62)], kind="valu")
    t94, t90 = TARGETS["gfx942"], TARGETS["gfx90a"]
    mu = MfmaUnits([mf, chain])
    assert mfma_waits(t94, mu, [mf], read) == 8 + 3
    assert mfma_waits(t90, mu, [mf], read) == 8 + 3
    assert mfma_waits(t94, mu, [mf], chain) == 0
    assert mfma_waits(t94, mu, [mf], war) == 8 - 1
    wa = Inst("v_mov_b32", [reg(33)], [reg(63)], kind="valu")
    assert mfma_waits(t94, mu, [wa], mf) == 2
    assert mfma_waits(t94, mu, [mf, read, read], read) == 11 - 2
    partial = Inst("v_mfma_f32_32x32x8_f16", [reg(40, 16)], [a, b, reg(8, 16)], kind="valu")
    assert mfma_waits(t94, mu, [mf], partial) == 8 + 1
    assert mfma_waits(t90, mu, [mf], partial) == 8


def test_wmma_hazard_v_nop():
    """RDNA3: a WMMA reading the previous WMMA's D as srcA gets a v_nop between; as srcC it
    does not (and the simulator fails the first without it)."""
    from gluon_trace.backends.amd.hazards import fix_hazards
    from gluon_trace.backends.amd.mir import Inst, Reg
    from gluon_trace.backends.amd.target import TARGETS

    def reg(p, n=1):
        r = Reg("v", n)
        r.phys = p
        return r
    d = reg(0, 8)
    first = Inst("v_wmma_f32_16x16x16_f16", [d], [reg(8, 8), reg(16, 8), reg(24, 8)], kind="valu")
    as_a = Inst("v_wmma_f32_16x16x16_f16", [reg(32, 8)], [d, reg(16, 8), reg(24, 8)], kind="valu")
    as_c = Inst("v_wmma_f32_16x16x16_f16", [reg(32, 8)], [reg(8, 8), reg(16, 8), d], kind="valu")
    t = TARGETS["gfx1100"]
    assert [i.op for i in fix_hazards([first, as_a], t)] == [first.op, "v_nop", as_a.op]
    assert [i.op for i in fix_hazards([first, as_c], t)] == [first.op, as_c.op]


# -- refusals ---------------------------------------------------------------------------------------

def _trace_error(target, op, d, **kw):
    with pytest.raises((gt.CompileError, gt.TraceError, gt.LayoutError)) as e:
        run(target, op, d, 32, 32, 16, **kw)
    return str(e.value)


def test_mfma_refused_on_gfx1100():
    """The MFMA layout's 64 lanes do not fit RDNA3's wave32: the first op using it says so."""
    msg = _trace_error("gfx1100", "mfma", "float16", im=32, ik=8, kw=4, v=3)
    assert "AMDMFMALayout has 64" in msg and "32 threads" in msg and "test_amd_mfma.py" in msg


def test_wmma_refused_on_cdna():
    msg = _trace_error("gfx942", "wmma", "float16", kw=16)
    assert "AMDWMMALayout has 32" in msg and "64 threads" in msg and "test_amd_mfma.py" in msg


def test_fp8_mfma_refused_on_gfx90a():
    msg = _trace_error("gfx90a", "mfma", "float8e4nv", im=32, ik=16, kw=8, v=3)
    assert "fp8 MFMA needs CDNA3 (gfx942)" in msg and "test_amd_mfma.py" in msg


def test_ocp_fp8_mfma_refused_on_gfx942():
    """gfx942's fp8 MFMAs take the FNUZ formats (test_amd_fp8.py runs them); NVIDIA's OCP
    float8e4nv is refused at the line, naming the format to use."""
    msg = _trace_error("gfx942", "mfma", "float8e4nv", im=32, ik=16, kw=8, v=3)
    assert "use gl.float8e4b8" in msg and "test_amd_mfma.py" in msg


def test_mfma_layout_of_other_cdna_refused():
    """A CDNA2 int8 layout (K = 8) on gfx942, whose int8 MFMA has K = 16."""
    msg = _trace_error("gfx942", "mfma", "int8", im=32, ik=8, kw=4, v=2)
    assert "version=3" in msg and "test_amd_mfma.py" in msg


# -- the example GEMMs (LDS double-buffered K loop) end to end ---------------------------------------

@pytest.mark.parametrize("target", ["gfx90a", "gfx942", "gfx1100"])
def test_matmul_amd_kernels(target):
    """gluon_trace/kernels/matmul_amd.py: the MFMA GEMM (gfx90a, gfx942) and the WMMA GEMM
    (gfx1100), odd M/N/K, against the interpreter and numpy."""
    from gluon_trace.kernels.matmul_amd import matmul_mfma, matmul_wmma
    kern = matmul_wmma if target == "gfx1100" else matmul_mfma
    M, N, K = 50, 60, 72
    r = np.random.default_rng(23)
    a = r.standard_normal((M, K)).astype(np.float16)
    b = r.standard_normal((K, N)).astype(np.float16)
    got = np.full((M, N), np.nan, np.float32)
    ref = np.full((M, N), np.nan, np.float32)
    args = (M, N, K, K, N, N)
    cx = dict(BM=64, BN=64, BK=32, num_warps=4)
    tk = kern.trace(a, b, got, *args, **cx, target=target)
    amdsim.simulate(tk, target, (1, 1), [a, b, got, *args])
    kern[(1, 1)](a, b, ref, *args, **cx, backend="interpreter", target=target)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ref, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


# -- gfx1100 WMMA code on tinygrad's RDNA3 emulator (marker amd_emulator) ----------------------------

EMU_CASES = [("wmma-f16", dict(d="float16", m=32, n=64, k=32)),
             ("wmma-bf16-transposed", dict(d="bfloat16", m=32, n=64, k=32, tr=True)),
             ("wmma-k-loop-convert", dict(d="float16", m=27, n=29, k=37, bm=32, bn=32, bk=16, convert=True)),
             ("dot_fma-f32", dict(d="float32", m=19, n=23, k=13, bm=32, bn=32, bk=8, op="dot_fma")),
             ("matmul_wmma", None)]


@pytest.mark.amd_emulator
@pytest.mark.parametrize("name,case", EMU_CASES, ids=[c[0] for c in EMU_CASES])
def test_wmma_on_tinygrads_rdna3_emulator(name, case):
    """The same gfx1100 code run by tinygrad's emulator (its own reading of the RDNA3 WMMA
    operand and result layouts) against the interpreter: a misreading shared by mfma.py and
    amdsim_mma.py cannot pass here. Tolerances as on amdsim: the emulator sums each WMMA in f32."""
    import emulator
    try:
        emulator.load()
    except emulator.EmulatorMissing as e:
        pytest.skip(f"tinygrad's RDNA3 emulator is not available: {e}")
    target = "gfx1100"
    if case is None:
        from gluon_trace.kernels.matmul_amd import matmul_wmma
        M, N, K = 50, 60, 72
        r = np.random.default_rng(29)
        a = r.standard_normal((M, K)).astype(np.float16)
        b = r.standard_normal((K, N)).astype(np.float16)
        got, ref = (np.full((M, N), np.nan, np.float32) for _ in range(2))
        args, cx = (M, N, K, K, N, N), dict(BM=64, BN=64, BK=32, num_warps=4)
        tk = matmul_wmma.trace(a, b, got, *args, **cx, target=target)
        emulator.run(tk, (1, 1), [a, b, got, *args])
        matmul_wmma[(1, 1)](a, b, ref, *args, **cx, backend="interpreter", target=target)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
        return
    case = dict(case)
    op, d = case.pop("op", "wmma"), case.pop("d")
    m, n, k = case.pop("m"), case.pop("n"), case.pop("k")
    a, b = inputs(d, m, n, k, 31)
    cx = dict(BM=case.get("bm", m), BN=case.get("bn", n), BK=case.get("bk", k), OP=op, D=d, ACC="float32",
              IM=1, IK=1, KW=16 if op == "wmma" else 1, V=1, TR=case.get("tr", False), WM=2,
              CONVERT=case.get("convert", False))
    got, ref = (np.full((m, n), np.nan, np.float32) for _ in range(2))
    tk = mma_kernel.trace(got, a, b, m, n, k, **cx, num_warps=4, target=target)
    emulator.run(tk, (1,), [got, a, b, m, n, k])
    mma_kernel[(1,)](ref, a, b, m, n, k, **cx, num_warps=4, backend="interpreter", target=target)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.sqrt(k))


# -- accumulators in AGPRs (gfx90a, gfx942) ------------------------------------------------------------

@pytest.mark.parametrize("target", ["gfx90a", "gfx942"])
def test_gemm_accumulators_in_agprs(target):
    """The MFMA GEMM keeps its accumulator in AGPRs (the loop-carried homes too): the descriptor's
    accum_offset sits above the VGPRs and next_free_vgpr counts both; the metadata reports the
    AGPRs; far fewer VGPRs than with the accumulator in VGPRs."""
    import re
    from gluon_trace.backends.amd.compiler import lower
    from gluon_trace.kernels.matmul_amd import matmul_mfma
    a = np.zeros((64, 64), np.float16)
    c = np.zeros((64, 64), np.float32)
    tk = matmul_mfma.trace(a, a, c, 64, 64, 64, 64, 64, 64, BM=64, BN=64, BK=32, num_warps=4, target=target)
    e = lower(tk.for_target(target).graph, target)
    assert e.agprs == 16  # 64x64 f32 over 4 waves: 16 values a lane, as many AGPRs (in-place MFMAs)
    mf = [ln for ln in e.text.splitlines() if "v_mfma" in ln]
    assert mf and all(re.search(r"v_mfma\S* a\[\d+:\d+\], v\[\d+:\d+\], v\[\d+:\d+\], a\[\d+:\d+\]", ln) for ln in mf)
    acc_off = -(-e.vgprs // 4) * 4
    assert f".amdhsa_accum_offset {acc_off}" in e.text
    assert f".amdhsa_next_free_vgpr {acc_off + e.agprs}" in e.text
    assert f".agpr_count: {e.agprs}" in e.text
    # the K loop keeps the accumulator in place: MFMAs chain srcC -> vdst, no copies in or out
    body = e.text.split(".Lfor_matmul_mfma_1:")[1].split("s_branch .Lfor_matmul_mfma_1")[0]
    assert body.count("v_mfma") == 4 and "v_accvgpr" not in body
    from gluon_trace.backends.amd import compiler
    orig = compiler.agpr_variants
    try:
        compiler.agpr_variants = lambda code, t: iter(())
        plain = lower(tk.for_target(target).graph, target)
    finally:
        compiler.agpr_variants = orig
    assert plain.agprs == 0 and plain.vgprs >= e.vgprs + 16
    ck = tk.for_target(target).compile(target)
    assert ck.extra["agprs"] == e.agprs and ck.registers == e.vgprs


def test_agpr_hazards():
    """v_accvgpr_read of an MFMA's AGPR result waits P + 3; v_accvgpr_write feeding srcC 2."""
    from gluon_trace.backends.amd.hazards import MfmaUnits, mfma_waits
    from gluon_trace.backends.amd.mir import Inst, Reg
    from gluon_trace.backends.amd.target import TARGETS

    def reg(cls, p, n=1):
        r = Reg(cls, n)
        r.phys = p
        return r
    d, c = reg("a", 0, 16), reg("a", 16, 16)
    mf = Inst("v_mfma_f32_16x16x16_f16", [d], [reg("v", 0, 2), reg("v", 2, 2), c], kind="valu")
    rd = Inst("v_accvgpr_read_b32", [reg("v", 9)], [reg("a", 3)], kind="valu")
    wr = Inst("v_accvgpr_write_b32", [reg("a", 20)], [reg("v", 9)], kind="valu")
    mu = MfmaUnits([mf])
    t = TARGETS["gfx942"]
    assert mfma_waits(t, mu, [mf], rd) == 4 + 3
    assert mfma_waits(t, mu, [wr], mf) == 2
    assert mfma_waits(t, mu, [mf], wr) == 4 - 1  # over srcC the MFMA may still read


def test_wmma_gemm_accumulates_in_place():
    """gfx1100: the WMMA GEMM's loop-carried accumulator is the WMMA's own srcC/vdst (no copies
    in and out of the accumulator registers per K step)."""
    import re
    from gluon_trace.backends.amd import compiler
    from gluon_trace.kernels.matmul_amd import matmul_wmma
    a = np.zeros((64, 64), np.float16)
    c = np.zeros((64, 64), np.float32)
    tk = matmul_wmma.trace(a, a, c, 64, 64, 64, 64, 64, 64, BM=64, BN=64, BK=32, num_warps=4, target="gfx1100")
    e = compiler.lower(tk.for_target("gfx1100").graph, "gfx1100")
    ops = re.findall(r"v_wmma\S* (v\[\d+:\d+\]), v\[\d+:\d+\], v\[\d+:\d+\], (v\[\d+:\d+\])", e.text)
    dsts = {d for d, _ in ops}
    assert len(ops) == 8 and all(c_ in dsts for _, c_ in ops)  # each srcC is a WMMA's vdst
    orig = compiler.agpr_variants
    try:
        compiler.agpr_variants = lambda code, t: iter(())
        plain = compiler.lower(tk.for_target("gfx1100").graph, "gfx1100")
    finally:
        compiler.agpr_variants = orig
    assert plain.text.count("v_mov_b32") >= e.text.count("v_mov_b32") + 64


# -- the simulator's tables against AMD's Matrix Instruction Calculator ---------------------------

def _calculator_table(path, arch, ins, mat, wave=None):
    """{(row, col): {(register, lane, low bit)}} from the calculator's --register-layout CSV."""
    import re
    import subprocess
    import sys
    argv = [sys.executable, path, "-a", arch, "-i", ins, "-R", "-" + mat, "--csv"] + (["-w", str(wave)] if wave else [])
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        if re.match(r"^\d+,", line):
            cells = line.split(",")
            for j, c in enumerate(cells[1:]):
                table[(int(cells[0]), j)] = {(int(r), int(ln), int(lo or 0)) for r, ln, _, lo in
                                             re.findall(r"v(\d+)\{(\d+)\}(?:\.\[(\d+):(\d+)\])?", c)}
    return table


def test_simulator_tables_match_amds_matrix_calculator():
    """Every A/B/D entry of every MFMA and WMMA amdsim_mma runs, against AMD's Matrix Instruction
    Calculator (github.com/ROCm/amd_matrix_instruction_calculator; point
    GLUON_TRACE_MATRIX_CALCULATOR at its matrix_calculator.py, which needs `tabulate`). Checked
    once: 19,456 entries of 18 instructions agree."""
    import os
    import amdsim_mma as S
    path = os.environ.get("GLUON_TRACE_MATRIX_CALCULATOR")
    if not path:
        pytest.skip("set GLUON_TRACE_MATRIX_CALCULATOR to AMD's matrix_calculator.py to run this")
    for arch, passes in (("cdna2", S._GFX90A), ("cdna3", S._GFX942)):
        for shape in passes:
            M, K, kind = S._SHAPES[shape]
            ins = "v_mfma_" + ("i32_" if kind == "i8" else "f32_") + shape
            kpl, bits = K // (64 // M), {"f16": 16, "bf16": 16, "i8": 8, "f32": 32}[kind]
            per = 32 // bits
            for mat in "AB":
                for (x, y), cells in _calculator_table(path, arch, ins, mat).items():
                    i, k = (x, y) if mat == "A" else (y, x)
                    j = k % kpl
                    assert cells == {(j // per, i % M + M * (k // kpl), (j % per) * bits if per > 1 else 0)}, \
                        (ins, mat, x, y, cells)
            rows, cols = S._d_map(M)
            for (i, n), cells in _calculator_table(path, arch, ins, "D").items():
                ((r, ln, _),) = cells
                assert (rows[ln, r], cols[ln, r]) == (i, n), (ins, i, n, cells)
    for ins in ("v_wmma_f32_16x16x16_f16", "v_wmma_f32_16x16x16_bf16"):
        for mat in "AB":
            for (x, y), cells in _calculator_table(path, "rdna3", ins, mat, 32).items():
                i, k = (x, y) if mat == "A" else (y, x)
                assert {(r, ln) for r, ln, _ in cells} == {(k // 2, i), (k // 2, i + 16)}, (ins, mat, x, y)
        for (i, n), cells in _calculator_table(path, "rdna3", ins, "D", 32).items():
            ((r, ln, _),) = cells
            assert (2 * r + ln // 16, ln % 16) == (i, n), (ins, i, n, cells)


# -- gfx942 MFMA code on tinygrad's CDNA emulator (marker amd_emulator) ------------------------------

CDNA_EMU_CASES = [("f16-16x16", dict(d="float16", im=16, ik=16)),
                  ("bf16-16x16-transposed-kpack", dict(d="bfloat16", im=16, ik=16, tr=True, kpack=2)),
                  ("f16-16x16-k-loop-convert", dict(d="float16", im=16, ik=16, m=29, n=27, k=61, convert=True)),
                  ("f32-16x16", dict(d="float32", im=16, ik=4)),
                  pytest.param("f16-32x32", dict(d="float16", im=32, ik=8), marks=pytest.mark.xfail(
                      strict=True, reason="tinygrad a9069c1 puts 32x32 MFMA results at row 16*(lane//32) + r; "
                      "the CDNA3 ISA and AMD's Matrix Instruction Calculator at 8*(r//4) + 4*(lane//32) + r%4"))]


@pytest.mark.amd_emulator
@pytest.mark.parametrize("name,case", CDNA_EMU_CASES, ids=lambda x: x if isinstance(x, str) else "")
def test_mfma_on_tinygrads_cdna_emulator(name, case):
    """gfx942 MFMA code (accumulators in AGPRs, v_accvgpr_*, the packing) run by tinygrad's CDNA
    emulator, against the interpreter."""
    import emulator
    try:
        emulator.load()
    except emulator.EmulatorMissing as e:
        pytest.skip(f"tinygrad's emulator is not available: {e}")
    c = dict(case)
    d, im, ik = c["d"], c["im"], c["ik"]
    kpl = ik // (64 // im)
    m, n, k = c.get("m", 2 * im), c.get("n", 2 * im), c.get("k", 2 * ik * c.get("kpack", 1))
    bm, bn = -(-m // (2 * im)) * 2 * im, -(-n // (2 * im)) * 2 * im
    a, b = inputs(d, m, n, k, 41)
    cx = dict(BM=bm, BN=bn, BK=2 * ik * c.get("kpack", 1) if "m" not in c else 2 * ik, OP="mfma", D=d,
              ACC="float32", IM=im, IK=ik, KW=kpl * c.get("kpack", 1), V=3, TR=c.get("tr", False), WM=2,
              CONVERT=c.get("convert", False), TPW=None)
    got, ref = (np.full((m, n), np.nan, np.float32) for _ in range(2))
    tk = mma_kernel.trace(got, a, b, m, n, k, **cx, num_warps=4, target="gfx942")
    ck = emulator.run(tk, (1,), [got, a, b, m, n, k], target="gfx942")
    assert "v_accvgpr" in ck.asm
    mma_kernel[(1,)](ref, a, b, m, n, k, **cx, num_warps=4, backend="interpreter", target="gfx942")
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.sqrt(k))

"""The AMD GEMM's load path (issue 11's static-model gap): 16-bit tiles load as
global_load_dword/x2/x4 when axis info proves the run contiguous and aligned, their dwords
go to LDS and MMA operands as loaded (the widened values are dropped when unused, dce.py),
so no s_waitcnt sits between a load and the MFMAs; matmul_amd's B is K-contiguous in LDS
(ds_write_b16 / ds_write_b16_d16_hi of the loaded halves, ds_read_b64 operand reads).
Each case runs on amdsim against the interpreter, with masked edges and non-zero ``other``."""
import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import amdsim  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402

pytestmark = pytest.mark.usefixtures("amd_toolchain")

_NP = {"float16": np.float16, "bfloat16": None, "int16": np.int16}


def _bf16(x):
    """float32 -> bfloat16 bits (round to nearest even) as uint16, and back as float32."""
    u = np.asarray(x, np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r, (r.astype(np.uint32) << 16).view(np.float32)


def _asm(tk, target):
    from gluon_trace.backends.amd.compiler import lower
    return lower(tk.for_target(target).graph, target).text


def _loop(asm, name):
    return asm.split(f".Lfor_{name}_1:")[1].split(f"s_branch .Lfor_{name}_1")[0]


@pytest.mark.parametrize("target", ["gfx942", "gfx90a"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_matmul_mfma_vector_loads_on_the_simulator(target, dtype):
    """M, N, K multiples of 16 but not of the tile: the last K tile and the edge tiles are
    masked per 8-element run; the K loop issues dwordx4 loads and waits for them only at
    their LDS writes, after the MFMAs; operands come from LDS as ds_read_b64/b128."""
    from gluon_trace.kernels.matmul_amd import matmul_mfma
    M, N, K = 80, 96, 80
    r = np.random.default_rng(7)
    a32, b32 = r.standard_normal((M, K)).astype(np.float32), r.standard_normal((K, N)).astype(np.float32)
    if dtype == "float16":
        a, b = a32.astype(np.float16), b32.astype(np.float16)
        af, bf = a.astype(np.float64), b.astype(np.float64)
        pa, pb = a, b
    else:
        (a, av), (b, bv) = _bf16(a32), _bf16(b32)
        af, bf = av.astype(np.float64), bv.astype(np.float64)
        pa = pb = gl.pointer(gl.bfloat16)
    got = np.full((M, N), np.nan, np.float32)
    ref = np.full((M, N), np.nan, np.float32)
    args = (M, N, K, K, N, N)
    cx = dict(BM=64, BN=64, BK=32, num_warps=4)
    tk = matmul_mfma.trace(pa, pb, gl.pointer(gl.float32), *args, **cx, target=target)
    body = _loop(_asm(tk, target), "matmul_mfma")
    assert body.count("global_load_dwordx4") == 2 and "global_load_ushort" not in body
    assert "ds_read_u16" not in body and body.count("ds_read_b64") + body.count("ds_read_b128") >= 4
    assert "ds_write_b16_d16_hi" in body and "v_perm_b32" not in body
    first_mfma = body.index("v_mfma")
    assert "vmcnt" not in body[:first_mfma]  # the loads stay in flight across the MFMAs
    amdsim.simulate(tk, target, (2, 2), [a, b, got, *args])
    if dtype == "float16":
        matmul_mfma[(2, 2)](a, b, ref, *args, **cx, backend="interpreter", target=target)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, af @ bf, rtol=1e-5, atol=1e-4)


@gt.jit
def masked_rows(x, out, n, stride, OTHER: gl.constexpr, R: gl.constexpr, C: gl.constexpr):
    T: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 8], [T // 8, 8], [2, 1], [1, 0])
    rows = gl.arange(0, R, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, C, layout=gl.SliceLayout(0, L))
    offs = rows[:, None] * stride + cols[None, :]
    v = gl.load(x + offs, mask=(rows[:, None] < n) & (cols[None, :] < n), other=OTHER)
    gl.store(out + rows[:, None] * C + cols[None, :], v + v)


@pytest.mark.parametrize("dtype, other", [("float16", 1.5), ("bfloat16", -2.0), ("int16", -3),
                                          ("float16", 0.0)])
@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_masked_16bit_vector_loads_keep_other(target, dtype, other):
    """Masked-off lanes of a packed load read ``other`` (its 16 bits set before the load),
    and each element widened from the loaded dword computes like the interpreter's."""
    R, C, n, stride = 16, 64, 48, 64
    r = np.random.default_rng(11)
    if dtype == "bfloat16":
        x, _ = _bf16(r.standard_normal(R * stride))
        ptr = out_p = gl.pointer(gl.bfloat16)
        out = np.full(R * C, 0xFFFF, np.uint16)
        ref = np.full(R * C, 0xFFFF, np.uint16)
    else:
        x = (r.integers(-1000, 1000, R * stride) if dtype == "int16"
             else r.standard_normal(R * stride)).astype(_NP[dtype])
        ptr, out_p = x, None
        out = np.full(R * C, 77 if dtype == "int16" else np.nan, _NP[dtype])
        ref = out.copy()
    tk = masked_rows.trace(ptr, out_p if out_p is not None else out, n, stride, OTHER=other, R=R, C=C,
                           num_warps=2, target=target)
    asm = _asm(tk, target)
    assert "global_load_dwordx4" in asm and "global_load_ushort" not in asm and "global_load_sshort" not in asm
    amdsim.simulate(tk, target, (1,), [x, out, n, stride])
    from gluon_trace.backend import get
    get("interpreter").run(tk.graph, (1, 1, 1), [x, ref, n, stride])
    assert not np.array_equal(ref, np.full_like(ref, ref[0]))
    np.testing.assert_array_equal(out.view(np.uint16), ref.view(np.uint16))


@gt.jit
def unaligned_rows(x, out, stride, C: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1, 8], [8, 8], [1, 1], [1, 0])
    rows = gl.arange(0, 8, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, C, layout=gl.SliceLayout(0, L))
    v = gl.load(x + 1 + rows[:, None] * stride + cols[None, :])  # 2 bytes past an aligned start
    gl.store(out + rows[:, None] * C + cols[None, :], v)


def test_unaligned_16bit_runs_are_not_vectorized():
    x = np.random.default_rng(3).standard_normal(8 * 64 + 1).astype(np.float16)
    out = np.full(8 * 64, np.nan, np.float16)
    tk = unaligned_rows.trace(x, out, 64, C=64, num_warps=1, target="gfx942")
    asm = _asm(tk, "gfx942")
    # each run starts 2 bytes past a 16-byte boundary: a ushort, then the aligned dwords of it
    assert "global_load_dwordx4" not in asm and "global_load_ushort" in asm
    amdsim.simulate(tk, "gfx942", (1,), [x, out, 64])
    np.testing.assert_array_equal(out, x[1:].reshape(8, 64)[:, :64].reshape(-1))


def test_dead_instructions_go_and_live_ones_stay():
    from gluon_trace.backends.amd.dce import remove_dead
    from gluon_trace.backends.amd.mir import Fixed, Imm, Inst, Reg
    a, b, c, d, w = Reg("v"), Reg("v"), Reg("v"), Reg("v", 2), Reg("v", 4)
    vcc = Fixed("vcc", "special", 2)
    code = [Inst("global_load_dwordx4", [w], [d, "off"], kind="vmem_load"),
            Inst("v_lshlrev_b32", [a], [Imm(16), w[0]], kind="valu"),         # dead
            Inst("v_and_b32", [b], [Imm(0xFFFF0000), a], kind="valu"),        # dead, then its input
            Inst("v_cmp_gt_i32", [vcc], [a, c], kind="valu"),                 # writes vcc: kept
            Inst("ds_write_b128", [], [c, w], kind="lds_store"),
            Inst("v_mov_b32", [c], [Imm(1)], kind="valu")]                    # read above: kept
    out = remove_dead(code)
    assert [i.op for i in out] == ["global_load_dwordx4", "v_lshlrev_b32", "v_cmp_gt_i32",
                                   "ds_write_b128", "v_mov_b32"]
    assert [i.op for i in remove_dead(code[:3] + code[4:])] == ["global_load_dwordx4", "ds_write_b128", "v_mov_b32"]


def test_model_counts_one_round_trip_for_loads_issued_together():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "perf"))
    import amd_model
    ld = "global_load_dwordx4 v[0:3], v[4:5], off"
    mfma = "v_mfma_f32_32x32x8_f16 a[0:15], v[0:1], v[2:3], a[0:15]"
    assert amd_model.mix_of([ld, ld, mfma, "s_waitcnt vmcnt(1)", "s_waitcnt vmcnt(0)"]).vm_round_trips == 1
    assert amd_model.mix_of([ld, "s_waitcnt vmcnt(0)", ld, "s_waitcnt vmcnt(0)", mfma]).vm_round_trips == 2
    assert amd_model.mix_of(["ds_write_b16_d16_hi v0, v1"]).ds_write == {2: 1}


def test_attention_operands_read_whole():
    """attention_amd: V key-contiguous in LDS (P @ V's B operand read as ds_read_b64, no
    ds_read_u16), P packed for its MFMA by v_cvt_pkrtz_f16_f32 (two exact f16 values a convert)."""
    from gluon_trace.kernels.attention_amd import attention_fwd_mfma
    p = gl.pointer(gl.float16)
    tk = attention_fwd_mfma.trace(p, p, p, p, 1024, 0.125, BM=64, BN=32, D=64, CAUSAL=False,
                                  num_warps=2, target="gfx942")
    body = _loop(_asm(tk, "gfx942"), "attention_fwd_mfma")
    assert "ds_read_u16" not in body and body.count("ds_read_b64") == 16
    assert "v_cvt_pkrtz_f16_f32" in body and "ds_write_b16_d16_hi" in body


def test_simulator_f16_round_toward_zero():
    """amdsim's v_cvt_pkrtz_f16_f32: truncates (never up in magnitude, finite stays finite)."""
    x = np.array([1.0 + 2.0**-10 + 2.0**-12, -(1.0 + 2.0**-10 + 2.0**-12), 70000.0, -1e9, 2.0**-25,
                  np.inf, -0.0], np.float32)
    got = amdsim._f16_rtz(x).astype(np.uint16).view(np.float16)
    want = np.array([1.0 + 2.0**-10, -(1.0 + 2.0**-10), 65504.0, -65504.0, 0.0, np.inf, -0.0], np.float16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_attention_accumulators():
    """S and O, which the softmax reads and rescales every step, stay in VGPRs where they fit
    (an MFMA on gfx942 takes them there; in AGPRs each step would read and write every value),
    each MFMA chain accumulating in place. At D=128 they do not fit: both go to AGPRs, as many
    as their values (O 32x128 + S 32x64 f32 a wave: 96), the rescaled tuple their loop home."""
    import re
    from gluon_trace.backends.amd.compiler import lower
    from gluon_trace.kernels.attention_amd import attention_fwd_mfma
    p = gl.pointer(gl.float16)
    for d, bn, agprs in ((64, 32, 0), (128, 64, 96)):
        tk = attention_fwd_mfma.trace(p, p, p, p, 1024, 0.125, BM=64, BN=bn, D=d, CAUSAL=True,
                                      num_warps=2, target="gfx942")
        e = lower(tk.for_target("gfx942").graph, "gfx942")
        body = _loop(e.text, "attention_fwd_mfma")
        assert e.agprs == agprs and "v_accvgpr_mov_b32" not in body and "scratch_" not in e.text
        if not agprs:
            assert "v_accvgpr" not in body
        mf = re.findall(r"v_mfma\S* (\S+), \S+, \S+, (\S+)", body)
        assert mf and all(dst == c for dst, c in mf)


def _mfma(d, a, b, c):
    from gluon_trace.backends.amd.mir import Inst
    return Inst("v_mfma_f32_32x32x8_f16", [d], [a, b, c], kind="valu")


def test_in_place_only_where_the_old_accumulator_is_dead():
    from gluon_trace.backends.amd.agpr import in_place
    from gluon_trace.backends.amd.mir import Imm, Inst, Label, Reg
    a, b = Reg("v", 2), Reg("v", 2)
    c, d1, d2 = Reg("a", 16), Reg("a", 16), Reg("a", 16)
    zero = [Inst("v_accvgpr_write_b32", [c[k]], [Imm(0)], kind="valu") for k in range(16)]
    read = Inst("v_accvgpr_read_b32", [Reg("v")], [d2[3]], kind="valu")
    # a zeroed tuple used only here: the chain writes it in place
    out = in_place([Label("L")] + zero + [_mfma(d1, a, b, c), _mfma(d2, a, b, d1), read])
    ms = [i for i in out if isinstance(i, Inst) and i.op.startswith("v_mfma")]
    assert all(i.defs[0] is c and i.uses[2] is c for i in ms)
    # C read after the first MFMA: its value is live, D1 keeps its own registers
    keep = Inst("v_accvgpr_read_b32", [Reg("v")], [c[0]], kind="valu")
    out = in_place([Label("L")] + zero + [_mfma(d1, a, b, c), keep, _mfma(d2, a, b, d1), read])
    ms = [i for i in out if isinstance(i, Inst) and i.op.startswith("v_mfma")]
    assert ms[0].defs[0] is d1 and ms[0].uses[2] is c
    # C read in another block (live into it): not in place either
    later = [Label("M"), Inst("v_accvgpr_read_b32", [Reg("v")], [c[1]], kind="valu")]
    out = in_place([Label("L")] + zero + [_mfma(d1, a, b, c), _mfma(d2, a, b, d1), read] + later)
    ms = [i for i in out if isinstance(i, Inst) and i.op.startswith("v_mfma")]
    assert ms[0].defs[0] is d1


def test_a_literal_is_moved_into_a_vgpr_once_a_block():
    from gluon_trace.backends.amd.dce import remove_dead, reuse_literals
    from gluon_trace.backends.amd.mir import Fixed, Imm, Inst, Label, Reg
    ninf = Imm(0xFF800000)
    x, m = Reg("v"), Reg("s", 2)
    t1, t2, t3, t4 = Reg("v"), Reg("v"), Reg("v"), Reg("v")
    exec_ = Fixed("exec", "special", 2)

    def use(t):  # (a store: what it reads is live)
        return Inst("global_store_dword", [], [x, t, "off"], kind="vmem_store")
    code = [Inst("v_mov_b32", [t1], [ninf], kind="valu"), use(t1),
            Inst("v_mov_b32", [t2], [ninf], kind="valu"), use(t2),                # -> t1
            Inst("s_and_saveexec_b64", [m, exec_], [Fixed("vcc", "special", 2)]),
            Inst("v_mov_b32", [t3], [ninf], kind="valu"), use(t3),                # EXEC changed: kept
            Label("next"),
            Inst("v_mov_b32", [t4], [ninf], kind="valu"), use(t4)]                # another block: kept
    out = remove_dead(reuse_literals(code))
    movs = [i.defs[0] for i in out if isinstance(i, Inst) and i.op == "v_mov_b32"]
    assert movs == [t1, t3, t4]
    assert [i.uses[1] for i in out if isinstance(i, Inst) and i.op == "global_store_dword"] == [t1, t1, t3, t4]


@gt.jit
def shifted_rows(x, out, n, OFF: gl.constexpr, OTHER: gl.constexpr, C: gl.constexpr):
    T: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 8], [T // 8, 8], [1, 1], [1, 0])
    rows = gl.arange(0, T // 8, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, C, layout=gl.SliceLayout(0, L))
    offs = rows[:, None] * C + cols[None, :]
    v = gl.load(x + OFF + offs, mask=offs < n, other=OTHER)  # (n a multiple of 16: one mask a run)
    gl.store(out + offs, v * 3)


@pytest.mark.parametrize("off, kinds", [(0, {"dwordx4"}), (4, {"dwordx2"}), (2, {"dword", "dwordx2"}),
                                        (1, {"ushort", "dword", "dwordx2"})])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int16"])
def test_runs_split_by_alignment(dtype, off, kinds):
    """A run of 8 starting 2, 4 or 8 bytes past a 16-byte boundary splits into the widest aligned
    pieces (2 + 4 + 8 + 2 bytes, 4 + 8 + 4, 8 + 8);
    the mask (one per run: the bound is a multiple of 16) and ``other`` stay exact."""
    T, C, n = 64, 64, 8 * 64 - 48
    r = np.random.default_rng(off + 3)
    size = T // 8 * C + off
    if dtype == "bfloat16":
        x, _ = _bf16(r.standard_normal(size))
        ptr = gl.pointer(gl.bfloat16)
        out = np.full(size - off, 0xFFFF, np.uint16)
    else:
        x = (r.integers(-500, 500, size) if dtype == "int16" else r.standard_normal(size)).astype(_NP[dtype])
        ptr, out = x, np.full(size - off, 77 if dtype == "int16" else np.nan, _NP[dtype])
    ref = out.copy()
    other = -7 if dtype == "int16" else 2.5
    tk = shifted_rows.trace(ptr, ptr if dtype == "bfloat16" else out, n, OFF=off, OTHER=other, C=C,
                            num_warps=1, target="gfx942")
    asm = _asm(tk, "gfx942")
    got = set(re.findall(r"global_load_(\w+)", asm))
    assert got == ({k.replace("ushort", "sshort") for k in kinds} if dtype == "int16" else kinds)
    amdsim.simulate(tk, "gfx942", (1,), [x, out, n])
    from gluon_trace.backend import get
    get("interpreter").run(tk.graph, (1, 1, 1), [x, ref, n])
    np.testing.assert_array_equal(out.view(np.uint16), ref.view(np.uint16))


@gt.jit
def div_by_pow2(x, out, s, K: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1], [64], [1], [0])
    offs = gl.arange(0, 64, layout=L)
    v = gl.load(x + offs)
    u = s + 0  # a uniform (SGPR) operand
    gl.store(out + offs, v % K + (v // K) * 1000 + (u % K) * 7 + (u // K) * 11)


@pytest.mark.parametrize("dtype, k", [("int32", 2), ("int32", 8), ("int32", 1 << 20), ("uint32", 4),
                                      ("uint32", 1 << 30)])
@pytest.mark.parametrize("s", [-37, 37])
def test_mod_and_floordiv_by_powers_of_two(dtype, k, s):
    """x % 2^n and x // 2^n by shifts and masks (SALU for a uniform x), truncating toward zero
    like the interpreter, for negative and positive x."""
    r = np.random.default_rng(k)
    npd = np.dtype(dtype)
    x = r.integers(-3000, 3000, 64).astype(np.int64).astype(npd)
    x[:4] = np.array([0, -1, 1 << 30, -(1 << 31)], np.int64).astype(npd)
    got = np.full(64, 12345, npd)
    ref = got.copy()
    sv = np.array(s).astype(npd).item()
    tk = div_by_pow2.trace(x, got, sv, K=k, num_warps=1, target="gfx942")
    asm = _asm(tk, "gfx942")
    assert "v_rcp" not in asm and "v_cvt_f32_u32" not in asm  # no division sequence
    amdsim.simulate(tk, "gfx942", (1,), [x, got, sv])
    from gluon_trace.backend import get
    get("interpreter").run(tk.graph, (1, 1, 1), [x, ref, sv])
    np.testing.assert_array_equal(got, ref)


def test_model_loop_runs_to_the_last_branch_back():
    """Triton's loop skips a load with s_cbranch_execz to its header before its own s_branch back:
    the loop is the span to the last branch back, both loads in it."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "perf"))
    import amd_model
    asm = """
.L1:
  v_mfma_f32_32x32x8_bf16 v[0:15], v[16:17], v[18:19], v[0:15]
  global_load_dwordx4 v[20:23], v[24:25], off
  s_cbranch_execz .L1
  global_load_dwordx4 v[26:29], v[24:25], off
  s_branch .L1
"""
    m = amd_model.mix_of(amd_model.steady_loop(asm))
    assert m.global_load == {16: 2} and m.branch == 2

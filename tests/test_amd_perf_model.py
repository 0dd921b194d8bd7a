"""perf/amd_model.py (the static MI300X/MI250X model) and perf/run_mi300x.py --dry-run, on the CPU."""
import json
import sys
from pathlib import Path

import pytest

PERF = Path(__file__).resolve().parents[1] / "perf"
sys.path.insert(0, str(PERF))

pytest.importorskip("gluon_trace.backends.amd")
import amd_model  # noqa: E402
import run_mi300x  # noqa: E402


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "amd-perf-cache"))


def _toolchain():
    from gluon_trace import CompileError
    from gluon_trace.backends.amd.assembler import find_toolchain
    try:
        find_toolchain()
    except CompileError as e:
        pytest.skip(str(e))


SYNTH = """
outer:
  v_add_u32 v0, v1, v2
.Lloop:
  global_load_dwordx4 v[4:7], v[0:1], off
  global_load_ushort v8, v[0:1], off
  ds_read_b128 v[10:13], v20
  ds_read2st64_b64 v[14:17], v20 offset1:1
  ds_write_b16 v20, v8
  s_waitcnt vmcnt(0) lgkmcnt(0)
  s_barrier
  v_mfma_f32_32x32x8_bf16 a[0:15], v[10:11], v[12:13], a[0:15]
  v_mfma_f32_32x32x8_bf16 a[0:15], v[14:15], v[16:17], a[0:15]
  s_nop 3
  v_cndmask_b32 v1, v2, v3, vcc
  s_add_u32 s0, s0, 1
  s_cmp_lt_u32 s0, s1
  s_cbranch_scc1 .Lloop
  s_branch outer
"""


def test_loop_and_mix_of_a_written_kernel():
    body = amd_model.steady_loop(SYNTH)
    assert body[0].startswith("global_load_dwordx4") and body[-1] == "s_cbranch_scc1 .Lloop"
    m = amd_model.mix_of(body)
    assert m.mfma == {"v_mfma_f32_32x32x8_bf16": 2}
    assert m.global_load == {16: 1, 2: 1}
    assert m.ds_read == {16: 2} and m.ds_write == {2: 1}  # read2st64_b64: two 8-byte accesses
    assert (m.waitcnt, m.barrier, m.nop_clk, m.valu, m.salu, m.branch) == (1, 1, 4, 1, 2, 1)
    assert m.vm_round_trips == 1  # both loads in flight together: one latency per step


def test_round_trips_serialized_and_rotated():
    load, wait = "global_load_ushort v1, v[2:3], off", "s_waitcnt vmcnt(0)"
    mfma = "v_mfma_f32_32x32x8_f16 a[0:15], v[0:1], v[2:3], a[0:15]"
    assert amd_model.mix_of([load, wait, load, wait, mfma]).vm_round_trips == 2
    # rotated: the wait at the top is for the loads issued at the bottom of the last pass
    assert amd_model.mix_of([wait, mfma, load, load]).vm_round_trips == 1
    # a wait that leaves the newest load in flight still pays for the older one
    assert amd_model.mix_of([load, load, "s_waitcnt vmcnt(1)", mfma]).vm_round_trips == 1
    # in steady state vmcnt(1) after one load waits for the last pass's load: counted, a
    # pessimistic figure (the pass's work since that load hides part of it)
    assert amd_model.mix_of([load, "s_waitcnt vmcnt(1)", mfma]).vm_round_trips == 1
    assert amd_model.mix_of([load, "s_waitcnt vmcnt(2)", mfma]).vm_round_trips == 0


def test_no_mfma_loop_is_a_clear_error():
    with pytest.raises(ValueError, match="no loop with an MFMA"):
        amd_model.steady_loop(".L1:\n v_add_u32 v0, v1, v2\n s_branch .L1\n")
    with pytest.raises(ValueError, match="unknown access width"):
        amd_model.mix_of(["ds_read_weird v0, v1"])


def _asm(n_mfma, n_valu, vgprs, agprs):
    body = "\n".join(["  v_mfma_f32_32x32x8_f16 a[0:15], v[0:1], v[2:3], a[0:15]"] * n_mfma
                     + ["  v_add_u32 v0, v1, v2"] * n_valu)
    return (f".L0:\n{body}\n  s_cbranch_scc1 .L0\n .amdhsa_accum_offset {-(-vgprs // 4) * 4}\n"
            f"    .vgpr_count: {vgprs}\n    .agpr_count: {agprs}\n    .sgpr_count: 20\n"
            f"    .group_segment_fixed_size: 16384\n")


def test_model_arithmetic():
    # 16 MFMAs of 16384 FLOP at 512 FLOP/clk/SIMD (MI300X) = 512 clocks; 10 VALU = 40 + 1 branch
    r = amd_model.model(_asm(16, 10, 100, 64), "MI300X", 4)
    assert r["clk_per_wave_step"]["MFMA issue"] == pytest.approx(512, rel=1e-3)
    assert r["unified_regs"] == 168 and r["waves_per_simd"] == 3 and r["occupancy_limit"] == "registers"
    assert r["bound"] == "MFMA issue" and r["fraction_of_peak"] == 1.0
    assert r["tflops"] == pytest.approx(1307.4, abs=0.1)
    # MI250X runs the same MFMA at half the rate per clock: 1024 clocks
    assert amd_model.model(_asm(16, 10, 100, 64), "MI250X", 4)["clk_per_wave_step"]["MFMA issue"] == \
        pytest.approx(1024, rel=2e-3)
    # 200 VALU ops = 800 clocks + the branch: issue bound below peak
    r = amd_model.model(_asm(16, 200, 100, 64), "MI300X", 4)
    assert r["bound"] == "VALU/issue" and r["fraction_of_peak"] == pytest.approx(512 / 801, abs=1e-3)
    # 300 unified registers: one wave per SIMD, nothing overlaps MFMA, latency shows
    r = amd_model.model(_asm(16, 200, 200, 100), "MI300X", 4)
    assert r["waves_per_simd"] == 1 and r["bound"].startswith("VALU/issue (one wave")
    assert r["fraction_of_peak"] == pytest.approx(512 / (512 + 801), abs=1e-3)


def test_model_of_our_gemm():
    _toolchain()
    asm, _ = amd_model.ours((64, 64, 32, 4), "MI300X")
    r = amd_model.model(asm, "MI300X", 4)
    m = r["mix"]
    # a 64x64x32 step is 16 MFMAs of 32x32x8 over 4 waves, and loads 2 x 64x32 bf16 tiles
    assert m["mfma"] == {"v_mfma_f32_32x32x8_bf16": 4}
    assert sum(64 * int(w) * n for w, n in m["global_load"].items()) == 2 * 64 * 32 * 2 // 4
    assert sum(64 * int(w) * n for w, n in m["ds_write"].items()) == 2 * 64 * 32 * 2 // 4
    # each wave reads its 32x32 A and B slices from LDS at least once
    assert sum(64 * int(w) * n for w, n in m["ds_read"].items()) >= 2 * 32 * 32 * 2
    # a 32x32 f32 block a wave: 16 values a lane, in as many AGPRs (the MFMAs accumulate in place)
    assert r["resources"]["agprs"] == 16 and 0 < r["fraction_of_peak"] <= 1
    # 4 waves a workgroup (one per SIMD): registers, LDS or the hardware's 8 limit the rest
    assert r["waves_per_simd"] == min(8, 512 // r["unified_regs"], 65536 // r["resources"]["lds"])


def test_triton_same_gemm_same_mfma_count():
    _toolchain()
    pytest.importorskip("triton")
    asm, lds = amd_model.triton_kernel((64, 64, 32, 4), "MI300X")
    r = amd_model.model(asm, "MI300X", 4, lds)
    assert sum(r["mix"]["mfma"].values()) * amd_model.mfma_flop(next(iter(r["mix"]["mfma"]))) == \
        2 * 64 * 64 * 32 // 4


def test_dry_run_builds_and_packs(tmp_path):
    _toolchain()
    out = tmp_path / "dry.json"
    assert run_mi300x.main(["--dry-run", "--only", "777x1025x333", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["case"] for r in rows] == [
        "matmul_mfma bfloat16 777x1025x333", "matmul_mfma float16 777x1025x333",
        "matmul_fp8 float8e4b8 777x1025x333", "matmul_fp8 float8e5b16 777x1025x333", "matmul_i8 int8 777x1025x333",
        "matmul_mfma_async bfloat16 777x1025x333", "matmul_mfma_async float16 777x1025x333"]
    for r in rows:
        assert r["grid"] == [13, 17] and r["workgroup"] == 256
        assert r["kernarg_bytes"] == 48, r  # 3 pointers + 6 i32, each in its own slot
        names = [a[0] for a in r["args"]]
        if "async" in r["case"]:  # C = A @ B^T: B is [N, K]
            assert r["scalars"] == [777, 1025, 333, 333, 333, 1025] and names[7] == "stride_bn"
        else:
            assert r["scalars"] == [777, 1025, 333, 333, 1025, 1025]
            assert names == ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm"]
        assert r["agprs"] > 0 and r["hsaco_bytes"] > 0


def test_dry_run_builds_every_case():
    """Every distinct build in the run (kernel, dtype, constexprs: the LDS DMA and VGPR paths of the
    async GEMM, causal attention and not) traced, emitted, assembled, linked and packed; one that
    fails to build fails here. Shapes beyond one per build change only the grid and the scalars."""
    _toolchain()
    builds = {}
    for c in run_mi300x.cases():
        # the async GEMM takes LDS DMA or the VGPR path by K % 16, not by a constexpr
        aligned = (all(d % 16 == 0 for d in c.shape if isinstance(d, int))
                   if c.kernel is run_mi300x.matmul_mfma_async else None)
        builds.setdefault((c.kernel, c.dtype, repr(sorted(c.constexprs.items())), aligned), c)
    assert len(builds) >= 16, len(builds)  # 10 GEMM builds, the async GEMM's two paths in bf16 and f16, attention twice
    for (kern, _, _, aligned), c in builds.items():
        r = run_mi300x.dry_run(c)
        if kern is run_mi300x.matmul_mfma_async:
            asm = kern.trace(*run_mi300x.pointer_types(c), *run_mi300x.scalar_args(c), **c.constexprs,
                             target="gfx942").amdgcn("gfx942")
            dma = [ln for ln in asm.splitlines() if ln.strip().startswith("buffer_load_dword")
                   and ln.strip().endswith("lds")]
            assert bool(dma) == aligned, c.name
        assert r["hsaco_bytes"] > 0 and r["vgprs"] > 0, c.name
        assert r["kernarg"].endswith("bytes of explicit kernel arguments") and r["kernarg_bytes"] > 0, r


def test_every_example_kernel_is_in_the_run():
    """Every gfx942 example in gluon_trace/kernels/ (the WMMA GEMM is gfx1100's), each with odd shapes."""
    import gluon_trace.kernels.matmul_amd as m16
    import gluon_trace.kernels.matmul_amd_8bit as m8
    import gluon_trace.kernels.matmul_amd_async as ma
    import gluon_trace.kernels.attention_amd as at
    examples = {v for mod in (m16, m8, ma, at) for k, v in vars(mod).items()
                if type(v).__name__ == "JITFunction" and getattr(v, "__module__", mod.__name__) and
                v.fn.__module__ == mod.__name__} - {m16.matmul_wmma}
    cs = run_mi300x.cases()
    assert examples <= {c.kernel for c in cs}, examples - {c.kernel for c in cs}
    for kern in examples:
        mine = [c for c in cs if c.kernel is kern]
        assert any(c.shape[0] % 64 or c.shape[1] % 64 for c in mine), kern
    assert {c.dtype for c in cs if c.kernel is run_mi300x.matmul_fp8} == {"float8e4b8", "float8e5b16"}
    assert {c.dtype for c in cs if c.kernel is run_mi300x.matmul_mfma} == {"bfloat16", "float16"}


def test_run_refuses_what_it_cannot_do(capsys):
    assert run_mi300x.main(["--dry-run", "--only", "no such kernel"]) == 2
    assert "no case name contains 'no such kernel'" in capsys.readouterr().out
    try:
        import torch
        if torch.cuda.is_available() and getattr(torch.version, "hip", None):
            return  # a ROCm GPU is here: the real run would start
    except ImportError:
        pass
    assert run_mi300x.main(["--only", "777x1025x333"]) == 2
    assert "needs torch built for ROCm" in capsys.readouterr().out


def test_model_rates_mfmas_by_input_type():
    """fp8 and int8 MFMAs at MI300X's 8-bit peak (2614.9: twice the 16-bit one), int8 at MI250X's
    16-bit rate, byte LDS/global accesses 1 byte wide; an MFMA the model has no peak for, or fp8
    on CDNA2, is an error."""
    assert amd_model.mfma_type("v_mfma_f32_32x32x16_fp8_fp8") == "fp8"
    assert amd_model.mfma_type("v_mfma_f32_16x16x32_bf8_fp8") == "fp8"
    assert amd_model.mfma_type("v_mfma_i32_32x32x16_i8") == "i8"
    assert amd_model.mfma_type("v_mfma_f32_32x32x8bf16_1k") == "16-bit"
    with pytest.raises(ValueError, match="no modelled peak"):
        amd_model.mfma_type("v_mfma_f32_32x32x2_f32")
    with pytest.raises(ValueError, match="MI250X has no fp8"):
        amd_model.peak("MI250X", "fp8")
    m = amd_model.mix_of(["ds_write_b8 v0, v1", "ds_write_b8_d16_hi v0, v1", "global_load_ubyte v1, v[2:3], off"])
    assert m.ds_write == {1: 2} and m.global_load == {1: 1}
    fp8 = _asm(16, 10, 100, 64).replace("v_mfma_f32_32x32x8_f16", "v_mfma_f32_32x32x16_fp8_fp8")
    r = amd_model.model(fp8, "MI300X", 4)  # twice the FLOP of the f16 MFMA in the same 512 clocks
    assert r["clk_per_wave_step"]["MFMA issue"] == pytest.approx(512, rel=1e-3)
    assert r["mfma_type"] == "fp8" and r["tflops"] == pytest.approx(2614.9, abs=0.1)
    i8 = _asm(16, 10, 100, 64).replace("v_mfma_f32_32x32x8_f16", "v_mfma_i32_32x32x8i8")
    assert amd_model.model(i8, "MI250X", 4)["clk_per_wave_step"]["MFMA issue"] == pytest.approx(1024, rel=2e-3)


def test_model_of_our_fp8_gemm():
    """matmul_fp8 (128x128x64, 4 waves) on MI300X: its tiles load as 8-byte dwordx2 (no byte
    loads), so issue stays under the MFMAs' 512 clocks (it was 939 with byte loads)."""
    _toolchain()
    asm, _ = amd_model.ours((128, 128, 64, 4), "MI300X", "float8e4b8")
    r = amd_model.model(asm, "MI300X", 4)
    m = r["mix"]
    assert m["mfma"] == {"v_mfma_f32_32x32x16_fp8_fp8": 16} and r["mfma_type"] == "fp8"
    # 2 x 128x64 byte tiles a step over 256 threads: 8-byte loads only
    assert m["global_load"] == {"8": 2 * 128 * 64 // (256 * 8)}
    assert r["clk_per_wave_step"]["VALU/issue"] < r["clk_per_wave_step"]["MFMA issue"] == pytest.approx(512, rel=1e-3)
    assert r["peak_tflops"] == 2614.9 and r["fraction_of_peak"] > 0.8
    assert not any(row["dtype"].startswith("float8") for row in
                   amd_model.run(configs=[(64, 64, 64, 4, "float8e4b8")], gpus=("MI250X",), with_triton=False,
                                 attn_configs=[])["rows"])  # CDNA2 has no fp8: no row

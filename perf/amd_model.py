"""Static performance model of the AMD matrix-core GEMMs, read from the emitted AMDGCN.

    python perf/amd_model.py            # table + perf/results/amd-model.json

For each kernel and tile config: the instruction mix of the steady-state K loop (the
innermost loop holding the MFMAs: the span from a label to the last branch back to it),
the cycles one wave spends per K step on each shared resource, occupancy from the
unified VGPR+AGPR file, and from these the fraction of the MFMA peak the kernel could
reach on MI300X (gfx942) and MI250X (gfx90a), and which resource bounds it. Beside ours,
the same figures for the kernel Triton's AMD backend generates for the same GEMM, when
``triton`` imports here (its AMD path compiles to amdgcn without a GPU).

Figures and where they come from (per CU unless said):
- MFMA rate: dense peak of the MFMA's input type / (CUs * 4 SIMDs * clock). MI300X:
  f16/bf16 1307.4 TFLOP/s, 304 CUs, 2.1 GHz -> 512 FLOP/clk/SIMD, so v_mfma_f32_32x32x8
  (16384 FLOP) takes 32 cycles (8 passes of 4 clocks); fp8 (either FNUZ format) and int8
  2614.9 TFLOP/s / TOPS, twice that: v_mfma_f32_32x32x16_fp8_fp8 and v_mfma_i32_32x32x16_i8
  (32768 ops) take 32 cycles too. MI250X: 383 TFLOP/s f16/bf16 and 383 TOPS int8, 220 CUs,
  1.7 GHz -> 256 FLOP/clk/SIMD, the 32x32x8 takes 64 cycles (16 passes), as the CDNA2 ISA
  guide's MFMA table lists; CDNA2 has no fp8 (AMD CDNA3 / CDNA2 whitepapers and the
  MI300X / MI250X data sheets for the peaks, CU counts and clocks).
- VALU: a SIMD is 16 lanes wide; a wave64 VALU op occupies it 4 clocks (CDNA3 ISA guide,
  ch. 1). SALU/branch/waitcnt: 1 issue clock; s_nop k: k+1 clocks.
- LDS: 128 B/clk per CU (CDNA3 whitepaper, LDS section); a ds op moves 64 lanes x
  max(width, 4 B) (narrower accesses still take a bank slot each).
- Global: the loads of a K step come from the cache hierarchy, not HBM, when tiles are
  reused across workgroups: MI300X Infinity Cache 17.2 TB/s peak (CDNA3 whitepaper);
  MI250X L2 2 KB/clk per GCD (CDNA2 whitepaper: 16 channels x 128 B). The HBM figure
  (5.3 / 3.2 TB/s) with no reuse is given as the worst case.
- Occupancy: CDNA3/CDNA2 have 512 unified registers per lane per SIMD; a wave takes
  roundup(accum_offset + AGPRs, 8) of them (accum_offset = VGPRs rounded up to 4), at most
  8 waves per SIMD, 800 SGPRs per SIMD, 64 KiB LDS per CU.
- Latency: an s_waitcnt vmcnt in the K loop that waits for global loads issued after the
  last such round trip is one exposed round trip (at least one per step with one stage of
  prefetch; staggered waits for loads issued together share one);
  ~700 clocks for a load served by the cache (an assumption, not a datasheet figure).
  With W waves per SIMD the SIMD has W steps of work to hide them.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

GPUS = {
    # name: target, CUs, clock (Hz), dense peaks (f16/bf16, fp8, int8: by the MFMA's input
    # type), cache B/s (tile reuse), HBM B/s
    "MI300X": dict(target="gfx942", cus=304, clock=2.1e9, peak=1307.4e12, peak_fp8=2614.9e12,
                   peak_i8=2614.9e12, cache=17.2e12, hbm=5.3e12),
    "MI250X": dict(target="gfx90a", cus=220, clock=1.7e9, peak=383.0e12, peak_i8=383.0e12,
                   cache=2 * 2048 * 1.7e9, hbm=3.2e12),
}
LDS_BYTES_PER_CLK = 128
LDS_PER_CU = 65536
REGS_PER_LANE = 512
MAX_WAVES_PER_SIMD = 8
SGPRS_PER_SIMD = 800
LATENCY_CLK = 700
CONFIGS = [  # BM, BN, BK, num_warps, element type
    (64, 64, 32, 4, "bfloat16"), (128, 128, 32, 4, "bfloat16"), (128, 128, 32, 4, "float16"),
    (128, 128, 64, 4, "bfloat16"), (256, 128, 32, 8, "bfloat16"),
    # fp8 (gfx942 only): the same tiles in bytes as the 16-bit ones at twice the BK
    (128, 128, 64, 4, "float8e4b8"), (256, 128, 64, 8, "float8e4b8"), (128, 128, 128, 4, "float8e4b8"),
    (128, 128, 64, 4, "int8"), (256, 128, 64, 8, "int8"),  # int8 (int32 results)
]
TYPES = {  # element type: (our kernel, its table name, Triton's pointer type, the targets that have it)
    "bfloat16": ("matmul_mfma", "bf16", "*bf16", ("gfx90a", "gfx942")),
    "float16": ("matmul_mfma", "f16", "*fp16", ("gfx90a", "gfx942")),
    "float8e4b8": ("matmul_fp8", "fp8", "*fp8e4b8", ("gfx942",)),
    "int8": ("matmul_i8", "i8", "*i8", ("gfx90a", "gfx942")),
}


@dataclass
class Mix:
    mfma: dict = field(default_factory=dict)       # shape -> count
    ds_read: dict = field(default_factory=dict)    # width in bytes -> count
    ds_write: dict = field(default_factory=dict)
    global_load: dict = field(default_factory=dict)
    valu: int = 0
    salu: int = 0
    waitcnt: int = 0
    barrier: int = 0
    nop_clk: int = 0
    branch: int = 0
    vm_round_trips: int = 0  # waits for global loads while some are outstanding: each one a full latency


_WIDTH = {"u8": 1, "i8": 1, "ubyte": 1, "sbyte": 1, "b8": 1, "u16": 2, "i16": 2, "ushort": 2, "sshort": 2,
          "short_d16": 2, "b16": 2, "b32": 4, "dword": 4, "b64": 8, "dwordx2": 8, "b96": 12,
          "dwordx3": 12, "b128": 16, "dwordx4": 16}


def _width(op: str) -> int:
    op = op.removesuffix("_d16_hi").removesuffix("_d16")  # 16 bits from a register's high/low half
    if op.startswith("ds_read2") or op.startswith("ds_write2"):  # two accesses of the width
        return 2 * _width(op.replace("read2st64", "read").replace("write2st64", "write")
                          .replace("read2", "read").replace("write2", "write"))
    for suffix, w in sorted(_WIDTH.items(), key=lambda kv: -len(kv[0])):
        if op.endswith("_" + suffix):
            return w
    raise ValueError(f"unknown access width in {op}")


def steady_loop(asm: str) -> list[str]:
    """The instructions of the innermost loop that holds MFMAs: a label and the last branch
    back to it; the smallest such span with a v_mfma/v_wmma in it."""
    lines = [ln.split(";")[0].strip() for ln in asm.splitlines()]
    labels = {ln[:-1]: i for i, ln in enumerate(lines) if re.match(r"^\.?\w+:$", ln)}
    last: dict = {}  # label -> its last backward branch (an earlier conditional one, as
    for i, ln in enumerate(lines):  # Triton's s_cbranch_execz around a load, is not the loop's end)
        m = re.match(r"^s_(?:c)?branch\S*\s+(\S+)$", ln)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            last[m.group(1)] = i
    best = None
    for name, i in last.items():
        body = lines[labels[name] + 1:i + 1]
        if any(x.startswith(("v_mfma", "v_wmma")) for x in body):
            if best is None or len(body) < len(best):
                best = body
    if best is None:
        raise ValueError("no loop with an MFMA/WMMA in this kernel")
    return [x for x in best if x and not x.endswith(":") and not x.startswith(".")]


def mix_of(body: list[str]) -> Mix:
    """Counts of one pass over the loop; round trips counted in steady state (the loads
    still in flight at the back edge carry into the next pass, as in a rotated loop)."""
    _, carried = _scan(body, [])
    return _scan(body, [0] * len(carried))[0]


def _scan(body: list[str], outstanding: list) -> tuple[Mix, list]:
    """``outstanding``: for each global load in flight, oldest first, the number of the
    vmcnt wait before which it was issued. A wait that retires loads issued since the last
    counted round trip is one more round trip; waits for loads issued together (vmcnt(1)
    then vmcnt(0) after two back-to-back loads) share one."""
    m = Mix()
    outstanding = list(outstanding)
    waits = covered = 0
    for ins in body:
        op = ins.split()[0]
        if op.startswith(("v_mfma", "v_wmma")):
            m.mfma[op] = m.mfma.get(op, 0) + 1
        elif op.startswith("ds_read") or op.startswith("ds_load"):
            w = _width(op)
            m.ds_read[w] = m.ds_read.get(w, 0) + 1
        elif op.startswith("ds_write") or op.startswith("ds_store"):
            w = _width(op)
            m.ds_write[w] = m.ds_write.get(w, 0) + 1
        elif op.startswith(("global_load", "buffer_load", "scratch_load")):  # (spill reloads too)
            w = _width(op.replace("_lds", ""))
            m.global_load[w] = m.global_load.get(w, 0) + 1
            outstanding.append(waits)
        elif op == "s_waitcnt" or op.startswith("s_waitcnt_"):
            m.waitcnt += 1
            vm = re.search(r"vmcnt\((\d+)\)", ins)
            if vm and len(outstanding) > int(vm.group(1)):
                n_retired = len(outstanding) - int(vm.group(1))
                retired, outstanding = outstanding[:n_retired], outstanding[n_retired:]
                waits += 1
                if max(retired) >= covered:
                    m.vm_round_trips += 1
                    covered = waits
        elif op == "s_barrier":
            m.barrier += 1
        elif op == "s_nop":
            m.nop_clk += int(ins.split()[1], 0) + 1
        elif op.startswith(("s_branch", "s_cbranch", "s_setpc", "s_setprio", "s_sleep")):
            m.branch += 1
        elif op.startswith("v_"):
            m.valu += 1
        elif op.startswith("s_"):
            m.salu += 1
    return m, outstanding


def mfma_flop(op: str) -> int:
    m = re.search(r"_(\d+)x(\d+)x(\d+)", op)
    if not m:
        raise ValueError(f"unknown MFMA shape in {op}")
    a, b, c = map(int, m.groups())
    return 2 * a * b * c


_PEAK_KEY = {"16-bit": "peak", "fp8": "peak_fp8", "i8": "peak_i8"}


def mfma_type(op: str) -> str:
    """The input type class whose peak rates this MFMA/WMMA: fp8 (fp8/bf8 sources), i8, else 16-bit
    (f16, bf16; f32 and f64 MFMAs are not modelled)."""
    if re.search(r"_(fp8|bf8)(_|$)", op):
        return "fp8"
    if re.search(r"[_\d]i8$", op):  # (gfx90a: v_mfma_i32_32x32x8i8)
        return "i8"
    if re.search(r"(f16|bf16|bf16_1k)$", op):
        return "16-bit"
    raise ValueError(f"no modelled peak for {op}")


def peak(gpu: str, kind: str) -> float:
    """Dense peak FLOP/s (OP/s for int8) of ``gpu`` for MFMAs of input type class ``kind``."""
    g = GPUS[gpu]
    if _PEAK_KEY[kind] not in g:
        raise ValueError(f"{gpu} has no {kind} MFMA")
    return g[_PEAK_KEY[kind]]


def resources(asm: str) -> dict:
    def field_(name):
        m = re.search(rf"\.{name}:\s+(\d+)", asm)
        return int(m.group(1)) if m else 0
    acc = re.search(r"\.amdhsa_accum_offset\s+(\d+)", asm)
    vg = field_("vgpr_count")
    ag = field_("agpr_count")
    return dict(vgprs=vg, agprs=ag, sgprs=field_("sgpr_count"), lds=field_("group_segment_fixed_size"),
                scratch=field_("private_segment_fixed_size"),
                accum_offset=int(acc.group(1)) if acc else -(-vg // 4) * 4)


def model(asm: str, gpu: str, num_warps: int, lds: int | None = None) -> dict:
    g = GPUS[gpu]
    mix = mix_of(steady_loop(asm))
    res = resources(asm)
    if lds is not None:
        res["lds"] = lds
    flop = sum(mfma_flop(op) * n for op, n in mix.mfma.items())
    # each MFMA at its input type's rate; the fraction is of the peak of the kernel's type
    mfma_clk = sum(mfma_flop(op) * n / (peak(gpu, mfma_type(op)) / (g["cus"] * 4 * g["clock"]))
                   for op, n in mix.mfma.items())
    kinds = sorted({mfma_type(op) for op in mix.mfma})
    top = max(peak(gpu, k) for k in kinds)
    issue_clk = 4 * mix.valu + mix.salu + mix.waitcnt + mix.barrier + mix.branch + mix.nop_clk \
        + sum(mix.ds_read.values()) + sum(mix.ds_write.values()) + sum(mix.global_load.values())
    lds_bytes = sum(64 * max(w, 4) * n for d in (mix.ds_read, mix.ds_write) for w, n in d.items())
    glob_bytes = sum(64 * w * n for w, n in mix.global_load.items())
    # per wave step, measured in clocks of one SIMD: the 4 SIMDs of a CU share LDS and the
    # cache port, so a CU-wide resource serves 4 wave-steps in the time a SIMD does one
    lds_clk = 4 * lds_bytes / LDS_BYTES_PER_CLK
    cache_clk = 4 * glob_bytes / (g["cache"] / (g["cus"] * g["clock"]))
    hbm_clk = 4 * glob_bytes / (g["hbm"] / (g["cus"] * g["clock"]))
    regs = -(-(res["accum_offset"] + res["agprs"]) // 8) * 8
    waves_per_wg_simd = -(-num_warps // 4)
    limits = {"registers": REGS_PER_LANE // max(regs, 1), "hardware": MAX_WAVES_PER_SIMD,
              "sgprs": SGPRS_PER_SIMD // max(res["sgprs"], 1),
              "lds": (LDS_PER_CU // res["lds"]) * waves_per_wg_simd if res["lds"] else 99}
    waves = min(limits.values())
    waves = waves // waves_per_wg_simd * waves_per_wg_simd
    occ_limit = min(limits, key=limits.get)
    # one SIMD with `waves` resident: MFMA runs beside the other waves' issue when waves >= 2
    simd_clk = max(mfma_clk, issue_clk) if waves >= 2 else mfma_clk + issue_clk
    bounds = {"MFMA issue": mfma_clk, "VALU/issue": issue_clk if waves >= 2 else simd_clk,
              "LDS bandwidth": lds_clk, "global bandwidth (cache)": cache_clk,
              "latency (too few waves)": LATENCY_CLK * max(mix.vm_round_trips, 1) / max(waves, 1)}
    step = max(bounds.values())
    bound = max(bounds, key=bounds.get)
    if bound == "VALU/issue" and waves < 2:
        bound = "VALU/issue (one wave: no overlap with MFMA)"
    frac = mfma_clk / step if waves else 0.0
    return dict(gpu=gpu, mix=_jsonable(asdict(mix)), resources=res, unified_regs=regs,
                waves_per_simd=waves, occupancy_limit=occ_limit, mfma_flop_per_wave_step=flop,
                clk_per_wave_step={k: round(v, 1) for k, v in bounds.items()},
                hbm_no_reuse_clk=round(hbm_clk, 1),
                mfma_bytes={"lds_per_mfma": lds_bytes / max(sum(mix.mfma.values()), 1),
                            "global_per_mfma": glob_bytes / max(sum(mix.mfma.values()), 1)},
                bound=bound, mfma_type="+".join(kinds), peak_tflops=round(top / 1e12, 1),
                fraction_of_peak=round(frac, 3), tflops=round(frac * top / 1e12, 1))


def _jsonable(d):
    return {k: ({str(a): b for a, b in v.items()} if isinstance(v, dict) else v) for k, v in d.items()}


def ours(cfg, gpu: str, dtype="bfloat16") -> tuple[str, int]:
    from gluon_trace import language as gl
    from gluon_trace.kernels import matmul_amd, matmul_amd_8bit
    kernel = getattr(matmul_amd_8bit if dtype.startswith("float8") or dtype == "int8" else matmul_amd,
                     TYPES[dtype][0])
    bm, bn, bk, nw = cfg
    target = GPUS[gpu]["target"]
    p = gl.pointer(getattr(gl, dtype))
    c = gl.pointer(gl.int32 if dtype == "int8" else gl.float32)
    extra = dict(CDNA=3 if target == "gfx942" else 2) if dtype == "int8" else {}
    tk = kernel.trace(p, p, c, 4096, 4096, 4096, 4096, 4096, 4096,
                      BM=bm, BN=bn, BK=bk, num_warps=nw, target=target, **extra)
    return tk.for_target(target).compile(target).asm, None


TRITON_SRC = '''
import triton, triton.language as tl
@triton.jit
def matmul(a, b, c, M, N, K, sam, sbk, scm, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), c.dtype.element_ty)  # (f32; int32 for int8)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        x = tl.load(a + rm[:, None] * sam + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b + kk[:, None] * sbk + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc)
    tl.store(c + rm[:, None] * scm + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))
'''


def triton_kernel(cfg, gpu: str, dtype="bfloat16"):
    """The same GEMM (same masks, same tile, same warps, same divisibility) through Triton's AMD backend:
    (asm, LDS bytes) or raises with the reason it cannot be built here."""
    import importlib.util
    import os
    import tempfile
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default; silences its warning
    import triton
    from triton.backends.compiler import GPUTarget
    bm, bn, bk, nw = cfg
    path = Path(tempfile.gettempdir()) / "gt_amd_model_triton_matmul.py"
    path.write_text(TRITON_SRC)  # triton.jit reads the source of a real file
    spec = importlib.util.spec_from_file_location("gt_amd_model_triton_matmul", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    t = TYPES[dtype][2]
    sig = {"a": t, "b": t, "c": "*i32" if dtype == "int8" else "*fp32", **{n: "i32" for n in ("M", "N", "K", "sam", "sbk", "scm")}}
    # every argument divisible by 16, as our kernel is traced (gluon_trace specializes 4096 and
    # the pointers so): Triton vectorizes its loads from the same facts
    attrs = {(k,): [["tt.divisibility", 16]] for k in range(len(sig))}
    src = triton.compiler.ASTSource(mod.matmul, sig, constexprs={"BM": bm, "BN": bn, "BK": bk}, attrs=attrs)
    k = triton.compile(src, target=GPUTarget("hip", GPUS[gpu]["target"], 64), options={"num_warps": nw})
    return k.asm["amdgcn"], int(k.metadata.shared)


ATTN_CONFIGS = [(64, 32, 64, 2, "float16"), (64, 64, 128, 2, "float16")]  # BM, BN, D, warps


def ours_attention(cfg, gpu: str, dtype="float16") -> str:
    """attention_fwd_mfma's K loop (one key tile a step; not causal, so every tile is full)."""
    from gluon_trace import language as gl
    from gluon_trace.kernels.attention_amd import attention_fwd_mfma
    bm, bn, d, nw = cfg
    target = GPUS[gpu]["target"]
    p = gl.pointer(getattr(gl, dtype))
    tk = attention_fwd_mfma.trace(p, p, p, p, 4096, 0.125, BM=bm, BN=bn, D=d, CAUSAL=False,
                                  num_warps=nw, target=target)
    return tk.for_target(target).compile(target).asm


def run(configs=CONFIGS, gpus=("MI300X", "MI250X"), with_triton=True, attn_configs=ATTN_CONFIGS) -> dict:
    rows, triton_note = [], None
    for gpu in gpus:
        for *cfg, dtype in attn_configs:
            rows.append(dict(kernel="gluon_trace attention_mfma", config=list(cfg), dtype=dtype,
                             **model(ours_attention(cfg, gpu, dtype), gpu, cfg[3])))
        for *cfg, dtype in configs:
            if GPUS[gpu]["target"] not in TYPES[dtype][3]:
                continue
            asm, _ = ours(cfg, gpu, dtype)
            rows.append(dict(kernel="gluon_trace " + TYPES[dtype][0], config=list(cfg), dtype=dtype,
                             **model(asm, gpu, cfg[3])))
            if with_triton and triton_note is None:
                try:
                    tasm, tlds = triton_kernel(cfg, gpu, dtype)
                except Exception as e:  # noqa: BLE001 -- the reason goes into the output
                    triton_note = f"Triton's AMD kernel could not be built here: {type(e).__name__}: {e}"
                    continue
                rows.append(dict(kernel="triton tl.dot", config=list(cfg), dtype=dtype,
                                 **model(tasm, gpu, cfg[3], tlds)))
    return dict(rows=rows, triton=triton_note or "built with Triton's AMD backend on this machine (no GPU)",
                assumptions={"latency_clk": LATENCY_CLK, "lds_bytes_per_clk": LDS_BYTES_PER_CLK,
                             "gpus": GPUS})


def table(result: dict) -> str:
    out = [f"{'kernel':24} {'gpu':6} {'BMxBNxBK/w':14} {'type':4} {'mfma':>4} {'valu':>5} {'ds r/w':>7} "
           f"{'gld':>4} {'trips':>5} {'v+a regs':>9} {'w/SIMD':>6} {'mfma clk':>8} {'issue':>6} {'lds':>6} "
           f"{'glob':>6} {'lat':>6} {'%peak':>6}  bound"]
    for r in result["rows"]:
        m, c, b = r["mix"], r["config"], r["clk_per_wave_step"]
        out.append(
            f"{r['kernel']:24} {r['gpu']:6} {'%dx%dx%d/%d' % tuple(c):14} {TYPES[r['dtype']][1]:4} "
            f"{sum(m['mfma'].values()):4d} "
            f"{m['valu']:5d} {sum(m['ds_read'].values()):3d}/{sum(m['ds_write'].values()):<3d} "
            f"{sum(m['global_load'].values()):4d} {m['vm_round_trips']:5d} "
            f"{r['resources']['vgprs']:4d}+{r['resources']['agprs']:<4d} "
            f"{r['waves_per_simd']:6d} {b['MFMA issue']:8.0f} {b['VALU/issue']:6.0f} "
            f"{b['LDS bandwidth']:6.0f} {b['global bandwidth (cache)']:6.0f} {b['latency (too few waves)']:6.0f} "
            f"{100 * r['fraction_of_peak']:5.1f}%  {r['bound']}")
    out.append("columns after 'gld': exposed global round trips per K step; clocks of one SIMD per wave "
               "per K step for MFMA, VALU/issue, LDS, global (cache), latency; " + result["triton"])
    return "\n".join(out)


def main(argv=None) -> int:
    result = run()
    print(table(result))
    dest = Path(__file__).parent / "results" / "amd-model.json"
    dest.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

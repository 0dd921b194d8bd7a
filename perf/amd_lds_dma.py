"""The LDS-DMA async copy (gfx942) in perf/amd_model.py's static model: the async-copy GEMM
(gluon_trace/kernels/matmul_amd_async.py, C = A @ B^T through a two-stage LDS ring) emitted with
``buffer_load_dword ... lds`` and, for the same kernel, with the VGPR path (global_load, ds_write
at the wait), on MI300X; the register-prefetch GEMM (matmul_amd.py) beside them for reference.

    python perf/amd_lds_dma.py          # table + perf/results/amd-lds-dma.json

The model's figures and assumptions are amd_model.py's (its docstring); nothing here changes them.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import amd_model  # noqa: E402

CONFIGS = [(64, 64, 32, 4), (128, 128, 32, 4), (128, 128, 64, 4), (256, 128, 32, 8)]
GPU = "MI300X"
SIZE = 4096


def async_asm(cfg, dma: bool) -> tuple[str, int]:
    """The kernel's module text (lowered here: the compile cache does not know the switch) and its LDS."""
    from gluon_trace import language as gl
    from gluon_trace.backends.amd import lds_dma
    from gluon_trace.backends.amd.compiler import lower
    from gluon_trace.kernels.matmul_amd_async import matmul_mfma_async
    bm, bn, bk, nw = cfg
    p, c = gl.pointer(gl.float16), gl.pointer(gl.float32)
    saved = lds_dma.TARGETS
    lds_dma.TARGETS = saved if dma else ()
    try:
        tk = matmul_mfma_async.trace(p, p, c, SIZE, SIZE, SIZE, SIZE, SIZE, SIZE, BM=bm, BN=bn, BK=bk,
                                     num_warps=nw, target="gfx942")
        e = lower(tk.for_target("gfx942").graph, "gfx942")
    finally:
        lds_dma.TARGETS = saved
    return e.text, e.lds


def run() -> dict:
    rows = []
    for cfg in CONFIGS:
        for name, dma in (("async, LDS DMA", True), ("async, VGPR path", False)):
            text, lds = async_asm(cfg, dma)
            rows.append(dict(kernel=name, config=list(cfg), **amd_model.model(text, GPU, cfg[3], lds)))
        asm, lds = amd_model.ours(cfg, GPU, "float16")
        rows.append(dict(kernel="matmul_mfma (prefetch)", config=list(cfg), **amd_model.model(asm, GPU, cfg[3], lds)))
    return {"gpu": GPU, "rows": rows}


def table(result: dict) -> str:
    out = [f"{'kernel':24} {'BMxBNxBK/w':14} mfma  valu  salu ds r/w   gld trips  v+a regs w/SIMD "
           f"{'mfma clk':>8} {'issue':>6} {'lds':>6} {'glob':>6} {'lat':>6} %peak  bound"]
    for r in result["rows"]:
        m, b = r["mix"], r["clk_per_wave_step"]
        out.append(
            f"{r['kernel']:24} {'%dx%dx%d/%d' % tuple(r['config']):14} {sum(m['mfma'].values()):4d} "
            f"{m['valu']:5d} {m['salu']:5d} {sum(m['ds_read'].values()):3d}/{sum(m['ds_write'].values()):<3d} "
            f"{sum(m['global_load'].values()):4d} {m['vm_round_trips']:5d} "
            f"{r['resources']['vgprs']:4d}+{r['resources']['agprs']:<4d} {r['waves_per_simd']:6d} "
            f"{b['MFMA issue']:8.0f} {b['VALU/issue']:6.0f} {b['LDS bandwidth']:6.0f} "
            f"{b['global bandwidth (cache)']:6.0f} {b['latency (too few waves)']:6.0f} "
            f"{100 * r['fraction_of_peak']:5.1f}%  {r['bound']}")
    return "\n".join(out)


def main() -> int:
    result = run()
    print(table(result))
    dest = Path(__file__).parent / "results" / "amd-lds-dma.json"
    dest.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

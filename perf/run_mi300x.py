"""Every AMD example kernel on an MI300X (or any ROCm GPU we target), in one command:

    python perf/run_mi300x.py                 # check against torch, time against torch, table + JSON
    python perf/run_mi300x.py --dry-run       # here, without a GPU: everything up to the first HIP call

For each case -- every gfx942 example: the matmul_amd GEMM on MFMA (bf16, f16), the fp8 GEMM
(gfx942's FNUZ e4m3 and e5m2), the int8 GEMM (int32 results), the async-copy GEMM C = A @ B^T
(LDS DMA where K is a multiple of 16, the VGPR path otherwise), at several shapes, odd ones
included; the MFMA attention forward, causal and not -- the run poisons the output (NaN, or
a sentinel for int32), draws fresh random inputs, launches our kernel, compares with torch,
then times both with torch.cuda events (ROCm's torch uses the cuda namespace). The anchors:
torch.matmul (rocBLAS/hipBLASLt) for 16-bit GEMMs, torch._scaled_mm (hipBLASLt) for fp8,
torch._int_mm for int8, scaled_dot_product_attention; where an anchor is missing from the
installed torch, the float32 matmul of the same operands is timed instead and the JSON row
says so (``anchor``). The dry run traces, emits, assembles and
links each kernel for gfx942, reads the argument layout back from the code object, packs
the kernel-argument block with placeholder device addresses, and prints what it would
launch. Results: perf/results/mi300x-run.json (dry run: mi300x-dry-run.json).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gluon_trace import language as gl
from gluon_trace.kernels.attention_amd import attention_fwd_mfma
from gluon_trace.kernels.matmul_amd import matmul_mfma
from gluon_trace.kernels.matmul_amd_8bit import matmul_fp8, matmul_i8
from gluon_trace.kernels.matmul_amd_async import matmul_mfma_async

GEMM_SHAPES = [(512, 512, 512), (4096, 4096, 4096), (8192, 8192, 8192), (1000, 1000, 1000),
               (777, 1025, 333), (4095, 4097, 4096)]
ATTN_SHAPES = [(16, 1024, 64, False), (16, 1024, 64, True), (8, 1000, 64, True)]  # batch*heads, seq, D, causal
DTYPES = ("bfloat16", "float16")
FP8 = ("float8e4b8", "float8e5b16")  # gfx942's FNUZ formats; torch's float8_e4m3fnuz / float8_e5m2fnuz
TORCH_NAMES = {"float8e4b8": "float8_e4m3fnuz", "float8e5b16": "float8_e5m2fnuz"}
GEMMS = (matmul_mfma, matmul_fp8, matmul_i8, matmul_mfma_async)


@dataclass
class Case:
    name: str
    kernel: object
    dtype: str
    shape: tuple
    constexprs: dict
    grid: tuple

    def flops(self) -> float:
        if self.kernel in GEMMS:
            m, n, k = self.shape
            return 2.0 * m * n * k
        bh, s, d, causal = self.shape
        return 4.0 * bh * s * s * d * (0.5 if causal else 1.0)


def _tiles(m, n, big=(128, 128, 32, 4)):
    return big if m * n >= 2048 * 2048 else (64, 64, 32, 4)


def cases() -> list[Case]:
    out = []
    for dtype in DTYPES:
        for m, n, k in GEMM_SHAPES:
            bm, bn, bk, nw = _tiles(m, n)
            out.append(Case(f"matmul_mfma {dtype} {m}x{n}x{k}", matmul_mfma, dtype, (m, n, k),
                            dict(BM=bm, BN=bn, BK=bk, num_warps=nw), (-(-m // bm), -(-n // bn))))
    for dtype in FP8:
        for m, n, k in GEMM_SHAPES:
            bm, bn, bk, nw = _tiles(m, n, (128, 128, 64, 4))
            out.append(Case(f"matmul_fp8 {dtype} {m}x{n}x{k}", matmul_fp8, dtype, (m, n, k),
                            dict(BM=bm, BN=bn, BK=bk, num_warps=nw), (-(-m // bm), -(-n // bn))))
    for m, n, k in GEMM_SHAPES:
        bm, bn, bk, nw = _tiles(m, n, (128, 128, 64, 4))
        out.append(Case(f"matmul_i8 int8 {m}x{n}x{k}", matmul_i8, "int8", (m, n, k),
                        dict(BM=bm, BN=bn, BK=bk, CDNA=3, num_warps=nw), (-(-m // bm), -(-n // bn))))
    for dtype in DTYPES:
        # the tile the example is written and tested for; K % 16 == 0 takes LDS DMA
        for m, n, k in GEMM_SHAPES:
            out.append(Case(f"matmul_mfma_async {dtype} {m}x{n}x{k}", matmul_mfma_async, dtype, (m, n, k),
                            dict(BM=64, BN=64, BK=32, num_warps=4), (-(-m // 64), -(-n // 64))))
    for bh, s, d, causal in ATTN_SHAPES:
        out.append(Case(f"attention_fwd_mfma float16 {bh}x{s}x{d}{' causal' if causal else ''}",
                        attention_fwd_mfma, "float16", (bh, s, d, causal),
                        dict(BM=64, BN=32, D=d, CAUSAL=causal, num_warps=2), (-(-s // 64), bh)))
    return out


def scalar_args(case: Case) -> list:
    if case.kernel is matmul_mfma_async:
        m, n, k = case.shape
        return [m, n, k, k, k, n]  # M, N, K, stride_am, stride_bn (B is [N, K]), stride_cm
    if case.kernel in GEMMS:
        m, n, k = case.shape
        return [m, n, k, k, n, n]  # M, N, K, stride_am, stride_bk, stride_cm (row-major)
    _, s, d, _ = case.shape
    return [s, float(1 / np.sqrt(d))]


def out_dtype(case: Case) -> str:
    """The kernel's C: f32 for fp8 and the async GEMM, int32 for int8, else the inputs'."""
    return {matmul_fp8: "float32", matmul_i8: "int32", matmul_mfma_async: "float32"}.get(case.kernel, case.dtype)


def pointer_types(case: Case) -> list:
    p = gl.pointer(getattr(gl, case.dtype))
    if case.kernel in GEMMS:
        return [p, p, gl.pointer(getattr(gl, out_dtype(case)))]
    return [p] * 4


_TYPESTR = {"float16": "<f2", "bfloat16": "<u2", "float32": "<f4", "int32": "<i4", "int8": "|i1",
            "float8e4b8": "|u1", "float8e5b16": "|u1"}  # bf16 and fp8 have no typestr: same-size ints stand in


class _Placeholder:
    """A device array that is not there: the dry run packs its (made-up) address."""

    def __init__(self, addr: int, typestr: str, shape: tuple):
        self.__cuda_array_interface__ = dict(shape=shape, typestr=typestr, data=(addr, False),
                                             version=3, strides=None)


def dry_run(case: Case, target="gfx942") -> dict:
    from gluon_trace.backends.amd import launcher
    t0 = time.perf_counter()
    args = pointer_types(case) + scalar_args(case)
    tk = case.kernel.trace(*args, **case.constexprs, target=target)
    graph = tk.for_target(target).graph
    ck = tk.for_target(target).compile(target)
    meta = launcher.kernel_meta(ck.binary, ck.name)
    kinds = [case.dtype] * (len(pointer_types(case)) - 1) + [out_dtype(case)]
    ptrs = [_Placeholder(0x7F0000000000 + (i << 32), _TYPESTR[t], (1,)) for i, t in enumerate(kinds)]
    try:
        kernarg = launcher.pack_args(meta, graph, ptrs + scalar_args(case))
        packed = f"{len(kernarg)} bytes of explicit kernel arguments"
    except Exception as e:  # noqa: BLE001 -- a placeholder the packer refuses: say so, still list the layout
        kernarg, packed = b"", f"not packed with placeholders ({type(e).__name__}: {e})"
    layout = [(a.get(".name", a[".value_kind"]), a[".offset"], a[".size"], a[".value_kind"])
              for a in meta[".args"] if not a[".value_kind"].startswith("hidden")]
    return dict(case=case.name, target=target, grid=list(case.grid), constexprs=case.constexprs,
                hsaco_bytes=len(ck.binary), vgprs=ck.registers, agprs=ck.extra.get("agprs", 0),
                sgprs=ck.extra.get("sgprs", 0), lds=ck.shared_bytes, scratch=ck.spill_bytes,
                workgroup=meta[".max_flat_workgroup_size"], kernarg=packed, kernarg_bytes=len(kernarg),
                args=layout, scalars=scalar_args(case), seconds=round(time.perf_counter() - t0, 3))


def _gemm_inputs(case: Case, torch, g):
    """(inputs, poisoned output, float64 reference, anchor fn, anchor name, tolerance)."""
    m, n, k = case.shape
    if case.kernel is matmul_i8:
        a = torch.randint(-128, 128, (m, k), device="cuda", generator=g, dtype=torch.int8)
        b = torch.randint(-128, 128, (k, n), device="cuda", generator=g, dtype=torch.int8)
        out = torch.full((m, n), -123456789, device="cuda", dtype=torch.int32)
        ref = a.double() @ b.double()  # exact: |sums| < 2**53
        if hasattr(torch, "_int_mm") and m > 16 and k % 8 == 0 and n % 8 == 0:
            return [a, b], out, ref, (lambda: torch._int_mm(a, b)), "torch._int_mm", 0.0
        af, bf = a.float(), b.float()
        return [a, b], out, ref, (lambda: af @ bf), "float32 matmul (no torch._int_mm for this shape)", 0.0
    if case.kernel is matmul_fp8:
        t8 = getattr(torch, TORCH_NAMES[case.dtype])
        a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(t8)
        b = (torch.randn(k, n, device="cuda", generator=g) * 2).to(t8)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        ad, bd = a.float().double(), b.float().double()  # fp8 -> f32 exactly, then f64
        ref = ad @ bd
        tol = 1e-4 * (ad.abs() @ bd.abs()).max().item()
        one = torch.ones((), device="cuda")
        bt = b.t().contiguous().t()  # hipBLASLt takes B column-major
        try:
            torch._scaled_mm(a, bt, scale_a=one, scale_b=one, out_dtype=torch.float32)
            return [a, b], out, ref, (lambda: torch._scaled_mm(a, bt, scale_a=one, scale_b=one,
                                                                out_dtype=torch.float32)), "torch._scaled_mm", tol
        except Exception as e:  # noqa: BLE001 -- this torch or shape has no fp8 GEMM: time the f32 one
            af, bf = a.float(), b.float()
            return [a, b], out, ref, (lambda: af @ bf), f"float32 matmul (_scaled_mm: {type(e).__name__})", tol
    dt = getattr(torch, case.dtype)
    a = torch.randn(m, k, device="cuda", dtype=dt, generator=g)
    if case.kernel is matmul_mfma_async:
        b = torch.randn(n, k, device="cuda", dtype=dt, generator=g)   # [N, K]: C = A @ B^T
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        return [a, b], out, a.double() @ b.double().T, (lambda: torch.matmul(a, b.T)), "torch.matmul", \
            2e-2 * np.sqrt(k)
    b = torch.randn(k, n, device="cuda", dtype=dt, generator=g)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
    return [a, b], out, a.double() @ b.double(), (lambda: torch.matmul(a, b)), "torch.matmul", 2e-2 * np.sqrt(k)


def run_case(case: Case, torch, iters=20) -> dict:
    import torch.nn.functional as F
    g = torch.Generator(device="cuda").manual_seed(hash(case.name) % 2**31)
    if case.kernel in GEMMS:
        ins, out, ref, ref_fn, anchor, tol = _gemm_inputs(case, torch, g)
    else:
        dt = getattr(torch, case.dtype)
        bh, s, d, causal = case.shape
        q, k_, v = (torch.randn(bh, s, d, device="cuda", dtype=dt, generator=g) for _ in range(3))
        out = torch.full((bh, s, d), float("nan"), device="cuda", dtype=dt)
        ins, anchor = [q, k_, v], "scaled_dot_product_attention"
        ref_fn = (lambda: F.scaled_dot_product_attention(q[None], k_[None], v[None], is_causal=causal))
        ref = F.scaled_dot_product_attention(q[None].float(), k_[None].float(), v[None].float(),
                                             is_causal=causal)[0].double()
        tol = 2e-2
    launch = case.kernel[case.grid]
    launch(*ins, out, *scalar_args(case), **case.constexprs)
    torch.cuda.synchronize()
    err = (out.double() - ref).abs().max().item()
    ok = bool(torch.isfinite(out.double()).all().item()) and err <= tol

    def timed(fn):
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / iters * 1e-3

    ours = timed(lambda: launch(*ins, out, *scalar_args(case), **case.constexprs))
    theirs = timed(ref_fn)
    return dict(case=case.name, ok=ok, max_abs_err=err, tol=tol, anchor=anchor, ours_s=ours, torch_s=theirs,
                ours_tflops=case.flops() / ours / 1e12, torch_tflops=case.flops() / theirs / 1e12,
                ratio=theirs / ours)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="no GPU: build and pack everything, launch nothing")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this")
    ap.add_argument("--out", default=None, help="JSON file to write")
    opt = ap.parse_args(argv)
    todo = [c for c in cases() if opt.only in c.name]
    if not todo:
        print(f"no case name contains {opt.only!r}; the cases are:\n  " + "\n  ".join(c.name for c in cases()))
        return 2
    results = Path(__file__).parent / "results"
    if opt.dry_run:
        rows = []
        for c in todo:
            r = dry_run(c)
            rows.append(r)
            print(f"would launch {r['case']:44} grid {tuple(r['grid'])} x {r['workgroup']} threads, "
                  f"{r['vgprs']} VGPR + {r['agprs']} AGPR, {r['sgprs']} SGPR, LDS {r['lds']} B, "
                  f"{r['hsaco_bytes']} B code; {r['kernarg']}")
        dest = Path(opt.out or results / "mi300x-dry-run.json")
        dest.write_text(json.dumps(rows, indent=1) + "\n")
        print(f"dry run: {len(rows)} kernels built for gfx942; no HIP call made; wrote {dest}")
        return 0
    try:
        import torch
    except ImportError:
        print("needs torch built for ROCm with a visible GPU; torch is not installed here (--dry-run needs none)")
        return 2
    if not (torch.cuda.is_available() and getattr(torch.version, "hip", None)):
        print("needs torch built for ROCm with a visible GPU (torch.version.hip and torch.cuda.is_available())")
        return 2
    print(f"device: {torch.cuda.get_device_name()} (torch {torch.__version__}, HIP {torch.version.hip})")
    rows = []
    print(f"{'case':48} {'ok':>3} {'max err':>9} {'ours ms':>8} {'torch ms':>8} {'ours TF':>8} {'torch TF':>8} {'ours/torch':>10}")
    for c in todo:
        r = run_case(c, torch)
        rows.append(r)
        print(f"{r['case']:48} {'yes' if r['ok'] else 'NO':>3} {r['max_abs_err']:9.2e} {r['ours_s'] * 1e3:8.3f} "
              f"{r['torch_s'] * 1e3:8.3f} {r['ours_tflops']:8.1f} {r['torch_tflops']:8.1f} {r['ratio']:10.2f}")
    dest = Path(opt.out or results / "mi300x-run.json")
    dest.write_text(json.dumps(dict(device=torch.cuda.get_device_name(), rows=rows), indent=1) + "\n")
    print(f"wrote {dest}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

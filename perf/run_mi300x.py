"""Every AMD example kernel on an MI300X (or any ROCm GPU we target), in one command:

    python perf/run_mi300x.py                 # check against torch, time against torch, table + JSON
    python perf/run_mi300x.py --dry-run       # here, without a GPU: everything up to the first HIP call

For each case (the matmul_amd GEMM on MFMA at several shapes, odd ones included, bf16 and
f16; the MFMA attention forward, causal and not), the run poisons the output with NaN,
draws fresh random inputs, launches our kernel, compares with torch (torch.matmul, which is
rocBLAS/hipBLASLt, and scaled_dot_product_attention), then times both with torch.cuda
events (ROCm's torch uses the cuda namespace). The dry run traces, emits, assembles and
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

GEMM_SHAPES = [(512, 512, 512), (4096, 4096, 4096), (8192, 8192, 8192), (1000, 1000, 1000),
               (777, 1025, 333), (4095, 4097, 4096)]
ATTN_SHAPES = [(16, 1024, 64, False), (16, 1024, 64, True), (8, 1000, 64, True)]  # batch*heads, seq, D, causal
DTYPES = ("bfloat16", "float16")


@dataclass
class Case:
    name: str
    kernel: object
    dtype: str
    shape: tuple
    constexprs: dict
    grid: tuple

    def flops(self) -> float:
        if self.kernel is matmul_mfma:
            m, n, k = self.shape
            return 2.0 * m * n * k
        bh, s, d, causal = self.shape
        return 4.0 * bh * s * s * d * (0.5 if causal else 1.0)


def cases() -> list[Case]:
    out = []
    for dtype in DTYPES:
        for m, n, k in GEMM_SHAPES:
            bm, bn, bk, nw = (128, 128, 32, 4) if m * n >= 2048 * 2048 else (64, 64, 32, 4)
            out.append(Case(f"matmul_mfma {dtype} {m}x{n}x{k}", matmul_mfma, dtype, (m, n, k),
                            dict(BM=bm, BN=bn, BK=bk, num_warps=nw), (-(-m // bm), -(-n // bn))))
    for bh, s, d, causal in ATTN_SHAPES:
        out.append(Case(f"attention_fwd_mfma float16 {bh}x{s}x{d}{' causal' if causal else ''}",
                        attention_fwd_mfma, "float16", (bh, s, d, causal),
                        dict(BM=64, BN=32, D=d, CAUSAL=causal, num_warps=2), (-(-s // 64), bh)))
    return out


def scalar_args(case: Case) -> list:
    if case.kernel is matmul_mfma:
        m, n, k = case.shape
        return [m, n, k, k, n, n]  # M, N, K, stride_am, stride_bk, stride_cm (row-major)
    _, s, d, _ = case.shape
    return [s, float(1 / np.sqrt(d))]


def pointer_types(case: Case) -> list:
    p = gl.pointer(getattr(gl, case.dtype))
    return [p] * (3 if case.kernel is matmul_mfma else 4)


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
    typestr = "<f2" if case.dtype == "float16" else "<u2"  # bf16 has no typestr: a 2-byte int stands for it
    ptrs = [_Placeholder(0x7F0000000000 + (i << 32), typestr, (1,)) for i in range(len(pointer_types(case)))]
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


def run_case(case: Case, torch, iters=20) -> dict:
    import torch.nn.functional as F
    dt = getattr(torch, case.dtype)
    g = torch.Generator(device="cuda").manual_seed(hash(case.name) % 2**31)
    if case.kernel is matmul_mfma:
        m, n, k = case.shape
        a = torch.randn(m, k, device="cuda", dtype=dt, generator=g)
        b = torch.randn(k, n, device="cuda", dtype=dt, generator=g)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
        ins, ref_fn = [a, b], (lambda: torch.matmul(a, b))
        ref = (a.float() @ b.float())
        tol = 2e-2 * np.sqrt(k)
    else:
        bh, s, d, causal = case.shape
        q, k_, v = (torch.randn(bh, s, d, device="cuda", dtype=dt, generator=g) for _ in range(3))
        out = torch.full((bh, s, d), float("nan"), device="cuda", dtype=dt)
        ins = [q, k_, v]
        ref_fn = (lambda: F.scaled_dot_product_attention(q[None], k_[None], v[None], is_causal=causal))
        ref = F.scaled_dot_product_attention(q[None].float(), k_[None].float(), v[None].float(),
                                             is_causal=causal)[0]
        tol = 2e-2
    launch = case.kernel[case.grid]
    launch(*ins, out, *scalar_args(case), **case.constexprs)
    torch.cuda.synchronize()
    err = (out.float() - ref).abs().max().item()
    ok = bool(torch.isfinite(out).all().item()) and err <= tol

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
    return dict(case=case.name, ok=ok, max_abs_err=err, tol=tol, ours_s=ours, torch_s=theirs,
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

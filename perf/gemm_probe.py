"""What limits the Hopper GEMMs: one knob at a time against the baseline configuration, each
checked against torch and timed in the same run beside cuBLAS and Triton's matmul (whose PTX
is written next to the results for comparison).

    python perf/gemm_probe.py [out_dir]
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bench_gemm import gpu_time, triton_matmul  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.kernels.matmul_hopper import matmul_hopper  # noqa: E402
from gluon_trace.kernels.matmul_hopper_ws import matmul_hopper_ws  # noqa: E402
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

LAY = gl.NVMMASharedLayout.get_default_for


def run(kernel, a, b, c, m, n, k, bm=128, bn=256, bk=64, stages=3, warps=8, group=8, programs=None,
        b_kmajor=False):
    bb = [bn, bk] if b_kmajor else [bk, bn]
    da = TensorDescriptor.from_tensor(a, [bm, bk], LAY([bm, bk], gl.bfloat16))
    db = TensorDescriptor.from_tensor(b, bb, LAY(bb, gl.bfloat16))
    dc = TensorDescriptor.from_tensor(c, [bm, bn], LAY([bm, bn], gl.bfloat16))
    tiles = -(-m // bm) * -(-n // bn)
    p = programs or min(tiles, torch.cuda.get_device_properties(0).multi_processor_count)
    extra = {"B_KMAJOR": True} if b_kmajor else {}
    return lambda: kernel[(p,)](da, db, dc, m, n, k, STAGES=stages, GROUP_M=group, num_warps=warps,
                                backend="nvidia", **extra)


def main() -> int:
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    print(torch.cuda.get_device_name())
    for m in (4096, 8192):
        n = k = m
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        bt = b.t().contiguous()
        ref = a.float() @ b.float()
        flop = 2.0 * m * n * k
        tiles = (m // 128) * (n // 256)
        variants = {
            "baseline persistent 128x256x64 s3 w8 g8": lambda c: run(matmul_hopper, a, b, c, m, n, k),
            "one tile per CTA (grid = tiles)": lambda c: run(matmul_hopper, a, b, c, m, n, k, programs=tiles),
            "B K-major ([N, K] operand)": lambda c: run(matmul_hopper, a, bt, c, m, n, k, b_kmajor=True),
            "GROUP_M 16": lambda c: run(matmul_hopper, a, b, c, m, n, k, group=16),
            "GROUP_M 4": lambda c: run(matmul_hopper, a, b, c, m, n, k, group=4),
            "ws baseline": lambda c: run(matmul_hopper_ws, a, b, c, m, n, k),
            "ws one tile per CTA": lambda c: run(matmul_hopper_ws, a, b, c, m, n, k, programs=tiles),
            "ws 128x128x64 s4 w4": lambda c: run(matmul_hopper_ws, a, b, c, m, n, k, bn=128, stages=4, warps=4),
        }
        cublas = gpu_time(lambda: torch.matmul(a, b))
        print(f"{m}^3: cuBLAS {flop / cublas / 1e9:.0f} TFLOP/s")
        tri = triton_matmul()
        if tri is not None:
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            tri(a, b, c)
            t = gpu_time(lambda: tri(a, b, c))
            print(f"  triton tutorial: {flop / t / 1e9:.0f} TFLOP/s ({cublas / t:.3f}x cuBLAS)")
        for name, make in variants.items():
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            try:
                fn = make(c)
                fn()
                torch.cuda.synchronize()
                err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
                t = gpu_time(fn)
                print(f"  {name}: {flop / t / 1e9:.0f} TFLOP/s ({cublas / t:.3f}x cuBLAS) err {err:.1e}")
            except Exception as e:  # noqa: BLE001  (a variant that fails is reported)
                print(f"  {name}: {type(e).__name__}: {str(e)[:200]}")
    try:  # Triton's PTX for the same GEMM, to compare instruction streams
        import triton  # noqa: F401
        tri = triton_matmul()
        a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(1024, 1024, device="cuda", dtype=torch.bfloat16)
        tri(a, a, c)
        import bench_gemm
        kern = bench_gemm._last_triton_kernel
        with open(os.path.join(out, "triton-matmul.ptx"), "w") as f:
            f.write(kern.asm["ptx"])
    except Exception as e:  # noqa: BLE001
        print("no Triton PTX:", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())

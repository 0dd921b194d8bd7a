"""The cluster GEMM's tile order at the square shapes: GROUP_M (how many tile rows a group of
consecutive tiles spans) swept for clusters of one and pairs sharing B, each timed in turn with
cuBLAS alone and sustained. Nsight Compute showed our clusters of one at 4096^3 reading 186 MB
of DRAM against cuBLAS's 149 MB (perf/README.md, session 17): the order decides what L2 keeps.

    python perf/probe_group.py [MxNxK ...]     # default 4096^3 and 4000^3

Each launch is checked against torch first (bench_gemm.checked)."""
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_gemm as bg  # noqa: E402

GROUPS = [int(g) for g in os.environ.get("GROUP_MS", "4,8,16,32").split(",")]
BASES = {"x1": (128, 256, 64, 4, 8, 1, 64, False), "x2 share B": (128, 256, 64, 4, 8, 2, 64, False)}


def main(shapes):
    print(torch.cuda.get_device_name())
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        runs = {"cublas": lambda: torch.matmul(a, b)}
        for base, cfg in BASES.items():
            for g in GROUPS:
                label = f"{base} GROUP_M {g}"
                run = bg.checked(label, lambda c, cfg=cfg + (g,): bg.cluster_run(cfg, a, b, c, (m, n, k),
                                                                                 bg.matmul_hopper_cluster_ws),
                                 (m, n, k), ref, report_ok=False)
                if run is not None:
                    runs[label] = run
        bg.time_in_turn(runs, (m, n, k))
        sustained = bg.sustained_ratios(runs["cublas"], {x: r for x, r in runs.items() if x != "cublas"})
        print(f"{m}x{n}x{k} sustained ({bg.SUSTAIN_S} s back to back, 2 rounds in turn with cuBLAS), median ratio: "
              + ", ".join(f"{x} {statistics.median(r):.3f}" for x, r in sustained.items()), flush=True)


if __name__ == "__main__":
    main([tuple(int(x) for x in s.split("x")) for s in sys.argv[1:]] or [(4096,) * 3, (4000,) * 3])

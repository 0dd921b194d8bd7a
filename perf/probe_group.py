"""The cluster GEMM's tile order at the square shapes: GROUP_M (how many tile rows a group of
consecutive tiles spans) swept for clusters of one and pairs sharing B, each timed in turn with
cuBLAS alone and sustained. Nsight Compute showed our clusters of one at 4096^3 reading 186 MB
of DRAM against cuBLAS's 149 MB (perf/README.md, session 17): the order decides what L2 keeps.

    python perf/probe_group.py [MxNxK ...]     # default 4096^3 and 4000^3

Each launch is checked against torch first (bench_gemm.checked)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_gemm as bg  # noqa: E402

GROUPS = [int(g) for g in os.environ.get("GROUP_MS", "4,8,16,32").split(",")]
BASES = {"x1": (128, 256, 64, 4, 8, 1, 64, False), "x2 share B": (128, 256, 64, 4, 8, 2, 64, False)}


def main(shapes):
    print(torch.cuda.get_device_name())
    for shape in shapes:
        bg.against_cublas(shape, lambda a, b: {
            f"{base} GROUP_M {g}": (lambda c, cfg=cfg + (g,): bg.cluster_run(cfg, a, b, c, shape,
                                                                              bg.matmul_hopper_cluster_ws))
            for base, cfg in BASES.items() for g in GROUPS})


if __name__ == "__main__":
    main([tuple(int(x) for x in s.split("x")) for s in sys.argv[1:]] or [(4096,) * 3, (4000,) * 3])

"""Clusters of four CTAs in a 2x2 grid sharing both operands (SHARE_A=2: each A tile multicast
along its grid row, each B tile along its column) beside the pairs and co-located launches
they generalise, in turn with cuBLAS alone and sustained. For the skinny shape the lead is A:
cuBLAS's reads of A cost the L2 a third of ours (perf/README.md, session 17).

    python perf/probe_grid.py [MxNxK ...]     # default 128x8192x8192 and 4096^3

Each launch is checked against torch first (bench_gemm.checked)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_gemm as bg  # noqa: E402
from gluon_trace.kernels.matmul_hopper_ws import matmul_hopper_ws  # noqa: E402

CWS = bg.matmul_hopper_cluster_ws
CASES = {
    (128, 8192, 8192): {
        "ws 64x128 co-located, B evict_first": ("ws", (64, 128, 64, 8, 4, 128, 2, "evict_first")),
        "pairs sharing B": ("cluster", (64, 128, 64, 8, 4, 2, 64)),
        "2x2 grid": ("cluster", (64, 128, 64, 8, 4, 4, 64, 2)),
    },
    (4096, 4096, 4096): {
        "clusters of one": ("cluster", (128, 256, 64, 4, 8, 1, 64)),
        "pairs sharing B": ("cluster", (128, 256, 64, 4, 8, 2, 64)),
        "2x2 grid": ("cluster", (128, 256, 64, 4, 8, 4, 64, 2)),
    },
}


def _make(kind, cfg, a, b, shape):
    if kind == "ws":
        return lambda c: bg.hopper_run(cfg, a, b, c, shape, matmul_hopper_ws)
    return lambda c: bg.cluster_run(cfg, a, b, c, shape, CWS)


def main(shapes):
    print(torch.cuda.get_device_name())
    for shape in shapes:
        bg.against_cublas(shape, lambda a, b: {label: _make(kind, cfg, a, b, shape)
                                               for label, (kind, cfg) in CASES[shape].items()})
        # how many clusters ran at once: a cluster of 4 must fit in one GPC
        print(f"{shape} clusters launched: " + ", ".join(f"{cfg[5]} CTAs {bg.CLUSTERS_USED.get(cfg)}"
                                                       for kind, cfg in CASES[shape].values() if kind == "cluster"))


if __name__ == "__main__":
    main([tuple(int(x) for x in s.split("x")) for s in sys.argv[1:]] or list(CASES))

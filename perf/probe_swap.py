"""matmul_hopper_swap (wgmma's M along C's columns, tiles of 160x192 and other sizes that are not
powers of two) beside the cluster kernel's fastest square configuration, each timed in turn with
cuBLAS alone and sustained. At 4000^3 cuBLAS runs nvjet_sm90_tst_160x192_64x3 (Nsight Compute,
perf/README.md session 18): 525 tiles, 3.98 waves on 132 SMs, where our 128x256 makes 512.

    python perf/probe_swap.py [MxNxK ...]     # default 4000^3, 4096^3 and 8192^3

Each launch is checked against torch first (bench_gemm.checked)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_gemm as bg  # noqa: E402

SWAPS = {"swap 160x192 4 stages": (32, 5, 64, 4, 3, 8, 2),
         "swap 160x192 4 stages overlap": (32, 5, 64, 4, 3, 8, 2, 1),
         "swap 160x192 4 stages overlap GROUP_M 16": (32, 5, 64, 4, 3, 16, 2, 1),
         "swap 256x128 4 stages overlap": (64, 4, 64, 4, 2, 8, 2, 1),
         "swap 256x128 4 stages": (64, 4, 64, 4, 2, 8, 2)}
CLUSTER = {"cluster-ws x1": (128, 256, 64, 4, 8, 1, 64)}


def main(shapes):
    print(torch.cuda.get_device_name())
    for shape in shapes:
        def runs(a, b, shape=shape):
            out = {name: (lambda c, cfg=cfg: bg.swap_run(cfg, a, b, c, shape)) for name, cfg in SWAPS.items()}
            out.update({name: (lambda c, cfg=cfg: bg.cluster_run(cfg, a, b, c, shape, bg.matmul_hopper_cluster_ws))
                        for name, cfg in CLUSTER.items()})
            return out
        bg.against_cublas(shape, runs)


if __name__ == "__main__":
    main([tuple(int(x) for x in s.split("x")) for s in sys.argv[1:]] or [(4000,) * 3, (4096,) * 3, (8192,) * 3])

"""Clusters of two with the producer split in two warps (matmul_hopper_cluster_ws ``APART``):
one loads the CTA's own block as soon as this CTA released the stage, the other its part of
the shared block once both CTAs did. Beside the same kernel with one producer (every load
waiting for both CTAs' releases) and clusters of one, timed in turn with cuBLAS.

    python perf/probe_apart.py [MxNxK ...]     # default 4096x4096x4096 8192x8192x8192

Each run is checked against torch first; medians of rounds (bench_gemm.time_in_turn). On the H200
(session 14) APART moved no shape beyond its rounds' spread: 4096^3 0.984x against 0.963x for the
same pairs with one producer and 0.970x for clusters of one, 8192^3 1.028x against 1.018x and
1.048x, 4000^3 0.977-0.983x against 0.980x (results/probe-apart-NVIDIA_H200-session14.log)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_gemm as bg  # noqa: E402

RUNS = {  # name: (config, APART)
    "ones 128x256x64/4": ((128, 256, 64, 4, 8, 1, 64), False),
    "pairs share B": ((128, 256, 64, 4, 8, 2, 64), False),
    "pairs share B apart": ((128, 256, 64, 4, 8, 2, 64), True),
    "pairs share A": ((128, 256, 64, 4, 8, 2, 64, True), False),
    "pairs share A apart": ((128, 256, 64, 4, 8, 2, 64, True), True),
}


def main():
    print(torch.cuda.get_device_name(), flush=True)
    for shape in [tuple(int(x) for x in s.split("x")) for s in (sys.argv[1:] or ["4096x4096x4096",
                                                                                  "8192x8192x8192"])]:
        m, n, k = shape
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        c0 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        runs = {"cublas": lambda: torch.matmul(a, b, out=c0)}
        for name, (cfg, apart) in RUNS.items():
            run = bg.checked(f"{shape} {name}", lambda c, cfg=cfg, apart=apart: bg.cluster_run(
                cfg, a, b, c, shape, bg.matmul_hopper_cluster_ws, APART=apart), shape, ref)
            if run is not None:
                runs[name] = run
        bg.time_in_turn(runs, shape)


if __name__ == "__main__":
    main()

"""The skinny GEMM (M=128, N=K=8192, bf16) with an L2 eviction policy on its A and B loads
(tma.async_load's ``eviction_policy``): the warp-specialized 64x128 kernel in co-located pairs,
each policy pair timed in turn with cuBLAS, alone and sustained (perf/README.md, session 17:
at a low clock the kernel is bound by L2, where cuBLAS's reads of A cost a third of ours).

    python perf/probe_evict.py [MxNxK ...]

Each launch is checked against torch first (bench_gemm.checked)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_gemm as bg  # noqa: E402
from gluon_trace.kernels.matmul_hopper_ws import matmul_hopper_ws  # noqa: E402

POLICIES = [("", ""), ("evict_last", ""), ("evict_last", "evict_first"), ("", "evict_first"),
            ("evict_first", "evict_first")]


def main(shapes):
    print(torch.cuda.get_device_name())
    for shape in shapes:
        bg.against_cublas(shape, lambda a, b: {
            f"A {pa or 'none'} / B {pb or 'none'}": (
                lambda c, pa=pa, pb=pb: bg.hopper_run((64, 128, 64, 8, 4, 128, 2), a, b, c, shape, matmul_hopper_ws,
                                                      A_EVICT=pa, B_EVICT=pb))
            for pa, pb in POLICIES})


if __name__ == "__main__":
    main([tuple(int(x) for x in s.split("x")) for s in sys.argv[1:]] or [(128, 8192, 8192)])

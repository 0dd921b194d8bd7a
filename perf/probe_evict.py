"""The skinny GEMM (M=128, N=K=8192, bf16) with an L2 eviction policy on its A and B loads
(tma.async_load's ``eviction_policy``): the warp-specialized 64x128 kernel in co-located pairs,
each policy pair timed in turn with cuBLAS, alone and sustained (perf/README.md, session 17:
at a low clock the kernel is bound by L2, where cuBLAS's reads of A cost a third of ours).

    python perf/probe_evict.py [MxNxK ...]

Each launch is checked against torch first (bench_gemm.checked)."""
import os
import statistics
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
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        runs = {"cublas": lambda: torch.matmul(a, b)}
        for pa, pb in POLICIES:
            label = f"A {pa or 'none'} / B {pb or 'none'}"
            run = bg.checked(label, lambda c, pa=pa, pb=pb: bg.hopper_run((64, 128, 64, 8, 4, 128, 2), a, b, c, (m, n, k),
                                                                         matmul_hopper_ws, A_EVICT=pa, B_EVICT=pb),
                             (m, n, k), ref, report_ok=False)
            if run is not None:
                runs[label] = run
        bg.time_in_turn(runs, (m, n, k))
        sustained = bg.sustained_ratios(runs["cublas"], {x: r for x, r in runs.items() if x != "cublas"})
        print(f"{m}x{n}x{k} sustained ({bg.SUSTAIN_S} s back to back, 2 rounds in turn with cuBLAS), median ratio: "
              + ", ".join(f"{x} {statistics.median(r):.3f}" for x, r in sustained.items()), flush=True)


if __name__ == "__main__":
    main([tuple(int(x) for x in s.split("x")) for s in sys.argv[1:]] or [(128, 8192, 8192)])

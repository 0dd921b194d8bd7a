"""The lowered tensor-core kernels once each, small, for compute-sanitizer:

    for t in memcheck racecheck synccheck; do
        compute-sanitizer --tool $t --error-exitcode 9 python perf/sanitize_kernels.py; done

Each result is checked against torch too, so a run that the sanitizer passes but that
computes garbage still fails (exit code 1)."""
import sys

import torch

from gluon_trace.kernels.matmul_ampere import matmul_ampere


def main() -> int:
    bad = 0
    for (m, n, k), dtype, (bm, bn, bk, stages, warps) in (
            ((256, 256, 256), torch.bfloat16, (128, 128, 32, 3, 8)),
            ((100, 70, 130), torch.float16, (64, 64, 32, 3, 4))):
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        matmul_ampere[(-(-m // bm), -(-n // bn))](a, b, c, m, n, k, k, n, n, BM=bm, BN=bn, BK=bk,
                                                  STAGES=stages, num_warps=warps)
        torch.cuda.synchronize()
        ref = a.float() @ b.float()
        err = ((c - ref).abs().max() / ref.abs().max()).item()
        print(f"matmul_ampere {m}x{n}x{k} {dtype}: rel err {err:.2e}")
        bad += not err < 1e-2
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

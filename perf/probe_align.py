"""Rows that are not whole 128-byte lines: 4000^3 against 4096^3, timed in turn with cuBLAS.

    python perf/probe_align.py [MxNxK ...]     # default 4000x4000x4000 4096x4096x4096

4000^3 has exactly 4096^3's tiles (32 x 16 of 128x256, 3.9 waves on 132 SMs) and 5% less work,
yet cuBLAS and we both take ~18% longer there (perf/README.md, session 14). Its rows are 8000
bytes: every other row of A and B starts 64 bytes into a 128-byte line, so each 128-byte piece a
TMA box reads of such a row spans two lines. This probe asks whether that is the cost:
- the same operands in rows padded to a multiple of 128 bytes (a strided view: the same
  values, lines aligned), for cuBLAS and for ours;
- our cluster kernel with A's and B's tiles in a 64- or 32-byte swizzle instead of 128: TMA
  then reads 64- (32-) byte pieces, which a 64-byte-aligned row never splits across lines.
Each run is checked against torch first; medians of rounds (bench_gemm.time_in_turn)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_gemm as bg  # noqa: E402

CONFIGS = {  # name: (cluster-ws config, swizzle of A and B or None for the default)
    "cluster-ws x1": ((128, 256, 64, 4, 8, 1, 64), None),
    "cluster-ws x1 swizzle 64": ((128, 256, 64, 4, 8, 1, 64), 64),
    "cluster-ws x1 swizzle 32": ((128, 256, 64, 4, 8, 1, 64), 32),
    "cluster-ws x2": ((128, 256, 64, 4, 8, 2, 64), None),
    "cluster-ws x2 swizzle 64": ((128, 256, 64, 4, 8, 2, 64), 64),
}


def padded_rows(x: torch.Tensor) -> torch.Tensor:
    """``x``'s values in a view whose rows start every multiple of 128 bytes."""
    width = -(-x.shape[1] * x.element_size() // 128) * 128 // x.element_size()
    out = torch.empty(x.shape[0], width, device=x.device, dtype=x.dtype)[:, :x.shape[1]]
    out.copy_(x)
    return out


def _checked(label, make, shape, ref, padded):
    """The launch ``make(c)`` after one run into a NaN-poisoned C (in padded rows where asked)
    matched ``ref``; None, reported, where it did not."""
    c = torch.full(shape[:2], float("nan"), device="cuda", dtype=torch.bfloat16)
    c = padded_rows(c) if padded else c
    run = make(c)
    run()
    torch.cuda.synchronize()
    err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
    print(f"{label}: rel err {err:.2e}", flush=True)
    return run if err < 2e-2 else None


def probe(shape):
    m, n, k = shape
    a, b, ref, runs = bg.probe_case(shape)
    operands = {"": (a, b)}
    if (k * 2) % 128 or (n * 2) % 128:
        ap, bp = padded_rows(a), padded_rows(b)
        run = _checked("cublas padded rows", lambda c: lambda: torch.matmul(ap, bp, out=c), shape, ref, True)
        if run is not None:
            runs["cublas padded rows"] = run
        operands[" padded rows"] = (ap, bp)
    for suffix, (x, y) in operands.items():
        for name, (cfg, swizzle) in CONFIGS.items():
            if suffix and swizzle:
                continue
            run = _checked(name + suffix, lambda c: bg.cluster_run(cfg, x, y, c, shape, bg.matmul_hopper_cluster_ws,
                                                                 swizzle=swizzle), shape, ref, bool(suffix))
            if run is not None:
                runs[name + suffix] = run
    bg.time_in_turn(runs, shape, rounds=7, reps=20)


def main():
    for s in sys.argv[1:] or ["4000x4000x4000", "4096x4096x4096"]:
        probe(tuple(int(x) for x in s.split("x")))


if __name__ == "__main__":
    main()

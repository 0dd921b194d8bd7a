"""Where the stream-K GEMM's time goes, beside the kernel it extends (the warp-specialized
cluster kernel with one CTA a cluster), at the shapes whose last wave is partly idle.

    python perf/probe_streamk.py [MxNxK ...]     # default 4096x4096x4096 4000x4000x4000

Timed in turn, medians of rounds (perf/bench_gemm.py's gpu_time), each variant first checked
against torch except the two probes, which compute a wrong C on purpose and are timed only:
  dp-only     the stream-K kernel with its tail removed (only the whole-tile waves run);
  no-fixup    the tail computed and each part stored, but nobody counts or sums.
dp-only against cluster-ws says what the whole waves cost; full stream-K against dp-only, what
the tail costs; no-fixup between them, how much of that is the sum of parts. cluster-ws-1step
is the cluster kernel storing each tile's column blocks all after the next tile's first K step
(SPREAD=False), beside one block a step."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_gemm as bg  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.kernels import matmul_hopper_streamk as sk  # noqa: E402

_schedule, _fix_up = sk._schedule, sk._fix_up
DP_ONLY, NO_FIXUP = 101, 102  # SPLIT values the probes answer to (a distinct trace each)


def _probe_schedule(T, KT, SPLIT):
    SPLIT = getattr(SPLIT, "value", SPLIT)
    if SPLIT == DP_ONLY:
        P = gl.num_programs(0)
        return T - T % P, 0 * T, 0 * T
    return _schedule(T, KT, 4 if SPLIT == NO_FIXUP else SPLIT)


def _probe_fix_up(c_desc, c_bufs, partials, counters, acc, t, u, S, P_sk, KT, off_m, off_n):
    if _probe_fix_up.no_sum:
        offs = sk._tile_offsets(acc.shape[0], acc.shape[1], acc.type.layout)
        gl.store(partials + (gl.program_id(0) * 2 + u) * (acc.shape[0] * acc.shape[1]) + offs, acc)
        return
    _fix_up(c_desc, c_bufs, partials, counters, acc, t, u, S, P_sk, KT, off_m, off_n)


_probe_fix_up.no_sum = False
sk._schedule, sk._fix_up = _probe_schedule, _probe_fix_up


def main():
    shapes = [tuple(int(x) for x in s.split("x")) for s in (sys.argv[1:] or ["4096x4096x4096", "4000x4000x4000"])]
    print(torch.cuda.get_device_name(), flush=True)
    for shape in shapes:
        m, n, k = shape
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        runs = {}
        c0 = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        runs["cublas"] = lambda: torch.matmul(a, b, out=c0)
        for name, make in [(f"cluster-ws{'' if spread else '-1step'}",
                            lambda c, spread=spread: bg.cluster_run((128, 256, 64, 4, 8, 1, 64), a, b, c, shape,
                                                                    bg.matmul_hopper_cluster_ws, SPREAD=spread))
                           for spread in (True, False)] + [
                (f"streamk-s{s}", lambda c, s=s: bg.streamk_run((128, 256, 64, 4, 8, 64, s), a, b, c, shape))
                for s in (1, 2, 4, 8)]:
            run = bg.checked(f"{shape} {name}", make, shape, ref)
            if run is not None:
                runs[name] = run
        for name, split, no_sum in (("dp-only", DP_ONLY, False), ("no-fixup", NO_FIXUP, True)):
            _probe_fix_up.no_sum = no_sum
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            runs[name] = bg.streamk_run((128, 256, 64, 4, 8, 64, split), a, b, c, shape)
            runs[name]()
            torch.cuda.synchronize()
        _probe_fix_up.no_sum = False
        bg.time_in_turn(runs, shape)


if __name__ == "__main__":
    main()

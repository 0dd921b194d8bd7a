"""When each CTA of the skinny GEMM does what: the warp-specialized cluster kernel, in clusters
of one or in pairs sharing A, rebuilt from its own parts (matmul_hopper_cluster: _ring,
produce_tiles, consume_tiles) with clock reads between them, one row of int64 a CTA:

    0 start           globaltimer at the kernel's first instruction
    1 ring ready      after the mbarrier inits and the cluster barrier
    2 consumer start  the consumer partition begins (globaltimer)
    3 consumer end    its last tile stored (consume_tiles returned: the stores waited for)
    4 producer start  the producer warp begins
    5 producer end    its last load issued
    6 joined          after warp_specialize (every partition done)
    7 end             after the final cluster barrier
    8, 9              clock64 at 2 and 3 (the SM's cycles: the consumer's own span, finer)

    python perf/probe_timeline.py [MxNxK]        # default 128x8192x8192

Prints, for clusters of one and for pairs, the median over CTAs of each step from the launch's
first start (microseconds), the spread of the starts, and for pairs how far apart the two CTAs
of a cluster finish. The kernels are checked against torch before they are timed. On the CPU
(``--interpreter``) the same kernels run on the interpreter at a small shape, which checks
them (the readings there are the host's and mean nothing)."""
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.kernels.matmul_hopper_cluster import _ring, consume_tiles, produce_tiles  # noqa: E402
from gluon_trace.language.nvidia.hopper import cluster  # noqa: E402
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

FIELDS = ("start", "ring ready", "consumer start", "consumer end", "producer start", "producer end", "joined",
          "end")
ROW = 10  # int64 a CTA


def _stamp(times, i, value):
    gl.store(times + gl.program_id(0) * ROW + i, value)


def _timed_consumer(a_desc, b_desc, c_desc, a_bufs, b_bufs, c_bufs, full, empty, M, N, K, STAGES, GROUP_M, SHARE_A,
                    times):
    _stamp(times, 2, gl.globaltimer())
    _stamp(times, 8, gl.clock64())
    consume_tiles(a_desc, b_desc, c_desc, a_bufs, b_bufs, c_bufs, full, empty, M, N, K, STAGES, GROUP_M, SHARE_A)
    _stamp(times, 9, gl.clock64())
    _stamp(times, 3, gl.globaltimer())


def _timed_producer(a_desc, b_desc, a_bufs, b_bufs, full, empty, M, N, K, STAGES, GROUP_M, SHARE_A, times):
    _stamp(times, 4, gl.globaltimer())
    produce_tiles(a_desc, b_desc, a_bufs, b_bufs, full, empty, M, N, K, STAGES, GROUP_M, SHARE_A)
    _stamp(times, 5, gl.globaltimer())


@gt.jit
def timed_cluster_ws(a_desc, b_desc, c_desc, times, M, N, K, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                     SHARE_A: gl.constexpr = False):
    """matmul_hopper_cluster_ws with clock reads (the module docstring), into ``times``."""
    start = gl.globaltimer()
    a_bufs, b_bufs, c_bufs, full, empty = _ring(a_desc, b_desc, c_desc, STAGES, SHARE_A)
    _stamp(times, 1, gl.globaltimer())
    _stamp(times, 0, start)
    gl.warp_specialize([
        (_timed_consumer, (a_desc, b_desc, c_desc, a_bufs, b_bufs, c_bufs, full, empty, M, N, K, STAGES, GROUP_M,
                           SHARE_A, times)),
        (_timed_producer, (a_desc, b_desc, a_bufs, b_bufs, full, empty, M, N, K, STAGES, GROUP_M, SHARE_A, times)),
    ], worker_num_warps=[1], worker_num_regs=[40])
    _stamp(times, 6, gl.globaltimer())
    cluster.barrier()
    _stamp(times, 7, gl.globaltimer())


def descriptors(a, b, c, bm, bn, bk, ctas, share_a, dtype):
    lay = gl.NVMMASharedLayout.get_default_for
    ablk, bblk = ([bm // ctas, bk], [bk, bn]) if share_a else ([bm, bk], [bk, bn // ctas])
    return (TensorDescriptor.from_tensor(a, ablk, lay(ablk, dtype)), TensorDescriptor.from_tensor(b, bblk, lay(bblk, dtype)),
            TensorDescriptor.from_tensor(c, [bm, 64], lay([bm, 64], dtype)))


def summary(label, t, ctas):
    """The medians of each step from the launch's first start, in microseconds."""
    t0 = t[:, 0].min()
    us = (t[:, :8] - t0) / 1e3
    steps = ", ".join(f"{f} {statistics.median(us[:, i]):.2f}" for i, f in enumerate(FIELDS))
    print(f"{label}: {steps}")
    print(f"  starts spread {us[:, 0].max():.2f} us; consumer span median {statistics.median(t[:, 9] - t[:, 8]):.0f} "
          f"cycles; last end {us[:, 7].max():.2f} us")
    ends = us[:, 3]
    late = np.argsort(ends)[-4:][::-1]
    print(f"  consumer ends: p10 {np.percentile(ends, 10):.2f}, p50 {np.percentile(ends, 50):.2f}, p90 "
          f"{np.percentile(ends, 90):.2f}, max {ends.max():.2f} us; the latest CTAs {late.tolist()}")
    if ctas > 1:
        gap = np.abs(us[0::2, 3] - us[1::2, 3])
        print(f"  a pair's consumers finish {statistics.median(gap):.2f} us apart (median; max {gap.max():.2f})")


CONFIGS = [  # (label, BM, BN, CTAs a cluster, SHARE_A)
    ("128x64 clusters of one", 128, 64, 1, False),
    ("128x64 pairs sharing A", 128, 64, 2, True),
    ("64x128 clusters of one", 64, 128, 1, False),   # two tiles along M=128, B's tile read by both
    ("64x128 pairs sharing B", 64, 128, 2, False),   # the two multicasting B's tile to each other
]


def on_gpu(shape):
    import torch
    from gluon_trace.nvidia import max_active_clusters
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    print(torch.cuda.get_device_name(), shape)
    for label, bm, bn, ctas, share_a in CONFIGS:
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        d = descriptors(a, b, c, bm, bn, 64, ctas, share_a, gl.bfloat16)
        kw = dict(STAGES=8, GROUP_M=8, SHARE_A=share_a, num_warps=4, num_ctas=ctas)
        ck = timed_cluster_ws.trace(*d, gl.pointer(gl.int64), m, n, k, target="sm_90a", **kw).compile("sm_90a")
        tm, tn = -(-m // bm), -(-n // bn)
        tiles = tm * -(-tn // ctas) if share_a else -(-tm // ctas) * tn
        grid = ctas * min(max_active_clusters(ck, ctas), tiles)
        times = torch.zeros(grid, ROW, device="cuda", dtype=torch.int64)
        for _ in range(5):  # the last launch's readings, warm
            timed_cluster_ws[(grid,)](*d, times, m, n, k, backend="nvidia", **kw)
        torch.cuda.synchronize()
        err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
        assert err < 2e-2, f"wrong result: rel err {err}"
        summary(f"{label} ({grid} CTAs)", times.cpu().numpy(), ctas)


def on_interpreter():
    """The two kernels at 128x256x256 on the interpreter, against numpy."""
    rng = np.random.default_rng()
    m, n, k = 128, 256, 256
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    for ctas in (1, 2):
        c = np.full((m, n), np.nan, np.float16)
        d = descriptors(a, b, c, 128, 64, 64, ctas, ctas > 1, gl.float16)
        grid = 4
        times = np.zeros((grid, ROW), np.int64)
        timed_cluster_ws[(grid,)](*d, times, m, n, k, STAGES=3, GROUP_M=8, SHARE_A=ctas > 1, num_warps=4,
                                  num_ctas=ctas, backend="interpreter", target="sm_90a")
        want = a.astype(np.float32) @ b.astype(np.float32)
        assert np.allclose(c.astype(np.float32), want, rtol=2e-2, atol=2e-2 * np.abs(want).max())
        assert (times[:, :8] > 0).all() and (np.diff(times[:, [0, 1, 6, 7]], axis=1) >= 0).all()
        summary(f"interpreter, {ctas} CTA(s) a cluster", times, ctas)
    return True


if __name__ == "__main__":
    if "--interpreter" in sys.argv:
        on_interpreter()
    else:
        args = [x for x in sys.argv[1:] if not x.startswith("-")]
        on_gpu(tuple(int(x) for x in (args[0] if args else "128x8192x8192").split("x")))

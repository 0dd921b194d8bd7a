"""One launch of a GEMM at 8192^3 bf16 for Nsight Compute, e.g.

    ncu -k regex:'matmul|kernel' --launch-skip 1 --launch-count 1 --section SpeedOfLight \
        --section WarpStateStats --section ComputeWorkloadAnalysis python perf/profile_gemm.py ws

(``python perf/profile_gemm.py KERNEL [SIZE or MxNxK]``; cuBLAS through torch.matmul as ``cublas``.)
The kernel is one of: hopper (TMA + mbarrier ring + wgmma, persistent; the default), ws (the
warp-specialized one), clusterws (the cluster kernel, 4 stages), ws64 (the warp-specialized kernel at 128x64x64, 8 stages, 4
warps; ws64x128 the same at 64x128; NUM_CTAS=2 launches either in co-located clusters of two), pairs / ones (the warp-specialized cluster kernel at that tile, in
pairs sharing A, or clusters of one; pairsB: 64x128 tiles in pairs sharing B, cuBLAS's kernel in our orientation),
cluster (cluster-ws at CFG, e.g. CFG=128,256,64,4,8,2,64: pairs sharing B), swap (matmul_hopper_swap at
CFG, default 128,32,64,3,3: 160x192 tiles),
streamk (128x256x64, SPLIT from the environment, default 4), triton (Triton's tutorial matmul from perf/bench_gemm.py), each at the
configuration perf/bench_gemm.py found fastest (128x256x64, 3 stages, 8 warps). PROMOTION=0/64/128
sets the L2 promotion of ws64's, pairs' and ones' A and B tensor maps (default 256 bytes); A_EVICT /
B_EVICT (evict_first, evict_last, evict_normal) the L2 policy of ws64's and ws64x128's A and B loads."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.kernels.matmul_hopper import matmul_hopper  # noqa: E402
from gluon_trace.kernels.matmul_hopper_ws import matmul_hopper_ws  # noqa: E402
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

which = sys.argv[1] if len(sys.argv) > 1 else "hopper"
size = sys.argv[2] if len(sys.argv) > 2 else "8192"
m, n, k = (int(x) for x in size.split("x")) if "x" in size else (int(size),) * 3
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
if which == "cublas":
    run = lambda: torch.matmul(a, b, out=c)  # noqa: E731
elif which == "triton":
    from bench_gemm import triton_matmul
    tri = triton_matmul()
    run = lambda: tri(a, b, c)  # noqa: E731
elif which in ("ws64", "ws64x128", "streamk"):  # the skinny shape's kernels: perf/bench_gemm.py's configs
    import bench_gemm
    if which == "streamk":
        run = bench_gemm.streamk_run((128, 256, 64, 4, 8, 64, int(os.environ.get("SPLIT", "4"))), a, b, c, (m, n, k))
    else:  # NUM_CTAS=2: launched in clusters of two, co-located (bench_gemm.hopper_run)
        cfg = (128, 64, 64, 8, 4) if which == "ws64" else (64, 128, 64, 8, 4)
        evict = dict(A_EVICT=os.environ.get("A_EVICT", ""), B_EVICT=os.environ.get("B_EVICT", ""))
        run = bench_gemm.hopper_run(cfg, a, b, c, (m, n, k), matmul_hopper_ws,
                                    promotion=int(os.environ.get("PROMOTION", "256")),
                                    num_ctas=int(os.environ.get("NUM_CTAS", "1")), **evict)
elif which == "cluster":  # a warp-specialized cluster config: CFG="BM,BN,BK,STAGES,warps,num_ctas,EPI_N[,share A 0/1[,GROUP_M]]"
    import bench_gemm
    cfg = tuple(int(x) for x in os.environ.get("CFG", "128,256,64,4,8,1,64").split(","))
    cfg = cfg[:7] + tuple(x if x > 1 else bool(x) for x in cfg[7:8]) + cfg[8:9]   # share A: 0, 1 or a grid's k
    run = bench_gemm.cluster_run(cfg, a, b, c, (m, n, k), bench_gemm.matmul_hopper_cluster_ws,
                                 int(os.environ.get("PROMOTION", "256")))
elif which == "swap":  # matmul_hopper_swap at CFG="PIECE_ROWS,PIECES,BK,STAGES,CONSUMERS[,GROUP_M]"
    import bench_gemm
    cfg = tuple(int(x) for x in os.environ.get("CFG", "32,5,64,3,3").split(","))
    run = bench_gemm.swap_run(cfg, a, b, c, (m, n, k))
elif which in ("pairs", "ones", "pairsB"):  # the cluster kernel at the skinny shape's tile: pairs sharing A, or one a cluster
    import bench_gemm
    cfg = {"pairs": (128, 64, 64, 8, 4, 2, 64, True), "ones": (128, 64, 64, 8, 4, 1, 64),
           "pairsB": (64, 128, 64, 8, 4, 2, 64)}[which]
    run = bench_gemm.cluster_run(cfg, a, b, c, (m, n, k), bench_gemm.matmul_hopper_cluster_ws,
                                 int(os.environ.get("PROMOTION", "256")))
elif which == "clusterws":  # the 4-stage cluster kernel, its epilogue in 64-column blocks
    from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster_ws
    from gluon_trace.nvidia import max_active_clusters
    lay = gl.NVMMASharedLayout.get_default_for
    da = TensorDescriptor.from_tensor(a, [128, 64], lay([128, 64], gl.bfloat16))
    db = TensorDescriptor.from_tensor(b, [64, 128], lay([64, 128], gl.bfloat16))
    dc = TensorDescriptor.from_tensor(c, [128, 64], lay([128, 64], gl.bfloat16))
    kw = dict(STAGES=4, GROUP_M=int(os.environ.get("GROUP_M", "8")), num_warps=8, num_ctas=2)
    ck = matmul_hopper_cluster_ws.trace(da, db, dc, m, n, k, target="sm_90a", **kw).compile("sm_90a")
    grid = 2 * max_active_clusters(ck, 2)
    run = lambda: matmul_hopper_cluster_ws[(grid,)](da, db, dc, m, n, k, backend="nvidia", **kw)  # noqa: E731
else:
    lay = gl.NVMMASharedLayout.get_default_for
    da = TensorDescriptor.from_tensor(a, [128, 64], lay([128, 64], gl.bfloat16))
    db = TensorDescriptor.from_tensor(b, [64, 256], lay([64, 256], gl.bfloat16))
    dc = TensorDescriptor.from_tensor(c, [128, 256], lay([128, 256], gl.bfloat16))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kern = matmul_hopper_ws if which == "ws" else matmul_hopper
    run = lambda: kern[(sms,)](da, db, dc, m, n, k, STAGES=3, GROUP_M=8, num_warps=8, backend="nvidia")  # noqa: E731
for _ in range(2):
    run()
torch.cuda.synchronize()
print("ok", which, (c.float()[:64, :64] - (a.float()[:64] @ b.float()[:, :64])).abs().max().item())

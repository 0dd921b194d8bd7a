"""The lowered tensor-core kernels once each, small, for compute-sanitizer:

    for t in memcheck racecheck synccheck; do
        compute-sanitizer --tool $t --error-exitcode 9 python perf/sanitize_kernels.py; done

Each result is checked against torch too, so a run that the sanitizer passes but that
computes garbage still fails (exit code 1). ``python perf/sanitize_kernels.py NAME ...`` runs
only the kernels named (ampere, hopper, ws, pingpong, fp8, cluster, cluster_ws, cluster_ws_blocks,
cluster_ws_apart, streamk, swap,
attention, attention_pipelined, attention_ws)."""
import sys

import torch

from gluon_trace import language as gl
from gluon_trace.kernels import attention_hopper
from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws
from gluon_trace.kernels.matmul_ampere import matmul_ampere
from gluon_trace.kernels.matmul_hopper import matmul_hopper
from gluon_trace.kernels.matmul_hopper_ws import matmul_hopper_pingpong, matmul_hopper_ws
from gluon_trace.nvidia.hopper import TensorDescriptor

NV = gl.NVMMASharedLayout.get_default_for


def _report(name, got, ref, tol=1e-2) -> int:
    err = ((got.double() - ref).abs().max() / ref.abs().max()).item()
    print(f"{name}: rel err {err:.2e}")
    return int(not err < tol)


def ampere() -> int:
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
        bad += _report(f"matmul_ampere {m}x{n}x{k} {dtype}", c, a.double() @ b.double())
    return bad


def _tma_gemm(name, kernel, m, n, k, bm, bn, bk, stages, warps, fp8=False):
    if fp8:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)      # [N, K]: K-major
        t, bb, extra = gl.float8e4nv, [bn, bk], {"B_KMAJOR": True}
    else:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        t, bb, extra = gl.bfloat16, [bk, bn], {}
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    da = TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], t))
    db = TensorDescriptor.from_tensor(b, bb, NV(bb, t))
    dc = TensorDescriptor.from_tensor(c, [bm, bn], NV([bm, bn], gl.bfloat16))
    kernel[(4,)](da, db, dc, m, n, k, STAGES=stages, GROUP_M=2, num_warps=warps, **extra)
    torch.cuda.synchronize()
    ref = a.double() @ (b.double().T if fp8 else b.double())
    return _report(f"{name} {m}x{n}x{k}", c, ref)


def hopper() -> int:
    return _tma_gemm("matmul_hopper", matmul_hopper, 512, 768, 320, 128, 128, 64, 3, 4)


def ws() -> int:
    return _tma_gemm("matmul_hopper_ws", matmul_hopper_ws, 512, 768, 320, 128, 256, 64, 3, 8)


def pingpong() -> int:
    return _tma_gemm("matmul_hopper_pingpong", matmul_hopper_pingpong, 640, 512, 320, 128, 128, 64, 4, 4)


def fp8() -> int:
    return _tma_gemm("matmul_hopper fp8", matmul_hopper, 512, 512, 384, 128, 128, 128, 3, 4, fp8=True)


def cluster(ws=False, epi_n=None, stages=6, bk=32, **extra) -> int:
    """Pairs of CTAs multicasting B (num_ctas=2): two clusters over 3 x 3 tiles of 128 x 256
    (the epilogue whole, or in [128, epi_n] column blocks through two buffers)."""
    from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster, matmul_hopper_cluster_ws
    m, n, k, bm, bn = 330, 700, 320, 128, 256
    epi_n = epi_n or bn
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n + 12, device="cuda", dtype=torch.bfloat16)[:, :n]  # rows of 16-byte multiples
    c = torch.full((m, n + 12), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
    da = TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], gl.bfloat16))
    db = TensorDescriptor.from_tensor(b, [bk, bn // 2], NV([bk, bn // 2], gl.bfloat16))
    dc = TensorDescriptor.from_tensor(c, [bm, epi_n], NV([bm, epi_n], gl.bfloat16))
    kern = matmul_hopper_cluster_ws if ws else matmul_hopper_cluster
    kern[(4,)](da, db, dc, m, n, k, STAGES=stages, GROUP_M=2, num_warps=8, num_ctas=2, **extra)
    torch.cuda.synchronize()
    return _report(f"{kern.__name__} (2 CTAs a cluster, epilogue in {bn // epi_n} blocks{', APART' * bool(extra)})", c,
                   a.double() @ b.double())


def cluster_ws() -> int:
    return cluster(ws=True)


def cluster_ws_blocks() -> int:
    """The 4-stage shape: the epilogue in 64-column blocks, overlapping the next tile's wgmma."""
    return cluster(ws=True, epi_n=64, stages=4, bk=64)


def cluster_ws_fp8() -> int:
    """fp8 e4m3 with B given K-major ([N, K], B_KMAJOR): pairs of CTAs, each loading half of B's
    rows for both, 4 stages of BK 128, bf16 out in 64-column blocks."""
    from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster_ws
    m, n, k, bm, bn, bk = 330, 700, 384, 128, 256, 128
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    bt = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    c = torch.full((m, n + 12), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
    da = TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], gl.float8e4nv))
    db = TensorDescriptor.from_tensor(bt, [bn // 2, bk], NV([bn // 2, bk], gl.float8e4nv))
    dc = TensorDescriptor.from_tensor(c, [bm, 64], NV([bm, 64], gl.bfloat16))
    matmul_hopper_cluster_ws[(4,)](da, db, dc, m, n, k, STAGES=4, GROUP_M=2, num_warps=8, num_ctas=2, B_KMAJOR=True)
    torch.cuda.synchronize()
    return _report("matmul_hopper_cluster_ws fp8, B K-major (2 CTAs a cluster)", c, a.double() @ bt.double().T)


def cluster_ws_apart() -> int:
    """Two producer warps sharing a warpgroup (APART): each CTA's own A block loaded on its own
    release, its part of B (multicast) once both CTAs released the stage."""
    return cluster(ws=True, epi_n=64, stages=4, bk=64, APART=True)


def streamk() -> int:
    """The stream-K GEMM on 5 CTAs over 3 x 3 tiles of 128 x 256: 5 whole, 4 cut in parts
    along K (fp32 parts through the workspace, counters back at zero), launched twice."""
    from gluon_trace.kernels.matmul_hopper_streamk import matmul_hopper_streamk, streamk_workspace
    m, n, k, bm, bn, bk, programs = 330, 700, 640, 128, 256, 64, 5
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n + 12, device="cuda", dtype=torch.bfloat16)[:, :n]
    c = torch.full((m, n + 12), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
    da = TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], gl.bfloat16))
    db = TensorDescriptor.from_tensor(b, [bk, bn], NV([bk, bn], gl.bfloat16))
    dc = TensorDescriptor.from_tensor(c, [bm, 64], NV([bm, 64], gl.bfloat16))
    size, count = streamk_workspace(programs, bm, bn)
    partials = torch.full((size,), float("nan"), device="cuda")
    counters = torch.zeros(count, device="cuda", dtype=torch.int32)
    bad = 0
    for _ in range(2):
        matmul_hopper_streamk[(programs,)](da, db, dc, partials, counters, m, n, k, STAGES=4, GROUP_M=2,
                                           num_warps=8)
        torch.cuda.synchronize()
        bad += _report("matmul_hopper_streamk (5 CTAs, 9 tiles)", c, a.double() @ b.double())
        bad += int(bool(counters.any()))
    return bad


def swap(overlap=False) -> int:
    """matmul_hopper_swap's 160x192 tiles (three consumer partitions, transposed stores) on 2 CTAs
    over 3 x 2 tiles, ragged in M, N and K; with ``overlap`` in 4 stages, each tile's epilogue
    during the next tile's first K steps through two output buffers a consumer."""
    from gluon_trace.kernels.matmul_hopper_swap import matmul_hopper_swap, swap_descriptors
    m, n, k = 330, 370, 200
    a = torch.randn(m, k + 8, device="cuda", dtype=torch.bfloat16)[:, :k]
    b = torch.randn(k, n + 14, device="cuda", dtype=torch.bfloat16)[:, :n]
    c = torch.full((m, n + 14), float("nan"), device="cuda", dtype=torch.bfloat16)[:, :n]
    extra = dict(STAGES=4, EPI_BUFS=2, OVERLAP=True) if overlap else dict(STAGES=3)
    matmul_hopper_swap[(2,)](*swap_descriptors(a, b, c, 32, 64, gl.bfloat16), m, n, k, GROUP_M=2,
                             CONSUMERS=3, PIECES=5, num_warps=4, **extra)
    torch.cuda.synchronize()
    what = "4 stages, epilogue overlapped" if overlap else "3 stages"
    return _report(f"matmul_hopper_swap (160x192 tiles, {what}, 2 CTAs, 6 tiles)", c, a.double() @ b.double())


def _attention(kernel_name, stages, bn=64, ctas=None, d=128, consumers=2):
    bh, seq, bm = 4, 300, 64
    q, k, v = (torch.randn(bh, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    lm, ln = NV([bm, d], gl.bfloat16), NV([bn, d], gl.bfloat16)
    qd, od = (TensorDescriptor.from_tensor(x, [1, bm, d], lm) for x in (q, o))
    kd, vd = (TensorDescriptor.from_tensor(x, [1, bn, d], ln) for x in (k, v))
    if kernel_name == "attention_fwd_ws":  # 64-row consumers per CTA; ctas: persistent 1-D grid
        grid = (-(-seq // (consumers * bm)), bh) if ctas is None else (ctas,)
        extra = dict(CONSUMERS=3, CONSUMER_REGS=160) if consumers == 3 else {}
        attention_fwd_ws[grid](qd, kd, vd, od, seq, d ** -0.5, CAUSAL=True, STAGES=stages, num_warps=4, **extra)
    else:
        getattr(attention_hopper, kernel_name)[(-(-seq // bm), bh)](qd, kd, vd, od, seq, d ** -0.5, CAUSAL=True,
                                                                     STAGES=stages, num_warps=4)
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    return _report(f"{kernel_name} causal D{d}", o, ref, tol=3e-2)


def attention() -> int:
    return _attention("attention_fwd", 2)


def attention_pipelined() -> int:
    return _attention("attention_fwd_pipelined", 3)


def attention_ws() -> int:
    return (_attention("attention_fwd_ws", 2, bn=128) + _attention("attention_fwd_ws", 2, bn=128, ctas=3)
            + _attention("attention_fwd_ws", 3, bn=128, ctas=2, d=64, consumers=3))


def attention_split() -> int:
    """attention_fwd_ws_split on 5 CTAs over 6 tiles (3 heads of 256 rows, D128): 5 whole, the
    last one's KV range cut in parts published through the workspace, launched twice."""
    from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws_split, attention_split_workspace
    bh, seq, d, bm, bn, programs = 3, 256, 128, 64, 64, 5
    q, k, v = (torch.randn(bh, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    lm, ln = NV([bm, d], gl.bfloat16), NV([bn, d], gl.bfloat16)
    qd, od = (TensorDescriptor.from_tensor(x, [1, bm, d], lm) for x in (q, o))
    kd, vd = (TensorDescriptor.from_tensor(x, [1, bn, d], ln) for x in (k, v))
    size, count = attention_split_workspace(programs, bm, d)
    parts = torch.full((size,), float("nan"), device="cuda")
    counters = torch.zeros(count, device="cuda", dtype=torch.int32)
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
    bad = 0
    for _ in range(2):
        attention_fwd_ws_split[(programs,)](qd, kd, vd, od, parts, counters, seq, d ** -0.5, CAUSAL=False,
                                            STAGES=2, num_warps=4)
        torch.cuda.synchronize()
        bad += _report("attention_fwd_ws_split D128 (5 CTAs, 6 tiles, the last cut in parts)", o, ref, tol=3e-2)
        bad += int(bool(counters.any()))
    return bad


def attention_pieces() -> int:
    """attention_fwd_ws with KV tiles of 10 pieces (160 rows), causal, a 330-row sequence (the
    last tile ends inside a piece), D128; then the split tail over pieces on 5 CTAs, non-causal."""
    from gluon_trace.kernels.attention_hopper_ws import (attention_fwd_ws, attention_fwd_ws_split,
                                                         attention_split_workspace, piece_descriptors)
    bad = 0
    for causal, bh, seq, programs in ((True, 2, 330, None), (False, 3, 512, 5)):
        d, bm = 128, 64
        q, k, v = (torch.randn(bh, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o = torch.full_like(q, float("nan"))
        qd, od = (TensorDescriptor.from_tensor(x, [1, bm, d], NV([bm, d], gl.bfloat16)) for x in (q, o))
        kd, vd = piece_descriptors(k, v, 10)
        ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
        if programs is None:
            attention_fwd_ws[(-(-seq // (2 * bm)), bh)](qd, kd, vd, od, seq, d ** -0.5, CAUSAL=causal, KV_PIECES=10,
                                                        num_warps=4)
        else:
            size, count = attention_split_workspace(programs, bm, d)
            parts = torch.full((size,), float("nan"), device="cuda")
            counters = torch.zeros(count, device="cuda", dtype=torch.int32)
            attention_fwd_ws_split[(programs,)](qd, kd, vd, od, parts, counters, seq, d ** -0.5, CAUSAL=False,
                                                KV_PIECES=10, num_warps=4)
        torch.cuda.synchronize()
        bad += _report(f"attention_fwd_ws KV_PIECES=10 D128 causal={causal} seq {seq}", o, ref, tol=3e-2)
    return bad


KERNELS = {"ampere": ampere, "hopper": hopper, "ws": ws, "pingpong": pingpong, "fp8": fp8, "cluster": cluster, "cluster_ws": cluster_ws,
           "cluster_ws_blocks": cluster_ws_blocks, "cluster_ws_fp8": cluster_ws_fp8, "cluster_ws_apart": cluster_ws_apart, "streamk": streamk,
           "swap": swap, "swap_overlap": lambda: swap(overlap=True), "attention": attention, "attention_pipelined": attention_pipelined, "attention_ws": attention_ws,
           "attention_split": attention_split, "attention_pieces": attention_pieces}


def main() -> int:
    names = sys.argv[1:] or list(KERNELS)
    return 1 if sum(KERNELS[n]() for n in names) else 0


if __name__ == "__main__":
    sys.exit(main())

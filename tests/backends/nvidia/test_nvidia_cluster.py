"""Clusters on NVIDIA (rules_hopper.py): ``.reqnctapercluster``, TMA multicast, ``mapa`` and
remote ``mbarrier.arrive``, ``barrier.cluster``, ptxas assembling the cluster GEMM; on the GPU
(``pytest -m gpu``) the cluster GEMM against torch and the multicast ring kernel."""
import re

import numpy as np
import pytest

from gluon_trace import language as gl
from gluon_trace.errors import ArgumentValueError
from gluon_trace.kernels.matmul_hopper_cluster import matmul_hopper_cluster, matmul_hopper_cluster_ws
from gluon_trace.nvidia.hopper import TensorDescriptor

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.compiler import build  # noqa: E402

from test_cluster import ring_kernel  # noqa: E402

NV = gl.NVMMASharedLayout.get_default_for


def _descs(m, n, k, bm, bn, bk, ctas, dtype=np.float16, epi_n=None):
    a, b, c = np.zeros((m, k), dtype), np.zeros((k, n), dtype), np.zeros((m, n), dtype)
    g = gl.float16
    epi_n = epi_n or bn
    return (TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], g)),
            TensorDescriptor.from_tensor(b, [bk, bn // ctas], NV([bk, bn // ctas], g)),
            TensorDescriptor.from_tensor(c, [bm, epi_n], NV([bm, epi_n], g)))


@pytest.mark.parametrize("bm, bn, bk, stages, warps", [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8),
                                                       (128, 128, 64, 4, 4)])
def test_cluster_gemm_assembles(bm, bn, bk, stages, warps):
    tr = matmul_hopper_cluster.trace(*_descs(4096, 4096, 4096, bm, bn, bk, 2), 4096, 4096, 4096, STAGES=stages,
                                     GROUP_M=8, num_warps=warps, num_ctas=2, target="sm_90a")
    ck = build(tr.graph, "sm_90a")
    asm = ck.asm
    assert ".reqnctapercluster 2, 1, 1" in asm
    assert ck.spill_bytes == 0 and not ck.extra["stack_bytes"]
    mc = [l for l in asm.splitlines() if "multicast::cluster" in l]
    # B's part: one TMA per 64-column block of the swizzle, in the prologue and the K loop
    assert mc and all(l.rstrip().endswith(", %h" + l.rsplit("%h", 1)[1].rstrip(";").strip() + ";") for l in mc)
    arrives = [i for i, l in enumerate(asm.splitlines()) if "mbarrier.arrive.shared::cluster.b64" in l]
    assert len(arrives) == 4  # two releases (in the loop, after it), each to both CTAs
    lines = asm.splitlines()
    # no partition barrier before a release: each warp arrives after its own wgmma wait
    assert not any(l.strip() == "bar.sync 0;" for l in lines[arrives[0] - 12:arrives[1]])
    assert any(re.match(r"\s*mapa\.shared::cluster\.u32", l) for l in lines)
    assert sum("barrier.cluster.arrive.aligned" in l for l in lines) == 2


def test_a_barrier_peers_arrive_on_counts_warps():
    """Arrivals from a cluster's CTAs come from lane 0 of each warp after its own work (no
    partition barrier), so the init count is the user's times the warps -- not times the
    threads, as for local per-thread releases: that left the GPU waiting forever."""
    src = np.zeros((16, 32), np.float32)
    d = TensorDescriptor.from_tensor(src, [16, 32], NV([16, 32], gl.float32))
    tr = ring_kernel.trace(d, gl.pointer(gl.float32), SYNC_AFTER_INIT=True, SYNC_AT_END=True, num_ctas=2,
                           num_warps=4, target="sm_90a")
    inits = re.findall(r"mbarrier\.init\.shared::cta\.b64 \[[^\]]+\], (\d+);", build(tr.graph, "sm_90a").asm)
    assert inits == ["1", "4"]
    tr = matmul_hopper_cluster.trace(*_descs(512, 512, 512, 128, 256, 64, 2), 512, 512, 512, STAGES=3, GROUP_M=8,
                                     num_warps=8, num_ctas=2, target="sm_90a")
    asm = build(tr.graph, "sm_90a").asm
    inits = re.findall(r"mbarrier\.init\.shared::cta\.b64 \[[^\]]+\], (\d+);", asm)
    assert sorted(inits, key=int) == ["1"] * 3 + ["16"] * 3
    lane = re.search(r"and\.b32 (%r\d+), %r\d+, 31;", asm).group(1)
    lane0 = re.search(r"setp\.eq\.u32 (%p\d+), " + lane + r", 0;", asm).group(1)
    arrives = re.findall(r"@(%p\d+) mbarrier\.arrive\.shared::cluster\.b64", asm)
    assert len(arrives) == 4 and set(arrives) == {lane0}


def test_wgmma_descriptors_take_the_cta_offset_bits_only():
    """A CTA past the first of a cluster sees its shared memory above 2**24 (the cluster
    window): the descriptor's 14-bit start field takes address bits 4-17, never a shift that
    would carry the high bits into LBO (on the H100 that CTA's tiles read every column block
    but the first from the wrong place)."""
    tr = matmul_hopper_cluster.trace(*_descs(512, 512, 512, 128, 256, 64, 2), 512, 512, 512, STAGES=3, GROUP_M=8,
                                     num_warps=8, num_ctas=2, target="sm_90a")
    asm = build(tr.graph, "sm_90a").asm
    assert re.search(r"bfe\.u32 %r\d+, %r\d+, 4, 14;", asm)
    assert not re.search(r"shr\.u32 %r\d+, %r\d+, 4;", asm)


@pytest.mark.parametrize("bm, bn, bk, stages, warps", [(128, 256, 64, 3, 8), (128, 128, 64, 5, 4)])
def test_warp_specialized_cluster_gemm_assembles(bm, bn, bk, stages, warps):
    """A producer warp and consumer warpgroups in a cluster kernel: no spills; the consumers'
    releases to both CTAs counted in consumer warps (2 CTAs x warps)."""
    tr = matmul_hopper_cluster_ws.trace(*_descs(4096, 4096, 4096, bm, bn, bk, 2), 4096, 4096, 4096,
                                        STAGES=stages, GROUP_M=8, num_warps=warps, num_ctas=2, target="sm_90a")
    ck = build(tr.graph, "sm_90a")
    assert ".reqnctapercluster 2, 1, 1" in ck.asm and ck.spill_bytes == 0 and not ck.extra["stack_bytes"]
    inits = re.findall(r"mbarrier\.init\.shared::cta\.b64 \[[^\]]+\], (\d+);", ck.asm)
    assert sorted(inits, key=int) == ["1"] * stages + [str(2 * warps)] * stages
    # the worker warps, parked at the start and gone at the join, meet both cluster barriers too
    # (without that the GPU waited forever at the first one)
    assert ck.asm.count("barrier.cluster.arrive.aligned;") == 4


@pytest.mark.parametrize("bm, bn, epi_n", [(128, 256, 64), (256, 128, 32)])
def test_column_block_epilogue_frees_a_fourth_stage(bm, bn, epi_n):
    """cuBLAS's 4 stages of 48 KB beside an epilogue through two [BM, EPI_N] buffers fit the
    H100's 227 KB (a whole 64 KB output tile left room for 3); the accumulator's column blocks
    are register renamings stored by stmatrix, each buffer's reuse waiting for one TMA store."""
    tr = matmul_hopper_cluster_ws.trace(*_descs(4096, 4096, 4096, bm, bn, 64, 2, epi_n=epi_n), 4096, 4096, 4096,
                                        STAGES=4, GROUP_M=8, num_warps=8, num_ctas=2, target="sm_90a")
    ck = build(tr.graph, "sm_90a")
    assert ck.spill_bytes == 0 and not ck.extra["stack_bytes"]
    assert 4 * 48 * 1024 + 2 * bm * epi_n * 2 <= ck.shared_bytes <= 227 * 1024
    chunks = bn // epi_n
    # the epilogue is written four times: in the next tile's K loop (block j after step j's
    # wgmma), after that loop (a K of fewer steps than blocks), after the last tile, and for
    # K = 0 (no wgmma to overlap with)
    assert ck.asm.count("cp.async.bulk.tensor.2d.global.shared::cta") == 4 * chunks
    assert ck.asm.count("cp.async.bulk.wait_group.read 1;") == 4 * chunks
    assert "stmatrix" in ck.asm and "st.shared.b16" not in ck.asm and "st.shared.v" not in ck.asm
    # a tile's stores sit in the K loop between a wgmma's issue and its wait: they overlap
    lines = ck.asm.splitlines()
    issue = next(i for i, l in enumerate(lines) if "wgmma.mma_async" in l)
    wait = next(i for i in range(issue, len(lines)) if "wgmma.wait_group" in lines[i])
    assert 4 * sum("stmatrix" in l for l in lines[issue:wait]) == ck.asm.count("stmatrix") > 0
    assert sum("cp.async.bulk.tensor.2d.global" in l for l in lines[issue:wait]) == chunks
    # a store wait's barrier is not followed by a second one before the next write into its buffer
    code = [l.strip() for l in lines if l.strip() and not l.strip().startswith(".loc")]
    assert not any(x == y and x.startswith("bar.sync") for x, y in zip(code, code[1:]))


@pytest.mark.parametrize("ctas", [2, 4])
def test_cluster_gemm_sharing_a_assembles(ctas):
    """A's rows multicast: each CTA loads 1/ctas of A's block for all and B's block alone."""
    a, b, c = np.zeros((128, 8192), np.float16), np.zeros((8192, 8192), np.float16), np.zeros((128, 8192), np.float16)
    g = gl.float16
    descs = (TensorDescriptor.from_tensor(a, [128 // ctas, 128], NV([128 // ctas, 128], g)),
             TensorDescriptor.from_tensor(b, [128, 64], NV([128, 64], g)),
             TensorDescriptor.from_tensor(c, [128, 64], NV([128, 64], g)))
    tr = matmul_hopper_cluster_ws.trace(*descs, 128, 8192, 8192, STAGES=4, GROUP_M=8, num_warps=4, num_ctas=ctas,
                                        SHARE_A=True, target="sm_90a")
    ck = build(tr.graph, "sm_90a")
    assert f".reqnctapercluster {ctas}, 1, 1" in ck.asm and ck.spill_bytes == 0
    mc = [l for l in ck.asm.splitlines() if "multicast::cluster" in l]
    plain = [l for l in ck.asm.splitlines() if "cp.async.bulk.tensor.2d.shared::cluster.global" in l
             and "multicast" not in l]
    assert mc and plain  # A's part multicast, B's block loaded alone


def test_a_cluster_barrier_the_parked_workers_cannot_follow_is_refused_at_its_line():
    import gluon_trace as gt
    from gluon_trace.errors import CompileError
    from gluon_trace.language.nvidia.hopper import cluster

    @gt.jit
    def k(out):
        for i in gl.range(0, 2):
            cluster.barrier()
        gl.warp_specialize([(lambda: None, ()), (lambda: None, ())], [1], [24])

    with pytest.raises(CompileError) as e:
        build(k.trace(gl.pointer(gl.int32), num_ctas=2, target="sm_90a").graph, "sm_90a")
    assert "top level" in str(e.value) and "test_nvidia_cluster.py" in str(e.value)


def test_ring_kernel_assembles():
    src = np.zeros((16, 32), np.float32)
    d = TensorDescriptor.from_tensor(src, [16, 32], NV([16, 32], gl.float32))
    tr = ring_kernel.trace(d, gl.pointer(gl.float32), SYNC_AFTER_INIT=True, SYNC_AT_END=True, num_ctas=2,
                           num_warps=1, target="sm_90a")
    asm = build(tr.graph, "sm_90a").asm
    assert "%cluster_ctarank" in asm and ".multicast::cluster" in asm


NVIDIA = "nvidia"


def _gpu():
    try:
        import torch
        if torch.cuda.is_available():
            return torch
    except ImportError:
        pass
    pytest.skip("no CUDA GPU (torch.cuda)")


def _padded(torch, rows, cols, dtype, fill=None):
    item = torch.tensor([], dtype=dtype).element_size()
    wide = -(-cols * item // 16) * 16 // item + 16 // item
    if fill is None:
        return torch.randn(rows, wide, device="cuda").to(dtype)[:, :cols]
    return torch.full((rows, wide), fill, device="cuda", dtype=dtype)[:, :cols]


_APART = {"plain": {}, "ws": {}, "ws-apart": {"APART": True}}


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(1024, 1024, 1024), (1000, 1000, 1000), (128, 2048, 512), (4096, 512, 256)])
@pytest.mark.parametrize("bm, bn, warps, full_grid, stages, epi_n", [(128, 256, 8, True, 3, 256),
                                                                     (128, 128, 4, False, 3, 128),
                                                                     (128, 256, 8, True, 4, 64),
                                                                     (256, 128, 8, False, 4, 32)])
@pytest.mark.parametrize("ws", ["plain", "ws", "ws-apart"])
def test_gpu_cluster_gemm_matches_torch(m, n, k, bm, bn, warps, full_grid, stages, epi_n, ws):
    """Pairs of CTAs sharing B's tile by multicast; the grid as many clusters as the GPU runs at
    once, or two clusters walking many tiles (phases across tiles); the epilogue whole or in
    column blocks through two buffers (with 4 stages); warp-specialized with one producer, or
    two (APART: the own block on this CTA's release, the shared part on both)."""
    torch = _gpu()
    from gluon_trace.nvidia import max_active_clusters
    bk = 64
    a = _padded(torch, m, k, torch.bfloat16)
    b = _padded(torch, k, n, torch.bfloat16)
    c = _padded(torch, m, n, torch.bfloat16, fill=float("nan"))
    da = TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], gl.bfloat16))
    db = TensorDescriptor.from_tensor(b, [bk, bn // 2], NV([bk, bn // 2], gl.bfloat16))
    dc = TensorDescriptor.from_tensor(c, [bm, epi_n], NV([bm, epi_n], gl.bfloat16))
    kw = dict(STAGES=stages, GROUP_M=8, num_warps=warps, num_ctas=2, **_APART[ws])
    kern = matmul_hopper_cluster if ws == "plain" else matmul_hopper_cluster_ws
    ck = kern.trace(da, db, dc, m, n, k, target="sm_90a", **kw).compile("sm_90a")
    clusters = max_active_clusters(ck, 2) if full_grid else 2
    assert clusters >= 2
    kern[(2 * clusters,)](da, db, dc, m, n, k, backend=NVIDIA, **kw)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(128, 2048, 1024), (200, 1000, 300), (64, 4096, 256)])
@pytest.mark.parametrize("bm, bn, bk, ctas, stages", [(128, 64, 128, 2, 4), (128, 64, 128, 4, 4), (64, 128, 64, 2, 5)])
@pytest.mark.parametrize("ws", ["plain", "ws", "ws-apart"])
def test_gpu_cluster_gemm_sharing_a_matches_torch(m, n, k, bm, bn, bk, ctas, stages, ws):
    """SHARE_A (skinny M): CTAs side by side along N multicast A's rows to each other; as
    many clusters as the GPU runs at once."""
    torch = _gpu()
    from gluon_trace.nvidia import max_active_clusters
    a = _padded(torch, m, k, torch.bfloat16)
    b = _padded(torch, k, n, torch.bfloat16)
    c = _padded(torch, m, n, torch.bfloat16, fill=float("nan"))
    da = TensorDescriptor.from_tensor(a, [bm // ctas, bk], NV([bm // ctas, bk], gl.bfloat16))
    db = TensorDescriptor.from_tensor(b, [bk, bn], NV([bk, bn], gl.bfloat16))
    dc = TensorDescriptor.from_tensor(c, [bm, bn], NV([bm, bn], gl.bfloat16))
    kw = dict(STAGES=stages, GROUP_M=8, num_warps=4, num_ctas=ctas, SHARE_A=True, **_APART[ws])
    kern = matmul_hopper_cluster if ws == "plain" else matmul_hopper_cluster_ws
    ck = kern.trace(da, db, dc, m, n, k, target="sm_90a", **kw).compile("sm_90a")
    clusters = max_active_clusters(ck, ctas)
    assert clusters >= 2
    kern[(ctas * clusters,)](da, db, dc, m, n, k, backend=NVIDIA, **kw)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(1024, 1024, 1024), (1000, 1000, 1000), (4096, 512, 384)])
@pytest.mark.parametrize("bm, bn, bk, stages, ctas", [(128, 256, 128, 4, 1), (128, 256, 128, 4, 2), (128, 256, 64, 8, 1)])
def test_gpu_cluster_ws_fp8_with_k_major_b_matches_torch(m, n, k, bm, bn, bk, stages, ctas):
    """B_KMAJOR: e4m3 A [M, K] and B given as [N, K] (fp8 wgmma reads both K-major), B's block
    split along N among a pair's CTAs; bf16 out in 64-column blocks; the benchmark's fp8 configs."""
    torch = _gpu()
    from gluon_trace.nvidia import max_active_clusters
    a = _padded(torch, m, k, torch.float8_e4m3fn)
    bt = _padded(torch, n, k, torch.float8_e4m3fn)
    c = _padded(torch, m, n, torch.bfloat16, fill=float("nan"))
    da = TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], gl.float8e4nv))
    db = TensorDescriptor.from_tensor(bt, [bn // ctas, bk], NV([bn // ctas, bk], gl.float8e4nv))
    dc = TensorDescriptor.from_tensor(c, [bm, 64], NV([bm, 64], gl.bfloat16))
    kw = dict(STAGES=stages, GROUP_M=8, num_warps=8, num_ctas=ctas, B_KMAJOR=True)
    ck = matmul_hopper_cluster_ws.trace(da, db, dc, m, n, k, target="sm_90a", **kw).compile("sm_90a")
    clusters = max_active_clusters(ck, ctas)
    matmul_hopper_cluster_ws[(ctas * clusters,)](da, db, dc, m, n, k, backend=NVIDIA, **kw)
    torch.cuda.synchronize()
    ref = a.double() @ bt.double().T
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


@pytest.mark.gpu
def test_gpu_multicast_lands_in_both_ctas_and_a_bad_grid_is_refused():
    """Repeated launches of a cluster kernel take the generated fast path (the checked path
    cost ~100 us of host time a launch, measured on the H200: longer than the skinny GEMM
    itself); a grid that is not whole clusters still falls back to the checked path's error."""
    torch = _gpu()
    src = torch.randn(16, 32, device="cuda")
    d = TensorDescriptor.from_tensor(src, [16, 32], NV([16, 32], gl.float32))
    ring_kernel._fast.clear()
    ring_kernel._fast_keys.clear()
    for _ in range(3):
        out = torch.full((64, 32), float("nan"), device="cuda")
        ring_kernel[(4,)](d, out, SYNC_AFTER_INIT=True, SYNC_AT_END=True, num_ctas=2, num_warps=1, backend=NVIDIA)
        torch.cuda.synchronize()
        for p in range(4):
            torch.testing.assert_close(out[16 * p:16 * (p + 1)], src, rtol=0, atol=0)
    assert ring_kernel._fast, "no fast launcher was registered for a cluster kernel"
    assert type(ring_kernel._fast[0]).__name__ == "Launch"  # in C, which checks whole clusters too
    with pytest.raises(ArgumentValueError, match="multiple of 2"):
        ring_kernel[(3,)](d, out, SYNC_AFTER_INIT=True, SYNC_AT_END=True, num_ctas=2, num_warps=1, backend=NVIDIA)
    x = torch.ones(4, device="cuda")
    assert float((x * 2).sum()) == 8.0  # the context is still good

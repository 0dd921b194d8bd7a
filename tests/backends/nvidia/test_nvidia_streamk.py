"""The stream-K GEMM on NVIDIA: ptxas assembles it without spills at the benchmark's tile
shape; on the GPU (``pytest -m gpu``) it matches torch on square, odd and skinny shapes over a
grid of one CTA per SM, gives bit-identical results on repeated launches over one workspace
(the parts are summed in a fixed order), and leaves the counters at zero."""
import numpy as np
import pytest

from gluon_trace import language as gl
from gluon_trace.kernels.matmul_hopper_streamk import matmul_hopper_streamk, streamk_workspace
from gluon_trace.nvidia.hopper import TensorDescriptor

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.compiler import build  # noqa: E402

from test_nvidia_cluster import _gpu, _padded  # noqa: E402

NV = gl.NVMMASharedLayout.get_default_for


@pytest.mark.parametrize("bm, bn, bk, stages, epi_n", [(128, 256, 64, 4, 64), (128, 128, 64, 5, 128)])
def test_streamk_gemm_assembles_without_spills(bm, bn, bk, stages, epi_n):
    from gluon_trace.backends.nvidia import ptxas
    from gluon_trace.errors import CompileError
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(str(e))
    def spec(blk):
        return TensorDescriptor.type_spec(gl.bfloat16, list(blk), NV(list(blk), gl.bfloat16))
    da, db, dc = spec([bm, bk]), spec([bk, bn]), spec([bm, epi_n])
    tr = matmul_hopper_streamk.trace(da, db, dc, gl.pointer(gl.float32), gl.pointer(gl.int32), 4096, 4096, 4096,
                                     STAGES=stages, GROUP_M=8, num_warps=8, target="sm_90a")
    ck = build(tr.graph, "sm_90a")
    assert ck.spill_bytes == 0 and not ck.extra["stack_bytes"]
    asm = ck.asm
    assert "atom.global.acq_rel.gpu.add" in asm  # the count that publishes a part
    # a cluster of one: cluster.barrier() is the CTA's barrier (compute-sanitizer's synccheck
    # reported barrier.cluster met by the parked workers elsewhere as divergent threads)
    assert "barrier.cluster" not in asm


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, bm, bn, stages, epi_n", [
    (4096, 4096, 4096, 128, 256, 4, 64),    # 512 tiles on 132 SMs: 116 cut over every SM
    (4000, 4000, 4000, 128, 256, 4, 64),    # edge tiles, K not a multiple of BK
    (128, 8192, 8192, 128, 256, 4, 64),     # 32 tiles, all stream-K, 4 parts each
    (1000, 600, 3000, 128, 128, 5, 128),    # fewer tiles than SMs, whole-tile epilogue
    (512, 512, 64, 128, 128, 5, 128),       # one K step: ranges shorter than a step
])
def test_gpu_streamk_gemm_matches_torch_and_repeats_bit_for_bit(m, n, k, bm, bn, stages, epi_n):
    torch = _gpu()
    bk = 64
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    a = _padded(torch, m, k, torch.bfloat16)
    b = _padded(torch, k, n, torch.bfloat16)
    da = TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], gl.bfloat16))
    db = TensorDescriptor.from_tensor(b, [bk, bn], NV([bk, bn], gl.bfloat16))
    size, count = streamk_workspace(programs, bm, bn)
    partials = torch.full((size,), float("nan"), device="cuda")
    counters = torch.zeros(count, device="cuda", dtype=torch.int32)
    ref = a.double() @ b.double()
    outs = []
    for _ in range(3):
        c = _padded(torch, m, n, torch.bfloat16, fill=float("nan"))
        dc = TensorDescriptor.from_tensor(c, [bm, epi_n], NV([bm, epi_n], gl.bfloat16))
        matmul_hopper_streamk[(programs,)](da, db, dc, partials, counters, m, n, k, STAGES=stages, GROUP_M=8,
                                           num_warps=8, backend="nvidia")
        torch.cuda.synchronize()
        torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())
        assert int(counters.abs().sum()) == 0
        outs.append(c.clone())
    assert all(torch.equal(outs[0], o) for o in outs[1:]), "the parts must be summed in a fixed order"

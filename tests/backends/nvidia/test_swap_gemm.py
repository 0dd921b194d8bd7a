"""matmul_hopper_swap: tiles that are not powers of two (160x192), wgmma's M along C's columns (an
MN-major A operand read from B's stage), its N over pieces of A's stage (one instruction over
all of them), the accumulators stored transposed (stmatrix .trans), three consumer partitions
sharing one ring. Its PTX on the race-checking simulator and its graph
on the interpreter, on fresh random inputs with NaN-poisoned C, against numpy; on the GPU against
torch."""
import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.errors import TraceError  # noqa: E402
from gluon_trace.kernels.matmul_hopper_swap import matmul_hopper_swap, swap_descriptors  # noqa: E402
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from test_kernels import BF16, check, operands, padded  # noqa: E402
from test_warpspec import _gpu, gpu_bf16  # noqa: E402
from test_ws_sim import NV, _fresh, interpret, simulate, trace  # noqa: E402


def descs(a, b, c, rows, bk):
    return swap_descriptors(a, b, c, rows, bk, gl.bfloat16)


CASES = [  # (M, N, K, PIECE_ROWS, PIECES, BK, CONSUMERS, programs)
    (200, 250, 130, 32, 5, 64, 3, 2),     # the 160x192 tile: ragged M, N and K, 3 tiles on 2 CTAs
    (130, 300, 200, 16, 5, 32, 2, 3),     # 80x128 tiles: 2x3 tiles on 3 CTAs, the ring wraps inside a tile
    (100, 64, 96, 32, 2, 32, 1, 1),       # one consumer, two pieces
]


def _check(m, n, k, rows, pieces, bk, consumers, programs, order, stages=3, epi_bufs=0, overlap=False):
    rng = np.random.default_rng()
    a, b = (padded(x) for x in operands(rng, m, n, k, BF16))

    def args():
        c = padded(np.full((m, n), np.nan, np.float32).astype(BF16))
        return [*descs(_fresh(a), _fresh(b), c, rows, bk), m, n, k]
    g, text, smem = trace(matmul_hopper_swap, args(), (programs,), STAGES=stages, GROUP_M=2, CONSUMERS=consumers,
                          PIECES=pieces, EPI_BUFS=epi_bufs, OVERLAP=overlap, num_warps=4)
    c_ref = interpret(g, (programs,), args())[2].base[:, :n].astype(np.float32)
    check(c_ref, a, b, 1e-2)
    sim_args = args()
    simulate(text, (programs,), sim_args, smem, order)
    c_sim = sim_args[2].base[:, :n].astype(np.float32)
    check(c_sim, a, b, 1e-2)
    np.testing.assert_allclose(c_sim, c_ref, rtol=1e-2, atol=1e-2 * np.abs(c_ref).max())
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", text)) == {f"m64n{rows * pieces}k16"}


@pytest.mark.parametrize("order", ["pc", "random"])
@pytest.mark.parametrize("m, n, k, rows, pieces, bk, consumers, programs", CASES)
def test_swapped_gemm_on_the_simulator_and_interpreter(m, n, k, rows, pieces, bk, consumers, programs, order):
    _check(m, n, k, rows, pieces, bk, consumers, programs, order)


@pytest.mark.parametrize("order", ["pc", "random"])
def test_fewer_output_buffers_than_pieces(order):
    """160x192 with 4 stages: two output buffers a consumer, each refilled once the store that
    last read it is done (the race-checking simulator would see a store overwritten early)."""
    _check(200, 250, 330, 32, 5, 64, 3, 2, order, stages=4, epi_bufs=2)


@pytest.mark.parametrize("order", ["pc", "random"])
@pytest.mark.parametrize("m, n, k, rows, pieces, bk, programs, stages, epi_bufs", [
    (330, 250, 330, 32, 5, 64, 2, 4, 2),   # 3 x 2 tiles on 2 CTAs, each stored during the next's first steps
    (330, 250, 130, 32, 5, 64, 2, 4, 2),   # 3 K steps: two pieces go out after the loop
    (200, 250, 200, 32, 5, 64, 3, 3, 5),   # one buffer a piece
])
def test_epilogue_overlapped_with_the_next_tile(m, n, k, rows, pieces, bk, programs, stages, epi_bufs, order):
    """OVERLAP: a tile's pieces are stored one a K step of the next tile; the race-checking
    simulator and the interpreter would see a buffer refilled while its store reads it."""
    _check(m, n, k, rows, pieces, bk, 3, programs, order, stages=stages, epi_bufs=epi_bufs, overlap=True)


def test_the_160x192_tile_takes_one_m64n160_and_stores_transposed():
    """Each consumer's K step is one m64n160 wgmma over the five 32-row pieces of A's stage
    (C^T's rows), and its accumulators reach the output buffers by stmatrix .trans, not
    element by element."""
    z = padded(np.zeros((256, 256), BF16))
    args = [*descs(z, z, padded(np.zeros((256, 256), BF16)), 32, 64), 256, 256, 256]
    _, text, _ = trace(matmul_hopper_swap, args, (2,), STAGES=3, GROUP_M=8, num_warps=4)
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", text)) == {"m64n160k16"}
    assert "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in text
    assert not re.search(r"st\.shared(\.v\d)?\.b16", text)


def test_a_wrong_block_is_refused_at_the_kernel_line():
    z = padded(np.zeros((256, 256), BF16))
    d = lambda t, blk: TensorDescriptor.from_tensor(t, blk, NV(blk, gl.bfloat16))  # noqa: E731
    bad = (d(z, [32, 64]), d(z, [64, 128]), d(z, [32, 64]))
    with pytest.raises(TraceError, match=r"matmul_hopper_swap\.py:\d+.*B's block must be \[BK, 64\]"):
        trace(matmul_hopper_swap, [*bad, 256, 256, 256], (1,), STAGES=3, GROUP_M=8, num_warps=4)
    with pytest.raises(TraceError, match=r"matmul_hopper_swap\.py:\d+.*one warpgroup a consumer"):
        trace(matmul_hopper_swap, [*descs(z, z, z, 32, 64), 256, 256, 256], (1,), STAGES=3, GROUP_M=8,
              num_warps=8)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(1000, 1000, 1000), (4000, 520, 333), (160, 192, 64)])
@pytest.mark.parametrize("rows, pieces, consumers", [(32, 5, 3), (64, 3, 3), (32, 4, 2)])
def test_gpu_swapped_gemm_matches_torch(m, n, k, rows, pieces, consumers):
    torch = _gpu()
    a, b, c = gpu_bf16(m, k), gpu_bf16(k, n), gpu_bf16(m, n, float("nan"))
    tiles = -(-m // (rows * pieces)) * -(-n // (64 * consumers))
    programs = min(tiles, torch.cuda.get_device_properties(0).multi_processor_count)
    matmul_hopper_swap[(programs,)](*descs(a, b, c, rows, 64), m, n, k, STAGES=3, GROUP_M=8,
                                    CONSUMERS=consumers, PIECES=pieces, num_warps=4, backend="nvidia")
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(1000, 1000, 1000), (4000, 520, 333)])
@pytest.mark.parametrize("rows, pieces, bk, stages, epi_bufs, overlap", [
    (32, 5, 64, 4, 2, False), (32, 5, 32, 8, 2, False), (64, 3, 64, 4, 1, False), (32, 5, 64, 4, 2, True)])
def test_gpu_swapped_gemm_with_fewer_output_buffers(m, n, k, rows, pieces, bk, stages, epi_bufs, overlap):
    torch = _gpu()
    a, b, c = gpu_bf16(m, k), gpu_bf16(k, n), gpu_bf16(m, n, float("nan"))
    tiles = -(-m // (rows * pieces)) * -(-n // 192)
    programs = min(tiles, torch.cuda.get_device_properties(0).multi_processor_count)
    matmul_hopper_swap[(programs,)](*descs(a, b, c, rows, bk), m, n, k, STAGES=stages, GROUP_M=8, CONSUMERS=3,
                                    PIECES=pieces, EPI_BUFS=epi_bufs, OVERLAP=overlap, num_warps=4, backend="nvidia")
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())

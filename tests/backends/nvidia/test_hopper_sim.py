"""Our Hopper PTX (TMA, mbarrier transaction counts, wgmma) run on the CPU in ptxsim_hopper,
against the interpreter on fresh random inputs with NaN-poisoned outputs.

ptxsim_hopper implements the instructions from the PTX ISA and the driver's CUtensorMap
description (box placement, the 16-byte-chunk XOR swizzles, zero/NaN fill, clipped stores,
the accumulator fragments), not from our emitter's layout code, so these runs check the
emitter's addresses independently of it. The simulator is itself checked to reject kernels
that expect too few bytes, skip fence.proxy.async, or exit with a TMA store in flight.
"""
import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim_hopper  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402
from gluon_trace.language.nvidia.hopper import fence_async_shared, mbarrier, tma  # noqa: E402
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from test_hopper import WGMMA_TILES, _tile_descs, copy1d, copy2d, copy3d, ring, wgmma_tile  # noqa: E402

NV = gl.NVMMASharedLayout.get_default_for
ml_dtypes = pytest.importorskip("ml_dtypes")
HOST = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _wide(n, item):
    """A row pitch >= n elements, a multiple of 16 bytes, plus 16 bytes past it."""
    return -(-n * item // 16) * 16 // item + 16 // item


def _random(shape, dtype, rng):
    return rng.standard_normal(shape).astype(np.float32).astype(HOST[dtype])


def _layout(block, dtype, swizzle):
    if swizzle == "default":
        return NV(list(block), getattr(gl, dtype))
    return gl.NVMMASharedLayout(swizzle_byte_width=swizzle, element_bitwidth=np.dtype(HOST[dtype]).itemsize * 8,
                                rank=len(block))


def _same(a, b):
    """Bit for bit, NaNs included (the outputs were poisoned with NaN: any left shows)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def run_both(kernel, make_args, grid, num_warps=4, **kw):
    """Trace with one set of arguments, run the interpreter on a second and ptxsim_hopper on a
    third (make_args() builds fresh ones from the same data); returns both sets."""
    probe = make_args()
    g = kernel.trace(*probe, target="sm_90a", num_warps=num_warps, **kw).graph
    text, _, smem = emit(g, "sm_90a")
    ref, sim = make_args(), make_args()
    get("interpreter").run(g, tuple(grid) + (1,) * (3 - len(grid)), ref)
    ptxsim_hopper.run(text, grid, sim, smem)
    return ref, sim, text


# -- TMA ------------------------------------------------------------------------------------------

@gt.jit
def tma_to_regs(src, out, L: gl.constexpr):
    """out[block] = the block TMA loaded, read back from shared memory through L (so the
    emitter's swizzled shared reads must agree with the copy's placement)."""
    BM: gl.constexpr = src.block_type.shape[0]
    BN: gl.constexpr = src.block_type.shape[1]
    buf = gl.allocate_shared_memory(src.dtype, [BM, BN], src.layout)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, src.block_type.nbytes)
    tma.async_load(src, [gl.program_id(0) * BM, gl.program_id(1) * BN], bar, buf)
    mbarrier.wait(bar, 0)
    rows = gl.program_id(0) * BM + gl.arange(0, BM, gl.SliceLayout(1, L))
    cols = gl.program_id(1) * BN + gl.arange(0, BN, gl.SliceLayout(0, L))
    W: gl.constexpr = gl.num_programs(1) * BN
    gl.store(out + rows[:, None] * (gl.num_programs(1) * BN) + cols[None, :], buf.load(L))


@gt.jit
def regs_to_tma(x, dst, L: gl.constexpr):
    """dst[block] = x's block, written to shared memory through L and stored by TMA."""
    BM: gl.constexpr = dst.block_type.shape[0]
    BN: gl.constexpr = dst.block_type.shape[1]
    buf = gl.allocate_shared_memory(dst.dtype, [BM, BN], dst.layout)
    rows = gl.program_id(0) * BM + gl.arange(0, BM, gl.SliceLayout(1, L))
    cols = gl.program_id(1) * BN + gl.arange(0, BN, gl.SliceLayout(0, L))
    buf.store(gl.load(x + rows[:, None] * (gl.num_programs(1) * BN) + cols[None, :]))
    fence_async_shared()
    tma.async_store(dst, [gl.program_id(0) * BM, gl.program_id(1) * BN], buf)
    tma.store_wait(0)


LAY = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
# (tensor shape, block, dtype, swizzle): every swizzle width and none, blocks wider than the span
# (several boxes), shapes that end inside a block (zero fill, clipping)
CASES = [((100, 130), (64, 64), "float32", "default"),      # 256 B rows: two 128B boxes
         ((77, 200), (32, 64), "float16", "default"),       # 128B
         ((64, 96), (32, 32), "bfloat16", "default"),       # 64B
         ((40, 48), (32, 16), "float16", "default"),        # 32B
         ((70, 70), (64, 128), "bfloat16", "default"),      # two 128B boxes, rows past the end
         ((48, 64), (16, 32), "float32", 64),               # 128 B rows cut into two 64B boxes
         ((5, 12), (16, 4), "float32", 0)]                  # no swizzle, 16-byte rows
# No swizzle and rows wider than 16 bytes: the NVMMA layout stores 16-byte column blocks, but the
# PTX copies the block as one dense box (tma.box_of), which a TMA with SWIZZLE_NONE packs row
# after row; a round trip hides it, a read or write through the layout does not.
# See /work/briefs/notes-hoppersim.md.
UNSWIZZLED_WIDE = "NVMMA swizzle 0 is 16-byte column blocks; the TMA box is dense rows (tma.box_of)"
WIDE0 = [((5, 12), (16, 16), "float32", 0),                 # explicit swizzle 0, 64-byte rows
         ((6, 40), (4, 32), "float16", "default")]          # fewer than 8 rows: the default is 0
XFAIL_WIDE0 = [pytest.param(*c, marks=pytest.mark.xfail(strict=True, reason=UNSWIZZLED_WIDE)) for c in WIDE0]


@pytest.mark.parametrize("shape, block, dtype, swizzle", CASES + WIDE0)
def test_tma_copy_round_trip(shape, block, dtype, swizzle):
    """The GPU tests' copy2d (TMA load, TMA store) on the simulator: loads past the tensor read
    zeros, stores past the destination's edge are clipped."""
    rng = np.random.default_rng()
    m, n = shape
    bm, bn = block
    grid = (-(-m // bm), -(-n // bn))
    item = np.dtype(HOST[dtype]).itemsize
    data = _random((m, _wide(n, item)), dtype, rng)
    lay = _layout(block, dtype, swizzle)

    def args():
        src = data.copy()[:, :n]
        big = np.full((grid[0] * bm, _wide(grid[1] * bn, item)), np.nan, np.float32).astype(HOST[dtype])
        dst = big[:m + 1, :n + 1] if m + 1 <= grid[0] * bm and n + 1 <= grid[1] * bn else big[:m, :n]
        return [TensorDescriptor.from_tensor(src, list(block), lay),
                TensorDescriptor.from_tensor(dst, list(block), lay)]
    ref, sim, text = run_both(copy2d, args, grid)
    big_ref, big_sim = ref[1].base, sim[1].base
    while big_ref.base is not None:
        big_ref, big_sim = big_ref.base, big_sim.base
    assert _same(big_sim, big_ref)
    assert np.array_equal(big_sim[:m, :n].astype(np.float32), data[:, :n].astype(np.float32))
    assert "cp.async.bulk.tensor.2d" in text


@pytest.mark.parametrize("shape, block, dtype, swizzle", CASES + XFAIL_WIDE0)
def test_tma_load_is_read_through_the_shared_layout(shape, block, dtype, swizzle):
    """A TMA load read back by ld.shared through the emitter's swizzle: the two must agree on
    where each element lies (copy2d alone would pass with any placement)."""
    rng = np.random.default_rng()
    m, n = shape
    bm, bn = block
    grid = (-(-m // bm), -(-n // bn))
    item = np.dtype(HOST[dtype]).itemsize
    data = _random((m, _wide(n, item)), dtype, rng)
    lay = _layout(block, dtype, swizzle)

    def args():
        src = data.copy()[:, :n]
        return [TensorDescriptor.from_tensor(src, list(block), lay),
                np.full((grid[0] * bm, grid[1] * bn), np.nan, np.float32).astype(HOST[dtype])]
    ref, sim, _ = run_both(tma_to_regs, args, grid, L=LAY)
    assert _same(sim[1], ref[1])
    exp = np.zeros((grid[0] * bm, grid[1] * bn), np.float32)
    exp[:m, :n] = data[:, :n].astype(np.float32)
    assert np.array_equal(sim[1].astype(np.float32), exp)


@pytest.mark.parametrize("shape, block, dtype, swizzle", CASES + XFAIL_WIDE0)
def test_tma_store_of_a_tile_written_through_the_shared_layout(shape, block, dtype, swizzle):
    rng = np.random.default_rng()
    m, n = shape
    bm, bn = block
    grid = (-(-m // bm), -(-n // bn))
    item = np.dtype(HOST[dtype]).itemsize
    x = _random((grid[0] * bm, grid[1] * bn), dtype, rng)
    lay = _layout(block, dtype, swizzle)

    def args():
        out = np.full((m, _wide(n, item)), np.nan, np.float32).astype(HOST[dtype])
        return [x.copy(), TensorDescriptor.from_tensor(out[:, :n], list(block), lay)]
    ref, sim, _ = run_both(regs_to_tma, args, grid, L=LAY)
    out_ref, out_sim = ref[1].base.base, sim[1].base.base
    assert _same(out_sim, out_ref)
    assert np.array_equal(out_sim[:, :n].astype(np.float32), x[:m, :n].astype(np.float32))


def test_tma_copy_3d():
    rng = np.random.default_rng()
    data = _random((3, 40, 72), "float16", rng)

    def args():
        y = np.full((3, 40, 80), np.nan, np.float16)
        return [TensorDescriptor.from_tensor(data.copy(), [1, 32, 64], NV([32, 64], gl.float16)),
                TensorDescriptor.from_tensor(y[:, :, :72], [1, 32, 64], NV([32, 64], gl.float16))]
    ref, sim, _ = run_both(copy3d, args, (2, 2, 3))
    y_ref, y_sim = ref[1].base.base, sim[1].base.base
    assert _same(y_sim, y_ref)
    assert np.array_equal(y_sim[:, :, :72], data) and np.isnan(y_sim[:, :, 72:]).all()


def test_tma_copy_1d():
    lay = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)
    data = np.random.default_rng().standard_normal(64).astype(np.float32)

    def args():
        out = np.full(64, np.nan, np.float32)
        return [TensorDescriptor.from_tensor(data.copy(), [32], lay), TensorDescriptor.from_tensor(out[:60], [32], lay)]
    ref, sim, _ = run_both(copy1d, args, (2,))
    assert _same(sim[1].base, ref[1].base)
    assert np.array_equal(sim[1].base[:60], data[:60]) and np.isnan(sim[1].base[60:]).all()


def test_tma_nan_padding():
    """padding='nan': the elements past the tensor read as NaN (the map's OOB fill)."""
    data = np.random.default_rng().standard_normal((20, 36)).astype(np.float32)

    def args():
        src = data.copy()[:, :30]
        return [TensorDescriptor.from_tensor(src, [32, 32], NV([32, 32], gl.float32), padding="nan"),
                np.full((32, 32), -1.0, np.float32)]
    ref, sim, _ = run_both(tma_to_regs, args, (1, 1), L=LAY)
    assert np.array_equal(sim[1][:20, :30], data[:, :30])
    assert np.isnan(sim[1][20:]).all() and np.isnan(sim[1][:, 30:]).all()
    assert np.array_equal(np.isnan(ref[1]), np.isnan(sim[1]))
    assert np.array_equal(np.nan_to_num(ref[1]), np.nan_to_num(sim[1]))


def test_barrier_ring():
    """Two slots, phases flipping, run-time parities, expect_tx per slot."""
    rng = np.random.default_rng()
    x = rng.standard_normal((32, 8 * 32 + 4)).astype(np.float32)

    def args():
        return [TensorDescriptor.from_tensor(x.copy()[:, :256], [32, 32], NV([32, 32], gl.float32)),
                np.full(32 * 32, np.nan, np.float32)]
    ref, sim, _ = run_both(ring, args, (1,), K_TILES=8)
    assert _same(sim[1], ref[1])
    np.testing.assert_allclose(sim[1].reshape(32, 32), x[:, :256].reshape(32, 8, 32).sum(1), rtol=1e-5, atol=1e-5)


@gt.jit
def into_row_slice(desc, out, L: gl.constexpr):
    """A [64, 128] bf16 block (two 128-byte boxes) loaded into rows 64..127 of a [128, 128]
    buffer (the SHARE_A cluster GEMM's pattern), read back whole."""
    buf = gl.allocate_shared_memory(gl.bfloat16, [128, 128], desc.layout)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, desc.block_type.nbytes)
    tma.async_load(desc, [0, 0], bar, buf.slice(64, 64, dim=0))
    mbarrier.wait(bar, 0)
    rows = gl.arange(0, 64, gl.SliceLayout(1, L))
    cols = gl.arange(0, 128, gl.SliceLayout(0, L))
    gl.store(out + rows[:, None] * 128 + cols[None, :], buf.slice(64, 64, dim=0).load(L))


def test_boxes_into_a_row_slice():
    """The bug only the GPU showed (rules_hopper._boxes placed the second box 64 rows x 128 B
    on instead of one [128 x 128 B] column block on): the simulator sees it too."""
    data = np.random.default_rng().standard_normal((64, 128)).astype(ml_dtypes.bfloat16)

    def args():
        return [TensorDescriptor.from_tensor(data.copy(), [64, 128], NV([64, 128], gl.bfloat16)),
                np.full((64, 128), np.nan, np.float32).astype(ml_dtypes.bfloat16)]
    ref, sim, _ = run_both(into_row_slice, args, (1,), L=LAY)
    assert _same(sim[1], ref[1]) and _same(sim[1], data)


# -- the simulator's own checks -----------------------------------------------------------------

def _copy2d_ptx():
    def args():
        a = np.random.default_rng().standard_normal((64, 64)).astype(np.float32)
        return [TensorDescriptor.from_tensor(a, [64, 64], NV([64, 64], gl.float32)),
                TensorDescriptor.from_tensor(np.full((64, 64), np.nan, np.float32), [64, 64], NV([64, 64], gl.float32))]
    g = copy2d.trace(*args(), target="sm_90a", num_warps=4).graph
    text, _, smem = emit(g, "sm_90a")
    return text, smem, args


def test_sim_rejects_too_few_expected_bytes():
    """expect_tx of one box where two are loaded: the phase completes on the first box's bytes
    and the second is still in flight when the store reads it."""
    text, smem, args = _copy2d_ptx()
    assert "expect_tx.shared::cta.b64 _, [%r7], 16384;" in text
    ptxsim_hopper.run(text, (1, 1), args(), smem)
    bad = text.replace("expect_tx.shared::cta.b64 _, [%r7], 16384;", "expect_tx.shared::cta.b64 _, [%r7], 8192;")
    with pytest.raises(RuntimeError, match="before the copies into it landed"):
        ptxsim_hopper.run(bad, (1, 1), args(), smem)


def test_sim_rejects_a_missing_store_wait():
    text, smem, args = _copy2d_ptx()
    bad = text.replace("cp.async.bulk.wait_group.read 0;", "mov.u32 %r19, 0;")
    with pytest.raises(RuntimeError, match="never waited for"):
        ptxsim_hopper.run(bad, (1, 1), args(), smem)


def test_sim_rejects_a_tma_store_of_unfenced_generic_writes():
    def args():
        return [np.random.default_rng().standard_normal((32, 32)).astype(np.float32),
                TensorDescriptor.from_tensor(np.full((32, 32), np.nan, np.float32), [32, 32], NV([32, 32], gl.float32))]
    g = regs_to_tma.trace(*args(), L=LAY, target="sm_90a", num_warps=4).graph
    text, _, smem = emit(g, "sm_90a")
    a = args()
    ptxsim_hopper.run(text, (1, 1), a, smem)
    assert _same(a[1].base, a[0])
    bad = text.replace("fence.proxy.async.shared::cta;", "")
    with pytest.raises(RuntimeError, match="no fence.proxy.async"):
        ptxsim_hopper.run(bad, (1, 1), args(), smem)


# -- wgmma ----------------------------------------------------------------------------------------

def _operands(bm, bn, bk, dtype, b_kmajor, rng):
    a = _random((bm, bk), dtype, rng)
    b = _random((bn, bk) if b_kmajor else (bk, bn), dtype, rng)
    return a, b


@pytest.mark.parametrize("bm, bn, bk, dtype, warps, a_regs, b_kmajor", WGMMA_TILES)
def test_wgmma_tile(bm, bn, bk, dtype, warps, a_regs, b_kmajor):
    """The GPU tests' one-tile kernel (TMA in, wgmma, plain stores): every swizzle width of A,
    B MN-major and K-major, A from registers, two warpgroups, tf32."""
    rng = np.random.default_rng()
    a, b = _operands(bm, bn, bk, dtype, b_kmajor, rng)

    def args():
        da, db = _tile_descs(bm, bn, bk, dtype, b_kmajor, a.copy(), b.copy())
        return [da, db, np.full(bm * bn, np.nan, np.float32)]
    ref, sim, text = run_both(wgmma_tile, args, (1,), num_warps=warps, A_REGS=a_regs, B_KMAJOR=b_kmajor)
    assert "wgmma.mma_async" in text
    exact = a.astype(np.float64) @ (b.astype(np.float64).T if b_kmajor else b.astype(np.float64))
    tol = 2e-2 if dtype == "float32" else 1e-5
    np.testing.assert_allclose(sim[2].reshape(bm, bn), exact, rtol=tol, atol=tol * np.abs(exact).max())
    np.testing.assert_allclose(sim[2], ref[2], rtol=tol, atol=tol * np.abs(exact).max())


def _tile_run(text, smem, a, b, b_kmajor=False, dtype="bfloat16"):
    bm, bk = a.shape
    bn = b.shape[0 if b_kmajor else 1]
    da, db = _tile_descs(bm, bn, bk, dtype, b_kmajor, a.copy(), b.copy())
    c = np.full(bm * bn, np.nan, np.float32)
    ptxsim_hopper.run(text, (1,), [da, db, c], smem)
    return c.reshape(bm, bn)


def test_sim_wgmma_checks():
    """The simulator's wgmma rules, each shown by a one-line edit of a correct tile kernel: an
    accumulator read before wgmma.wait_group, no wgmma.fence after the accumulator's init, and
    a descriptor's swizzle field changed (the operand is then read elsewhere)."""
    rng = np.random.default_rng()
    a, b = _operands(64, 128, 64, "bfloat16", False, rng)
    da, db = _tile_descs(64, 128, 64, "bfloat16", False, a, b)
    g = wgmma_tile.trace(da, db, np.zeros(64 * 128, np.float32), A_REGS=False, B_KMAJOR=False, num_warps=4,
                         target="sm_90a").graph
    text, _, smem = emit(g, "sm_90a")
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(_tile_run(text, smem, a, b), exact, rtol=1e-5, atol=1e-4)
    with pytest.raises(RuntimeError, match="before the wgmma.wait_group that retires it"):
        _tile_run(text.replace("wgmma.wait_group.sync.aligned 0;", ""), smem, a, b)
    with pytest.raises(RuntimeError, match="no wgmma.fence since"):
        _tile_run(text.replace("wgmma.fence.sync.aligned;", ""), smem, a, b)
    hi = 1 << 30 | 1024 >> 4                       # 128B swizzle, SBO 1024 (8 rows of 128 B)
    a_hi = re.search(r"mov\.b64 %rd7, \{%r\d+, (%r\d+)\}", text).group(1)   # A's first descriptor
    assert text.count(f"mov.b32 {a_hi}, {hi};") == 1
    moved = _tile_run(text.replace(f"mov.b32 {a_hi}, {hi};", f"mov.b32 {a_hi}, {2 << 30 | 1024 >> 4};"), smem, a, b)
    assert not np.allclose(moved, exact, rtol=1e-2, atol=1e-2)

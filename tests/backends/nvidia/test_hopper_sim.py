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
from gluon_trace.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,  # noqa: E402
                                                warpgroup_mma_wait)
from gluon_trace.errors import ArgumentValueError  # noqa: E402
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from test_hopper import WGMMA_TILES, _tile_descs, copy1d, copy2d, copy3d, ring, wgmma_tile  # noqa: E402

NV = gl.NVMMASharedLayout.get_default_for
ml_dtypes = pytest.importorskip("ml_dtypes")
HOST = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16,
        "float8e4nv": ml_dtypes.float8_e4m3fn, "float8e5": ml_dtypes.float8_e5m2}


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
# No swizzle and rows wider than 16 bytes: the NVMMA layout stores 16-byte column blocks, and a
# TMA with SWIZZLE_NONE packs its box row after row, so each column block is a box of its own
# (tma.box_of). The PTX once copied the block as one box a row: a round trip hid it, a read or
# write through the layout (below) did not.
WIDE0 = [((5, 12), (16, 16), "float32", 0),                 # explicit swizzle 0, 64-byte rows
         ((20, 40), (8, 32), "float16", 0)]                 # 8 rows: 128-byte column blocks


def test_tma_refuses_an_unswizzled_block_whose_column_blocks_are_not_128_byte_aligned():
    """Fewer than 8 rows (the default layout is then unswizzled) of more than 16 bytes: each
    16-byte column block would be a box at a 64-byte offset, which TMA cannot place."""
    src = np.zeros((6, 40), np.float16)
    with pytest.raises(ArgumentValueError, match="16-byte column blocks of 4 rows") as e:
        TensorDescriptor.from_tensor(src, [4, 32], NV([4, 32], gl.float16))
    assert "test_hopper_sim.py" in str(e.value)
    TensorDescriptor.from_tensor(src, [4, 8], NV([4, 8], gl.float16))  # 16-byte rows: one box


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


@pytest.mark.parametrize("shape, block, dtype, swizzle", CASES + WIDE0)
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


@pytest.mark.parametrize("shape, block, dtype, swizzle", CASES + WIDE0)
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
    expect = re.compile(r"(expect_tx\.shared::cta\.b64 _, \[%r\d+\]), 16384;")
    assert len(expect.findall(text)) == 1
    ptxsim_hopper.run(text, (1, 1), args(), smem)
    bad = expect.sub(r"\1, 8192;", text)
    with pytest.raises(RuntimeError, match="before the copies into it landed"):
        ptxsim_hopper.run(bad, (1, 1), args(), smem)


def test_sim_rejects_a_missing_store_wait():
    text, smem, args = _copy2d_ptx()
    bad, n = re.subn(r"\n[^\n]*cp\.async\.bulk\.wait_group\.read 0;", "", text)
    assert n == 1
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


# -- kernels ----------------------------------------------------------------------------------------

GEMMS = [  # (M, N, K, BM, BN, BK, dtype, warps, B K-major, c block columns, programs, C dtype)
    (192, 128, 96, 64, 64, 32, "bfloat16", 4, False, 64, 2, None),    # 6 tiles over 2 programs, 3 K steps
    (100, 70, 80, 64, 64, 32, "float16", 4, True, 32, 2, None),       # ragged edges, C in column blocks
    (128, 128, 64, 128, 64, 32, "bfloat16", 8, False, 64, 1, None),   # two warpgroups
    (64, 64, 64, 64, 64, 16, "float32", 4, True, 64, 1, None),        # tf32 (K-major B), 64B swizzle
    (96, 64, 256, 64, 64, 128, "float8e4nv", 4, True, 64, 2, "float32"),  # k32 e4m3, 128B swizzle
    (64, 80, 128, 64, 32, 64, "float8e5", 4, True, 32, 1, "float32"),    # k32 e5m2, 64B swizzle
    (256, 256, 128, 128, 256, 64, "bfloat16", 8, False, 256, 2, None)]   # the benchmark's tiles, 213 KB


@pytest.mark.parametrize("m, n, k, bm, bn, bk, dtype, warps, b_kmajor, epi, programs, c_dtype", GEMMS)
def test_persistent_hopper_gemm(m, n, k, bm, bn, bk, dtype, warps, b_kmajor, epi, programs, c_dtype):
    """matmul_hopper (TMA ring, one wgmma group in flight, persistent grouped tiles, TMA store
    of C) on the simulator against the interpreter and float64."""
    from gluon_trace.kernels.matmul_hopper import matmul_hopper
    rng = np.random.default_rng()
    t = HOST[dtype]
    item = np.dtype(t).itemsize
    a = _random((m, _wide(k, item)), dtype, rng)
    b = _random((n, _wide(k, item)) if b_kmajor else (k, _wide(n, item)), dtype, rng)
    gd = getattr(gl, dtype)
    c_dtype = c_dtype or dtype
    ct = HOST[c_dtype]
    bb = [bn, bk] if b_kmajor else [bk, bn]

    def args():
        c = np.full((m, _wide(n, np.dtype(ct).itemsize)), np.nan, np.float32).astype(ct)
        return [TensorDescriptor.from_tensor(a.copy()[:, :k], [bm, bk], NV([bm, bk], gd)),
                TensorDescriptor.from_tensor(b.copy()[:, :k] if b_kmajor else b.copy()[:, :n], bb, NV(bb, gd)),
                TensorDescriptor.from_tensor(c[:, :n], [bm, epi], NV([bm, epi], getattr(gl, c_dtype))), m, n, k]
    ref, sim, text = run_both(matmul_hopper, args, (programs,), num_warps=warps, STAGES=3, GROUP_M=2,
                              B_KMAJOR=b_kmajor)
    assert "wgmma.wait_group.sync.aligned 1;" in text
    ptx_t = {"bfloat16": "bf16", "float16": "f16", "float32": "tf32", "float8e4nv": "e4m3", "float8e5": "e5m2"}[dtype]
    assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n{bn}k\d+\.f32\.{ptx_t}\.{ptx_t} ", text)
    c_ref, c_sim = ref[2].base.base, sim[2].base.base
    bm_ = b[:, :k].T if b_kmajor else b[:, :n]
    exact = a[:, :k].astype(np.float64) @ bm_.astype(np.float64)
    tol = 2e-2 if dtype == "float32" else 1e-2
    got = c_sim[:, :n].astype(np.float64)
    np.testing.assert_allclose(got, exact, rtol=tol, atol=tol * np.abs(exact).max())
    np.testing.assert_allclose(got, c_ref[:, :n].astype(np.float64), rtol=tol, atol=tol * np.abs(exact).max())
    assert _same(c_sim[:, n:], c_ref[:, n:])       # past the tensor: as the interpreter left it


@pytest.mark.parametrize("kernel", ["attention_fwd", "attention_fwd_pipelined"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d, bm, warps", [(64, 64, 4), (128, 128, 8)])
def test_attention(kernel, causal, d, bm, warps):
    """attention_hopper's non-warp-specialized kernels (TMA, wgmma S = Q K^T and O += P V with
    P from registers, online softmax) at seq 80 / 200 (ragged last tiles), as the GPU tests'
    d 64 on one warpgroup and d 128 with 128-row Q tiles on two."""
    from gluon_trace.kernels import attention_hopper
    rng = np.random.default_rng()
    bh, bn = 2, 64
    seq = 80 if d == 64 else 200
    q, k, v = (_random((bh, seq, d), "bfloat16", rng) for _ in range(3))
    lay_m, lay_n = NV([bm, d], gl.bfloat16), NV([bn, d], gl.bfloat16)
    scale = 1.0 / d ** 0.5

    def args():
        o = np.full((bh, seq, d), np.nan, np.float32).astype(ml_dtypes.bfloat16)
        return [TensorDescriptor.from_tensor(q.copy(), [1, bm, d], lay_m),
                TensorDescriptor.from_tensor(k.copy(), [1, bn, d], lay_n),
                TensorDescriptor.from_tensor(v.copy(), [1, bn, d], lay_n),
                TensorDescriptor.from_tensor(o, [1, bm, d], lay_m), seq, scale]
    ref, sim, _ = run_both(getattr(attention_hopper, kernel), args, (-(-seq // bm), bh), num_warps=warps,
                           CAUSAL=causal)
    o_sim, o_ref = sim[3].base.astype(np.float64), ref[3].base.astype(np.float64)
    s = np.einsum("bqd,bkd->bqk", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        s = np.where(np.tril(np.ones((seq, seq), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    exact = np.einsum("bqk,bkd->bqd", p / p.sum(-1, keepdims=True), v.astype(np.float64))
    np.testing.assert_allclose(o_sim, exact, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(o_sim, o_ref, rtol=2e-2, atol=2e-2)


def _gemm_case():
    from gluon_trace.kernels.matmul_hopper import matmul_hopper
    rng = np.random.default_rng()
    a, b = _random((128, 128), "bfloat16", rng), _random((128, 64), "bfloat16", rng)

    def args():
        return [TensorDescriptor.from_tensor(a.copy(), [64, 32], NV([64, 32], gl.bfloat16)),
                TensorDescriptor.from_tensor(b.copy(), [32, 64], NV([32, 64], gl.bfloat16)),
                TensorDescriptor.from_tensor(np.full((128, 64), np.nan, np.float32), [64, 64],
                                             NV([64, 64], gl.float32)), 128, 64, 128]
    g = matmul_hopper.trace(*args(), STAGES=3, GROUP_M=2, target="sm_90a", num_warps=4).graph
    text, _, smem = emit(g, "sm_90a")
    return text, smem, args, a.astype(np.float64) @ b.astype(np.float64)


def test_sim_rejects_refilling_a_ring_slot_an_inflight_wgmma_reads():
    """The GEMM refills the slot of step k-1 after wgmma.wait_group 1 retired that step; without
    the wait the TMA load would overwrite operands the tensor cores may still be reading."""
    text, smem, args, exact = _gemm_case()
    a = args()
    ptxsim_hopper.run(text, (1,), a, smem)
    np.testing.assert_allclose(a[2].base, exact, rtol=1e-2, atol=1e-2)
    assert text.count("wgmma.wait_group.sync.aligned 1;") == 1
    with pytest.raises(RuntimeError, match="overwrites bytes an in-flight wgmma reads"):
        ptxsim_hopper.run(text.replace("wgmma.wait_group.sync.aligned 1;", ""), (1,), args(), smem)


def test_sim_rejects_copying_an_inflight_accumulator():
    """attention_fwd_pipelined carries O (an async wgmma result) around the K/V loop; the copy at
    the back edge must come after wgmma.wait_group 0 (the bug pinned by test_hopper's
    test_an_in_flight_accumulator_is_not_copied_before_its_group_retires): without that wait
    the simulator sees the copy read registers still in flight."""
    from gluon_trace.kernels.attention_hopper import attention_fwd_pipelined
    rng = np.random.default_rng()
    q, k, v = (_random((1, 128, 64), "bfloat16", rng) for _ in range(3))
    lay = NV([64, 64], gl.bfloat16)

    def args():
        o = np.full((1, 128, 64), np.nan, np.float32).astype(ml_dtypes.bfloat16)
        return [TensorDescriptor.from_tensor(x.copy(), [1, 64, 64], lay) for x in (q, k, v)] + \
            [TensorDescriptor.from_tensor(o, [1, 64, 64], lay), 128, 0.125]
    g = attention_fwd_pipelined.trace(*args(), CAUSAL=False, target="sm_90a", num_warps=4).graph
    text, _, smem = emit(g, "sm_90a")
    a = args()
    ptxsim_hopper.run(text, (2, 1), a, smem)
    assert not np.isnan(a[3].base.astype(np.float32)).any()
    loop = re.findall(r"(\$L_loop_\d+):\n(.*?)\n\tbra\.uni \1;", text, re.S)
    body = max((b for _, b in loop), key=len)
    tail = body[body.rindex("wgmma.commit_group"):]
    assert tail.count("wgmma.wait_group.sync.aligned 0;") == 1
    bad = text.replace(tail, tail.replace("wgmma.wait_group.sync.aligned 0;", ""))
    with pytest.raises(RuntimeError, match="a wgmma result, before the wgmma.wait_group"):
        ptxsim_hopper.run(bad, (2, 1), args(), smem)


# -- the interpreter's synchronisation checks, seen the same way on the PTX ---------------------------

def _sync_cases():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    import test_sync_checks as S
    rng = np.random.default_rng()
    a = rng.standard_normal((64, 32)).astype(np.float32)
    bf = {}
    for k in (64, 256):
        x, y = S._bf16_pair(rng, k)
        bf[k] = x, y, S._bf16_desc(x, [64, 64])[1], S._bf16_desc(y, [64, 64])[1]
    return S, a, bf


# (name, the bug's kernel and arguments, what the simulator says; the fixed kernel, its check)
SYNC = ["tma read before wait", "expect more bytes than arrive", "tma store source overwritten",
        "tma store of unfenced stores", "ring slot refilled under an in-flight wgmma",
        "wgmma result read before wait"]


@pytest.mark.parametrize("case", SYNC)
def test_interpreter_sync_check_kernels(case):
    """test_sync_checks.py's kernels, each of which the interpreter rejects, emitted as PTX and run
    here: the simulator rejects each for the same reason, and the fixed kernel runs right."""
    S, a, bf = _sync_cases()

    def sim(kernel, args, grid, **kw):
        g = kernel.trace(*args, target="sm_90a", num_warps=4, **kw).graph
        text, _, smem = emit(g, "sm_90a")
        ptxsim_hopper.run(text, grid, args, smem, max_steps=20000)

    if case == "tma read before wait":
        out = np.full_like(a, np.nan)
        with pytest.raises(RuntimeError, match="before the copies into them landed"):
            sim(S.make_tma_copy(False), [S.desc(a, [32, 32]), out], (2,), BM=32, BN=32)
        sim(S.make_tma_copy(True), [S.desc(a, [32, 32]), out], (2,), BM=32, BN=32)
        assert np.array_equal(out, a)
    elif case == "expect more bytes than arrive":      # the wait spins for ever
        with pytest.raises(RuntimeError, match="deadlock.* 4096 transaction bytes outstanding"):
            sim(S.make_tma_copy(True, 2), [S.desc(a[:32].copy(), [32, 32]), np.zeros((32, 32), np.float32)], (1,),
                BM=32, BN=32)
    elif case == "tma store source overwritten":
        out = np.full((64, 32), np.nan, np.float32)
        with pytest.raises(RuntimeError, match="changed before cp.async.bulk.wait_group retired it"):
            sim(S.make_store_reuse(False), [S.desc(out, [32, 32])], (1,), BM=32, BN=32)
        out[...] = np.nan
        sim(S.make_store_reuse(True), [S.desc(out, [32, 32])], (1,), BM=32, BN=32)
        assert (out[:32] == 1).all() and (out[32:] == 2).all()
    elif case == "tma store of unfenced stores":
        with pytest.raises(RuntimeError, match="no fence.proxy.async since"):
            sim(S.missing_fence, [S.desc(np.zeros((32, 32), np.float32), [32, 32])], (1,), BM=32, BN=32)
    elif case == "ring slot refilled under an in-flight wgmma":
        x, y, dx, dy = bf[256]
        c = np.full((64, 64), np.nan, np.float32)
        with pytest.raises(RuntimeError, match="overwrites bytes an in-flight wgmma reads"):
            sim(S.make_pipelined(1), [dx, dy, c, 4], (1,), STAGES=2)
        c[...] = np.nan
        sim(S.make_pipelined(0), [dx, dy, c, 4], (1,), STAGES=2)
        np.testing.assert_allclose(c, x.astype(np.float64) @ y, rtol=1e-4, atol=1e-3)
    else:
        x, y, dx, dy = bf[64]
        with pytest.raises(RuntimeError, match="before the wgmma.wait_group that retires it"):
            sim(S.read_before_mma_wait, [dx, dy, np.zeros((64, 64), np.float32)], (1,))


def _grid_ptrs(ptr, rows, cols, layout, stride):
    r = gl.arange(0, rows, layout=gl.SliceLayout(1, layout))
    c = gl.arange(0, cols, layout=gl.SliceLayout(0, layout))
    return ptr + r[:, None] * stride + c[None, :]


@gt.jit
def wgmma_from_stores(c_ptr, a_ptr, b_ptr, c0_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr,
                      A_REGS: gl.constexpr, B_T: gl.constexpr):
    """C = A @ B + C0 with the operands written to shared memory by ordinary stores (then
    fence_async_shared), the accumulator loaded from memory, one async wgmma and its wait.
    B_T: B is given as [N, K] and used through a permuted view (K-major)."""
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                    instr_shape=[16, N, 16])
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    if B_T:
        b_s = gl.allocate_shared_memory(gl.float16, [N, K], gl.NVMMASharedLayout.get_default_for([N, K], gl.float16),
                                        gl.load(_grid_ptrs(b_ptr, N, K, ld, K)))
        b_op = b_s.permute((1, 0))
    else:
        b_op = gl.allocate_shared_memory(gl.float16, [K, N], gl.NVMMASharedLayout.get_default_for([K, N], gl.float16),
                                         gl.load(_grid_ptrs(b_ptr, K, N, ld, N)))
    if A_REGS:
        a_op = gl.load(_grid_ptrs(a_ptr, M, K, gl.DotOperandLayout(0, acc_l, k_width=2), K))
    else:
        a_op = gl.allocate_shared_memory(gl.float16, [M, K], gl.NVMMASharedLayout.get_default_for([M, K], gl.float16),
                                         gl.load(_grid_ptrs(a_ptr, M, K, ld, K)))
    fence_async_shared()
    acc = gl.load(_grid_ptrs(c0_ptr, M, N, acc_l, N))
    out = warpgroup_mma(a_op, b_op, acc, is_async=True)
    out = warpgroup_mma_wait(0, deps=[out])
    gl.store(_grid_ptrs(c_ptr, M, N, acc_l, N), out)


@pytest.mark.parametrize("m, n, k, a_regs, b_t, warps", [
    (64, 16, 16, False, False, 4), (64, 64, 64, True, False, 4), (128, 128, 16, False, True, 8),
    (64, 128, 64, False, True, 4), (128, 64, 64, True, True, 4), (64, 8, 32, False, False, 4)])
def test_wgmma_on_operands_stored_by_the_kernel(m, n, k, a_regs, b_t, warps):
    """test_mma_ops' wgmma pattern (operands through st.shared + fence.proxy.async, C0 added):
    narrow N (no swizzle: the core-matrix layout), M of 128 on one or two warpgroups."""
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k) if b_t else (k, n)).astype(np.float16)
    c0 = rng.standard_normal((m, n)).astype(np.float32)

    def args():
        return [np.full((m, n), np.nan, np.float32), a.copy(), b.copy(), c0.copy()]
    ref, sim, text = run_both(wgmma_from_stores, args, (1,), num_warps=warps, M=m, N=n, K=k, A_REGS=a_regs, B_T=b_t)
    assert "fence.proxy.async" in text
    exact = a.astype(np.float64) @ (b.T if b_t else b).astype(np.float64) + c0
    np.testing.assert_allclose(sim[0], exact, rtol=1e-5, atol=1e-4 * np.abs(exact).max())
    np.testing.assert_allclose(sim[0], ref[0], rtol=1e-5, atol=1e-4 * np.abs(exact).max())

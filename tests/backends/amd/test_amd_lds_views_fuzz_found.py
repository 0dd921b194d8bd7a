"""LDS views the fuzzer's 'views' preset (FuzzConfig(unaligned_views=True): slices from inside
swizzle and padding periods) found the AMD backend failing on, each on amdsim against the
interpreter, on fresh random inputs:

- a dim with no thread bits (size 1) after an unaligned slice whose thread part is a register:
  the thread address XORed an immediate into a register as an immediate (AttributeError).
- a padded view chosen by a branch between starts at different points of a padding period (its
  start an SGPR), read 4 registers a thread: the start plus a register's part carried past the bits
  kept in the thread register (refused on gfx942, "not addressable as thread part + register part");
- short column slices of NVMMA buffers, where NVIDIA put a negative bit offset in the address
  (its seed 248): checked here too, AMD addresses them right;
- a view a loop carries from an aligned start (elements 0..7) whose body yields one from inside
  the period (5..12): the join took the yield's run-time start for an XOR of nothing and carried
  the address alone, so every step after the first used the first start (seed 3005, gfx1100);
- two column slots a loop swaps (run-time start in dim 1) of a buffer whose last dim has size 1:
  the run-time-start address XORed that dim's constant into the register of dim 0 as an immediate
  (AttributeError, seed 3366, gfx1100);
- loops over ring slots whose stride is less aligned than slot 0 (padded rows), and loops whose
  body picks one of two column slices by a branch (joined with the slot's origin in the address):
  the join's alignment was predicted from the first slot's, then the body refused ("less aligned
  than its first value", seeds 3017, 3193, 3271 and 3357);
- a slice from inside a swizzle period of stacked buffers, read in a layout whose lanes mix a
  stacked dim's coordinate bits (lane bases [2, 1, 0] and [2, 0, 0]): the stacked bytes were taken
  as the sum of the bases', not their coordinates' XOR (refused, "not addressable as thread part +
  register part", seed 3159);
- rows of a swizzled buffer a loop swaps (carried with the row's origin in the address, or a
  run-time XOR), sliced from inside the period: the slice's coordinates did not match its table,
  whose origin the join had moved (refused, "not addressable ...", seeds 3181 and 3251); likewise
  a loop carrying a view joined with an XOR of nothing was predicted as aligned as its first;
- two f64 columns a loop swaps (a run-time XOR), the second less aligned than the first once the
  join splits their tables: the loop kept the first's alignment and refused its body (seed 3477,
  gfx942, from the campaign over seeds 3400..3599).
"""
import os
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

sys.path.insert(0, os.path.dirname(__file__))
from lds_runner import both  # noqa: E402

TARGETS = ["gfx942", "gfx1100"]
pytestmark = pytest.mark.usefixtures("amd_toolchain")  # conftest: a fresh cache; skip without an assembler


@gt.jit
def size1_dim_after_unaligned_slice(x_ptr, out_ptr):
    """A [32, 1, 2] f32 buffer (dims placed 1, 0, 2 fastest first, single elements swizzled over
    rows in fours) holding x, viewed as .slice(0, 1, 2).permute([2, 0, 1]).slice(15, 8, 1): rows
    15..22 (inside the period) of column 0; read into out [1, 8, 1]."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1, 1], [W // 16, 8, 2], [1, 1, 1], [2, 1, 0])
    L: gl.constexpr = gl.BlockedLayout([1, 2, 1], [1, 4, W // 4], [1, 1, 1], [2, 1, 0])
    C: gl.constexpr = gl.SliceLayout(0, gl.SliceLayout(1, F))
    R: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, F))
    rf = (gl.arange(0, 32, R)[:, None, None] * 2 + gl.arange(0, 2, C)[None, None, :])
    buf = gl.allocate_shared_memory(gl.float32, [32, 1, 2], gl.SwizzledSharedLayout(1, 4, 8, [1, 0, 2]))
    buf.store(gl.load(x_ptr + rf))
    v = buf.slice(0, 1, 2).permute([2, 0, 1]).slice(15, 8, 1)
    r = gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(2, L)))[None, :, None] + \
        gl.zeros([1, 8, 1], gl.int32, L)
    gl.store(out_ptr + r, v.load(L))


@pytest.mark.parametrize("target", TARGETS)
def test_a_size1_dim_after_an_unaligned_slice(target):
    """Found by the fuzzer's views preset: a dim with no thread bits (size 1) after one whose
    thread part is a register made the thread address XOR an immediate into a register as an
    immediate (AttributeError: 'Reg' object has no attribute 'bits')."""
    x = np.random.default_rng().standard_normal(64).astype(np.float32)
    exp = x.reshape(32, 1, 2)[15:23, 0, 0].reshape(1, 8, 1)
    ref, sim, _ = both(size1_dim_after_unaligned_slice, lambda: [x.copy(), np.full((1, 8, 1), np.nan, np.float32)],
                       target, num_warps=1)
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)


@gt.jit
def padded_branch_starts_in_a_period(x_ptr, out_ptr, flag):
    """An f16 [32] buffer padded every 4 elements holding x, viewed from 13, a branch picking that
    view's .slice(7, 4, 0) (elements 20..23: a period's start) or .slice(12, 4, 0) (25..28: one in),
    read 4 elements a thread (every lane the same) into out [4]."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1], [W], [1], [0])
    L: gl.constexpr = gl.BlockedLayout([4], [W], [1], [0])
    buf = gl.allocate_shared_memory(gl.float16, [32], gl.PaddedSharedLayout.with_identity_for([[4, 4]], [32], [0]),
                                    gl.load(x_ptr + gl.arange(0, 32, F)))
    p = buf.slice(13, 16, 0)
    v = p.slice(7, 4, 0)
    with gl.if_(flag > 0):
        v = p.slice(12, 4, 0)
    gl.store(out_ptr + gl.arange(0, 4, L), v.load(L))


@pytest.mark.parametrize("flag", [0, 1])
@pytest.mark.parametrize("target", TARGETS)
def test_a_padded_view_branching_between_starts_in_a_period(target, flag):
    """Found by the fuzzer's views preset (seed 270): the run-time start S (1 past a period) plus
    register 3's lin 3 is 4, a carry past the bits the thread register held (S's alone), so no split
    reproduced the addresses and the view was refused; those bits' register parts now join the sum."""
    x = np.random.default_rng().standard_normal(32).astype(np.float16)
    s = 25 if flag else 20
    ref, sim, _ = both(padded_branch_starts_in_a_period,
                       lambda: [x.copy(), np.full(4, np.nan, np.float16), flag], target, num_warps=1)
    assert np.array_equal(ref[1], x[s:s + 4]) and np.array_equal(sim[1], x[s:s + 4])


@gt.jit
def nvmma_columns(x_ptr, out_ptr, START: gl.constexpr, N: gl.constexpr, TRANS: gl.constexpr):
    """Columns START..START+N-1 of an NVMMA f16 [16, 8] buffer holding x, read into out [16, N]."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    rf = gl.arange(0, 16, gl.SliceLayout(1, F))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.float16, [16, 8], gl.NVMMASharedLayout.get_default_for(
        [16, 8], gl.float16, transposed=TRANS), gl.load(x_ptr + rf))
    L: gl.constexpr = gl.BlockedLayout([1, 1], [16, W // 16], [1, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] * N + gl.arange(0, N, gl.SliceLayout(0, L))[None, :]
    gl.store(out_ptr + r, buf.slice(START, N, 1).load(L))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("trans", [True, False], ids=["transposed", "plain"])
@pytest.mark.parametrize("n", [1, 2, 4])
def test_short_column_slices_of_an_nvmma_buffer(target, trans, n):
    """NVIDIA's views preset seed 248 (tests/backends/nvidia/test_smem_views_fuzz_found.py): length-1
    columns 4..7 of a transposed NVMMA f16 [16, 8] buffer put a negative bit offset in the address
    and read outside shared memory there. The same slices, every start, on AMD."""
    x = np.random.default_rng().standard_normal(128).astype(np.float16)
    for start in range(8 - n + 1):
        ref, sim, _ = both(nvmma_columns, lambda: [x.copy(), np.zeros(16 * n, np.float16)], target, num_warps=1,
                           START=start, N=n, TRANS=trans)
        exp = x.reshape(16, 8)[:, start:start + n].reshape(-1)
        assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp), start


@gt.jit
def carried_from_an_aligned_start(x_ptr, y_ptr, out_ptr, n, LAY: gl.constexpr, A: gl.constexpr, B: gl.constexpr,
                                  STORE: gl.constexpr):
    """Elements A..A+7 of an f32 [64] buffer in LAY holding x, carried by a loop whose body yields
    A.. on odd steps, B.. on even ones (a branch): step i reads its view into out[i] (STORE=0) or
    writes y[i] through it (STORE=1; the buffer read back into out after the loop)."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1], [W], [1], [0])
    L: gl.constexpr = gl.BlockedLayout([1], [W], [1], [0])
    buf = gl.allocate_shared_memory(gl.float32, [64], LAY, gl.load(x_ptr + gl.arange(0, 64, F)))
    c = buf.slice(A, 8, 0)
    for i in gl.range(0, n):
        if STORE:
            c.store(gl.load(y_ptr + i * 8 + gl.arange(0, 8, L)))
        else:
            gl.store(out_ptr + i * 8 + gl.arange(0, 8, L), c.load(L))
        w = buf.slice(A, 8, 0)
        with gl.if_((i + 1) % 2 == 1):
            w = buf.slice(B, 8, 0)
        c = w
    if STORE:
        gl.store(out_ptr + gl.arange(0, 64, F), buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lay", [gl.SwizzledSharedLayout(4, 4, 1, [0]), gl.SwizzledSharedLayout(1, 1, 4, [0])],
                         ids=["plain", "swizzled"])
@pytest.mark.parametrize("ab", [(0, 5), (32, 37), (0, 1), (8, 2)])
@pytest.mark.parametrize("store", [0, 1])
def test_a_loop_carried_view_leaving_an_aligned_start(target, lay, ab, store):
    """Found by the views preset's loop-carried views (seed 3005): from A (a multiple of the length)
    to B inside the period, the steps after the first read or wrote at A on AMD."""
    rng = np.random.default_rng()
    x, y, n = rng.standard_normal(64).astype(np.float32), rng.standard_normal(24).astype(np.float32), 3
    starts = [ab[i % 2] for i in range(n)]
    if store:
        exp = x.copy()
        for i, s in enumerate(starts):
            exp[s:s + 8] = y[i * 8:i * 8 + 8]
    else:
        exp = np.concatenate([x[s:s + 8] for s in starts])
    ref, sim, _ = both(carried_from_an_aligned_start, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), n],
                       target, num_warps=1, LAY=lay, A=ab[0], B=ab[1], STORE=store)
    assert np.array_equal(ref[2], exp) and np.array_equal(sim[2], exp), (ab, store)


@gt.jit
def swapped_slots_then_a_size1_dim(x_ptr, out_ptr, n):
    """An f32 [16, 4, 1] buffer holding x; a loop swaps its column slots .slice(0, 2, 1) and
    .slice(1, 2, 1) (starts 0 and 1: a run-time start in dim 1) and reads the current one into
    out[i] [16, 2, 1]."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1, 1], [W // 4, 4, 1], [1, 1, 1], [2, 1, 0])
    L: gl.constexpr = gl.BlockedLayout([1, 1, 1], [16, 2, W // 32], [1, 1, 1], [2, 1, 0])
    rf = gl.arange(0, 16, gl.SliceLayout(1, gl.SliceLayout(2, F)))[:, None, None] * 4 + \
        gl.arange(0, 4, gl.SliceLayout(0, gl.SliceLayout(2, F)))[None, :, None]
    buf = gl.allocate_shared_memory(gl.float32, [16, 4, 1], gl.SwizzledSharedLayout(1, 4, 1, [2, 1, 0]),
                                    gl.load(x_ptr + rf))
    ro = gl.arange(0, 16, gl.SliceLayout(1, gl.SliceLayout(2, L)))[:, None, None] * 2 + \
        gl.arange(0, 2, gl.SliceLayout(0, gl.SliceLayout(2, L)))[None, :, None]
    c, d = buf.slice(0, 2, 1), buf.slice(1, 2, 1)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 32 + ro, c.load(L))
        c, d = d, c


@pytest.mark.parametrize("target", TARGETS)
def test_swapped_slots_then_a_size1_dim(target):
    """Found by the views preset (seed 3366, gfx1100): dim 2 (size 1, no thread bits) after dim 0's
    register part in the run-time-start address XORed an immediate into a register as an immediate
    (AttributeError: 'Reg' object has no attribute 'bits')."""
    x, n = np.random.default_rng().standard_normal(64).astype(np.float32), 3
    exp = np.concatenate([x.reshape(16, 4)[:, s:s + 2].reshape(-1) for s in (0, 1, 0)])
    ref, sim, _ = both(swapped_slots_then_a_size1_dim, lambda: [x.copy(), np.full(96, np.nan, np.float32), n],
                       target, num_warps=1)
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)


@gt.jit
def ring_of_padded_rows(x_ptr, out_ptr, n, SLOTS: gl.constexpr):
    """An f16 [4, 8] buffer (rows padded every 4 elements: a slot's stride 20 bytes) holding x; a
    loop reads slot i % SLOTS (buf.index, a run-time slot after the first) into out[i] [8]."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    L: gl.constexpr = gl.BlockedLayout([8], [W], [1], [0])
    rf = gl.arange(0, 4, gl.SliceLayout(1, F))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.float16, [4, 8], gl.PaddedSharedLayout.with_identity_for([[4, 1]], [8], [0]),
                                    gl.load(x_ptr + rf))
    c = buf.index(0)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 8 + gl.arange(0, 8, L), c.load(L))
        c = buf.index((i + 1) % SLOTS)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("slots", [2, 3, 4])
def test_a_ring_of_slots_less_aligned_than_the_first(target, slots):
    """Found by the views preset (seeds 3017, 3193, 3271): the loop predicted a run-time slot's
    address as aligned as slot 0's (16 bytes), the body's was the stride's (4), and was refused."""
    x, n = np.random.default_rng().standard_normal(32).astype(np.float16), 5
    exp = np.concatenate([x[(i % slots) * 8:(i % slots) * 8 + 8] for i in range(n)])
    ref, sim, _ = both(ring_of_padded_rows, lambda: [x.copy(), np.full(8 * n, np.nan, np.float16), n], target,
                       num_warps=1, SLOTS=slots)
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)


@gt.jit
def branch_between_columns(x_ptr, out_ptr, n, LAY: gl.constexpr, A: gl.constexpr, B: gl.constexpr):
    """An f16 [32, 8] buffer in LAY holding x; a loop reads column A or B (a branch picks the next:
    B on odd steps) of rows 15..30 into out[i] [16, 1]."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    L: gl.constexpr = gl.BlockedLayout([1, 1], [16, W // 16], [1, 1], [1, 0])
    rf = gl.arange(0, 32, gl.SliceLayout(1, F))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.float16, [32, 8], LAY, gl.load(x_ptr + rf))
    rows = buf.slice(15, 16, 0)
    ro = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] + gl.zeros([16, 1], gl.int32, L)
    c = rows.slice(A, 1, 1)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 16 + ro, c.load(L))
        w = rows.slice(A, 1, 1)
        with gl.if_((i + 1) % 2 == 1):
            w = rows.slice(B, 1, 1)
        c = w


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lay", [gl.NVMMASharedLayout.get_default_for([32, 8], gl.float16),
                                 gl.SwizzledSharedLayout(1, 1, 1, [1, 0])], ids=["nvmma", "plain"])
@pytest.mark.parametrize("ab", [(0, 3), (0, 6), (2, 5)])
def test_a_branch_between_columns_in_a_loop(target, lay, ab):
    """Found by the views preset (seed 3357): the branch carries column B's table with its origin
    (the column) moved into the address, 2 or 4 bytes aligned; the loop predicted the arms as they
    are (rows 15.. keep their origin in the table: 16 bytes) and refused its own body. From column
    2 the loop itself joins with an XOR of nothing, and took the first's alignment (4 bytes)."""
    x, n = np.random.default_rng().standard_normal(256).astype(np.float16), 5
    exp = np.concatenate([x.reshape(32, 8)[15:31, ab[i % 2]] for i in range(n)])
    ref, sim, _ = both(branch_between_columns, lambda: [x.copy(), np.full(16 * n, np.nan, np.float16), n], target,
                       num_warps=1, LAY=lay, A=ab[0], B=ab[1])
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)


@gt.jit
def stacked_columns(x_ptr, out_ptr, REGS: gl.constexpr, LAY: gl.constexpr, START: gl.constexpr):
    """A u8 [4, 1, 64] buffer (4 stacked [1, 64] ones in LAY) holding x; columns START..START+7,
    permuted to [4, 8, 1], read into out in a layout whose lanes 2 and 4 both set the stacked
    coordinate's bit 1 (bases [2, 1, 0] and [2, 0, 0]; with REGS, [3, 0, 0] and a register)."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1, 1], [1, 1, W], [1, 1, 1], [2, 1, 0])
    rf = gl.arange(0, 4, gl.SliceLayout(1, gl.SliceLayout(2, F)))[:, None, None] * 64 + \
        gl.arange(0, 64, gl.SliceLayout(0, gl.SliceLayout(1, F)))[None, None, :]
    buf = gl.allocate_shared_memory(gl.uint8, [4, 1, 64], LAY, gl.load(x_ptr + rf))
    v = buf.slice(START, 8, 2).permute([0, 2, 1])
    lanes: gl.constexpr = [[0, 2, 0], [1, 0, 0], [2, 1, 0]] + \
        ([[0, 0, 0], [3, 0, 0]] if REGS else [[0, 6, 0], [2, 0, 0]]) + [[0, 0, 0]] * (W // 64)
    L: gl.constexpr = gl.DistributedLinearLayout(reg_bases=[[0, 4, 0]] if REGS else [], lane_bases=lanes,
                                                 warp_bases=[], block_bases=[], shape=[4, 8, 1])
    ro = gl.arange(0, 4, gl.SliceLayout(1, gl.SliceLayout(2, L)))[:, None, None] * 8 + \
        gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(2, L)))[None, :, None]
    gl.store(out_ptr + ro, v.load(L))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lay", [gl.NVMMASharedLayout.get_default_for([1, 64], gl.uint8),
                                 gl.SwizzledSharedLayout(1, 1, 1, [1, 0])], ids=["nvmma", "plain"])
@pytest.mark.parametrize("start", [0, 55])
@pytest.mark.parametrize("regs", [0, 1])
def test_a_slice_in_a_layout_mixing_stacked_coordinates(target, lay, start, regs):
    """Found by the views preset (seed 3159, gfx1100): the stacked coordinate is the XOR of the
    lanes' (lanes 2 and 4 both set its bit 1), not their sum; a slice from column 55 was refused.
    Start 0 (an aligned slice, lowered before) checks the same layouts."""
    x = np.random.default_rng().integers(0, 256, 256).astype(np.uint8)
    exp = x.reshape(4, 64)[:, start:start + 8].reshape(-1)
    ref, sim, _ = both(stacked_columns, lambda: [x.copy(), np.zeros(32, np.uint8)], target, num_warps=1,
                       REGS=regs, LAY=lay, START=start)
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)


@gt.jit
def swapped_rows_sliced(x_ptr, out_ptr, n, LAY: gl.constexpr, START: gl.constexpr):
    """An f32 [4, 32] buffer in LAY holding x; a loop swaps its rows 1 and 0 (.slice(1, 1, 0) and
    .slice(0, 1, 0)) and reads columns START..START+15 of the current one into out[i]."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1], [1, W], [1, 1], [1, 0])
    L: gl.constexpr = gl.BlockedLayout([1, 2], [1, W], [1, 1], [1, 0])
    rf = gl.arange(0, 4, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [4, 32], LAY, gl.load(x_ptr + rf))
    ro = gl.arange(0, 1, gl.SliceLayout(1, L))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, L))[None, :]
    c, d = buf.slice(1, 1, 0), buf.slice(0, 1, 0)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 16 + ro, c.slice(START, 16, 1).load(L))
        c, d = d, c


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lay", [gl.SwizzledSharedLayout(2, 2, 2, [1, 0]), gl.SwizzledSharedLayout(1, 1, 2, [1, 0]),
                                 gl.SwizzledSharedLayout(4, 1, 8, [1, 0])], ids=["same_phase", "xor1", "xor4"])
@pytest.mark.parametrize("start", [15, 3, 0])
def test_swapped_rows_sliced_inside_the_period(target, lay, start):
    """Found by the views preset (seeds 3181 on gfx942, 3251 on gfx1100): rows 1 and 0 in one
    swizzle phase are carried with row 1's origin in the address, in different phases with a
    run-time XOR; a slice from column 15 or 3 was refused. Start 0 (lowered before) checks the same
    loops."""
    x, n = np.random.default_rng().standard_normal(128).astype(np.float32), 3
    exp = np.concatenate([x.reshape(4, 32)[r, start:start + 16] for r in (1, 0, 1)])
    ref, sim, _ = both(swapped_rows_sliced, lambda: [x.copy(), np.full(48, np.nan, np.float32), n], target,
                       num_warps=1, LAY=lay, START=start)
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)


@gt.jit
def swapped_columns(x_ptr, out_ptr, n, A: gl.constexpr, B: gl.constexpr):
    """An f64 [16, 8] buffer (swizzled in pairs over rows in fours) holding x; a loop swaps its
    columns A and B, reading the current one into out[i] [16, 1]."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    L: gl.constexpr = gl.BlockedLayout([2, 1], [16, W // 16], [1, 1], [1, 0])
    rf = gl.arange(0, 16, gl.SliceLayout(1, F))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.float64, [16, 8], gl.SwizzledSharedLayout(2, 4, 4, [1, 0]), gl.load(x_ptr + rf))
    ro = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] + gl.zeros([16, 1], gl.int32, L)
    c, d = buf.slice(A, 1, 1), buf.slice(B, 1, 1)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 16 + ro, c.load(L))
        c, d = d, c


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ab", [(6, 5), (4, 5), (2, 3), (0, 1)])
def test_swapped_columns_less_aligned_than_the_first(target, ab):
    """Found by the views preset (seed 3477, gfx942): columns 6 and 5 (or 4 and 5, 2 and 3) carried
    with a run-time XOR, the address 16 then 8 bytes aligned: the loop took the first's alignment
    and refused its body. (Columns 0 and 1, lowered before, check the same loop.)"""
    x, n = np.random.default_rng().standard_normal(128), 3
    exp = np.concatenate([x.reshape(16, 8)[:, ab[i % 2]] for i in range(n)])
    ref, sim, _ = both(swapped_columns, lambda: [x.copy(), np.full(48, np.nan), n], target, num_warps=1, A=ab[0], B=ab[1])
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)

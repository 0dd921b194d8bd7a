"""More LDS views the fuzzer's 'views' preset found the AMD backend failing on (the first ones are in
test_amd_lds_views_fuzz_found.py), each on amdsim against the interpreter, on fresh random inputs:

- column slices of a padded buffer a loop carries (run-time start inside a padding period), stored
  and read in a layout whose lanes mix the stacked rows' coordinate bits (lane bases [1, 0] and
  [3, 0]): the stacked dim's coordinate splits as an XOR (Access._coord_lead), which the run-time
  start's address did not model, so the view was refused ("not addressable as thread part +
  register part for every start it may take", seed 3873, gfx942);
- columns of stacked swizzled (NVMMA) buffers a loop swaps (run-time start inside the swizzle
  period), read and written in such a layout (lane bases [1, 1, 0] and [1, 0, 0]): the run-time
  coordinate start's split took stacked dims only as sums of the bases' strides (refused, seed 6114,
  gfx942, from the campaign over seeds 5000..6799);
- a padded row's columns from inside the padding period (columns 1..8, padded every 8), two lanes
  and four registers a row: the start plus the thread part carried into a register's bit (refused,
  "not addressable as thread part + register part", seed 6975, gfx942);
- (the 'stacked' preset) a loop body whose first branch picks the carried columns again before a
  later one picks columns a byte less aligned: that first join is plain, its home only as aligned
  as its arms, which the loop's look-ahead did not see (refused, 'less aligned than its first
  value', seed 300037, gfx942; also 300363, 300514, 300652, 400126, 400398, 400403, 400594).
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
def carried_columns_mixed_rows(x_ptr, y_ptr, out_ptr, buf_ptr, n, REGS: gl.constexpr):
    """An f16 [32, 4] buffer (32 stacked rows of 4, padded one element every 2: a row's stride 10
    bytes) holding x; a loop carries buf.slice(s, 2, 1), s = 0, 1, 2, 0, ... (picked by branches),
    and at step i reads its column 1 (buffer column s + 1) into out[i], then stores y[i] there,
    both in a layout whose lanes mix row bits (lanes 1 and 3 set row bit 0 both; with REGS a
    register holds rows 12 apart, its bit 2 shared with a lane's). The buffer goes to buf_out."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 4], [W // 2, 2], [1, 1], [1, 0])
    if REGS:
        lanes: gl.constexpr = [[1, 0], [3, 0], [4, 0], [16, 0], [0, 0]]
        regs: gl.constexpr = [[12, 0]]
    else:
        lanes: gl.constexpr = [[1, 0], [3, 0], [4, 0], [12, 0], [16, 0]]
        regs: gl.constexpr = []
    M: gl.constexpr = gl.DistributedLinearLayout(reg_bases=regs, lane_bases=lanes + [[0, 0]] * (W // 64),
                                                 warp_bases=[], block_bases=[], shape=[32, 1])
    rf = gl.arange(0, 32, gl.SliceLayout(1, F))[:, None] * 4 + gl.arange(0, 4, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.float16, [32, 4], gl.PaddedSharedLayout.with_identity_for([[2, 1]], [4], [0]),
                                    gl.load(x_ptr + rf))
    rm = gl.arange(0, 32, gl.SliceLayout(1, M))[:, None] + gl.zeros([32, 1], gl.int32, M)
    c = buf.slice(0, 2, 1)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 32 + rm, c.slice(1, 1, 1).load(M))
        c.slice(1, 1, 1).store(gl.load(y_ptr + i * 32 + rm))
        nxt = buf.slice(0, 2, 1)
        with gl.if_((i + 1) % 3 == 1):
            nxt = buf.slice(1, 2, 1)
        with gl.if_((i + 1) % 3 == 2):
            nxt = buf.slice(2, 2, 1)
        c = nxt
    gl.store(buf_ptr + rf, buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("regs", [0, 1])
def test_carried_padded_columns_in_a_layout_mixing_rows(target, regs):
    """Found by the views preset (seed 3873, gfx942): refused, the run-time start's address had no
    form for stacked coordinates split as XORs; it now adds their bytes, made at the kernel entry."""
    rng = np.random.default_rng()
    n = 5
    x = rng.standard_normal(128).astype(np.float16)
    y = rng.standard_normal(32 * n).astype(np.float16)
    b, out = x.reshape(32, 4).copy(), np.empty((n, 32), np.float16)
    for i in range(n):
        out[i] = b[:, i % 3 + 1]
        b[:, i % 3 + 1] = y[i * 32:(i + 1) * 32]
    ref, sim, _ = both(carried_columns_mixed_rows,
                       lambda: [x.copy(), y.copy(), np.full(32 * n, np.nan, np.float16),
                                np.full(128, np.nan, np.float16), n], target, num_warps=1, REGS=regs)
    for got in (ref, sim):
        assert np.array_equal(got[2], out.reshape(-1)) and np.array_equal(got[3], b.reshape(-1))


@gt.jit
def swapped_columns_mixed_stacks(x_ptr, y_ptr, out_ptr, buf_ptr, n, LAY: gl.constexpr, REGS: gl.constexpr):
    """A u16 [2, 4, 32] buffer (2 stacked [4, 32] ones in LAY) holding x, viewed as columns 15..22;
    a loop swaps its columns 2..3 and 0..2 (buffer columns 17.. and 15..: inside the swizzle
    period), and at step i reads rows 0..1 of the carried one's column 1 (buffer column 18, then 16,
    ...) into out[i] [2, 2, 1], then stores y[i] there, both in a layout whose lanes 1 and 2 set the
    stacked coordinate both (bases [1, 1, 0] and [1, 0, 0]; with REGS a register sets it, and a lane
    it and row 1). The buffer goes to buf_out."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1, 1], [1, 1, W], [1, 1, 1], [2, 1, 0])
    if REGS:
        lanes: gl.constexpr = [[1, 1, 0]] + [[0, 0, 0]] * (4 + W // 64)
        regs: gl.constexpr = [[1, 0, 0]]
    else:
        lanes: gl.constexpr = [[1, 1, 0], [1, 0, 0]] + [[0, 0, 0]] * (3 + W // 64)
        regs: gl.constexpr = []
    M: gl.constexpr = gl.DistributedLinearLayout(reg_bases=regs, lane_bases=lanes, warp_bases=[], block_bases=[],
                                                 shape=[2, 2, 1])
    rf = gl.arange(0, 2, gl.SliceLayout(1, gl.SliceLayout(2, F)))[:, None, None] * 128 + \
        gl.arange(0, 4, gl.SliceLayout(0, gl.SliceLayout(2, F)))[None, :, None] * 32 + \
        gl.arange(0, 32, gl.SliceLayout(0, gl.SliceLayout(1, F)))[None, None, :]
    buf = gl.allocate_shared_memory(gl.uint16, [2, 4, 32], LAY, gl.load(x_ptr + rf))
    p = buf.slice(15, 8, 2)
    ro = gl.arange(0, 2, gl.SliceLayout(1, gl.SliceLayout(2, M)))[:, None, None] * 2 + \
        gl.arange(0, 2, gl.SliceLayout(0, gl.SliceLayout(2, M)))[None, :, None]
    c = p.slice(2, 2, 2)
    d = p.slice(0, 2, 2)
    for i in gl.range(0, n):
        v = c.slice(0, 2, 1).slice(1, 1, 2)
        gl.store(out_ptr + i * 4 + ro, v.load(M))
        v.store(gl.load(y_ptr + i * 4 + ro))
        c, d = d, c
    gl.store(buf_ptr + rf, buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lay", [gl.NVMMASharedLayout.get_default_for([4, 32], gl.uint16),
                                 gl.SwizzledSharedLayout(2, 2, 4, [1, 0])], ids=["nvmma", "swizzled"])
@pytest.mark.parametrize("regs", [0, 1])
def test_swapped_columns_in_a_layout_mixing_stacked_coordinates(target, lay, regs):
    """Found by the views preset (seed 6114, gfx942): refused, the run-time start's coordinate split
    had no form for stacked coordinates split as XORs; it now adds their bytes, made at the kernel
    entry, as the compile-time start's split does."""
    rng = np.random.default_rng()
    n = 5
    x = rng.integers(0, 1 << 16, 256).astype(np.uint16)
    y = rng.integers(0, 1 << 16, 4 * n).astype(np.uint16)
    b, out = x.reshape(2, 4, 32).copy(), np.empty((n, 2, 2), np.uint16)
    for i in range(n):
        col = 18 if i % 2 == 0 else 16
        out[i] = b[:, 0:2, col]
        b[:, 0:2, col] = y[i * 4:(i + 1) * 4].reshape(2, 2)
    ref, sim, _ = both(swapped_columns_mixed_stacks,
                       lambda: [x.copy(), y.copy(), np.full(4 * n, 0xA5A5, np.uint16), np.full(256, 0xA5A5, np.uint16), n],
                       target, num_warps=1, LAY=lay, REGS=regs)
    for got in (ref, sim):
        assert np.array_equal(got[2], out.reshape(-1)) and np.array_equal(got[3], b.reshape(-1))


@gt.jit
def padded_row_columns(x_ptr, y_ptr, out_ptr, buf_ptr, START: gl.constexpr):
    """An f16 [2, 16] buffer padded 4 elements every 8 holding x; row 1's columns START..START+7 read
    into out [1, 8], then y stored there, both in a layout with a lane on column bit 0 and registers
    on bits 1 and 2 (the start plus the thread's and one register's columns carry into the other
    register's bit). The buffer goes to buf_out."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 4], [W // 4, 4], [1, 1], [1, 0])
    L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 2, 2], [1, 1], [1, 0])
    rf = gl.arange(0, 2, gl.SliceLayout(1, F))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.float16, [2, 16], gl.PaddedSharedLayout.with_identity_for([[8, 4]], [2, 16],
                                                                                                [1, 0]),
                                    gl.load(x_ptr + rf))
    v = buf.slice(1, 1, 0).slice(START, 8, 1)
    ro = gl.arange(0, 8, gl.SliceLayout(0, L))[None, :] + gl.zeros([1, 8], gl.int32, L)
    gl.store(out_ptr + ro, v.load(L))
    v.store(gl.load(y_ptr + ro))
    gl.store(buf_ptr + rf, buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("start", [1, 3, 5, 7, 0, 8])
def test_padded_columns_whose_start_carries_into_a_register(target, start):
    """Found by the views preset (seed 6975, gfx942): a bf16 row's columns 1..8 of a buffer padded
    every 8, stored two lanes and four registers a row: the start plus the thread part (register
    bit 1 joined) carried into register bit 2's, so no split reproduced the addresses (refused);
    those bits now join the thread part, as for a run-time start. Starts 3, 5 and 7 (split before
    without that carry) and 0 and 8 (aligned) check the same layout."""
    rng = np.random.default_rng()
    x = rng.standard_normal(32).astype(np.float16)
    y = rng.standard_normal(8).astype(np.float16)
    b = x.reshape(2, 16).copy()
    out = b[1, start:start + 8].copy()
    b[1, start:start + 8] = y
    ref, sim, _ = both(padded_row_columns,
                       lambda: [x.copy(), y.copy(), np.full(8, np.nan, np.float16), np.full(32, np.nan, np.float16)],
                       target, num_warps=1, START=start)
    for got in (ref, sim):
        assert np.array_equal(got[2], out) and np.array_equal(got[3], b.reshape(-1))


# -- a loop body's branches picking the first view again before a less aligned one -----------------
@gt.jit
def repicked_columns(x_ptr, y_ptr, out_ptr, n, STARTS: gl.constexpr, LAY: gl.constexpr):
    """An i8 [4, 4, 4] buffer in LAY holding x; a loop carries columns STARTS[0]..+1 of it
    (buf[:, :, s:s + 2]) and at step i reads their first column into out[i], stores y[i] there,
    then picks STARTS[(i + 1) % K] by a chain of branches (`(i + 1) % K == k`). The buffer goes to
    out[n]."""
    W: gl.constexpr = gl.threads_per_warp()
    K: gl.constexpr = len(STARTS)
    F: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, 4, W // 4], [1, 1, 1], [2, 1, 0])
    rf = gl.arange(0, 4, gl.SliceLayout(1, gl.SliceLayout(2, F)))[:, None, None] * 16 + \
        gl.arange(0, 4, gl.SliceLayout(0, gl.SliceLayout(2, F)))[None, :, None] * 4 + \
        gl.arange(0, 4, gl.SliceLayout(0, gl.SliceLayout(1, F)))[None, None, :]
    M: gl.constexpr = gl.BlockedLayout([1, 1, 1], [1, 4, W // 4], [1, 1, 1], [2, 1, 0])
    ro = gl.arange(0, 4, gl.SliceLayout(1, gl.SliceLayout(2, M)))[:, None, None] * 4 + \
        gl.arange(0, 4, gl.SliceLayout(0, gl.SliceLayout(2, M)))[None, :, None] + \
        gl.arange(0, 1, gl.SliceLayout(0, gl.SliceLayout(1, M)))[None, None, :]
    buf = gl.allocate_shared_memory(gl.int8, [4, 4, 4], LAY, gl.load(x_ptr + rf))
    c = buf.slice(STARTS[0], 2, 2)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 16 + ro, c.slice(0, 1, 2).load(M))
        c.slice(0, 1, 2).store(gl.load(y_ptr + i * 16 + ro))
        nxt = buf.slice(STARTS[0], 2, 2)
        for k in gl.static_range(1, K):
            with gl.if_((i + 1) % K == k):
                nxt = buf.slice(STARTS[k], 2, 2)
        c = nxt
    gl.store(out_ptr + n * 16 + rf, buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("starts", [(2, 2, 1), (2, 2, 2, 1), (2, 1, 1)])
@pytest.mark.parametrize("nvmma", [0, 1])
def test_carried_columns_repicked_before_a_less_aligned_one(target, starts, nvmma):
    """Found by the stacked preset (seed 300037, gfx942): a loop body's first branch picks the
    columns the loop started with (2..3) again, a later one columns 1..2 (one byte less aligned).
    The first branch's join is plain (one table), its home only as aligned as its arms, but the
    loop's look-ahead (lds_join_predict._static_align) predicted that branch in the form the
    loop carries (a run-time start, as aligned as the buffer), so the body's yield was refused as
    'less aligned than its first value'. (2, 1, 1) compiled before."""
    lay = gl.NVMMASharedLayout.get_default_for([4, 4], gl.int8) if nvmma else gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    rng = np.random.default_rng()
    n = 5
    x = rng.integers(-100, 100, 64).astype(np.int8)
    y = rng.integers(-100, 100, 16 * n).astype(np.int8)
    b, out = x.reshape(4, 4, 4).copy(), []
    for i in range(n):
        col = starts[i % len(starts)]
        out.append(b[:, :, col].reshape(-1).copy())
        b[:, :, col] = y[i * 16:(i + 1) * 16].reshape(4, 4)
    exp = np.concatenate(out + [b.reshape(-1)])
    ref, sim, _ = both(repicked_columns, lambda: [x.copy(), y.copy(), np.full(exp.size, 127, np.int8), n], target,
                       num_warps=1, STARTS=starts, LAY=lay)
    assert np.array_equal(ref[2], exp) and np.array_equal(sim[2], exp)

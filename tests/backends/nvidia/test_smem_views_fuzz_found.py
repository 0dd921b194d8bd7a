"""Shared-memory views the fuzzer's 'views' preset (FuzzConfig(unaligned_views=True): slices from
inside swizzle and padding periods) found the NVIDIA backend refusing or mis-addressing, each on
the PTX simulator with the race detector against the interpreter, on fresh random inputs:

- rows 29.. of a padded buffer (inside a padding period) with a register bit above the lanes'
  and warps' row bits: the start + thread sum carried past the bits it covered (refused);
- a branch between padded views starting at one point inside a period, whole periods apart
  (refused as if a swizzled start changed inside its period);
- length-1 column slices of a transposed NVMMA buffer, whose table relative to its first element
  is XOR-linear only with a negative bit offset: addressed outside shared memory;
- a loop carrying a slice of a buffer whose table is XOR-linear, its body picking the next by a
  branch among slices less aligned than the one entering (elements 2.. then 3.. of f16): the
  branch's predicted join took its first arm's alignment, so the loop refused its own body
  ('less aligned than its first value');
- a loop carrying slots 1 and 3 of a swizzled buffer (its whole address in the register) whose
  body slices rows from inside the swizzle period: no slot starts at the constant the loop keeps
  (0), so the carried view had no buffer coordinates and the slice was refused ('does not place
  elements XOR-linearly', seed 3117);
- a loop carrying a padded view at a run-time start, its body picking the next among four by
  three branches: the first branch, between two starts of one table (elements 1.. and 2..), kept
  the address alone, and the next, adding elements 3.., refused it ('placed differently', seed
  3394);
- a loop carrying a column of a swizzled tile, its body picking column 0 or the next by a branch
  (their offsets differ by an XOR known only at run time) and reading rows from inside the
  swizzle period of it: refused ('neither its table XOR a constant nor its table moved by whole
  swizzle periods', seed 3633).
"""
import os
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

sys.path.insert(0, os.path.dirname(__file__))
pytest.importorskip("gluon_trace.backends.nvidia")
from smem_runner import both  # noqa: E402

TARGETS = ["sm_90", "sm_80"]


@gt.jit
def padded_rows_past_the_period(x_ptr, out_ptr, SPT: gl.constexpr, TPW: gl.constexpr, WPC: gl.constexpr):
    """An int64 [64, 1, 2] buffer padded after every 2 and 16 elements holding x, viewed as
    .slice(0, 1, 2).slice(29, 32, 0).permute([2, 1, 0]) (rows 29..60 of column 0, from inside
    a padding period), read in Blocked(SPT, TPW, WPC) into out [32]."""
    F: gl.constexpr = gl.BlockedLayout([1, 1, 1], [32, 1, 1], [1, 1, 4], [2, 1, 0])
    rf = gl.arange(0, 64, gl.SliceLayout(1, gl.SliceLayout(2, F)))[:, None, None] * 2 + \
        gl.arange(0, 2, gl.SliceLayout(0, gl.SliceLayout(1, F)))[None, None, :]
    buf = gl.allocate_shared_memory(gl.int64, [64, 1, 2], gl.PaddedSharedLayout.with_identity_for(
        [[2, 1], [16, 4]], [64, 1, 2], [2, 1, 0]), gl.load(x_ptr + rf))
    v = buf.slice(0, 1, 2).slice(29, 32, 0).permute([2, 1, 0])
    L: gl.constexpr = gl.BlockedLayout(SPT, TPW, WPC, [2, 1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(0, gl.SliceLayout(1, L)))[None, None, :] + gl.zeros([1, 1, 32], gl.int32, L)
    gl.store(out_ptr + r, v.load(L))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("spt, tpw, wpc", [([1, 1, 4], [4, 4, 2], [1, 2, 2]), ([1, 1, 1], [4, 4, 2], [1, 2, 2]),
                                           ([1, 1, 4], [1, 1, 32], [1, 1, 4])])
def test_padded_slice_whose_register_bits_carry_past_the_thread_sum(target, spt, tpw, wpc):
    """Found by the fuzzer's views preset: rows 29.. (inside a padding period) with a register
    bit above the lanes' and warps' row bits: the sum start + (thread ^ register bits) carries
    past the bits the thread sum covered, refused ('does not place elements XOR-linearly')."""
    x = np.random.default_rng().integers(-2 ** 40, 2 ** 40, 128)
    ref, sim, _ = both(padded_rows_past_the_period, lambda: [x.copy(), np.zeros(32, np.int64)], target,
                       SPT=spt, TPW=tpw, WPC=wpc)
    exp = x.reshape(64, 2)[29:61, 0]
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)


@gt.jit
def padded_branch_whole_periods(x_ptr, out_ptr, flag, COLS: gl.constexpr):
    """An int32 [64, 4] buffer padded by 2 after every 16 elements, rows fastest, holding x.
    COLS=1: rows 25..40 (inside a padding period), then columns 0..1 or, flag > 0, 2..3 (128
    elements, whole periods, further); COLS=0: rows 9..24 or, flag > 0, rows 41..56 (32 rows
    further) of all columns. Read into out."""
    F: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 1], [0, 1])
    rf = gl.arange(0, 64, gl.SliceLayout(1, F))[:, None] + gl.arange(0, 4, gl.SliceLayout(0, F))[None, :] * 64
    buf = gl.allocate_shared_memory(gl.int32, [64, 4], gl.PaddedSharedLayout.with_identity_for(
        [[16, 2]], [64, 4], [0, 1]), gl.load(x_ptr + rf))
    if COLS:
        p = buf.slice(25, 16, 0)
        v = p.slice(0, 2, 1)
        with gl.if_(flag > 0):
            v = p.slice(2, 2, 1)
    else:
        v = buf.slice(9, 16, 0)
        with gl.if_(flag > 0):
            v = buf.slice(41, 16, 0)
    shape: gl.constexpr = v.shape
    L: gl.constexpr = gl.BlockedLayout([2, 1], [16, 2], [1, 1], [0, 1])
    r = gl.arange(0, shape[0], gl.SliceLayout(1, L))[:, None] + \
        gl.arange(0, shape[1], gl.SliceLayout(0, L))[None, :] * shape[0]
    gl.store(out_ptr + r, v.load(L))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("cols", [1, 0], ids=["cols", "rows"])
@pytest.mark.parametrize("flag", [0, 1])
def test_padded_views_picked_by_a_branch_whole_periods_apart_from_inside_one(target, cols, flag):
    """Found by the fuzzer's views preset: a branch between padded views that start at the same
    point inside a padding period, whole periods apart (one table, two starts), was refused at
    the load as if a swizzled slice's start changed inside its period."""
    x = np.random.default_rng().integers(-2 ** 30, 2 ** 30, 256).astype(np.int32)
    X = x.reshape(4, 64).T  # [row, col]
    exp = (X[25:41, 2 * flag:2 * flag + 2] if cols else X[9 + 32 * flag:25 + 32 * flag, :]).T.reshape(-1)
    ref, sim, _ = both(padded_branch_whole_periods, lambda: [x.copy(), np.zeros(exp.size, np.int32), flag],
                       target, num_warps=1, COLS=cols)
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)


@gt.jit
def nvmma_column(x_ptr, out_ptr, START: gl.constexpr):
    """Column START (length 1) of a transposed-NVMMA f16 [16, 8] buffer holding x, read into out."""
    F: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [1, 1], [1, 0])
    rf = gl.arange(0, 16, gl.SliceLayout(1, F))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.float16, [16, 8], gl.NVMMASharedLayout.get_default_for(
        [16, 8], gl.float16, transposed=True), gl.load(x_ptr + rf))
    L: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] + gl.zeros([16, 1], gl.int32, L)
    gl.store(out_ptr + r, buf.slice(START, 1, 1).load(L))


def test_length1_columns_of_a_transposed_nvmma_buffer():
    """Found by the fuzzer's views preset (seed 248): column 4 of a transposed-NVMMA f16 [16, 8]
    buffer, 32-byte swizzled, sits at 128 + 2 * (row ^ 8); relative to its first element (144)
    that table is XOR-linear only with row bit 3 at -16, and the thread register XORing it went
    negative, the address (base + register + 144) leaving shared memory (columns 4..7)."""
    x = np.random.default_rng().standard_normal(128).astype(np.float16)
    for target in TARGETS:
        for start in range(8):
            ref, sim, text = both(nvmma_column, lambda: [x.copy(), np.zeros(16, np.float16)], target, num_warps=1,
                                  START=start)
            exp = x.reshape(16, 8)[:, start]
            assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp), (target, start)
            assert "-16" not in text


@gt.jit
def nvmma_columns(x_ptr, y_ptr, out_ptr, DT: gl.constexpr, R: gl.constexpr, C: gl.constexpr, TR: gl.constexpr,
                  DIM: gl.constexpr, START: gl.constexpr, LEN: gl.constexpr, STORE: gl.constexpr):
    """An NVMMA (transposed TR) DT [R, C] buffer holding x; its slice START..START+LEN of dim DIM
    read into out (STORE=0), or written from y and the whole buffer read into out (STORE=1)."""
    F: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [1, 1], [1, 0])
    rf = gl.arange(0, R, gl.SliceLayout(1, F))[:, None] * C + gl.arange(0, C, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(DT, [R, C], gl.NVMMASharedLayout.get_default_for([R, C], DT, transposed=TR),
                                    gl.load(x_ptr + rf))
    v = buf.slice(START, LEN, DIM)
    shape: gl.constexpr = v.shape
    L: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 1], [1, 0])
    r = gl.arange(0, shape[0], gl.SliceLayout(1, L))[:, None] * shape[1] + \
        gl.arange(0, shape[1], gl.SliceLayout(0, L))[None, :]
    if STORE:
        v.store(gl.load(y_ptr + r))
        gl.store(out_ptr + rf, buf.load(F))
    else:
        gl.store(out_ptr + r, v.load(L))


_NVMMA_DTYPES = [(gl.float16, np.float16, 16), (gl.float32, np.float32, 16), (gl.int8, np.int8, 32)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dt", range(len(_NVMMA_DTYPES)), ids=["f16", "f32", "i8"])
@pytest.mark.parametrize("tr", [True, False], ids=["transposed", "plain"])
@pytest.mark.parametrize("dim", [1, 0])
@pytest.mark.parametrize("length", [1, 2, 4])
@pytest.mark.parametrize("store", [0, 1], ids=["load", "store"])
def test_short_slices_of_an_nvmma_buffer(target, dt, tr, dim, length, store):
    """Neighbours of the case above: every slice of 1, 2 or 4 columns (rows) of an NVMMA buffer,
    either transposed setting, f16 [16, 8], f32 [16, 8], int8 [32, 8], loaded and stored."""
    gdt, ndt, R = _NVMMA_DTYPES[dt]
    C = 8
    rng = np.random.default_rng()
    x = (rng.integers(-100, 100, R * C) if ndt == np.int8 else rng.standard_normal(R * C)).astype(ndt)
    n = R if dim == 0 else C
    vshape = (length, C) if dim == 0 else (R, length)
    y = (rng.integers(-100, 100, vshape[0] * vshape[1]) if ndt == np.int8
         else rng.standard_normal(vshape[0] * vshape[1])).astype(ndt)
    for start in range(0, n - length + 1):
        out = np.zeros(R * C if store else y.size, ndt)
        ref, sim, _ = both(nvmma_columns, lambda: [x.copy(), y.copy(), out.copy()], target, num_warps=1,
                           DT=gdt, R=R, C=C, TR=tr, DIM=dim, START=start, LEN=length, STORE=store)
        X = x.reshape(R, C).copy()
        idx = (slice(start, start + length), slice(None)) if dim == 0 else (slice(None), slice(start, start + length))
        if store:
            X[idx] = y.reshape(vshape)
            exp = X.reshape(-1)
        else:
            exp = X[idx].reshape(-1)
        assert np.array_equal(ref[2], exp), (start, "interpreter")
        assert np.array_equal(sim[2], exp), (start, "ptxsim")


@gt.jit
def stepped_by_a_branch(x_ptr, y_ptr, out_ptr, n, DT: gl.constexpr, LAY: gl.constexpr, A: gl.constexpr,
                        STEP: gl.constexpr, STORE: gl.constexpr):
    """Elements A.. (8 of them) of a [64] buffer of DT in LAY holding x, carried by a loop whose body
    picks the next by a branch: step i's view starts at A + (i % 3) * STEP; it is read into out[i]
    (STORE=0) or y[i] is written through it (STORE=1; the buffer read back after the loop)."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1], [W], [1], [0])
    L: gl.constexpr = gl.BlockedLayout([2], [W], [1], [0])
    buf = gl.allocate_shared_memory(DT, [64], LAY, gl.load(x_ptr + gl.arange(0, 64, F)))
    c = buf.slice(A, 8, 0)
    for i in gl.range(0, n):
        if STORE:
            c.store(gl.load(y_ptr + i * 8 + gl.arange(0, 8, L)))
        else:
            gl.store(out_ptr + i * 8 + gl.arange(0, 8, L), c.load(L))
        w = buf.slice(A, 8, 0)
        with gl.if_((i + 1) % 3 == 1):
            w = buf.slice(A + STEP, 8, 0)
        with gl.if_((i + 1) % 3 == 2):
            w = buf.slice(A + 2 * STEP, 8, 0)
        c = w
    if STORE:
        gl.store(out_ptr + gl.arange(0, 64, F), buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("a, step", [(2, 1), (4, 2), (8, 3)])
@pytest.mark.parametrize("store", [0, 1])
def test_a_loop_carried_slice_stepped_to_less_aligned_starts(target, dtype, a, step, store):
    """Found by the views preset's loop-carried views (seed 3087, sm_90): refused, 'this loop's
    body yields a shared-memory view less aligned (2 bytes) than its first value (4)'."""
    rng = np.random.default_rng()
    x, y, n = rng.standard_normal(64).astype(dtype), rng.standard_normal(32).astype(dtype), 4
    starts = [a + (i % 3) * step for i in range(n)]
    if store:
        exp = x.copy()
        for i, s in enumerate(starts):
            exp[s:s + 8] = y[i * 8:i * 8 + 8]
    else:
        exp = np.concatenate([x[s:s + 8] for s in starts])
    DT = gl.float16 if dtype == np.float16 else gl.float32
    ref, sim, _ = both(stepped_by_a_branch, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, dtype), n],
                       target, num_warps=1, DT=DT, LAY=gl.SwizzledSharedLayout(1, 1, 1, [0]), A=a, STEP=step,
                       STORE=store)
    assert np.array_equal(ref[2], exp) and np.array_equal(sim[2], exp), (starts, store)


@gt.jit
def slot_rows_inside_the_period(x_ptr, out_ptr, n, LAY: gl.constexpr, R: gl.constexpr, PERM: gl.constexpr):
    """An f32 [4, 8, 8] buffer in LAY holding x; a loop carries slot 1 (.slice(1, 1, 0)), its body
    reading rows R..R+3 of it (through permutes with PERM) into out[i] and picking slot 1 or 3
    next by a branch."""
    F: gl.constexpr = gl.BlockedLayout([1, 1, 1], [1, 4, 8], [1, 1, 1], [2, 1, 0])
    rf = gl.arange(0, 4, gl.SliceLayout(1, gl.SliceLayout(2, F)))[:, None, None] * 64 + \
        gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(2, F)))[None, :, None] * 8 + \
        gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(1, F)))[None, None, :]
    buf = gl.allocate_shared_memory(gl.float32, [4, 8, 8], LAY, gl.load(x_ptr + rf))
    ro = gl.arange(0, 4, gl.SliceLayout(0, gl.SliceLayout(2, F)))[None, :, None] * 8 + \
        gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(1, F)))[None, None, :]
    c = buf.slice(1, 1, 0)
    for i in gl.range(0, n):
        if PERM:
            v = c.permute([1, 0, 2]).slice(R, 4, 0).permute([1, 0, 2])
        else:
            v = c.slice(R, 4, 1)
        gl.store(out_ptr + i * 32 + ro, v.load(F))
        w = buf.slice(1, 1, 0)
        with gl.if_((i + 1) % 2 == 1):
            w = buf.slice(3, 1, 0)
        c = w


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lay", [gl.SwizzledSharedLayout(1, 1, 4, [2, 1, 0]), gl.SwizzledSharedLayout(2, 1, 2, [2, 1, 0])],
                         ids=["phases4", "vec2"])
@pytest.mark.parametrize("r", [3, 1, 0])
@pytest.mark.parametrize("perm", [0, 1])
def test_rows_inside_the_period_of_a_carried_slot(target, lay, r, perm):
    """Found by the views preset (seed 3117, a permute of the carried view, then a slice): the loop
    keeps constant 0 (slots apart by a linear stride: the address in the register), no slot starts
    there, so the carried view lost its buffer coordinates; rows 3.. or 1.. were refused. Rows 0..
    (aligned, lowered before) check the same loop."""
    x, n = np.random.default_rng().standard_normal(256).astype(np.float32), 3
    exp = np.concatenate([x.reshape(4, 8, 8)[s, r:r + 4, :].reshape(-1) for s in (1, 3, 1)])
    ref, sim, _ = both(slot_rows_inside_the_period, lambda: [x.copy(), np.full(96, np.nan, np.float32), n], target,
                       num_warps=1, LAY=lay, R=r, PERM=perm)
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)


@gt.jit
def four_way_padded_starts(x_ptr, out_ptr, n, PADS: gl.constexpr, K: gl.constexpr):
    """An f16 [16] buffer padded by PADS holding x; a loop carries elements 1..K, reads them into
    out[i] and picks the next view among elements 1.., 2.., 3.., 4.. by three branches."""
    L: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    buf = gl.allocate_shared_memory(gl.float16, [16], gl.PaddedSharedLayout.with_identity_for(PADS, [16], [0]),
                                    gl.load(x_ptr + gl.arange(0, 16, L)))
    c = buf.slice(1, K, 0)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * K + gl.arange(0, K, L), c.load(L))
        w = buf.slice(1, K, 0)
        with gl.if_((i + 1) % 4 == 1):
            w = buf.slice(2, K, 0)
        with gl.if_((i + 1) % 4 == 2):
            w = buf.slice(3, K, 0)
        with gl.if_((i + 1) % 4 == 3):
            w = buf.slice(4, K, 0)
        c = w


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("pads", [[[4, 1]], [[8, 2], [4, 1]], [[2, 1]]], ids=["every4", "every4and8", "every2"])
@pytest.mark.parametrize("k", [2, 4])
def test_a_four_way_step_between_padded_starts(target, pads, k):
    """Found by the views preset (seed 3394): elements 1..2 and 2..3 of a buffer padded every 4
    have one table, so the first branch carried the address alone and the second, joining
    elements 3..4 (across a pad), refused it; the branches an enclosing join carries at a
    run-time start now carry it too. (Length 4 and padding every 2 were lowered before.)"""
    x, n = np.random.default_rng().standard_normal(16).astype(np.float16), 6
    exp = np.concatenate([x[1 + i % 4:1 + i % 4 + k] for i in range(n)])
    ref, sim, _ = both(four_way_padded_starts, lambda: [x.copy(), np.full(n * k, np.nan, np.float16), n], target,
                       num_warps=1, PADS=pads, K=k)
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)


@gt.jit
def xor_carried_rows_inside_the_period(x_ptr, out_ptr, n, C: gl.constexpr, W: gl.constexpr, LAY: gl.constexpr,
                                       R: gl.constexpr, NEXT: gl.constexpr, L: gl.constexpr, VIA: gl.constexpr):
    """An f16 [16, C] buffer in LAY holding x; a loop carries columns 0..W-1 (.slice(0, W, 1)),
    its body reading rows R..R+3 of them (in L; VIA: through .reshape([1, 4, W]).index(0)) into
    out[i] and picking columns 0.. or NEXT.. next by a branch."""
    F: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [1, 1], [1, 0])
    rf = gl.arange(0, 16, gl.SliceLayout(1, F))[:, None] * C + gl.arange(0, C, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.float16, [16, C], LAY, gl.load(x_ptr + rf))
    ro = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * W + gl.arange(0, W, gl.SliceLayout(0, L))[None, :]
    c = buf.slice(0, W, 1)
    for i in gl.range(0, n):
        v = c.slice(R, 4, 0)
        if VIA:
            v = v.reshape([1, 4, W]).index(0)
        gl.store(out_ptr + i * 4 * W + ro, v.load(L))
        w = buf.slice(0, W, 1)
        with gl.if_((i + 1) % 2 == 1):
            w = buf.slice(NEXT, W, 1)
        c = w


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("c, w, lay, nxt", [
    (2, 1, gl.SwizzledSharedLayout(1, 1, 2, [1, 0]), 1),
    (8, 2, gl.SwizzledSharedLayout(2, 1, 4, [1, 0]), 4),
    (8, 2, gl.SwizzledSharedLayout(2, 2, 4, [1, 0]), 2),
], ids=["phases2", "vec2phases4", "perphase2"])
@pytest.mark.parametrize("r", [9, 1, 3, 0])
@pytest.mark.parametrize("lay_l", ["lanes", "regs"])
@pytest.mark.parametrize("via", [0, 1])
def test_rows_inside_the_period_of_an_xor_carried_column(target, c, w, lay, nxt, r, lay_l, via):
    """Found by the views preset (seed 3633): the loop joins the columns with a run-time XOR X;
    rows from inside the swizzle period of that view are at swizzle(coordinate + start) ^ X, now
    lowered from the view's start with X on the thread's register (register parts under X's
    bits join it; a later .index keeps that start). Rows 0.. (aligned, lowered before) check the
    same loop."""
    L = gl.BlockedLayout([1, w], [4, 8], [1, 1], [1, 0]) if lay_l == "lanes" else \
        gl.BlockedLayout([4, w], [1, 32], [1, 1], [1, 0])
    x, n = np.random.default_rng().standard_normal(16 * c).astype(np.float16), 3
    x[x == 0] = 1
    exp = np.concatenate([x.reshape(16, c)[r:r + 4, s:s + w].reshape(-1) for s in (0, nxt, 0)])
    ref, sim, _ = both(xor_carried_rows_inside_the_period,
                       lambda: [x.copy(), np.full(n * 4 * w, np.nan, np.float16), n], target,
                       num_warps=1, C=c, W=w, LAY=lay, R=r, NEXT=nxt, L=L, VIA=via)
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)

"""Shared-memory views carried by a loop or chosen by a branch that the fuzzer's 'views' preset
(FuzzConfig(unaligned_views=True)) found the NVIDIA backend refusing, each on the PTX simulator
with the race detector against the interpreter, on fresh random inputs (more in
test_smem_views_fuzz_found.py):

- a loop carrying a column of a padded buffer (both columns one table: one register) and reading
  rows from inside a padding period of it: the carried view had dropped the buffer's linear
  indices, so those rows had no split (refused: 'does not place elements XOR-linearly', seed 426);
- a padded view at a run-time start whose rows are stacked slots, stored to from a layout whose
  lane bases mix the rows' bits: the slots' bytes were summed over the bases ('internal: the
  run-time padded address split disagrees', seed 543), and the same slots at a start known at
  compile time inside a padding period (refused);
- a loop carrying rows of a tile swizzled per row (a run-time XOR), its body picking rows less
  aligned than the one entering by branches: the loop and the predicted branch joins kept the
  first view's alignment (refused: 'less aligned than its first value', seeds 5078, 6329), and
  likewise columns of a swizzled tile carried at a run-time start (seed 22692);
- rows from inside the swizzle period of views whose buffer coordinates (Smem.coff) were lost to a
  constant offset: a slot indexed from a stacked start (.slice(1, 1, 0).index(0), its table
  XOR-linear), branched among at differing starts (refused: 'placed differently', seeds 8753,
  21097), and a loop carrying its view's whole address in the register (row 1 of a swizzled
  tile: no view of the buffer starts at the constant it keeps; refused: 'does not place elements
  XOR-linearly', seeds 10078, 31565); and a branch among such views (one table, its coordinates
  moved with the register) inside a join at a run-time start, which compared buffer tables
  exactly (refused: 'placed differently', seed 44829);
- a loop stepping among four padded starts whose first branch joins one table: the loop's
  prediction of that join lacked the linear indices the join keeps (refused: 'placed
  differently', seed 51142).
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


def read_or_write(c, L, ro, i, SIZE, y_ptr, out_ptr, STORE):
    """Step i of a loop carrying the view c: read it (in L, at offsets ro) into out[i] (STORE=0),
    or write y[i] through it (STORE=1); SIZE elements a step."""
    if STORE:
        c.store(gl.load(y_ptr + i * SIZE + ro))
    else:
        gl.store(out_ptr + i * SIZE + ro, c.load(L))


def expected_steps(buf, y, n, store, at):
    """out after n steps of read_or_write over the views at(buf, i) of buf (numpy views, written
    through): the views read one after another (store=0), or the buffer after y's pieces were
    written through them (store=1)."""
    got = []
    for i in range(n):
        v = at(buf, i)
        got.append(v.reshape(-1).copy())
        if store:
            v[...] = y[v.size * i:v.size * (i + 1)].reshape(v.shape)
    return buf.reshape(-1) if store else np.concatenate(got)


@gt.jit
def carried_column_rows_inside_the_period(x_ptr, out_ptr, n, DT: gl.constexpr, PADS: gl.constexpr, R: gl.constexpr,
                                          L: gl.constexpr):
    """A [64, 2] buffer (row-major, padded by PADS) holding x; a loop carries column 0 or 1 (one
    table: the intervals are even, so both columns cross the same pads), reading rows R..R+15 of
    it (in L) into out[i] and picking the other column next by a branch; after the loop, rows
    R.. of the column it ends on into out[n]."""
    F: gl.constexpr = gl.BlockedLayout([1, 2], [32, 1], [1, 1], [1, 0])
    rf = gl.arange(0, 64, gl.SliceLayout(1, F))[:, None] * 2 + gl.arange(0, 2, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(DT, [64, 2], gl.PaddedSharedLayout.with_identity_for(PADS, [64, 2], [1, 0]),
                                    gl.load(x_ptr + rf))
    ro = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] + gl.zeros([16, 1], gl.int32, L)
    c = buf.slice(0, 1, 1)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 16 + ro, c.slice(R, 16, 0).load(L))
        w = buf.slice(0, 1, 1)
        with gl.if_((i + 1) % 2 == 1):
            w = buf.slice(1, 1, 1)
        c = w
    gl.store(out_ptr + n * 16 + ro, c.slice(R, 16, 0).load(L))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("pads", [[[16, 1]], [[8, 2]], [[32, 4], [4, 1]]], ids=["every16", "every8", "every4and32"])
@pytest.mark.parametrize("r", [37, 5, 32])
@pytest.mark.parametrize("lay", ["lanes", "regs"])
def test_rows_inside_the_period_of_a_carried_padded_column(target, dtype, pads, r, lay):
    """Found by the views preset (seed 426): the loop carries the column in one register (both
    columns have one table), but the carried view dropped the buffer's linear indices, so rows
    from inside a padding period of it (37.., 5..) had no split and were refused ('does not
    place elements XOR-linearly (or, padded, additively)'). Rows 32.. (whole periods, lowered
    before) check the same loop."""
    L = gl.BlockedLayout([1, 1], [16, 2], [1, 1], [1, 0]) if lay == "lanes" else \
        gl.BlockedLayout([4, 1], [4, 8], [1, 1], [0, 1])
    rng = np.random.default_rng()
    x = rng.integers(1, 250, 128).astype(dtype) if dtype == np.uint8 else rng.standard_normal(128).astype(dtype)
    n = 3
    exp = np.concatenate([x.reshape(64, 2)[r:r + 16, i % 2] for i in range(n + 1)])
    ref, sim, _ = both(carried_column_rows_inside_the_period, lambda: [x.copy(), np.zeros(16 * (n + 1), dtype), n],
                       target, num_warps=1, DT=gl.uint8 if dtype == np.uint8 else gl.float32, PADS=pads, R=r, L=L)
    assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp)


@gt.jit
def mixed_rows_of_carried_columns(x_ptr, y_ptr, out_ptr, n, L: gl.constexpr):
    """An int32 [64, 4] buffer (64 stacked slots of 4 elements padded by 4 after every 2) holding
    x; a loop carries columns 0..1, 1..2 or 2..3 of rows 6..37 (starts inside a padding period:
    carried at a run-time start), its body storing y[i] (in L) into rows 4..19 of the first of
    them, reading those back (in a plain layout, then in L) into out; after the loop, the whole
    buffer into out."""
    F: gl.constexpr = gl.BlockedLayout([1, 4], [32, 1], [1, 1], [1, 0])
    B: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 1], [0, 1])
    rf = gl.arange(0, 64, gl.SliceLayout(1, F))[:, None] * 4 + gl.arange(0, 4, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.int32, [64, 4], gl.PaddedSharedLayout.with_identity_for([[2, 4]], [4], [0]),
                                    gl.load(x_ptr + rf))
    ro = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] + gl.zeros([16, 1], gl.int32, L)
    rb = gl.arange(0, 16, gl.SliceLayout(1, B))[:, None] + gl.zeros([16, 1], gl.int32, B)
    p = buf.slice(6, 32, 0)
    c = p.slice(0, 2, 1)
    for i in gl.range(0, n):
        v = c.slice(4, 16, 0).slice(0, 1, 1)
        v.store(gl.load(y_ptr + i * 16 + ro))
        gl.store(out_ptr + i * 16 + rb, v.load(B))
        gl.store(out_ptr + (n + i) * 16 + ro, v.load(L))
        w = p.slice(0, 2, 1)
        with gl.if_((i + 1) % 3 == 1):
            w = p.slice(1, 2, 1)
        with gl.if_((i + 1) % 3 == 2):
            w = p.slice(2, 2, 1)
        c = w
    gl.store(out_ptr + 2 * n * 16 + rf, buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lay", [
    gl.DistributedLinearLayout(reg_bases=[], lane_bases=[[6, 0], [7, 0], [8, 0], [4, 0], [0, 0]], warp_bases=[],
                               block_bases=[], shape=[16, 1]),
    gl.DistributedLinearLayout(reg_bases=[[1, 0]], lane_bases=[[3, 0], [4, 0], [8, 0], [0, 0], [0, 0]],
                               warp_bases=[], block_bases=[], shape=[16, 1]),
    gl.BlockedLayout([4, 1], [4, 8], [1, 1], [0, 1]),
], ids=["lanes_mixed", "regs_under_lanes", "plain"])
def test_stacked_rows_of_a_padded_view_at_a_runtime_start_in_a_mixing_layout(target, lay):
    """Found by the views preset (seed 543): the view's start is carried at run time (its columns
    start inside a padding period) and its rows are stacked slots, addressed from a layout whose
    lane bases mix the rows' bits (lanes [6] and [7]: lane 3 is row 1, not 13). The slots' bytes
    were summed over the bases ('internal: the run-time padded address split disagrees'); now the
    rows are split as the XOR of the thread's part and the register's (a register bit under the
    lanes' bits: one thread register per distinct value). The plain layout (lowered before) checks
    the same loop."""
    rng = np.random.default_rng()
    x, n = rng.integers(-2 ** 31, 2 ** 31, 256).astype(np.int32), 4
    y = rng.integers(-2 ** 31, 2 ** 31, 16 * n).astype(np.int32)
    buf = x.reshape(64, 4).copy()
    got = []
    for i in range(n):
        buf[10:26, [0, 1, 2][i % 3]] = y[16 * i:16 * (i + 1)]
        got.append(y[16 * i:16 * (i + 1)])
    exp = np.concatenate(got + got + [buf.reshape(-1)])
    ref, sim, _ = both(mixed_rows_of_carried_columns, lambda: [x.copy(), y.copy(), np.zeros(exp.size, np.int32), n],
                       target, num_warps=1, L=lay)
    assert np.array_equal(ref[2], exp) and np.array_equal(sim[2], exp)


@gt.jit
def mixed_rows_inside_the_period(x_ptr, y_ptr, out_ptr, L: gl.constexpr, C: gl.constexpr):
    """An int32 [64, 8] buffer (64 stacked slots of 8 elements padded by 4 after every 4) holding
    x; y stored (in L) into columns C..C+3 of rows 10..25, read back (in L) into out[:64], then
    the whole buffer into out[64:]."""
    F: gl.constexpr = gl.BlockedLayout([1, 8], [32, 1], [1, 1], [1, 0])
    rf = gl.arange(0, 64, gl.SliceLayout(1, F))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.int32, [64, 8], gl.PaddedSharedLayout.with_identity_for([[4, 4]], [8], [0]),
                                    gl.load(x_ptr + rf))
    ro = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] * 4 + gl.arange(0, 4, gl.SliceLayout(0, L))[None, :]
    v = buf.slice(C, 4, 1).slice(10, 16, 0)
    v.store(gl.load(y_ptr + ro))
    gl.store(out_ptr + ro, v.load(L))
    gl.store(out_ptr + 64 + rf, buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lay", [
    gl.DistributedLinearLayout(reg_bases=[[0, 2]], lane_bases=[[6, 0], [7, 0], [8, 0], [4, 0], [0, 1]],
                               warp_bases=[], block_bases=[], shape=[16, 4]),
    gl.DistributedLinearLayout(reg_bases=[[1, 0], [0, 2]], lane_bases=[[3, 0], [4, 0], [8, 0], [0, 1], [0, 0]],
                               warp_bases=[], block_bases=[], shape=[16, 4]),
], ids=["lanes_mixed", "regs_under_lanes"])
@pytest.mark.parametrize("c", [1, 3, 0])
def test_stacked_rows_of_a_padded_slice_inside_the_period_in_a_mixing_layout(target, lay, c):
    """Seed 543's cause at a start known at compile time: columns 1..4 (3..6) start inside a
    padding period (no sum over their bits: Access._padded_shift) and the rows are stacked slots
    addressed from a layout mixing their bits, whose bytes were summed over the bases (refused:
    'does not place elements XOR-linearly'). Columns 0.. (additive, lowered before) check the
    same kernel."""
    rng = np.random.default_rng()
    x, y = rng.integers(-2 ** 31, 2 ** 31, 512).astype(np.int32), rng.integers(-2 ** 31, 2 ** 31, 64).astype(np.int32)
    buf = x.reshape(64, 8).copy()
    buf[10:26, c:c + 4] = y.reshape(16, 4)
    exp = np.concatenate([y, buf.reshape(-1)])
    ref, sim, _ = both(mixed_rows_inside_the_period, lambda: [x.copy(), y.copy(), np.zeros(exp.size, np.int32)],
                       target, num_warps=1, L=lay, C=c)
    assert np.array_equal(ref[2], exp) and np.array_equal(sim[2], exp)


@gt.jit
def xor_rows_stepped_by_branches(x_ptr, y_ptr, out_ptr, n, DT: gl.constexpr, STEP: gl.constexpr, STORE: gl.constexpr):
    """A [16, 2] buffer of DT swizzled per row (SwizzledSharedLayout(1, 1, 2): odd rows' columns
    swapped) holding x; a loop carries row 0, reads it into out[i] (STORE=0) or writes y[i]
    through it (STORE=1; the buffer read back after the loop), and picks the next among rows 0,
    STEP, 2 * STEP, 3 * STEP by three branches."""
    F: gl.constexpr = gl.BlockedLayout([1, 2], [16, 2], [1, 1], [1, 0])
    L: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, 1], [1, 0])
    rf = gl.arange(0, 16, gl.SliceLayout(1, F))[:, None] * 2 + gl.arange(0, 2, gl.SliceLayout(0, F))[None, :]
    ro = gl.arange(0, 1, gl.SliceLayout(1, L))[:, None] * 2 + gl.arange(0, 2, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(DT, [16, 2], gl.SwizzledSharedLayout(1, 1, 2, [1, 0]), gl.load(x_ptr + rf))
    c = buf.slice(0, 1, 0)
    for i in gl.range(0, n):
        read_or_write(c, L, ro, i, 2, y_ptr, out_ptr, STORE)
        w = buf.slice(0, 1, 0)
        with gl.if_((i + 1) % 4 == 1):
            w = buf.slice(STEP, 1, 0)
        with gl.if_((i + 1) % 4 == 2):
            w = buf.slice(2 * STEP, 1, 0)
        with gl.if_((i + 1) % 4 == 3):
            w = buf.slice(3 * STEP, 1, 0)
        c = w
    if STORE:
        gl.store(out_ptr + rf, buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("step", [1, 3, 4])
@pytest.mark.parametrize("store", [0, 1])
def test_xor_carried_rows_stepped_to_less_aligned_starts(target, dtype, step, store):
    """Found by the views preset (seeds 5078, 6329): the loop carries the rows with a run-time
    XOR (odd rows' columns swapped), its body picking rows whose start address is less aligned
    than row 0's (row 2 of f16: 8 bytes). The loop took the alignment of the view entering it
    alone, and the predicted branch join its first arm's, so it refused its own body ('less
    aligned than its first value'); now both are the weakest of the views they receive. Rows
    0, 4, 8, 12 of f16 (step 4: 16-byte aligned, lowered before) check the same loop."""
    rng = np.random.default_rng()
    x, y, n = rng.standard_normal(32).astype(dtype), rng.standard_normal(16).astype(dtype), 6
    exp = expected_steps(x.reshape(16, 2).copy(), y, n, store, lambda buf, i: buf[(i % 4) * step])
    ref, sim, _ = both(xor_rows_stepped_by_branches,
                       lambda: [x.copy(), y.copy(), np.full(exp.size, np.nan, dtype), n], target, num_warps=1,
                       DT=gl.float16 if dtype == np.float16 else gl.float32, STEP=step, STORE=store)
    assert np.array_equal(ref[2], exp) and np.array_equal(sim[2], exp)


@gt.jit
def swizzled_columns_stepped_by_branches(x_ptr, y_ptr, out_ptr, n, A: gl.constexpr, STORE: gl.constexpr):
    """An int32 [4, 32] buffer swizzled in chunks of 4 columns (SwizzledSharedLayout(4, 1, 8))
    holding x; a loop carries columns A, A+1, reads them into out[i] (STORE=0) or writes y[i]
    through them (STORE=1; the buffer read back after the loop), and picks the next among columns
    A.., A+1.., A+2.., A+3.. by three branches."""
    F: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [1, 1], [1, 0])
    L: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [1, 1], [1, 0])
    rf = gl.arange(0, 4, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    ro = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * 2 + gl.arange(0, 2, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.int32, [4, 32], gl.SwizzledSharedLayout(4, 1, 8, [1, 0]), gl.load(x_ptr + rf))
    c = buf.slice(A, 2, 1)
    for i in gl.range(0, n):
        read_or_write(c, L, ro, i, 8, y_ptr, out_ptr, STORE)
        w = buf.slice(A, 2, 1)
        with gl.if_((i + 1) % 4 == 1):
            w = buf.slice(A + 1, 2, 1)
        with gl.if_((i + 1) % 4 == 2):
            w = buf.slice(A + 2, 2, 1)
        with gl.if_((i + 1) % 4 == 3):
            w = buf.slice(A + 3, 2, 1)
        c = w
    if STORE:
        gl.store(out_ptr + rf, buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("a", [17, 1, 16])
@pytest.mark.parametrize("store", [0, 1])
def test_swizzled_columns_at_a_runtime_start_stepped_to_less_aligned_starts(target, a, store):
    """Found by the views preset (seed 22692): columns 17.. and 18.. share one table (one
    register, 4-byte aligned), 19.. crosses a swizzle chunk (a run-time start: the branches carry
    the columns' start), and the loop kept the alignment of the view entering it (16 bytes) while
    the branches' join, and so its body, was 4-byte aligned: refused ('less aligned than its
    first value'). Columns 16.. run the same loop from a 16-byte aligned start."""
    rng = np.random.default_rng()
    x, n = rng.integers(-2 ** 31, 2 ** 31, 128).astype(np.int32), 6
    y = rng.integers(-2 ** 31, 2 ** 31, 8 * n).astype(np.int32)
    exp = expected_steps(x.reshape(4, 32).copy(), y, n, store, lambda buf, i: buf[:, a + i % 4:a + i % 4 + 2])
    ref, sim, _ = both(swizzled_columns_stepped_by_branches,
                       lambda: [x.copy(), y.copy(), np.zeros(exp.size, np.int32), n], target, num_warps=1, A=a,
                       STORE=store)
    assert np.array_equal(ref[2], exp) and np.array_equal(sim[2], exp)


@gt.jit
def slot_rows_at_runtime_starts(x_ptr, y_ptr, out_ptr, n, S0: gl.constexpr, A: gl.constexpr, STEP: gl.constexpr,
                                STORE: gl.constexpr):
    """An int32 [2, 32, 2] buffer (NVMMA, transposed: rows within a swizzle period of 16 bytes)
    holding x; p = slot S0 (.slice(S0, 1, 0).index(0)); a loop carries rows A..A+7 of p, reads them
    into out[i] (STORE=0) or writes y[i] through them (STORE=1; the buffer read back after the
    loop), and picks the next among rows A.., A+STEP.., A+2*STEP.. by two branches."""
    F: gl.constexpr = gl.BlockedLayout([1, 1, 2], [1, 32, 1], [1, 1, 1], [2, 1, 0])
    L: gl.constexpr = gl.BlockedLayout([1, 1], [8, 4], [1, 1], [1, 0])
    rf = gl.arange(0, 2, gl.SliceLayout(1, gl.SliceLayout(2, F)))[:, None, None] * 64 + \
        gl.arange(0, 32, gl.SliceLayout(0, gl.SliceLayout(2, F)))[None, :, None] * 2 + \
        gl.arange(0, 2, gl.SliceLayout(0, gl.SliceLayout(1, F)))[None, None, :]
    ro = gl.arange(0, 8, gl.SliceLayout(1, L))[:, None] * 2 + gl.arange(0, 2, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.int32, [2, 32, 2],
                                    gl.NVMMASharedLayout.get_default_for([32, 2], gl.int32, transposed=True),
                                    gl.load(x_ptr + rf))
    p = buf.slice(S0, 1, 0).index(0)
    c = p.slice(A, 8, 0)
    for i in gl.range(0, n):
        read_or_write(c, L, ro, i, 16, y_ptr, out_ptr, STORE)
        w = p.slice(A, 8, 0)
        with gl.if_((i + 1) % 3 == 1):
            w = p.slice(A + STEP, 8, 0)
        with gl.if_((i + 1) % 3 == 2):
            w = p.slice(A + 2 * STEP, 8, 0)
        c = w
    if STORE:
        gl.store(out_ptr + rf, buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("s0", [1, 0])
@pytest.mark.parametrize("a, step", [(14, 5), (3, 1), (0, 8)])
@pytest.mark.parametrize("store", [0, 1])
def test_rows_at_runtime_starts_of_a_slot_indexed_from_a_stacked_start(target, s0, a, step, store):
    """Found by the views preset (seeds 8753, 21097): .slice(1, 1, 0).index(0) of an NVMMA
    buffer has an XOR-linear table, so the index kept no buffer coordinates (coff), and a branch
    (loop) among its rows from inside the swizzle period, at starts that differ, was refused
    ('placed differently'). Slot 1's table is the buffer's plus the slot's offset: the index now
    keeps it (an affine coff). Slot 0 and rows 0, 8, 16 (lowered before) check the same loop."""
    rng = np.random.default_rng()
    x, n = rng.integers(-2 ** 31, 2 ** 31, 128).astype(np.int32), 5
    y = rng.integers(-2 ** 31, 2 ** 31, 16 * n).astype(np.int32)
    exp = expected_steps(x.reshape(2, 32, 2).copy(), y, n, store,
                         lambda buf, i: buf[s0, a + (i % 3) * step:a + (i % 3) * step + 8])
    ref, sim, _ = both(slot_rows_at_runtime_starts, lambda: [x.copy(), y.copy(), np.zeros(exp.size, np.int32), n],
                       target, num_warps=1, S0=s0, A=a, STEP=step, STORE=store)
    assert np.array_equal(ref[2], exp) and np.array_equal(sim[2], exp)


@gt.jit
def rows_inside_the_period_of_a_carried_row(x_ptr, y_ptr, out_ptr, n, R: gl.constexpr, S: gl.constexpr):
    """An int32 [4, 32] buffer (SwizzledSharedLayout(2, 2, 2, [0, 1])) holding x; a loop carries
    columns 4..19 of row R (.slice(R, 1, 0).slice(4, 16, 1)), reads columns S..S+7 of them into
    out[i], writes y[i] there, and picks the next among columns 4.., 8.., 12.., 16.. by three
    branches; the buffer read back after the loop."""
    F: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [1, 1], [1, 0])
    L: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [1, 1], [1, 0])
    rf = gl.arange(0, 4, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    ro = gl.arange(0, 1, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.int32, [4, 32], gl.SwizzledSharedLayout(2, 2, 2, [0, 1]), gl.load(x_ptr + rf))
    p = buf.slice(R, 1, 0)
    c = p.slice(4, 16, 1)
    for i in gl.range(0, n):
        v = c.slice(S, 8, 1)
        gl.store(out_ptr + i * 8 + ro, v.load(L))
        v.store(gl.load(y_ptr + i * 8 + ro))
        w = p.slice(4, 16, 1)
        with gl.if_((i + 1) % 4 == 1):
            w = p.slice(8, 16, 1)
        with gl.if_((i + 1) % 4 == 2):
            w = p.slice(12, 16, 1)
        with gl.if_((i + 1) % 4 == 3):
            w = p.slice(16, 16, 1)
        c = w
    gl.store(out_ptr + n * 8 + rf, buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("r", [1, 3, 0])
@pytest.mark.parametrize("s", [7, 3, 0])
def test_columns_inside_the_period_of_a_loop_carried_row(target, r, s):
    """Found by the views preset (seeds 31565, 10078): the loop carries one table (whole swizzle
    periods apart) in its register whole (it keeps constant 0), and no view of the buffer starts
    at 0 with that table (row 1: no column slice of row 0 is it), so the carried view had no
    buffer coordinates and columns 7.. (3..) of it, inside the swizzle period, were refused
    ('does not place elements XOR-linearly'). Its coff now moves with the register (an affine
    root). Rows 0 and 3 and columns 0.. (lowered before) check the same loop."""
    rng = np.random.default_rng()
    x, n = rng.integers(-2 ** 31, 2 ** 31, 128).astype(np.int32), 6
    y = rng.integers(-2 ** 31, 2 ** 31, 8 * n).astype(np.int32)
    buf = x.reshape(4, 32).copy()
    got = []
    for i in range(n):
        k = 4 + 4 * (i % 4) + s
        got.append(buf[r, k:k + 8].copy())
        buf[r, k:k + 8] = y[8 * i:8 * i + 8]
    exp = np.concatenate(got + [buf.reshape(-1)])
    ref, sim, _ = both(rows_inside_the_period_of_a_carried_row,
                       lambda: [x.copy(), y.copy(), np.zeros(exp.size, np.int32), n], target, num_warps=1, R=r, S=s)
    assert np.array_equal(ref[2], exp) and np.array_equal(sim[2], exp)


@gt.jit
def nvmma_rows_stepped_by_branches(x_ptr, y_ptr, out_ptr, n, C: gl.constexpr, STEP: gl.constexpr):
    """An f32 [8, 8] buffer (NVMMA, transposed) holding x, viewed transposed (p = .permute([1, 0]));
    a loop carries rows 0..1 of columns C..C+3 of p, reads them into out[i], writes y[i] there and
    picks the next among rows 0.., STEP.., 2 * STEP.., 3 * STEP.. by three branches; the buffer
    read back after the loop."""
    F: gl.constexpr = gl.BlockedLayout([1, 2], [8, 4], [1, 1], [1, 0])
    L: gl.constexpr = gl.BlockedLayout([1, 4], [2, 16], [1, 1], [1, 0])
    rf = gl.arange(0, 8, gl.SliceLayout(1, F))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, F))[None, :]
    ro = gl.arange(0, 2, gl.SliceLayout(1, L))[:, None] * 4 + gl.arange(0, 4, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [8, 8], gl.NVMMASharedLayout.get_default_for([8, 8], gl.float32,
                                                                                             transposed=True),
                                    gl.load(x_ptr + rf))
    p = buf.permute([1, 0])
    c = p.slice(C, 4, 1).slice(0, 2, 0)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 8 + ro, c.load(L))
        c.store(gl.load(y_ptr + i * 8 + ro))
        w = p.slice(C, 4, 1).slice(0, 2, 0)
        with gl.if_((i + 1) % 4 == 1):
            w = p.slice(C, 4, 1).slice(STEP, 2, 0)
        with gl.if_((i + 1) % 4 == 2):
            w = p.slice(C, 4, 1).slice(2 * STEP, 2, 0)
        with gl.if_((i + 1) % 4 == 3):
            w = p.slice(C, 4, 1).slice(3 * STEP, 2, 0)
        c = w
    gl.store(out_ptr + n * 8 + rf, buf.load(F))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("c", [3, 1, 0, 4])
@pytest.mark.parametrize("step", [2, 1])
def test_branches_of_one_table_inside_a_runtime_start_join(target, c, step):
    """Found by the views preset (seed 44829): rows 0.. and 2.. of p's columns 3..6 have one table,
    so the first branch carried them in one register (its buffer coordinates moved with the
    register), and the next, adding rows 4.. (another table: a run-time start), compared the
    buffer tables exactly and refused ('placed differently'). Tables one up to a constant now
    join, the base moved by the difference."""
    rng = np.random.default_rng()
    x, n = rng.standard_normal(64).astype(np.float32), 6
    y = rng.standard_normal(8 * n).astype(np.float32)
    buf = x.reshape(8, 8).copy()
    got = []
    for i in range(n):
        k = (i % 4) * step
        got.append(buf.T[k:k + 2, c:c + 4].reshape(-1).copy())
        buf.T[k:k + 2, c:c + 4] = y[8 * i:8 * i + 8].reshape(2, 4)
    exp = np.concatenate(got + [buf.reshape(-1)])
    ref, sim, _ = both(nvmma_rows_stepped_by_branches,
                       lambda: [x.copy(), y.copy(), np.full(exp.size, np.nan, np.float32), n], target, num_warps=1,
                       C=c, STEP=step)
    assert np.array_equal(ref[2], exp) and np.array_equal(sim[2], exp)


@gt.jit
def padded_four_way_from(x_ptr, y_ptr, out_ptr, n, PADS: gl.constexpr, A: gl.constexpr):
    """An f64 [32] buffer padded by PADS holding x; a loop carries elements A..A+3, reads them into
    out[i], writes y[i] there and picks the next among elements A.., A+1.., A+2.., A+3.. by three
    branches; the buffer read back after the loop."""
    L: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    buf = gl.allocate_shared_memory(gl.float64, [32], gl.PaddedSharedLayout.with_identity_for(PADS, [32], [0]),
                                    gl.load(x_ptr + gl.arange(0, 32, L)))
    c = buf.slice(A, 4, 0)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 4 + gl.arange(0, 4, L), c.load(L))
        c.store(gl.load(y_ptr + i * 4 + gl.arange(0, 4, L)))
        w = buf.slice(A, 4, 0)
        with gl.if_((i + 1) % 4 == 1):
            w = buf.slice(A + 1, 4, 0)
        with gl.if_((i + 1) % 4 == 2):
            w = buf.slice(A + 2, 4, 0)
        with gl.if_((i + 1) % 4 == 3):
            w = buf.slice(A + 3, 4, 0)
        c = w
    gl.store(out_ptr + n * 4 + gl.arange(0, 32, L), buf.load(L))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("pads", [[[8, 4], [1, 2]], [[8, 2]], [[1, 1]]], ids=["every8and1", "every8", "every1"])
@pytest.mark.parametrize("a", [19, 3, 0])
def test_a_four_way_step_between_padded_starts_predicted_ahead(target, pads, a):
    """Found by the views preset (seed 51142): elements 19.. and 20.. of a buffer padded after
    every element (and every 8) have one table, so the first branch carries one register (with
    the buffer's linear indices since seed 426's fix) and the next two carry the run-time start;
    the loop's prediction of its body's view, made before the body is emitted, had the first
    branch's join without those indices, so it predicted no run-time start and the loop refused
    its own body ('placed differently'). The prediction now keeps them too."""
    rng = np.random.default_rng()
    x, n = rng.standard_normal(32), 6
    y = rng.standard_normal(4 * n)
    buf = x.copy()
    got = []
    for i in range(n):
        k = a + i % 4
        got.append(buf[k:k + 4].copy())
        buf[k:k + 4] = y[4 * i:4 * i + 4]
    exp = np.concatenate(got + [buf])
    ref, sim, _ = both(padded_four_way_from, lambda: [x.copy(), y.copy(), np.full(exp.size, np.nan), n], target,
                       num_warps=1, PADS=pads, A=a)
    assert np.array_equal(ref[2], exp) and np.array_equal(sim[2], exp)

"""Slices of swizzled shared buffers from starts inside a swizzle period, which the NVIDIA
backend refused ('does not place elements XOR-linearly') though the interpreter runs them:
rows 1..8 of a 128-byte swizzle have phases 1..7, 0, not the rows 0..7 ones XOR a constant, and
columns 3..18 split the swizzled chunks. The kernels of tests/backends/amd/
test_amd_lds_swizzled_slices.py, on the PTX simulator with the race detector for sm_90 and sm_80
against the interpreter and numpy, fresh random inputs, NaN-poisoned outputs.
"""
import os
import re
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import ptxsim_races  # noqa: E402
import smem_view_cases as C  # noqa: E402

from gluon_trace.backend import get  # noqa: E402
from gluon_trace.errors import CompileError  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

TARGETS = ["sm_90", "sm_80"]
DTYPES = {np.int8: gl.int8, np.float16: gl.float16, np.float32: gl.float32, np.int64: gl.int64}


def layouts(dtype):
    """(layout, its name) of a [16, 32] tile of ``dtype`` (a gl dtype): 16-byte chunks of f32
    swizzled over 8 rows, pairs of rows sharing a phase, 32-byte chunks over 4 rows, single
    elements over 8 with the rows contiguous (order [0, 1]), and the NVMMA layout Gluon picks."""
    return [(gl.SwizzledSharedLayout(4, 1, 8, [1, 0]), "4,1,8"), (gl.SwizzledSharedLayout(2, 2, 4, [1, 0]), "2,2,4"),
            (gl.SwizzledSharedLayout(8, 1, 4, [1, 0]), "8,1,4"), (gl.SwizzledSharedLayout(1, 1, 8, [0, 1]), "1,1,8 col"),
            (gl.NVMMASharedLayout.get_default_for([16, 32], dtype), "nvmma")]


SW = layouts(gl.float32)[0][0]

# slices applied in turn, each (start, length, dim) of the [16, 32] tile: rows and columns from
# starts inside the swizzle's period (columns inside a 4-element chunk too), rows then columns,
# a slice of a slice whose starts add up across the period's end
SLICES = [((1, 8, 0),), ((5, 4, 0),), ((3, 16, 1),), ((6, 8, 1),), ((3, 8, 0), (5, 16, 1)), ((2, 8, 0), (4, 4, 0)),
          ((8, 16, 1),)]


@gt.jit
def swizzled_slice(x_ptr, y_ptr, out_ptr, i, DT: gl.constexpr, LAY: gl.constexpr, STACK: gl.constexpr,
                   SLICES: gl.constexpr, VEC: gl.constexpr, STORE: gl.constexpr):
    """A [16, 32] buffer of DT in LAY (slot i of a [2, 16, 32] one if STACK) holding x, sliced by
    SLICES. STORE=0: the slice read into out (as f32); STORE=1: y written through it and the
    whole buffer read back into out."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 2], [1, 0])
    rf = gl.arange(0, 16, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    if STACK:
        buf = gl.allocate_shared_memory(DT, [2, 16, 32], LAY)
        buf.index(0).store(gl.load(x_ptr + rf))
        buf.index(1).store(gl.load(x_ptr + 512 + rf))
        v = buf.index(i)
    else:
        buf = gl.allocate_shared_memory(DT, [16, 32], LAY, gl.load(x_ptr + rf))
        v = buf
    for start, n, dim in SLICES:
        v = v.slice(start, n, dim)
    shape: gl.constexpr = v.shape
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [W // 8, 8], [1, 2], [1, 0])
    r = gl.arange(0, shape[0], gl.SliceLayout(1, L))[:, None] * shape[1] + \
        gl.arange(0, shape[1], gl.SliceLayout(0, L))[None, :]
    if STORE:
        v.store(gl.load(y_ptr + r))
        if STACK:
            gl.store(out_ptr + rf, buf.index(0).load(F).to(gl.float32))
            gl.store(out_ptr + 512 + rf, buf.index(1).load(F).to(gl.float32))
        else:
            gl.store(out_ptr + rf, buf.load(F).to(gl.float32))
    else:
        gl.store(out_ptr + r, v.load(L).to(gl.float32))


def inputs(dtype, slices, rng=None):
    """Fresh x [2, 16, 32] and y (the slice's shape) of ``dtype``: normal floats, or integers over
    the whole int8 range with no zero (exact as f32)."""
    rng = rng or np.random.default_rng()
    shape = [16, 32]
    for _, n, dim in slices:
        shape[dim] = n
    shapes = [(2, 16, 32), tuple(shape)]
    if np.dtype(dtype).kind == "i":
        return [np.where(a == 0, 1, a).astype(dtype) for a in (rng.integers(-128, 128, s) for s in shapes)]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def both(kernel, make, target, num_warps=4, **kw):
    """(interpreter's args, simulator's args, PTX): traced on one set of args, run on two fresh ones."""
    g = kernel.trace(*make(), target=target, num_warps=num_warps, **kw).graph
    text, _, smem = emit(g, target)
    ref, sim = make(), make()
    get("interpreter").run(g, (1, 1, 1), ref)
    ptxsim_races.run(text, (1, 1, 1), sim, smem)
    return ref, sim, text


def check(target, dtype, lay, slices, stack, store, vec=1, i=1):
    """One swizzled_slice kernel on fresh inputs against numpy; its PTX."""
    x, y = inputs(dtype, slices)
    exp = C.padded_slice_expected(x, y, i, stack, slices, store)
    ref, sim, text = both(swizzled_slice, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), i],
                          target, num_warps=2, DT=DTYPES[dtype], LAY=lay, STACK=stack, SLICES=slices, VEC=vec,
                          STORE=store)
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (slices, stack, store)
    return text


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("k", range(5), ids=lambda k: layouts(gl.float32)[k][1])
def test_slices_of_slot_i_of_a_swizzled_buffer(target, dtype, k):
    """Row and column slices from starts inside the period, and slices of them, of slot i (run
    time) of a stacked buffer, loaded and stored; 1-, 2-, 4- and 8-byte elements."""
    lay = layouts(DTYPES[dtype])[k][0]
    for slices in SLICES:
        for store in (0, 1):
            check(target, dtype, lay, slices, 1, store)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dim, n", [(0, 8), (1, 16)], ids=["rows", "cols"])
def test_every_start_in_the_period(target, dim, n):
    """Rows s..s+7 for every s of the 8-row period, columns s..s+15 for every s of the first
    half row (16-byte chunks, 8 of them a period), of an f32 buffer, loaded and stored."""
    for s in range(1, 33 - n if dim else 9):
        for store in (0, 1):
            check(target, np.float32, SW, ((s, n, dim),), 0, store)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype, vec", [(np.float32, 4), (np.float16, 8)], ids=["f32", "f16"])
def test_row_slices_keep_vector_accesses(target, dtype, vec):
    """A thread's 16 consecutive bytes of rows 1..8 (one swizzled chunk) still move as one
    ld.shared.v4.b32 / st.shared.v4.b32, and nothing narrower."""
    lay = gl.SwizzledSharedLayout(16 // np.dtype(dtype).itemsize, 1, 8, [1, 0])
    for store in (0, 1):
        text = check(target, dtype, lay, ((1, 8, 0),), 1, store, vec=vec)
        op = "st" if store else "ld"
        body = text.split(f"{op}.shared", 1)[1] if store else text
        assert f"{op}.shared.v4.b32" in text, text
        if not store:
            assert not re.search(r"ld\.shared\.(b32|b16|u16|v2)", body), text


@gt.jit
def async_into_slice(x_ptr, out_ptr, DT: gl.constexpr, LAY: gl.constexpr, START: gl.constexpr):
    """x [8, 32] copied by async_copy into rows START..START+7 of a [16, 32] buffer, read back."""
    from gluon_trace.language.nvidia.ampere import async_copy
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 2], [1, 0])
    r = gl.arange(0, 8, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(DT, [16, 32], LAY)
    v = buf.slice(START, 8, 0)
    async_copy.async_load(v, x_ptr + r)
    async_copy.commit_group()
    async_copy.wait_group(0)
    gl.store(out_ptr + r, v.load(L).to(gl.float32))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("start", [1, 6])
def test_async_copy_into_an_unaligned_row_slice(target, dtype, start):
    x = inputs(dtype, ((0, 8, 0),))[1]
    ref, sim, text = both(async_into_slice, lambda: [x.copy(), np.full((8, 32), np.nan, np.float32)], target,
                          num_warps=2, DT=DTYPES[dtype], LAY=layouts(DTYPES[dtype])[0][0], START=start)
    exp = x.astype(np.float32)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)
    assert "cp.async" in text


@gt.jit
def loop_carried_rows(x_ptr, out_ptr, n, A: gl.constexpr, B: gl.constexpr, C: gl.constexpr):
    """Rows A..A+3 of a swizzled buffer carried by a loop; each step yields rows B.., or rows C..
    on even steps: the slice's start changes per iteration."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [16, 32], SW, gl.load(x_ptr + r))
    v = buf.slice(A, 4, 0)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 128 + rh, v.load(L))
        w = buf.slice(B, 4, 0)
        with gl.if_(i % 2 == 0):
            w = buf.slice(C, 4, 0)
        v = w


def _loop_expected(x, n, abc):
    A, B, Cs = abc
    return np.stack([x[A if i == 0 else (Cs if (i - 1) % 2 == 0 else B):][:4] for i in range(n)])


@pytest.mark.parametrize("target", TARGETS)
def test_loop_carried_row_slices_a_period_apart(target):
    x, n, abc = C.rand((16, 32)), 4, (0, 4, 8)
    ref, sim, _ = both(loop_carried_rows, lambda: [x.copy(), np.full((n, 4, 32), np.nan, np.float32), n], target,
                       num_warps=1, A=abc[0], B=abc[1], C=abc[2])
    exp = _loop_expected(x, n, abc)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


def test_a_loop_carried_row_slice_whose_start_changes_inside_the_period_is_refused_at_its_line():
    """Rows 1..4, then 3..6 or 2..5 (the start changes inside the 8-row period): the carried view
    has one table for all; refused at the load's line with why and the way around."""
    g = loop_carried_rows.trace(np.zeros((16, 32), np.float32), np.zeros((4, 4, 32), np.float32), 4, A=1, B=2, C=3,
                                target="sm_90", num_warps=1).graph
    with pytest.raises(CompileError, match=r"smem\.load\(\): this shared-memory view is chosen by a branch") as e:
        emit(g, "sm_90")
    msg = str(e.value)
    assert "slice the buffer inside the branch (or loop body)" in msg and "whole swizzle periods" in msg, msg
    assert "v.load(L)" in C.refusal_line(msg, __file__), msg


@pytest.mark.parametrize("target", TARGETS)
def test_thread_address_of_an_unaligned_swizzled_row_slice_is_short(target):
    """Rows 1..8 of the 128-byte swizzle: the thread's address is made in the prologue from whole
    coordinate fields, row = 1 + its part of the thread id, row << 7 ^ (row & 7) << 4 ^ column
    bytes (one bfe.u32 of the row's 3 swizzling bits), not a bfe, neg and and per bit."""
    text = check(target, np.float32, SW, ((1, 8, 0),), 0, 0, vec=4)
    m = re.search(r"add\.u32 (%r\d+), %r\d+, 1;\n((\s*\w+\.\w+ .*\n){0,4})", text)
    assert m and re.search(rf"bfe\.u32 (%r\d+), {m[1]}, 0, 3;\n", m[2]) and \
        re.search(rf"shl\.b32 %r\d+, {m[1]}, 7;\n", m[2]), text
    assert not re.search(rf"bfe\.u32 %r\d+, {m[1]}, \d, 1;", text), text


@gt.jit
def permuted_slice(x_ptr, y_ptr, out_ptr, i, LAY: gl.constexpr, START: gl.constexpr, DIM: gl.constexpr,
                   STORE: gl.constexpr):
    """Slot i of a [2, 16, 32] f32 buffer in LAY, sliced from START (8 rows or 16 columns), then
    permuted: STORE=0 the [cols, rows] view read into out, STORE=1 y written through it and the
    whole buffer read back."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 2], [1, 0])
    rf = gl.arange(0, 16, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [2, 16, 32], LAY)
    buf.index(0).store(gl.load(x_ptr + rf))
    buf.index(1).store(gl.load(x_ptr + 512 + rf))
    v = buf.index(i).slice(START, 8 if DIM == 0 else 16, DIM).permute((1, 0))
    shape: gl.constexpr = v.shape
    L: gl.constexpr = gl.BlockedLayout([4, 1], [8, W // 8], [2, 1], [0, 1])
    r = gl.arange(0, shape[0], gl.SliceLayout(1, L))[:, None] * shape[1] + \
        gl.arange(0, shape[1], gl.SliceLayout(0, L))[None, :]
    if STORE:
        v.store(gl.load(y_ptr + r))
        gl.store(out_ptr + rf, buf.index(0).load(F))
        gl.store(out_ptr + 512 + rf, buf.index(1).load(F))
    else:
        gl.store(out_ptr + r, v.load(L))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("k", [0, 1, 4], ids=["4,1,8", "2,2,4", "nvmma"])
@pytest.mark.parametrize("start, dim", [(1, 0), (6, 0), (3, 1), (6, 1)])
def test_permuted_unaligned_slices(target, k, start, dim):
    """.permute((1, 0)) of rows start.. (or columns start..) of slot i: the view's start permutes
    with its table; loaded and stored."""
    lay, i = layouts(gl.float32)[k][0], 1
    n = 8 if dim == 0 else 16
    x = C.rand((2, 16, 32))
    shape = (n, 32) if dim == 0 else (16, n)
    y = C.rand(shape[::-1])
    for store in (0, 1):
        out = x.copy()
        sel = out[i][start:start + n] if dim == 0 else out[i][:, start:start + n]
        if store:
            sel[...] = y.T
            exp = out
        else:
            exp = sel.T.copy()
        ref, sim, _ = both(permuted_slice, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), i],
                           target, num_warps=2, LAY=lay, START=start, DIM=dim, STORE=store)
        assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (start, dim, store)


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


@pytest.mark.xfail(strict=True, reason="open: fuzz views preset seed 248; columns 4..7 of a transposed NVMMA "
                                       "f16 [16, 8] buffer (length-1 slices) address outside shared memory")
def test_length1_columns_of_a_transposed_nvmma_buffer():
    x = np.random.default_rng().standard_normal(128).astype(np.float16)
    for start in range(8):
        ref, sim, _ = both(nvmma_column, lambda: [x.copy(), np.zeros(16, np.float16)], "sm_90", num_warps=1,
                           START=start)
        exp = x.reshape(16, 8)[:, start]
        assert np.array_equal(ref[1], exp) and np.array_equal(sim[1], exp), start

"""Slices of swizzled shared buffers from starts inside a swizzle period, shared by the NVIDIA
(PTX simulator) and AMD (amdsim) tests, with numpy's expected results. Both backends refused
these though the interpreter runs them (NVIDIA: 'does not place elements XOR-linearly'; AMD:
'not addressable as thread part + register part'): rows 1..8 of a 128-byte swizzle have phases
1..7, 0, not the rows 0..7 ones XOR a constant, and columns 3..18 split the swizzled chunks.

- row and column slices (and slices of slices) of a [16, 32] buffer or of slot i of a
  [2, 16, 32] one, 1-, 2-, 4- and 8-byte elements, loaded and stored (smem_view_cases.
  padded_slice with ROWS=16: the padded tests' kernel on a taller tile);
- async_copy into rows from inside the period;
- a row slice carried by a loop whose start changes per iteration (smem_view_cases.
  padded_loop_nested_branch on a [16, 32] swizzled buffer);
- .permute((1, 0)) of unaligned row and column slices.

Layouts take the target's wave size (gl.threads_per_warp()), so one kernel serves both. The
``check_*`` functions take the backend's ``both(kernel, make, target, ...)`` runner first (as in
smem_view_cases) and return the emitted text for the backend's own assertions."""
from __future__ import annotations

import numpy as np

import gluon_trace as gt
from gluon_trace import language as gl

import smem_view_cases as V

DTYPES = {np.int8: gl.int8, np.float16: gl.float16, np.float32: gl.float32, np.int64: gl.int64}


def layouts(dtype):
    """(layout, its name) of a [16, 32] tile of ``dtype`` (a gl dtype): 16-byte chunks of f32
    swizzled over 8 rows, pairs of rows sharing a phase, 32-byte chunks over 4 rows, single
    elements over 8 with the rows contiguous (order [0, 1]), and the NVMMA layout Gluon picks."""
    return [(gl.SwizzledSharedLayout(4, 1, 8, [1, 0]), "4,1,8"), (gl.SwizzledSharedLayout(2, 2, 4, [1, 0]), "2,2,4"),
            (gl.SwizzledSharedLayout(8, 1, 4, [1, 0]), "8,1,4"), (gl.SwizzledSharedLayout(1, 1, 8, [0, 1]), "1,1,8 col"),
            (gl.NVMMASharedLayout.get_default_for([16, 32], dtype), "nvmma")]


LAYOUT_IDS = [name for _, name in layouts(gl.float32)]
SW = layouts(gl.float32)[0][0]

# slices applied in turn, each (start, length, dim) of the [16, 32] tile: rows and columns from
# starts inside the swizzle's period (columns inside a 4-element chunk too), rows then columns,
# a slice of a slice whose starts add up across the period's end
SLICES = [((1, 8, 0),), ((5, 4, 0),), ((3, 16, 1),), ((6, 8, 1),), ((3, 8, 0), (5, 16, 1)), ((2, 8, 0), (4, 4, 0)),
          ((8, 16, 1),)]

# (dim, length) of test_every_start_in_the_period, and (dtype, elements a thread) of 16-byte accesses
EVERY_START = [(0, 8), (1, 16)]
EVERY_START_IDS = ["rows", "cols"]
VECTOR = [(np.float32, 4), (np.float16, 8)]
VECTOR_IDS = ["f32", "f16"]


def dtype_id(d):
    return np.dtype(d).name


def check_slice(both, target, dtype, lay, slices, stack, store, vec=1, i=1):
    """One [16, 32] padded_slice kernel (ROWS=16) on fresh inputs against numpy; its text."""
    x, y = V.padded_slice_inputs(dtype, slices, rows=16)
    exp = V.padded_slice_expected(x, y, i, stack, slices, store)
    ref, sim, text = both(V.padded_slice, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), i],
                          target, num_warps=2, DT=DTYPES[dtype], LAY=lay, STACK=stack, SLICES=slices, VEC=vec,
                          STORE=store, ROWS=16)
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (slices, stack, store)
    return text


def check_slices_of_slot_i(both, target, dtype, k):
    """Every SLICES of slot i (run time) of a stacked buffer in layouts(dtype)[k], loaded and stored."""
    lay = layouts(DTYPES[dtype])[k][0]
    for slices in SLICES:
        for store in (0, 1):
            check_slice(both, target, dtype, lay, slices, 1, store)


def check_every_start_in_the_period(both, target, dim, n):
    """Rows s..s+7 for every s of the 8-row period, or columns s..s+15 for every s of the first
    half row, of an f32 buffer in SW, loaded and stored."""
    for s in range(1, 33 - n if dim else 9):
        for store in (0, 1):
            check_slice(both, target, np.float32, SW, ((s, n, dim),), 0, store)


def check_row_slice_vectors(both, target, dtype, vec):
    """Rows 1..8 of slot i, a thread's 16 consecutive bytes (one swizzled chunk) an access:
    [(store, text)] of the load and the store."""
    lay = gl.SwizzledSharedLayout(16 // np.dtype(dtype).itemsize, 1, 8, [1, 0])
    return [(store, check_slice(both, target, dtype, lay, ((1, 8, 0),), 1, store, vec=vec)) for store in (0, 1)]


def check_unaligned_row_slice(both, target):
    """Rows 1..8 of an f32 buffer in SW loaded 4 elements a thread; the text, for the thread's address."""
    return check_slice(both, target, np.float32, SW, ((1, 8, 0),), 0, 0, vec=4)


# -- async_copy into rows from inside the period ---------------------------------------------------

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


ASYNC_DTYPES = [np.float32, np.float16]
ASYNC_STARTS = [1, 6]


def check_async_copy_into_slice(both, target, dtype, start):
    x = V.padded_slice_inputs(dtype, ((0, 8, 0),), rows=16)[1]
    ref, sim, text = both(async_into_slice, lambda: [x.copy(), np.full((8, 32), np.nan, np.float32)], target,
                          num_warps=2, DT=DTYPES[dtype], LAY=layouts(DTYPES[dtype])[0][0], START=start)
    exp = x.astype(np.float32)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)
    return text


# -- a row slice carried by a loop ----------------------------------------------------------------

# (smem_view_cases.padded_loop_nested_branch on a [16, 32] f32 buffer in SW: rows A..A+3 carried
# by a loop, each step yielding rows B.., or rows C.. on even steps)
loop_carried_rows = V.padded_loop_nested_branch
LOOP_A_PERIOD_APART = (0, 4, 8)      # starts whole swizzle periods (or none) apart: runs
LOOP_INSIDE_THE_PERIOD = (1, 2, 3)   # the start changes inside the 8-row period: refused


def check_loop_carried_rows(both, target, abc):
    V.check_padded_loop_nested_branch(both, target, abc, lay=SW, rows=16, cols=32)


# -- permuted unaligned slices ----------------------------------------------------------------------

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


PERMUTED_LAYOUTS, PERMUTED_LAYOUT_IDS = [0, 1, 4], ["4,1,8", "2,2,4", "nvmma"]
PERMUTED_STARTS = [(1, 0), (6, 0), (3, 1), (6, 1)]   # (start, dim)


def check_permuted_slice(both, target, k, start, dim, i=1):
    """.permute((1, 0)) of rows start..start+7 (or columns start..start+15) of slot i: the view's
    start permutes with its table; loaded and stored."""
    lay = layouts(gl.float32)[k][0]
    n = 8 if dim == 0 else 16
    x = V.rand((2, 16, 32))
    shape = (n, 32) if dim == 0 else (16, n)
    y = V.rand(shape[::-1])
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

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


# -- views joined by a loop or branch whose start moves in two dims --------------------------------

@gt.jit
def moved_two_dims(x_ptr, y_ptr, out_ptr, n, c, DT: gl.constexpr, LAY: gl.constexpr, FIRST: gl.constexpr,
                   OTHER: gl.constexpr, MOVE: gl.constexpr, THEN: gl.constexpr, STORE: gl.constexpr):
    """A [16, 32] buffer of DT in LAY holding x; FIRST and OTHER: (row, column) starts of [4, 16]
    views of it. MOVE "swap": a loop of n steps swaps the two views; "pick": the loop body picks
    OTHER on even steps, FIRST on odd ones, for the next step; "branch": OTHER if c else FIRST,
    picked before the loop. Step k takes its view (THEN "slice": rows 1..2, columns 4..11 of it;
    "permute": transposed; "reshape": a leading 1 added and indexed away) and reads it into out[k]
    (STORE=0), writes y[k] through it (STORE=1) or async-copies y[k] into it (STORE=2); after
    STORE 1 or 2 the buffer is read back into out."""
    from gluon_trace.language.nvidia.ampere import async_copy
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 1], [1, 0])
    rf = gl.arange(0, 16, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(DT, [16, 32], LAY, gl.load(x_ptr + rf))
    v = buf.slice(FIRST[0], 4, 0).slice(FIRST[1], 16, 1)
    w = buf.slice(OTHER[0], 4, 0).slice(OTHER[1], 16, 1)
    if MOVE == "branch":
        with gl.if_(c == 1):
            v = buf.slice(OTHER[0], 4, 0).slice(OTHER[1], 16, 1)
    for k in gl.range(0, n):
        u = v
        if THEN == "slice":
            u = v.slice(1, 2, 0).slice(4, 8, 1)
        elif THEN == "permute":
            u = v.permute([1, 0])
        elif THEN == "reshape":
            u = v.reshape([1, 4, 16]).index(0)
        shape: gl.constexpr = u.shape
        L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
        r = gl.arange(0, shape[0], gl.SliceLayout(1, L))[:, None] * shape[1] + \
            gl.arange(0, shape[1], gl.SliceLayout(0, L))[None, :]
        size: gl.constexpr = shape[0] * shape[1]
        if STORE == 2:
            async_copy.async_load(u, y_ptr + k * size + r)
            async_copy.commit_group()
            async_copy.wait_group(0)
        elif STORE == 1:
            u.store(gl.load(y_ptr + k * size + r))
        else:
            gl.store(out_ptr + k * size + r, u.load(L).to(gl.float32))
        if MOVE == "swap":
            v, w = w, v
        elif MOVE == "pick":
            t = buf.slice(FIRST[0], 4, 0).slice(FIRST[1], 16, 1)
            with gl.if_(k % 2 == 0):
                t = buf.slice(OTHER[0], 4, 0).slice(OTHER[1], 16, 1)
            v = t
    if STORE:
        gl.thread_barrier()
        gl.store(out_ptr + rf, buf.load(F).to(gl.float32))


# (FIRST, OTHER) starts: rows and columns both inside the period, one of them at 0, a period apart
MOVED_PAIRS = [((1, 3), (2, 5)), ((0, 6), (3, 0)), ((5, 1), (1, 12)), ((9, 3), (2, 16))]
MOVED_DTYPES = {"f32": (np.float32, gl.float32), "f16": (np.float16, gl.float16), "i8": (np.int8, gl.int8)}


def moved_layouts(dt):
    """{name: layout} of a [16, 32] tile of ``dt``: a 16-byte chunk swizzled over 8 rows, pairs of
    rows sharing a phase, and the NVMMA layout Gluon picks."""
    e = 16 // (dt.primitive_bitwidth // 8)
    return {"chunk": gl.SwizzledSharedLayout(e, 1, 8, [1, 0]), "pairs": gl.SwizzledSharedLayout(max(e // 2, 1), 2, 4, [1, 0]),
            "nvmma": gl.NVMMASharedLayout.get_default_for([16, 32], dt)}


def check_moved_two_dims(both, target, dtname, lay, move, pair, then, store, n=4, c=1):
    """One moved_two_dims kernel on fresh inputs (no zeros) against numpy and the interpreter; its text."""
    dtype, dt = MOVED_DTYPES[dtname]
    first, other = pair
    x = V._fresh(dtype, (16, 32))
    picks = [other if c else first] * n if move == "branch" else [first if k % 2 == 0 else other for k in range(n)]
    buf = x.astype(np.float32)

    def view(k):
        (r0, c0) = picks[k]
        a = buf[r0:r0 + 4, c0:c0 + 16]
        return a[1:3, 4:12] if then == "slice" else a.T if then == "permute" else a
    shape = view(0).shape
    y = V._fresh(dtype, (n,) + shape)
    if store:
        for k in range(n):
            view(k)[...] = y[k]
        exp = buf
    else:
        exp = np.stack([view(k).copy() for k in range(n)])
    ref, sim, text = both(moved_two_dims, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), n, c],
                          target, num_warps=1, DT=dt, LAY=moved_layouts(dt)[lay], FIRST=first, OTHER=other, MOVE=move,
                          THEN=then, STORE=store)
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (dtname, lay, move, pair, then, store)
    return text


# (dtype, layout, MOVE, MOVED_PAIRS index, THEN, STORE) of the two-dim runs both backends take:
# every dtype, layout, join, view op and access at least once (async copies of 4-byte elements)
MOVED_RUNS = [("f32", "chunk", "branch", 0, "none", 0), ("f32", "chunk", "swap", 0, "none", 1),
              ("f32", "pairs", "pick", 2, "slice", 0), ("f32", "nvmma", "swap", 3, "permute", 1),
              ("f32", "chunk", "swap", 2, "none", 2), ("f32", "nvmma", "branch", 1, "reshape", 2),
              ("f16", "nvmma", "pick", 1, "none", 0), ("f16", "chunk", "swap", 3, "reshape", 1),
              ("f16", "pairs", "branch", 0, "permute", 0), ("i8", "pairs", "swap", 3, "slice", 1),
              ("i8", "chunk", "pick", 2, "none", 0), ("i8", "nvmma", "branch", 0, "reshape", 1)]
MOVED_IDS = ["-".join(map(str, r)) for r in MOVED_RUNS]


# -- .reshape of a view whose start is known only at run time --------------------------------------

@gt.jit
def reshaped_join(x_ptr, y_ptr, out_ptr, c, FIRST: gl.constexpr, OTHER: gl.constexpr, NC: gl.constexpr,
                  HOW: gl.constexpr, STORE: gl.constexpr):
    """Rows r..r+3, columns k..k+NC-1 of every [16, 32] tile of a swizzled [2, 2, 16, 32] f32 buffer
    holding x, (r, k) FIRST or (c == 1) OTHER, picked by a branch, then reshaped: HOW "regroup" the
    [2, 2] stack to [4] (the view [4, 4, NC]); "unit" a leading 1 added to tile (1, 0) and indexed
    back ([4, NC]). (The type rule takes reshapes of the stacked dims only.) STORE=0: read into out; 1: y written through it, the buffer read back."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1, 1, 4], [1, 1, W // 8, 8], [1, 1, 1, 1], [3, 2, 1, 0])
    S2: gl.constexpr = gl.SliceLayout(2, gl.SliceLayout(3, F))
    s0 = gl.arange(0, 2, gl.SliceLayout(1, S2))[:, None, None, None]
    s1 = gl.arange(0, 2, gl.SliceLayout(0, S2))[None, :, None, None]
    rr = gl.arange(0, 16, gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, F))))[None, None, :, None]
    cc = gl.arange(0, 32, gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, F))))[None, None, None, :]
    rf = s0 * 1024 + s1 * 512 + rr * 32 + cc
    buf = gl.allocate_shared_memory(gl.float32, [2, 2, 16, 32], SW,
                                    gl.load(x_ptr + rf))
    v = buf.slice(FIRST[0], 4, 2).slice(FIRST[1], NC, 3)
    with gl.if_(c == 1):
        v = buf.slice(OTHER[0], 4, 2).slice(OTHER[1], NC, 3)
    L3: gl.constexpr = gl.BlockedLayout([1, 1, 1], [1, W // 8, 8], [1, 1, 1], [2, 1, 0])
    L2: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    if HOW == "regroup":
        u = v.reshape([4, 4, NC])
        r = gl.arange(0, 4, gl.SliceLayout(1, gl.SliceLayout(2, L3)))[:, None, None] * (4 * NC) + \
            gl.arange(0, 4, gl.SliceLayout(0, gl.SliceLayout(2, L3)))[None, :, None] * NC + \
            gl.arange(0, NC, gl.SliceLayout(0, gl.SliceLayout(1, L3)))[None, None, :]
        if STORE:
            u.store(gl.load(y_ptr + r))
        else:
            gl.store(out_ptr + r, u.load(L3))
    else:
        u = v.index(1).index(0).reshape([1, 4, NC]).index(0)
        r = gl.arange(0, 4, gl.SliceLayout(1, L2))[:, None] * NC + gl.arange(0, NC, gl.SliceLayout(0, L2))[None, :]
        if STORE:
            u.store(gl.load(y_ptr + r))
        else:
            gl.store(out_ptr + r, u.load(L2))
    if STORE:
        gl.thread_barrier()
        gl.store(out_ptr + rf, buf.load(F))


# (FIRST, OTHER, NC): rows moving (whole rows), rows and columns moving
RESHAPE_JOINS = [((1, 0), (2, 0), 32), ((6, 0), (3, 0), 32), ((1, 3), (2, 5), 16)]
RESHAPE_IDS = ["rows1-2", "rows6-3", "rows-cols"]


def _reshaped_sel(a, how, r0, k0, nc):
    """The view reshaped_join reads or writes, of the [2, 2, 16, 32] array ``a`` (a numpy view)."""
    t = a[:, :, r0:r0 + 4, k0:k0 + nc]
    return t.reshape(4, 4, nc) if how == "regroup" else t[1, 0]


def check_reshaped_join(both, target, how, first, other, nc, store, c):
    x = V._fresh(np.float32, (2, 2, 16, 32))
    r0, k0 = other if c else first
    shape = _reshaped_sel(x, how, r0, k0, nc).shape
    y = V._fresh(np.float32, shape)
    if store:
        exp = x.copy()
        t = exp[:, :, r0:r0 + 4, k0:k0 + nc]
        if how == "regroup":
            t[...] = y.reshape(t.shape)
        else:
            t[1, 0] = y
    else:
        exp = np.array(_reshaped_sel(x, how, r0, k0, nc))
    ref, sim, text = both(reshaped_join, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), c],
                          target, num_warps=1, FIRST=first, OTHER=other, NC=nc, HOW=how, STORE=store)
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (how, first, other, store, c)
    return text


# -- a moving start in a stacked dim that a .reshape merges or splits -------------------------------

@gt.jit
def stacked_reshape(x_ptr, y_ptr, out_ptr, n, c, FIRST: gl.constexpr, OTHER: gl.constexpr, NC: gl.constexpr,
                    HOW: gl.constexpr, MOVE: gl.constexpr, STORE: gl.constexpr):
    """A swizzled [8, 2, 8, 32] f32 buffer holding x; FIRST and OTHER: (stack, row, column) starts of
    [LEN, 2, 4, NC] views of it (LEN 1, 2, 4 for HOW "drop", "merge", "split"). MOVE "branch": OTHER
    if c else FIRST, picked before a loop of n steps; "swap": a loop of n steps swaps the two views
    (the view a carried value); "none": FIRST, no join (its start known at compile time). Step k reshapes its view: "drop" [1, 2, 4, NC] -> [2, 4, NC] (the
    moving dim, of 1, merged into the next), "merge" [2, 2, 4, NC] -> [4, 4, NC], "split" [4, 2, 4,
    NC] -> [2, 2, 2, 4, NC] then .index(1); and reads it into out[k] (STORE=0) or writes y[k]
    through it (STORE=1; the buffer then read back into out)."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1, 1, 4], [1, 1, W // 8, 8], [1, 1, 1, 1], [3, 2, 1, 0])
    S2: gl.constexpr = gl.SliceLayout(2, gl.SliceLayout(3, F))
    s0 = gl.arange(0, 8, gl.SliceLayout(1, S2))[:, None, None, None]
    s1 = gl.arange(0, 2, gl.SliceLayout(0, S2))[None, :, None, None]
    rr = gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, F))))[None, None, :, None]
    cc = gl.arange(0, 32, gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, F))))[None, None, None, :]
    rf = s0 * 512 + s1 * 256 + rr * 32 + cc
    buf = gl.allocate_shared_memory(gl.float32, [8, 2, 8, 32], SW, gl.load(x_ptr + rf))
    LEN: gl.constexpr = 1 if HOW == "drop" else 2 if HOW == "merge" else 4
    v = buf.slice(FIRST[0], LEN, 0).slice(FIRST[1], 4, 2).slice(FIRST[2], NC, 3)
    w = buf.slice(OTHER[0], LEN, 0).slice(OTHER[1], 4, 2).slice(OTHER[2], NC, 3)
    if MOVE == "branch":
        with gl.if_(c == 1):
            v = buf.slice(OTHER[0], LEN, 0).slice(OTHER[1], 4, 2).slice(OTHER[2], NC, 3)
    L3: gl.constexpr = gl.BlockedLayout([1, 1, 1], [1, W // 8, 8], [1, 1, 1], [2, 1, 0])
    for k in gl.range(0, n):
        if HOW == "split":
            u = v.reshape([2, 2, 2, 4, NC]).index(1)
            r = gl.arange(0, 2, gl.SliceLayout(1, S2))[:, None, None, None] * (8 * NC) + s1 * (4 * NC) + \
                gl.arange(0, 4, gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, F))))[None, None, :, None] * NC + \
                gl.arange(0, NC, gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, F))))[None, None, None, :]
            size: gl.constexpr = 16 * NC
            if STORE:
                u.store(gl.load(y_ptr + k * size + r))
            else:
                gl.store(out_ptr + k * size + r, u.load(F))
        else:
            A: gl.constexpr = 2 * LEN
            u = v.reshape([A, 4, NC])
            r = gl.arange(0, A, gl.SliceLayout(1, gl.SliceLayout(2, L3)))[:, None, None] * (4 * NC) + \
                gl.arange(0, 4, gl.SliceLayout(0, gl.SliceLayout(2, L3)))[None, :, None] * NC + \
                gl.arange(0, NC, gl.SliceLayout(0, gl.SliceLayout(1, L3)))[None, None, :]
            size: gl.constexpr = A * 4 * NC
            if STORE:
                u.store(gl.load(y_ptr + k * size + r))
            else:
                gl.store(out_ptr + k * size + r, u.load(L3))
        if MOVE == "swap":
            v, w = w, v
    if STORE:
        gl.thread_barrier()
        gl.store(out_ptr + rf, buf.load(F))


# (FIRST, OTHER, NC): only the stacked start moving (rows from 1 in both: one table, one register),
# the rows moving too, rows and columns too, the stacked start fixed while the rows move
STACKED_STARTS = [((1, 1, 0), (4, 1, 0), 32), ((0, 1, 0), (1, 2, 0), 32), ((3, 3, 3), (0, 2, 5), 16),
                  ((2, 1, 0), (2, 3, 0), 32)]
STACKED_IDS = ["stack", "stack-rows", "stack-rows-cols", "rows"]


def _stacked_sel(a, how, start, nc):
    """The view step k of stacked_reshape reads or writes, of the [8, 2, 8, 32] array ``a`` (a numpy view)."""
    s0, r0, k0 = start
    n = {"drop": 1, "merge": 2, "split": 4}[how]
    t = a[s0:s0 + n, :, r0:r0 + 4, k0:k0 + nc]
    return t.reshape(2, 2, 2, 4, nc)[1] if how == "split" else t.reshape(2 * n, 4, nc)


def check_stacked_reshape(both, target, how, move, first, other, nc, store, n=3, c=1):
    """One stacked_reshape kernel on fresh inputs (no zeros) against numpy and the interpreter; its text."""
    x = V._fresh(np.float32, (8, 2, 8, 32))
    picks = [other if c else first] * n if move == "branch" else [first if k % 2 == 0 or move == "none" else other
                                                                   for k in range(n)]
    shape = _stacked_sel(x, how, first, nc).shape
    y = V._fresh(np.float32, (n,) + shape)
    if store:
        exp = x.copy()
        for k in range(n):
            _stacked_sel(exp, how, picks[k], nc)[...] = y[k]
    else:
        exp = np.stack([_stacked_sel(x, how, picks[k], nc).copy() for k in range(n)])
    ref, sim, text = both(stacked_reshape, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), n, c],
                          target, num_warps=1, FIRST=first, OTHER=other, NC=nc, HOW=how, MOVE=move, STORE=store)
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (how, move, first, other, store, c)
    return text

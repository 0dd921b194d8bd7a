"""Shared-memory views the backends refused though the interpreter runs them, shared by the
NVIDIA (PTX simulator) and AMD (amdsim) tests, with numpy's expected results:

- view ops on a view with a run-time XOR: a column half of a 128-byte-swizzled [2, 32, 32]
  buffer picked by a branch (or swapped by a loop), then indexed, sliced (rows: the start
  moves; columns inside the swizzle's period: the XOR changes), permuted, reshaped (the slot
  dim merged into the rows) or reinterpreted, and loaded or stored through the result;
- a padded view joined by a branch or loop whose lowest start comes from a nested branch or
  loop (the join's kept start must be the nested code's, not its first arm's);
- row and column slices of padded [8, 32] buffers (slot i of a [2, 8, 32] one too) from
  starts inside a padding period, loaded and stored, no branch or loop.

Layouts take the target's wave size (gl.threads_per_warp()), so one kernel serves both."""
from __future__ import annotations

import numpy as np

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.ampere import async_copy
from gluon_trace.ops_memory import element_offsets

SW = gl.SwizzledSharedLayout(4, 1, 8, [1, 0])   # f32 rows of 128 bytes, 16-byte chunks swizzled by row
OPS = ["index", "index_rows", "index_cols", "slot_slice", "permute", "reshape", "reinterpret"]


def shared(kind):
    if kind == "nvmma":
        return gl.NVMMASharedLayout.get_default_for([32, 32], gl.float32)
    return SW


@gt.jit
def xor_view_op(x_ptr, y_ptr, out_ptr, c, i, OP: gl.constexpr, STORE: gl.constexpr, SHARED: gl.constexpr):
    """Column half c of a [2, 32, 32] f32 buffer (picked by a branch: a run-time XOR of 64 bytes),
    then OP. STORE=0: the resulting view read into out; STORE=1: y written through it and the
    whole buffer read back into out."""
    W: gl.constexpr = gl.threads_per_warp()
    B3: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, W // 8, 8], [1, 4, 1], [2, 1, 0])
    s0 = gl.arange(0, 2, gl.SliceLayout(1, gl.SliceLayout(2, B3)))[:, None, None]
    s1 = gl.arange(0, 32, gl.SliceLayout(0, gl.SliceLayout(2, B3)))[None, :, None]
    s2 = gl.arange(0, 32, gl.SliceLayout(0, gl.SliceLayout(1, B3)))[None, None, :]
    full = s0 * 1024 + s1 * 32 + s2
    buf = gl.allocate_shared_memory(gl.float32, [2, 32, 32], SHARED)
    buf.store(gl.load(x_ptr + full))
    v = buf.slice(0, 16, dim=2)
    with gl.if_(c > 0):
        v = buf.slice(16, 16, dim=2)
    if OP == "index":
        w = v.index(i)                                   # [32, 16]
    elif OP == "index_rows":
        w = v.index(i).slice(8, 16, dim=0)               # rows 8..23: past the swizzle's 8-row period
    elif OP == "index_cols":
        w = v.index(i).slice(8, 8, dim=1)                # the half's columns 8..15: the XOR changes
    elif OP == "slot_slice":
        w = v.slice(1, 1, dim=0).reshape([32, 16])       # slot 1 by a slice of the stacked dim
    elif OP == "cols_unaligned":
        w = v.index(i).slice(2, 8, dim=1)                # columns 2..9: splits the 16-byte chunks
    elif OP == "permute":
        w = v.index(i).permute((1, 0))                   # [16, 32]
    elif OP == "reshape":
        w = v.reshape([1, 2, 32, 16]).index(0).index(i)  # (only stacked dims may regroup)
    else:
        w = v.index(i).reinterpret(gl.float32, [16, 16], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    shape: gl.constexpr = w.shape
    L: gl.constexpr = gl.BlockedLayout([1, 2], [W // 8, 8], [4, 1], [1, 0])
    r = gl.arange(0, shape[0], gl.SliceLayout(1, L))[:, None] * shape[1] + \
        gl.arange(0, shape[1], gl.SliceLayout(0, L))[None, :]
    if STORE:
        w.store(gl.load(y_ptr + r))
        gl.store(out_ptr + full, buf.load(B3))
    else:
        gl.store(out_ptr + r, w.load(L))


def physical(x: np.ndarray, layout) -> np.ndarray:
    """The f32 words of a [2, 32, 32] buffer in ``layout`` holding x, as they lie in memory."""
    offs, n = element_offsets(layout, (2, 32, 32), 32)
    mem = np.full(n, np.nan, np.float32)
    mem[np.asarray(offs).ravel()] = x.ravel()
    return mem


def xor_view_expected(op, x, y, c, i, store, layout):
    """What the interpreter must give for xor_view_op."""
    half = (slice(None), slice(None), slice(16 * c, 16 * c + 16))
    if op == "reinterpret":
        mem = physical(x, layout)
        start = int(np.asarray(element_offsets(layout, (2, 32, 32), 32)[0])[half][i].min())
        if not store:
            return mem[start:start + 256].reshape(16, 16)
        mem[start:start + 256] = y.ravel()
        return mem[np.asarray(element_offsets(layout, (2, 32, 32), 32)[0])]
    sel = {"index": lambda a: a[half][i], "index_rows": lambda a: a[half][i][8:24],
           "index_cols": lambda a: a[half][i][:, 8:16], "slot_slice": lambda a: a[half][1],
           "permute": lambda a: a[half][i].T, "reshape": lambda a: a[half][i]}[op]
    if not store:
        return sel(x).copy()
    out = x.copy()
    if op == "permute":
        out[half][i][...] = y.T
    else:
        sel(out)[...] = y   # (basic slices: a view of out)
    return out


def out_shape(op, store):
    if store:
        return (2, 32, 32)
    return {"index": (32, 16), "index_rows": (16, 16), "index_cols": (32, 8), "slot_slice": (32, 16),
            "permute": (16, 32), "reshape": (32, 16), "reinterpret": (16, 16), "cols_unaligned": (32, 8)}[op]


@gt.jit
def xor_view_in_loop(x_ptr, out_ptr, n):
    """Column halves swapped each step by a loop (the carried view's XOR changes), the body
    reading slot i % 2 of the half it holds, rows 8..23, columns 8..15 of it."""
    W: gl.constexpr = gl.threads_per_warp()
    B3: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, W // 8, 8], [1, 4, 1], [2, 1, 0])
    s0 = gl.arange(0, 2, gl.SliceLayout(1, gl.SliceLayout(2, B3)))[:, None, None]
    s1 = gl.arange(0, 32, gl.SliceLayout(0, gl.SliceLayout(2, B3)))[None, :, None]
    s2 = gl.arange(0, 32, gl.SliceLayout(0, gl.SliceLayout(1, B3)))[None, None, :]
    buf = gl.allocate_shared_memory(gl.float32, [2, 32, 32], SW)
    buf.store(gl.load(x_ptr + s0 * 1024 + s1 * 32 + s2))
    L: gl.constexpr = gl.BlockedLayout([1, 2], [W // 8, 8], [4, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    half = buf.slice(0, 16, dim=2)
    other = buf.slice(16, 16, dim=2)
    for i in gl.range(0, n):
        w = half.index(i % 2).slice(8, 16, dim=0).slice(8, 8, dim=1)
        gl.store(out_ptr + i * 128 + r, w.load(L))
        half, other = other, half


def xor_view_in_loop_expected(x, n):
    return np.stack([x[i % 2, 8:24, 16 * (i % 2) + 8:16 * (i % 2) + 16] for i in range(n)])


@gt.jit
def xor_reinterpret_join(x_ptr, out_ptr, c, d):
    """Column half c picked by a branch, then a second branch joins reinterprets of its slot 0 or
    slot d: views whose start moved by the run-time XOR (the join predicts them ahead)."""
    W: gl.constexpr = gl.threads_per_warp()
    B3: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, W // 8, 8], [1, 4, 1], [2, 1, 0])
    s0 = gl.arange(0, 2, gl.SliceLayout(1, gl.SliceLayout(2, B3)))[:, None, None]
    s1 = gl.arange(0, 32, gl.SliceLayout(0, gl.SliceLayout(2, B3)))[None, :, None]
    s2 = gl.arange(0, 32, gl.SliceLayout(0, gl.SliceLayout(1, B3)))[None, None, :]
    buf = gl.allocate_shared_memory(gl.float32, [2, 32, 32], SW)
    buf.store(gl.load(x_ptr + s0 * 1024 + s1 * 32 + s2))
    v = buf.slice(0, 16, dim=2)
    with gl.if_(c > 0):
        v = buf.slice(16, 16, dim=2)
    P: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
    w = v.index(0).reinterpret(gl.float32, [16, 16], P)
    with gl.if_(d > 0):
        w = v.index(1).reinterpret(gl.float32, [16, 16], P)
    L: gl.constexpr = gl.BlockedLayout([1, 2], [W // 8, 8], [4, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, L))[None, :]
    gl.store(out_ptr + r, w.load(L))


# -- padded views whose lowest start comes from nested code -------------------------------------

PAD = gl.PaddedSharedLayout.with_identity_for([[8, 4]], [8, 8], [1, 0])   # rows of 8 f32, 4 padding


@gt.jit
def padded_nested_branch(x_ptr, out_ptr, a, b, A: gl.constexpr, B: gl.constexpr, C: gl.constexpr):
    """Rows A..A+3 of a padded buffer if a, else rows B.. or, if b, rows C.. (a branch nested in
    the else arm: its view is not one the outer join sees when it emits the first arm)."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, 8, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [8, 8], PAD, gl.load(x_ptr + r))
    v = buf.slice(0, 4, 0)
    with gl.if_(a > 0):
        v = buf.slice(A, 4, 0)
    with gl.else_():
        w = buf.slice(B, 4, 0)
        with gl.if_(b > 0):
            w = buf.slice(C, 4, 0)
        v = w
    gl.store(out_ptr + rh, v.load(L))


@gt.jit
def padded_loop_nested_branch(x_ptr, out_ptr, n, A: gl.constexpr, B: gl.constexpr, C: gl.constexpr,
                              LAY: gl.constexpr = PAD, ROWS: gl.constexpr = 8, COLS: gl.constexpr = 8):
    """A padded view carried by a loop: rows A.. (four of them) of a [ROWS, COLS] f32 buffer in LAY
    on entry; each step yields rows B.., or rows C.. on even steps (a branch in the body picks the
    next view). (tests/smem_swizzled_cases.py runs it on a [16, 32] swizzled buffer.)"""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, ROWS, gl.SliceLayout(1, L))[:, None] * COLS + gl.arange(0, COLS, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * COLS + gl.arange(0, COLS, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [ROWS, COLS], LAY, gl.load(x_ptr + r))
    v = buf.slice(A, 4, 0)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * (4 * COLS) + rh, v.load(L))
        w = buf.slice(B, 4, 0)
        with gl.if_(i % 2 == 0):
            w = buf.slice(C, 4, 0)
        v = w


@gt.jit
def padded_loop_nested_loop(x_ptr, out_ptr, n, m, A: gl.constexpr, B: gl.constexpr, C: gl.constexpr):
    """A padded view carried by a loop: rows A.. on entry; each step's next view is rows B..,
    replaced by rows C.. in a nested loop of m steps."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, 8, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [8, 8], PAD, gl.load(x_ptr + r))
    v = buf.slice(A, 4, 0)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 32 + rh, v.load(L))
        w = buf.slice(B, 4, 0)
        for j in gl.range(0, m):
            w = buf.slice(C, 4, 0)
        v = w


@gt.jit
def padded_branch(x_ptr, out_ptr, flag, FIRST: gl.constexpr, OTHER: gl.constexpr):
    """Rows FIRST..FIRST+3 of a padded buffer, or OTHER.. if flag (no nesting: the plain join)."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, 8, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [8, 8], PAD, gl.load(x_ptr + r))
    v = buf.slice(FIRST, 4, 0)
    with gl.if_(flag > 0):
        v = buf.slice(OTHER, 4, 0)
    gl.store(out_ptr + rh, v.load(L))


# (A, B, C): the nested code's view starts lowest (C), or in the middle, or the first arm's does
NESTED = [(3, 2, 1), (2, 3, 0), (4, 1, 3), (0, 4, 2)]


def padded_nested_branch_expected(x, a, b, A, B, C):
    r0 = A if a else (C if b else B)
    return x[r0:r0 + 4].copy()


def padded_loop_expected(x, n, A, rows_after):
    """Step 0 reads rows A..; step i > 0 rows rows_after(i - 1).."""
    return np.stack([x[(A if i == 0 else rows_after(i - 1)):][:4] for i in range(n)])


def rand(shape, dtype=np.float32):
    return np.random.default_rng().standard_normal(shape).astype(dtype)


# -- the checks both backends' tests run alike: ``both(kernel, make, target, ...)`` is the
# backend's (interpreter's args, simulator's args, emitted text) of one trace on fresh args

def check_unaligned_columns_of_a_half(both, target, c):
    """Columns 2..9 of the branch-picked half ``c`` (the swizzle's 16-byte chunks split) with the
    run-time XOR, read and written through, against numpy (the backends' fuzz-found fixes)."""
    x, y = rand((2, 32, 32)), rand((32, 8))
    half = (slice(None), slice(None), slice(16 * c, 16 * c + 16))
    for i in (0, 1):
        for store in (0, 1):
            if store:
                exp = x.copy()
                exp[half][i][:, 2:10] = y
            else:
                exp = x[half][i][:, 2:10].copy()
            ref, sim, _ = both(xor_view_op, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), c, i],
                               target, OP="cols_unaligned", STORE=store, SHARED=SW)
            assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (i, store)


def check_loop_carried_column_half(both, target):
    x, n = rand((2, 32, 32)), 4
    exp = xor_view_in_loop_expected(x, n)
    ref, sim, _ = both(xor_view_in_loop, lambda: [x.copy(), np.full(exp.shape, np.nan, np.float32), n], target)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


def check_padded_nested_branch(both, target, abc):
    x = rand((8, 8))
    for a, b in [(0, 0), (0, 1), (1, 0)]:
        exp = padded_nested_branch_expected(x, a, b, *abc)
        ref, sim, _ = both(padded_nested_branch, lambda: [x.copy(), np.full((4, 8), np.nan, np.float32), a, b],
                           target, num_warps=1, A=abc[0], B=abc[1], C=abc[2])
        assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp), (a, b)


def check_padded_loop_nested_branch(both, target, abc, lay=PAD, rows=8, cols=8):
    x, n = rand((rows, cols)), 4
    A, B, C = abc
    exp = padded_loop_expected(x, n, A, lambda i: C if i % 2 == 0 else B)
    ref, sim, _ = both(padded_loop_nested_branch, lambda: [x.copy(), np.full((n, 4, cols), np.nan, np.float32), n],
                       target, num_warps=1, A=A, B=B, C=C, LAY=lay, ROWS=rows, COLS=cols)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


def check_padded_loop_nested_loop(both, target, abc, m):
    x, n = rand((8, 8)), 3
    A, B, C = abc
    exp = padded_loop_expected(x, n, A, lambda i: C if m else B)
    ref, sim, _ = both(padded_loop_nested_loop, lambda: [x.copy(), np.full((n, 4, 8), np.nan, np.float32), n, m],
                       target, num_warps=1, A=A, B=B, C=C)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


def refusal_line(msg: str, path: str) -> str:
    """The source line an error message names in ``path`` (this file)."""
    import re
    at = int(re.search(re.escape(path.rsplit("/", 1)[-1]) + r":(\d+)", msg).group(1))
    return open(path).read().splitlines()[at - 1]


# -- plain loads and stores of slices of padded buffers (no branch, no loop) ----------------------

def padded(pairs, order=(1, 0)):
    """A padded [8, 32] layout ([interval, padding] pairs in elements); order (0, 1): rows contiguous."""
    return gl.PaddedSharedLayout.with_identity_for([list(p) for p in pairs], [8, 32], list(order))


# (layout, its name): one row of 32 a padding period, two rows, half a row with odd padding, four
# rows, two pairs, and columns contiguous in memory (a row slice is the inner dim's)
PADDED = [(padded([[32, 4]]), "32:+4"), (padded([[64, 4]]), "64:+4"), (padded([[16, 1]]), "16:+1"),
          (padded([[128, 8]]), "128:+8"), (padded([[16, 2], [64, 4]]), "16:+2,64:+4"),
          (padded([[8, 1]], (0, 1)), "col-major 8:+1")]

# offset bits alternate between rows and columns (offset bit 1 is row bit 0): a slice of rows
# 1..4 sits at offsets 2, 64, 66, 128 (+ columns), additive in the view's coordinate bits but
# neither XOR-linear nor a constant plus an XOR-linear table
PAD_INTERLEAVED = gl.PaddedSharedLayout([[32, 4]], [[0, 1], [1, 0], [0, 2], [0, 4], [0, 8], [0, 16], [2, 0], [4, 0]],
                                        shape=[8, 32])

# slices applied in turn, each (start, length, dim) of the [8, 32] tile: rows from unaligned
# starts, columns, rows then columns
SLICES = [((1, 4, 0),), ((3, 4, 0),), ((5, 2, 0),), ((3, 8, 1),), ((12, 4, 1),), ((1, 4, 0), (6, 8, 1))]


@gt.jit
def padded_slice(x_ptr, y_ptr, out_ptr, i, DT: gl.constexpr, LAY: gl.constexpr, STACK: gl.constexpr,
                 SLICES: gl.constexpr, VEC: gl.constexpr, STORE: gl.constexpr, ROWS: gl.constexpr = 8):
    """A [ROWS, 32] buffer of DT in the padded layout LAY (slot i of a [2, ROWS, 32] one if STACK)
    holding x, sliced by SLICES. STORE=0: the slice read into out (as f32); STORE=1: y written
    through it and the whole buffer read back into out. (tests/smem_swizzled_cases.py runs it
    with ROWS=16 on swizzled layouts.)"""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 2], [1, 0])
    rf = gl.arange(0, ROWS, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    if STACK:
        buf = gl.allocate_shared_memory(DT, [2, ROWS, 32], LAY)
        buf.index(0).store(gl.load(x_ptr + rf))
        buf.index(1).store(gl.load(x_ptr + ROWS * 32 + rf))
        v = buf.index(i)
    else:
        buf = gl.allocate_shared_memory(DT, [ROWS, 32], LAY, gl.load(x_ptr + rf))
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
            gl.store(out_ptr + ROWS * 32 + rf, buf.index(1).load(F).to(gl.float32))
        else:
            gl.store(out_ptr + rf, buf.load(F).to(gl.float32))
    else:
        gl.store(out_ptr + r, v.load(L).to(gl.float32))


def padded_slice_shape(slices, rows=8):
    shape = [rows, 32]
    for _, n, dim in slices:
        shape[dim] = n
    return tuple(shape)


def padded_slice_expected(x, y, i, stack, slices, store):
    """What the interpreter must give for padded_slice (x: [2, ROWS, 32], y: the slice's shape)."""
    out = x.astype(np.float32)
    tile = out[i] if stack else out[0]
    sel = tile
    for start, n, dim in slices:
        sel = sel[start:start + n] if dim == 0 else sel[:, start:start + n]
    if not store:
        return sel.copy()
    sel[...] = y   # (basic slices: a view of out)
    return out if stack else out[0]


def padded_slice_inputs(dtype, slices, rng=None, rows=8):
    """Fresh x [2, rows, 32] and y (the slice's shape) of ``dtype``: normal floats, or integers over
    the whole int8 range with no zero (exact as f32)."""
    rng = rng or np.random.default_rng()
    shapes = [(2, rows, 32), padded_slice_shape(slices, rows)]
    if np.dtype(dtype).kind == "i":
        return [np.where(a == 0, 1, a).astype(dtype) for a in (rng.integers(-128, 128, s) for s in shapes)]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


# -- padded views from inside a padding period, carried by a loop or of a whole stack ------------

# dtype name -> (gl dtype name, numpy dtype): 1, 2, 4 and 8 bytes an element
PAD_DTYPES = {"int8": np.int8, "float16": np.float16, "float32": np.float32, "float64": np.float64}


@gt.jit
def padded_loop_views(x_ptr, y_ptr, out_ptr, n, DT: gl.constexpr, LAY: gl.constexpr, STACK: gl.constexpr,
                      FIRST: gl.constexpr, OTHER: gl.constexpr, MOVE: gl.constexpr, BODY: gl.constexpr,
                      VEC: gl.constexpr, STORE: gl.constexpr):
    """An [8, 32] buffer of DT in the padded layout LAY holding x[0] (STACK 1: slot 1 of a
    [2, 8, 32] one, x[1] in slot 0; STACK 2: the whole [2, 8, 32] one holding x, its views
    sliced in dims 1 and 2). A loop of n steps carries a view: FIRST (slices (start, length,
    dim) of the [8, 32] tile) on entry, then OTHER and FIRST in turn: swapped with a second
    carried view (MOVE "swap") or picked by a branch in the body (MOVE "branch"). Step k takes
    the view it holds (STACK 2: its slot k % 2), rows 1..2 of it if BODY is "rows", and reads
    it into out[k] (STORE=0) or writes y[k] through it (STORE=1; the whole buffer read back into
    out after the loop)."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 2], [1, 0])
    rf = gl.arange(0, 8, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    lead: gl.constexpr = 1 if STACK == 2 else 0
    if STACK == 1:
        buf = gl.allocate_shared_memory(DT, [2, 8, 32], LAY)
        buf.index(0).store(gl.load(x_ptr + 256 + rf))
        buf.index(1).store(gl.load(x_ptr + rf))
        t = buf.index(1)
    elif STACK == 2:
        t = gl.allocate_shared_memory(DT, [2, 8, 32], LAY)
        t.index(0).store(gl.load(x_ptr + rf))
        t.index(1).store(gl.load(x_ptr + 256 + rf))
    else:
        t = gl.allocate_shared_memory(DT, [8, 32], LAY, gl.load(x_ptr + rf))
    v = t
    for start, m, dim in FIRST:
        v = v.slice(start, m, dim + lead)
    w = t
    for start, m, dim in OTHER:
        w = w.slice(start, m, dim + lead)
    for k in gl.range(0, n):
        u = v.index(k % 2) if STACK == 2 else v
        if BODY == "rows":
            u = u.slice(1, 2, 0)
        shape: gl.constexpr = u.shape
        L: gl.constexpr = gl.BlockedLayout([1, VEC], [W // 8, 8], [1, 2], [1, 0])
        r = gl.arange(0, shape[0], gl.SliceLayout(1, L))[:, None] * shape[1] + \
            gl.arange(0, shape[1], gl.SliceLayout(0, L))[None, :]
        size: gl.constexpr = shape[0] * shape[1]
        if STORE:
            u.store(gl.load(y_ptr + k * size + r))
        else:
            gl.store(out_ptr + k * size + r, u.load(L))
        if MOVE == "swap":
            v, w = w, v
        else:
            nxt = t
            for start, m, dim in FIRST:
                nxt = nxt.slice(start, m, dim + lead)
            with gl.if_(k % 2 == 0):
                nxt = t
                for start, m, dim in OTHER:
                    nxt = nxt.slice(start, m, dim + lead)
            v = nxt
    if STORE:
        if STACK == 2:
            gl.store(out_ptr + rf, t.index(0).load(F))
            gl.store(out_ptr + 256 + rf, t.index(1).load(F))
        else:
            gl.store(out_ptr + rf, t.load(F))


def padded_loop_views_shape(first, body):
    shape = list(padded_slice_shape(first))
    if body == "rows":
        shape[0] = 2
    return tuple(shape)


def padded_loop_inputs(dtype, first, body, n, rng=None):
    """Fresh x [2, 8, 32] and y [n, *the view's shape] of ``dtype`` (integers: no zero)."""
    rng = rng or np.random.default_rng()
    shapes = [(2, 8, 32), (n,) + padded_loop_views_shape(first, body)]
    if np.dtype(dtype).kind == "i":
        return [np.where(a == 0, 1, a).astype(dtype) for a in (rng.integers(-128, 128, s) for s in shapes)]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def padded_loop_views_expected(x, y, n, first, other, stack, body, store):
    """What the interpreter must give for padded_loop_views."""
    def sel(a, slices):
        for start, m, dim in slices:
            a = a[start:start + m] if dim == 0 else a[:, start:start + m]
        return a[1:3] if body == "rows" else a
    tiles = x.copy() if stack == 2 else x[:1].copy()
    views = [sel(tiles[k % 2 if stack == 2 else 0], first if k % 2 == 0 else other) for k in range(n)]
    if not store:
        return np.stack([v.copy() for v in views])
    for k in range(n):
        views[k][...] = y[k]   # (basic slices: views of tiles, written in step order)
    return tiles if stack == 2 else tiles[0]


@gt.jit
def padded_stack_slice(x_ptr, y_ptr, out_ptr, i, DT: gl.constexpr, LAY: gl.constexpr, SLICES: gl.constexpr,
                       THEN: gl.constexpr, STORE: gl.constexpr):
    """A [2, 8, 32] buffer of DT in the padded layout LAY holding x, sliced as a whole by SLICES
    ((start, length, dim), dim 1 or 2: rows or columns of both slots), then THEN: "none" (the
    [2, r, c] view loaded or stored as it is), "index" (slot i of it) or "slot" (slot 1 of it by
    a slice of the stacked dim). STORE=0: the view read into out; STORE=1: y written through it
    and the whole buffer read back into out."""
    W: gl.constexpr = gl.threads_per_warp()
    B3: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, W // 8, 8], [2, 1, 1], [2, 1, 0])
    s0 = gl.arange(0, 2, gl.SliceLayout(1, gl.SliceLayout(2, B3)))[:, None, None]
    s1 = gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(2, B3)))[None, :, None]
    s2 = gl.arange(0, 32, gl.SliceLayout(0, gl.SliceLayout(1, B3)))[None, None, :]
    full = s0 * 256 + s1 * 32 + s2
    buf = gl.allocate_shared_memory(DT, [2, 8, 32], LAY, gl.load(x_ptr + full))
    v = buf
    for start, m, dim in SLICES:
        v = v.slice(start, m, dim)
    if THEN == "index":
        v = v.index(i)
    elif THEN == "slot":
        v = v.slice(1, 1, 0).reshape(v.shape[1:])
    shape: gl.constexpr = v.shape
    if len(shape) == 3:
        V3: gl.constexpr = gl.BlockedLayout([1, 1, 1], [1, W // 8, 8], [1, 2, 1], [2, 1, 0])
        r = gl.arange(0, shape[0], gl.SliceLayout(1, gl.SliceLayout(2, V3)))[:, None, None] * (shape[1] * shape[2]) + \
            gl.arange(0, shape[1], gl.SliceLayout(0, gl.SliceLayout(2, V3)))[None, :, None] * shape[2] + \
            gl.arange(0, shape[2], gl.SliceLayout(0, gl.SliceLayout(1, V3)))[None, None, :]
        lay: gl.constexpr = V3
    else:
        V2: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [2, 1], [1, 0])
        r = gl.arange(0, shape[0], gl.SliceLayout(1, V2))[:, None] * shape[1] + \
            gl.arange(0, shape[1], gl.SliceLayout(0, V2))[None, :]
        lay: gl.constexpr = V2
    if STORE:
        v.store(gl.load(y_ptr + r))
        gl.store(out_ptr + full, buf.load(B3))
    else:
        gl.store(out_ptr + r, v.load(lay))


def padded_stack_shape(slices, then):
    shape = [2, 8, 32]
    for _, m, dim in slices:
        shape[dim] = m
    return tuple(shape[1:]) if then != "none" else tuple(shape)


def padded_stack_expected(x, y, i, slices, then, store):
    out = x.copy()
    sel = out
    for start, m, dim in slices:
        idx = [slice(None)] * 3
        idx[dim] = slice(start, start + m)
        sel = sel[tuple(idx)]
    if then == "index":
        sel = sel[i]
    elif then == "slot":
        sel = sel[1]
    if not store:
        return sel.copy()
    sel[...] = y
    return out


FLAT = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])


@gt.jit
def padded_loop_reinterpret(x_ptr, out_ptr, n, DT: gl.constexpr, LAY: gl.constexpr, A: gl.constexpr,
                            B: gl.constexpr):
    """Rows A..A+3 and B..B+3 of a padded [8, 32] buffer holding x, swapped each step by a loop;
    step k reads the 16 elements from its view's start, reinterpreted as a flat [2, 8] tile."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 2], [1, 0])
    rf = gl.arange(0, 8, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(DT, [8, 32], LAY, gl.load(x_ptr + rf))
    L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 2], [1, 0])
    r = gl.arange(0, 2, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    v = buf.slice(A, 4, 0)
    w = buf.slice(B, 4, 0)
    for k in gl.range(0, n):
        gl.store(out_ptr + k * 16 + r, v.reinterpret(DT, [2, 8], FLAT).load(L))
        v, w = w, v


@gt.jit
def padded_loop_async_copy(y_ptr, out_ptr, n, DT: gl.constexpr, LAY: gl.constexpr, A: gl.constexpr,
                           B: gl.constexpr):
    """Rows A..A+1 and B..B+1 of a zeroed padded [8, 32] buffer, swapped each step by a loop; step
    k copies y[k] into its view with cp.async; the whole buffer read into out after the loop."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 2], [1, 0])
    rf = gl.arange(0, 8, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(DT, [8, 32], LAY, gl.zeros([8, 32], DT, F))
    L: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 2], [1, 0])
    r = gl.arange(0, 2, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    v = buf.slice(A, 2, 0)
    w = buf.slice(B, 2, 0)
    for k in gl.range(0, n):
        async_copy.async_copy_global_to_shared(v, y_ptr + k * 64 + r)
        async_copy.commit_group()
        async_copy.wait_group(0)
        v, w = w, v
    gl.thread_barrier()
    gl.store(out_ptr + rf, buf.load(F))


# -- the checks of these, both backends alike ----------------------------------------------------

# (FIRST, OTHER) of padded_loop_views: rows from inside a four-row period and from its start into
# the next, columns across a 32- or 16-element period, rows then columns. Both backends
PAD_LOOP_PAIRS = [(((1, 4, 0),), ((3, 4, 0),)), (((0, 4, 0),), ((2, 4, 0),)), (((3, 8, 1),), ((12, 8, 1),)),
                  (((1, 4, 0), (6, 8, 1)), ((2, 4, 0), (11, 8, 1)))]
# (MOVE, STORE, STACK, BODY): each pair runs these four
PAD_LOOP_RUNS = [("swap", 0, 0, "view"), ("branch", 1, 1, "view"), ("swap", 1, 2, "rows"), ("branch", 0, 2, "view")]
_GL = {"int8": gl.int8, "float16": gl.float16, "float32": gl.float32, "float64": gl.float64}


def _poisoned(shape, dtype):
    """An output the kernel must overwrite: NaN, or 0 for integers (the inputs have no zero)."""
    return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else 0, dtype)


def check_padded_loop_views(both, target, lay, dtname, first, other, move, store, stack, body, vec=1, n=4):
    dtype = PAD_DTYPES[dtname]
    x, y = padded_loop_inputs(dtype, first, body, n)
    exp = padded_loop_views_expected(x, y, n, first, other, stack, body, store)
    ref, sim, text = both(padded_loop_views, lambda: [x.copy(), y.copy(), _poisoned(exp.shape, dtype), n], target,
                          num_warps=2, DT=_GL[dtname], LAY=lay, STACK=stack, FIRST=first, OTHER=other, MOVE=move,
                          BODY=body, VEC=vec, STORE=store)
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (first, move, store, stack, body)
    return text


# slices of a whole [2, 8, 32] stack: rows from inside a four-row period, columns, both
PAD_STACK_SLICES = [((1, 4, 1),), ((3, 4, 1),), ((3, 8, 2),), ((1, 4, 1), (6, 8, 2))]


def _fresh(dtype, shape):
    """Random values of ``dtype``: normal floats, or integers over the int8 range with no zero."""
    rng = np.random.default_rng()
    if np.dtype(dtype).kind == "i":
        a = rng.integers(-128, 128, shape)
        return np.where(a == 0, 1, a).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def check_padded_stack_slice(both, target, lay, dtname, slices, then, store, i=1):
    dtype = PAD_DTYPES[dtname]
    x, y = _fresh(dtype, (2, 8, 32)), _fresh(dtype, padded_stack_shape(slices, then))
    exp = padded_stack_expected(x, y, i, slices, then, store)
    ref, sim, text = both(padded_stack_slice, lambda: [x.copy(), y.copy(), _poisoned(exp.shape, dtype), i], target,
                          num_warps=2, DT=_GL[dtname], LAY=lay, SLICES=slices, THEN=then, STORE=store)
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (slices, then, store)
    return text


def check_padded_loop_reinterpret(both, target, lay, a, b, n=4):
    x = rand((2, 8, 32))
    flat = x[0].ravel()
    exp = np.stack([flat[32 * r:32 * r + 16].reshape(2, 8) for r in ((a, b) * n)[:n]])
    ref, sim, text = both(padded_loop_reinterpret, lambda: [x.copy(), _poisoned(exp.shape, np.float32), n], target,
                          num_warps=2, DT=gl.float32, LAY=lay, A=a, B=b)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)
    return text


def check_padded_loop_async_copy(both, target, lay, a, b, n=2):
    y = rand((n, 2, 32))
    exp = np.zeros((8, 32), np.float32)
    for k in range(n):
        r = (a, b)[k % 2]
        exp[r:r + 2] = y[k]
    ref, sim, text = both(padded_loop_async_copy, lambda: [y.copy(), _poisoned((8, 32), np.float32), n], target,
                          num_warps=2, DT=gl.float32, LAY=lay, A=a, B=b)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)
    return text

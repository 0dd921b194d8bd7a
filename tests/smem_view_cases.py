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
def padded_loop_nested_branch(x_ptr, out_ptr, n, A: gl.constexpr, B: gl.constexpr, C: gl.constexpr):
    """A padded view carried by a loop: rows A.. on entry; each step yields rows B.., or rows C..
    on even steps (a branch in the body picks the next view)."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, 8, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [8, 8], PAD, gl.load(x_ptr + r))
    v = buf.slice(A, 4, 0)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 32 + rh, v.load(L))
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


def check_padded_loop_nested_branch(both, target, abc):
    x, n = rand((8, 8)), 4
    A, B, C = abc
    exp = padded_loop_expected(x, n, A, lambda i: C if i % 2 == 0 else B)
    ref, sim, _ = both(padded_loop_nested_branch, lambda: [x.copy(), np.full((n, 4, 8), np.nan, np.float32), n],
                       target, num_warps=1, A=A, B=B, C=C)
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
                 SLICES: gl.constexpr, VEC: gl.constexpr, STORE: gl.constexpr):
    """An [8, 32] buffer of DT in the padded layout LAY (slot i of a [2, 8, 32] one if STACK) holding
    x, sliced by SLICES. STORE=0: the slice read into out (as f32); STORE=1: y written through it
    and the whole buffer read back into out."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 2], [1, 0])
    rf = gl.arange(0, 8, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    if STACK:
        buf = gl.allocate_shared_memory(DT, [2, 8, 32], LAY)
        buf.index(0).store(gl.load(x_ptr + rf))
        buf.index(1).store(gl.load(x_ptr + 256 + rf))
        v = buf.index(i)
    else:
        buf = gl.allocate_shared_memory(DT, [8, 32], LAY, gl.load(x_ptr + rf))
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
            gl.store(out_ptr + 256 + rf, buf.index(1).load(F).to(gl.float32))
        else:
            gl.store(out_ptr + rf, buf.load(F).to(gl.float32))
    else:
        gl.store(out_ptr + r, v.load(L).to(gl.float32))


def padded_slice_shape(slices):
    shape = [8, 32]
    for _, n, dim in slices:
        shape[dim] = n
    return tuple(shape)


def padded_slice_expected(x, y, i, stack, slices, store):
    """What the interpreter must give for padded_slice (x: [2, 8, 32], y: the slice's shape)."""
    out = x.astype(np.float32)
    tile = out[i] if stack else out[0]
    sel = tile
    for start, n, dim in slices:
        sel = sel[start:start + n] if dim == 0 else sel[:, start:start + n]
    if not store:
        return sel.copy()
    sel[...] = y   # (basic slices: a view of out)
    return out if stack else out[0]


def padded_slice_inputs(dtype, slices, rng=None):
    """Fresh x [2, 8, 32] and y (the slice's shape) of ``dtype``: normal floats, or integers over
    the whole int8 range with no zero."""
    rng = rng or np.random.default_rng()
    shapes = [(2, 8, 32), padded_slice_shape(slices)]
    if np.dtype(dtype).kind == "i":
        return [np.where(a == 0, 1, a).astype(dtype) for a in (rng.integers(-128, 128, s) for s in shapes)]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]

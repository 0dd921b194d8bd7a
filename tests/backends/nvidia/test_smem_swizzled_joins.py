"""Views of swizzled shared buffers from starts inside a swizzle period, joined by control flow
or re-viewed: a branch picking the same slice in both arms (or a loop carrying one unchanged),
and .reshape of such a slice, which the NVIDIA backend refused though the interpreter runs them.
On the PTX simulator with the race detector for sm_90 and sm_80, against the interpreter and
numpy, fresh random inputs, NaN-poisoned outputs.
"""
import os
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import smem_view_cases as C  # noqa: E402
import smem_swizzled_cases as S  # noqa: E402

from gluon_trace.errors import CompileError  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
import smem_runner  # noqa: E402

TARGETS = ["sm_90", "sm_80"]
SW = gl.SwizzledSharedLayout(4, 1, 8, [1, 0])   # 16-byte chunks of f32 swizzled over 8 rows


def both(kernel, make, target, num_warps=1, **kw):
    """smem_runner.both with one warp unless told (these kernels' tiles are one warp's)."""
    return smem_runner.both(kernel, make, target, num_warps, **kw)


# -- one slice, picked by both arms of a branch or carried unchanged by a loop ---------------------

@gt.jit
def same_slice_joined(x_ptr, out_ptr, n, A: gl.constexpr, HOW: gl.constexpr):
    """Rows A..A+3 of a swizzled [16, 32] f32 buffer, n times into out: HOW=0 picked by a branch
    whose arms both slice rows A.., HOW=1 carried by a loop whose body yields rows A.. again,
    HOW=2 the same with the body's view picked by a branch (both arms rows A..)."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [16, 32], SW, gl.load(x_ptr + r))
    v = buf.slice(A, 4, 0)
    if HOW == 0:
        with gl.if_(n % 2 == 0):
            v = buf.slice(A, 4, 0)
        for i in gl.range(0, n):
            gl.store(out_ptr + i * 128 + rh, v.load(L))
    else:
        for i in gl.range(0, n):
            gl.store(out_ptr + i * 128 + rh, v.load(L))
            w = buf.slice(A, 4, 0)
            if HOW == 2:
                with gl.if_(i % 2 == 0):
                    w = buf.slice(A, 4, 0)
            v = w


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("how", [0, 1, 2], ids=["branch", "loop", "loop-branch"])
@pytest.mark.parametrize("a", [1, 3, 5])
def test_one_unaligned_slice_joined_with_itself(target, how, a):
    x, n = C.rand((16, 32)), 3
    ref, sim, _ = both(same_slice_joined, lambda: [x.copy(), np.full((n, 4, 32), np.nan, np.float32), n], target,
                       A=a, HOW=how)
    exp = np.stack([x[a:a + 4]] * n)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


# -- .reshape of a slice from inside the period ------------------------------------------------------

@gt.jit
def reshaped_slice(x_ptr, y_ptr, out_ptr, i, SL: gl.constexpr, HOW: gl.constexpr, STORE: gl.constexpr):
    """Slice SL (start, length, dim) of a tile of a swizzled [2, 16, 32] f32 buffer, reshaped on
    the way: HOW=0 slot i sliced, a leading 1 added and indexed away; HOW=1 slot 1 by a slice of
    the stacked dim, sliced, the 1 reshaped away; HOW=2 both slots sliced, the stack regrouped to
    [2, 1] and slot 1 indexed. STORE=0 the view read into out; STORE=1 y written through it and
    the whole buffer read back into out."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 1], [1, 0])
    rf = gl.arange(0, 16, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [2, 16, 32], SW)
    buf.index(0).store(gl.load(x_ptr + rf))
    buf.index(1).store(gl.load(x_ptr + 512 + rf))
    start: gl.constexpr = SL[0]
    n: gl.constexpr = SL[1]
    dim: gl.constexpr = SL[2]
    if HOW == 0:
        t = buf.index(i).slice(start, n, dim)
        v = t.reshape([1] + list(t.shape)).index(0)
    elif HOW == 1:
        t = buf.slice(1, 1, 0).slice(start, n, dim + 1)
        v = t.reshape(t.shape[1:])
    else:
        t = buf.slice(start, n, dim + 1)
        v = t.reshape([2, 1] + list(t.shape[1:])).index(1).index(0)
    shape: gl.constexpr = v.shape
    L: gl.constexpr = gl.BlockedLayout([1, 2], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, shape[0], gl.SliceLayout(1, L))[:, None] * shape[1] + \
        gl.arange(0, shape[1], gl.SliceLayout(0, L))[None, :]
    if STORE:
        v.store(gl.load(y_ptr + r))
        gl.store(out_ptr + rf, buf.index(0).load(F))
        gl.store(out_ptr + 512 + rf, buf.index(1).load(F))
    else:
        gl.store(out_ptr + r, v.load(L))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("how", [0, 1, 2], ids=["add-1", "drop-1", "regroup"])
@pytest.mark.parametrize("sl", [(1, 8, 0), (5, 4, 0), (3, 16, 1)], ids=["rows1", "rows5", "cols3"])
def test_reshaped_unaligned_slices(target, how, sl):
    """.reshape (of the stacked dims: a leading 1 added or dropped, the stack regrouped) of rows
    or columns from inside the period; loaded and stored, slot 1."""
    start, n, dim = sl
    x = C.rand((2, 16, 32))
    y = C.rand((n, 32) if dim == 0 else (16, n))
    for store in (0, 1):
        out = x.copy()
        sel = out[1][start:start + n] if dim == 0 else out[1][:, start:start + n]
        if store:
            sel[...] = y
            exp = out
        else:
            exp = sel.copy()
        ref, sim, _ = both(reshaped_slice, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), 1],
                           target, SL=sl, HOW=how, STORE=store)
        assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (sl, how, store)


# -- a start that changes inside the period: carried at run time --------------------------------------

@gt.jit
def carried_rows(x_ptr, out_ptr, n, A: gl.constexpr, B: gl.constexpr, C: gl.constexpr, NR: gl.constexpr,
                 VIEW: gl.constexpr):
    """Rows A..A+NR-1 of a swizzled [16, 32] f32 buffer carried by a loop; each step yields rows
    B.., or rows C.. on even steps. VIEW=1: what is read is a slice (rows 1..NR/2 of it,
    columns 4..19) of the carried view, VIEW=2 its permute (read back transposed)."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [16, 32], SW, gl.load(x_ptr + r))
    v = buf.slice(A, NR, 0)
    for i in gl.range(0, n):
        if VIEW == 1:
            u = v.slice(1, NR // 2, 0).slice(4, 16, 1)
            ro = gl.arange(0, NR // 2, gl.SliceLayout(1, L))[:, None] * 16 + \
                gl.arange(0, 16, gl.SliceLayout(0, L))[None, :]
            gl.store(out_ptr + i * (NR // 2 * 16) + ro, u.load(L))
        elif VIEW == 2:
            T: gl.constexpr = gl.BlockedLayout([4, 1], [8, W // 8], [1, 1], [0, 1])
            rt = gl.arange(0, 32, gl.SliceLayout(1, T))[:, None] * NR + gl.arange(0, NR, gl.SliceLayout(0, T))[None, :]
            gl.store(out_ptr + i * (NR * 32) + rt, v.permute((1, 0)).load(T))
        else:
            ro = gl.arange(0, NR, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
            gl.store(out_ptr + i * (NR * 32) + ro, v.load(L))
        w = buf.slice(B, NR, 0)
        with gl.if_(i % 2 == 0):
            w = buf.slice(C, NR, 0)
        v = w


def _carried_expected(x, n, abc, nr, view):
    A, B, Cs = abc
    out = []
    for i in range(n):
        s = A if i == 0 else (Cs if (i - 1) % 2 == 0 else B)
        t = x[s:s + nr]
        out.append(t[1:1 + nr // 2, 4:20] if view == 1 else t.T if view == 2 else t)
    return np.stack(out)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("abc, nr", [((1, 2, 3), 4), ((0, 5, 3), 8), ((7, 1, 12), 4), ((3, 6, 0), 8)])
@pytest.mark.parametrize("view", [0, 1, 2], ids=["view", "sliced", "permuted"])
def test_loop_carried_rows_whose_start_changes_inside_the_period(target, abc, nr, view):
    x, n = C.rand((16, 32)), 5
    exp = _carried_expected(x, n, abc, nr, view)
    ref, sim, _ = both(carried_rows, lambda: [x.copy(), np.full(exp.shape, np.nan, np.float32), n], target,
                       A=abc[0], B=abc[1], C=abc[2], NR=nr, VIEW=view)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@gt.jit
def picked_rows(x_ptr, out_ptr, i, c, A: gl.constexpr, B: gl.constexpr, STORE: gl.constexpr):
    """Rows A..A+3 or (c odd) rows B..B+3 of slot i of a swizzled [2, 16, 32] f32 buffer, picked
    by a branch: STORE=0 read into out, STORE=1 written (rows of -1) and the buffer read back."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [2, 16, 32], SW)
    buf.index(0).store(gl.load(x_ptr + r))
    buf.index(1).store(gl.load(x_ptr + 512 + r))
    v = buf.index(i).slice(A, 4, 0)
    with gl.if_(c % 2 == 1):
        v = buf.index(i).slice(B, 4, 0)
    if STORE:
        v.store(gl.full([4, 32], -1.0, gl.float32, L))
        gl.store(out_ptr + r, buf.index(0).load(L))
        gl.store(out_ptr + 512 + r, buf.index(1).load(L))
    else:
        gl.store(out_ptr + rh, v.load(L))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ab", [(1, 2), (6, 3), (0, 5)])
@pytest.mark.parametrize("c", [0, 1])
@pytest.mark.parametrize("store", [0, 1])
def test_branch_picked_rows_whose_start_differs_inside_the_period(target, ab, c, store):
    x, i = C.rand((2, 16, 32)), 1
    s = ab[c]
    if store:
        exp = x.copy()
        exp[i, s:s + 4] = -1
    else:
        exp = x[i, s:s + 4].copy()
    ref, sim, _ = both(picked_rows, lambda: [x.copy(), np.full(exp.shape, np.nan, np.float32), i, c], target,
                       A=ab[0], B=ab[1], STORE=store)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@gt.jit
def picked_rows_reviewed(x_ptr, out_ptr, c, HOW: gl.constexpr):
    """Rows 1..4 or rows 2..5 of a swizzled buffer picked by a branch, then HOW=0 reinterpreted,
    HOW=1 reshaped (a leading 1 added): both need the view's placement at compile time."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [16, 32], SW, gl.load(x_ptr + r))
    v = buf.slice(1, 4, 0)
    with gl.if_(c % 2 == 1):
        v = buf.slice(2, 4, 0)
    if HOW == 0:
        w = v.reinterpret(gl.float32, [4, 32], SW)
    else:
        w = v.reshape([1, 4, 32]).index(0)
    gl.store(out_ptr + rh, w.load(L))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("c", [0, 1])
def test_a_reshape_of_branch_picked_rows_runs(target, c):
    """Was refused ('.reshape() needs this shared-memory view's placement'): the reshape adds a
    leading 1, which the run-time row start does not cross; the carried start serves it as it is."""
    x = C.rand((16, 32))
    exp = x[1 + c:5 + c].copy()
    ref, sim, _ = both(picked_rows_reviewed, lambda: [x.copy(), np.full(exp.shape, np.nan, np.float32), c], target,
                       HOW=1)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@pytest.mark.parametrize("how, what", [(0, r"\.reinterpret\(\)")])
def test_a_view_op_needing_the_placement_of_a_run_time_start_is_refused_at_its_line(how, what):
    """What stays refused: a reinterpret, which starts at the view's least offset, the swizzle of
    a start known only at run time; at the user's line, saying why and the way around."""
    g = picked_rows_reviewed.trace(np.zeros((16, 32), np.float32), np.zeros((4, 32), np.float32), 1, HOW=how,
                                   target="sm_90", num_warps=1).graph
    with pytest.raises(CompileError, match=what + r" needs this shared-memory view's placement at compile time") as e:
        emit(g, "sm_90")
    msg = str(e.value)
    assert "starting at different places inside the swizzle period" in msg, msg
    assert "slice or index the buffer inside the branch (or loop body)" in msg, msg
    assert ("reinterpret" if how == 0 else "reshape") in C.refusal_line(msg, __file__), msg


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("abc", [(1, 9, 1), (9, 1, 9), (3, 11, 3)])
def test_loop_carried_rows_a_period_apart_from_inside_the_period(target, abc):
    """Rows 1.. then rows 9.. (a period apart, from inside it): one table, the start register
    moved by the period; the carried view keeps the start of the lowest."""
    x, n = C.rand((16, 32)), 5
    exp = _carried_expected(x, n, abc, 4, 0)
    ref, sim, _ = both(carried_rows, lambda: [x.copy(), np.full(exp.shape, np.nan, np.float32), n], target,
                       A=abc[0], B=abc[1], C=abc[2], NR=4, VIEW=0)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ab", [(1, 9), (11, 3)])
@pytest.mark.parametrize("c", [0, 1])
def test_branch_picked_rows_a_period_apart_from_inside_the_period(target, ab, c):
    x, i = C.rand((2, 16, 32)), 1
    s = ab[c]
    exp = x[i, s:s + 4].copy()
    ref, sim, _ = both(picked_rows, lambda: [x.copy(), np.full(exp.shape, np.nan, np.float32), i, c], target,
                       A=ab[0], B=ab[1], STORE=0)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@gt.jit
def picked_reinterpreted_rows(x_ptr, out_ptr, c):
    """Rows 1..4 of the lower half of a swizzled buffer, reinterpreted, picked by both arms of a
    branch: the backend does not know where the reinterpreted view starts in a swizzled buffer."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [16, 32], SW, gl.load(x_ptr + r))
    h = buf.slice(8, 8, 0).reinterpret(gl.float32, [8, 32], SW)
    v = h.slice(1, 4, 0)
    with gl.if_(c % 2 == 1):
        v = h.slice(1, 4, 0)
    gl.store(out_ptr + rh, v.load(L))


def test_a_joined_unaligned_slice_of_a_reinterpreted_buffer_is_refused_at_its_line():
    g = picked_reinterpreted_rows.trace(np.zeros((16, 32), np.float32), np.zeros((4, 32), np.float32), 1,
                                        target="sm_90", num_warps=1).graph
    with pytest.raises(CompileError, match=r"smem\.load\(\): this shared-memory view is chosen by a branch") as e:
        emit(g, "sm_90")
    msg = str(e.value)
    assert "cannot tell where in the swizzled buffer they start" in msg and "slice the allocated buffer" in msg, msg
    assert "v.load(L)" in C.refusal_line(msg, __file__), msg


@gt.jit
def carried_cols(x_ptr, out_ptr, n, DT: gl.constexpr, LAY: gl.constexpr, A: gl.constexpr, B: gl.constexpr,
                 STORE: gl.constexpr):
    """Columns A..A+15 of a swizzled [16, 32] buffer of DT carried by a loop; each step yields
    columns B.. on odd steps, else the view it received (a branch between a new slice and the
    carried view). STORE=0: read into out each step; STORE=1: step i writes i + 1 through it and
    the buffer is read back after the loop."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 2], [W // 8, 8], [1, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    ro = gl.arange(0, 16, gl.SliceLayout(1, L))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(DT, [16, 32], LAY, gl.load(x_ptr + r))
    v = buf.slice(A, 16, 1)
    for i in gl.range(0, n):
        if STORE:
            v.store(gl.full([16, 16], 1, DT, L) * (i + 1).to(DT))
        else:
            gl.store(out_ptr + i * 256 + ro, v.load(L).to(gl.float32))
        w = v
        with gl.if_(i % 2 == 1):
            w = buf.slice(B, 16, 1)
        v = w
    if STORE:
        gl.store(out_ptr + r, buf.load(L).to(gl.float32))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype, k", [(np.float16, 0), (np.float32, 0), (np.float32, 1), (np.float16, 2)],
                         ids=["f16-8,1,4", "f32-4,1,8", "f32-2,2,4", "f16-nvmma"])
@pytest.mark.parametrize("ab", [(3, 6), (8, 1)])
@pytest.mark.parametrize("store", [0, 1])
def test_loop_carried_cols_whose_start_changes_inside_the_period(target, dtype, k, ab, store):
    dt = {np.float16: gl.float16, np.float32: gl.float32}[dtype]
    lay = [gl.SwizzledSharedLayout(16 // np.dtype(dtype).itemsize, 1, 16 // np.dtype(dtype).itemsize // 2, [1, 0]),
           gl.SwizzledSharedLayout(2, 2, 4, [1, 0]), gl.NVMMASharedLayout.get_default_for([16, 32], dt)][k]
    x, n = C.rand((16, 32), dtype), 4
    starts = [ab[0]]
    for i in range(n - 1):
        starts.append(ab[1] if i % 2 == 1 else starts[-1])
    if store:
        exp = x.astype(np.float32)
        for i, s in enumerate(starts):
            exp[:, s:s + 16] = i + 1
        shape = (16, 32)
    else:
        exp = np.stack([x[:, s:s + 16] for s in starts]).astype(np.float32)
        shape = exp.shape
    ref, sim, _ = both(carried_cols, lambda: [x.copy(), np.full(shape, np.nan, np.float32), n], target,
                       DT=dt, LAY=lay, A=ab[0], B=ab[1], STORE=store)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


# -- starts that move in two dims, and reshapes of a run-time start ---------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("run", S.MOVED_RUNS, ids=S.MOVED_IDS)
def test_views_whose_start_moves_in_two_dims(target, run):
    """Was 'placed differently ... starts apart in more than one dim': [4, 16] views of a swizzled
    or NVMMA [16, 32] buffer whose row and column starts both change (rows 1.. columns 3.. and rows
    2.. columns 5..), swapped by a loop, picked in its body or by a branch before it; used as they
    are, sliced, permuted or reshaped; loaded, stored and async-copied into; f32, f16, int8. The
    join carries both starts packed in one register, each access swizzles coordinate + start."""
    dtname, lay, move, k, then, store = run
    S.check_moved_two_dims(smem_runner.both, target, dtname, lay, move, S.MOVED_PAIRS[k], then, store)


def test_two_moving_starts_are_one_add_then_whole_fields():
    """The packed start: one add per access, then the swizzle from bit fields (no per-bit code)."""
    text = S.check_moved_two_dims(smem_runner.both, "sm_90", "f32", "chunk", "swap", S.MOVED_PAIRS[0], "none", 0)
    head = text.index("$L_loop_1:")
    body = text[head:text.index("bra.uni", head)]
    # (two registers a thread: each one bfe of the row's phase, nothing bit by bit)
    assert body.count("ld.shared") == 2 and body.count("bfe.u32") == 2 and "and.b32" not in body, body


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("how", ["regroup", "unit"])
@pytest.mark.parametrize("join", S.RESHAPE_JOINS, ids=S.RESHAPE_IDS)
@pytest.mark.parametrize("store", [0, 1])
def test_reshapes_of_a_view_whose_start_moves(target, how, join, store):
    """Was refused ('.reshape() needs this shared-memory view's placement at compile time'): the
    stacked dims of slices whose row (and column) start a branch picks, regrouped ([2, 2] -> [4]) or
    a 1 added; the moving dims keep their size, so the carried start serves the reshaped view."""
    S.check_reshaped_join(smem_runner.both, target, how, *join, store, 1)


# -- a stacked dim whose start moves, merged or split by a .reshape ---------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("how", ["drop", "merge", "split"])
@pytest.mark.parametrize("move", ["branch", "swap", "none"])
@pytest.mark.parametrize("starts", S.STACKED_STARTS, ids=S.STACKED_IDS)
@pytest.mark.parametrize("store", [0, 1])
def test_reshapes_merging_or_splitting_a_stacked_dim_whose_start_moves(target, how, move, starts, store):
    """Was refused ('.reshape() needs this shared-memory view's placement at compile time ... in
    dim 0, which this reshape merges with another dim or splits'; a split of a stacked dim from an
    uneven start, or a later .index of it: 'does not place elements XOR-linearly'): [LEN, 2, 4, NC]
    views of a swizzled [8, 2, 8, 32] buffer whose stacked start moves (with the row and column
    starts or not, or only the rows), picked by a branch or swapped by a loop (or not joined),
    the stacked dims regrouped: the moving dim of 1 merged into the next, [2, 2] -> [4], [4] ->
    [2, 2] and indexed; loaded and stored. The stacked start goes into the base."""
    for c in ((0, 1) if move == "branch" else (1,)):
        S.check_stacked_reshape(smem_runner.both, target, how, move, *starts, store, c=c)


def test_a_moving_stacked_start_goes_into_the_base_once_per_reshape():
    """The fold: one bfe of the stacked field, one mad into the base, one and.b32 keeping the row
    field, at the reshape (once a step), not at each access."""
    text = S.check_stacked_reshape(smem_runner.both, "sm_90", "merge", "swap", *S.STACKED_STARTS[1], 0)
    head = text.index("$L_loop_1:")
    body = text[head:text.index("bra.uni", head)]
    assert body.count("mad.lo.u32") == 1 and body.count("and.b32") == 1, body

"""Swizzled/NVMMA LDS views carried by a loop or picked by a branch whose start changes inside a
swizzle period (rows 1..4 and 3..6 of a 128-byte swizzle: no XOR of each other's table), which
the AMD backend refused ('placed differently') though the interpreter runs them: the join carries
the start of the dim that moves in an SGPR (lds_join_start.coord_join) and each access makes its
thread's address from the coordinate plus that start, then the swizzle. On amdsim for gfx942
(wave64) and gfx1100 (wave32) against the interpreter and numpy, fresh random inputs,
NaN-poisoned outputs. What stays refused says so at the user's line.
"""
import os
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import smem_view_cases as C  # noqa: E402
import smem_swizzled_cases as S  # noqa: E402

import amdsim  # noqa: E402

TARGETS = ["gfx942", "gfx1100"]
pytestmark = pytest.mark.usefixtures("amd_toolchain")  # conftest: a fresh cache; skip without an assembler

LAYS = {"4,1,8": gl.SwizzledSharedLayout(4, 1, 8, [1, 0]), "2,2,4": gl.SwizzledSharedLayout(2, 2, 4, [1, 0]),
        "nvmma": gl.NVMMASharedLayout.get_default_for([16, 32], gl.float32)}


def both(kernel, make, target, num_warps=1, **kw):
    from gluon_trace.backends.amd.compiler import lower
    tk = kernel.trace(*make(), target=target, num_warps=num_warps, **kw)
    ref, sim = make(), make()
    kernel[(1,)](*ref, backend="interpreter", num_warps=num_warps, **kw)
    amdsim.simulate(tk, target, (1,), sim)
    return ref, sim, lower(tk.for_target(target).graph, target).text


@gt.jit
def swizzled_join(x_ptr, y_ptr, out_ptr, n, c, LAY: gl.constexpr, MOVE: gl.constexpr, FIRST: gl.constexpr,
                  OTHER: gl.constexpr, THEN: gl.constexpr, STORE: gl.constexpr):
    """A [16, 32] f32 buffer in LAY holding x; FIRST and OTHER: slices (start, length, dim) of it.
    MOVE "swap": a loop of n steps swaps a view of each; "pick": the loop body picks OTHER on even
    steps, FIRST on odd ones for the next step; "branch": OTHER if c else FIRST, picked before the
    loop. Step k takes its view (THEN "slice": rows 1..2 of it; "permute": transposed) and reads it
    into out[k] (STORE=0) or writes y[k] through it (STORE=1: the buffer read back after)."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 1], [1, 0])
    rf = gl.arange(0, 16, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [16, 32], LAY, gl.load(x_ptr + rf))
    v = buf.slice(FIRST[0], FIRST[1], FIRST[2])
    w = buf.slice(OTHER[0], OTHER[1], OTHER[2])
    if MOVE == "branch":
        with gl.if_(c == 1):
            v = buf.slice(OTHER[0], OTHER[1], OTHER[2])
    for k in gl.range(0, n):
        u = v
        if THEN == "slice":
            u = v.slice(1, 2, 0)
        elif THEN == "permute":
            u = v.permute([1, 0])
        shape: gl.constexpr = u.shape
        L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
        r = gl.arange(0, shape[0], gl.SliceLayout(1, L))[:, None] * shape[1] + \
            gl.arange(0, shape[1], gl.SliceLayout(0, L))[None, :]
        size: gl.constexpr = shape[0] * shape[1]
        if STORE:
            u.store(gl.load(y_ptr + k * size + r))
        else:
            gl.store(out_ptr + k * size + r, u.load(L))
        if MOVE == "swap":
            v, w = w, v
        elif MOVE == "pick":
            t = buf.slice(FIRST[0], FIRST[1], FIRST[2])
            with gl.if_(k % 2 == 0):
                t = buf.slice(OTHER[0], OTHER[1], OTHER[2])
            v = t
    if STORE:
        gl.thread_barrier()
        gl.store(out_ptr + rf, buf.load(F))


def _sel(a, s):
    start, m, dim = s
    return a[start:start + m] if dim == 0 else a[:, start:start + m]


def check(target, lay, move, first, other, then, store, n=4, c=1):
    x = C.rand((16, 32))
    if move == "branch":
        picks = [other if c else first] * n
    else:   # (swap and pick alike: FIRST, then OTHER and FIRST in turn)
        picks = [first if k % 2 == 0 else other for k in range(n)]
    buf = x.copy()

    def view(k):
        a = _sel(buf, picks[k])
        return a[1:3] if then == "slice" else a.T if then == "permute" else a
    shape = view(0).shape
    y = C.rand((n,) + shape)
    if store:
        for k in range(n):
            view(k)[...] = y[k]
        exp = buf
    else:
        exp = np.stack([view(k).copy() for k in range(n)])
    ref, sim, text = both(swizzled_join, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), n, c],
                          target, LAY=LAYS[lay], MOVE=move, FIRST=first, OTHER=other, THEN=then, STORE=store)
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (move, first, other, then, store)
    return text


ROWS = ((1, 4, 0), (3, 4, 0))
COLS = ((3, 16, 1), (6, 16, 1))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lay", list(LAYS))
def test_row_slices_swapped_by_a_loop(target, lay):
    """Was 'placed differently': rows 1..4 and 3..6 swapped each step, loaded and stored."""
    for store in (0, 1):
        check(target, lay, "swap", *ROWS, "none", store)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("move, pair, then, store", [
    ("pick", ROWS, "none", 0), ("pick", COLS, "none", 1), ("swap", COLS, "none", 0), ("swap", ROWS, "slice", 1),
    ("pick", ROWS, "permute", 0), ("branch", ROWS, "none", 1), ("branch", COLS, "slice", 0)])
def test_swizzled_views_joined_inside_a_period(target, move, pair, then, store):
    """Rows or columns from starts inside the swizzle period, swapped by a loop, picked by a branch
    in its body, or picked by a branch before it; the joined view used as it is, sliced or permuted."""
    check(target, "4,1,8", move, *pair, then, store)


def test_the_start_is_added_per_access():
    """The loop carries the start in an SGPR: the body adds it to the thread's row and swizzles the
    sum (no v_xor_b32 of one carried XOR: the tables differ otherwise)."""
    text = check("gfx942", "4,1,8", "swap", *ROWS, "none", 0)
    body = text[text.index("for"):]
    assert "v_add_u32" in body and ("v_bfe_u32" in body or "v_mul_u32_u24" in body or "v_lshlrev_b32" in body)


@gt.jit
def swizzled_join_refused(x_ptr, out_ptr, n, OP: gl.constexpr):
    """Rows 1..4 and 3..6 of a swizzled buffer (OP "rows+cols": rows 1..4 then columns 4..19 of them,
    and rows 3..6, all columns 0..15) swapped by a loop; OP "reinterpret": each step reads its view
    reinterpreted."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [1, 1], [1, 0])
    rf = gl.arange(0, 16, gl.SliceLayout(1, F))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, F))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [16, 32], gl.SwizzledSharedLayout(4, 1, 8, [1, 0]),
                                    gl.load(x_ptr + rf))
    L: gl.constexpr = gl.BlockedLayout([1, 1], [W // 8, 8], [1, 1], [1, 0])
    if OP == "rows+cols":
        v = buf.slice(1, 4, 0).slice(4, 16, 1)
        w = buf.slice(3, 4, 0).slice(0, 16, 1)
    else:
        v = buf.slice(1, 4, 0)
        w = buf.slice(3, 4, 0)
    shape: gl.constexpr = v.shape
    r = gl.arange(0, shape[0], gl.SliceLayout(1, L))[:, None] * shape[1] + \
        gl.arange(0, shape[1], gl.SliceLayout(0, L))[None, :]
    for k in gl.range(0, n):
        if OP == "reinterpret":
            gl.store(out_ptr + k * 128 + r, v.reinterpret(gl.float32, [4, 32], C.FLAT).load(L))
        else:
            gl.store(out_ptr + k * 64 + r, v.load(L))
        v, w = w, v


def test_rows_and_columns_swapped_by_a_loop_run():
    """Was 'starts differ in more than one dim': rows 1..4 columns 4..19 and rows 3..6 columns
    0..15 swapped each step; the SGPR carries both starts, packed."""
    x, n = C.rand((16, 32)), 4
    exp = np.stack([x[1:5, 4:20] if k % 2 == 0 else x[3:7, 0:16] for k in range(n)]).reshape(n, 64)
    ref, sim, _ = both(swizzled_join_refused, lambda: [x.copy(), np.full((n, 64), np.nan, np.float32), n], "gfx942",
                       OP="rows+cols")
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@pytest.mark.parametrize("op, line, why", [("reinterpret", "v.reinterpret(", "inside a swizzle period")])
def test_what_stays_refused_names_the_line(op, line, why):
    """A reinterpret of the joined view (it starts at the swizzle of a start known only at run
    time): refused at the user's line, saying why."""
    from gluon_trace.backends.amd.compiler import lower
    g = swizzled_join_refused.trace(np.zeros((16, 32), np.float32), np.zeros((4, 128), np.float32), 4, OP=op,
                                    target="gfx942", num_warps=1).graph
    with pytest.raises(gt.CompileError) as e:
        lower(g, "gfx942")
    msg = str(e.value)
    assert why in msg, msg
    assert line in C.refusal_line(msg, __file__), msg


# -- starts that move in two dims, and reshapes of a run-time start ---------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("run", S.MOVED_RUNS, ids=S.MOVED_IDS)
def test_views_whose_start_moves_in_two_dims(target, run):
    """Was 'starts differ in more than one dim': [4, 16] views of a swizzled or NVMMA [16, 32]
    buffer whose row and column starts both change, swapped by a loop, picked in its body or by a
    branch before it; used as they are, sliced, permuted or reshaped; loaded, stored and
    async-copied into; f32, f16, int8. One SGPR carries both starts, packed."""
    dtname, lay, move, k, then, store = run
    S.check_moved_two_dims(both, target, dtname, lay, move, S.MOVED_PAIRS[k], then, store)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("how", ["regroup", "unit"])
@pytest.mark.parametrize("join", S.RESHAPE_JOINS, ids=S.RESHAPE_IDS)
def test_reshapes_of_a_view_whose_start_moves(target, how, join):
    """The stacked dims of slices whose row (and column) start a branch picks, regrouped or a 1
    added: the swizzled dims stay, so the joined start serves the reshaped view; loaded and stored."""
    for store in (0, 1):
        S.check_reshaped_join(both, target, how, *join, store, 1)


# -- a stacked dim whose start moves, merged or split by a .reshape ---------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("how", ["drop", "merge", "split"])
@pytest.mark.parametrize("move", ["branch", "swap", "none"])
@pytest.mark.parametrize("starts", S.STACKED_STARTS, ids=S.STACKED_IDS)
def test_reshapes_merging_or_splitting_a_stacked_dim_whose_start_moves(target, how, move, starts):
    """The NVIDIA backend refused these (its run-time start packed per dim); the AMD one runs
    them: [LEN, 2, 4, NC] views of a swizzled [8, 2, 8, 32] buffer whose stacked start moves (with
    the row and column starts or not, or only the rows), picked by a branch or swapped by a loop
    (or not joined), the stacked dims regrouped ([1, 2] -> [2], [2, 2] -> [4], [4] -> [2, 2] and
    indexed); loaded and stored."""
    for store in (0, 1):
        for c in ((0, 1) if move == "branch" else (1,)):
            S.check_stacked_reshape(both, target, how, move, *starts, store, c=c)

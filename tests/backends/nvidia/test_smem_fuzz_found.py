"""Legal shared-memory programs the fuzzer's 'shared' preset (gluon_trace/fuzz/smem.py) found the
NVIDIA backend refusing, each run on the PTX simulator (with the race detector) against the
interpreter on fresh random inputs with NaN-poisoned outputs:

- a tile whose layout mixes coordinate bits in one basis (lane basis [3]) stored to or loaded
  from a padded buffer ('does not place elements XOR-linearly (or, padded, additively)');
- a view of a padded buffer picked by a branch (or carried by a loop) whose first-emitted arm
  starts after another ('must not start before the first one');
- a column of a [32, 2] buffer swizzled per row, picked by a branch: the columns' offsets differ
  by an XOR of one element, which the join did not see ('placed differently').
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim_races  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402


def both(kernel, make, num_warps=1, **kw):
    """(interpreter's args, simulator's args, PTX): traced on one set of args, run on two fresh ones."""
    g = kernel.trace(*make(), target="sm_90", num_warps=num_warps, **kw).graph
    text, _, smem = emit(g, "sm_90")
    ref, sim = make(), make()
    get("interpreter").run(g, (1, 1, 1), ref)
    with np.errstate(all="ignore"):
        ptxsim_races.run(text, (1, 1, 1), sim, smem)
    return ref, sim, text


def _rand(shape):
    return np.random.default_rng().standard_normal(shape).astype(np.float32)


# -- 1. a layout with XOR-mixed bases and a padded buffer ------------------------------------------

@gt.jit
def padded_mixed_1d(x_ptr, out_ptr, back_ptr, REG: gl.constexpr, LANE: gl.constexpr):
    """The fuzzer's reproducer: x stored from the mixed layout X into a padded buffer and read back
    blocked (out); and stored blocked, read back in X (back)."""
    B: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    X: gl.constexpr = gl.DistributedLinearLayout(reg_bases=REG, lane_bases=LANE, warp_bases=[], block_bases=[],
                                                 shape=[16])
    r = gl.arange(0, 16, B)
    pad: gl.constexpr = gl.PaddedSharedLayout.with_identity_for([[4, 1]], [16], [0])
    buf = gl.allocate_shared_memory(gl.float32, [16], pad)
    buf.store(gl.convert_layout(gl.load(x_ptr + r), X))
    gl.store(out_ptr + r, buf.load(B))
    buf2 = gl.allocate_shared_memory(gl.float32, [16], pad, gl.load(x_ptr + r))
    gl.store(back_ptr + r, gl.convert_layout(buf2.load(X), B))


MIXED_1D = [
    ([[4], [8]], [[1], [3], [0], [0], [0]]),   # the reproducer: lane bases mix element bits 0 and 1
    ([[1], [6]], [[2], [4], [8], [0], [0]]),   # a register basis mixing the lanes' bits
    ([[3], [12]], [[1], [4], [0], [0], [0]]),  # both
]


@pytest.mark.parametrize("reg, lane", MIXED_1D)
def test_a_mixed_basis_tile_through_a_padded_buffer(reg, lane):
    x = _rand(16)
    ref, sim, _ = both(padded_mixed_1d, lambda: [x.copy(), np.full(16, np.nan, np.float32),
                                                 np.full(16, np.nan, np.float32)], REG=reg, LANE=lane)
    for i in (1, 2):
        assert np.array_equal(sim[i], x) and np.array_equal(ref[i], x)


@gt.jit
def padded_mixed_2d(x_ptr, out_ptr, back_ptr, LANE: gl.constexpr):
    """A [16, 16] tile over two warps, rows padded by 4 elements: registers hold 4 consecutive
    columns, the lanes' bases mix bits (rows only, or rows and columns)."""
    B: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [2, 1], [1, 0])
    X: gl.constexpr = gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2]], lane_bases=LANE, warp_bases=[[8, 0]],
                                                 block_bases=[], shape=[16, 16])
    r = gl.arange(0, 16, gl.SliceLayout(1, B))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, B))[None, :]
    pad: gl.constexpr = gl.PaddedSharedLayout.with_identity_for([[16, 4]], [16, 16], [1, 0])
    buf = gl.allocate_shared_memory(gl.float32, [16, 16], pad)
    buf.store(gl.convert_layout(gl.load(x_ptr + r), X))
    gl.store(out_ptr + r, buf.load(B))
    buf2 = gl.allocate_shared_memory(gl.float32, [16, 16], pad, gl.load(x_ptr + r))
    gl.store(back_ptr + r, gl.convert_layout(buf2.load(X), B))


@pytest.mark.parametrize("lane", [
    [[0, 4], [0, 8], [1, 0], [3, 0], [4, 0]],   # rows mixed: 16-byte vectors still
    [[0, 4], [0, 8], [1, 0], [2, 0], [4, 5]],   # a row bit mixed with column bits of the registers
])
def test_a_mixed_basis_2d_tile_through_a_padded_buffer(lane):
    x = _rand((16, 16))
    ref, sim, text = both(padded_mixed_2d, lambda: [x.copy(), np.full((16, 16), np.nan, np.float32),
                                                    np.full((16, 16), np.nan, np.float32)], num_warps=2, LANE=lane)
    for i in (1, 2):
        assert np.array_equal(sim[i], x) and np.array_equal(ref[i], x)
    if lane[4] == [4, 0]:
        assert "st.shared.v4" in text and "ld.shared.v4" in text


# -- 2. a padded view picked by a branch: either arm may start lower -------------------------------

@gt.jit
def padded_branch(x_ptr, out_ptr, flag, FIRST: gl.constexpr, OTHER: gl.constexpr):
    """The fuzzer's reproducer: rows FIRST..FIRST+2 of a padded buffer, or OTHER.. if flag."""
    L: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [1, 1], [1, 0])
    r = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 2, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    pad: gl.constexpr = gl.PaddedSharedLayout.with_identity_for([[8, 4]], [4, 8], [1, 0])
    buf = gl.allocate_shared_memory(gl.float32, [4, 8], pad, gl.load(x_ptr + r))
    v = buf.slice(FIRST, 2, 0)
    with gl.if_(flag > 0):
        v = buf.slice(OTHER, 2, 0)
    gl.store(out_ptr + rh, v.load(L))


@pytest.mark.parametrize("first, other", [(0, 2), (2, 0), (1, 2), (2, 1)])
@pytest.mark.parametrize("flag", [0, 1])
def test_padded_views_picked_by_a_branch_in_either_order(first, other, flag):
    x = _rand((4, 8))
    ref, sim, _ = both(padded_branch, lambda: [x.copy(), np.full((2, 8), np.nan, np.float32), flag],
                       FIRST=first, OTHER=other)
    exp = x[(other if flag else first):][:2]
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@gt.jit
def padded_loop(x_ptr, out_ptr, n, FIRST: gl.constexpr, OTHER: gl.constexpr):
    """A padded view carried by a loop: rows FIRST.. on entry, then OTHER.., FIRST.., ..."""
    L: gl.constexpr = gl.BlockedLayout([1, 1], [4, 8], [1, 1], [1, 0])
    r = gl.arange(0, 4, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 2, gl.SliceLayout(1, L))[:, None] * 8 + gl.arange(0, 8, gl.SliceLayout(0, L))[None, :]
    pad: gl.constexpr = gl.PaddedSharedLayout.with_identity_for([[8, 4]], [4, 8], [1, 0])
    buf = gl.allocate_shared_memory(gl.float32, [4, 8], pad, gl.load(x_ptr + r))
    v = buf.slice(FIRST, 2, 0)
    w = buf.slice(OTHER, 2, 0)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 16 + rh, v.load(L))
        v, w = w, v


@pytest.mark.parametrize("first, other", [(0, 2), (2, 0)])
def test_padded_views_swapped_by_a_loop(first, other):
    x = _rand((4, 8))
    n = 3
    ref, sim, _ = both(padded_loop, lambda: [x.copy(), np.full((n, 2, 8), np.nan, np.float32), n],
                       FIRST=first, OTHER=other)
    exp = np.stack([x[(first, other)[i % 2]:][:2] for i in range(n)])
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


# -- 3. a column of a tile swizzled per row, picked by a branch -------------------------------------

@gt.jit
def width1_column(x_ptr, out_ptr, flag, ROWS: gl.constexpr, ROW0: gl.constexpr, THEN: gl.constexpr):
    """The fuzzer's reproducer: column 1 of a [32, 2] buffer whose odd rows swap their two
    elements, or column THEN if flag; rows ROW0..ROW0+ROWS of it."""
    L: gl.constexpr = gl.BlockedLayout([1, 1], [16, 2], [1, 1], [1, 0])
    C: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 2 + gl.arange(0, 2, gl.SliceLayout(0, L))[None, :]
    rc = gl.arange(0, ROWS, gl.SliceLayout(1, C))[:, None] + gl.arange(0, 1, gl.SliceLayout(0, C))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [32, 2], gl.SwizzledSharedLayout(1, 1, 2, [1, 0]), gl.load(x_ptr + r))
    v = buf.slice(1, 1, 1).slice(ROW0, ROWS, 0)
    with gl.if_(flag > 0):
        v = buf.slice(THEN, 1, 1).slice(ROW0, ROWS, 0)
    gl.store(out_ptr + rc, v.load(C))


@pytest.mark.parametrize("rows, row0", [(32, 0), (8, 0), (8, 8)])
@pytest.mark.parametrize("then", [0, 1])
@pytest.mark.parametrize("flag", [0, 1])
def test_a_width1_column_picked_by_a_branch(rows, row0, then, flag):
    x = _rand((32, 2))
    ref, sim, _ = both(width1_column, lambda: [x.copy(), np.full((rows, 1), np.nan, np.float32), flag],
                       ROWS=rows, ROW0=row0, THEN=then)
    exp = x[row0:row0 + rows, (then if flag else 1):][:, :1]
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@gt.jit
def width1_first_left(x_ptr, out_ptr, flag):
    """The arms the other way: column 0 first, column 1 in the branch."""
    L: gl.constexpr = gl.BlockedLayout([1, 1], [16, 2], [1, 1], [1, 0])
    C: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 2 + gl.arange(0, 2, gl.SliceLayout(0, L))[None, :]
    rc = gl.arange(0, 32, gl.SliceLayout(1, C))[:, None] + gl.arange(0, 1, gl.SliceLayout(0, C))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [32, 2], gl.SwizzledSharedLayout(1, 1, 2, [1, 0]), gl.load(x_ptr + r))
    v = buf.slice(0, 1, 1)
    with gl.if_(flag > 0):
        v = buf.slice(1, 1, 1)
    gl.store(out_ptr + rc, v.load(C))


@pytest.mark.parametrize("flag", [0, 1])
def test_a_width1_column_picked_by_a_branch_left_first(flag):
    x = _rand((32, 2))
    ref, sim, _ = both(width1_first_left, lambda: [x.copy(), np.full((32, 1), np.nan, np.float32), flag])
    exp = x[:, flag:flag + 1]
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@gt.jit
def reshaped_load_compared(x_ptr, y_ptr, out_ptr):
    """Fuzz seed 15100101: a tile loaded through a reshaped buffer ([64, 1] stored, [8, 8, 1]
    loaded) compared with a loaded tile. axisinfo gave the load its buffer's info, of the stored
    rank: the comparison indexed past it (IndexError in _cmp), on sm_90 and sm_80."""
    S: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 1], [1, 0])
    T: gl.constexpr = gl.BlockedLayout([1, 2, 1], [4, 8, 1], [1, 1, 1], [2, 1, 0])
    flat = gl.arange(0, 64, gl.SliceLayout(1, S))[:, None] + gl.arange(0, 1, gl.SliceLayout(0, S))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [64, 1], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]),
                                    gl.load(x_ptr + flat))
    i = gl.arange(0, 8, gl.SliceLayout(1, gl.SliceLayout(2, T)))[:, None, None]
    j = gl.arange(0, 8, gl.SliceLayout(0, gl.SliceLayout(2, T)))[None, :, None]
    k = gl.arange(0, 1, gl.SliceLayout(0, gl.SliceLayout(1, T)))[None, None, :]
    o = i * 8 + j + k
    v = buf.reshape([8, 8, 1]).load(T)
    gl.store(out_ptr + o, (v == gl.load(y_ptr + o)).to(gl.int32))


def test_a_load_through_a_reshaped_buffer_compared():
    x = _rand((64, 1))
    y = x.reshape(8, 8, 1).copy()
    y[::3] += 1.0  # some rows differ

    def make():
        return [x.copy(), y.copy(), np.full((8, 8, 1), -7, np.int32)]
    ref, sim, _ = both(reshaped_load_compared, make)
    want = (x.reshape(8, 8, 1) == y).astype(np.int32)
    assert np.array_equal(ref[2], want) and np.array_equal(sim[2], want)

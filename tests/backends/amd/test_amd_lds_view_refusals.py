"""LDS views the AMD backend refused though the interpreter runs them (tests/smem_view_cases.py),
on amdsim for gfx942 (wave64) and gfx1100 (wave32) against the interpreter and numpy on fresh
random inputs with NaN-poisoned outputs:

- index, slice, reshape and reinterpret of a view with a run-time XOR (a column half of a
  swizzled buffer picked by a branch or swapped by a loop): was 'only .load() and .store()';
- padded views joined by a branch or loop whose starts differ by other than whole swizzle-free
  slots (rows 1.. and 2.. of a padded buffer), the lowest start coming from the first arm, the
  second, or a branch or loop nested in the else arm or the loop body: was 'placed differently';
- plain loads and stores of row and column slices of padded buffers (several intervals and
  paddings, 32/16/8-bit elements, slot i of a stacked buffer too) from starts inside a padding
  period, and unaligned slices of a padded layout whose offset_bases interleave row and column
  bits: was 'not addressable as thread part + register part';
- columns 2..9 of a branch-picked half (splitting the swizzle's 16-byte chunks, with the run-time
  XOR): was 'not addressable as thread part + register part' (a refusal test before).
"""
import os
import sys

import numpy as np
import pytest


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import smem_view_cases as C  # noqa: E402

from lds_runner import both  # noqa: E402

TARGETS = ["gfx942", "gfx1100"]


pytestmark = pytest.mark.usefixtures("amd_toolchain")  # conftest: a fresh cache; skip without an assembler


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", C.OPS)
@pytest.mark.parametrize("c", [0, 1])
def test_view_ops_of_a_branch_picked_column_half(target, op, c):
    x, y = C.rand((2, 32, 32)), C.rand(C.out_shape(op, False))
    i = 1
    for store in (0, 1):
        exp = C.xor_view_expected(op, x, y, c, i, store, C.SW)
        ref, sim, text = both(C.xor_view_op, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), c, i],
                              target, OP=op, STORE=store, SHARED=C.SW)
        assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (op, store)
        if op != "reinterpret":   # (the view keeps its run-time XOR: a v_xor_b32 with the joined SGPR)
            assert "v_xor_b32" in text and "s_cbranch" in text


@pytest.mark.parametrize("op", ["index_cols", "reshape"])
@pytest.mark.parametrize("c", [0, 1])
def test_view_ops_of_a_branch_picked_nvmma_half(op, c):
    x, y = C.rand((2, 32, 32)), C.rand(C.out_shape(op, False))
    lay = C.shared("nvmma")
    for store in (0, 1):
        exp = C.xor_view_expected(op, x, y, c, 0, store, lay)
        ref, sim, _ = both(C.xor_view_op, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), c, 0],
                           "gfx942", OP=op, STORE=store, SHARED=lay)
        assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (op, store)


@pytest.mark.parametrize("target", TARGETS)
def test_view_ops_of_a_loop_carried_column_half(target):
    C.check_loop_carried_column_half(both, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("c", [0, 1])
def test_a_slice_splitting_the_swizzle_chunks_of_a_branch_picked_half(target, c):
    """Columns 2..9 of a half (the 16-byte chunks split) with the run-time XOR: refused before as
    not addressable as thread part + register part; now split by buffer coordinates (the slice's
    start added to the thread's column, then swizzled) with the XOR applied to the thread register
    (views preset seeds 3181, 3251: tests/backends/amd/test_amd_lds_views_fuzz_found.py)."""
    C.check_unaligned_columns_of_a_half(both, target, c)


@pytest.mark.parametrize("c, d", [(0, 1), (1, 0), (1, 1)])
def test_reinterprets_of_a_branch_picked_half_joined_by_a_branch(c, d):
    x = C.rand((2, 32, 32))
    exp = C.xor_view_expected("reinterpret", x, None, c, d, 0, C.SW)
    ref, sim, _ = both(C.xor_reinterpret_join, lambda: [x.copy(), np.full((16, 16), np.nan, np.float32), c, d], "gfx1100")
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


# -- padded views with moved starts, some from nested code ----------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("first, other", [(0, 2), (2, 0), (1, 2), (2, 1), (3, 4)])
@pytest.mark.parametrize("flag", [0, 1])
def test_padded_views_picked_by_a_branch(target, first, other, flag):
    x = C.rand((8, 8))
    ref, sim, _ = both(C.padded_branch, lambda: [x.copy(), np.full((4, 8), np.nan, np.float32), flag], target,
                       num_warps=1, FIRST=first, OTHER=other)
    exp = x[(other if flag else first):][:4]
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("abc", C.NESTED)
def test_padded_view_from_a_branch_nested_in_the_else_arm(target, abc):
    C.check_padded_nested_branch(both, target, abc)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("abc", C.NESTED)
def test_padded_view_carried_by_a_loop_through_a_nested_branch(target, abc):
    C.check_padded_loop_nested_branch(both, target, abc)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("abc", C.NESTED)
@pytest.mark.parametrize("m", [0, 2])
def test_padded_view_carried_by_a_loop_through_a_nested_loop(target, abc, m):
    C.check_padded_loop_nested_loop(both, target, abc, m)


# -- plain loads and stores of slices of padded buffers ---------------------------------------------

DTYPES = [np.float32, np.float16, np.int8]
_GL = {np.float32: "float32", np.float16: "float16", np.int8: "int8"}


def _padded_slice(target, lay, dtype, slices, stack, store, vec, i=1):
    from gluon_trace import language as gl
    x, y = C.padded_slice_inputs(dtype, slices)
    exp = C.padded_slice_expected(x, y, i, stack, slices, store)
    ref, sim, text = both(C.padded_slice, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), i],
                          target, num_warps=2, DT=getattr(gl, _GL[dtype]), LAY=lay, STACK=stack,
                          SLICES=slices, VEC=vec, STORE=store)
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (slices, stack, store)
    return text


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lay", [p[0] for p in C.PADDED], ids=[p[1] for p in C.PADDED])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_slices_of_a_padded_buffer(target, lay, dtype):
    """Row and column slices from unaligned starts (rows 1.. of a 32-element padding period:
    was 'not addressable as thread part + register part'), loaded and stored, of the buffer
    and of slot i (run-time) of a stacked one."""
    for slices in C.SLICES:
        for stack in (0, 1):
            for store in (0, 1):
                _padded_slice(target, lay, dtype, slices, stack, store, vec=1)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lay", [C.PADDED[0][0], C.PADDED[1][0]], ids=[C.PADDED[0][1], C.PADDED[1][1]])
def test_vector_accesses_of_padded_row_slices(target, lay):
    """Four consecutive elements a thread: rows 1..4 still move 16 bytes an instruction."""
    for store in (0, 1):
        text = _padded_slice(target, lay, np.float32, ((1, 4, 0),), 0, store, vec=4)
        assert ("ds_write_b128" if store else "ds_read_b128") in text


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("slices", [((1, 4, 0),), ((3, 8, 1),), ((3, 4, 0),), ((1, 4, 0), (6, 8, 1))])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_unaligned_slices_of_a_padded_layout_interleaving_rows_and_columns(target, slices, dtype):
    """Was refused ('not addressable as thread part + register part'): rows 1..4 sit at lin 2,
    64, 66, 128, neither XOR-linear nor a start plus an XOR-linear table; the start is added to
    the thread's coordinate and its bits moved to their lin places before the padding. Loaded
    and stored, of the buffer and of slot i of a stacked one."""
    for stack in (0, 1):
        for store in (0, 1):
            _padded_slice(target, C.PAD_INTERLEAVED, dtype, slices, stack, store, vec=1)


# -- slices of a whole padded stack, and reinterprets of loop-carried padded views -----------------

_LAYS = dict((n, lay) for lay, n in C.PADDED)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["128:+8", "16:+2,64:+4", "col-major 8:+1"])  # (amdsim is slow: the NVIDIA
@pytest.mark.parametrize("dtname", ["int8", "float64"])                        # test runs all six, 4 dtypes)
def test_slices_of_a_whole_padded_stack(target, name, dtname):
    """Rows and columns of both slots of a [2, 8, 32] padded stack from inside a padding period:
    the [2, r, c] view loaded and stored as it is, then slot i of it by .index, slot 1 by a slice."""
    for slices in C.PAD_STACK_SLICES:
        for then in ("none", "index", "slot"):
            for store in (0, 1):
                C.check_padded_stack_slice(both, target, _LAYS[name], dtname, slices, then, store)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["128:+8", "64:+4", "32:+4", "16:+1"])
@pytest.mark.parametrize("ab", [(1, 3), (0, 2), (3, 1)])
def test_reinterprets_of_a_loop_carried_padded_view(target, name, ab):
    C.check_padded_loop_reinterpret(both, target, _LAYS[name], *ab)


# -- padded views carried by a loop (or picked by a branch) from inside a padding period -----------
# (smem_view_cases.PAD_LOOP_PAIRS x PAD_LOOP_RUNS: the NVIDIA runner takes every layout and dtype;
# amdsim is slow, so this runs a spread of them)

_PAD_LOOP = [("128:+8", "float32"), ("16:+2,64:+4", "int8"), ("col-major 8:+1", "float64"), ("32:+4", "float16"),
             ("16:+1", "int8"), ("64:+4", "float32")]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name,dtname", _PAD_LOOP)
def test_padded_views_carried_by_a_loop_from_inside_a_padding_period(target, name, dtname):
    """Was 'placed differently' (rows 1..4 and 3..6 of rows padded every four: their tables differ)
    or 'less aligned than its first value' (columns 3.. then 12..): the loop (or branch) carries the
    view's start S in a second SGPR (lds_join_start.shift_join) and each access pads S + the thread's
    offset; the carried address takes the least alignment the body's yields have. Swapped with a
    second carried view or picked by a branch, of the buffer, of slot 1 of a stack, or of the whole
    stack indexed by the step (its rows sliced in the body), loaded and stored."""
    for first, other in C.PAD_LOOP_PAIRS:
        for move, store, stack, body in C.PAD_LOOP_RUNS:
            C.check_padded_loop_views(both, target, _LAYS[name], dtname, first, other, move, store, stack, body)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["128:+8", "16:+2,64:+4"])
@pytest.mark.parametrize("ab", [(3, 5), (5, 3)])
def test_async_copies_into_a_loop_carried_padded_view(target, name, ab):
    """Was 'chosen by a branch (or carried by a loop) among padded views starting at different
    places ... which only .load() and .store() take': rows 3..4 and 5..6 of rows padded every four,
    swapped each step, each filled by async_copy; each copy's LDS address is made from the carried
    start where it is issued (gfx942's LDS DMA, with M0 made at the entry, is not taken)."""
    C.check_padded_loop_async_copy(both, target, _LAYS[name], *ab)

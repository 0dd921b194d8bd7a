"""Shared-memory views the NVIDIA backend refused though the interpreter runs them
(tests/smem_view_cases.py), on the PTX simulator with the race detector for sm_90 and sm_80,
against the interpreter and numpy on fresh random inputs with NaN-poisoned outputs:

- index, slice, permute, reshape and reinterpret of a view with a run-time XOR (a column half
  of a swizzled buffer picked by a branch or swapped by a loop): was 'only .load() and .store()';
  columns 2..9 of such a half (the 16-byte chunks split, a start inside the swizzle period):
  was 'neither its table XOR a constant nor its table moved by whole swizzle periods';
- a padded view joined by a branch or loop whose lowest start comes from a nested branch or
  loop: was 'made by code the backend does not follow ahead (a nested branch or loop)';
- plain loads and stores of slices of padded buffers (AMD's refusal; NVIDIA ran most of them,
  but refused rows from inside a four-row padding period: 'does not place elements ...
  additively').
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import smem_view_cases as C  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from smem_runner import both  # noqa: E402

TARGETS = ["sm_90", "sm_80"]


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
        if op != "reinterpret":   # (the view keeps its run-time XOR: one xor.b32 with a register)
            assert "xor.b32" in text


@pytest.mark.parametrize("op", ["index_cols", "reshape"])
@pytest.mark.parametrize("c", [0, 1])
def test_view_ops_of_a_branch_picked_nvmma_half(op, c):
    x, y = C.rand((2, 32, 32)), C.rand(C.out_shape(op, False))
    lay = C.shared("nvmma")
    for store in (0, 1):
        exp = C.xor_view_expected(op, x, y, c, 0, store, lay)
        ref, sim, _ = both(C.xor_view_op, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), c, 0],
                           "sm_90", OP=op, STORE=store, SHARED=lay)
        assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (op, store)


@pytest.mark.parametrize("target", TARGETS)
def test_view_ops_of_a_loop_carried_column_half(target):
    C.check_loop_carried_column_half(both, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("c", [0, 1])
def test_a_slice_splitting_the_swizzle_chunks_of_a_branch_picked_half(target, c):
    """Columns 2..9 of a half (the 16-byte chunks split) with the run-time XOR: neither the half's
    table XOR a constant nor moved by whole swizzle periods, refused before; now addressed from
    the slice's start (added to the thread's column, then swizzled) with the XOR applied to the
    thread register (views preset seed 3633: tests/backends/nvidia/test_smem_views_fuzz_found.py)."""
    C.check_unaligned_columns_of_a_half(both, target, c)


@pytest.mark.parametrize("c, d", [(0, 1), (1, 0), (1, 1)])
def test_reinterprets_of_a_branch_picked_half_joined_by_a_branch(c, d):
    x = C.rand((2, 32, 32))
    exp = C.xor_view_expected("reinterpret", x, None, c, d, 0, C.SW)
    ref, sim, _ = both(C.xor_reinterpret_join, lambda: [x.copy(), np.full((16, 16), np.nan, np.float32), c, d], "sm_80")
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


# -- padded views whose lowest start comes from nested code ---------------------------------------

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


# -- plain loads and stores of slices of padded buffers (AMD refused rows 1.. of a padding period) --

_DT = {np.float32: "float32", np.float16: "float16", np.int8: "int8"}
# Rows 1..4 and 3..6 with padding every four rows: the view's offsets are not a sum over its
# coordinate bits (rows 1, 2, 3, 4 at 0, 32, 64, 104 past row 1: 32 + 64 is not 104); rows 1..4
# with padding every two rows happen to be (0, 36, 68, 104)
INSIDE_A_PERIOD = sorted(sl for sl in C.SLICES if any(d == 0 and start % 4 and start % 4 + n > 4
                                                      for start, n, d in sl))


def _padded_slice(target, lay, dtype, slices, stack, store, i=1, vec=1):
    from gluon_trace import language as gl
    x, y = C.padded_slice_inputs(dtype, slices)
    exp = C.padded_slice_expected(x, y, i, stack, slices, store)
    ref, sim, text = both(C.padded_slice, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, np.float32), i],
                          target, num_warps=2, DT=getattr(gl, _DT[dtype]), LAY=lay, STACK=stack,
                          SLICES=slices, VEC=vec, STORE=store)
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp), (slices, stack, store)
    return text


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lay, name", C.PADDED, ids=[p[1] for p in C.PADDED])
@pytest.mark.parametrize("dtype", list(_DT), ids=lambda d: np.dtype(d).name)
def test_slices_of_a_padded_buffer(target, lay, name, dtype):
    for slices in C.SLICES:
        for stack in (0, 1):
            for store in (0, 1):
                _padded_slice(target, lay, dtype, slices, stack, store)


@pytest.mark.parametrize("slices", INSIDE_A_PERIOD)
@pytest.mark.parametrize("stack", [0, 1])
@pytest.mark.parametrize("store", [0, 1])
def test_rows_from_inside_a_four_row_padding_period(slices, stack, store):
    """Was refused ('does not place elements ... additively'): the start inside the period is
    added to the thread's part before the padding. With four f32 a thread (VEC=4) a run stays
    one access as wide as the column start's alignment allows (16 bytes, 8 from column 6): the
    start's and the thread's lowest bits are above the run's."""
    lay = dict((n, l) for l, n in C.PADDED)["128:+8"]
    _padded_slice("sm_90", lay, np.float32, slices, stack, store)
    text = _padded_slice("sm_90", lay, np.float32, slices, stack, store, vec=4)
    col = sum(start for start, _, d in slices if d == 1)
    w = min(4, col & -col) if col else 4
    op = "st" if store else "ld"
    assert f"{op}.shared.v{w}.b32" in text and f"{op}.shared.b32" not in text, slices


@pytest.mark.parametrize("slices", [((1, 4, 0),), ((3, 8, 1),)])
def test_unaligned_slices_of_a_padded_layout_interleaving_rows_and_columns(slices):
    for store in (0, 1):
        _padded_slice("sm_90", C.PAD_INTERLEAVED, np.float32, slices, 0, store)


# -- padded views whose start moves at run time, and slices of a whole padded stack -----------------

PAD_DTYPES = list(C.PAD_DTYPES)
_LAYS = dict((n, lay) for lay, n in C.PADDED)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(_LAYS))
@pytest.mark.parametrize("dtname", PAD_DTYPES)
def test_padded_views_carried_by_a_loop_from_inside_a_padding_period(target, name, dtname):
    """Was 'placed differently' (the views' tables differ: rows 1..4 and 3..6 of rows padded every
    four), 'not XOR-linearly (or, padded, additively)' or 'less aligned (4 bytes) than its first
    value' (columns 3.. then 12..): the loop carries the view's linear start, swapped with a
    second carried view or picked by a branch, of the buffer, of slot 1 of a stack, or of the
    whole stack then indexed by the step (the rows of it sliced in the body), loaded and stored."""
    for first, other in C.PAD_LOOP_PAIRS:
        for move, store, stack, body in C.PAD_LOOP_RUNS:
            C.check_padded_loop_views(both, target, _LAYS[name], dtname, first, other, move, store, stack, body)


@pytest.mark.parametrize("store", [0, 1])
def test_a_loop_carried_padded_view_moves_four_floats_an_access(store):
    """Rows 1..4 and 3..6 of rows padded every four (+8): the start's and the thread's lowest bits
    are above a thread's four columns, so each run stays one 16-byte access; the padding is
    computed in the loop from the carried start (shr, mad)."""
    first, other = C.PAD_LOOP_PAIRS[0]
    text = C.check_padded_loop_views(both, "sm_90", _LAYS["128:+8"], "float32", first, other, "swap", store, 0,
                                     "view", vec=4)
    op = "st" if store else "ld"
    body = text[text.index("$L_loop"):]
    assert f"{op}.shared.v4.b32" in body and f"{op}.shared.b32" not in body
    assert "shr.u32" in body and "mad.lo.u32" in body


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["128:+8", "64:+4", "32:+4", "16:+1"])
@pytest.mark.parametrize("ab", [(1, 3), (0, 2), (3, 1)])
def test_reinterprets_of_a_loop_carried_padded_view(target, name, ab):
    C.check_padded_loop_reinterpret(both, target, _LAYS[name], *ab)


@pytest.mark.parametrize("name", ["128:+8", "16:+2,64:+4"])
@pytest.mark.parametrize("ab", [(3, 5), (5, 3)])
def test_async_copies_into_a_loop_carried_padded_view(name, ab):
    C.check_padded_loop_async_copy(both, "sm_80", _LAYS[name], *ab)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(_LAYS))
@pytest.mark.parametrize("dtname", PAD_DTYPES)
def test_slices_of_a_whole_padded_stack(target, name, dtname):
    """Was 'does not place elements ... additively' (rows 1..4 of both slots of a stack padded
    every four rows): the slots' offsets are added apart from the padding. The [2, r, c] view
    loaded and stored as it is, then slot i of it by .index, and slot 1 by a slice."""
    for slices in C.PAD_STACK_SLICES:
        for then in ("none", "index", "slot"):
            for store in (0, 1):
                C.check_padded_stack_slice(both, target, _LAYS[name], dtname, slices, then, store)

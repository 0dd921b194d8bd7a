"""Slices of swizzled shared buffers from starts inside a swizzle period (tests/smem_swizzled_cases.py),
which the NVIDIA backend refused ('does not place elements XOR-linearly') though the interpreter
runs them, on the PTX simulator with the race detector for sm_90 and sm_80 against the interpreter
and numpy, fresh random inputs, NaN-poisoned outputs: row and column slices of slot i of a stacked
buffer, every start in the period, async_copy (cp.async) into a row slice, loop-carried row slices
a period apart, and permuted slices; the PTX keeps 16-byte ld/st.shared.v4.b32 accesses and a short
thread address, and a loop-carried slice whose start changes inside the period is refused at its
line. The AMD twin is tests/backends/amd/test_amd_lds_swizzled_slices.py.
"""
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import smem_swizzled_cases as S  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from smem_runner import both  # noqa: E402

TARGETS = ["sm_90", "sm_80"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", list(S.DTYPES), ids=S.dtype_id)
@pytest.mark.parametrize("k", range(5), ids=S.LAYOUT_IDS)
def test_slices_of_slot_i_of_a_swizzled_buffer(target, dtype, k):
    """Row and column slices from starts inside the period, and slices of them, of slot i (run
    time) of a stacked buffer, loaded and stored; 1-, 2-, 4- and 8-byte elements."""
    S.check_slices_of_slot_i(both, target, dtype, k)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dim, n", S.EVERY_START, ids=S.EVERY_START_IDS)
def test_every_start_in_the_period(target, dim, n):
    """Rows s..s+7 for every s of the 8-row period, columns s..s+15 for every s of the first
    half row (16-byte chunks, 8 of them a period), of an f32 buffer, loaded and stored."""
    S.check_every_start_in_the_period(both, target, dim, n)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype, vec", S.VECTOR, ids=S.VECTOR_IDS)
def test_row_slices_keep_vector_accesses(target, dtype, vec):
    """A thread's 16 consecutive bytes of rows 1..8 (one swizzled chunk) still move as one
    ld.shared.v4.b32 / st.shared.v4.b32, and nothing narrower."""
    for store, text in S.check_row_slice_vectors(both, target, dtype, vec):
        op = "st" if store else "ld"
        body = text.split(f"{op}.shared", 1)[1] if store else text
        assert f"{op}.shared.v4.b32" in text, text
        if not store:
            assert not re.search(r"ld\.shared\.(b32|b16|u16|v2)", body), text


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", S.ASYNC_DTYPES, ids=S.dtype_id)
@pytest.mark.parametrize("start", S.ASYNC_STARTS)
def test_async_copy_into_an_unaligned_row_slice(target, dtype, start):
    assert "cp.async" in S.check_async_copy_into_slice(both, target, dtype, start)


@pytest.mark.parametrize("target", TARGETS)
def test_loop_carried_row_slices_a_period_apart(target):
    S.check_loop_carried_rows(both, target, S.LOOP_A_PERIOD_APART)


@pytest.mark.parametrize("target", TARGETS)
def test_loop_carried_row_slices_whose_start_changes_inside_the_period(target):
    """Rows 1..4, then 3..6 or 2..5 (the start changes inside the 8-row period): carried with its
    start in a register (smem_swizzled.py; more in test_smem_swizzled_joins.py)."""
    S.check_loop_carried_rows(both, target, S.LOOP_INSIDE_THE_PERIOD)


@pytest.mark.parametrize("target", TARGETS)
def test_thread_address_of_an_unaligned_swizzled_row_slice_is_short(target):
    """Rows 1..8 of the 128-byte swizzle: the thread's address is made in the prologue from whole
    coordinate fields, row = 1 + its part of the thread id, row << 7 ^ (row & 7) << 4 ^ column
    bytes (one bfe.u32 of the row's 3 swizzling bits), not a bfe, neg and and per bit."""
    text = S.check_unaligned_row_slice(both, target)
    m = re.search(r"add\.u32 (%r\d+), %r\d+, 1;\n((\s*\w+\.\w+ .*\n){0,4})", text)
    assert m and re.search(rf"bfe\.u32 (%r\d+), {m[1]}, 0, 3;\n", m[2]) and \
        re.search(rf"shl\.b32 %r\d+, {m[1]}, 7;\n", m[2]), text
    assert not re.search(rf"bfe\.u32 %r\d+, {m[1]}, \d, 1;", text), text


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("k", S.PERMUTED_LAYOUTS, ids=S.PERMUTED_LAYOUT_IDS)
@pytest.mark.parametrize("start, dim", S.PERMUTED_STARTS)
def test_permuted_unaligned_slices(target, k, start, dim):
    S.check_permuted_slice(both, target, k, start, dim)

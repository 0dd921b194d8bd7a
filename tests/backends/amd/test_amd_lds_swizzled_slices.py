"""Slices of swizzled LDS buffers from starts inside a swizzle period (tests/smem_swizzled_cases.py),
which the AMD backend refused ('not addressable as thread part + register part') though the
interpreter runs them, on amdsim for gfx942 (wave64) and gfx1100 (wave32) against the interpreter
and numpy, fresh random inputs, NaN-poisoned outputs: row and column slices of slot i of a stacked
buffer, every start in the period, async_copy into a row slice, loop-carried row slices, and
permuted slices; the AMDGCN keeps 16-byte ds_read_b128 / ds_write_b128 accesses and a short
thread address. The NVIDIA twin is tests/backends/nvidia/test_smem_swizzled_slices.py.
"""
import os
import re
import sys

import pytest


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import smem_swizzled_cases as S  # noqa: E402

from lds_runner import both  # noqa: E402

TARGETS = ["gfx942", "gfx1100"]
pytestmark = pytest.mark.usefixtures("amd_toolchain")  # conftest: a fresh cache; skip without an assembler


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
    ds_read_b128 / ds_write_b128."""
    for store, text in S.check_row_slice_vectors(both, target, dtype, vec):
        assert ("ds_write_b128" if store else "ds_read_b128") in text


@pytest.mark.parametrize("target", TARGETS)
def test_thread_address_of_an_unaligned_swizzled_row_slice_is_short(target):
    """Rows 1..8 of the 128-byte swizzle: the thread's address is made at the kernel entry from
    whole coordinate fields, row = 1 + its part of the thread id, lin = row << 5 ^ (row & 7) << 2
    ^ column (one v_bfe_u32 of the row's 3 swizzling bits), not a v_bfe_u32 of each of its bits."""
    text = S.check_unaligned_row_slice(both, target)
    m = re.search(r"v_add_(nc_)?u32 (v\d+), 1, v\d+\n((\s*v_\w+ .*\n){0,4})", text)
    assert m and re.search(rf"v_bfe_u32 v\d+, {m[2]}, 0, 3\n", m[3]) and \
        re.search(rf"v_lshlrev_b32 v\d+, 5, {m[2]}\n", m[3]), text


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", S.ASYNC_DTYPES, ids=S.dtype_id)
@pytest.mark.parametrize("start", S.ASYNC_STARTS)
def test_async_copy_into_an_unaligned_row_slice(target, dtype, start):
    S.check_async_copy_into_slice(both, target, dtype, start)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("abc", [S.LOOP_A_PERIOD_APART, S.LOOP_INSIDE_THE_PERIOD])  # (the second was 'placed
# differently' before the start was carried in an SGPR; more in test_amd_lds_swizzled_joins.py)
def test_loop_carried_row_slices(target, abc):
    S.check_loop_carried_rows(both, target, abc)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("k", S.PERMUTED_LAYOUTS, ids=S.PERMUTED_LAYOUT_IDS)
@pytest.mark.parametrize("start, dim", S.PERMUTED_STARTS)
def test_permuted_unaligned_slices(target, k, start, dim):
    S.check_permuted_slice(both, target, k, start, dim)

"""Views of a slot of a stacked LDS buffer taken from a stacked start and sliced from inside the
swizzle period, picked by a branch or carried by a loop (tests/smem_stacked_cases.py), on amdsim
for gfx942 (wave64) and gfx1100 (wave32) against the interpreter and numpy, fresh random inputs,
NaN-poisoned outputs. The AMD backend lowered these before (its .index() moves the address and
keeps the slot's swizzle coordinates: lds_views.rule_index, predicted alike by lds_join_predict._static);
they pin that down beside the NVIDIA twin, tests/backends/nvidia/test_smem_stacked_joins.py,
where they were refused."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import smem_stacked_cases as K  # noqa: E402

from lds_runner import both  # noqa: E402

TARGETS = ["gfx942", "gfx1100"]
pytestmark = pytest.mark.usefixtures("amd_toolchain")  # conftest: a fresh cache; skip without an assembler


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", range(len(K.CASES)), ids=K.CASE_IDS)
@pytest.mark.parametrize("mode", K.MODES)
def test_slot_views_from_a_stacked_start_joined(target, case, mode):
    """Made in the arms, before the branch, nested in an arm or in a loop's body, at starts apart
    inside the swizzle period (and in other slots), read and written after the join.
    xor_then_start*, xor_start_xor and one_table_then_start (the stacked fuzz preset, seeds
    300562, 502419, 503593, 503688, 504400, ...) were refused ('placed differently'): a first
    branch joined in the XOR form (with or without an XOR bit), a later one needing a run-time
    start; the first join now carries its start (lds_join_predict._rescue). branch_loop and
    loop_branch: the same with a loop between the two joins were refused too (one_table_then_start
    in branch_loop, the XOR cases in both): the loop's plan and the look-ahead past a loop now ask
    the earlier joins for their starts (start_rescue.rescue_loop, as_start of a loop's result)."""
    K.check(both, target, case, mode)


@pytest.mark.parametrize("target", TARGETS)
def test_an_xor_join_whose_arm_stores_looks_ahead_in_the_emitted_block(target):
    """A branch arm whose stores schedule.hoist_stores reorders is emitted from a copy of its
    block; the look-ahead from that branch's XOR join (start_rescue.look_ahead) searched for it
    in the original block and raised a ValueError. It now finds the emitted block."""
    K.check_xor_then_start_with_stores(both, target)

"""Views of a slot of a stacked shared buffer taken from a stacked start and sliced from inside
the swizzle period, picked by a branch or carried by a loop (tests/smem_stacked_cases.py), on the
PTX simulator with the race detector for sm_90 and sm_80, against the interpreter and numpy,
fresh random inputs, NaN-poisoned outputs. The AMD twin is
tests/backends/amd/test_amd_lds_stacked_joins.py."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import smem_stacked_cases as K  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from smem_runner import both  # noqa: E402

TARGETS = ["sm_90", "sm_80"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", range(len(K.CASES)), ids=K.CASE_IDS)
@pytest.mark.parametrize("mode", K.MODES)
def test_slot_views_from_a_stacked_start_joined(target, case, mode):
    """Made in the arms, nested in an arm or in a loop's body: the look-ahead that plans the join
    before the arms are emitted (smem_join._static) predicted such an .index() without its
    buffer coordinates, so no run-time start was planned and the join refused its views ('placed
    differently'). Made before the branch: a then-arm at a higher slot than the else-arm (rows
    of slots 2 and 1) moved the else-arm's carried address below its buffer (the simulator's
    out-of-range shared access). *_indexed_after: an .index() after the join, of the stacked dim
    whose start the join carries at run time, was refused. whole_periods and same_view (one
    table) were lowered before. *_twice_then_another (the stacked fuzz preset): a first branch
    picking the first view again joined it plainly, its register holding the whole address, but
    its coff kept the buffer-relative root (smem_swizzled.joined_coff), so the next branch's
    run-time-start join refused it ('placed differently'). xor_then_start, xor_then_start_128,
    xor_start_xor (the stacked fuzz preset, seeds 300526, 300562, 504538, 506361): a first branch
    joined with a run-time XOR (columns a chunk apart), a later one needing a run-time start
    (columns across chunks) refused it ('placed differently'), in the arms, before the branch
    and in the loop; the first join now carries its start (smem_join._rescue). branch_loop and
    loop_branch: the same with a loop between the two joins (an XOR branch whose view a loop carries
    while its body picks one at another start; a loop carrying an XOR, then a branch picking one at
    another start) were refused too: the loop's plan and the look-ahead past a loop now ask the
    XOR joins for their starts (start_rescue.rescue_loop, as_start of a loop's result)."""
    K.check(both, target, case, mode)


@pytest.mark.parametrize("target", TARGETS)
def test_an_xor_join_whose_arm_stores_looks_ahead_in_the_emitted_block(target):
    """A branch arm whose stores schedule.hoist_stores reorders is emitted from a copy of its
    block; the look-ahead from that branch's XOR join (start_rescue.look_ahead) searched for it
    in the original block and raised a ValueError. It now finds the emitted block."""
    K.check_xor_then_start_with_stores(both, target)

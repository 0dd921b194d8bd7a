"""Tests for gluon_trace.layouts: linear forms checked against a brute-force
simulation of the blocked distribution, slices against what a reduction leaves,
and every invalid layout against a clear LayoutError naming this file."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gluon_trace.errors import LayoutError
from gluon_trace.layouts import (
    BlockedLayout, DistributedLinearLayout, LinearLayout, SliceLayout, free_bits,
    invert_regs, linear_layout_of, reg_index_of,
)

SETTINGS = settings(max_examples=60, deadline=None)


# ------------------------------------------------------------ brute force
def _digits(index, radices):
    """Mixed-radix digits of index, least significant first."""
    out = []
    for r in radices:
        out.append(index % r)
        index //= r
    return out


def reference_owners(spt, tpw, wpc, order, shape):
    """Who owns what, by plain div/mod: a thread's register index counts first
    through its size_per_thread block (dims in `order`), then through the
    repetitions of the CTA tile (dims in `order`); coordinates wrap modulo the
    shape (broadcast). A block larger than the shape is cut to the shape."""
    rank = len(shape)
    tile = [spt[d] * tpw[d] * wpc[d] for d in range(rank)]
    spt_eff = [min(spt[d], shape[d]) for d in range(rank)]
    reps = [max(1, shape[d] // tile[d]) for d in range(rank)]
    block = math.prod(spt_eff)
    owners = {}
    for w in range(math.prod(wpc)):
        wd = dict(zip(order, _digits(w, [wpc[d] for d in order])))
        for l in range(math.prod(tpw)):
            ld = dict(zip(order, _digits(l, [tpw[d] for d in order])))
            for r in range(block * math.prod(reps)):
                sd = dict(zip(order, _digits(r % block, [spt_eff[d] for d in order])))
                rd = dict(zip(order, _digits(r // block, [reps[d] for d in order])))
                coord = tuple((rd[d] * tile[d] + wd[d] * spt[d] * tpw[d] + ld[d] * spt[d] + sd[d]) % shape[d]
                              for d in range(rank))
                owners.setdefault(coord, []).append((w, l, r))
    return owners


def _split_bits(draw, nbits, rank):
    """A power-of-two vector over `rank` dims whose product is 2**nbits."""
    dims = draw(st.lists(st.integers(0, rank - 1), min_size=nbits, max_size=nbits))
    return [2 ** dims.count(d) for d in range(rank)]


@st.composite
def blocked_cases(draw, rank=None, max_bits=10):
    rank = rank or draw(st.integers(1, 3))
    spt = [2 ** draw(st.integers(0, 2)) for _ in range(rank)]
    tpw = _split_bits(draw, 5, rank)
    wpc = _split_bits(draw, draw(st.integers(0, 3)), rank)
    order = list(draw(st.permutations(range(rank))))
    shape, budget = [], max_bits  # bound the element count so the brute force stays quick
    for _ in range(rank):
        b = draw(st.integers(0, min(8, budget)))
        budget -= b
        shape.append(2 ** b)
    return BlockedLayout(spt, tpw, wpc, order), tuple(shape)


def _threads(owner_list):
    return {(w, l) for w, l, _ in owner_list}


# ------------------------------------------------------------ blocked
def test_blocked_1d_standard_case():
    ll = BlockedLayout([4], [32], [4], [0]).to_linear((1024,), num_warps=4, threads_per_warp=32)
    assert ll.reg_bases == ((1,), (2,), (512,))
    assert ll.lane_bases == ((4,), (8,), (16,), (32,), (64,))
    assert ll.warp_bases == ((128,), (256,))
    assert (ll.num_regs, ll.num_lanes, ll.num_warps) == (8, 32, 4)
    assert ll.coord(2, 1, 1) == (2 + 4 + 128,) and ll.coord(4, 1, 1) == (512 + 4 + 128,)
    assert ll.reg_contiguity(0) == 4
    assert ll.is_surjective()


def test_blocked_2d_against_brute_force():
    layout = BlockedLayout([1, 4], [4, 8], [2, 2], [1, 0])
    ll = layout.to_linear((16, 64))
    assert ll.owners() == reference_owners([1, 4], [4, 8], [2, 2], [1, 0], (16, 64))
    assert ll.reg_contiguity(1) == 4 and ll.reg_contiguity(0) == 1


@SETTINGS
@given(blocked_cases())
def test_blocked_matches_brute_force(case):
    layout, shape = case
    ll = layout.to_linear(shape, num_warps=layout.num_warps, threads_per_warp=32)
    ref = reference_owners(layout.size_per_thread, layout.threads_per_warp, layout.warps_per_cta,
                           layout.order, shape)
    assert ll.owners() == ref
    assert ll.is_surjective()
    assert len(ll.owners()) == math.prod(shape)
    # coords() and coord() agree, and no thread holds an element twice
    c = ll.coords()
    assert c.shape == (ll.num_warps, ll.num_lanes, ll.num_regs, len(shape))
    w, l, r = ll.num_warps - 1, ll.num_lanes - 1, ll.num_regs - 1
    assert tuple(c[w, l, r]) == ll.coord(r, l, w)
    per_thread = c.reshape(ll.num_warps * ll.num_lanes, ll.num_regs, -1)
    assert all(len({tuple(x) for x in t}) == ll.num_regs for t in per_thread.tolist())


def test_blocked_smaller_shape_broadcasts_lanes_and_drops_registers():
    ll = BlockedLayout([4], [32], [1], [0]).to_linear((2,))
    assert ll.reg_bases == ((1,),)  # the register base for offset 2 would leave the shape
    assert ll.lane_bases == ((0,),) * 5
    assert free_bits(ll) == {"reg": 0, "lane": 0b11111, "warp": 0}
    assert ll.owners()[(1,)] == [(0, lane, 1) for lane in range(32)]


def test_layouts_hash_and_compare_by_value():
    a = BlockedLayout([1, 4], [4, 8], [2, 2], [1, 0])
    b = BlockedLayout((1, 4), (4, 8), (2, 2), (1, 0))  # built on another line: loc differs
    assert a == b and hash(a) == hash(b) and a.loc != b.loc
    assert a.to_linear((16, 64)) is b.to_linear((16, 64))  # cached
    assert "size_per_thread=(1, 4)" in repr(a)
    assert a != BlockedLayout([1, 4], [4, 8], [2, 2], [0, 1])


# ------------------------------------------------------------ slices
@SETTINGS
@given(blocked_cases(rank=2), st.integers(0, 1))
def test_slice_threads_match_reduced_rows(case, dim):
    parent, shape = case
    sliced_shape = tuple(s for i, s in enumerate(shape) if i != dim)
    sl = SliceLayout(dim, parent)
    assert sl.rank == 1
    ll = sl.to_linear(sliced_shape, num_warps=parent.num_warps, threads_per_warp=32)
    parent_owners = parent.to_linear(shape).owners()
    sliced_owners = ll.owners()
    assert ll.is_surjective()
    for i in range(sliced_shape[0]):
        expected = set()
        for coord, owners in parent_owners.items():
            if coord[1 - dim] == i:
                expected |= _threads(owners)
        assert _threads(sliced_owners[(i,)]) == expected
    per_thread = ll.coords().reshape(ll.num_warps * ll.num_lanes, ll.num_regs, -1)
    assert all(len({tuple(x) for x in t}) == ll.num_regs for t in per_thread.tolist())


@SETTINGS
@given(blocked_cases(rank=3, max_bits=9))
def test_nested_slice(case):
    parent, shape = case
    sl = SliceLayout(0, SliceLayout(1, parent))  # keeps parent dim 2
    ll = sl.to_linear((shape[2],))
    parent_owners = parent.to_linear(shape).owners()
    for i in range(shape[2]):
        expected = set().union(*(_threads(o) for c, o in parent_owners.items() if c[2] == i))
        assert _threads(ll.owners()[(i,)]) == expected


def test_slice_of_1d_is_a_scalar_everyone_holds():
    ll = SliceLayout(0, BlockedLayout([2], [32], [2], [0])).to_linear(())
    assert ll.shape == () and ll.num_regs == 1
    assert len(ll.owners()[()]) == 64


# ------------------------------------------------------------ explicit linear layouts
def test_distributed_linear_layout_matches_blocked():
    blocked = BlockedLayout([1, 4], [4, 8], [2, 2], [1, 0])
    ll = blocked.to_linear((16, 64))
    dll = DistributedLinearLayout([list(b) for b in ll.reg_bases], ll.lane_bases, ll.warp_bases, [], [16, 64])
    assert dll.to_linear((16, 64)) == ll
    assert ll.equivalent(dll) and dll.equivalent(blocked, (16, 64))
    assert not ll.equivalent(BlockedLayout([4, 1], [8, 4], [2, 2], [0, 1]))
    dll.verify((16, 64), num_warps=4, threads_per_warp=32)
    # a slice of an explicit layout: reduce dim 1 of the (16, 64) tile
    sl = SliceLayout(1, dll).to_linear((16,))
    assert sl == SliceLayout(1, blocked).to_linear((16,))


def test_distributed_linear_layout_general_bases():
    # a swizzled 4x4 layout: bases are not unit vectors
    dll = DistributedLinearLayout(reg_bases=[[0, 1], [1, 1]], lane_bases=[[0, 2], [2, 2]], warp_bases=[],
                                  block_bases=[], shape=[4, 4])
    ll = dll.to_linear((4, 4))
    assert ll.is_surjective() and ll.coord(3, 0, 0) == (1, 0)
    assert ll.reg_contiguity(1) == 2


# ------------------------------------------------------------ helpers
def test_reg_index_of_and_invert_regs():
    ll = BlockedLayout([1, 4], [4, 8], [2, 2], [1, 0]).to_linear((16, 64))
    c = ll.coords()
    for w, l, r in [(0, 0, 0), (3, 31, 7), (2, 5, 3)]:
        assert reg_index_of(ll, tuple(c[w, l, r]), l, w) == r
    assert reg_index_of(ll, (0, 0), lane=1, warp=0) == -1
    many = reg_index_of(ll, c[1, 2], lane=2, warp=1)
    assert many.tolist() == list(range(ll.num_regs))
    assert len(invert_regs(ll)) == ll.num_warps * ll.num_lanes * ll.num_regs


def test_linear_layout_of_verifies():
    layout = BlockedLayout([1], [64], [4], [0])
    assert linear_layout_of(layout, (256,), 4, 64).num_lanes == 64
    with pytest.raises(LayoutError, match="64 threads per warp"):
        linear_layout_of(layout, (256,), 4, 32)


def test_linear_layout_validates_bases():
    with pytest.raises(LayoutError, match="not a coordinate inside shape") as err:
        LinearLayout((4,), reg_bases=((4,),))
    assert "test_layouts.py" in str(err.value)


# ------------------------------------------------------------ invalid layouts
def _raises(fn, *words):
    with pytest.raises(LayoutError) as err:
        fn()
    text = str(err.value)
    assert "test_layouts.py" in text, text
    for w in words:
        assert w in text, text
    return text


def test_error_wrong_lengths():
    _raises(lambda: BlockedLayout([1, 4], [32], [4], [0]), "one entry per tensor dimension", "size_per_thread")


def test_error_not_power_of_two():
    _raises(lambda: BlockedLayout([3], [32], [4], [0]), "size_per_thread=[3]", "power of two")


def test_error_zero_entry():
    _raises(lambda: BlockedLayout([1], [32], [0], [0]), "warps_per_cta=[0]", "power of two")


def test_error_bad_order():
    _raises(lambda: BlockedLayout([1, 1], [4, 8], [1, 1], [0, 0]), "order=[0, 0]", "permutation")


def test_error_threads_do_not_match_warp_size():
    layout = BlockedLayout([1, 1], [16, 4], [4, 1], [1, 0])
    _raises(lambda: layout.verify((64, 64), 4, 32),
            "BlockedLayout threads_per_warp=[16, 4] has 64 threads per warp, but the target's warp has 32 threads")


def test_error_warps_do_not_match_num_warps():
    layout = BlockedLayout([1, 1], [4, 8], [2, 2], [1, 0])
    _raises(lambda: layout.to_linear((64, 64), num_warps=8, threads_per_warp=32),
            "warps_per_cta=[2, 2] has 4 warps", "num_warps=8")


def test_error_rank_mismatch():
    layout = BlockedLayout([1, 1], [4, 8], [2, 2], [1, 0])
    _raises(lambda: layout.to_linear((64,)), "rank 2", "[64]")


def test_error_shape_not_power_of_two():
    _raises(lambda: BlockedLayout([4], [32], [4], [0]).to_linear((96,)), "(96,)", "power of two")


def test_error_distributed_linear_shape_mismatch():
    dll = DistributedLinearLayout([[1]], [[2], [4]], [], [], [8])
    _raises(lambda: dll.to_linear((16,)), "written for shape [8]", "[16]")


def test_error_distributed_linear_lane_count():
    dll = DistributedLinearLayout([[1]], [[2], [4]], [], [], [8])
    _raises(lambda: dll.verify((8,), 1, 32), "2 lane_bases", "4 threads per warp", "32 threads")


def test_error_distributed_linear_base_outside_shape():
    _raises(lambda: DistributedLinearLayout([[8]], [[2], [4]], [], [], [8]), "[8]", "inside shape")


def test_error_distributed_linear_not_surjective():
    _raises(lambda: DistributedLinearLayout([[1]], [[1], [4]], [], [], [8]), "every element")


def test_error_distributed_linear_missing_shape():
    _raises(lambda: DistributedLinearLayout([[1]], [[2], [4]], []), "needs shape")


def test_error_slice_dim_out_of_range():
    _raises(lambda: SliceLayout(2, BlockedLayout([1, 1], [4, 8], [1, 1], [1, 0])), "dim=2", "0 <= dim < 2")


def test_error_slice_parent_not_layout():
    _raises(lambda: SliceLayout(0, [1, 2]), "parent must be a distributed layout")


def test_error_slice_threads_name_the_parent():
    sl = SliceLayout(0, BlockedLayout([1, 1], [8, 8], [1, 1], [1, 0]))
    _raises(lambda: sl.verify((16,), 1, 32), "SliceLayout(dim=0) of BlockedLayout threads_per_warp=[8, 8]")


# ------------------------------------------------------------ pictures
GOLDEN_2D = """\
BlockedLayout(size_per_thread=(1, 2), threads_per_warp=(2, 2), warps_per_cta=(2, 1), order=(1, 0))
LinearLayout shape=(4, 8): 4 regs x 4 lanes x 2 warps
        0       1       2       3       4       5       6       7
0 W0T0:R0 W0T0:R1 W0T1:R0 W0T1:R1 W0T0:R2 W0T0:R3 W0T1:R2 W0T1:R3
1 W0T2:R0 W0T2:R1 W0T3:R0 W0T3:R1 W0T2:R2 W0T2:R3 W0T3:R2 W0T3:R3
2 W1T0:R0 W1T0:R1 W1T1:R0 W1T1:R1 W1T0:R2 W1T0:R3 W1T1:R2 W1T1:R3
3 W1T2:R0 W1T2:R1 W1T3:R0 W1T3:R1 W1T2:R2 W1T2:R3 W1T3:R2 W1T3:R3"""

GOLDEN_SLICE = """\
LinearLayout shape=(4,): 2 regs x 4 lanes x 1 warp
        0       1       2       3
0 T0:R0+1 T2:R0+1 T0:R1+1 T2:R1+1
+k: k more (warp, lane, reg) slots hold copies of that element"""


def test_describe_golden():
    layout = BlockedLayout([1, 2], [2, 2], [2, 1], [1, 0])
    assert layout.describe((4, 8)) == GOLDEN_2D
    # a 2x2-lane tile reduced along dim 1: row i is held by both lanes of that row
    # (T0 and T1, or T2 and T3); rows 2, 3 repeat the 2-row tile in register 1
    sl = SliceLayout(1, BlockedLayout([1, 1], [2, 2], [1, 1], [1, 0]))
    assert str(sl.to_linear((4,))) == GOLDEN_SLICE
    assert sl.to_linear((4,)).owners()[(1,)] == [(0, 2, 0), (0, 3, 0)]


def test_describe_small_shape_marks_copies():
    ll = BlockedLayout([1], [4], [1], [0]).to_linear((2,))
    assert ll.describe() == (
        "LinearLayout shape=(2,): 1 reg x 4 lanes x 1 warp\n"
        "        0       1\n"
        "0 T0:R0+1 T1:R0+1\n"
        "+k: k more (warp, lane, reg) slots hold copies of that element")
    assert "scalar held by T0:R0+3" in SliceLayout(0, BlockedLayout([1], [4], [1], [0])).describe(())


def test_describe_3d_and_wide_1d():
    text = BlockedLayout([1, 1, 2], [2, 2, 1], [1, 1, 2], [2, 1, 0]).describe((2, 2, 4))
    assert "[1, :, :]" in text and "W1T3:R1" in text
    text = BlockedLayout([4], [32], [4], [0]).describe((1024,))
    assert "row label + column" in text and len(text.splitlines()) == 2 + 1 + 64 + 1


def test_repr_html():
    layout = BlockedLayout([1, 4], [4, 8], [2, 2], [1, 0])
    out = layout._repr_html_()
    assert "<table" in out and "hsl(" in out and "W3T31:R3" in out
    assert "<table" in layout.to_linear((16, 64))._repr_html_()


def test_distributed_linear_on_a_smaller_shape_wraps_like_blocked():
    blocked = BlockedLayout([1, 2], [8, 4], [2, 1], [1, 0])
    full = blocked.to_linear((16, 8))
    dll = DistributedLinearLayout(full.reg_bases, full.lane_bases, full.warp_bases, shape=(16, 8))
    for small in [(16, 1), (1, 8), (4, 2), (1, 1)]:
        assert dll.to_linear(small).equivalent(blocked.to_linear(small)), small

"""Reductions and scans over every kind of legal layout, on the AMD simulator against the
interpreter (itself checked against numpy), for gfx90a/gfx942 (wave64) and gfx1100
(wave32); each kernel is assembled on the way (amdsim.simulate compiles it), and run with the
strict LDS race detector (amdsim_races: layouts with zero or repeated warp bases put copies of
the partials in several waves, of which one may store the scratch).

Layouts come from hypothesis (tests/reduce_layout_cases.py): BlockedLayouts of rank 1-3
in every order and DistributedLinearLayouts with multi-bit, zero and repeated bases.
Set GLUON_TRACE_LAYOUT_EXAMPLES=N for a longer run."""
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import reduce_layout_cases as R  # noqa: E402

from gluon_trace import language as gl  # noqa: E402

import amdsim  # noqa: E402
import amdsim_races  # noqa: E402

pytestmark = pytest.mark.usefixtures("amd_toolchain")

TARGETS = {"gfx90a": 6, "gfx942": 6, "gfx1100": 5}  # log2 of the wave size
EXAMPLES = int(os.environ.get("GLUON_TRACE_LAYOUT_EXAMPLES", "4"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 4,
                    suppress_health_check=list(HealthCheck))


def simulate(case, target, seed=0):
    ref = R.reference(case, seed, target)
    kernel, args, cx = R.launch_args(case, seed)
    tk = kernel.trace(*args, **cx, num_warps=case[5], target=target)
    amdsim_races.simulate(tk, target, (1,), args)   # and no two waves store one LDS byte unordered
    np.testing.assert_array_equal(args[0], ref, err_msg=f"{case} on {target}")
    return tk


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_reductions_match_interpreter(target):
    @SETTINGS
    @given(R.cases(lanes_log=TARGETS[target], scan=False, max_bits=8))
    def check(case):
        simulate(case, target)
    check()


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_scans_match_interpreter(target):
    @SETTINGS
    @given(R.cases(lanes_log=TARGETS[target], scan=True, max_bits=8))
    def check(case):
        simulate(case, target)
    check()


def _known(lanes_log):
    """Layouts the backend once refused (issue 13): lane and register bases that mix the
    axis with another dimension, multi-bit bases, an axis bit held twice."""
    lane = [[1 << k] for k in range(1, lanes_log)]
    swizzled = gl.DistributedLinearLayout(reg_bases=[[1]], lane_bases=[[(1 << lanes_log) - 8]] + lane,
                                          warp_bases=[[0]], shape=[1 << lanes_log])
    twice = gl.DistributedLinearLayout(reg_bases=[[1]], lane_bases=lane + [[2]], warp_bases=[[0]],
                                       shape=[1 << lanes_log])
    n = 1 << (lanes_log - 1)
    diagonal = gl.DistributedLinearLayout(
        reg_bases=[[n // 2, 1], [0, 2]], lane_bases=[[1 << k, 0] for k in range(lanes_log - 1)] + [[0, 0]],
        warp_bases=[[0, 1]], shape=[n, 4])
    return [(swizzled, (1 << lanes_log,), 0), (twice, (1 << lanes_log,), 0), (diagonal, (n, 4), 0),
            (diagonal, (n, 4), 1)]


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
@pytest.mark.parametrize("op,reverse", [("sum", None), ("first_nonzero", None), ("argmax", None),
                                        ("cumsum", True), ("first_nonzero", False)])
def test_layouts_issue13_reported(target, op, reverse):
    for layout, shape, axis in _known(TARGETS[target]):
        simulate((layout, shape, axis, op, reverse, 2, np.float32), target)


def test_direct_lowering_kept_where_it_applies():
    """A blocked layout with the axis in registers and lanes reduces without LDS."""
    layout = gl.BlockedLayout([2, 1], [16, 2], [1, 2], [0, 1])
    tk = simulate((layout, (32, 4), 0, "sum", None, 2, np.int32), "gfx1100")
    assert "ds_write" not in tk.amdgcn("gfx1100")


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.float16])
def test_fallback_other_dtypes(dtype):
    layout = gl.DistributedLinearLayout(reg_bases=[[1]], lane_bases=[[24], [2], [4], [8], [16]],
                                        warp_bases=[[16]], shape=[32])
    for op, rev in (("first_nonzero", False), ("argmax", None), ("sum", None)):
        simulate((layout, (32,), 0, op, rev, 2, dtype), "gfx1100")

"""Reductions and scans over every kind of legal layout, on the PTX simulator against the
interpreter (which is checked against numpy), and assembled by ptxas for sm_80/sm_90a.

Layouts come from hypothesis (tests/reduce_layout_cases.py): BlockedLayouts of rank 1-3
in every order and DistributedLinearLayouts with multi-bit, zero and repeated bases.
Set GLUON_TRACE_LAYOUT_EXAMPLES=N for a longer run (the default keeps CI near 10 s)."""
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import ptxsim  # noqa: E402
import reduce_layout_cases as R  # noqa: E402

from gluon_trace import language as gl  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia import ptxas  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from gluon_trace.errors import CompileError  # noqa: E402
from batch import assemble_many  # noqa: E402

EXAMPLES = int(os.environ.get("GLUON_TRACE_LAYOUT_EXAMPLES", "40"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 40,
                    suppress_health_check=list(HealthCheck))


def simulate(case, seed=0, target="sm_90"):
    """PTX of the case run on the simulator; its output must equal the interpreter's."""
    ref = R.reference(case, seed)
    kernel, args, cx = R.launch_args(case, seed)
    graph = kernel.trace(*args, **cx, num_warps=case[5], target=target).graph
    text, _, smem = emit(graph, target)
    ptxsim.run(text, (1, 1, 1), args, smem)
    np.testing.assert_array_equal(args[0], ref, err_msg=f"{case}")
    return text


def _assemble(texts, target):
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(f"no ptxas here: {e}")
    errors, _ = assemble_many(texts, target)
    assert not errors, "\n".join(list(errors.values())[:3])


@pytest.mark.parametrize("scan", [False, True], ids=["reduce", "scan"])
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_matches_interpreter_and_assembles(target, scan):
    """Simulated against the interpreter, then every generated kernel assembled by ptxas."""
    texts = []

    @SETTINGS
    @given(R.cases(lanes_log=5, scan=scan))
    def check(case):
        texts.append(simulate(case, target=target))
    check()
    _assemble(texts, target)


# Layouts the backend once refused or got wrong (issue 13), each through the fallback.
SWIZZLED = gl.DistributedLinearLayout(reg_bases=[[1]], lane_bases=[[24], [2], [4], [8], [16]],
                                      warp_bases=[[0]], shape=[32])
DIAGONAL = gl.DistributedLinearLayout(reg_bases=[[16, 1], [0, 2]], lane_bases=[[1, 0], [2, 0], [4, 0], [8, 0], [0, 0]],
                                      warp_bases=[[0, 1]], shape=[32, 4])
LANES_OUT_OF_ORDER = gl.DistributedLinearLayout(reg_bases=[], lane_bases=[[4], [1], [2], [8], [16]],
                                                warp_bases=[[0]], shape=[32])
TWICE = gl.DistributedLinearLayout(reg_bases=[[1]], lane_bases=[[2], [4], [8], [16], [2]],
                                   warp_bases=[[16]], shape=[32])
WARPS_BEFORE_LANES = gl.BlockedLayout([1, 1], [32, 1], [1, 2], [0, 1])
REG_ABOVE_WARP = gl.DistributedLinearLayout(reg_bases=[[32]], lane_bases=[[1], [2], [4], [8], [16]],
                                            warp_bases=[[64], [0]], shape=[128])
KNOWN = [(SWIZZLED, (32,), 0, 2), (DIAGONAL, (32, 4), 0, 2), (DIAGONAL, (32, 4), 1, 2),
         (LANES_OUT_OF_ORDER, (32,), 0, 2), (TWICE, (32,), 0, 2), (WARPS_BEFORE_LANES, (8, 64), 1, 2),
         (REG_ABOVE_WARP, (128,), 0, 4)]


@pytest.mark.parametrize("layout,shape,axis,nw", KNOWN, ids=range(len(KNOWN)))
@pytest.mark.parametrize("op,reverse", [("cumsum", True), ("first_nonzero", False), ("sum", None),
                                        ("first_nonzero", None)])
def test_layouts_issue13_reported(layout, shape, axis, nw, op, reverse):
    simulate((layout, shape, axis, op, reverse, nw, np.int32))


def test_direct_lowering_kept_where_it_applies():
    """A blocked layout with the axis in registers and lanes reduces with shuffles alone:
    no shared memory, no barrier."""
    layout = gl.BlockedLayout([2, 1], [16, 2], [1, 2], [0, 1])
    for op, rev in (("sum", None), ("cumsum", False)):
        text = simulate((layout, (32, 4), 0, op, rev, 2, np.float32))
        assert "bar.sync" not in text and "st.shared" not in text, op


@pytest.mark.parametrize("op", ["argmax", "first_nonzero"])
def test_order_kept_with_registers_above_warps(op):
    """A combine that may not commute over a tile larger than the layout (registers hold
    the highest axis bits, above the warps' ones) stays direct: the registers' partials
    join the warps' in shared memory, in coordinate order -- one barrier."""
    layout = gl.BlockedLayout([2], [32], [4], [0])
    text = simulate((layout, (1024,), 0, op, None, 4, np.float32))
    assert text.count("bar.sync") == 1


def test_fallback_goes_through_shared_memory():
    text = simulate((SWIZZLED, (32,), 0, "cumsum", False, 2, np.int32))
    assert text.count("bar.sync") >= 2 and "st.shared" in text


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_assembled_by_ptxas(target):
    """The layouts of issue 13 through each fallback, assembled."""
    texts = [simulate((layout, shape, axis, op, rev, nw, np.float32), target=target)
             for layout, shape, axis, nw in KNOWN for op, rev in (("cumsum", True), ("argmax", None))]
    _assemble(texts, target)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.float16, np.int8])
def test_fallback_other_dtypes(dtype):
    """64-bit values take two-word shared-memory slots and shuffles, narrow ones widen."""
    layout = gl.DistributedLinearLayout(reg_bases=[[1]], lane_bases=[[24], [2], [4], [8], [16]],
                                        warp_bases=[[16]], shape=[32])
    for op, rev in (("cumsum", True), ("first_nonzero", False), ("argmax", None), ("sum", None)):
        simulate((layout, (32,), 0, op, rev, 2, dtype))

"""gl.split / gl.join over random legal layouts on the AMD simulator against the
interpreter (itself checked against numpy), for wave64 and wave32 targets."""
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import split_join_cases as S  # noqa: E402

from gluon_trace import language as gl  # noqa: E402

import amdsim  # noqa: E402

pytestmark = pytest.mark.usefixtures("amd_toolchain")

TARGETS = {"gfx942": 6, "gfx1100": 5}
EXAMPLES = int(os.environ.get("GLUON_TRACE_LAYOUT_EXAMPLES", "4"))


def simulate(case, target, seed=0):
    ref = S.reference(case, seed, target)
    args, cx = S.launch_args(case, seed)
    tk = S.split_join_kernel.trace(*args, **cx, num_warps=case[2], target=target)
    amdsim.simulate(tk, target, (1,), args)
    for got, want in zip(args[:3], ref):
        np.testing.assert_array_equal(got, want, err_msg=f"{case} on {target}")


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_matches_interpreter(target):
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 4,
              suppress_health_check=list(HealthCheck))
    @given(S.cases(lanes_log=TARGETS[target], max_bits=7))
    def check(case):
        simulate(case, target)
    check()


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_registers_and_lanes(target):
    tpw = 1 << TARGETS[target]
    simulate((gl.BlockedLayout([1, 2], [tpw, 1], [2, 1], [1, 0]), (2 * tpw, 2), 2, np.float32), target)
    simulate((gl.BlockedLayout([1, 1], [tpw // 2, 2], [1, 2], [1, 0]), (tpw // 2, 2), 2, np.int32), target)

"""The fuzzer's gl.split / gl.join programs (FuzzConfig(split_join=True)) compiled for gfx942
and gfx1100 and run on the AMD simulator against the numpy reference, outputs poisoned."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import split_join_cases as S  # noqa: E402

from gluon_trace import fuzz  # noqa: E402

import amdsim  # noqa: E402

pytestmark = pytest.mark.usefixtures("amd_toolchain")
N = int(os.environ.get("GLUON_TRACE_FUZZ_SPLIT_JOIN_PROGRAMS", "25"))


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_simulated_amdgcn_matches_the_reference(target):
    def run(prog, args):
        amdsim.simulate(fuzz.trace_program(prog, target), target, (1,), args)
    progs = S.fuzz_programs(N // 2, 64 if target == "gfx942" else 32)
    failures = [f for f in (S.check_fuzz(p, target, run) for p in progs) if f]
    assert not failures, "\n".join(failures)

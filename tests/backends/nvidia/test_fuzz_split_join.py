"""The fuzzer's gl.split / gl.join programs (FuzzConfig(split_join=True)): the interpreter and
the PTX on the simulator against the numpy reference, outputs poisoned. Off by default in
FuzzConfig, so other fuzz tests' seeds keep their programs. Count from
GLUON_TRACE_FUZZ_SPLIT_JOIN_PROGRAMS."""
import collections
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import ptxsim  # noqa: E402
import split_join_cases as S  # noqa: E402

from gluon_trace import fuzz  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

N = int(os.environ.get("GLUON_TRACE_FUZZ_SPLIT_JOIN_PROGRAMS", "25"))


def test_generated_and_off_by_default():
    ops = collections.Counter(x.op for p in S.fuzz_programs(N) for x in p.nodes)
    assert ops["split"] >= 3 and ops["join"] >= 3, ops
    plain = fuzz.FuzzConfig(max_numel=256, max_ops=6)
    assert not any(x.op in ("split", "join") for s in range(200) for x in fuzz.random_program(s, plain).nodes)


def test_simulated_ptx_matches_the_reference():
    def run(prog, args):
        text, _, smem = emit(fuzz.trace_program(prog, "sm_90").graph, "sm_90")
        ptxsim.run(text, (1, 1, 1), args, smem)
    failures = [f for f in (S.check_fuzz(p, "sm_90", run) for p in S.fuzz_programs(N)) if f]
    assert not failures, "\n".join(failures)

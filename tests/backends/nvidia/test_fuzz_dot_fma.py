"""The fuzzer's gl.dot_fma programs (FuzzConfig(dot_fma=True): an accumulator tile in a
BlockedLayout, operands converted into the DotOperandLayouts over it): the interpreter against
the numpy reference (exact: the chain along K, each step one rounding) and the PTX on the
simulator against the reference. Off by default in FuzzConfig, so seeds of the other fuzz tests
keep their programs. Count from GLUON_TRACE_FUZZ_DOT_FMA_PROGRAMS."""
import collections
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

from gluon_trace import fuzz  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

N = int(os.environ.get("GLUON_TRACE_FUZZ_DOT_FMA_PROGRAMS", "30"))
CONFIG = fuzz.FuzzConfig(max_numel=256, max_ops=6, dot_fma=True)


def _programs(n):
    out, seed = [], 0
    while len(out) < n:
        prog = fuzz.random_program(seed, CONFIG)
        if any(x.op == "dot_fma" for x in prog.nodes):
            out.append(prog)
        seed += 1
    return out


def test_generated_and_off_by_default():
    progs = _programs(N)
    dtypes = collections.Counter(x.dtype for p in progs for x in p.nodes if x.op == "dot_fma")
    assert len(dtypes) >= 4, dtypes  # floats and integers of several widths
    plain = fuzz.FuzzConfig(max_numel=256, max_ops=6)
    assert not any(x.op == "dot_fma" for s in range(300) for x in fuzz.random_program(s, plain).nodes)


def test_interpreter_and_simulated_ptx_match_the_reference():
    failures = []
    for prog in _programs(N):
        out = fuzz.check_program(prog)
        try:
            inputs = fuzz.make_inputs(prog)
            text, _, smem = emit(fuzz.trace_program(prog, "sm_90").graph, "sm_90")
            assert "dot_fma" in fuzz.kernel_source(prog)
            args, poison = fuzz.kernel_args(prog, inputs)
            with np.errstate(all="ignore"):
                ptxsim.run(text, (1, 1, 1), args, smem)
            ref = fuzz.evaluate(prog, inputs, "bounded")
            out.failures += [("sm_90 (ptxsim)", m) for m in fuzz.mismatches(prog, fuzz.outputs_of(prog, args),
                                                                             ref, poison)]
        except Exception as e:  # noqa: BLE001 - a refusal or crash on a legal program is a finding
            out.failures.append(("sm_90 (ptxsim)", f"{type(e).__name__}: {str(e)[:600]}"))
        if not out.ok:
            failures.append(f"{fuzz.save_reproducer(prog, out.failures, name='dot_fma')}: {out.failures}")
    assert not failures, "\n".join(failures)

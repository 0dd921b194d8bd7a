"""The differential fuzzer on an NVIDIA GPU: N random programs (GLUON_TRACE_FUZZ_GPU, default
2000) run in the interpreter (exactly against the numpy reference) and on the GPU (against the
reference's bounds, which allow another summation order and the approximate math
instructions). Every failing program is saved as a reproducer under .fuzz_failures/gpu/ and
the assertion lists them by message. Run with ``pytest -m gpu``."""
import collections
import os
import re

import pytest

from gluon_trace import fuzz

pytestmark = pytest.mark.gpu

N = int(os.environ.get("GLUON_TRACE_FUZZ_GPU", "2000"))
SEED0 = int(os.environ.get("GLUON_TRACE_FUZZ_GPU_SEED", "0"))


def _gpu_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
        return "torch sees no NVIDIA GPU"
    return None


def test_random_programs_agree_on_the_gpu():
    why = _gpu_reason()
    if why:
        pytest.skip(why)
    failures, kinds = [], collections.Counter()
    directory = os.path.join(fuzz.failure_dir(), "gpu")
    for seed in range(SEED0, SEED0 + N):
        prog = fuzz.random_program(seed)
        outcome = fuzz.check_program(prog)  # interpreter vs reference, exact
        try:
            kernel = fuzz.kernel_of(prog)
            inputs = fuzz.make_inputs(prog)
            got, poison = fuzz.run_on_device(prog, inputs, kernel)
            ref = fuzz.evaluate(prog, inputs, "bounded")
            outcome.failures += [("nvidia", m) for m in fuzz.mismatches(prog, got, ref, poison)]
        except Exception as e:  # noqa: BLE001 - a refused or crashing legal program is a finding
            outcome.failures.append(("nvidia", f"{type(e).__name__}: {str(e)[:500]}"))
        if not outcome.ok:
            path = fuzz.save_reproducer(prog, outcome.failures, directory, name=f"seed_{seed}")
            failures.append(f"seed {seed}: {path}")
            for where, msg in outcome.failures:
                kinds[(where, re.sub(r"<gluon_trace.fuzz program \d+>:\d+: ", "", msg)[:90])] += 1
    summary = "\n".join(f"  {n} x {w}: {m}" for (w, m), n in kinds.most_common(30))
    print(f"\n{N} programs, {len(failures)} failing")
    assert not failures, (f"{len(failures)} of {N} programs failed (reproducers in {directory}):\n"
                          f"{summary}\n" + "\n".join(failures[:20]))

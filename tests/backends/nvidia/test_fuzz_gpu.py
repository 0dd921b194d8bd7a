"""The differential fuzzer on an NVIDIA GPU: N random programs (GLUON_TRACE_FUZZ_GPU, default
2000, from seed GLUON_TRACE_FUZZ_GPU_SEED) run in the interpreter (exactly against the numpy
reference) and on the GPU (against the reference's bounds, which allow another summation order
and the approximate math instructions). GLUON_TRACE_FUZZ_GPU_PRESET names one of
gluon_trace.fuzz.presets (``shared``: tiles through shared buffers; default: the generator's
own bounds).

Worker processes (GLUON_TRACE_FUZZ_WORKERS, default one per CPU core) do the CPU work of each
program (the interpreter, trace, emit, ptxas); this process launches and compares, printing a
progress line every 100 programs. A compile past GLUON_TRACE_FUZZ_GPU_BUDGET seconds (default
120) is killed and reported with its seed, not run; GLUON_TRACE_FUZZ_GPU_DEADLINE (seconds,
optional) stops starting programs so a run ends with its counts instead of being killed.
Every failing program is saved as a reproducer under .fuzz_failures/gpu/, shrunk (within
GLUON_TRACE_FUZZ_GPU_SHRINK seconds, default 60) and saved again. Run with
``pytest -s -m gpu`` (-s shows the progress as it goes); tests/backends/nvidia/test_fuzz_parallel.py
proves the same driver on the CPU with the PTX simulator."""
import collections
import os
import re
import warnings

import pytest

from gluon_trace import fuzz
from gluon_trace.fuzz import parallel
from gluon_trace.fuzz.presets import preset_config

pytestmark = pytest.mark.gpu

N = int(os.environ.get("GLUON_TRACE_FUZZ_GPU", "2000"))
SEED0 = int(os.environ.get("GLUON_TRACE_FUZZ_GPU_SEED", "0"))
BUDGET = float(os.environ.get("GLUON_TRACE_FUZZ_GPU_BUDGET", "120"))
SHRINK = float(os.environ.get("GLUON_TRACE_FUZZ_GPU_SHRINK", "60"))
DEADLINE = os.environ.get("GLUON_TRACE_FUZZ_GPU_DEADLINE")
PRESET = os.environ.get("GLUON_TRACE_FUZZ_GPU_PRESET")


def _gpu_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
        return "torch sees no NVIDIA GPU"
    return None


COMPILED_AT_LAUNCH = []  # programs whose launch traced another graph than the workers did


def on_gpu(prog, inputs, kernel, compiled):
    """The launch traces what the workers traced; the binary is in this process's cache
    (a launch that had to compile is counted: it costs this process the ptxas time)."""
    from gluon_trace.backends.nvidia import compiler
    before = len(compiler._memory)
    out = fuzz.run_on_device(prog, inputs, kernel)
    if len(compiler._memory) != before:
        COMPILED_AT_LAUNCH.append(prog.seed)
    return out


def test_random_programs_agree_on_the_gpu():
    why = _gpu_reason()
    if why:
        pytest.skip(why)
    import torch
    from gluon_trace.backends.nvidia import BACKEND
    target = BACKEND.target_of_device(torch.cuda.current_device())
    directory = os.path.join(fuzz.failure_dir(), "gpu")
    cfg = preset_config(PRESET) if PRESET else None
    rep = parallel.check_many(range(SEED0, SEED0 + N), on_gpu, target=target, cfg=cfg, workers=parallel.default_workers(),
                              budget_s=BUDGET, shrink_s=SHRINK, directory=directory,
                              deadline_s=float(DEADLINE) if DEADLINE else None)
    kinds = collections.Counter()
    for msgs in rep.messages.values():
        for where, msg in msgs:
            kinds[(where, re.sub(r"<gluon_trace.fuzz [^>]*>:\d+: ", "", msg)[:90])] += 1
    summary = "\n".join(f"  {n} x {w}: {m}" for (w, m), n in kinds.most_common(30))
    failing = sorted(rep.messages)
    if COMPILED_AT_LAUNCH:
        warnings.warn(f"{len(COMPILED_AT_LAUNCH)} launches compiled a graph the workers had not traced "
                      "(parallel.trace_as_launched differs from a launch with torch tensors)")
    if rep.over_budget:
        warnings.warn(f"{len(rep.over_budget)} programs not run: compile over {BUDGET:g} s "
                      f"(seeds {sorted(rep.over_budget)})")
    assert not failing and not rep.not_run, (
        f"{rep.line()}\n(reproducers in {directory}; {len(rep.not_run)} not started before the deadline)\n"
        f"{summary}\n" + "\n".join(f"seed {s}: {rep.reproducers.get(s)}" for s in failing[:20]))

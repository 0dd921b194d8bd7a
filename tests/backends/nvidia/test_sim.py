"""Corpus kernels run by a PTX simulator (ptxsim.py) against the interpreter: the
NVIDIA backend's semantics checked without a GPU. Inputs are fresh random data and
outputs are poisoned first. A representative slice runs by default; set
GLUON_TRACE_SIM_ALL=1 for the whole corpus."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import nv_corpus as corpus  # noqa: E402
import ptxsim  # noqa: E402

from gluon_trace import dtypes as dt  # noqa: E402
from gluon_trace.backend import get  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

CASES = corpus.cases()
ALL = os.environ.get("GLUON_TRACE_SIM_ALL") == "1"
SLICE = CASES if ALL else CASES[::7] + [c for c in CASES if c.name.startswith(
    ("softmax", "layernorm", "loop", "ifelse", "atomic", "cumsum2d_L2_WARPS_M", "argmax", "trans",
     "convert", "reduce2d_sum_ax0", "scalar", "masked", "copy_float16_L1_8", "copy_int8_L16"))]
SLICE = list({c.name: c for c in SLICE}.values())


def poison(a: np.ndarray) -> None:
    if a.dtype.kind == "f":
        a[...] = np.nan
    else:
        a.reshape(-1).view(np.uint8)[...] = 0x5A


def decode(a: np.ndarray, t) -> np.ndarray:
    return dt.bf16_bits_to_f32(a) if t.name == "bfloat16" else a


def compare(case, got, exp, t):
    got, exp = decode(got, t), decode(exp, t)
    if case.order_free:
        got, exp = np.sort(got.reshape(-1)), np.sort(exp.reshape(-1))
    if got.dtype.kind == "f":
        rtol = case.rtol if case.rtol is not None else 0
        atol = case.atol if case.atol is not None else 0
        ok = np.isclose(got, exp, rtol=rtol, atol=atol, equal_nan=True)
    else:
        ok = got == exp
    if not ok.all():
        bad = np.argwhere(~ok.reshape(got.shape))[:8]
        rows = [f"  {tuple(i)}: got {got[tuple(i)]!r} expected {exp[tuple(i)]!r}" for i in bad]
        raise AssertionError(f"{case.name}: {int((~ok).sum())} of {ok.size} elements differ\n" + "\n".join(rows))


def run_case(case, seed):
    rng = np.random.default_rng(seed)
    args = case.make(rng)
    specs = [a.spec() if isinstance(a, corpus.Arr) else a for a in args]
    graph = case.kernel.trace(*specs, target="sm_90", **case.kw).graph
    text, _, smem = emit(graph, "sm_90")
    ref = [a.storage() if isinstance(a, corpus.Arr) else a for a in args]
    sim = [a.storage() if isinstance(a, corpus.Arr) else a for a in args]
    for a, r, s in zip(args, ref, sim):
        if isinstance(a, corpus.Arr) and a.out:
            poison(r)
            poison(s)
    grid = tuple(case.grid) + (1,) * (3 - len(case.grid))
    with np.errstate(all="ignore"):
        get("interpreter").run(graph, grid, ref)
        ptxsim.run(text, grid, sim, smem)
    for i in case.outputs:
        compare(case, sim[i], ref[i], args[i].dtype)


@pytest.mark.parametrize("case", SLICE, ids=[c.name for c in SLICE])
def test_simulated_matches_interpreter(case):
    run_case(case, seed=hash(case.name) & 0xFFFF)

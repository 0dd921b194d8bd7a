"""Random programs (gluon_trace.fuzz) emitted as PTX and run on the PTX simulator against the
numpy reference's bounds: the NVIDIA backend checked differentially without a GPU. Count from
GLUON_TRACE_FUZZ_SIM_EXAMPLES; a failure saves a reproducer (.fuzz_failures/)."""
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

from gluon_trace import fuzz  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

N = int(os.environ.get("GLUON_TRACE_FUZZ_SIM_EXAMPLES", "25"))
# the simulator steps every thread in Python: keep to tiles it runs in seconds
CONFIG = fuzz.FuzzConfig(max_numel=256, max_ops=6)


@settings(max_examples=N, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fuzz.programs(CONFIG))
def test_simulated_ptx_matches_reference(prog):
    _check(prog, ptxsim.run, "sm_90 (ptxsim)", "ptxsim")


def _check(prog, run, where: str, name: str, target: str = "sm_90") -> None:
    """``prog`` emitted for ``target`` on the PTX simulator ``run`` against the numpy reference;
    a refusal or crash on a legal program is a finding too. A failure saves a reproducer named
    ``name``."""
    outcome = fuzz.Outcome(prog)
    inputs = fuzz.make_inputs(prog)
    try:
        text, _, smem = emit(fuzz.trace_program(prog, target).graph, target)
        args, poison = fuzz.kernel_args(prog, inputs)
        with np.errstate(all="ignore"):
            run(text, (1, 1, 1), args, smem)
        got = fuzz.outputs_of(prog, args)
        ref = fuzz.evaluate(prog, inputs, "bounded")
        outcome.failures += [(where, m) for m in fuzz.mismatches(prog, got, ref, poison)]
    except Exception as e:  # noqa: BLE001 - a refusal or crash on a legal program is a finding
        outcome.failures.append((where, f"{type(e).__name__}: {str(e)[:600]}"))
    if not outcome.ok:
        path = fuzz.save_reproducer(prog, outcome.failures, name=name)
        raise AssertionError(f"reproducer: {path}\n" + "\n".join(f"  {w}: {m}" for w, m in outcome.failures))


# ------------------------------------------------------------------------------ shared memory
import ptxsim_races  # noqa: E402

SHARED = fuzz.FuzzConfig(max_numel=256, max_ops=6, shared=True)
N_SHARED = int(os.environ.get("GLUON_TRACE_FUZZ_SHARED_SIM_EXAMPLES", "12"))


@pytest.mark.parametrize("seed", range(N_SHARED))
def test_simulated_ptx_shared_memory_programs(seed):
    """Tiles through shared buffers and views (gluon_trace/fuzz/smem.py) on the simulator
    with the race detector: values against the reference, and every shared access ordered
    by the barriers the backend placed."""
    _check(fuzz.random_program(seed, SHARED), ptxsim_races.run, "sm_90 (ptxsim_races)", f"ptxsim_shared_{seed}")


# ------------------------------------------------------------------------------ atomics
from gluon_trace.fuzz.presets import preset_config  # noqa: E402

N_ATOMICS = int(os.environ.get("GLUON_TRACE_FUZZ_ATOMICS_SIM_EXAMPLES", "12"))


@pytest.mark.parametrize("target", ["sm_90", "sm_80"])
@pytest.mark.parametrize("seed", range(N_ATOMICS))
def test_simulated_ptx_atomics_programs(target, seed):
    """Atomics (gluon_trace/fuzz/atomics.py) through layouts holding copies, at repeated
    addresses, into buffers with random contents: old values and final contents against the
    reference, and the owners' old values shared with the copies ordered by barriers."""
    _check(fuzz.random_program(seed, preset_config("atomics")), ptxsim_races.run,
           f"{target} (ptxsim_races)", f"ptxsim_atomics_{target}_{seed}", target)


# ------------------------------------------------------------------------------ unaligned views
N_VIEWS = int(os.environ.get("GLUON_TRACE_FUZZ_VIEWS_SIM_EXAMPLES", "20"))


@pytest.mark.parametrize("target", ["sm_90", "sm_80"])
@pytest.mark.parametrize("seed", range(N_VIEWS))
def test_simulated_ptx_unaligned_view_programs(target, seed):
    """The views preset (slices from inside swizzle and padding periods, padded views picked by
    a branch at different such starts) on the simulator with the race detector."""
    _check(fuzz.random_program(seed, preset_config("views")), ptxsim_races.run,
           f"{target} (ptxsim_races)", f"ptxsim_views_{target}_{seed}", target)


# ------------------------------------------------------------------------------ stacked slot views
def _slot_seeds(n: int) -> list:
    """The first ``n`` seeds whose stacked-preset program picks among slot views."""
    from gluon_trace.fuzz.smem_stacked import draws_slots
    out, seed = [], 0
    while len(out) < n:
        if draws_slots(fuzz.random_program(seed, preset_config("stacked"))):
            out.append(seed)
        seed += 1
    return out


N_STACKED = int(os.environ.get("GLUON_TRACE_FUZZ_STACKED_SIM_EXAMPLES", "16"))


@pytest.mark.parametrize("target", ["sm_90", "sm_80"])
@pytest.mark.parametrize("seed", _slot_seeds(N_STACKED))
def test_simulated_ptx_stacked_slot_view_programs(target, seed):
    """The stacked preset (.index() of slots of stacked buffers made in each branch arm or a
    loop's body at different starts, then viewed after the join; fuzz/smem_stacked.py), the
    family smem_join's look-ahead mispredicted, on the simulator with the race detector."""
    _check(fuzz.random_program(seed, preset_config("stacked")), ptxsim_races.run,
           f"{target} (ptxsim_races)", f"ptxsim_stacked_{target}_{seed}", target)

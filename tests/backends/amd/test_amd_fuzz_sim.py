"""Random programs (gluon_trace.fuzz) compiled for gfx942 and gfx1100 and run on the AMDGCN
simulator against the numpy reference's bounds. Count from GLUON_TRACE_FUZZ_SIM_EXAMPLES; a
failure saves a reproducer (.fuzz_failures/). Every program runs on amdsim_races: two waves
touching one LDS byte (one of them writing) with no s_barrier between them fail, even when
they store one value (amdsim's own check lets a byte be rewritten with what it holds)."""
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, os.path.dirname(__file__))
import amdsim_races  # noqa: E402

from gluon_trace import fuzz  # noqa: E402

pytestmark = pytest.mark.usefixtures("amd_toolchain")
N = int(os.environ.get("GLUON_TRACE_FUZZ_SIM_EXAMPLES", "25"))


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
@settings(max_examples=N, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=__import__("hypothesis").strategies.data())
def test_simulated_amdgcn_matches_reference(target, data):
    warp = 64 if target == "gfx942" else 32
    _check(data.draw(fuzz.programs(fuzz.FuzzConfig(warp_size=warp, max_numel=256, max_ops=6))), target,
           f"amdsim_{target}")


def _check(prog, target: str, name: str) -> None:
    """``prog`` on amdsim_races (amdsim reporting LDS races) against the numpy reference; a refusal
    or crash on a legal program is a finding too. A failure saves a reproducer named ``name``."""
    outcome = fuzz.Outcome(prog)
    inputs = fuzz.make_inputs(prog)
    try:
        traced = fuzz.trace_program(prog, target)
        args, poison = fuzz.kernel_args(prog, inputs)
        with np.errstate(all="ignore"):
            amdsim_races.simulate(traced, target, (1,), args)
        got = fuzz.outputs_of(prog, args)
        ref = fuzz.evaluate(prog, inputs, "bounded")
        outcome.failures += [(f"{target} (amdsim_races)", m) for m in fuzz.mismatches(prog, got, ref, poison)]
    except Exception as e:  # noqa: BLE001 - a refusal or crash on a legal program is a finding
        outcome.failures.append((f"{target} (amdsim_races)", f"{type(e).__name__}: {str(e)[:600]}"))
    if not outcome.ok:
        path = fuzz.save_reproducer(prog, outcome.failures, name=name)
        raise AssertionError(f"reproducer: {path}\n" + "\n".join(f"  {w}: {m}" for w, m in outcome.failures))


# ------------------------------------------------------------------------------ shared memory
N_SHARED = int(os.environ.get("GLUON_TRACE_FUZZ_SHARED_SIM_EXAMPLES", "12"))


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
@pytest.mark.parametrize("seed", range(N_SHARED))
def test_simulated_amdgcn_shared_memory_programs(target, seed):
    """Tiles through LDS buffers and views (gluon_trace/fuzz/smem.py) on the simulator, which
    also reports LDS races: values against the reference, accesses ordered by the barriers."""
    warp = 64 if target == "gfx942" else 32
    _check(fuzz.random_program(seed, fuzz.FuzzConfig(warp_size=warp, max_numel=256, max_ops=6, shared=True)),
           target, f"amdsim_shared_{target}_{seed}")


# ------------------------------------------------------------------------------ atomics
N_ATOMICS = int(os.environ.get("GLUON_TRACE_FUZZ_ATOMICS_SIM_EXAMPLES", "12"))


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
@pytest.mark.parametrize("seed", range(N_ATOMICS))
def test_simulated_amdgcn_atomics_programs(target, seed):
    """Atomics (gluon_trace/fuzz/atomics.py) through layouts holding copies, at repeated
    addresses, into buffers with random contents: old values and final contents against the
    reference, the copies' old values through LDS checked for races by the simulator."""
    from gluon_trace.fuzz.presets import preset_config
    warp = 64 if target == "gfx942" else 32
    _check(fuzz.random_program(seed, preset_config("atomics", warp)), target, f"amdsim_atomics_{target}_{seed}")


# ------------------------------------------------------------------------------ unaligned views
N_VIEWS = int(os.environ.get("GLUON_TRACE_FUZZ_VIEWS_SIM_EXAMPLES", "12"))


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
@pytest.mark.parametrize("seed", range(N_VIEWS))
def test_simulated_amdgcn_unaligned_view_programs(target, seed):
    """The views preset (slices from inside swizzle and padding periods, padded views picked by
    a branch at different such starts) on amdsim_races."""
    from gluon_trace.fuzz.presets import preset_config
    warp = 64 if target == "gfx942" else 32
    _check(fuzz.random_program(seed, preset_config("views", warp)), target, f"amdsim_views_{target}_{seed}")


# ------------------------------------------------------------------------------ stacked slot views
N_STACKED = int(os.environ.get("GLUON_TRACE_FUZZ_STACKED_SIM_EXAMPLES", "16"))


def _slot_seeds(n: int, warp: int) -> list:
    """The first ``n`` seeds whose stacked-preset program picks among slot views."""
    from gluon_trace.fuzz.presets import preset_config
    from gluon_trace.fuzz.smem_stacked import draws_slots
    out, seed = [], 0
    while len(out) < n:
        if draws_slots(fuzz.random_program(seed, preset_config("stacked", warp))):
            out.append((seed, warp))
        seed += 1
    return out


@pytest.mark.parametrize("target,seed,warp", [(t, s, w) for t, warp in (("gfx942", 64), ("gfx1100", 32))
                                              for s, w in _slot_seeds(N_STACKED, warp)])
def test_simulated_amdgcn_stacked_slot_view_programs(target, seed, warp):
    """The stacked preset (.index() of slots of stacked buffers made in each branch arm or a
    loop's body at different starts, then viewed after the join; fuzz/smem_stacked.py)."""
    from gluon_trace.fuzz.presets import preset_config
    _check(fuzz.random_program(seed, preset_config("stacked", warp)), target, f"amdsim_stacked_{target}_{seed}")

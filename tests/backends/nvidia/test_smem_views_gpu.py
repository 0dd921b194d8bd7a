"""The shared-memory view tests on the GPU: every test of test_smem_view_refusals.py (views with a
run-time XOR, padded views joined by branches and loops, slices from inside a padding period,
loop-carried padded views), test_smem_swizzled_slices.py (slices from inside a swizzle period),
test_smem_swizzled_joins.py (such slices picked by branches, carried by loops, reshaped) and
test_smem_views_fuzz_found.py (what the fuzzer's views preset found) and
test_smem_stacked_joins.py and test_smem_stacked_fuzz_found.py (slot views from stacked starts
joined by branches and loops) again, with the device in
the PTX simulator's place.

Those tests compare a simulator run with the interpreter's on fresh random inputs and
NaN-poisoned outputs; here ``both`` launches the same graph through the NVIDIA backend
(test_first_week_gpu.gpu_both: arguments copied to the device with their strides and back byte
for byte), and every assertion of the original test applies to the GPU's output. The device
runs sm_90a code, so the sm_80 parametrizations are the sm_90 ones again and are skipped. Needs
an sm_90a GPU (``pytest -m gpu``)."""
import inspect
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
pytest.importorskip("gluon_trace.backends.nvidia")
import test_smem_stacked_fuzz_found as stacked_found_tests  # noqa: E402
import test_smem_stacked_joins as stacked_tests  # noqa: E402
import test_smem_swizzled_joins as join_tests  # noqa: E402
import test_smem_swizzled_slices as swizzled_tests  # noqa: E402
import test_smem_view_refusals as view_tests  # noqa: E402
import test_smem_views_fuzz_found as found_tests  # noqa: E402
from test_first_week_gpu import _on_the_gpu, gpu_both  # noqa: E402,F401  (the fixture, used below)
from test_smem_stacked_fuzz_found import *  # noqa: E402,F401,F403  (the tests, collected here too)
from test_smem_stacked_joins import *  # noqa: E402,F401,F403
from test_smem_swizzled_joins import *  # noqa: E402,F401,F403
from test_smem_swizzled_slices import *  # noqa: E402,F401,F403
from test_smem_view_refusals import *  # noqa: E402,F401,F403
from test_smem_views_fuzz_found import *  # noqa: E402,F401,F403

pytestmark = pytest.mark.gpu


def _on_device(sim_both):
    """The device in place of a test module's simulator runner, with that runner's default warps."""
    warps = inspect.signature(sim_both).parameters["num_warps"].default

    def device_both(kernel, make, target, num_warps=warps, **kw):
        if target == "sm_80":
            pytest.skip("the device runs sm_90a code: the sm_90 parametrization covers this one")
        return gpu_both(kernel, make, (1,), num_warps=num_warps, **kw)
    return device_both


@pytest.fixture(autouse=True)
def _views_on_the_gpu(_on_the_gpu, monkeypatch):
    for module in (view_tests, swizzled_tests, join_tests, found_tests, stacked_tests,
                   stacked_found_tests):
        monkeypatch.setattr(module, "both", _on_device(module.both))

"""The first-week kernels on the GPU: every test of test_first_week_sim.py and
test_first_week_mma_sim.py again, with the Hopper simulator swapped for the device.

Those tests trace a Gluon user's kernels (TMA rings with views rebound in loops and branches,
padded and linear shared layouts, three partitions, persistent aggregates, uint8 and float16-
accumulator wgmma, fp8 mma.sync, maxnreg) and compare the simulator's run with the interpreter's
and numpy's. Here ``both`` launches the same graph through the NVIDIA backend instead: the
numpy arguments go to the device with their strides (a descriptor is rebuilt over the device
copy of its array), come back byte for byte, and every assertion of the original test applies
to the GPU's output unchanged. Needs an sm_90a GPU (``pytest -m gpu``)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
pytest.importorskip("gluon_trace.backends.nvidia")
import test_first_week_mma_sim as mma_tests  # noqa: E402
import test_first_week_sim as sim_tests  # noqa: E402
from test_first_week_mma_sim import *  # noqa: E402,F401,F403  (the tests, collected here too)
from test_first_week_sim import *  # noqa: E402,F401,F403

from gluon_trace.backend import get  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

pytestmark = pytest.mark.gpu


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    assert a.flags.c_contiguous, "an argument's allocation must be contiguous to copy it whole"
    return a


class _Device:
    """Device copies of the arguments' allocations (each once, however many views share it)."""

    def __init__(self):
        import torch
        self.torch = torch
        self.raw = {}   # id(root) -> (root, device bytes)

    def view(self, a: np.ndarray):
        """A device tensor with ``a``'s dtype, shape, strides and offset in its allocation."""
        torch = self.torch
        root = _root(a)
        if id(root) not in self.raw:
            self.raw[id(root)] = (root, torch.from_numpy(root.reshape(-1).view(np.uint8)).cuda())
        raw = self.raw[id(root)][1]
        off = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        item = a.dtype.itemsize
        assert off % item == 0 and all(s % item == 0 for s in a.strides)
        typed = raw.view(getattr(torch, a.dtype.name))
        return typed.as_strided(a.shape, [s // item for s in a.strides], off // item)

    def arg(self, a):
        if isinstance(a, TensorDescriptor):
            return TensorDescriptor(self.view(a.base), a.shape, a.strides, a.block_shape, a.layout, a.padding)
        if isinstance(a, np.ndarray):
            return self.view(a)
        return a

    def copy_back(self):
        self.torch.cuda.synchronize()
        for root, raw in self.raw.values():
            root.reshape(-1).view(np.uint8)[:] = raw.cpu().numpy()


def gpu_both(kernel, make, grid, ws=False, num_warps=4, **kw):
    """test_first_week_sim.both with the GPU for the simulator: (interpreter's args, the
    GPU's args, PTX)."""
    g = kernel.trace(*make(), target="sm_90a", num_warps=num_warps, **kw).graph
    text, _, _ = emit(g, "sm_90a")
    ref, out = make(), make()
    grid3 = tuple(grid) + (1,) * (3 - len(grid))
    get("interpreter").run(g, grid3, ref)
    dev = _Device()
    get("nvidia").run(g, grid3, [dev.arg(a) for a in out])
    dev.copy_back()
    return ref, out, text


@pytest.fixture(autouse=True)
def _on_the_gpu(monkeypatch):
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs an sm_90a GPU (H100/H200)")
    monkeypatch.setattr(sim_tests, "both", gpu_both)
    monkeypatch.setattr(mma_tests, "both", gpu_both)

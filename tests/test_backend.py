"""backend.pick: which backend an argument's memory belongs to. __cuda_array_interface__
alone does not say NVIDIA (CuPy on ROCm, hip-python and numba-hip arrays have it too):
the object's own description decides, then the runtime this machine has, then NVIDIA.
Fake objects and fake device nodes: no GPU is needed."""
import sys
import time
import types

import pytest

from gluon_trace import backend

CAI = {"shape": (4,), "typestr": "<f4", "data": (0, False), "version": 3}


def gpu_array(module="somelib.arrays", **attrs):
    cls = type("DeviceArray", (), {"__cuda_array_interface__": CAI, **attrs})
    cls.__module__ = module
    return cls()


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """machine(nvidia=bool, amd=bool): fake driver device nodes and bindings for the
    probe (an importable module stands for the bindings; a missing one for none)."""
    def make(nvidia=False, amd=False, nvidia_bindings=True, amd_bindings=True):
        runtimes = {}
        for vendor, present, bindings in (("nvidia", nvidia, nvidia_bindings),
                                          ("amd", amd, amd_bindings)):
            node = tmp_path / f"{vendor}-node"
            if present:
                node.write_text("")
            elif node.exists():
                node.unlink()
            runtimes[vendor] = ((str(node),), "json" if bindings else "no_such_module_for_pick")
        monkeypatch.setattr(backend, "_RUNTIMES", runtimes)
        monkeypatch.setattr(backend, "_machine_cache", None)
    yield make
    monkeypatch.setattr(backend, "_machine_cache", None)


def test_plain_arrays_stay_on_the_interpreter():
    import numpy as np
    assert backend.pick([np.zeros(3), 5, 2.0]) == "interpreter"
    assert backend.pick([]) == "interpreter"


@pytest.mark.parametrize("kind, want", [(2, "nvidia"), (13, "nvidia"), (10, "amd"), (11, "amd")])
def test_dlpack_device_decides(machine, kind, want):
    machine(nvidia=want == "amd", amd=want == "nvidia")  # the machine would say the opposite
    a = gpu_array(__dlpack_device__=lambda self: (kind, 0))
    assert backend.pick([a]) == want


def test_cupy_says_whether_it_was_built_for_hip(machine, monkeypatch):
    machine(nvidia=True)
    for is_hip, want in ((True, "amd"), (False, "nvidia")):
        cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(
            runtime=types.SimpleNamespace(is_hip=is_hip)))
        monkeypatch.setitem(sys.modules, "cupy", cupy)
        assert backend.pick([3, gpu_array("cupy._core.core")]) == want


@pytest.mark.parametrize("module", ["hip._util.types", "numba.hip.hipdrv.devicearray"])
def test_hip_modules_are_amd(machine, module):
    machine(nvidia=True)
    assert backend.pick([gpu_array(module)]) == "amd"


def test_a_device_that_names_rocm_is_amd_but_cuda_proves_nothing(machine):
    machine(nvidia=True, amd=True)
    dev = types.SimpleNamespace(platform="rocm")
    assert backend.pick([gpu_array(device=dev)]) == "amd"
    assert backend.pick([gpu_array(device=types.SimpleNamespace(type="cuda"))]) == "nvidia"
    machine(amd=True)  # a hipified library that calls its device "cuda", on a ROCm machine
    assert backend.pick([gpu_array(device=types.SimpleNamespace(type="cuda"))]) == "amd"


@pytest.mark.parametrize("have, want", [
    (dict(amd=True), "amd"),
    (dict(nvidia=True), "nvidia"),
    (dict(nvidia=True, amd=True), "nvidia"),           # both: the default
    (dict(), "nvidia"),                                # neither: the default
    (dict(amd=True, amd_bindings=False), "nvidia"),    # ROCm without hip-python: cannot launch
    (dict(amd=True, nvidia=True, nvidia_bindings=False), "amd"),
])
def test_an_undescribed_array_goes_to_the_runtime_this_machine_has(machine, have, want):
    machine(**have)
    assert backend.pick([gpu_array()]) == want


def test_a_broken_dlpack_device_falls_back(machine):
    machine(amd=True)

    def broken(self):
        raise RuntimeError("no")
    assert backend.pick([gpu_array(__dlpack_device__=broken)]) == "amd"


def test_pick_is_cheap_and_starts_no_gpu_runtime(machine):
    machine(amd=True)
    before = {m for m in sys.modules if m.startswith(("hip", "cuda.bindings.driver", "cupy"))}
    a = gpu_array()
    t0 = time.perf_counter()
    for _ in range(2000):
        assert backend.pick([1, a]) == "amd"
    per_call = (time.perf_counter() - t0) / 2000
    after = {m for m in sys.modules if m.startswith(("hip", "cuda.bindings.driver", "cupy"))}
    assert after == before  # nothing imported, so nothing initialized
    assert per_call < 50e-6, f"pick took {per_call * 1e6:.1f} us a call"


def test_a_tma_descriptor_counts_as_its_tensor():
    import numpy as np

    from gluon_trace import language as gl
    from gluon_trace.nvidia.hopper import TensorDescriptor
    d = TensorDescriptor.from_tensor(np.zeros((64, 64), np.float16), [64, 64],
                                     gl.NVMMASharedLayout.get_default_for([64, 64], gl.float16))
    assert backend.pick([d, 5]) == "interpreter"

    class FakeDesc:
        pass
    FakeDesc.__name__ = "TensorDescriptor"
    f = FakeDesc()
    f.base = gpu_array(__dlpack_device__=lambda self: (2, 0))
    assert backend.pick([f]) == "nvidia"


def test_a_per_configuration_descriptor_counts_as_its_tensor(machine):
    """gv.descriptor(t, ["BM", "BK"]) in a sweep: the GPU tensor decides the backend (it was taken
    for the interpreter, which then refused the CUDA tensor: the H100 sweep's every variant)."""
    from gluon_trace import variants as gv
    machine(nvidia=True)
    assert backend.pick([gv.descriptor(gpu_array(), ["BM", "BK"]), 5]) == "nvidia"

"""The NVIDIA backend: PTX emitted from the traced graph, assembled by ptxas, launched
through cuda-python (``cuda.bindings.driver``).

- ``emit(graph, target)``: PTX text (``.version 8.0``, ``.target sm_80 ... sm_90a``) with
  ``.loc`` directives pointing at the user's lines;
- ``compile(graph, target)``: a CompiledKernel (cubin, registers, shared memory, spills
  from ``ptxas -v``), cached in memory and on disk;
- ``run(graph, grid, args, stream)``: checks the arguments (device, dtype) and launches
  on the device the tensors live on, on torch's current stream unless ``stream=``.
"""
from __future__ import annotations

from gluon_trace.errors import LaunchError

from . import compiler  # noqa: F401  (the compile path loads with the backend, not at a cache hit)
from .ptx import TARGETS


def _rules() -> dict:
    from . import (rules_control, rules_division, rules_elementwise, rules_layout,  # noqa: F401,F811
                   rules_memory, rules_reduce, rules_tensorcore)
    from .emitter import RULES  # noqa: F811
    return RULES


def __getattr__(name):  # RULES loads the emitter on first use: a disk-cache hit never needs it
    if name == "RULES":
        return _rules()
    raise AttributeError(name)


class NvidiaBackend:
    name = "nvidia"
    targets = TARGETS

    @property
    def RULES(self) -> dict:
        return _rules()

    def __init__(self):
        self._launchers: dict = {}
        self._dev_targets: dict = {}

    def threads_per_warp(self, target: str) -> int:
        return 32

    def claims(self, arg) -> bool:
        mod = type(arg).__module__
        if mod.startswith("torch") and hasattr(arg, "device"):
            return arg.device.type == "cuda"
        return hasattr(arg, "__cuda_array_interface__")

    def target_of_device(self, dev: int) -> str:
        t = self._dev_targets.get(dev)
        if t is None:
            from .launcher import driver
            drv = driver()
            cu = drv.cu
            err, d = cu.cuDeviceGet(dev)
            drv.check(err, "cuDeviceGet")
            A = cu.CUdevice_attribute
            _, major = cu.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d)
            _, minor = cu.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d)
            t = f"sm_{major}{minor}"
            if major == 9 and minor == 0:
                t = "sm_90a"  # Hopper's own instructions (wgmma, setmaxnreg) need the a-target
            if t not in TARGETS:
                newest = max((x for x in TARGETS if int(x[3:5]) <= major * 10 + minor), default=None,
                             key=lambda x: int(x[3:5]))
                if newest is None:
                    raise LaunchError(f"device {dev} is {t}; the NVIDIA backend emits for "
                                      f"{', '.join(TARGETS)}")
                t = newest
            self._dev_targets[dev] = t
        return t

    def default_target(self, args) -> str:
        dev = None
        for a in args:
            mod = type(a).__module__
            if mod.startswith("torch") and hasattr(a, "device") and a.device.type == "cuda":
                dev = a.device.index or 0
                break
            d = getattr(getattr(a, "device", None), "id", None)
            if hasattr(a, "__cuda_array_interface__") and d is not None:
                dev = d
                break
        try:
            return self.target_of_device(dev or 0)
        except LaunchError:
            return "sm_90"  # no GPU here: trace for the most common target

    def emit(self, graph, target: str) -> str:
        from .emitter import emit
        return emit(graph, target)[0]

    def compile(self, graph, target: str):
        from .compiler import compile
        return compile(graph, target)

    def launcher(self, graph):
        key = (graph.text, graph.target)
        k = self._launchers.get(key)
        if k is None:
            from .launcher import KernelLauncher
            k = self._launchers[key] = KernelLauncher(graph, self.compile(graph, graph.target))
        return k

    def run(self, graph, grid, args, stream=None, loc=None):
        target = graph.target
        if not target.startswith("sm_"):
            raise LaunchError(f"the graph was traced for {target}, not an NVIDIA target", loc)
        self.launcher(graph).launch(grid, list(args), stream, loc)

    def fast_launcher(self, graph, specs, expected_kwargs):
        """A generated launch function for the jit's hot path (see launcher.KernelLauncher.fast)."""
        return self.launcher(graph).fast(specs, expected_kwargs)


BACKEND = NvidiaBackend()

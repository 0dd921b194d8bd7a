"""The AMD backend: AMDGCN emitted by our own instruction selector and register
allocator, assembled and linked into an HSACO by clang/llvm-mc + ld.lld, launched
through hip-python. Targets gfx90a and gfx942 (CDNA, wave64) and gfx1100 (RDNA3,
wave32)."""
from __future__ import annotations

from gluon_trace.errors import LaunchError

from .rules import RULES
from .target import TARGETS, get_target


class AmdBackend:
    name = "amd"
    targets = tuple(TARGETS)
    RULES = RULES

    def threads_per_warp(self, target: str) -> int:
        return get_target(target).wave

    def default_target(self, args) -> str:
        try:
            from .launcher import runtime
            arch = runtime().arch()
            if arch in TARGETS:
                return arch
        except Exception:  # no ROCm here (LaunchError) or no device: the common CDNA part
            pass
        return "gfx942"

    def claims(self, arg) -> bool:
        if type(arg).__module__.startswith("torch") and hasattr(arg, "device"):
            import torch
            return arg.device.type == "cuda" and bool(getattr(torch.version, "hip", None))
        return False

    def emit(self, graph, target: str) -> str:
        from .compiler import emit_text
        return emit_text(graph, target)

    def compile(self, graph, target: str):
        from .compiler import compile_graph
        return compile_graph(graph, target)

    def run(self, graph, grid, args, stream=None, loc=None):
        from .launcher import runtime
        try:
            rt = runtime()  # fails first, with the reason, when there is no ROCm
        except LaunchError as e:
            raise LaunchError(f"cannot launch {graph.name} on the AMD backend: {e.message}",
                              loc) from None
        ck = self.compile(graph, graph.target)
        rt.launch(ck, graph, grid, args, stream, loc)


BACKEND = AmdBackend()

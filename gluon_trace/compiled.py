"""What a backend's ``compile(graph, target)`` returns: the assembly, the binary and the
resources the assembler reported, shared by every target."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CompiledKernel:
    name: str
    target: str
    asm: str                 # PTX or AMDGCN text
    binary: bytes            # cubin or HSACO
    registers: int = 0       # per thread (VGPRs on AMD)
    shared_bytes: int = 0    # static + backend scratch; dynamic shared memory at launch
    spill_bytes: int = 0     # spill stores (PTX) / scratch bytes (AMD)
    num_warps: int = 4
    threads_per_warp: int = 32
    extra: dict = field(default_factory=dict)  # backend-specific facts (sgprs, ptxas version, ...)
    arg_layout: list = field(default_factory=list)  # per runtime argument: (name, dtype, offset, size)

    def summary(self) -> str:
        lines = [f"kernel {self.name} for {self.target}: {len(self.binary)} bytes of code",
                 f"  registers {self.registers}, shared memory {self.shared_bytes} B, "
                 f"spills {self.spill_bytes} B, {self.num_warps} warps x {self.threads_per_warp}"]
        lines += [f"  {k}: {v}" for k, v in sorted(self.extra.items())]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        return (f"<CompiledKernel {self.name} {self.target}: {self.registers} registers, "
                f"{self.shared_bytes} B shared, {self.spill_bytes} B spilled>")

    def _repr_html_(self) -> str:
        from .display import compiled_html
        return compiled_html(self)

"""What the emitter must know about each AMD target: wave size, syntax that differs
between CDNA (gfx9) and RDNA3 (gfx11), counter limits, and register budgets."""
from __future__ import annotations

from dataclasses import dataclass

from gluon_trace.errors import CompileError, user_location


@dataclass(frozen=True)
class Target:
    name: str
    wave: int
    gfx9: bool          # CDNA (gfx90a, gfx942); False means gfx11 (RDNA3)
    gfx940: bool = False

    # -- syntax ------------------------------------------------------------------------
    @property
    def vcc(self) -> str:
        return "vcc" if self.wave == 64 else "vcc_lo"

    @property
    def exec(self) -> str:
        return "exec" if self.wave == 64 else "exec_lo"

    @property
    def mask_size(self) -> int:
        """SGPRs in one lane mask."""
        return 2 if self.wave == 64 else 1

    @property
    def mask_suffix(self) -> str:
        return "b64" if self.wave == 64 else "b32"

    @property
    def addc(self) -> str:
        return "v_addc_co_u32" if self.gfx9 else "v_add_co_ci_u32"

    @property
    def subb(self) -> str:
        return "v_subb_co_u32" if self.gfx9 else "v_sub_co_ci_u32"

    @property
    def glc(self) -> str:
        """The cache-policy bits of a returning, device-scope atomic: glc returns the old
        value; on gfx940+ sc0 does that and sc1 asks for agent-scope coherence, which
        MI300's per-XCD L2s need for all workgroups to see one value (LLVM's GFX940 memory
        model: atomics "use sc1 to indicate system or agent scope coherence")."""
        return "sc0 sc1" if self.gfx940 else "glc"

    # -- encoding limits -----------------------------------------------------------------
    @property
    def const_bus(self) -> int:
        """Distinct SGPRs/literals one VALU instruction may read."""
        return 1 if self.gfx9 else 2

    @property
    def vop3_literal(self) -> bool:
        return not self.gfx9

    # -- hazards and counters ------------------------------------------------------------
    @property
    def vmcnt_max(self) -> int:
        return 63

    @property
    def lgkmcnt_max(self) -> int:
        return 15 if self.gfx9 else 63

    @property
    def stores_use_vscnt(self) -> bool:
        """gfx10+ count stores (and atomics without return) on their own counter."""
        return not self.gfx9

    # -- register budgets ----------------------------------------------------------------
    def vgpr_limit(self, num_warps: int) -> int:
        """Addressable VGPRs per lane so that a whole workgroup fits on one CU/WGP."""
        per_simd = max(1, -(-num_warps // 4))
        pool = 512 if self.gfx9 else 1536
        return min(256, (pool // per_simd) // 8 * 8)

    @property
    def sgpr_limit(self) -> int:
        # leaves room for vcc and the trap/xnack registers the assembler adds
        return 96 if self.gfx9 else 100

    @property
    def vgpr_granule(self) -> int:
        return 8


TARGETS = {
    "gfx90a": Target("gfx90a", 64, True),
    "gfx942": Target("gfx942", 64, True, gfx940=True),
    "gfx1100": Target("gfx1100", 32, False),
}


def get_target(name: str, loc=None) -> Target:
    t = TARGETS.get(name)
    if t is None:
        raise CompileError(f"unknown AMD target {name!r}; the AMD backend emits for "
                           f"{', '.join(TARGETS)}", loc or user_location())
    return t

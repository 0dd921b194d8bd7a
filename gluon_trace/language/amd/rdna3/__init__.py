"""RDNA3 (gfx1100): WMMA."""
from ...mma import mma
from ...tensor import tensor

__all__ = ["wmma"]


def wmma(a, b, acc) -> tensor:
    """``acc + a @ b`` on v_wmma_f32_16x16x16: acc in gl.amd.AMDWMMALayout, a/b in DotOperandLayout."""
    return mma("wmma", a, b, acc)

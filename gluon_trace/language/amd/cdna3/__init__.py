"""CDNA3 (gfx942): MFMA."""
from ...mma import mma
from ...tensor import tensor

__all__ = ["mfma"]


def mfma(a, b, acc) -> tensor:
    """``acc + a @ b`` on v_mfma: acc in gl.amd.AMDMFMALayout, a/b in DotOperandLayout(0/1, acc.layout)."""
    return mma("mfma", a, b, acc)

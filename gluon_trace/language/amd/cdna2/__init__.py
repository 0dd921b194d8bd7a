"""CDNA2 (gfx90a): MFMA (same op as CDNA3; the target picks the instructions)."""
from ..cdna3 import mfma  # noqa: F401

__all__ = ["mfma"]

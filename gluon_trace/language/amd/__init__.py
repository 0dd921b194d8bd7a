"""AMD-specific layouts and ops (as Gluon's ``gluon.language.amd``)."""
from ...mma_layouts import AMDMFMALayout, AMDWMMALayout  # noqa: F401
from . import cdna2, cdna3, rdna3  # noqa: F401

__all__ = ["AMDMFMALayout", "AMDWMMALayout", "cdna2", "cdna3", "rdna3"]

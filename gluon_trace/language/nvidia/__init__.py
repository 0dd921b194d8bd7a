"""NVIDIA-specific ops, by architecture (as Gluon's ``gluon.language.nvidia``)."""
from . import ampere, hopper  # noqa: F401

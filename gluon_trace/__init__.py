"""gluon_trace: GPU kernels with Gluon's control, captured by tracing Python functions."""
from . import language
from .errors import (ArgumentError, CompileError, GluonTraceError, InterpreterError, LaunchError,
                     LayoutError, TraceError, VerifyError)
from .jit import JITFunction, TracedKernel, jit
from .language.core import aggregate, constexpr_function
from .variants import Config, autotune

__version__ = "0.1.0"

__all__ = ["jit", "JITFunction", "TracedKernel", "language", "GluonTraceError", "TraceError",
           "LayoutError", "ArgumentError", "InterpreterError", "CompileError", "LaunchError",
           "VerifyError", "autotune", "Config", "aggregate", "constexpr_function", "__version__"]

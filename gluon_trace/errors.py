"""Errors that point at the kernel author's source line.

Every op recorded by the tracer carries a :class:`SourceLoc`; every error raised
while tracing, verifying, emitting or interpreting names it, so the message leads
back to the user's Python line rather than into this library.
"""
from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_BACKENDS_DIR = os.path.join(os.path.dirname(_PKG_DIR), "backends")


@dataclass(frozen=True)
class SourceLoc:
    file: str
    line: int
    func: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"

    def source_line(self) -> str:
        return linecache.getline(self.file, self.line).strip()


_KERNEL_FILES = {os.path.join(_PKG_DIR, n) for n in ("__main__.py", "examples.py")}  # library files that hold user-style kernels
_KERNELS_DIR = os.path.join(_PKG_DIR, "kernels") + os.sep  # the shipped example kernels: user code too


_library_file: dict[str, bool] = {}  # per code filename: every traced op asks, for every frame


def _is_library_file(filename: str) -> bool:
    known = _library_file.get(filename)
    if known is not None:
        return known
    path = os.path.abspath(filename)
    known = path not in _KERNEL_FILES and not path.startswith(_KERNELS_DIR) and (
        path.startswith(_PKG_DIR + os.sep) or path.startswith(_BACKENDS_DIR + os.sep)
        or os.sep + "gluon_trace" + os.sep + "backends" + os.sep in path)
    if os.path.isabs(filename):  # a relative name depends on the working directory
        _library_file[filename] = known
    return known


def user_location(depth: int = 1) -> SourceLoc | None:
    """The first frame outside gluon_trace: the line the kernel author wrote."""
    frame = sys._getframe(depth)
    while frame is not None:
        code = frame.f_code
        # dataclass-generated __init__ methods live in "<string>": not the user's code
        generated = code.co_filename == "<string>" and code.co_name == "__init__"
        if not generated and not _is_library_file(code.co_filename):
            return SourceLoc(code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return None


class GluonTraceError(Exception):
    """Base class. ``loc`` is the user's source line the error is about."""

    def __init__(self, message: str, loc: SourceLoc | None = None, *, notes: tuple[str, ...] = ()):
        self.message = message
        self.loc = loc
        self.notes = notes
        super().__init__(self._format())

    def _format(self) -> str:
        if self.loc is None:
            return self.message
        text = f"{self.loc}: {self.message}"
        src = self.loc.source_line()
        if src:
            text += f"\n    {src}"
        for note in self.notes:
            text += f"\n  {note}"
        return text


# Each class a Python user would reach for with a builtin ``except`` also derives from that
# builtin: ``except TypeError`` catches a wrong argument count or type, ``except ValueError``
# a bad value, ``except IndexError`` an out-of-bounds access in the interpreter; the
# library's own bases (GluonTraceError, TraceError, ArgumentError, InterpreterError) still
# catch everything beneath them.

class TraceError(GluonTraceError):
    """Wrong use of the language found while tracing (types, shapes, control flow)."""


class TraceTypeError(TraceError, TypeError):
    """A traced value used where Python needs a type it is not (``len(tile)``)."""


class LayoutError(TraceError):
    """A layout that is invalid, or layouts that don't agree."""


class ArgumentError(GluonTraceError):
    """A kernel called with arguments that don't fit its signature."""


class ArgumentTypeError(ArgumentError, TypeError):
    """Wrong number of arguments, an unknown keyword, or an argument of the wrong type."""


class ArgumentValueError(ArgumentError, ValueError):
    """An argument of the right type with a value the kernel cannot take."""


class VerifyError(GluonTraceError):
    """The IR breaks an invariant (a library bug or a hand-built graph)."""


class InterpreterError(GluonTraceError):
    """A run-time fault in the interpreter."""


class OutOfBoundsError(InterpreterError, IndexError):
    """A load, store or atomic through a pointer outside every argument's memory."""


class CompileError(GluonTraceError):
    """A backend could not lower or assemble the kernel."""


class LaunchError(GluonTraceError):
    """Arguments or device state unfit for a launch, found before launching."""


class LaunchTypeError(LaunchError, TypeError):
    """A launch argument of the wrong kind (a host array, a wrong dtype, a tensor for a scalar)."""


class LaunchValueError(LaunchError, ValueError):
    """A launch argument of the right kind with an unfit value (device, layout, range, grid)."""


def err_loc() -> SourceLoc | None:
    return user_location(2)

"""The C launch path: ``_claunch.c`` built once per machine and Python, loaded on demand.

A launch from generated Python (the fallback in launcher.py) costs 1.35-1.9x a bare
``cuLaunchKernel`` through cuda-python on the H100 (perf/README.md): the argument checks,
the packing and cuda-python's own wrapper are each a few hundred nanoseconds of
interpreted code. The same steps in C cost a small fraction of the driver call. The extension is compiled
with the first C compiler found (``$CC``, cc, gcc, clang, then the ``ziglang`` wheel's
clang) against this Python's headers, into the cache folder, keyed by the source's
hash and the Python ABI; the write is atomic, so processes building it at once are
safe. When nothing can build it the Python fast path is used and :func:`status` says
why. ``GLUON_TRACE_LAUNCH=python`` turns the C path off.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

from gluon_trace.cache import cache_dir

SOURCE = Path(__file__).with_name("_claunch.c")
KINDS = {"ptr": 0, "i32": 1, "i64": 2, "f32": 3, "f64": 4, "bool": 5, "desc": 6}
STAGING = 2048  # parameter bytes a launch stages (_claunch.c); a kernel with more takes the Python path

_lock = threading.Lock()
_module = None
_status = "not built yet"


def status() -> str:
    """Why the C launch path is or is not in use."""
    return _status


def _compilers() -> list[list[str]]:
    found = []
    if os.environ.get("CC"):
        found.append(os.environ["CC"].split())
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            found.append([path])
    if importlib.util.find_spec("ziglang") is not None:
        found.append([sys.executable, "-m", "ziglang", "cc"])
    return found


def _target() -> Path:
    src = SOURCE.read_bytes()
    tag = hashlib.sha256(src + sys.version.encode() + (sysconfig.get_config_var("EXT_SUFFIX") or "").encode())
    return cache_dir() / "claunch" / f"_claunch-{tag.hexdigest()[:16]}{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"


def _build(out: Path) -> str | None:
    """Compile into ``out``; None on success, else what went wrong."""
    include = sysconfig.get_paths().get("include")
    if not include or not Path(include, "Python.h").exists():
        return f"this Python's headers (Python.h) are not installed (looked in {include})"
    out.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for cc in _compilers():
        fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=".tmp-", suffix=".so")
        os.close(fd)
        cmd = cc + ["-O2", "-shared", "-fPIC", "-I", include, str(SOURCE), "-o", tmp]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            errors.append(f"{' '.join(cc)}: {e}")
            os.unlink(tmp)
            continue
        if r.returncode == 0:
            os.replace(tmp, out)
            return None
        os.unlink(tmp)
        lines = (r.stderr or r.stdout).strip().splitlines()
        first = next((ln for ln in lines if "error" in ln), lines[-1] if lines else f"exit {r.returncode}")
        errors.append(f"{' '.join(cc)}: {first.strip()}")
    return "no C compiler could build it: " + ("; ".join(errors) if errors else "none found (install gcc)")


def load():
    """The compiled extension module, or None (see :func:`status`)."""
    global _module, _status
    if _module is not None or _status != "not built yet":
        return _module
    with _lock:
        if _module is not None or _status != "not built yet":
            return _module
        if os.environ.get("GLUON_TRACE_LAUNCH", "c") == "python":
            _status = "off: GLUON_TRACE_LAUNCH=python"
            return None
        try:
            path = _target()
            if not path.exists():
                why = _build(path)
                if why is not None:
                    _status = "off: " + why
                    return None
            loader = importlib.machinery.ExtensionFileLoader("_claunch", str(path))
            spec = importlib.util.spec_from_file_location("_claunch", str(path), loader=loader)
            mod = importlib.util.module_from_spec(spec)
            loader.exec_module(mod)
        except Exception as e:  # a broken cache entry or toolchain must not stop launches
            _status = f"off: could not load the C launch path ({type(e).__name__}: {e})"
            return None
        _module, _status = mod, f"on: {path}"
        return mod


def reset() -> None:
    """Forget the loaded module's state and its kernel[grid] dispatcher (tests, benchmarks)."""
    global _module, _status
    from gluon_trace import backend
    backend.set_dispatch_factory(None)
    _module, _status = None, "not built yet"

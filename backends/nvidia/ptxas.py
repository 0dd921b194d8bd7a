"""Finding and running ptxas.

Where ptxas is looked for, in order: ``$GLUON_TRACE_PTXAS``; the ``nvidia-cuda-nvcc``
wheel through ``cuda.pathfinder`` (which also knows CUDA_HOME and system installs);
``$CUDA_HOME/bin`` / ``$CUDA_PATH/bin``; ``PATH``. The path and version found are
remembered in the cache folder (checked against the file's size and mtime and the
environment that chose it), so a process that only hits the disk cache neither
imports cuda.pathfinder (60 ms) nor runs ``ptxas --version``.
"""
from __future__ import annotations

import json
import os
import re
import sys

from gluon_trace.errors import CompileError

ENV = "GLUON_TRACE_PTXAS"
INSTALL_HINT = ("install it with `pip install gluon-trace[cuda]` (the nvidia-cuda-nvcc wheel ships ptxas), "
                f"or point ${ENV} (or CUDA_HOME) at a CUDA toolkit")

_found: tuple[str, str] | None = None


def _env_key() -> dict:
    return {k: os.environ.get(k, "") for k in (ENV, "CUDA_HOME", "CUDA_PATH", "PATH")} | {"prefix": sys.prefix}


def _stat(path: str):
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns]


def find_path() -> str:
    env = os.environ.get(ENV)
    if env:
        if not os.path.isfile(env):
            raise CompileError(f"${ENV} is set to {env!r}, which is not a file; {INSTALL_HINT}")
        return env
    try:
        from cuda import pathfinder
        p = pathfinder.find_nvidia_binary_utility("ptxas")
        if p:
            return p
    except Exception:
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root and os.path.isfile(os.path.join(root, "bin", "ptxas")):
            return os.path.join(root, "bin", "ptxas")
    import shutil
    p = shutil.which("ptxas")
    if p:
        return p
    raise CompileError(f"ptxas (NVIDIA's PTX assembler) was not found; {INSTALL_HINT}")


def _version(path: str) -> str:
    import subprocess
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except OSError as e:
        raise CompileError(f"could not run ptxas at {path}: {e}; {INSTALL_HINT}") from None
    m = re.search(r"V(\d+\.\d+\.\d+)", out) or re.search(r"release (\d+\.\d+)", out)
    if not m:
        raise CompileError(f"{path} --version printed no version:\n{out}")
    return m.group(1)


def locate() -> tuple[str, str]:
    """(path, version) of the ptxas to use."""
    global _found
    if _found is not None:
        return _found
    from gluon_trace.cache import cache_dir
    record = cache_dir() / "ptxas.json"
    env = _env_key()
    try:
        r = json.loads(record.read_text())
        if r["env"] == env and _stat(r["path"]) == r["stat"]:
            _found = (r["path"], r["version"])
            return _found
    except (OSError, ValueError, KeyError, TypeError):
        pass
    path = find_path()
    _found = (path, _version(path))
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp = record.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"env": env, "path": path, "stat": _stat(path), "version": _found[1]}))
        os.replace(tmp, record)
    except OSError:
        pass
    return _found


# ptxas 12.6 to 13.3 fold two dependent integer min/max into one three-input VIMNMX3 on sm_90
# and later and can lose a negation feeding it: perf/probe_minmax3.py's random min/max trees,
# on an H200, were wrong in 122 of the 545 that 13.0.88 folded and in none of 13.5.37's 545.
# For every tree 13.0.88 got wrong, 12.6 to 13.3 emit its SASS and 13.4 emits 13.5.37's; 12.4
# emits other SASS for some (unchecked on a GPU), so versions before 13.4 all count as affected.
MINMAX3_FIXED = (13, 4)


def minmax3_affected(target: str) -> bool:
    """Whether integer min/max must be written so that this ptxas cannot fold them (into VIMNMX3)."""
    m = re.match(r"sm_(\d+)", target)
    if m is None or not 90 <= int(m.group(1)) < 120:  # sm_120 has no VIMNMX3
        return False
    try:
        _, version = locate()
    except CompileError:  # no ptxas here: the PTX is assembled elsewhere, by one we cannot see
        return True
    v = re.match(r"(\d+)\.(\d+)", version)
    return v is None or (int(v.group(1)), int(v.group(2))) < MINMAX3_FIXED


def _loc_of(line: int, line_locs: dict):
    best = None
    for ln in sorted(line_locs):
        if ln > line:
            break
        best = line_locs[ln]
    return best


_INFO = {
    "registers": r"Used (\d+) registers",
    "spill_stores": r"(\d+) bytes spill stores",
    "spill_loads": r"(\d+) bytes spill loads",
    "stack": r"(\d+) bytes stack frame",
    "static_smem": r"(\d+) bytes smem",
}


def assemble(ptx: str, target: str, line_locs: dict | None = None, kernel: str = "",
             options: tuple = ()) -> tuple[bytes, dict]:
    """(cubin, facts from ``ptxas -v``); a ptxas error becomes a CompileError at the user's line.
    ``options`` go to ptxas before the file (e.g. ``("-O1",)``)."""
    import subprocess
    import tempfile
    path, version = locate()
    with tempfile.TemporaryDirectory(prefix="gluon_trace_") as d:
        src = os.path.join(d, f"{kernel or 'kernel'}.ptx")
        out = os.path.join(d, "kernel.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        cmd = [path, f"-arch={target}", "-v", "-lineinfo", *options, src, "-o", out]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except OSError as e:
            raise CompileError(f"could not run ptxas at {path}: {e}; {INSTALL_HINT}") from None
        log = p.stdout + p.stderr
        if p.returncode != 0:
            m = re.search(r"line (\d+); error\s*:\s*(.*)", log)
            loc = _loc_of(int(m.group(1)), line_locs or {}) if m else None
            what = m.group(2).strip() if m else log.strip()
            text = ptx.splitlines()
            ptx_line = f"\n    PTX line {m.group(1)}: {text[int(m.group(1)) - 1].strip()}" if m and int(m.group(1)) <= len(text) else ""
            raise CompileError(f"ptxas {version} rejected the PTX emitted for {target}: {what}{ptx_line}", loc)
        with open(out, "rb") as f:
            cubin = f.read()
    info = {"ptxas_version": version, "log": log.strip()}
    for k, rx in _INFO.items():
        m = re.search(rx, log)
        info[k] = int(m.group(1)) if m else 0
    return cubin, info

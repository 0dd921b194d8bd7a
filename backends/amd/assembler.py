"""Finding an AMDGPU assembler and linker, and turning AMDGCN text into an HSACO.

Searched in this order: $GLUON_TRACE_AMD_CLANG (a clang or llvm-mc) with
$GLUON_TRACE_AMD_LLD; ROCm's /opt/rocm/llvm/bin (or $ROCM_PATH); a clang/llvm-mc and
ld.lld on PATH of LLVM >= 19 (gfx942 needs it); the ziglang wheel's clang and ld.lld.
Assembler errors are reported at the kernel author's line: the emitted text carries
``; file:line`` comments, and the error's line number is mapped back through them.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from gluon_trace.errors import CompileError, SourceLoc

MIN_LLVM = 19
INSTALL_HINT = ("no AMDGPU assembler found: `pip install gluon-trace[amd]` (brings the ziglang "
                "wheel's clang and ld.lld), or install ROCm, or point GLUON_TRACE_AMD_CLANG and "
                "GLUON_TRACE_AMD_LLD at an LLVM >= 19 clang/llvm-mc and ld.lld")


@dataclass(frozen=True)
class Toolchain:
    assembler: tuple      # argv prefix
    linker: tuple
    kind: str             # "clang" or "llvm-mc"
    version: str
    origin: str

    def assemble_argv(self, target: str, src: str, obj: str) -> list:
        if self.kind == "llvm-mc":
            return [*self.assembler, "-triple=amdgcn-amd-amdhsa", f"-mcpu={target}",
                    "-filetype=obj", src, "-o", obj]
        return [*self.assembler, "-x", "assembler", "-target", "amdgcn-amd-amdhsa",
                f"-mcpu={target}", "-c", src, "-o", obj]


def _version(argv) -> tuple[int, str] | None:
    try:
        out = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(?:clang|LLVM) version (\d+)[\d.]*", out.stdout + out.stderr)
    if not m:
        return None
    return int(m.group(1)), m.group(0)


def _kind(path: str) -> str:
    return "llvm-mc" if "llvm-mc" in os.path.basename(path) else "clang"


def _candidate(asm, lld, origin, check_version=True):
    v = _version(asm)
    if v is None:
        return None
    if check_version and v[0] < MIN_LLVM:
        return None
    return Toolchain(tuple(asm), tuple(lld), _kind(asm[-1] if asm[0] != sys.executable else "clang"),
                     v[1], origin)


@functools.lru_cache(maxsize=1)
def find_toolchain() -> Toolchain:
    env_asm = os.environ.get("GLUON_TRACE_AMD_CLANG")
    if env_asm:
        lld = os.environ.get("GLUON_TRACE_AMD_LLD") or shutil.which("ld.lld") or \
            os.path.join(os.path.dirname(env_asm), "ld.lld")
        tc = _candidate([env_asm], [lld], "GLUON_TRACE_AMD_CLANG", check_version=False)
        if tc is None:
            raise CompileError(f"GLUON_TRACE_AMD_CLANG={env_asm!r} does not run (`--version` failed)")
        return tc
    roots = [os.environ.get("ROCM_PATH", ""), "/opt/rocm"]
    for root in roots:
        if not root:
            continue
        b = os.path.join(root, "llvm", "bin")
        if os.path.exists(os.path.join(b, "clang")) and os.path.exists(os.path.join(b, "ld.lld")):
            tc = _candidate([os.path.join(b, "clang")], [os.path.join(b, "ld.lld")], f"ROCm ({root})")
            if tc:
                return tc
    lld = next((p for p in (shutil.which(n) for n in ["ld.lld"] + [f"ld.lld-{v}" for v in
               range(30, MIN_LLVM - 1, -1)]) if p), None)
    if lld:
        for name in ["clang"] + [f"clang-{v}" for v in range(30, MIN_LLVM - 1, -1)] + \
                ["llvm-mc"] + [f"llvm-mc-{v}" for v in range(30, MIN_LLVM - 1, -1)]:
            p = shutil.which(name)
            if p:
                tc = _candidate([p], [lld], "system LLVM")
                if tc:
                    return tc
    if importlib.util.find_spec("ziglang") is not None:
        tc = _candidate([sys.executable, "-m", "ziglang", "clang"],
                        [sys.executable, "-m", "ziglang", "ld.lld"], "ziglang wheel")
        if tc:
            return tc
    raise CompileError(INSTALL_HINT)


def _map_error(stderr: str, src_name: str, text: str) -> tuple[str, SourceLoc | None]:
    """The first assembler error, and the user line the failing instruction came from."""
    lines = text.splitlines()
    m = re.search(re.escape(src_name) + r":(\d+):\d+: error: (.*)", stderr)
    if not m:
        return stderr.strip()[-2000:], None
    n = int(m.group(1))
    inst = lines[n - 1].strip() if 0 < n <= len(lines) else ""
    loc = None
    for k in range(n - 1, -1, -1):
        c = re.search(r"; loc (.+):(\d+)$", lines[k])
        if c:
            loc = SourceLoc(c.group(1), int(c.group(2)))
            break
    return f"{m.group(2)}\n    in `{inst}` (line {n} of the emitted assembly)", loc


def assemble(text: str, target: str, kernel: str) -> bytes:
    tc = find_toolchain()
    with tempfile.TemporaryDirectory(prefix="gluon_trace_amd_") as d:
        src, obj, out = (os.path.join(d, f"{kernel}.{e}") for e in ("s", "o", "hsaco"))
        with open(src, "w") as f:
            f.write(text)
        r = subprocess.run(tc.assemble_argv(target, src, obj), capture_output=True, text=True)
        if r.returncode != 0:
            msg, loc = _map_error(r.stderr, os.path.basename(src), text)
            raise CompileError(f"the AMDGPU assembler ({tc.origin}, {tc.version}) rejected kernel "
                               f"{kernel} for {target}: {msg}", loc)
        r = subprocess.run([*tc.linker, "-shared", obj, "-o", out], capture_output=True, text=True)
        if r.returncode != 0:
            raise CompileError(f"ld.lld ({tc.origin}) failed on kernel {kernel}: {r.stderr.strip()}")
        with open(out, "rb") as f:
            return f.read()

"""Assemble many emitted kernels with few ptxas runs: kernels are merged into one PTX
module per chunk (entries and module symbols renamed apart), chunks run in parallel,
and a chunk that fails is retried kernel by kernel so the error names its kernel."""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor

from gluon_trace.backends.nvidia import ptxas
from gluon_trace.backends.nvidia.ptx import PTX_VERSION

_SMEM = ".extern .shared .align 16 .b8 gt_smem[];"
_VPRINTF = re.compile(r"\.extern \.func \(\.param \.b32 func_retval0\) vprintf\s*\([^)]*\)\s*;", re.S)


def _split(ptx: str, i: int) -> tuple[str, str, bool, bool]:
    """(module-scope decls, the entry function) of one kernel's PTX, renamed apart as k{i}."""
    name = re.search(r"\.visible \.entry (\w+)\(", ptx).group(1)
    head, func = ptx.split(".visible .entry", 1)
    head = head.split(".address_size 64", 1)[1]
    has_printf = bool(_VPRINTF.search(head))
    head = _VPRINTF.sub("", head)
    has_smem = _SMEM in head
    head = "\n".join(ln for ln in head.replace(_SMEM, "").splitlines()
                     if ln.strip() and not ln.startswith(".file") and not ln.startswith("//"))
    func = ".visible .entry" + func
    func = "\n".join(ln for ln in func.splitlines() if not ln.strip().startswith(".loc "))
    func = func.replace(f".entry {name}(", f".entry k{i}(")
    func = re.sub(rf"\b{re.escape(name)}_param_", f"k{i}_param_", func)
    head, func = (re.sub(r"\bgt_fmt_", f"gt_fmt_{i}_", x) for x in (head, func))
    return head, func, has_smem, has_printf


def _module(ptxs: list[tuple[int, str]], target: str) -> str:
    heads, funcs, smem, printf = [], [], False, False
    version = max((tuple(int(x) for x in m.group(1).split("."))
                   for _, p in ptxs for m in [re.search(r"^\.version (\d+\.\d+)", p, re.M)] if m),
                  default=tuple(int(x) for x in PTX_VERSION.split(".")))
    for i, p in ptxs:
        h, f, s, pr = _split(p, i)
        heads.append(h)
        funcs.append(f)
        smem |= s
        printf |= pr
    out = [f".version {version[0]}.{version[1]}", f".target {target}", ".address_size 64"]  # the newest any needs
    if smem:
        out.append(_SMEM)
    if printf:
        out.append(".extern .func (.param .b32 func_retval0) vprintf\n(\n\t.param .b64 vprintf_param_0,\n"
                   "\t.param .b64 vprintf_param_1\n);")
    return "\n".join(out + heads + funcs) + "\n"


def _run(text: str, target: str) -> tuple[int, str]:
    path, _ = ptxas.locate()
    with tempfile.TemporaryDirectory(prefix="gt_batch_") as d:
        src = os.path.join(d, "m.ptx")
        with open(src, "w") as f:
            f.write(text)
        p = subprocess.run([path, f"-arch={target}", "-v", src, "-o", os.path.join(d, "m.cubin")],
                           capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def spills(log: str) -> dict[int, int]:
    """{kernel index: spill-store bytes} from a ptxas -v log."""
    out, cur = {}, None
    for ln in log.splitlines():
        m = re.search(r"Function properties for k(\d+)", ln)
        if m:
            cur = int(m.group(1))
        m = re.search(r"(\d+) bytes spill stores", ln)
        if m and cur is not None:
            out[cur] = int(m.group(1))
    return out


def assemble_many(ptxs: list[str], target: str, chunk: int = 40) -> tuple[dict[int, str], dict[int, int]]:
    """({kernel index: ptxas error}, {kernel index: spill bytes}) for ``ptxs``."""
    chunks = [list(enumerate(ptxs))[i:i + chunk] for i in range(0, len(ptxs), chunk)]
    errors, spilled = {}, {}

    def work(ch):
        rc, log = _run(_module(ch, target), target)
        if rc == 0:
            return {}, spills(log)
        errs, sp = {}, {}
        for i, p in ch:  # find the culprits one by one
            rc1, log1 = _run(_module([(i, p)], target), target)
            if rc1:
                errs[i] = log1.strip()
            else:
                sp.update(spills(log1))
        return errs, sp
    with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as ex:
        for e, s in ex.map(work, chunks):
            errors.update(e)
            spilled.update(s)
    return errors, spilled

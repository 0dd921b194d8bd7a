"""Every kernel traced anywhere in this test session, emitted for the AMD targets and
assembled (one module per target): the whole test suite doubles as a corpus for the
AMD emitter. Wave32 graphs go to gfx1100 as they are; every kernel is traced again
for gfx942 (wave64), where the ones that hard-code 32 lanes are skipped. Kernels the
backend refuses on purpose (a CompileError naming the user's line) are listed."""
import dataclasses
import os
import re
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import AMD_TRACED  # noqa: E402

from gluon_trace.errors import CompileError, GluonTraceError  # noqa: E402


def _graphs(target):
    seen = set()
    for graph, fn, bound, options in AMD_TRACED:
        if graph.target == target or (target == "gfx1100" and graph.threads_per_warp == 32):
            g = graph
        elif target == "gfx942":
            try:
                g = fn._trace(bound, {**options, "target": target}, None).graph
            except GluonTraceError:
                continue  # written for 32 lanes
        else:
            continue
        key = re.sub(r" target=\S+", "", g.text)  # the same kernel traced for another target
        if key in seen:
            continue
        seen.add(key)
        yield g


@pytest.mark.parametrize("target", ["gfx1100", "gfx942"])
def test_every_traced_kernel_assembles_for_amd(target):
    from gluon_trace.backends.amd.assembler import find_toolchain
    from gluon_trace.backends.amd.compiler import lower, module_text
    try:
        tc = find_toolchain()
    except CompileError as e:
        pytest.skip(str(e))
    parts, names, refused = [], [], []
    for k, g in enumerate(_graphs(target)):
        g = dataclasses.replace(g, name=f"{g.name}_{k}")
        try:
            parts.append(lower(g, target).kernel)
            names.append(g.name)
        except CompileError as e:
            assert e.loc is not None, f"{g.name}: a CompileError without the user's line: {e}"
            refused.append(f"{g.name}: {e.message.splitlines()[0][:150]}")
    if not parts:
        pytest.skip("no kernel was traced in this session")
    text = module_text(target, parts)
    with tempfile.TemporaryDirectory() as d:
        src, obj = os.path.join(d, "all.s"), os.path.join(d, "all.o")
        with open(src, "w") as f:
            f.write(text)
        r = subprocess.run(tc.assemble_argv(target, src, obj), capture_output=True, text=True)
        if r.returncode:
            lines = text.splitlines()
            msgs = []
            for m in re.finditer(r"all\.s:(\d+):\d+: error: (.*)", r.stderr):
                n = int(m.group(1))
                owner = next((ln[:-1] for ln in reversed(lines[:n]) if ln.endswith(":") and
                              not ln.startswith((" ", "."))), "?")
                msgs.append(f"{owner}: {m.group(2)}: `{lines[n - 1].strip()}`")
            pytest.fail("\n".join(msgs[:30]) or r.stderr[-3000:])
        r = subprocess.run([*tc.linker, "-shared", obj, "-o", os.path.join(d, "all.hsaco")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    print(f"\n{len(parts)} traced kernels assembled and linked for {target}; "
          f"{len(refused)} refused:\n  " + "\n  ".join(refused))

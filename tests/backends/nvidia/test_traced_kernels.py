"""Every kernel traced anywhere in this test session, emitted for sm_90 and assembled by
ptxas: the whole test suite doubles as a corpus for the NVIDIA emitter (runs last; see
conftest.py). Kernels the NVIDIA backend refuses on purpose (a CompileError that names
the user's line) are listed, not failed."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import TRACED  # noqa: E402

from gluon_trace.errors import CompileError  # noqa: E402

nvidia = pytest.importorskip("gluon_trace.backends.nvidia")


def test_every_traced_kernel_assembles():
    from gluon_trace.backends.nvidia import ptxas
    from gluon_trace.backends.nvidia.emitter import emit
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(str(e))
    from batch import assemble_many
    seen, ptxs, names, refused = set(), [], [], []
    for g in TRACED:
        if g.hash in seen:
            continue
        seen.add(g.hash)
        try:
            ptxs.append(emit(g, "sm_90")[0])
            names.append(f"{g.name} ({g.hash[:8]})")
        except CompileError as e:
            assert e.loc is not None, f"{g.name}: a CompileError without the user's line: {e}"
            refused.append(f"{g.name}: {e.message}")
    if not ptxs:
        pytest.skip("no kernel was traced in this session")
    errors, _ = assemble_many(ptxs, "sm_90")
    assert not errors, "\n".join(f"{names[i]}: {e}" for i, e in errors.items())
    print(f"\n{len(ptxs)} traced kernels assembled for sm_90; {len(refused)} refused:\n  " + "\n  ".join(refused))

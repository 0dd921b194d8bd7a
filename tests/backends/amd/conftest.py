"""Record every kernel the test session traces (with what it was traced from), so
test_amd_traced_kernels.py can emit and assemble each one for the AMD targets at the
end of the session: the whole test suite doubles as a corpus for the AMD emitter."""
import pytest

import gluon_trace as gt
from gluon_trace.backends.amd.assembler import find_toolchain
from gluon_trace.jit import JITFunction

AMD_TRACED: list = []  # (graph, JITFunction, bound arguments, options)
_build = JITFunction._build


def _recording_build(self, bound, options, key, loc):
    graph = _build(self, bound, options, key, loc)
    AMD_TRACED.append((graph, self, bound, dict(options)))
    return graph


JITFunction._build = _recording_build


def pytest_collection_modifyitems(session, config, items):
    """The check of every traced kernel runs last, after all other tests traced theirs."""
    last = [it for it in items if "test_every_traced_kernel" in it.nodeid]
    items[:] = [it for it in items if it not in last] + last


@pytest.fixture
def amd_toolchain(tmp_path_factory, monkeypatch):
    """A fresh binary cache for the session's AMD builds; skip (with why) without an assembler.
    CI asserts the assembler is present (tests/test_toolchain.py), so nothing skips there."""
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "amd-cache"))
    try:
        find_toolchain()
    except gt.CompileError as e:
        pytest.skip(str(e))

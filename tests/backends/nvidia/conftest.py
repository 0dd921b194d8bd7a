"""Record every kernel graph the test session traces, so test_traced_kernels.py can emit
and assemble each one for NVIDIA at the end of the session (CI has ptxas, not a GPU)."""
from gluon_trace.jit import JITFunction

TRACED: list = []
_build = JITFunction._build


def _recording_build(self, bound, options, key, loc):
    graph = _build(self, bound, options, key, loc)
    if graph.threads_per_warp == 32:
        TRACED.append(graph)
    return graph


JITFunction._build = _recording_build


def pytest_collection_modifyitems(session, config, items):
    """The check of every traced kernel runs last, after all other tests traced theirs."""
    last = [it for it in items if "test_every_traced_kernel" in it.nodeid]
    items[:] = [it for it in items if it not in last] + last

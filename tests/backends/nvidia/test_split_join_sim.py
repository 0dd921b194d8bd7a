"""gl.split / gl.join over random legal layouts on the PTX simulator against the
interpreter (itself checked against numpy), and assembled by ptxas."""
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
import ptxsim  # noqa: E402
import split_join_cases as S  # noqa: E402

from gluon_trace import language as gl  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia import ptxas  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from gluon_trace.errors import CompileError  # noqa: E402
from batch import assemble_many  # noqa: E402

EXAMPLES = int(os.environ.get("GLUON_TRACE_LAYOUT_EXAMPLES", "25"))


def simulate(case, seed=0, target="sm_90"):
    ref = S.reference(case, seed)
    args, cx = S.launch_args(case, seed)
    graph = S.split_join_kernel.trace(*args, **cx, num_warps=case[2], target=target).graph
    text, _, smem = emit(graph, target)
    ptxsim.run(text, (1, 1, 1), args, smem)
    for got, want in zip(args[:3], ref):
        np.testing.assert_array_equal(got, want, err_msg=f"{case}")
    return text


def test_matches_interpreter_and_assembles():
    texts = []

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 25,
              suppress_health_check=list(HealthCheck))
    @given(S.cases(lanes_log=5))
    def check(case):
        texts.append(simulate(case))
    check()
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(f"no ptxas here: {e}")
    errors, _ = assemble_many(texts, "sm_90a")
    assert not errors, "\n".join(list(errors.values())[:3])


def test_last_dimension_in_registers_moves_no_data():
    """Split and join of a dimension a thread holds whole are register renamings: the only
    shared memory is none, and no shuffles."""
    text = simulate((gl.BlockedLayout([1, 2], [32, 1], [2, 1], [1, 0]), (64, 2), 2, np.float32))
    assert "st.shared" not in text and "shfl" not in text


def test_last_dimension_across_lanes_is_exchanged():
    simulate((gl.BlockedLayout([1, 1], [16, 2], [1, 2], [1, 0]), (16, 2), 2, np.int32))
    simulate((gl.BlockedLayout([2, 1], [32, 1], [1, 2], [0, 1]), (64, 2), 2, np.float32))


@pytest.mark.gpu
def test_gpu_matches_interpreter():
    """The same random layouts launched on the GPU (outputs start at -99) against the interpreter."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
        pytest.skip("torch sees no NVIDIA GPU")

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(S.cases(lanes_log=5))
    def check(case):
        ref = S.reference(case, seed=3)
        args, cx = S.launch_args(case, seed=3)
        dev = [torch.from_numpy(a).cuda() for a in args]
        S.split_join_kernel[(1,)](*dev, **cx, num_warps=case[2], backend="nvidia")
        torch.cuda.synchronize()
        for got, want in zip(dev[:3], ref):
            np.testing.assert_array_equal(got.cpu().numpy(), want, err_msg=f"{case}")
    check()

"""perf/probe_timeline.py without a GPU: its instrumented cluster GEMM (clusters of one and
pairs sharing A) on the interpreter against numpy, each CTA's readings in order; and its PTX
assembled at the skinny shape it times on the GPU."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "perf"))
import probe_timeline  # noqa: E402

from gluon_trace import language as gl  # noqa: E402


def test_the_timed_kernels_compute_c_on_the_interpreter():
    assert probe_timeline.on_interpreter()


@pytest.mark.parametrize("ctas", [1, 2])
def test_the_timed_kernels_assemble(ctas):
    nvidia = pytest.importorskip("gluon_trace.backends.nvidia.ptxas")
    try:
        nvidia.locate()
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"ptxas not found: {e}")
    m, n, k = 128, 8192, 8192
    a, b, c = np.zeros((m, k), np.float16), np.zeros((k, n), np.float16), np.zeros((m, n), np.float16)
    d = probe_timeline.descriptors(a, b, c, 128, 64, 64, ctas, ctas > 1, gl.bfloat16)
    ck = probe_timeline.timed_cluster_ws.trace(*d, gl.pointer(gl.int64), m, n, k, STAGES=8, GROUP_M=8,
                                               SHARE_A=ctas > 1, num_warps=4, num_ctas=ctas,
                                               target="sm_90a").compile("sm_90a")
    assert ck.spill_bytes == 0 and ck.asm.count("%globaltimer;") == 8 and ck.asm.count("%clock64;") == 2

"""int1 atomics in the simulator against the interpreter: a CAS loop on the byte's word
(found by the AMD atomics tests' kernels, which ptxas refused: the loop's result register
was cleared with a 32-bit move into a predicate)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402


@gt.jit
def bool_atomics(old_ptr, buf_ptr, val_ptr, cmp_ptr, KIND: gl.constexpr):
    i = gl.arange(0, 128, layout=gl.BlockedLayout([1], [32], [4], [0]))
    v = gl.load(val_ptr + i)
    if KIND == "cas":
        old = gl.atomic_cas(buf_ptr + i, gl.load(cmp_ptr + i), v)
    else:
        fn = {"and": gl.atomic_and, "or": gl.atomic_or, "xor": gl.atomic_xor, "xchg": gl.atomic_xchg,
              "max": gl.atomic_max, "min": gl.atomic_min, "add": gl.atomic_add}[KIND]
        old = fn(buf_ptr + i, v, mask=(i % 5) != 0)
    gl.store(old_ptr + i, old)


@pytest.mark.parametrize("kind", ["and", "or", "xor", "xchg", "max", "min", "add", "cas"])
def test_bool_atomics_match_the_interpreter(kind):
    rng = np.random.default_rng()
    P = gl.pointer(gl.int1)
    graph = bool_atomics.trace(P, P, P, P, KIND=kind, target="sm_90").graph
    text, _, smem = emit(graph, "sm_90")
    buf, val, cmp = (rng.random(128) < 0.5 for _ in range(3))
    ref = [np.ones(128, bool), buf.copy(), val, cmp]
    sim = [np.ones(128, bool), buf.copy(), val, cmp]
    get("interpreter").run(graph, (1, 1, 1), ref)
    ptxsim.run(text, (1, 1, 1), sim, smem)
    np.testing.assert_array_equal(sim[1], ref[1])
    np.testing.assert_array_equal(sim[0], ref[0])

"""A cached trace is dropped when a global it read is rebound: a helper redefined (as a
notebook cell re-run does), a helper's helper, a module-level constant; re-running an
unchanged definition of a constant keeps the trace."""
import numpy as np

import gluon_trace as gt

SOURCE = '''
import gluon_trace as gt
from gluon_trace import language as gl

L = gl.BlockedLayout([1], [32], [1], [0])
SCALE = 2.0

def inner(x):
    return x + 1.0

def helper(x):
    return inner(x) * SCALE

@gt.jit
def kernel(out, x):
    o = gl.arange(0, 32, layout=L)
    gl.store(out + o, helper(gl.load(x + o)))
'''


def _run(ns):
    x = np.arange(32, dtype=np.float32)
    out = np.full(32, np.nan, np.float32)
    ns["kernel"][(1,)](out, x, num_warps=1, backend="interpreter")
    return out, x


def test_a_redefined_helper_is_traced_again():
    ns = {}
    exec(SOURCE, ns)
    out, x = _run(ns)
    np.testing.assert_array_equal(out, (x + 1) * 2)
    exec("def helper(x):\n    return inner(x) * 3.0\n", ns)  # the notebook cell re-run
    out, x = _run(ns)
    np.testing.assert_array_equal(out, (x + 1) * 3)


def test_a_helpers_helper_and_a_constant_are_followed():
    ns = {}
    exec(SOURCE, ns)
    _run(ns)
    exec("def inner(x):\n    return x - 1.0\n", ns)
    out, x = _run(ns)
    np.testing.assert_array_equal(out, (x - 1) * 2)
    ns["SCALE"] = 5.0
    out, x = _run(ns)
    np.testing.assert_array_equal(out, (x - 1) * 5)


def test_an_unchanged_constant_keeps_the_trace():
    ns = {}
    exec(SOURCE, ns)
    _run(ns)
    k = ns["kernel"]
    graphs = list(k.cache.values())
    exec("SCALE = 2.0\nL = gl.BlockedLayout([1], [32], [1], [0])\n", ns)  # equal values, new objects
    _run(ns)
    assert list(k.cache.values()) == graphs and graphs[0] is list(k.cache.values())[0]


def test_library_kernels_record_nothing_to_check():
    """The shipped kernels read only the library and modules: no per-launch check."""
    from gluon_trace.kernels.matmul_hopper import matmul_hopper
    from gluon_trace import jit_deps
    assert jit_deps.global_deps(matmul_hopper) == ()
    assert isinstance(gt.jit, object)

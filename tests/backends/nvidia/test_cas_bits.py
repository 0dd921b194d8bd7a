"""atomic_cas on floats compares bit patterns, as the hardware's cmpxchg does: memory holding
0.0 is not swapped for an expected -0.0 (nor -0.0 for 0.0). The interpreter compared values
and NVIDIA's 16-bit CAS loop did too, while 32/64-bit floats (atom.cas.b32/b64) and every AMD
path compared bits (found by the atomics fuzz preset: gfx1100 kept 0.0 where the interpreter
had swapped, seed 129). Bits are the semantics: a CAS loop over a float holding a NaN must end.
The interpreter against numpy, and the PTX simulator against both."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

MEM = [0.0, -0.0, 0.0, -0.0, 1.0, 2.0, -0.0, 3.0]
CMP = [-0.0, 0.0, 0.0, -0.0, 1.0, -2.0, -0.0, 0.0]


@gt.jit
def cas(buf, cmp, val, old):
    i = gl.arange(0, 32, layout=gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0]))  # wave64: copies
    gl.store(old + i, gl.atomic_cas(buf + i, gl.load(cmp + i), gl.load(val + i)))


def arrays(dtype: str):
    """(buf, cmp, val, old) of ``dtype`` as the kernel takes them, and the buffer after."""
    if dtype == "bfloat16":
        import ml_dtypes
        npt = ml_dtypes.bfloat16
    else:
        npt = np.dtype(dtype).type
    mem = np.array(MEM * 4, np.float64).astype(npt)
    cmp = np.array(CMP * 4, np.float64).astype(npt)
    val = (np.arange(32) + 10.0).astype(npt)
    u = np.uint16 if mem.itemsize == 2 else np.dtype(f"u{mem.itemsize}").type
    hit = mem.view(u) == cmp.view(u)
    return [mem, cmp, val, np.full(32, np.nan, npt)], np.where(hit, val, mem), hit


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_cas_compares_bit_patterns(dtype):
    args, want, hit = arrays(dtype)
    assert hit.sum() == 16 and not hit[0] and not hit[1]  # 0.0 vs -0.0 either way: no swap
    mem0 = args[0].copy()
    ref = [a.copy() for a in args]
    cas[(1,)](*ref, num_warps=1, backend="interpreter")
    assert ref[0].tobytes() == want.tobytes() and ref[3].tobytes() == mem0.tobytes()
    graph = cas.trace(*args, num_warps=1, target="sm_90").graph
    text, _, smem = emit(graph, "sm_90")
    sim = [a.copy() for a in args]
    ptxsim.run(text, (1, 1, 1), sim, smem)
    assert sim[0].tobytes() == want.tobytes() and sim[3].tobytes() == mem0.tobytes()

"""atomic_cas on floats compares bit patterns on AMD as in the interpreter (0.0 is not -0.0):
the cmpswap of 32/64-bit elements and the 16-bit ones' loop on the aligned dword (found with the
interpreter comparing values instead, atomics fuzz preset seed 129 on gfx1100). amdsim against
the interpreter and numpy, on gfx1100 and gfx942."""
import os
import sys

import pytest

import amdsim

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "nvidia"))
from test_cas_bits import arrays, cas  # noqa: E402


@pytest.mark.parametrize("target", ["gfx1100", "gfx942"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_cas_compares_bit_patterns(dtype, target):
    args, want, _ = arrays(dtype)
    mem0 = args[0].copy()
    ref = [a.copy() for a in args]
    cas[(1,)](*ref, num_warps=1, backend="interpreter", target=target)
    sim = [a.copy() for a in args]
    amdsim.simulate(cas.trace(*args, num_warps=1, target=target), target, (1,), sim)
    assert ref[0].tobytes() == want.tobytes() and sim[0].tobytes() == want.tobytes()
    assert sim[3].tobytes() == mem0.tobytes() == ref[3].tobytes()

"""How many allocation rounds a spilling kernel takes (regalloc.allocate): each round is a
scan, a pressure sweep and a rewrite of the whole program, which for a big kernel is most
of its compile time. A round that spilled to the budget and is still over (pair
fragmentation, spill temporaries) now lowers the budget by the excess at once, where it
used to find one more victim per round. The kernel still matches the interpreter."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import amdsim  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backends.amd import regalloc  # noqa: E402

pytestmark = pytest.mark.usefixtures("amd_toolchain")


@gt.jit
def wide_rows(out_ptr, sum_ptr, x_ptr, y_ptr, BM: gl.constexpr, BN: gl.constexpr):
    lay = gl.BlockedLayout([1, BN], [gl.threads_per_warp(), 1], [1, 1], [1, 0])
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, lay))
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, lay))
    offs = gl.expand_dims(rows, 1) * BN + gl.expand_dims(cols, 0)
    x = gl.load(x_ptr + offs)
    y = gl.load(y_ptr + offs)
    p = x * y
    gl.store(sum_ptr + rows, gl.sum(p, axis=1))
    gl.store(out_ptr + offs, p - x + y)


def test_a_big_spill_settles_in_three_rounds(monkeypatch, rng):
    scans = []
    real = regalloc._scan
    monkeypatch.setattr(regalloc, "_scan", lambda *a, **k: scans.append(1) or real(*a, **k))
    bm, bn = 64, 256  # 256 values per lane and tile, twice: thousands of dwords over
    args = [np.full(bm * bn, np.nan, np.float32), np.full(bm, np.nan, np.float32),
            rng.standard_normal(bm * bn).astype(np.float32), rng.standard_normal(bm * bn).astype(np.float32)]
    ref = [a.copy() for a in args]
    wide_rows[(1,)](*ref, BM=bm, BN=bn, num_warps=1, backend="interpreter")
    tk = wide_rows.trace(*args, BM=bm, BN=bn, num_warps=1, target="gfx942")
    from gluon_trace.backends.amd.compiler import lower
    assert lower(tk.graph, "gfx942").text.count("scratch_store") > 0  # it spills
    assert 0 < len(scans) <= 3  # it took 4 (spill, one more victim, none, a lower budget)
    amdsim.simulate(tk, "gfx942", (1,), args)
    np.testing.assert_allclose(args[0], ref[0], rtol=0, atol=0)
    np.testing.assert_allclose(args[1], ref[1], rtol=1e-5, atol=1e-5)

"""The bank-conflict swizzle of conversion scratch (backends/nvidia/swizzle.py): the bank
model, that the map is a bijection keeping vectors whole, that it cuts a transpose's
wavefronts, and that swizzled conversions still move every element (simulator)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402
from gluon_trace.backends.nvidia import rules_layout, swizzle  # noqa: E402
from gluon_trace.backends.nvidia.emitter import _pack, emit  # noqa: E402

ROW_MAJOR = gl.BlockedLayout([1, 4], [2, 16], [4, 1], [1, 0])   # each lane 4 columns
COL_MAJOR = gl.BlockedLayout([4, 1], [16, 2], [1, 4], [0, 1])   # each lane 4 rows


def test_bank_model():
    # 32 lanes 4 bytes apart: one wavefront; 256 bytes apart: all on bank 0
    assert swizzle.wavefronts([4, 8, 16, 32, 64], 4) == 1
    assert swizzle.wavefronts([256, 512, 1024, 2048, 4096], 4) == 32
    # 16-byte accesses: phases of 8 lanes; lanes 8+ are another phase
    assert swizzle.wavefronts([16, 32, 64, 4096, 8192], 16) == 1
    assert swizzle.wavefronts([256, 32, 64], 16) == 2
    # lanes reading one address (zero offsets) are a broadcast
    assert swizzle.wavefronts([0, 0, 4, 8, 16], 4) == 1


def _accesses(src, dst, shape, es):
    sl, dl = src.to_linear(shape, 4, 32), dst.to_linear(shape, 4, 32)
    key = lambda b: _pack(b, shape)  # noqa: E731
    V, Vd = rules_layout._vec(sl, key, 16 // es), rules_layout._vec(dl, key, 16 // es)
    acc = [([key(b) * es for b in sl.lane_bases], V * es), ([key(b) * es for b in dl.lane_bases], Vd * es)]
    return sl, dl, key, V, Vd, acc


@pytest.mark.parametrize("es", [4, 8, 2])
def test_a_transpose_gets_fewer_wavefronts_from_a_bijection_that_keeps_vectors(es):
    shape = (64, 64)
    sl, dl, key, V, Vd, acc = _accesses(ROW_MAJOR, COL_MAJOR, shape, es)
    lo = (max(V, Vd) * es).bit_length() - 1
    nbits = (64 * 64 * es).bit_length() - 1
    f = swizzle.choose(acc, lo, nbits)
    assert f is not None
    before = [swizzle.wavefronts(o, w) for o, w in acc]
    after = [swizzle.wavefronts(o, w, f) for o, w in acc]
    assert before[1] >= 8  # the column reads pile onto few banks
    assert after[0] <= before[0] and after[1] <= before[1] // 4, (before, after)
    images = [f(a) for a in range(0, 1 << nbits, 1 << lo)]
    assert sorted(images) == list(range(0, 1 << nbits, 1 << lo))  # a bijection of whole vectors
    assert all(f(a) & ((1 << lo) - 1) == 0 for a in range(0, 1 << nbits, 1 << lo))


def test_conflict_free_conversions_are_left_alone():
    _, _, _, _, _, acc = _accesses(ROW_MAJOR, gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0]), (64, 64), 4)
    assert all(swizzle.wavefronts(o, w) == 1 for o, w in acc)
    assert swizzle.choose(acc, 4, 14) is None


@gt.jit
def transpose_k(out, x, M: gl.constexpr, N: gl.constexpr, A: gl.constexpr, B: gl.constexpr):
    rm = gl.arange(0, M, layout=gl.SliceLayout(1, A))
    rn = gl.arange(0, N, layout=gl.SliceLayout(0, A))
    v = gl.load(x + rm[:, None] * N + rn[None, :])
    w = gl.convert_layout(v, B)
    sm = gl.arange(0, M, layout=gl.SliceLayout(1, B))
    sn = gl.arange(0, N, layout=gl.SliceLayout(0, B))
    gl.store(out + sn[None, :] * M + sm[:, None], w)  # out = x transposed


@pytest.mark.parametrize("dtype,npt", [(gl.float32, np.float32), (gl.float64, np.float64),
                                       (gl.float16, np.float16), (gl.int8, np.int8), (gl.int1, np.bool_)])
@pytest.mark.parametrize("swz", [True, False])
def test_swizzled_transposes_match_the_interpreter(dtype, npt, swz, monkeypatch):
    monkeypatch.setattr(rules_layout, "SWIZZLE", swz)
    rng = np.random.default_rng()
    x = (rng.standard_normal((64, 64)) * 100).astype(npt)
    graph = transpose_k.trace(gl.pointer(dtype), gl.pointer(dtype), M=64, N=64, A=ROW_MAJOR, B=COL_MAJOR,
                              num_warps=4, target="sm_90").graph
    text, _, smem = emit(graph, "sm_90")
    monkeypatch.setattr(rules_layout, "SWIZZLE", not swz)
    assert emit(graph, "sm_90")[0] != text  # the swizzle changes the scratch addresses
    ref, sim = np.zeros((64, 64), npt), np.zeros((64, 64), npt)
    if npt != np.bool_:
        ref[...] = sim[...] = npt(-1)
    get("interpreter").run(graph, (1, 1, 1), [ref, x])
    ptxsim.run(text, (1, 1, 1), [sim, x.copy()], smem)
    np.testing.assert_array_equal(ref, x.T)
    np.testing.assert_array_equal(sim, ref)

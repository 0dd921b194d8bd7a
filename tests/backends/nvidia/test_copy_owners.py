"""Layouts in which some threads (or registers) hold only copies of other threads' elements through a lane or
warp basis that repeats an XOR of earlier bases (not only a zero basis): one thread of each set
of copies writes. Found by the shared-memory fuzz preset (seed 15100172: two warps wrote one
output byte, which the race-checking simulator reported); through an atomic it was wrong, the
add applied once per copy. The PTX simulator against the interpreter."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim_races  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import copy_masks, emit  # noqa: E402

LAYOUTS = {  # 64 elements over 2 warps, each warp's elements the other's
    "warp repeats a lane": gl.DistributedLinearLayout(reg_bases=[[1]], lane_bases=[[2], [4], [8], [16], [32]],
                                                      warp_bases=[[32]], block_bases=[], shape=[64]),
    "warp repeats a register": gl.DistributedLinearLayout(reg_bases=[[1], [32]], lane_bases=[[2], [4], [8], [16], [0]],
                                                          warp_bases=[[32]], block_bases=[], shape=[64]),
    "lane is an XOR of two": gl.DistributedLinearLayout(reg_bases=[[1], [32]], lane_bases=[[2], [4], [8], [16], [34]],
                                                        warp_bases=[[0]], block_bases=[], shape=[64]),
    # one thread's registers holding one element twice (a zero register basis, and one repeating
    # an XOR of two others): the atomic ran once per register
    "register copies": gl.DistributedLinearLayout(reg_bases=[[0], [1], [32], [33]], lane_bases=[[2], [4], [8], [16], [0]],
                                                  warp_bases=[[0]], block_bases=[], shape=[64]),
}


@gt.jit
def add_and_store(acc, out, old, L: gl.constexpr):
    i = gl.arange(0, 64, L)
    was = gl.atomic_add(acc + i, gl.full([64], 1, gl.int32, L))
    gl.store(out + i, i * 3)
    gl.store(old + i, was)  # every copy of an element gets the one atomic's old value


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_each_element_is_written_once(name):
    lay = LAYOUTS[name]
    g = add_and_store.trace(*[np.zeros(64, np.int32)] * 3, L=lay, num_warps=2, target="sm_90").graph
    text, _, smem = emit(g, "sm_90")

    def make():
        return [np.full(64, 5, np.int32), np.full(64, -1, np.int32), np.full(64, -1, np.int32)]
    ref, sim = make(), make()
    get("interpreter").run(g, (1, 1, 1), ref)
    ptxsim_races.run(text, (1, 1, 1), sim, smem)   # raises on two unordered writes of one byte
    assert np.array_equal(ref[0], np.full(64, 6)) and np.array_equal(sim[0], ref[0])
    assert np.array_equal(sim[1], np.arange(64) * 3)
    assert np.array_equal(sim[2], np.full(64, 5)) and np.array_equal(ref[2], sim[2])


def test_copy_masks():
    lin = LAYOUTS["lane is an XOR of two"].to_linear((64,), 2, 32)
    assert copy_masks(lin) == (1 << 4, 1)      # lane bit 4 (34 = 32 ^ 2), the zero warp basis
    plain = gl.BlockedLayout([2], [32], [2], [0]).to_linear((64,), 2, 32)
    assert copy_masks(plain) == (0, 1)         # 64 elements on 128 copies: the second warp repeats


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_each_element_is_written_once_on_the_gpu(name):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a machine with an NVIDIA GPU")
    lay = LAYOUTS[name]
    acc = torch.full((64,), 5, dtype=torch.int32, device="cuda")
    out = torch.full((64,), -1, dtype=torch.int32, device="cuda")
    old = torch.full((64,), -1, dtype=torch.int32, device="cuda")
    add_and_store[(1,)](acc, out, old, L=lay, num_warps=2, backend="nvidia")
    torch.cuda.synchronize()
    assert acc.cpu().tolist() == [6] * 64 and old.cpu().tolist() == [5] * 64
    assert out.cpu().tolist() == [3 * i for i in range(64)]

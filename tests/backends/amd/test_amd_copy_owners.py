"""Atomics through layouts in which some lanes, waves or registers hold only copies of other
lanes' (registers') elements through a basis repeating an XOR of earlier ones, or a zero one:
one atomic per element, as in the interpreter (a wave basis repeating a lane's applied the add
twice; found on NVIDIA by the shared-memory fuzz preset, seed 15100172). amdsim on gfx1100
(32-lane waves) against the interpreter."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

import amdsim

LAYOUTS = {  # 64 elements over 2 waves of 32 lanes
    "wave repeats a lane": gl.DistributedLinearLayout(reg_bases=[[1]], lane_bases=[[2], [4], [8], [16], [32]],
                                                      warp_bases=[[32]], block_bases=[], shape=[64]),
    "lane is an XOR of two": gl.DistributedLinearLayout(reg_bases=[[1], [32]], lane_bases=[[2], [4], [8], [16], [34]],
                                                        warp_bases=[[0]], block_bases=[], shape=[64]),
    "register copies": gl.DistributedLinearLayout(reg_bases=[[0], [1], [32], [33]], lane_bases=[[2], [4], [8], [16], [0]],
                                                  warp_bases=[[0]], block_bases=[], shape=[64]),
}


@gt.jit
def add_and_store(acc, old, L: gl.constexpr):
    i = gl.arange(0, 64, L)
    was = gl.atomic_add(acc + i, gl.full([64], 1, gl.int32, L))
    gl.store(old + i, was)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_one_atomic_per_element(name):
    lay = LAYOUTS[name]
    sim = [np.full(64, 5, np.int32), np.full(64, -1, np.int32)]
    ref = [a.copy() for a in sim]
    tk = add_and_store.trace(*sim, L=lay, num_warps=2, target="gfx1100")
    amdsim.simulate(tk, "gfx1100", (1,), sim)
    add_and_store[(1,)](*ref, L=lay, num_warps=2, backend="interpreter")
    assert np.array_equal(ref[0], np.full(64, 6)) and np.array_equal(sim[0], ref[0])
    assert np.array_equal(ref[1], np.full(64, 5)) and np.array_equal(sim[1], ref[1])

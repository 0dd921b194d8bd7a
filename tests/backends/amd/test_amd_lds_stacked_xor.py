"""LDS accesses from a tile whose distributed layout mixes the bits of a stacked (leading) dim of
the buffer by XOR (lane bases [1, 0] and [3, 0] over it: row 1 ^ 3 = 2, not 1 + 3), run on the
simulator for gfx1100 (wave32) and gfx942 (wave64) against the interpreter and numpy, on fresh
random inputs with NaN-poisoned outputs, loads and stores. The stacked bytes are not the sum of
the bases' then: the AMD backend splits the stacked coordinate into a thread part and a
register part (lds_address.Access._coord_lead) instead of refusing the view ('not addressable
as thread part + register part'; found by the 'shared' fuzz preset). Power-of-two strides
(a swizzled tile) and padded tiles' strides (not powers of two), slices of the stacked dim at
unaligned starts, bases over lanes, registers and waves."""

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

import amdsim

TARGETS = ["gfx1100", "gfx942"]


pytestmark = pytest.mark.usefixtures("amd_toolchain")  # conftest: a fresh cache; skip without an assembler


def _layout(kind, W):
    """An [8, 4] tile whose bases mix the row (stacked) bits by XOR; (layout, num_warps)."""
    z = [[0, 0]]
    nl = W.bit_length() - 1
    if kind == "lane":      # the fuzz reproducer's: lane bases [1, 0], [3, 0], [4, 0]
        reg, lane, warp = [[0, 1], [0, 2]], [[1, 0], [3, 0], [4, 0]], []
    elif kind == "reg":     # registers [1, 0] and [3, 0]: the row's bits go into the offset
        reg, lane, warp = [[0, 1], [1, 0], [3, 0]], [[0, 2], [4, 0]], []
    elif kind == "mixed":   # a register's row bit the lanes set too: one thread register each
        reg, lane, warp = [[0, 1], [2, 0]], [[3, 0], [0, 2], [4, 0]], []
    elif kind == "warp":    # waves [3, 0] and [4, 0] over a lane's [1, 0]
        reg, lane, warp = [[0, 1], [0, 2]], [[1, 0]], [[3, 0], [4, 0]]
    else:                   # rows repeated: lanes [1, 0], [3, 0] and [2, 0] (lane 7 is row 0)
        reg, lane, warp = [[0, 1], [0, 2]], [[1, 0], [3, 0], [2, 0], [4, 0]], []
    lane = lane + z * (nl - len(lane))
    return gl.DistributedLinearLayout(reg_bases=reg, lane_bases=lane, warp_bases=warp, block_bases=[],
                                      shape=[8, 4]), 1 << len(warp)


def _shared(kind):
    if kind == "swizzled":  # rows of 4 elements: power-of-two strides
        return gl.SwizzledSharedLayout(1, 1, 1, [0])
    return gl.PaddedSharedLayout.with_identity_for([[2, 1]], [4], [0])  # rows of 5: odd strides


@gt.jit
def stacked_rw(x_ptr, y_ptr, out_ptr, X: gl.constexpr, SHARED: gl.constexpr, DT: gl.constexpr,
               START: gl.constexpr, STORE: gl.constexpr):
    """Rows START..START+8 of a 16 x 4 buffer stacking its rows (rank-1 shared layout), read in
    X (STORE=0), or y written into them from X and the whole buffer read back (STORE=1)."""
    W: gl.constexpr = gl.threads_per_warp()
    B: gl.constexpr = gl.BlockedLayout([1, 1], [W // 4, 4], [gl.num_warps(), 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, B))[:, None] * 4 + gl.arange(0, 4, gl.SliceLayout(0, B))[None, :]
    r8 = gl.arange(0, 8, gl.SliceLayout(1, B))[:, None] * 4 + gl.arange(0, 4, gl.SliceLayout(0, B))[None, :]
    buf = gl.allocate_shared_memory(DT, [16, 4], SHARED, gl.load(x_ptr + r))
    v = buf.slice(START, 8, dim=0)
    if STORE:
        v.store(gl.convert_layout(gl.load(y_ptr + r8), X))
        gl.thread_barrier()
        gl.store(out_ptr + r, buf.load(B))
    else:
        gl.store(out_ptr + r8, gl.convert_layout(v.load(X), B))


def _data(dtype):
    rng = np.random.default_rng()
    return rng.standard_normal((16, 4)).astype(dtype), rng.standard_normal((8, 4)).astype(dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("store", [0, 1])
@pytest.mark.parametrize("start", [0, 3])
@pytest.mark.parametrize("shared", ["swizzled", "padded"])
@pytest.mark.parametrize("kind", ["lane", "reg", "mixed", "warp", "repeat"])
def test_stacked_dim_mixed_by_xor(target, store, start, shared, kind):
    W = 64 if target == "gfx942" else 32
    X, nw = _layout(kind, W)
    dtype = np.float16 if kind == "mixed" else np.float32
    DT = gl.float16 if dtype == np.float16 else gl.float32
    x, y = _data(dtype)
    if store:
        exp = x.copy()
        exp[start:start + 8] = y
    else:
        exp = x[start:start + 8]

    def make():
        return [x.copy(), y.copy(), np.full(exp.shape, np.nan, dtype)]
    kw = dict(X=X, SHARED=_shared(shared), DT=DT, START=start, STORE=store, num_warps=nw)
    tk = stacked_rw.trace(*make(), target=target, **kw)
    ref, sim = make(), make()
    stacked_rw[(1,)](*ref, backend="interpreter", target=target, **kw)
    amdsim.simulate(tk, target, (1,), sim)
    assert np.array_equal(ref[2], exp)
    assert np.array_equal(sim[2], exp), (sim[2], exp)


@gt.jit
def fuzz_repro(x_ptr, out_ptr):
    """The fuzz campaign's minimal reproducer (seeds 15000108 and others of preset 'shared')."""
    W: gl.constexpr = gl.threads_per_warp()
    B: gl.constexpr = gl.BlockedLayout([1, 1], [W // 4, 4], [1, 1], [1, 0])
    X: gl.constexpr = gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2]],
                                                 lane_bases=[[1, 0], [3, 0], [4, 0]] + [[0, 0]] * (3 if W == 64 else 2),
                                                 warp_bases=[], block_bases=[], shape=[8, 4])
    r = gl.arange(0, 8, gl.SliceLayout(1, B))[:, None] * 4 + gl.arange(0, 4, gl.SliceLayout(0, B))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [8, 4], gl.SwizzledSharedLayout(1, 1, 1, [0]), gl.load(x_ptr + r))
    gl.store(out_ptr + r, gl.convert_layout(buf.load(X), B))


@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_reproducer(target):
    x = np.random.default_rng().standard_normal((8, 4)).astype(np.float32)
    ref, out = np.full((8, 4), np.nan, np.float32), np.full((8, 4), np.nan, np.float32)
    fuzz_repro[(1,)](x.copy(), ref, backend="interpreter", target=target, num_warps=1)
    amdsim.simulate(fuzz_repro.trace(x, out, target=target, num_warps=1), target, (1,), [x.copy(), out])
    assert np.array_equal(ref, x) and np.array_equal(out, x)

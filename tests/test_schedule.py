"""gluon_trace.schedule.hoist_stores: each store moves up to just after what it reads,
past pure computation only. The hoisted graph runs in the interpreter to the same results
as the traced one, loads and stores keep their order (so aliasing buffers see the same
values), and the traced graph itself is untouched."""
import numpy as np

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backend import get
from gluon_trace.schedule import hoist_stores

L = gl.BlockedLayout([2], [32], [1], [0])


@gt.jit
def two_tiles(x, y, out0, out1, n):
    offs = gl.arange(0, 64, layout=L)
    a = gl.load(x + offs)
    b = gl.load(y + offs)
    u = a * 2.0 + 1.0
    acc = b
    for i in gl.range(0, n):
        acc = acc * 0.5 + u
    v = gl.exp2(b) - a
    gl.store(out0 + offs, u)
    gl.store(out1 + offs, v + acc, mask=offs < n + 40)


@gt.jit
def store_then_reload(x, y, out, n):
    offs = gl.arange(0, 64, layout=L)
    a = gl.load(x + offs)
    t = a * 3.0
    c = gl.load(y + offs)   # y may be x: the store below must stay after this load
    gl.store(x + offs, t)
    gl.store(out + offs, c + t)


@gt.jit
def combine_reads(x, y, out, n):
    offs = gl.arange(0, 64, layout=L)
    a = gl.load(x + offs)
    t = a * 3.0
    r = gl.reduce(a, 0, lambda p, q: p + q * gl.load(y + 5))  # reads y[5]: y may be x
    gl.store(x + offs, t)
    gl.store(out + offs, t + r)


def _names(block):
    return [op.name for op in block.ops]


def _trace(fn, nptr):
    return fn.trace(*[gl.pointer(gl.float32)] * nptr, gl.int32, num_warps=1, target="sm_90").graph


def _run(g, args):
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    get("interpreter").run(g, (1, 1, 1), args)
    return args


def test_a_store_moves_above_pure_work_and_a_pure_loop(rng):
    g = _trace(two_tiles, 4)
    h = hoist_stores(g)
    names = _names(h.body)
    first = names.index("store")
    assert first < names.index("for") and first < names.index("exp2")  # u is ready before both
    assert _names(g.body).index("store") > _names(g.body).index("for")  # the traced graph is as it was
    for n in (0, 3):
        x, y = rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)
        args = [x, y, np.full(64, np.nan, np.float32), np.full(64, np.nan, np.float32), n]
        want, got = _run(g, args), _run(h, args)
        np.testing.assert_array_equal(got[2], want[2])
        np.testing.assert_array_equal(got[3], want[3])


def test_a_store_never_passes_a_load(rng):
    g = _trace(store_then_reload, 3)
    h = hoist_stores(g)
    names = _names(h.body)
    loads = [i for i, n in enumerate(names) if n == "load"]
    stores = [i for i, n in enumerate(names) if n == "store"]
    assert max(loads) < min(stores)
    x = rng.standard_normal(64).astype(np.float32)
    # x and y the same buffer: the second load must read x before the store overwrites it
    buf = x.copy()
    out = np.full(64, np.nan, np.float32)
    get("interpreter").run(h, (1, 1, 1), [buf, buf, out, 0])
    np.testing.assert_array_equal(out, x + x * np.float32(3.0))
    np.testing.assert_array_equal(buf, x * np.float32(3.0))


def test_a_graph_whose_stores_are_in_place_is_returned_as_is():
    g = _trace(store_then_reload, 3)
    h = hoist_stores(g)
    assert hoist_stores(h) is h


def test_a_store_never_passes_a_combine_that_loads(rng):
    g = _trace(combine_reads, 3)
    h = hoist_stores(g)
    names = _names(h.body)
    assert names.index("reduce") < names.index("store")
    x = rng.standard_normal(64).astype(np.float32)
    buf, out = x.copy(), np.full(64, np.nan, np.float32)
    get("interpreter").run(g, (1, 1, 1), [buf, buf, out, 0])
    buf2, out2 = x.copy(), np.full(64, np.nan, np.float32)
    get("interpreter").run(h, (1, 1, 1), [buf2, buf2, out2, 0])
    np.testing.assert_array_equal(out2, out)
    assert np.isfinite(out).all()

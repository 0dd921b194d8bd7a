"""Addresses as one base register plus immediates (backends/nvidia/affine.py): a tile's
offsets share a base, each element's address is ``[base+imm]``. The PTX is checked for the
shape (a handful of 64-bit address computations for a whole tile, not one per element)
and run on the PTX simulator against the interpreter on random inputs, poisoned outputs:
constant and run-time strides, reversed (negative) offsets, masks, and a pointer that is
also carried through a loop (which keeps whole registers)."""
import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402
from gluon_trace.backends.nvidia import ptxas  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from gluon_trace.errors import CompileError  # noqa: E402

L2 = gl.BlockedLayout([4, 2], [4, 8], [2, 1], [1, 0])


@gt.jit
def tile_copy(x, out, n, stride):
    r = gl.arange(0, 32, layout=gl.SliceLayout(1, L2))
    c = gl.arange(0, 16, layout=gl.SliceLayout(0, L2))
    src = gl.expand_dims(r, 1) * 16 + gl.expand_dims(c, 0)
    dst = gl.expand_dims(31 - r, 1) * stride + (15 - gl.expand_dims(c, 0))  # reversed, run-time stride
    v = gl.load(x + src, mask=src < n, other=-7.0)
    gl.store(out + dst, v * 2.0 - 1.0, mask=dst < n)


@gt.jit
def carried_pointer(x, out, n):
    offs = gl.arange(0, 64, layout=gl.BlockedLayout([1], [32], [2], [0]))
    p = x + offs
    acc = gl.load(p)
    for i in gl.range(0, n):
        p = p + 64
        acc += gl.load(p)
    gl.store(out + offs, acc)


@gt.jit
def shifted_window(x, out, n):
    offs = gl.arange(0, 128, layout=gl.BlockedLayout([2], [32], [2], [0]))
    v = gl.load(x + (offs - 8), mask=offs >= 8, other=0.0)  # negative immediates: [base+-32]
    w = gl.load(x + offs - 4, mask=offs >= 4, other=0.0)    # two ptr_adds: one address too
    gl.store(out + (127 - offs), v + w, mask=offs < n)


def _graph(fn, nints):
    return fn.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), *[gl.int32] * nints,
                    num_warps=2, target="sm_90").graph


def _both(g, args, grid=(1, 1, 1)):
    ref = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    get("interpreter").run(g, grid, ref)
    text, _, smem = emit(g, "sm_90")
    sim = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    with np.errstate(all="ignore"):
        ptxsim.run(text, grid, sim, smem)
    return text, ref, sim


def test_a_tile_is_addressed_from_one_base(rng):
    g = _graph(tile_copy, 2)
    text, _, _ = _both(g, [rng.standard_normal(512).astype(np.float32), np.full(1024, np.nan, np.float32), 512, 16])
    per_thread = 32 * 16 // 64
    # one base for the load; the store's run-time stride gives one per row a thread holds (4)
    assert len(re.findall(r"mul\.wide", text)) <= 5 < per_thread
    assert len(re.findall(r"\[%rd\d+\+-?\d+\]", text)) >= per_thread  # [base+imm] accesses


@pytest.mark.parametrize("n, stride", [(512, 16), (300, 16), (512, 32), (1000, 17)])
def test_tile_copy_matches_the_interpreter(rng, n, stride):
    g = _graph(tile_copy, 2)
    x = rng.standard_normal(512).astype(np.float32)
    _, ref, sim = _both(g, [x, np.full(32 * stride + 16, np.nan, np.float32), n, stride])
    assert np.isfinite(ref[1]).any()
    np.testing.assert_array_equal(sim[1], ref[1])


def test_a_pointer_carried_through_a_loop(rng):
    g = _graph(carried_pointer, 1)
    x = rng.standard_normal(64 * 4).astype(np.float32)
    _, ref, sim = _both(g, [x, np.full(64, np.nan, np.float32), 3])
    chunks = x.reshape(4, 64)
    want = ((chunks[0] + chunks[1]) + chunks[2]) + chunks[3]
    np.testing.assert_array_equal(ref[1], want)
    np.testing.assert_array_equal(sim[1], want)


def test_negative_immediates_assemble_and_run(rng):
    g = _graph(shifted_window, 1)
    x = rng.standard_normal(128).astype(np.float32)
    text, ref, sim = _both(g, [x, np.full(128, np.nan, np.float32), 100])
    assert re.search(r"\[%rd\d+\+-\d+\]", text)
    assert text.count("mul.wide") <= 2  # x's base (shared by both loads) and out's
    want = np.full(128, np.nan, np.float32)
    i = np.arange(100)
    want[127 - i] = (np.where(i >= 8, x[np.maximum(i - 8, 0)], np.float32(0.0))
                     + np.where(i >= 4, x[np.maximum(i - 4, 0)], np.float32(0.0)))
    np.testing.assert_array_equal(ref[1], want)
    np.testing.assert_array_equal(sim[1], want)
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(f"ptxas not found: {e}")
    traced = shifted_window.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), gl.int32,
                                  num_warps=2, target="sm_90a")
    assert traced.compile("sm_90a").registers > 0  # ptxas takes [base+-imm]


@gt.jit
def masked_twice(x, out, n, y):
    lay = gl.BlockedLayout([4, 2], [4, 8], [2, 1], [1, 0])
    r = gl.arange(0, 32, layout=gl.SliceLayout(1, lay))
    c = gl.arange(0, 16, layout=gl.SliceLayout(0, lay))
    o = gl.expand_dims(r, 1) * 16 + gl.expand_dims(c, 0)
    a = gl.load(x + o, mask=o < n, other=1.0)
    b = gl.load(y + o)
    o = gl.expand_dims(r, 1) * 16 + gl.expand_dims(c, 0)  # the same offsets again
    gl.store(out + o, a * b, mask=o <= n)


def test_store_masks_are_made_at_each_store(rng):
    g = masked_twice.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), gl.int32, gl.pointer(gl.float32),
                           num_warps=2, target="sm_90").graph
    x, y = (rng.standard_normal(512).astype(np.float32) for _ in range(2))
    text, ref, sim = _both(g, [x, np.full(512, np.nan, np.float32), 300, y])
    lines = [ln.strip() for ln in text.splitlines()]
    guarded = [i for i, ln in enumerate(lines) if re.match(r"@%p\d+ st\.global", ln)]
    assert len(guarded) >= 4
    for i in guarded:  # the predicate is set within the few lines before its access
        p = lines[i].split()[0][1:]
        assert any(ln.startswith("setp") and f" {p}," in ln for ln in lines[max(i - 4, 0):i]), lines[i - 4:i + 1]
    want = np.where(np.arange(512) < 300, x, np.float32(1.0)) * y
    want[301:] = np.nan
    np.testing.assert_array_equal(ref[1], want)
    np.testing.assert_array_equal(sim[1], want)

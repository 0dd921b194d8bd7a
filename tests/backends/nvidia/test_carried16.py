"""16-bit floats carried through loops and if/else in their 16 bits (two to a .b32), and
tiles rounded to 16 bits by paired cvts: run on the PTX simulator against the interpreter,
bit for bit, on fresh random inputs with the outputs poisoned."""
import os
import re
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import dtypes as dt
from gluon_trace import language as gl
from gluon_trace.backend import get

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

L2 = gl.BlockedLayout([1, 4], [4, 8], [2, 2], [1, 0])
DTYPES = {"bfloat16": gl.bfloat16, "float16": gl.float16}


@gt.jit
def carried16(x_ptr, y_ptr, z_ptr, n_iter, DT: gl.constexpr, R: gl.constexpr, C: gl.constexpr):
    offs = gl.arange(0, R, layout=gl.SliceLayout(1, L2))[:, None] * C + \
        gl.arange(0, C, layout=gl.SliceLayout(0, L2))[None, :]
    x = gl.load(x_ptr + offs)                       # f32
    acc = (x * 0.5).to(DT)                          # a whole tile rounded: paired cvts
    other = gl.load(z_ptr + offs)                   # a loaded 16-bit tile, carried as loaded
    for i in gl.range(0, n_iter):
        nxt = (acc.to(gl.float32) * 0.75 + x).to(DT)
        with gl.if_(i % 3 == 1):
            acc = nxt
            other = other * 2                       # 16-bit arithmetic: rounded per op
        with gl.else_():
            acc = (nxt - x.to(DT)).to(DT)
            other, acc = acc, other                 # a swap: the parallel copy through the halves
    gl.store(y_ptr + offs, acc)
    gl.store(z_ptr + offs, other)


def _storage(a, t):
    return dt.f32_to_bf16_bits(a) if t == "bfloat16" else a.astype(np.float16)


@pytest.mark.parametrize("t", ["bfloat16", "float16"])
@pytest.mark.parametrize("n_iter", [0, 1, 5])
def test_carried_16bit_floats_match_the_interpreter(t, n_iter):
    rng = np.random.default_rng(n_iter * 7 + len(t))
    R, C = 16, 32
    g = carried16.trace(gl.pointer(gl.float32), gl.pointer(DTYPES[t]), gl.pointer(DTYPES[t]),
                        gl.int32, DT=DTYPES[t], R=R, C=C, target="sm_90").graph
    text, _, smem = emit(g, "sm_90")
    x = rng.standard_normal((R, C)).astype(np.float32) * 8
    z = _storage(rng.standard_normal((R, C)).astype(np.float32), t)
    outs = []
    for runner in (lambda args: get("interpreter").run(g, (1, 1, 1), args),
                   lambda args: ptxsim.run(text, (1, 1, 1), args, smem)):
        y = np.full((R, C), 0x7E7E if t == "bfloat16" else np.nan, z.dtype)  # poisoned
        args = [x.copy(), y, z.copy(), n_iter]
        with np.errstate(all="ignore"):
            runner(args)
        outs.append((args[1].view(np.uint16), args[2].view(np.uint16)))
    (ry, rz), (sy, sz) = outs
    np.testing.assert_array_equal(sy, ry)
    np.testing.assert_array_equal(sz, rz)
    assert not np.array_equal(ry, np.full_like(ry, 0x7E7E))


def test_the_carried_registers_are_16_bit_and_the_rounding_paired():
    g = carried16.trace(gl.pointer(gl.float32), gl.pointer(gl.bfloat16), gl.pointer(gl.bfloat16),
                        gl.int32, DT=gl.bfloat16, R=16, C=32, target="sm_90").graph
    text, _, _ = emit(g, "sm_90")
    loop = text[text.index("$L_loop_"):]
    # every carried value moves in its 16 bits, two a .b32 (registers 2i and 2i+1, as a paired cvt
    # made them); none is widened to f32 to cross the back edge
    assert re.search(r"mov\.b32 %r\d+, %r\d+;", loop) and not re.search(r"mov\.f32 %f\d+, %f\d+;", loop)
    assert not re.search(r"mov\.b16 %h\d+, %h\d+;", loop)
    # L2 holds the 16x32 tile in 8 registers a thread: each of the three casts from f32 rounds them
    # two at a time; the two 16-bit operations (a subtraction, a product) are rounded again in pairs
    # for the back edge, so their one-at-a-time roundings are dead and dropped (backends/nvidia/dce.py),
    # and the loaded tile reaches the loop in the halves it was loaded in (no cvt)
    assert text.count("cvt.rn.bf16x2.f32") >= 3 * 4 and text.count("cvt.rn.bf16.f32") == 0


@pytest.mark.gpu
@pytest.mark.parametrize("t", ["bfloat16", "float16"])
def test_gpu_carried_16bit_floats_match_the_interpreter(t):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    tt = {"bfloat16": torch.bfloat16, "float16": torch.float16}[t]
    rng = np.random.default_rng()
    R, C, n_iter = 16, 32, 7
    x = rng.standard_normal((R, C)).astype(np.float32) * 8
    z = _storage(rng.standard_normal((R, C)).astype(np.float32), t)
    g = carried16.trace(gl.pointer(gl.float32), gl.pointer(DTYPES[t]), gl.pointer(DTYPES[t]), gl.int32,
                        DT=DTYPES[t], R=R, C=C, target="sm_90").graph
    ref = [x.copy(), np.zeros((R, C), z.dtype), z.copy(), n_iter]
    with np.errstate(all="ignore"):
        get("interpreter").run(g, (1, 1, 1), ref)
    xg = torch.from_numpy(x).cuda()
    zg = torch.from_numpy(z.view(np.int16)).cuda().view(tt)
    yg = torch.full((R, C), float("nan"), dtype=tt, device="cuda")
    carried16[(1,)](xg, yg, zg, n_iter, DT=DTYPES[t], R=R, C=C, backend="nvidia")
    torch.cuda.synchronize()
    bits = lambda a: a.view(torch.int16).cpu().numpy().view(np.uint16)  # noqa: E731
    np.testing.assert_array_equal(bits(yg), ref[1].view(np.uint16))
    np.testing.assert_array_equal(bits(zg), ref[2].view(np.uint16))

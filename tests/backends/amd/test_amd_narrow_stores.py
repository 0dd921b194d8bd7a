"""Global stores of 16- and 8-bit elements (f16, bf16, int16, int8, uint8, gfx942's FNUZ fp8):
a run of 16, 8 or 4 bytes under one mask whose alignment axis info proves is one
global_store_dwordx4/x2/dword (memory.store_packed), its dwords the ones the values were loaded
in when they were loaded packed, else packed in registers (v_cvt_pkrtz_f16_f32 for exact f16
pairs, v_perm_b32, v_cvt_pk_fp8_f32 for bytes rounded from f32); other runs store element by
element. amdsim against the interpreter, outputs poisoned, masked edges."""
import os
import re
import sys

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import amdsim  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402

pytestmark = pytest.mark.usefixtures("amd_toolchain")

NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "int16": np.int16, "int8": np.int8,
      "uint8": np.uint8, "float8e4b8": ml_dtypes.float8_e4m3fnuz, "float8e5b16": ml_dtypes.float8_e5m2fnuz}
NARROW = {"float16": "short", "bfloat16": "short", "int16": "short", "int8": "byte", "uint8": "byte",
          "float8e4b8": "byte", "float8e5b16": "byte"}
CASES = [(t, d) for t in ("gfx90a", "gfx942", "gfx1100") for d in ("float16", "bfloat16", "int16", "int8", "uint8")] \
    + [("gfx942", "float8e4b8"), ("gfx942", "float8e5b16")]


def _asm(tk, target):
    from gluon_trace.backends.amd.compiler import lower
    return lower(tk.for_target(target).graph, target).text


def _stores(asm):
    return set(re.findall(r"global_store_(\w+)", asm))


@gt.jit
def store_tile(x, out, n_rows, n_cols, stride, D: gl.constexpr, MODE: gl.constexpr, OFF: gl.constexpr,
               V: gl.constexpr, R: gl.constexpr):
    T: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, V], [T // 4, 4], [gl.num_warps(), 1], [1, 0])
    rows = gl.arange(0, R, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, 4 * V, layout=gl.SliceLayout(0, L))
    m = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    src = x + rows[:, None] * stride + cols[None, :]
    if MODE == "computed":
        y = (gl.load(src) * 1.5 + 0.25).to(D)       # x: f32
    elif MODE == "constant":
        y = gl.full([R, 4 * V], 6, D, L)
    else:
        y = gl.load(src)                             # x: D, stored as loaded
    gl.store(out + OFF + rows[:, None] * (4 * V) + cols[None, :], y, mask=m)


def _input(rng, mode, dtype, n):
    if mode == "copy":
        b = rng.integers(0, 256, n * np.dtype(NP[dtype]).itemsize).astype(np.uint8)
        if dtype.startswith("float8"):
            b[b == 0x80] = 0x81
        x = b.view(NP[dtype])
        if dtype in ("float16", "bfloat16"):  # no NaNs: the interpreter keeps no NaN payloads
            u = x.view(np.uint16)
            top = 0x7C00 if dtype == "float16" else 0x7F80
            u[(u & top) == top] &= ~np.uint16(0x4000)
        return x
    scale = 60.0 if dtype in ("int8", "uint8", "int16") else 4.0
    return (rng.standard_normal(n) * scale).astype(np.float32)


@pytest.mark.parametrize("mode", ["computed", "copy", "constant"])
@pytest.mark.parametrize("target, dtype", CASES)
def test_narrow_stores(rng, target, dtype, mode):
    """n_cols a multiple of 16, offset 0: every store a 16-byte global_store_dwordx4; the
    masked rows (n_rows odd) keep the poison."""
    R, es = 16, np.dtype(NP[dtype]).itemsize
    V = 16 // es
    C, n_rows, n_cols, stride = 4 * V, 11, 32, 4 * V + 16
    x = _input(rng, mode, dtype, R * stride)
    out, ref = (np.full(R * C * es, 0x5A, np.uint8).view(NP[dtype]) for _ in range(2))
    args = [x, out, n_rows, n_cols, stride]
    cx = dict(D=getattr(gl, dtype), MODE=mode, OFF=0, V=V, R=R)
    tk = store_tile.trace(*args, **cx, num_warps=2, target=target)
    asm = _asm(tk, target)
    assert _stores(asm) == {"dwordx4"}
    if mode == "copy":  # the loaded dwords, as they are
        assert "v_perm_b32" not in asm and "v_cvt_pkrtz" not in asm
    if mode == "computed" and dtype == "float16":
        assert "v_cvt_pkrtz_f16_f32" in asm
    if mode == "computed" and dtype.startswith("float8"):
        assert asm.count("v_perm_b32") == 4  # one a dword of a thread's 16 bytes: two converts make it
    amdsim.simulate(tk, target, (1,), args)
    get("interpreter").run(tk.graph, (1, 1, 1), [x, ref, n_rows, n_cols, stride])
    np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8))
    got = ref.view(np.uint8).reshape(R, C * es)
    assert (got[n_rows:] == 0x5A).all() and (got[:, n_cols * es:] == 0x5A).all()
    assert (got[:n_rows, :n_cols * es] != 0x5A).any()


SPLIT = {  # (type, offset in elements, bound): the stores a run of 16 bytes becomes
    ("float16", 0, 13): {"short"}, ("float16", 1, 32): {"short", "dword", "dwordx2"},
    ("float16", 2, 32): {"dword", "dwordx2"}, ("int8", 0, 13): {"byte"},
    ("int8", 1, 32): {"byte", "dword", "dwordx2"}, ("int8", 8, 32): {"dwordx2"}}


@pytest.mark.parametrize("dtype, off, n_cols", list(SPLIT))
def test_unaligned_or_odd_runs_store_narrow(rng, dtype, off, n_cols):
    """An odd bound (a mask an element) stores element by element; a run starting past a
    16-byte boundary splits into the widest aligned pieces (bytes/halves at the ends)."""
    R, es = 16, np.dtype(NP[dtype]).itemsize
    V = 16 // es
    C, n_rows, stride = 4 * V, 16, 4 * V
    x = _input(rng, "computed", dtype, R * stride)
    out, ref = (np.full((R * C + off) * es, 0x5A, np.uint8).view(NP[dtype]) for _ in range(2))
    args = [x, out, n_rows, n_cols, stride]
    cx = dict(D=getattr(gl, dtype), MODE="computed", OFF=off, V=V, R=R)
    tk = store_tile.trace(*args, **cx, num_warps=1, target="gfx942")
    assert _stores(_asm(tk, "gfx942")) == SPLIT[dtype, off, n_cols]
    amdsim.simulate(tk, "gfx942", (1,), args)
    get("interpreter").run(tk.graph, (1, 1, 1), [x, ref, n_rows, n_cols, stride])
    np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8))
    assert (ref.view(np.uint8) != 0x5A).sum() > R * n_cols * es // 2

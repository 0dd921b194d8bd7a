"""8-bit global loads (int8, uint8, gfx942's FNUZ fp8) as vector loads: runs of 16, 8 or 4
bytes whose alignment axis info proves load as one global_load_dwordx4/x2/dword, masked once per
run, masked-off bytes preset to ``other``'s; the dwords go to LDS (ds_write_b128/b64/b32) and
MMA operands as loaded, a byte tile written transposed takes its bytes from the loaded dword
(ds_write_b8 of the dword shifted down), and bytes are extracted only where something computes
on them. Each case runs on amdsim against the interpreter on fresh random inputs, outputs
poisoned, masked edges included."""
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

NP = {"int8": np.int8, "uint8": np.uint8, "float8e4b8": ml_dtypes.float8_e4m3fnuz,
      "float8e5b16": ml_dtypes.float8_e5m2fnuz}
OTHER = {"int8": -5, "uint8": 200, "float8e4b8": 1.5, "float8e5b16": -3.0}
CASES = [("gfx90a", "int8"), ("gfx90a", "uint8"), ("gfx942", "int8"), ("gfx942", "uint8"),
         ("gfx942", "float8e4b8"), ("gfx942", "float8e5b16"), ("gfx1100", "int8"), ("gfx1100", "uint8")]


def _asm(tk, target):
    from gluon_trace.backends.amd.compiler import lower
    return lower(tk.for_target(target).graph, target).text


def _bytes(rng, dtype, n):
    """Random bytes of the type (fp8: every finite FNUZ value, never NaN's 0x80)."""
    b = rng.integers(0, 256, n).astype(np.uint8)
    if dtype.startswith("float8"):
        b[b == 0x80] = 0x81
    return b.view(NP[dtype])


def _poison(n, dtype):
    return np.full(n, 0x5A, np.uint8).view(NP[dtype]) if dtype in NP else np.full(n, np.nan, np.float32)


def _kinds(asm):
    return set(re.findall(r"global_load_(\w+)", asm))


@gt.jit
def byte_tile(x, out_raw, out_val, n_rows, n_cols, stride, OTHER: gl.constexpr, R: gl.constexpr,
              C: gl.constexpr, FP8: gl.constexpr):
    T: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 16], [T // 4, 4], [gl.num_warps(), 1], [1, 0])
    rows = gl.arange(0, R, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, C, layout=gl.SliceLayout(0, L))
    m = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    v = gl.load(x + rows[:, None] * stride + cols[None, :], mask=m, other=OTHER)
    o = rows[:, None] * C + cols[None, :]
    gl.store(out_raw + o, v)                       # the bytes as loaded, `other` included
    if FP8:
        gl.store(out_val + o, v.to(gl.float32) * 3.0)
    else:
        gl.store(out_val + o, v * 3 + 1)           # (8-bit arithmetic: wraps)


@pytest.mark.parametrize("n_cols", [48, 45])
@pytest.mark.parametrize("target, dtype", CASES)
def test_masked_byte_runs(rng, target, dtype, n_cols):
    """n_cols a multiple of 16: one mask a 16-byte run, all loads global_load_dwordx4; odd
    n_cols: a mask per byte, byte loads. Rows past n_rows (odd) read ``other``."""
    R, C, n_rows, stride = 32, 64, 27, 80
    x = _bytes(rng, dtype, R * stride)
    fp8 = dtype.startswith("float8")
    args = lambda raw, val: [x, raw, val, n_rows, n_cols, stride]  # noqa: E731
    cx = dict(OTHER=OTHER[dtype], R=R, C=C, FP8=fp8)
    raw, val = _poison(R * C, dtype), _poison(R * C, "f32" if fp8 else dtype)
    tk = byte_tile.trace(*args(raw, val), **cx, num_warps=2, target=target)
    asm = _asm(tk, target)
    byte = "sbyte" if dtype == "int8" else "ubyte"
    assert _kinds(asm) == ({"dwordx4"} if n_cols % 16 == 0 else {byte})
    if fp8 and n_cols % 16 == 0:  # widened two bytes an instruction from the loaded dword
        assert "v_cvt_pk_f32_" in asm
    amdsim.simulate(tk, target, (1,), args(raw, val))
    rraw, rval = _poison(R * C, dtype), _poison(R * C, "f32" if fp8 else dtype)
    get("interpreter").run(tk.graph, (1, 1, 1), args(rraw, rval))
    want = x.view(np.uint8).reshape(R, stride)[:, :C].copy()
    want[n_rows:, :] = np.array(OTHER[dtype]).astype(NP[dtype]).view(np.uint8)
    want[:, n_cols:] = want[n_rows, 0]
    np.testing.assert_array_equal(rraw.view(np.uint8).reshape(R, C), want)
    np.testing.assert_array_equal(raw.view(np.uint8), rraw.view(np.uint8))
    np.testing.assert_array_equal(val.view(np.uint8), rval.view(np.uint8))


@gt.jit
def shifted_bytes(x, out, n, OFF: gl.constexpr, OTHER: gl.constexpr, C: gl.constexpr):
    T: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 16], [T // 4, 4], [1, 1], [1, 0])
    rows = gl.arange(0, T // 4, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, C, layout=gl.SliceLayout(0, L))
    offs = rows[:, None] * C + cols[None, :]
    v = gl.load(x + OFF + offs, mask=offs < n, other=OTHER)  # (n a multiple of 16: one mask a run)
    gl.store(out + offs, v * 3)


@pytest.mark.parametrize("off, kinds", [(0, {"dwordx4"}), (8, {"dwordx2"}), (4, {"dword", "dwordx2"}),
                                        (1, {"ubyte", "dword", "dwordx2"})])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_byte_runs_split_by_alignment(rng, dtype, off, kinds):
    """A 16-byte run starting 1, 4 or 8 bytes past a 16-byte boundary splits into the widest
    aligned pieces (3 bytes + 4 + 8 + 1; 4 + 8 + 4; 8 + 8); mask and ``other`` stay exact."""
    C, n = 64, 16 * 64 - 48
    x = _bytes(rng, dtype, 16 * C + off)
    out, ref = _poison(16 * C, dtype), _poison(16 * C, dtype)
    tk = shifted_bytes.trace(x, out, n, OFF=off, OTHER=OTHER[dtype], C=C, num_warps=1, target="gfx942")
    got = _kinds(_asm(tk, "gfx942"))
    assert got == ({k.replace("ubyte", "sbyte") for k in kinds} if dtype == "int8" else kinds)
    amdsim.simulate(tk, "gfx942", (1,), [x, out, n])
    get("interpreter").run(tk.graph, (1, 1, 1), [x, ref, n])
    assert len(set(ref.view(np.uint8)[:n])) > 100
    np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8))


@gt.jit
def lds_bytes(x, out, n_rows, stride, ORDER: gl.constexpr, FP8: gl.constexpr, R: gl.constexpr,
              C: gl.constexpr):
    T: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 16], [T // 4, 4], [gl.num_warps(), 1], [1, 0])
    Lr: gl.constexpr = gl.BlockedLayout([4, 1], [4, T // 4], [1, gl.num_warps()], [0, 1])
    rows = gl.arange(0, R, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, C, layout=gl.SliceLayout(0, L))
    v = gl.load(x + rows[:, None] * stride + cols[None, :], mask=rows[:, None] < n_rows, other=7)
    s = gl.allocate_shared_memory(x.dtype.element, [R, C],
                                  gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=ORDER))
    s.store(v)
    gl.thread_barrier()
    w = s.load(Lr)
    rr = gl.arange(0, R, layout=gl.SliceLayout(1, Lr))
    cc = gl.arange(0, C, layout=gl.SliceLayout(0, Lr))
    if FP8:
        gl.store(out + rr[:, None] * C + cc[None, :], w.to(gl.float32) - 1.0)
    else:
        gl.store(out + rr[:, None] * C + cc[None, :], w + 1)


@pytest.mark.parametrize("order", [(1, 0), (0, 1)], ids=["row-major", "transposed"])
@pytest.mark.parametrize("target, dtype", [c for c in CASES if c[1] != "uint8"])
def test_loaded_bytes_to_lds(rng, target, dtype, order):
    """Row-major LDS: each thread's 16 loaded bytes are one ds_write_b128 of the loaded dwords
    (no byte extracted or packed); transposed: ds_write_b8 of the loaded dword shifted down
    (byte 0 as it is), one shift per byte at most."""
    R, C, n_rows, stride = 32, 64, 21, 96
    fp8 = dtype.startswith("float8")
    x = _bytes(rng, dtype, R * stride)
    out, ref = _poison(R * C, "f32" if fp8 else dtype), _poison(R * C, "f32" if fp8 else dtype)
    tk = lds_bytes.trace(x, out, n_rows, stride, ORDER=order, FP8=fp8, R=R, C=C, num_warps=2, target=target)
    asm = _asm(tk, target)
    writes = re.findall(r"ds_(?:write|store)_(b\d+)", asm)
    assert _kinds(asm) == {"dwordx4"} and "v_perm_b32" not in asm
    per_thread = R * C // (2 * (32 if target == "gfx1100" else 64))
    if order == (1, 0):
        assert writes == ["b128"] * (per_thread // 16)
    else:
        assert writes == ["b8"] * per_thread
        assert asm.count("v_lshrrev_b32") <= per_thread * 3 // 4 + 2
    amdsim.simulate(tk, target, (1,), [x, out, n_rows, stride])
    get("interpreter").run(tk.graph, (1, 1, 1), [x, ref, n_rows, stride])
    np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8))
    if not fp8:  # rows past n_rows hold other + 1
        assert (ref.reshape(R, C)[n_rows:] == 8).all() and (ref.reshape(R, C)[:n_rows] != 8).any()


def _loop(asm, name):
    return asm.split(f".Lfor_{name}_1:")[1].split(f"s_branch .Lfor_{name}_1")[0]


@pytest.mark.parametrize("name", ["float8e4b8", "float8e5b16"])
def test_fp8_gemm_k_loop_loads_dwords(rng, name):
    """matmul_amd_8bit.matmul_fp8 (matmul_amd's GEMM on the 32x32x16 fp8 MFMA): the K loop's tiles load as one
    global_load_dwordx2 a thread each (8 bytes), no byte loads; A goes to LDS as the loaded
    dwords (ds_write_b64), B (K-contiguous in LDS) as ds_write_b8 of the dwords shifted down;
    no byte extracted, no wait for the loads before the MFMAs. Edge tiles masked on amdsim."""
    from gluon_trace.kernels.matmul_amd_8bit import matmul_fp8
    ml = NP[name]
    M, N, K = 100, 80, 80  # (N, K multiples of 16, as the strides must be for 8-byte runs)
    scale = 4.0 if name == "float8e4b8" else 64.0
    a = (rng.standard_normal((M, K)) * scale).astype(ml)
    b = (rng.standard_normal((K, N)) * scale).astype(ml)
    got = np.full((M, N), np.nan, np.float32)
    ref = np.full((M, N), np.nan, np.float32)
    args = (M, N, K, K, N, N)
    cx = dict(BM=64, BN=64, BK=32)
    tk = matmul_fp8.trace(a, b, got, *args, **cx, num_warps=4, target="gfx942")
    body = _loop(_asm(tk, "gfx942"), "matmul_fp8")
    ops = [ln.split()[0] for ln in body.splitlines() if ln.strip() and not ln.strip().startswith((";", "."))]
    count = ops.count
    assert count("global_load_dwordx2") == 2
    assert not [o for o in ops if o.startswith("global_load_") and "dword" not in o]
    assert count("ds_write_b64") == 1 and count("ds_write_b8") == 8 and count("v_lshrrev_b32") == 6
    assert count("v_bfe_u32") == 0 and count("v_perm_b32") == 0 and count("v_mfma_f32_32x32x16_" + (
        "fp8_fp8" if name == "float8e4b8" else "bf8_bf8")) == 2
    assert count("s_and_saveexec_b64") == 2  # one mask a tile
    assert "vmcnt" not in body[:body.index("v_mfma")]
    amdsim.simulate(tk, "gfx942", (2, 2), [a, b, got, *args])
    matmul_fp8[(2, 2)](a, b, ref, *args, **cx, num_warps=4, backend="interpreter", target="gfx942")
    av, bv = a.astype(np.float64), b.astype(np.float64)
    tol = 1e-5 * (np.abs(av) @ np.abs(bv)) + 1e-30
    assert np.all(np.abs(got - av @ bv) <= tol) and np.all(np.abs(ref - av @ bv) <= tol)


@pytest.mark.parametrize("target", ["gfx942", "gfx90a"])
def test_int8_gemm_k_loop_loads_dwords(rng, target):
    """matmul_amd_8bit.matmul_i8 (int32 results, exact): global_load_dwordx2 tiles, A to LDS as
    the loaded dwords, no byte loads or extractions in the K loop; edge tiles masked, full-range
    int8 operands, results equal to the interpreter's and numpy's."""
    from gluon_trace.kernels.matmul_amd_8bit import matmul_i8
    M, N, K = 100, 80, 80
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    got = np.full((M, N), -123456789, np.int32)
    ref = got.copy()
    args = (M, N, K, K, N, N)
    cx = dict(BM=64, BN=64, BK=32, CDNA=3 if target == "gfx942" else 2)
    tk = matmul_i8.trace(a, b, got, *args, **cx, num_warps=4, target=target)
    body = _loop(_asm(tk, target), "matmul_i8")
    ops = [ln.split()[0] for ln in body.splitlines() if ln.strip() and not ln.strip().startswith((";", "."))]
    mfma = "v_mfma_i32_32x32x16_i8" if target == "gfx942" else "v_mfma_i32_32x32x8i8"
    assert ops.count(mfma) == (2 if target == "gfx942" else 4)
    assert ops.count("global_load_dwordx2") == 2
    assert not [o for o in ops if o.startswith("global_load_") and "dword" not in o]
    assert ops.count("ds_write_b64") == 1 and ops.count("ds_write_b8") == 8 and ops.count("v_lshrrev_b32") == 6
    assert not [o for o in ops if o.startswith(("v_bfe", "v_perm"))]
    assert "vmcnt" not in body[:body.index("v_mfma")]
    amdsim.simulate(tk, target, (2, 2), [a, b, got, *args])
    matmul_i8[(2, 2)](a, b, ref, *args, **cx, num_warps=4, backend="interpreter", target=target)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(ref, a.astype(np.int64) @ b.astype(np.int64))


@gt.jit
def const_casts(out, D: gl.constexpr, V0: gl.constexpr, V1: gl.constexpr, V2: gl.constexpr,
                V3: gl.constexpr, V4: gl.constexpr, V5: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0])
    offs = gl.arange(0, 32, layout=L)
    gl.store(out + offs, gl.full([32], V0, gl.float32, L).to(D))
    gl.store(out + 32 + offs, gl.full([32], V1, gl.float32, L).to(D))
    gl.store(out + 64 + offs, gl.full([32], V2, gl.float32, L).to(D))
    gl.store(out + 96 + offs, gl.full([32], V3, gl.float32, L).to(D))
    gl.store(out + 128 + offs, gl.full([32], V4, gl.float32, L).to(D))
    gl.store(out + 160 + offs, gl.full([32], V5, gl.float32, L).to(D))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "uint32"])
def test_float_constants_to_integers_fold(dtype):
    """A float constant converted to an integer type (as an integer load's ``other=0.0`` is) is
    folded at compile time by the interpreter's rule: truncate, saturate, NaN -> 0."""
    vals = dict(V0=float("nan"), V1=float("inf"), V2=-float("inf"), V3=300.75, V4=-300.75, V5=-0.9)
    npd = np.dtype(dtype)
    out = np.full(192, 77, npd)
    ref = out.copy()
    tk = const_casts.trace(out, D=getattr(gl, dtype), **vals, num_warps=1, target="gfx942")
    assert "v_cvt_i32_f32" not in _asm(tk, "gfx942") and "v_cvt_u32_f32" not in _asm(tk, "gfx942")
    amdsim.simulate(tk, "gfx942", (1,), [out])
    get("interpreter").run(tk.graph, (1, 1, 1), [ref])
    np.testing.assert_array_equal(out, ref)
    info = np.iinfo(npd)
    want = [0, info.max, info.min, min(300, info.max), max(-300, info.min), 0]
    np.testing.assert_array_equal(ref.reshape(6, 32)[:, 0], np.array(want).astype(npd))


@gt.jit
def k_loop_bytes(x, out, K, START: gl.constexpr, BK: gl.constexpr):
    T: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 16], [T // 4, 4], [1, 1], [1, 0])
    rows = gl.arange(0, T // 4, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, BK, layout=gl.SliceLayout(0, L))
    acc = gl.zeros([T // 4, BK], gl.int32, L)
    for k0 in gl.range(START, K, BK):
        v = gl.load(x + rows[:, None] * K + k0 + cols[None, :], mask=k0 + cols[None, :] < K, other=0)
        acc += v.to(gl.int32)
    gl.store(out + rows[:, None] * BK + cols[None, :], acc)


@pytest.mark.parametrize("start, kinds", [(0, {"dwordx4"}), (4, {"dword"})])
@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_loop_counter_alignment(rng, target, start, kinds):
    """gl.range(start, K, 64)'s counter is a multiple of what divides start and the step, so a
    16-byte run at x + row * K + k0 is proven aligned (start 0) or 4-byte aligned (start 4);
    K = 13 * 16: the last step is masked per run."""
    T = 32 if target == "gfx1100" else 64
    K = 208
    x = _bytes(rng, "int8", T // 4 * K)
    out = np.full(T // 4 * 64, -77, np.int32)
    ref = out.copy()
    tk = k_loop_bytes.trace(x, out, K, START=start, BK=64, num_warps=1, target=target)
    assert _kinds(_asm(tk, target)) == kinds
    amdsim.simulate(tk, target, (1,), [x, out, K])
    get("interpreter").run(tk.graph, (1, 1, 1), [x, ref, K])
    np.testing.assert_array_equal(out, ref)
    xs = x.reshape(T // 4, K).astype(np.int32)
    want = np.zeros((T // 4, 64), np.int32)
    for k0 in range(start, K, 64):
        w = min(64, K - k0)
        want[:, :w] += xs[:, k0:k0 + w]
    np.testing.assert_array_equal(ref.reshape(T // 4, 64), want)


@pytest.mark.parametrize("kw, load", [(8, "global_load_dwordx2"), (16, "global_load_dwordx4")])
def test_fp8_operands_straight_from_global(rng, kw, load):
    """A loaded from global memory straight into its MFMA operand layout (K-contiguous: 16 bytes a
    lane) is one dwordx4 (k_width 16) or two dwordx2 (k_width 8) a step, handed to the MFMA as
    loaded; only B (K strided in memory) is loaded by bytes and packed (3 v_perm a dword)."""
    from test_amd_fp8 import fp8_mma_kernel
    m = n = k = 64
    ml = NP["float8e4b8"]
    a = (rng.standard_normal((m, k)) * 4).astype(ml)
    b = (rng.standard_normal((k, n)) * 4).astype(ml)
    cx = dict(BM=64, BN=64, BK=32, F8=gl.float8e4b8, IM=32, TR=False, SOURCE="fp8", KW=kw)
    got = np.full((m, n), np.nan, np.float32)
    ref = np.full((m, n), np.nan, np.float32)
    tk = fp8_mma_kernel.trace(got, a, b, m, n, k, **cx, num_warps=4, target="gfx942")
    body = _loop(_asm(tk, "gfx942"), "fp8_mma_kernel")
    ops = [ln.split()[0] for ln in body.splitlines() if ln.strip() and not ln.strip().startswith((";", "."))]
    assert ops.count(load) == (2 if kw == 8 else 1)
    assert ops.count("global_load_ubyte") == 16 and ops.count("v_perm_b32") == 12
    amdsim.simulate(tk, "gfx942", (1,), [got, a, b, m, n, k])
    fp8_mma_kernel[(1,)](ref, a, b, m, n, k, **cx, num_warps=4, backend="interpreter", target="gfx942")
    av, bv = a.astype(np.float64), b.astype(np.float64)
    tol = 1e-5 * (np.abs(av) @ np.abs(bv)) + 1e-30
    assert np.all(np.abs(got - av @ bv) <= tol) and np.all(np.abs(ref - av @ bv) <= tol)


@gt.jit
def byte_rows_any(x, out_raw, out_val, n_rows, n_cols, stride, OFF: gl.constexpr, OTHER: gl.constexpr,
                  V: gl.constexpr, FP8: gl.constexpr):
    T: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, V], [T // 4, 4], [1, 1], [1, 0])
    rows = gl.arange(0, T // 4, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, 4 * V, layout=gl.SliceLayout(0, L))
    m = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    v = gl.load(x + OFF + rows[:, None] * stride + cols[None, :], mask=m, other=OTHER)
    o = rows[:, None] * (4 * V) + cols[None, :]
    gl.store(out_raw + o, v)
    if FP8:
        gl.store(out_val + o, v.to(gl.float32) - 0.5)
    else:
        gl.store(out_val + o, v - 7)


@pytest.mark.parametrize("target", ["gfx90a", "gfx942", "gfx1100"])
def test_random_byte_loads(rng, target):
    """Six random cases a run: run length (4, 8, 16 bytes a thread), start offset, row stride
    (a multiple of 16 or not), bounds (multiples of 16 or odd), ``other`` and type; whatever
    loads they vectorize into, amdsim's bytes and results equal the interpreter's."""
    T = 32 if target == "gfx1100" else 64
    types = ["int8", "uint8"] + (["float8e4b8", "float8e5b16"] if target == "gfx942" else [])
    for _ in range(6):
        dtype = str(rng.choice(types))
        fp8 = dtype.startswith("float8")
        V = int(rng.choice([4, 8, 16]))
        C, R = 4 * V, T // 4
        off = int(rng.integers(0, 16))
        stride = int(C + rng.choice([0, 16, 32, int(rng.integers(1, 40))]))
        n_rows = int(rng.integers(1, R + 1))
        n_cols = int(rng.choice([C, 16 * int(rng.integers(1, C // 16 + 1)) if C >= 16 else C,
                                 int(rng.integers(1, C + 1))]))
        other = float(rng.choice([-2.5, 0.75, 4.0])) if fp8 else int(rng.integers(-128 if dtype == "int8" else 0,
                                                                               128 if dtype == "int8" else 256))
        x = _bytes(rng, dtype, off + R * stride)
        outs = {}
        for backend in ("amdsim", "interpreter"):
            raw, val = _poison(R * C, dtype), _poison(R * C, "f32" if fp8 else dtype)
            args = [x, raw, val, n_rows, n_cols, stride]
            tk = byte_rows_any.trace(*args, OFF=off, OTHER=other, V=V, FP8=fp8, num_warps=1, target=target)
            if backend == "amdsim":
                amdsim.simulate(tk, target, (1,), args)
            else:
                get("interpreter").run(tk.graph, (1, 1, 1), args)
            outs[backend] = (raw.view(np.uint8).copy(), val.view(np.uint8).copy())
        case = (dtype, V, off, stride, n_rows, n_cols, other, sorted(_kinds(_asm(tk, target))))
        np.testing.assert_array_equal(outs["amdsim"][0], outs["interpreter"][0], err_msg=str(case))
        np.testing.assert_array_equal(outs["amdsim"][1], outs["interpreter"][1], err_msg=str(case))
        want = x.view(np.uint8)[off:off + R * stride].reshape(R, stride)[:, :C].copy()
        want[n_rows:] = want[:, n_cols:] = np.array(other).astype(NP[dtype]).view(np.uint8)
        np.testing.assert_array_equal(outs["interpreter"][0].reshape(R, C), want, err_msg=str(case))

"""Shared memory (LDS) on AMD: buffers, views, barriers and async copies, run on the simulator
for gfx90a, gfx942 (wave64) and gfx1100 (wave32) against the interpreter and numpy, on random
inputs with poisoned outputs. The simulator checks LDS alignment and rejects an access to
bytes another wave touched since the last s_barrier, so a missing barrier fails here."""
import os
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.ampere import async_copy
from gluon_trace.layouts import free_bits

import amdsim

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))  # tests/: the first-week kernels
from test_first_week_hopper import LINEAR_BASES, linear_smem_transpose  # noqa: E402

TARGETS = ["gfx90a", "gfx942", "gfx1100"]
POISON = {np.float32: np.float32(np.nan), np.int32: np.int32(-123456789)}


pytestmark = pytest.mark.usefixtures("amd_toolchain")  # conftest: a fresh cache; skip without an assembler


def blocked(spec, nw):
    """A 2-D blocked layout from (size_per_thread, lanes along dim 0 as log2, order) that
    fits either wave size."""
    spt, t0, order = spec
    tpw = gl.threads_per_warp()
    t0 = min(t0, tpw.bit_length() - 1)
    return gl.BlockedLayout(list(spt), [1 << t0, tpw >> t0], [nw, 1] if order[0] == 1 else [1, nw],
                            list(order))


def blocked_linear(spec, shape, nw, wave):
    spt, t0, order = spec
    t0 = min(t0, wave.bit_length() - 1)
    lay = gl.BlockedLayout(list(spt), [1 << t0, wave >> t0], [nw, 1] if order[0] == 1 else [1, nw], list(order))
    return lay.to_linear(shape, nw, wave)


def shared(spec, shape, dtype):
    kind = spec[0]
    if kind == "sw":
        return gl.SwizzledSharedLayout(vec=spec[1], per_phase=spec[2], max_phase=spec[3], order=list(spec[4]))
    if kind == "nvmma":
        return gl.NVMMASharedLayout.get_default_for(list(shape[-2:]), dtype, transposed=spec[1])
    return gl.PaddedSharedLayout.with_identity_for([[spec[1], spec[2]]], list(shape[-2:]), list(spec[3]))


DTYPES = {"float32": gl.float32, "float16": gl.float16, "bfloat16": gl.bfloat16, "int8": gl.int8,
          "int16": gl.int16, "uint8": gl.uint8, "float64": gl.float64, "int32": gl.int32}


def run_both(kernel, target, outs, ins, grid=(1,), **kw):
    """The simulator's and the interpreter's outputs, each from poisoned buffers."""
    sim_outs = [np.full_like(o, POISON[o.dtype.type]) for o in outs]
    ref_outs = [np.full_like(o, POISON[o.dtype.type]) for o in outs]
    tk = kernel.trace(*sim_outs, *ins, target=target, **kw)
    amdsim.simulate(tk, target, grid, sim_outs + list(ins))
    kernel[grid](*ref_outs, *ins, backend="interpreter", **kw)
    return sim_outs, ref_outs, tk


def lowered(tk, target):
    from gluon_trace.backends.amd.compiler import lower
    return lower(tk.for_target(target).graph, target)


# -- round trips: store in one register layout, load in another --------------------------------

@gt.jit
def roundtrip_kernel(y_ptr, x_ptr, M: gl.constexpr, N: gl.constexpr, A: gl.constexpr,
                     B: gl.constexpr, SL: gl.constexpr, DT: gl.constexpr, INIT: gl.constexpr,
                     NW: gl.constexpr):
    LA, LB = blocked(A, NW), blocked(B, NW)
    dt = DTYPES[DT]
    r = gl.arange(0, M, layout=gl.SliceLayout(1, LA))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, LA))
    x = gl.load(x_ptr + r[:, None] * N + c[None, :]).to(dt)
    if INIT:
        s = gl.allocate_shared_memory(dt, [M, N], shared(SL, [M, N], dt), value=x)
    else:
        s = gl.allocate_shared_memory(dt, [M, N], shared(SL, [M, N], dt))
        s.store(x)
    y = s.load(LB)
    rb = gl.arange(0, M, layout=gl.SliceLayout(1, LB))
    cb = gl.arange(0, N, layout=gl.SliceLayout(0, LB))
    gl.store(y_ptr + rb[:, None] * N + cb[None, :], y.to(gl.float32))


ROW4 = ((1, 4), 2, (1, 0))      # 4 consecutive elements of a row per thread
ROW8 = ((1, 8), 1, (1, 0))
COL4 = ((4, 1), 4, (0, 1))      # 4 consecutive elements of a column: a transposing access
ONE = ((1, 1), 3, (1, 0))
SW = ("sw", 4, 1, 8, (1, 0))
CASES = [  # (dtype, shared layout, store layout, load layout, initial value)
    ("float32", SW, ROW4, COL4, False),
    ("float32", ("sw", 1, 1, 1, (1, 0)), COL4, ROW4, True),
    ("float32", ("sw", 2, 2, 4, (0, 1)), ROW4, ONE, False),
    ("float16", ("sw", 8, 1, 8, (1, 0)), ROW8, COL4, False),
    ("float16", ("nvmma", False), ROW8, ROW8, True),
    ("bfloat16", ("nvmma", True), ROW8, COL4, False),
    ("bfloat16", ("pad", 32, 2, (1, 0)), ROW4, ONE, False),
    ("int8", ("sw", 16, 1, 4, (1, 0)), ((1, 16), 0, (1, 0)), COL4, False),
    ("uint8", ("pad", 64, 4, (1, 0)), ROW8, ((2, 1), 3, (0, 1)), True),
    ("int16", ("pad", 16, 1, (0, 1)), COL4, ROW4, False),
    ("float64", SW, ((1, 2), 2, (1, 0)), COL4, False),
    ("int32", ("nvmma", False), ONE, ROW4, False),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1][0]}")
def test_roundtrip(target, case):
    dt, sl, a, b, init = case
    M, N, nw = 32, 64, 4
    rng = np.random.default_rng(abs(hash((target, str(case)))) % 2**32)
    if dt in ("int8", "uint8", "int16", "int32"):
        lo, hi = {"int8": (-128, 128), "uint8": (0, 256), "int16": (-32768, 32768),
                  "int32": (-2**24, 2**24)}[dt]
        x = rng.integers(lo, hi, (M, N)).astype(np.float32)
    else:
        x = rng.standard_normal((M, N)).astype(np.float32) * 100
    y = np.zeros_like(x)
    (ys,), (yr,), tk = run_both(roundtrip_kernel, target, [y], [x], M=M, N=N, A=a, B=b, SL=sl, DT=dt,
                                INIT=init, NW=nw, num_warps=nw)
    np.testing.assert_array_equal(ys, yr)
    if dt in ("float16", "float64") or dt.startswith(("int", "uint")):
        expect = x.astype(np.float16).astype(np.float32) if dt == "float16" else x
        np.testing.assert_array_equal(ys, expect)
    else:  # bfloat16: x rounded to 8 significant bits
        np.testing.assert_allclose(ys, x, rtol=2 ** -8)


def test_vector_widths():
    """The swizzle keeps 4 f32 (or 8 f16) of a row together: one ds_write_b128 per run; a
    column-wise load of the same buffer reads single elements, two per ds_read2_b32."""
    M, N, nw, t = 32, 64, 4, "gfx942"
    x, y = np.zeros((M, N), np.float32), np.zeros((M, N), np.float32)
    tk = roundtrip_kernel.trace(y, x, M=M, N=N, A=ROW4, B=COL4, SL=SW, DT="float32", INIT=False,
                                NW=nw, num_warps=nw, target=t)
    text = lowered(tk, t).text
    assert text.count("ds_write_b128") == M * N // (4 * 64 * nw) and "ds_write_b32" not in text
    col4 = blocked_linear(COL4, (M, N), nw, 64)
    # column elements are single dwords, read two per ds_read2_b32
    assert text.count("ds_read2_b32") * 2 == col4.num_regs >> bin(free_bits(col4)["reg"]).count("1")
    assert "ds_read_b32" not in text
    tk = roundtrip_kernel.trace(y, x, M=M, N=N, A=ROW8, B=ROW8, SL=("sw", 8, 1, 8, (1, 0)),
                                DT="float16", INIT=False, NW=nw, num_warps=nw, target=t)
    text = lowered(tk, t).text
    row8 = blocked_linear(ROW8, (M, N), nw, 64)
    runs = (row8.num_regs >> bin(free_bits(row8)["reg"]).count("1")) // 8
    assert text.count("ds_write_b128") == text.count("ds_read_b128") == runs
    # a swizzle with vec=2 breaks runs of 8 f16 into pairs
    tk = roundtrip_kernel.trace(y, x, M=M, N=N, A=ROW8, B=ROW8, SL=("sw", 2, 1, 8, (1, 0)),
                                DT="float16", INIT=False, NW=nw, num_warps=nw, target=t)
    text = lowered(tk, t).text
    assert "ds_write_b128" not in text and text.count("ds_write2") == 2 * runs  # (st64: rows apart)


# -- views ------------------------------------------------------------------------------------------

@gt.jit
def views_kernel(o_idx, o_perm, o_slice, o_resh, o_bits, x_ptr, i, M: gl.constexpr, N: gl.constexpr,
                 NW: gl.constexpr):
    L = blocked(ROW4, NW)
    LT = blocked(COL4, NW)
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    offs = r[:, None] * N + c[None, :]
    x0 = gl.load(x_ptr + offs)
    x1 = gl.load(x_ptr + M * N + offs)
    sl = gl.SwizzledSharedLayout(vec=4, per_phase=2, max_phase=4, order=[1, 0])
    bufs = gl.allocate_shared_memory(gl.float32, [4, M, N], sl)
    bufs.index(0).store(x0)
    bufs.index(i).store(x1)              # a run-time index (i = 1 or 2)
    bufs.index(3 - i).store(x0 * 3.0)
    bufs.index(3).store(x1 * 5.0)
    gl.store(o_idx + offs, bufs.index(i).load(L) - bufs.index(0).load(L))
    # permute: the transposed view, loaded row-wise
    rt = gl.arange(0, N, layout=gl.SliceLayout(1, L))
    ct = gl.arange(0, M, layout=gl.SliceLayout(0, L))
    gl.store(o_perm + rt[:, None] * M + ct[None, :], bufs.index(0).permute((1, 0)).load(L))
    # slice: a column block of the second buffer, and a row block of the stacked dim
    cs = gl.arange(0, N // 4, layout=gl.SliceLayout(0, LT))
    rs = gl.arange(0, M, layout=gl.SliceLayout(1, LT))
    part = bufs.index(i).slice(N // 2, N // 4, dim=1).load(LT)
    gl.store(o_slice + rs[:, None] * (N // 4) + cs[None, :], part)
    # reshape: the stacked [4, M, N] as [2, 2 * M, N] (the swizzle period divides M)
    L3 = blocked(ROW4, NW)
    r3 = gl.arange(0, 2 * M, layout=gl.SliceLayout(1, L3))
    c3 = gl.arange(0, N, layout=gl.SliceLayout(0, L3))
    flat = bufs.reshape([2, 2 * M, N]).index(1).load(L3)
    gl.store(o_resh + r3[:, None] * N + c3[None, :], flat)
    # reinterpret: the f32 bytes of buffer 0 as int32
    bits = bufs.index(0).reinterpret(gl.int32, [M, N], sl).load(L)
    gl.store(o_bits + offs, bits)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("i", [1, 2])
def test_views(target, i):
    M, N, nw = 16, 32, 2
    x = np.random.default_rng(i).standard_normal((2, M, N)).astype(np.float32)
    outs = [np.zeros((M, N), np.float32), np.zeros((N, M), np.float32), np.zeros((M, N // 4), np.float32),
            np.zeros((2 * M, N), np.float32), np.zeros((M, N), np.int32)]
    sims, refs, tk = run_both(views_kernel, target, outs, [x, i], M=M, N=N, NW=nw, num_warps=nw)
    for s, r in zip(sims, refs):
        np.testing.assert_array_equal(s, r)
    bufs = [x[0], x[1] if i == 1 else x[0] * 3, x[0] * 3 if i == 1 else x[1], x[1] * 5]
    np.testing.assert_array_equal(sims[0], x[1] - x[0])
    np.testing.assert_array_equal(sims[1], x[0].T)
    np.testing.assert_array_equal(sims[2], x[1][:, N // 2:N // 2 + N // 4])
    np.testing.assert_array_equal(sims[3], np.concatenate(bufs[2:]))
    np.testing.assert_array_equal(sims[4], x[0].view(np.int32))
    text = lowered(tk, target).text
    assert "s_mul_i32" in text  # the run-time index scales the buffer stride


# -- a ring of two buffers in a loop -------------------------------------------------------------

@gt.jit
def ring_kernel(out_ptr, x_ptr, K, M: gl.constexpr, N: gl.constexpr, NW: gl.constexpr):
    L = blocked(ROW4, NW)
    LT = blocked(COL4, NW)
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    offs = r[:, None] * N + c[None, :]
    bufs = gl.allocate_shared_memory(gl.float16, [2, M, N],
                                     gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=4, order=[1, 0]))
    bufs.index(0).store(gl.load(x_ptr + offs).to(gl.float16))
    acc = gl.zeros([M, N], gl.float32, LT)
    for k in gl.range(0, K):
        s = k % 2
        nxt = gl.load(x_ptr + (k + 1) * M * N + offs, mask=k + 1 < K, other=0.0)
        acc = acc * 0.5 + bufs.index(s).load(LT).to(gl.float32)
        bufs.index(1 - s).store(nxt.to(gl.float16))
    rt = gl.arange(0, M, layout=gl.SliceLayout(1, LT))
    ct = gl.arange(0, N, layout=gl.SliceLayout(0, LT))
    gl.store(out_ptr + rt[:, None] * N + ct[None, :], acc)


@pytest.mark.parametrize("target", TARGETS)
def test_double_buffered_loop(target):
    M, N, K, nw = 16, 64, 5, 4
    x = np.random.default_rng(7).standard_normal((K, M, N)).astype(np.float32)
    (s,), (r,), tk = run_both(ring_kernel, target, [np.zeros((M, N), np.float32)], [x, K], M=M, N=N,
                              NW=nw, num_warps=nw)
    np.testing.assert_array_equal(s, r)
    want = np.zeros((M, N), np.float32)
    for k in range(K):
        want = want * np.float32(0.5) + x[k].astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(s, want, rtol=1e-6)
    assert lowered(tk, target).text.count("s_barrier") >= 2  # membar: before the load and the store


# -- async copies ------------------------------------------------------------------------------------

@gt.jit
def async_kernel(out_ptr, x_ptr, rows, cols, M: gl.constexpr, N: gl.constexpr, DT: gl.constexpr,
                 NW: gl.constexpr, HINT: gl.constexpr):
    L = blocked(ROW8 if DT != "float32" else ROW4, NW)
    LT = blocked(COL4, NW)
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    dt = DTYPES[DT]
    s = gl.allocate_shared_memory(dt, [M, N], gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8,
                                                                    order=[1, 0]))
    # masked rows and columns are zero-filled; with cols % 8 == 0 known, runs of 8 share a mask
    if HINT:
        cols = gl.multiple_of(cols, 8)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    async_copy.async_load(s, x_ptr + r[:, None] * N + c[None, :], mask=mask)
    async_copy.commit_group()
    async_copy.wait_group(0)
    y = s.load(LT).to(gl.float32)
    rt = gl.arange(0, M, layout=gl.SliceLayout(1, LT))
    ct = gl.arange(0, N, layout=gl.SliceLayout(0, LT))
    gl.store(out_ptr + rt[:, None] * N + ct[None, :], y)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dt,rows,cols", [("float32", 13, 40), ("float16", 32, 24), ("int8", 5, 64),
                                          ("float16", 9, 37)])
def test_async_copy(target, dt, rows, cols):
    M, N, nw = 32, 64, 2
    rng = np.random.default_rng(rows * cols)
    npdt = {"float32": np.float32, "float16": np.float16, "int8": np.int8}[dt]
    x = (rng.standard_normal((M, N)) * 50).astype(npdt)
    (s,), (r,), tk = run_both(async_kernel, target, [np.zeros((M, N), np.float32)], [x, rows, cols],
                              M=M, N=N, DT=dt, NW=nw, HINT=cols % 8 == 0, num_warps=nw)
    np.testing.assert_array_equal(s, r)
    want = np.zeros((M, N), np.float32)
    want[:rows, :cols] = x[:rows, :cols]
    np.testing.assert_array_equal(s, want)
    text = lowered(tk, target).text
    if cols % 8 == 0:  # 16 (f32, f16) or 8 (int8) bytes per global load and LDS write
        wide = {"float32": 16, "float16": 16, "int8": 8}[dt]
        assert f"ds_write_b{8 * wide}" in text and f"global_load_dwordx{wide // 4}" in text
        assert "ds_write_b32" not in text


# -- barriers ---------------------------------------------------------------------------------------

@gt.jit
def race_kernel(out_ptr, x_ptr, M: gl.constexpr, N: gl.constexpr, NW: gl.constexpr):
    L = blocked(ROW4, NW)
    LT = blocked(COL4, NW)
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    s = gl.allocate_shared_memory(gl.float32, [M, N], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
    s.store(gl.load(x_ptr + r[:, None] * N + c[None, :]))
    y = s.load(LT)              # other waves' elements: needs a barrier after the store
    s.store(y * 2.0)            # overwrites what other waves may still read: another one
    z = s.load(L)
    gl.store(out_ptr + r[:, None] * N + c[None, :], z)


@pytest.mark.parametrize("target", TARGETS)
def test_membar_barriers_and_the_race_without_them(target, monkeypatch):
    M, N, nw = 32, 64, 4
    x = np.random.default_rng(1).standard_normal((M, N)).astype(np.float32)
    (s,), (r,), tk = run_both(race_kernel, target, [np.zeros((M, N), np.float32)], [x], M=M, N=N, NW=nw,
                              num_warps=nw)
    np.testing.assert_array_equal(s, x * 2)
    np.testing.assert_array_equal(r, x * 2)
    code = [i.op for i in lowered(tk, target).code if hasattr(i, "op")]
    first_read = next(k for k, o in enumerate(code) if o.startswith("ds_read"))
    assert "s_barrier" in code[:first_read]
    # the same kernel with membar's barriers left out: the simulator sees the race
    import gluon_trace.membar as membar
    monkeypatch.setattr(membar, "barriers", lambda graph, plan=None: set())
    out = np.zeros((M, N), np.float32)
    with pytest.raises(amdsim.SimError, match="LDS race"):
        amdsim.simulate(tk, target, (1,), [out, x])


@gt.jit
def user_barrier_kernel(out_ptr, x_ptr, N: gl.constexpr, NW: gl.constexpr):
    L1: gl.constexpr = gl.BlockedLayout([1], [gl.threads_per_warp()], [NW], [0])
    L2: gl.constexpr = gl.BlockedLayout([4], [gl.threads_per_warp()], [NW], [0])
    s = gl.allocate_shared_memory(gl.int32, [N], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    s.store(gl.load(x_ptr + gl.arange(0, N, layout=L1)))
    gl.thread_barrier()         # the user's barrier: membar adds none of its own
    gl.store(out_ptr + gl.arange(0, N, layout=L2), s.load(L2))


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_thread_barrier(target):
    N, nw = 256, 2
    x = np.random.default_rng(2).integers(-1000, 1000, N).astype(np.int32)
    (s,), (r,), tk = run_both(user_barrier_kernel, target, [np.zeros(N, np.int32)], [x], N=N, NW=nw,
                              num_warps=nw)
    np.testing.assert_array_equal(s, x)
    np.testing.assert_array_equal(r, x)
    assert "s_barrier" in lowered(tk, target).text


# -- LDS budget and errors ----------------------------------------------------------------------------

@gt.jit
def big_kernel(out_ptr, x_ptr, M: gl.constexpr, N: gl.constexpr, NW: gl.constexpr):
    L = blocked(ROW4, NW)
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    x = gl.load(x_ptr + r[:, None] * N + c[None, :])
    s = gl.allocate_shared_memory(gl.float32, [M, N], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
    s.store(x)
    y = s.load(L)
    gl.store(out_ptr + c, gl.sum(y, axis=0))   # across warps: LDS scratch above s


def test_scratch_sits_above_the_buffers():
    M, N, nw, t = 64, 64, 4, "gfx942"
    x = np.random.default_rng(5).integers(-9, 9, (M, N)).astype(np.float32)
    tk = big_kernel.trace(np.zeros(N, np.float32), x, M=M, N=N, NW=nw, num_warps=nw, target=t)
    e = lowered(tk, t)
    assert e.lds > M * N * 4  # the metadata covers the buffer and the reduction's scratch
    out = np.full(N, np.nan, np.float32)
    amdsim.simulate(tk, t, (1,), [out, x])
    np.testing.assert_array_equal(out, x.sum(0))


def test_over_the_lds_limit_is_an_error():
    M, N, nw, t = 128, 128, 4, "gfx942"   # 64 KiB of buffer + the reduction's scratch
    tk = big_kernel.trace(np.zeros(N, np.float32), np.zeros((M, N), np.float32), M=M, N=N, NW=nw,
                          num_warps=nw, target=t)
    with pytest.raises(gt.CompileError, match="scratch above the kernel's 65536 bytes") as e:
        lowered(tk, t)
    assert e.value.loc is not None and e.value.loc.file.endswith("test_amd_lds.py")
    tk = big_kernel.trace(np.zeros(2 * N, np.float32), np.zeros((M, 2 * N), np.float32), M=M, N=2 * N,
                          NW=nw, num_warps=nw, target=t)
    with pytest.raises(gt.CompileError, match="bytes of shared memory; gfx942 has 65536") as e:
        lowered(tk, t)
    assert "line" in str(e.value) and e.value.loc.file.endswith("test_amd_lds.py")


@gt.jit
def mbarrier_kernel(x_ptr):
    from gluon_trace.language.nvidia.ampere import mbarrier
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    gl.store(x_ptr, 1)


@gt.jit
def bool_kernel(x_ptr, N: gl.constexpr):
    L1: gl.constexpr = gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0])
    s = gl.allocate_shared_memory(gl.int1, [N], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    s.store(gl.arange(0, N, layout=L1) < 3)


def test_nvidia_only_and_refused_ops_name_the_line():
    tk = mbarrier_kernel.trace(np.zeros(1, np.int32), target="gfx942")
    with pytest.raises(gt.CompileError, match="NVIDIA instruction .*mbarrier.*On AMD") as e:
        lowered(tk, "gfx942")
    assert e.value.loc is not None and e.value.loc.file.endswith("test_amd_lds.py")
    tk = bool_kernel.trace(np.zeros(1, np.int32), N=64, num_warps=1, target="gfx942")
    with pytest.raises(gt.CompileError, match="int1 shared buffers") as e:
        lowered(tk, "gfx942")
    assert e.value.loc is not None


def test_packed_reuses_the_loaded_dwords(monkeypatch):
    """MMA operands need 16-bit pairs packed in dwords: ``lds_words.packed`` hands back the dword a
    ds_read brought them in (no unpack/repack), and packs elements that came from elsewhere."""
    from gluon_trace.backends.amd import lds_words, rules
    from gluon_trace.backends.amd.mir import Sub
    seen = []
    plain = rules.RULES["store"]

    def store(em, op):
        xs = em.elems(op.operands[1])
        if op.operands[1].type.dtype.name == "float32" and len(xs) >= 8:
            src = em.vals.get(op.operands[1].owner.operands[0]) if op.operands[1].owner else None
            if src:  # the f16 tile the stored f32 was converted from
                seen.append(lds_words.packed(em, gl.float16, src))
        plain(em, op)
    monkeypatch.setitem(rules.RULES, "store", store)
    M, N, nw, t = 32, 64, 4, "gfx942"
    x, y = np.zeros((M, N), np.float32), np.zeros((M, N), np.float32)
    tk = roundtrip_kernel.trace(y, x, M=M, N=N, A=ROW8, B=ROW8, SL=("sw", 8, 1, 8, (1, 0)),
                                DT="float16", INIT=False, NW=nw, num_warps=nw, target=t)
    code = lowered(tk, t).code
    reads = {id(i.defs[0]) for i in code if getattr(i, "op", "") == "ds_read_b128"}
    assert seen and all(isinstance(w, Sub) and id(w.reg) in reads for words in seen for w in words)


@gt.jit
def pipelined_kernel(out_ptr, x_ptr, K, M: gl.constexpr, N: gl.constexpr, NW: gl.constexpr):
    L = blocked(ROW4, NW)
    LT = blocked(COL4, NW)
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    offs = r[:, None] * N + c[None, :]
    bufs = gl.allocate_shared_memory(gl.float32, [2, M, N],
                                     gl.SwizzledSharedLayout(vec=4, per_phase=1, max_phase=8, order=[1, 0]))
    async_copy.async_load(bufs.index(0), x_ptr + offs)
    async_copy.commit_group()
    acc = gl.zeros([M, N], gl.float32, LT)
    for k in gl.range(0, K):
        s = k % 2
        nxt = (k + 1 < K) & (offs >= 0)
        async_copy.async_load(bufs.index(1 - s), x_ptr + (k + 1) * M * N + offs, mask=nxt)
        async_copy.commit_group()
        async_copy.wait_group(1)    # this stage's copy has landed; the next one is in flight
        acc = acc * 0.5 + bufs.index(s).load(LT)
    rt = gl.arange(0, M, layout=gl.SliceLayout(1, LT))
    ct = gl.arange(0, N, layout=gl.SliceLayout(0, LT))
    gl.store(out_ptr + rt[:, None] * N + ct[None, :], acc)


@pytest.mark.parametrize("target", TARGETS)
def test_async_copy_pipeline(target):
    """A two-stage cp.async ring: the next stage's global loads are issued before this stage's
    LDS reads, and their LDS writes come after them (the loads' latency overlaps the work)."""
    M, N, K, nw = 16, 64, 4, 2
    x = np.random.default_rng(11).standard_normal((K, M, N)).astype(np.float32)
    (s,), (r,), tk = run_both(pipelined_kernel, target, [np.zeros((M, N), np.float32)], [x, K], M=M, N=N,
                              NW=nw, num_warps=nw)
    np.testing.assert_array_equal(s, r)
    want = np.zeros((M, N), np.float32)
    for k in range(K):
        want = want * np.float32(0.5) + x[k]
    np.testing.assert_allclose(s, want, rtol=1e-6)
    e = lowered(tk, target)
    (header, back), = e.loops
    start = next(k for k, i in enumerate(e.code) if i is header)
    end = next(k for k, i in enumerate(e.code) if i is back)
    loop = [getattr(i, "op", "") for i in e.code[start:end]]
    first_load = next(k for k, o in enumerate(loop) if o.startswith("global_load"))
    first_read = next(k for k, o in enumerate(loop) if o.startswith("ds_read"))
    assert first_load < first_read < loop.index("ds_write_b128")


@gt.jit
def crossing_kernel(out_ptr, x_ptr, M: gl.constexpr, N: gl.constexpr, NW: gl.constexpr):
    L = blocked(ROW4, NW)
    LT = blocked(COL4, NW)
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    offs = r[:, None] * N + c[None, :]
    sl = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[1, 0])
    a = gl.allocate_shared_memory(gl.float32, [M, N], sl)
    b = gl.allocate_shared_memory(gl.float32, [M, N], sl)
    async_copy.async_load(a, x_ptr + offs)
    async_copy.commit_group()
    b.store(gl.load(x_ptr + M * N + offs))
    y = b.load(LT)              # membar's barrier here orders b, and (it believes) the copy into a
    async_copy.wait_group(0)
    z = a.load(LT)              # so no barrier of its own: the copy's deferred writes need one
    rt = gl.arange(0, M, layout=gl.SliceLayout(1, LT))
    ct = gl.arange(0, N, layout=gl.SliceLayout(0, LT))
    gl.store(out_ptr + rt[:, None] * N + ct[None, :], y - z)


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_deferred_copy_after_a_barrier(target, monkeypatch):
    M, N, nw = 16, 64, 4
    x = np.random.default_rng(12).standard_normal((2, M, N)).astype(np.float32)
    (s,), (r,), tk = run_both(crossing_kernel, target, [np.zeros((M, N), np.float32)], [x], M=M, N=N,
                              NW=nw, num_warps=nw)
    np.testing.assert_array_equal(s, x[1] - x[0])
    np.testing.assert_array_equal(r, x[1] - x[0])
    # without the barrier after the deferred writes, the simulator sees the race
    from gluon_trace.backends.amd import lds_async
    original = lds_async.AsyncCopies._write

    def write_without_barrier(self, writes):
        barrier, self.em.barrier = self.em.barrier, lambda: None
        try:
            original(self, writes)
        finally:
            self.em.barrier = barrier
    monkeypatch.setattr(lds_async.AsyncCopies, "_write", write_without_barrier)
    # membar now also puts a barrier before that read (a copy lands at its wait_group): drop it too
    import gluon_trace.membar as membar
    original_barriers = membar.barriers

    def without_the_read_after_the_wait(graph, plan=None):
        loads = [op for op in graph.body.walk() if op.name == "smem_load"]
        return original_barriers(graph, plan) - {loads[-1]}
    monkeypatch.setattr(membar, "barriers", without_the_read_after_the_wait)
    with pytest.raises(amdsim.SimError, match="LDS race"):
        amdsim.simulate(tk, target, (1,), [np.zeros((M, N), np.float32), x])


# -- the same kernels on an executor we did not write ----------------------------------------------

def _emulator_cases():
    M, N = 32, 64
    rt = [(f"roundtrip-{c[0]}-{c[1][0]}", roundtrip_kernel, [np.zeros((M, N), np.float32)],
           lambda c=c: [_roundtrip_input(c[0], M, N, 3)],
           dict(M=M, N=N, A=c[2], B=c[3], SL=c[1], DT=c[0], INIT=c[4], NW=4, num_warps=4))
          for c in CASES]
    return rt + [
        ("views", views_kernel, [np.zeros((16, 32), np.float32), np.zeros((32, 16), np.float32),
                                 np.zeros((16, 8), np.float32), np.zeros((32, 32), np.float32),
                                 np.zeros((16, 32), np.int32)],
         lambda: [np.random.default_rng(4).standard_normal((2, 16, 32)).astype(np.float32), 2],
         dict(M=16, N=32, NW=2, num_warps=2)),
        ("ring", ring_kernel, [np.zeros((16, 64), np.float32)],
         lambda: [np.random.default_rng(5).standard_normal((3, 16, 64)).astype(np.float32), 3],
         dict(M=16, N=64, NW=4, num_warps=4)),
        ("async-f16", async_kernel, [np.zeros((32, 64), np.float32)],
         lambda: [(np.random.default_rng(6).standard_normal((32, 64)) * 9).astype(np.float16), 9, 40],
         dict(M=32, N=64, DT="float16", NW=2, HINT=True, num_warps=2)),
        ("async-int8", async_kernel, [np.zeros((32, 64), np.float32)],
         lambda: [np.random.default_rng(7).integers(-128, 128, (32, 64)).astype(np.int8), 20, 37],
         dict(M=32, N=64, DT="int8", NW=2, HINT=False, num_warps=2)),
        ("pipeline", pipelined_kernel, [np.zeros((16, 64), np.float32)],
         lambda: [np.random.default_rng(8).standard_normal((3, 16, 64)).astype(np.float32), 3],
         dict(M=16, N=64, NW=2, num_warps=2)),
    ]


def _roundtrip_input(dt, M, N, seed):
    rng = np.random.default_rng(seed)
    if dt in ("int8", "uint8", "int16", "int32"):
        lo, hi = {"int8": (-128, 128), "uint8": (0, 256), "int16": (-32768, 32768),
                  "int32": (-2**24, 2**24)}[dt]
        return rng.integers(lo, hi, (M, N)).astype(np.float32)
    return (rng.standard_normal((M, N)) * 100).astype(np.float32)


@pytest.mark.amd_emulator
@pytest.mark.parametrize("case", _emulator_cases(), ids=lambda c: c[0])
def test_on_tinygrads_rdna3_emulator(case, amd_toolchain):
    """gfx1100 LDS code (ds_read/ds_write b8..b128, v_perm packing, s_barrier between waves)
    run by tinygrad's RDNA3 emulator, which follows AMD's ISA pseudocode: agrees with the
    interpreter, bit for bit."""
    import emulator
    try:
        emulator.load()
    except emulator.EmulatorMissing as e:
        pytest.skip(f"tinygrad's RDNA3 emulator is not available: {e}")
    name, kernel, outs, make_ins, cx = case
    ins = make_ins()
    got = [np.full_like(o, POISON[o.dtype.type]) for o in outs]
    ref = [np.full_like(o, POISON[o.dtype.type]) for o in outs]
    tk = kernel.trace(*got, *ins, target="gfx1100", **cx)
    try:
        emulator.run(tk, (1,), got + list(ins))
    except emulator.EmulatorCannot as e:
        pytest.xfail(str(e))
    kernel[(1,)](*ref, *ins, backend="interpreter", **cx)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


# -- random layouts ------------------------------------------------------------------------------------

@gt.jit
def random_kernel(y_ptr, x_ptr, M: gl.constexpr, N: gl.constexpr, A: gl.constexpr, B: gl.constexpr,
                  SL: gl.constexpr, DT: gl.constexpr, NW: gl.constexpr):
    import test_amd_layouts_sim as lay
    LA, LB = lay.make(A, NW), lay.make(B, NW)
    dt = DTYPES[DT]
    r = gl.arange(0, M, layout=gl.SliceLayout(1, LA))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, LA))
    s = gl.allocate_shared_memory(dt, [M, N], shared(SL, [M, N], dt))
    s.store(gl.load(x_ptr + r[:, None] * N + c[None, :]).to(dt))
    y = s.load(LB)
    rb = gl.arange(0, M, layout=gl.SliceLayout(1, LB))
    cb = gl.arange(0, N, layout=gl.SliceLayout(0, LB))
    gl.store(y_ptr + rb[:, None] * N + cb[None, :], y.to(gl.float32))


def _random_case():
    from hypothesis import strategies as st
    import test_amd_layouts_sim as lay
    sw = st.tuples(st.just("sw"), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]),
                   st.sampled_from([1, 2, 4, 8]), st.sampled_from([(1, 0), (0, 1)]))
    pad = st.tuples(st.just("pad"), st.sampled_from([4, 16, 64]), st.sampled_from([1, 2, 4]),
                    st.sampled_from([(1, 0), (0, 1)]))
    return st.tuples(st.sampled_from([8, 16, 32]), st.sampled_from([8, 32, 64]), lay.layout_params,
                     lay.layout_params, st.one_of(sw, pad),
                     st.sampled_from(["float32", "float16", "bfloat16", "int8", "float64"]),
                     st.sampled_from([1, 2, 4]), st.integers(0, 2**16))


@pytest.mark.parametrize("target", TARGETS)
def test_random_layouts_roundtrip(target):
    from hypothesis import Phase, given, reject, settings

    @settings(max_examples=10, deadline=None, phases=[Phase.generate])
    @given(case=_random_case())
    def check(case):
        m, n, a, b, sl, dt, nw, seed = case
        x = _roundtrip_input("int8" if dt == "int8" else dt, m, n, seed)
        try:
            (s,), (r,), _ = run_both(random_kernel, target, [np.zeros((m, n), np.float32)], [x], M=m, N=n,
                                     A=a, B=b, SL=sl, DT=dt, NW=nw, num_warps=nw)
        except gt.CompileError as e:
            if "VGPRs" not in str(e):
                raise
            reject()
        np.testing.assert_array_equal(s, r)
    check()


@gt.jit
def carried_kernel(out_ptr, K, NW: gl.constexpr):
    L1: gl.constexpr = gl.BlockedLayout([1], [gl.threads_per_warp()], [NW], [0])
    sl = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    a = gl.allocate_shared_memory(gl.float32, [64], sl)
    b = gl.allocate_shared_memory(gl.float32, [64], sl)
    a.store(gl.full([64], 1.0, gl.float32, L1))
    b.store(gl.full([64], 2.0, gl.float32, L1))
    for k in gl.range(0, K):
        a, b = b, a             # the buffers swap every iteration: carried descriptors
    gl.store(out_ptr + gl.arange(0, 64, layout=L1), a.load(L1))


@gt.jit
def slice_kernel(out_ptr, x_ptr, START: gl.constexpr, LEN: gl.constexpr, NW: gl.constexpr):
    L = blocked(ROW4, NW)
    r = gl.arange(0, 32, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, 64, layout=gl.SliceLayout(0, L))
    s = gl.allocate_shared_memory(gl.float32, [32, 64], gl.SwizzledSharedLayout(8, 1, 8, order=[1, 0]))
    s.store(gl.load(x_ptr + r[:, None] * 64 + c[None, :]))
    LS = blocked(ONE, NW)
    part = s.slice(START, LEN, dim=1).load(LS)
    rs = gl.arange(0, 32, layout=gl.SliceLayout(1, LS))
    cs = gl.arange(0, LEN, layout=gl.SliceLayout(0, LS))
    gl.store(out_ptr + rs[:, None] * LEN + cs[None, :], part)


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_carried_and_sliced_views(target):
    # buffers swapped every iteration: carried as one SGPR address (was refused as a carried view)
    for k in (2, 3):
        (s,), (r,), _ = run_both(carried_kernel, target, [np.zeros(64, np.float32)], [k], NW=1, num_warps=1)
        assert (s == (2.0 if k % 2 else 1.0)).all() and np.array_equal(s, r)
    # columns 3..6 of a swizzled row: no thread part + register part split of their offsets (was
    # refused); the start is added to the thread's column (test_amd_lds_swizzled_slices.py)
    x = np.random.default_rng(9).standard_normal((32, 64)).astype(np.float32)
    (s,), (r,), _ = run_both(slice_kernel, target, [np.zeros((32, 4), np.float32)], [x], START=3, LEN=4,
                             NW=2, num_warps=2)
    np.testing.assert_array_equal(s, x[:, 3:7])
    np.testing.assert_array_equal(r, x[:, 3:7])
    # columns 4..11 straddle two 8-wide swizzle groups, yet split (XOR-linearly): they run
    (s,), (r,), _ = run_both(slice_kernel, target, [np.zeros((32, 8), np.float32)], [x], START=4, LEN=8,
                             NW=2, num_warps=2)
    np.testing.assert_array_equal(s, x[:, 4:12])
    np.testing.assert_array_equal(r, x[:, 4:12])


@gt.jit
def padded_transposed_read(y_ptr, x_ptr, N: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, gl.threads_per_warp() // 4], [4, 1], [1, 0])
    r = gl.arange(0, N, gl.SliceLayout(1, L))[:, None] * N + gl.arange(0, N, gl.SliceLayout(0, L))[None, :]
    sl: gl.constexpr = gl.PaddedSharedLayout.with_identity_for([[N, 4]], [N, N], [1, 0])
    s = gl.allocate_shared_memory(gl.float32, [N, N], sl, gl.load(x_ptr + r))
    gl.store(y_ptr + r, s.permute((1, 0)).load(L))


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_permuted_view_of_a_padded_buffer(target):
    """.permute of a PaddedSharedLayout buffer: its offset bases reordered (was refused as
    'moves a stacked dim')."""
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    (s,), (r,), _ = run_both(padded_transposed_read, target, [np.zeros((32, 32), np.float32)], [x], N=32,
                             num_warps=4)
    assert np.array_equal(s, x.T) and np.array_equal(r, x.T)


@gt.jit
def row_half_by_branch(out, x_ptr, c):
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, gl.threads_per_warp() // 4], [4, 1], [1, 0])
    rows = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None]
    cols = gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [32, 32], gl.SwizzledSharedLayout(4, 1, 8, [1, 0]))
    buf.store(gl.load(x_ptr + rows * 32 + cols))
    v = buf.slice(0, 16, dim=0)
    with gl.if_(c > 0):
        v = buf.slice(16, 16, dim=0)
    H: gl.constexpr = gl.BlockedLayout([1, 2], [4, gl.threads_per_warp() // 4], [4, 1], [1, 0])
    r = gl.arange(0, 16, gl.SliceLayout(1, H))[:, None]
    q = gl.arange(0, 32, gl.SliceLayout(0, H))[None, :]
    gl.store(out + r * 32 + q, v.load(H))


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_row_halves_picked_by_a_branch(target):
    """A slice's table keeps the buffer's offsets (rows 16.. at +2 KB): the carried address takes
    each view's origin, so the arms' tables agree (a branch-selected view was refused on AMD)."""
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    for c in (0, 1):
        (s,), (r,), _ = run_both(row_half_by_branch, target, [np.zeros((16, 32), np.float32)], [x, c], num_warps=4)
        assert np.array_equal(s, x[16 * c:16 * c + 16]) and np.array_equal(r, s)


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_permuted_view_of_a_shared_linear_layout(target):
    """The padded kernel above with a hand-made XOR swizzle as a gl.SharedLinearLayout (the
    first-week NVIDIA test's kernel and bases)."""
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    (s,), (r,), _ = run_both(linear_smem_transpose, target, [np.zeros((32, 32), np.float32)], [x],
                             SL=gl.SharedLinearLayout(offset_bases=LINEAR_BASES), num_warps=4)
    assert np.array_equal(s, x.T) and np.array_equal(r, x.T)

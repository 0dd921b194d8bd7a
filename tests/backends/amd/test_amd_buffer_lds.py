"""Async copies as LDS DMA on gfx942 (``buffer_load_dword ... offen lds``, backends/amd/lds_dma.py),
run on the simulator against the interpreter and numpy on random inputs with poisoned outputs,
masked edges zero-filled; the instruction appears where each wave's lanes fill consecutive LDS
dwords, and not where they do not (swizzled buffers, several dwords a lane, other targets).
The simulator lands a DMA's bytes only when an ``s_waitcnt vmcnt`` retires it and rejects any
LDS access of bytes still in flight, so a missing or too-weak wait fails here."""

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.amd.cdna3 import mfma
from gluon_trace.language.nvidia.ampere import async_copy

import amdsim

POISON = {np.float32: np.float32(np.nan), np.int32: np.int32(-123456789)}
DTYPES = {"float32": gl.float32, "float16": gl.float16, "int8": gl.int8}
NP = {"float32": np.float32, "float16": np.float16, "int8": np.int8}


pytestmark = pytest.mark.usefixtures("amd_toolchain")  # conftest: a fresh cache; skip without an assembler


def run_both(kernel, target, outs, ins, grid=(1,), **kw):
    """The simulator's and the interpreter's outputs, each from poisoned buffers (the simulator
    runs the assembled and linked kernel's code)."""
    sim_outs = [np.full_like(o, POISON[o.dtype.type]) for o in outs]
    ref_outs = [np.full_like(o, POISON[o.dtype.type]) for o in outs]
    tk = kernel.trace(*sim_outs, *ins, target=target, **kw)
    amdsim.simulate(tk, target, grid, sim_outs + list(ins))
    kernel[grid](*ref_outs, *ins, backend="interpreter", target=target, **kw)
    return sim_outs, ref_outs, tk


def lowered(tk, target):
    from gluon_trace.backends.amd.compiler import lower
    return lower(tk.for_target(target).graph, target)


def dma_loads(text):
    return [ln for ln in text.splitlines() if ln.strip().startswith("buffer_load_dword") and ln.strip().endswith("lds")]


def rows_layout(dt, N, nw):
    """One dword a lane along a row, the wave's lanes side by side (rows wrap into the next)."""
    per = 4 // max(dt.bits // 8, 1)
    lanes_n = min(N // per, gl.threads_per_warp())
    return gl.BlockedLayout([1, per], [gl.threads_per_warp() // lanes_n, lanes_n], [nw, 1], [1, 0])


@gt.jit
def copy_kernel(out_ptr, x_ptr, rows, cols, M: gl.constexpr, N: gl.constexpr, DT: gl.constexpr,
                NW: gl.constexpr, SWZ: gl.constexpr, WIDE: gl.constexpr, HINT: gl.constexpr):
    dt = DTYPES[DT]
    tpw = gl.threads_per_warp()
    L = rows_layout(dt, N, NW) if not WIDE else gl.BlockedLayout([1, 4], [tpw // 8, 8], [NW, 1], [1, 0])
    LT: gl.constexpr = gl.BlockedLayout([4, 1], [tpw // 4, 4], [1, NW], [0, 1])  # other waves' elements
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    s = gl.allocate_shared_memory(dt, [M, N], gl.SwizzledSharedLayout(1, 1, SWZ, order=[1, 0]))
    if HINT:
        cols = gl.multiple_of(cols, 4)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    async_copy.async_load(s, x_ptr + r[:, None] * N + c[None, :], mask=mask)
    async_copy.commit_group()
    async_copy.wait_group(0)
    y = s.load(LT).to(gl.float32)
    rt = gl.arange(0, M, layout=gl.SliceLayout(1, LT))
    ct = gl.arange(0, N, layout=gl.SliceLayout(0, LT))
    gl.store(out_ptr + rt[:, None] * N + ct[None, :], y)


def _copy(target, dt, M, N, rows, cols, nw=4, swz=1, wide=False, hint=True, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((M, N)) * 50).astype(NP[dt])
    (s,), (r,), tk = run_both(copy_kernel, target, [np.zeros((M, N), np.float32)], [x, rows, cols], M=M, N=N,
                              DT=dt, NW=nw, SWZ=swz, WIDE=wide, HINT=hint, num_warps=nw)
    np.testing.assert_array_equal(s, r)
    want = np.zeros((M, N), np.float32)
    want[:rows, :cols] = x[:rows, :cols]
    np.testing.assert_array_equal(s, want)
    return lowered(tk, target).text


@pytest.mark.parametrize("dt,M,N,rows,cols", [("float32", 32, 64, 13, 40), ("float32", 64, 32, 64, 32),
                                              ("float16", 32, 64, 29, 36), ("int8", 64, 64, 50, 20),
                                              ("float32", 32, 64, 0, 64)])
def test_copy_as_lds_dma(dt, M, N, rows, cols):
    """Every dword goes global -> LDS by one buffer_load_dword ... lds (one a wave a dword row), masked
    edges zero-filled; no global load, no ds_write."""
    nw = 4
    text = _copy("gfx942", dt, M, N, rows, cols, nw=nw, seed=rows * cols + N)
    es = np.dtype(NP[dt]).itemsize
    assert len(dma_loads(text)) == M * N * es // (4 * 64 * nw)
    assert "global_load" not in text and "ds_write" not in text
    assert "s_mov_b32 m0" in text or "s_add_u32 m0" in text
    wait = text.index("s_waitcnt vmcnt(0)")
    assert text.rindex("lds\n", 0, wait) < wait < text.index("s_barrier") < text.index("ds_read")


@pytest.mark.parametrize("target,swz,wide,hint,why", [
    ("gfx942", 8, False, True, "swizzled: a wave's lanes land out of order"),
    ("gfx942", 1, True, True, "4 dwords a lane: not one dword a lane"),
    ("gfx942", 1, False, False, "f16 pairs under two masks (cols not known even)"),
    ("gfx90a", 1, False, True, "only gfx942 is enabled"),
    ("gfx1100", 1, False, True, "RDNA3 has no LDS DMA"),
])
def test_vgpr_path_where_dma_does_not_apply(target, swz, wide, hint, why):
    dt = "float32" if wide or swz > 1 else "float16"
    text = _copy(target, dt, 32, 64, 21, 44 if hint else 38, swz=swz, wide=wide, hint=hint, seed=swz)
    assert not dma_loads(text), why
    assert "global_load" in text and "ds_write" in text


@gt.jit
def shared_kernel(out_ptr, x_ptr, rows, M: gl.constexpr, N: gl.constexpr, SL: gl.constexpr, NW: gl.constexpr):
    T: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 1], [max(T // N, 1), min(N, T)], [NW, 1], [1, 0])
    LT: gl.constexpr = gl.BlockedLayout([4, 1], [T // 4, 4], [1, NW], [0, 1])
    if SL[0] == "pad":
        sl: gl.constexpr = gl.PaddedSharedLayout.with_identity_for([[SL[1], SL[2]]], [M, N], [1, 0])
    else:
        sl: gl.constexpr = gl.SwizzledSharedLayout(vec=SL[1], per_phase=SL[2], max_phase=SL[3], order=[1, 0])
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    s = gl.allocate_shared_memory(gl.float32, [M, N], sl)
    async_copy.async_load(s, x_ptr + r[:, None] * N + c[None, :], mask=(r[:, None] < rows) & (c[None, :] >= 0))
    async_copy.commit_group()
    async_copy.wait_group(0)
    rt = gl.arange(0, M, layout=gl.SliceLayout(1, LT))
    ct = gl.arange(0, N, layout=gl.SliceLayout(0, LT))
    gl.store(out_ptr + rt[:, None] * N + ct[None, :], s.load(LT))


@pytest.mark.parametrize("sl,N,dma", [
    (("sw", 1, 1, 1), 32, True),
    (("sw", 4, 1, 1), 128, True),      # max_phase 1: no swizzle whatever the vector
    (("sw", 1, 1, 8), 64, False),      # row r's columns XOR (r mod 8): lanes out of order
    (("sw", 1, 4, 2), 64, False),      # rows 4-7 XOR the column with 1: neighbouring lanes swap
    (("pad", 64, 1), 64, True),        # a wave fills one row, padding between rows
    (("pad", 128, 4), 128, True),      # two dword rows a lane, padding at row ends
    (("pad", 32, 1), 32, False),       # a wave's two rows: the second starts a dword late
    (("pad", 16, 2), 64, False),       # padding inside a wave's row
])
def test_where_the_shared_layout_allows_dma(sl, N, dma):
    """Correct either way; DMA exactly where each wave's 64 lanes land on 64 consecutive dwords."""
    M, nw, rows = 16, 2, 13
    x = np.random.default_rng(N + len(sl)).standard_normal((M, N)).astype(np.float32)
    (s,), (r,), tk = run_both(shared_kernel, "gfx942", [np.zeros((M, N), np.float32)], [x, rows], M=M, N=N,
                              SL=sl, NW=nw, num_warps=nw)
    np.testing.assert_array_equal(s, r)
    want = x.copy()
    want[rows:] = 0
    np.testing.assert_array_equal(s, want)
    assert bool(dma_loads(lowered(tk, "gfx942").text)) == dma


@gt.jit
def zoo_kernel(out_ptr, x_ptr, rows, M: gl.constexpr, N: gl.constexpr, SPT: gl.constexpr, TPW0: gl.constexpr,
               WPC: gl.constexpr, ORD: gl.constexpr, SORD: gl.constexpr, DT: gl.constexpr, VIEW: gl.constexpr):
    T: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout(list(SPT), [TPW0, T // TPW0], list(WPC), list(ORD))
    LT: gl.constexpr = gl.BlockedLayout([1, 1], [T // 8, 8], [gl.num_warps(), 1], [1, 0])
    dt = DTYPES[DT]
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    buf = gl.allocate_shared_memory(dt, [3, M, N], gl.SwizzledSharedLayout(1, 1, 1, order=list(SORD)))
    s = buf.index(VIEW)        # a compile-time stage: its offset goes to M0
    mask = (r[:, None] < rows) & (c[None, :] >= 0)
    async_copy.async_load(s, x_ptr + r[:, None] * N + c[None, :], mask=mask)
    async_copy.commit_group()
    async_copy.wait_group(0)
    rt = gl.arange(0, M, layout=gl.SliceLayout(1, LT))
    ct = gl.arange(0, N, layout=gl.SliceLayout(0, LT))
    gl.store(out_ptr + rt[:, None] * N + ct[None, :], s.load(LT).to(gl.float32))


ZOO = [  # (size_per_thread, lanes along dim 0, warps_per_cta, order, shared order, shape, dtype, DMA?)
    ((1, 1), 1, (1, 4), (1, 0), (1, 0), (16, 256), "float32", True),     # waves side by side in a row
    ((1, 1), 64, (1, 4), (0, 1), (0, 1), (64, 16), "float32", True),     # column-major both: lanes down a column
    ((2, 1), 32, (1, 4), (0, 1), (0, 1), (64, 16), "float16", False),    # a column's pair: 2 dwords in global
    ((1, 1), 64, (1, 4), (0, 1), (1, 0), (64, 16), "float32", False),    # lanes down a column, rows in LDS
    ((1, 1), 2, (4, 1), (1, 0), (1, 0), (16, 32), "float32", True),      # two rows a wave, contiguous
    ((1, 1), 4, (4, 1), (1, 0), (1, 0), (16, 32), "float32", False),     # 16 lanes a row of 32: a gap between rows
    ((1, 4), 16, (4, 1), (1, 0), (1, 0), (64, 16), "int8", True),        # int8 quads, four rows a wave
]


@pytest.mark.parametrize("case", ZOO, ids=lambda c: f"{c[6]}-{c[5][0]}x{c[5][1]}-o{c[3][0]}{c[4][0]}-dma{int(c[7])}")
def test_register_and_shared_layouts(case):
    spt, t0, wpc, order, sorder, (M, N), dt, dma = case
    nw = int(np.prod(wpc))
    x = (np.random.default_rng(M * N + t0).standard_normal((M, N)) * 50).astype(NP[dt])
    rows = M - 3
    (s,), (r,), tk = run_both(zoo_kernel, "gfx942", [np.zeros((M, N), np.float32)], [x, rows], M=M, N=N,
                              SPT=spt, TPW0=t0, WPC=wpc, ORD=order, SORD=sorder, DT=dt, VIEW=2, num_warps=nw)
    np.testing.assert_array_equal(s, r)
    want = x.astype(np.float32)
    want[rows:] = 0
    np.testing.assert_array_equal(s, want)
    assert bool(dma_loads(lowered(tk, "gfx942").text)) == dma


@gt.jit
def ring_kernel(out_ptr, x_ptr, K, M: gl.constexpr, N: gl.constexpr, NW: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1, 1], [1, gl.threads_per_warp()], [NW, 1], [1, 0])
    LT: gl.constexpr = gl.BlockedLayout([4, 1], [gl.threads_per_warp() // 4, 4], [1, NW], [0, 1])
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    offs = r[:, None] * N + c[None, :]
    bufs = gl.allocate_shared_memory(gl.float32, [2, M, N], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
    async_copy.async_load(bufs.index(0), x_ptr + offs)
    async_copy.commit_group()
    acc = gl.zeros([M, N], gl.float32, LT)
    for k in gl.range(0, K):
        s = k % 2
        nxt = (k + 1 < K) & (offs >= 0)
        async_copy.async_load(bufs.index(1 - s), x_ptr + (k + 1) * M * N + offs, mask=nxt)
        async_copy.commit_group()
        async_copy.wait_group(1)    # this stage has landed; the next one is in flight
        acc = acc * 0.5 + bufs.index(s).load(LT)
    rt = gl.arange(0, M, layout=gl.SliceLayout(1, LT))
    ct = gl.arange(0, N, layout=gl.SliceLayout(0, LT))
    gl.store(out_ptr + rt[:, None] * N + ct[None, :], acc)


def test_two_stage_ring():
    """A double-buffered K loop (a run-time stage index in M0, a masked last prefetch): the next
    stage's DMA is issued before this stage's LDS reads and waited for after them (its latency
    overlaps the reads), then published to the other waves by a barrier."""
    M, N, K, nw = 16, 64, 5, 2
    x = np.random.default_rng(11).standard_normal((K, M, N)).astype(np.float32)
    (s,), (r,), tk = run_both(ring_kernel, "gfx942", [np.zeros((M, N), np.float32)], [x, K], M=M, N=N,
                              NW=nw, num_warps=nw)
    np.testing.assert_array_equal(s, r)
    want = np.zeros((M, N), np.float32)
    for k in range(K):
        want = want * np.float32(0.5) + x[k]
    np.testing.assert_allclose(s, want, rtol=1e-6)
    e = lowered(tk, "gfx942")
    (header, back), = e.loops
    start = next(k for k, i in enumerate(e.code) if i is header)
    end = next(k for k, i in enumerate(e.code) if i is back)
    loop = [i for i in e.code[start:end] if hasattr(i, "op")]
    dma = [k for k, i in enumerate(loop) if i.op == "buffer_load_dword" and i.suffix.endswith("lds")]
    assert len(dma) == M * N // (64 * nw)
    first_read = next(k for k, i in enumerate(loop) if i.op.startswith("ds_read"))
    wait = next(k for k, i in enumerate(loop) if i.op == "s_waitcnt" and "vmcnt" in i.suffix)
    assert max(dma) < first_read < wait and next(i.op for i in loop[wait:] if i.op != "s_waitcnt") == "s_barrier"
    assert not any(i.op.startswith(("global_load", "ds_write")) for i in loop)


def test_simulator_catches_a_missing_wait(monkeypatch):
    """Without the vmcnt wait the DMA stands for, the readers meet bytes still in flight."""
    M, N, nw = 32, 64, 4
    x = np.random.default_rng(5).standard_normal((M, N)).astype(np.float32)
    out = np.zeros((M, N), np.float32)
    kw = dict(M=M, N=N, DT="float32", NW=nw, SWZ=1, WIDE=False, HINT=True, num_warps=nw)
    from gluon_trace.backends.amd import waitcnt
    monkeypatch.setattr(waitcnt, "_tokens", lambda inst: [])
    tk = copy_kernel.trace(out, x, M, N, target="gfx942", **kw)
    with pytest.raises(amdsim.SimError, match="in flight"):
        amdsim.simulate(tk, "gfx942", (1,), [out, x, M, N])


@gt.jit
def crossing_kernel(out_ptr, x_ptr, M: gl.constexpr, N: gl.constexpr, NW: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1, 1], [1, gl.threads_per_warp()], [NW, 1], [1, 0])
    LT: gl.constexpr = gl.BlockedLayout([4, 1], [gl.threads_per_warp() // 4, 4], [1, NW], [0, 1])
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    offs = r[:, None] * N + c[None, :]
    sl = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[1, 0])
    a = gl.allocate_shared_memory(gl.float32, [M, N], sl)
    b = gl.allocate_shared_memory(gl.float32, [M, N], sl)
    async_copy.async_load(a, x_ptr + offs)
    async_copy.commit_group()
    b.store(offs.to(gl.float32))  # (no global load after the DMA: nothing else waits for it)
    y = b.load(LT)              # membar's barrier here comes before the DMA into a has landed
    async_copy.wait_group(0)
    z = a.load(LT)              # so one more barrier follows the wait
    rt = gl.arange(0, M, layout=gl.SliceLayout(1, LT))
    ct = gl.arange(0, N, layout=gl.SliceLayout(0, LT))
    gl.store(out_ptr + rt[:, None] * N + ct[None, :], y - z)


def test_barrier_after_a_wait_that_crossed_one(monkeypatch):
    M, N, nw = 16, 64, 4
    x = np.random.default_rng(12).standard_normal((M, N)).astype(np.float32)
    (s,), (r,), tk = run_both(crossing_kernel, "gfx942", [np.zeros((M, N), np.float32)], [x], M=M, N=N,
                              NW=nw, num_warps=nw)
    want = np.arange(M * N, dtype=np.float32).reshape(M, N) - x
    np.testing.assert_array_equal(s, want)
    np.testing.assert_array_equal(r, want)
    code = [i for i in lowered(tk, "gfx942").code if hasattr(i, "op")]
    dma = [k for k, i in enumerate(code) if i.op == "buffer_load_dword"]
    first_barrier = next(k for k, i in enumerate(code) if i.op == "s_barrier")
    wait = next(k for k, i in enumerate(code) if i.op == "s_waitcnt" and "vmcnt(0)" in i.suffix)
    after = next(i.op for i in code[wait:] if i.op != "s_waitcnt")
    assert max(dma) < first_barrier < wait and after == "s_barrier"
    assert any(i.op.startswith("ds_read") for i in code[wait:])
    # without the barrier after the wait, other waves read the DMA's bytes racing their landing
    from gluon_trace.backends.amd import lds_async
    original = lds_async.AsyncCopies._write

    def write_without_barrier(self, writes):
        barrier, self.em.barrier = self.em.barrier, lambda: None
        try:
            original(self, writes)
        finally:
            self.em.barrier = barrier
    monkeypatch.setattr(lds_async.AsyncCopies, "_write", write_without_barrier)
    import gluon_trace.membar as membar
    original_barriers = membar.barriers

    def without_the_read_after_the_wait(graph, plan=None):
        loads = [op for op in graph.body.walk() if op.name == "smem_load"]
        return original_barriers(graph, plan) - {loads[-1]}
    monkeypatch.setattr(membar, "barriers", without_the_read_after_the_wait)
    with pytest.raises(amdsim.SimError, match="LDS race|in flight"):
        amdsim.simulate(tk, "gfx942", (1,), [np.zeros((M, N), np.float32), x])


@gt.jit
def gemm_kernel(c_ptr, a_ptr, b_ptr, M, N, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr):
    """An MFMA GEMM whose A and B tiles reach LDS by async copies into a two-stage ring (LDS DMA on
    gfx942: one f16 pair a lane, rows unswizzled)."""
    W: gl.constexpr = gl.num_warps()
    T: gl.constexpr = gl.threads_per_warp()
    acc_l: gl.constexpr = gl.amd.AMDMFMALayout(version=3, instr_shape=[32, 32, 8], transposed=True,
                                               warps_per_cta=[2, W // 2])
    a_op: gl.constexpr = gl.DotOperandLayout(0, acc_l, k_width=4)
    b_op: gl.constexpr = gl.DotOperandLayout(1, acc_l, k_width=4)
    a_ld: gl.constexpr = gl.BlockedLayout([1, 2], [T // (BK // 2), BK // 2], [W, 1], [1, 0])
    b_ld: gl.constexpr = gl.BlockedLayout([1, 2], [T // (BN // 2), BN // 2], [W, 1], [1, 0])
    sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
    K = gl.multiple_of(K, 2)
    N = gl.multiple_of(N, 2)
    rm = gl.arange(0, BM, layout=gl.SliceLayout(1, a_ld))
    ka = gl.arange(0, BK, layout=gl.SliceLayout(0, a_ld))
    kb = gl.arange(0, BK, layout=gl.SliceLayout(1, b_ld))
    rn = gl.arange(0, BN, layout=gl.SliceLayout(0, b_ld))
    a_s = gl.allocate_shared_memory(gl.float16, [2, BM, BK], sl)
    b_s = gl.allocate_shared_memory(gl.float16, [2, BK, BN], sl)
    async_copy.async_load(a_s.index(0), a_ptr + rm[:, None] * K + ka[None, :],
                          mask=(rm[:, None] < M) & (ka[None, :] < K))
    async_copy.async_load(b_s.index(0), b_ptr + kb[:, None] * N + rn[None, :],
                          mask=(kb[:, None] < K) & (rn[None, :] < N))
    async_copy.commit_group()
    acc = gl.zeros([BM, BN], gl.float32, acc_l)
    for k in gl.range(0, gl.cdiv(K, BK)):
        s = k % 2
        k1 = (k + 1) * BK
        async_copy.async_load(a_s.index(1 - s), a_ptr + rm[:, None] * K + k1 + ka[None, :],
                              mask=(rm[:, None] < M) & (k1 + ka[None, :] < K))
        async_copy.async_load(b_s.index(1 - s), b_ptr + (k1 + kb[:, None]) * N + rn[None, :],
                              mask=(k1 + kb[:, None] < K) & (rn[None, :] < N))
        async_copy.commit_group()
        async_copy.wait_group(1)
        acc = mfma(a_s.index(s).load(a_op), b_s.index(s).load(b_op), acc)
    cm = gl.arange(0, BM, layout=gl.SliceLayout(1, acc_l))
    cn = gl.arange(0, BN, layout=gl.SliceLayout(0, acc_l))
    gl.store(c_ptr + cm[:, None] * N + cn[None, :], acc, mask=(cm[:, None] < M) & (cn[None, :] < N))


def test_mfma_gemm_staged_by_lds_dma():
    """Odd M, masked K and N edges: the sim's GEMM equals the interpreter's and numpy's; every
    operand byte reached LDS by DMA (no global load, no ds_write in the K loop)."""
    M, N, K, BM, BN, BK, nw = 50, 60, 72, 64, 64, 32, 4
    r = np.random.default_rng(23)
    a = r.standard_normal((M, K)).astype(np.float16)
    b = r.standard_normal((K, N)).astype(np.float16)
    (s,), (ref,), tk = run_both(gemm_kernel, "gfx942", [np.zeros((M, N), np.float32)], [a, b, M, N, K],
                                BM=BM, BN=BN, BK=BK, num_warps=nw)
    np.testing.assert_allclose(s, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)
    e = lowered(tk, "gfx942")
    (header, back), = e.loops
    start = next(k for k, i in enumerate(e.code) if i is header)
    end = next(k for k, i in enumerate(e.code) if i is back)
    loop = [i.op for i in e.code[start:end] if hasattr(i, "op")]
    assert loop.count("buffer_load_dword") == (BM * BK + BK * BN) * 2 // (4 * 64 * nw)
    assert not any(o.startswith(("global_load", "ds_write")) for o in loop)
    assert any(o.startswith("v_mfma") for o in loop)


# -- the same DMA code on tinygrad's CDNA emulator (marker amd_emulator) -----------------------------

@pytest.mark.amd_emulator
@pytest.mark.parametrize("dt,M,N", [("float32", 32, 64), ("float16", 32, 64), ("int8", 64, 64), ("float32", 64, 32)])
def test_lds_dma_on_tinygrads_cdna_emulator(dt, M, N):
    """The copy's code object run by tinygrad's CDNA emulator (its MUBUF pseudocode: LDS byte
    M0 + 4 * lane, the V#'s base and stride, soffset), an executor we did not write, against numpy.
    Unmasked only: at tinygrad a9069c1 an out-of-range LDS-DMA lane still reads global memory at
    address 0 (its LDS branch does not gate the load as its VGPR branch does) and the process
    dies; the zero fill is proven on amdsim above."""
    import emulator
    try:
        emulator.load()
    except emulator.EmulatorMissing as e:
        pytest.skip(f"tinygrad's emulator is not available: {e}")
    x = (np.random.default_rng(M + N).standard_normal((M, N)) * 50).astype(NP[dt])
    got = np.full((M, N), np.nan, np.float32)
    kw = dict(M=M, N=N, DT=dt, NW=4, SWZ=1, WIDE=False, HINT=True, num_warps=4)
    tk = copy_kernel.trace(got, x, M, N, target="gfx942", **kw)
    ck = emulator.run(tk, (1,), [got, x, M, N], target="gfx942")
    assert dma_loads(ck.asm)
    np.testing.assert_array_equal(got, x.astype(np.float32))


@pytest.mark.parametrize("target,M,N,K,dma", [("gfx942", 50, 60, 64, True), ("gfx942", 70, 40, 40, False),
                                              ("gfx90a", 50, 60, 64, False)])
def test_matmul_mfma_async(target, M, N, K, dma):
    """gluon_trace/kernels/matmul_amd_async.py (C = A @ B^T, a two-stage async-copy ring): LDS DMA on
    gfx942 when K is known a multiple of 16 (dword-aligned rows), the VGPR path otherwise; both
    against the interpreter and numpy, odd M/N edges."""
    from gluon_trace.kernels.matmul_amd_async import matmul_mfma_async
    r = np.random.default_rng(M * N + K)
    a = r.standard_normal((M, K)).astype(np.float16)
    b = r.standard_normal((N, K)).astype(np.float16)
    args = (M, N, K, K, K, N)
    cx = dict(BM=64, BN=64, BK=32, num_warps=4)
    got = np.full((M, N), np.nan, np.float32)
    ref = np.full((M, N), np.nan, np.float32)
    grid = (-(-M // 64), -(-N // 64))
    tk = matmul_mfma_async.trace(a, b, got, *args, **cx, target=target)
    amdsim.simulate(tk, target, grid, [a, b, got, *args])
    matmul_mfma_async[grid](a, b, ref, *args, **cx, backend="interpreter", target=target)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64).T, rtol=1e-5, atol=1e-4)
    assert bool(dma_loads(lowered(tk, target).text)) == dma


def test_perf_script_compares_the_two_paths():
    """perf/amd_lds_dma.py's two variants of one kernel differ only in the copy's path: DMA (no
    ds_write, fewer VGPRs: no data registers) and the VGPR path (ds_write at the wait)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parents[3] / "perf"))
    import amd_lds_dma
    import amd_model
    dma, _ = amd_lds_dma.async_asm((64, 64, 32, 4), True)
    vgpr, _ = amd_lds_dma.async_asm((64, 64, 32, 4), False)
    d, v = amd_model.mix_of(amd_model.steady_loop(dma)), amd_model.mix_of(amd_model.steady_loop(vgpr))
    assert dma_loads(dma) and not dma_loads(vgpr)
    assert not d.ds_write and sum(v.ds_write.values()) == sum(d.global_load.values()) == sum(v.global_load.values())
    assert d.mfma == v.mfma and d.ds_read == v.ds_read
    assert amd_model.resources(dma)["vgprs"] < amd_model.resources(vgpr)["vgprs"]

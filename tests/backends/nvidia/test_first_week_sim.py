"""A Gluon user's first-week Hopper kernels (tests/test_first_week_hopper.py and below) emitted
for sm_90a and run on the CPU Hopper simulators against the interpreter and numpy, on fresh
random inputs with NaN-poisoned outputs, and assembled by ptxas. Each found a gap: a view
rebound inside a loop or branch (``bar = bars.index(s)`` in a ``gl.if_``, buffers swapped
each step) crashed the emitter; a slice of a swizzled dim from inside the swizzle's period was
refused by it; ``.index`` of a 3-D TMA block was refused by the tracer.
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import ptxsim_hopper  # noqa: E402
import ptxsim_races  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402
from gluon_trace.errors import CompileError  # noqa: E402
from gluon_trace.language.nvidia.ampere import async_copy, mma_v2  # noqa: E402
from gluon_trace.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,  # noqa: E402
                                                warpgroup_mma_wait)
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
ml_dtypes = pytest.importorskip("ml_dtypes")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from test_first_week_hopper import (ADD_WS, BATCHED, PERSISTENT, SMALL_MMA, add_ws, add_ws_args,  # noqa: E402
                                    batched_args, batched_half_transpose, persistent_args, persistent_matmul,
                                    small_mma, small_mma_args)

NV = gl.NVMMASharedLayout.get_default_for


def both(kernel, make, grid, ws=False, num_warps=4, **kw):
    """(interpreter's args, simulator's args, PTX): traced on one set, run on two fresh ones."""
    g = kernel.trace(*make(), target="sm_90a", num_warps=num_warps, **kw).graph
    text, _, smem = emit(g, "sm_90a")
    ref, sim = make(), make()
    get("interpreter").run(g, tuple(grid) + (1,) * (3 - len(grid)), ref)
    if ws:   # partitions in a random order, under the shared-memory race detector
        ptxsim_races.run(text, grid, sim, smem, order="random", seed=int(np.random.default_rng().integers(2 ** 31)))
    else:
        ptxsim_hopper.run(text, grid, sim, smem)
    return ref, sim, text


def _arr(a):
    return a.base if isinstance(a, TensorDescriptor) else a


@pytest.mark.parametrize("shape, lhs, n, num_warps, warps", SMALL_MMA)
def test_small_mma(shape, lhs, n, num_warps, warps):
    make, exp = small_mma_args(*shape, np.random.default_rng())
    ref, sim, _ = both(small_mma, make, (1,), num_warps=num_warps, LHS_IN_REG=lhs, INSTR_N=n, WARPS=warps)
    np.testing.assert_allclose(_arr(sim[3]), exp, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(_arr(sim[3]), _arr(ref[3]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, block, dtype, num_warps", BATCHED)
def test_slices_of_a_3d_tma_block(shape, block, dtype, num_warps):
    """The right half of a 64- or 128-byte swizzled row starts inside the swizzle's period: its
    offsets are XOR-linear up to a constant XOR (was refused: 'not XOR-linearly')."""
    make, exp = batched_args(shape, block, dtype, np.random.default_rng())
    ref, sim, _ = both(batched_half_transpose, make, (shape[0] // block[0],), num_warps=num_warps)
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


# -- views carried by loops and branches ------------------------------------------------------------

@gt.jit
def add_ring(a_desc, b_desc, c_desc, ynumel, NBUF: gl.constexpr):
    """c = a + b along a row of blocks through an NBUF-slot TMA ring, Gluon's tutorial shape:
    ``bar = bars.index(...)`` is bound in the prologue and again inside a gl.if_."""
    XB: gl.constexpr = a_desc.block_type.shape[0]
    YB: gl.constexpr = a_desc.block_type.shape[1]
    layout: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, 4], [1, 0])
    xoff = gl.program_id(0) * XB
    a_smem = gl.allocate_shared_memory(a_desc.dtype, [NBUF, XB, YB], a_desc.layout)
    b_smem = gl.allocate_shared_memory(b_desc.dtype, [NBUF, XB, YB], b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, [XB, YB], c_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NBUF):
        mbarrier.init(bars.index(i), count=1)
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    ny = gl.cdiv(ynumel, YB)
    for i in gl.static_range(NBUF - 1):
        bar = bars.index(i)
        mbarrier.expect(bar, nbytes)
        tma.async_load(a_desc, [xoff, i * YB], bar, a_smem.index(i))
        tma.async_load(b_desc, [xoff, i * YB], bar, b_smem.index(i))
    for r in gl.range(0, ny):
        c = r + NBUF - 1
        with gl.if_(c < ny):
            bar = bars.index(c % NBUF)
            mbarrier.expect(bar, nbytes)
            tma.async_load(a_desc, [xoff, c * YB], bar, a_smem.index(c % NBUF))
            tma.async_load(b_desc, [xoff, c * YB], bar, b_smem.index(c % NBUF))
        mbarrier.wait(bars.index(r % NBUF), (r // NBUF) & 1)
        v = a_smem.index(r % NBUF).load(layout) + b_smem.index(r % NBUF).load(layout)
        tma.store_wait(pendings=0)
        c_smem.store(v)
        fence_async_shared()
        tma.async_store(c_desc, [xoff, r * YB], c_smem)
    tma.store_wait(pendings=0)


@pytest.mark.parametrize("shape, nbuf", [((50, 200), 2), ((40, 72), 3)])
def test_ring_whose_barrier_view_is_rebound_in_a_branch(shape, nbuf):
    rng = np.random.default_rng()
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))

    def make():
        lay = NV([32, 64], gl.float32)
        return [TensorDescriptor.from_tensor(a.copy(), [32, 64], lay),
                TensorDescriptor.from_tensor(b.copy(), [32, 64], lay),
                TensorDescriptor.from_tensor(np.full(shape, np.nan, np.float32), [32, 64], lay), shape[1]]
    ref, sim, _ = both(add_ring, make, (-(-shape[0] // 32),), NBUF=nbuf)
    assert np.array_equal(_arr(sim[2]), a + b) and np.array_equal(_arr(ref[2]), a + b)


@gt.jit
def pingpong(x_desc, y_desc, n_steps):
    """x -> 2x + 1, n_steps times, between two buffers swapped each step; a branch picks the
    buffer of the last or the one before; the result goes out with its column halves swapped,
    each written through a slice (the right one from inside the 128-byte swizzle's period)."""
    BM: gl.constexpr = x_desc.block_type.shape[0]
    BN: gl.constexpr = x_desc.block_type.shape[1]
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [gl.num_warps(), 1], [1, 0])
    Lh: gl.constexpr = gl.BlockedLayout([1, 2], [4, 8], [gl.num_warps(), 1], [1, 0])
    cur = gl.allocate_shared_memory(gl.float32, [BM, BN], x_desc.layout)
    nxt = gl.allocate_shared_memory(gl.float32, [BM, BN], x_desc.layout)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, x_desc.block_type.nbytes)
    tma.async_load(x_desc, [gl.program_id(0) * BM, 0], bar, cur)
    mbarrier.wait(bar, 0)
    for k in gl.range(0, n_steps):
        nxt.store(cur.load(L) * 2.0 + 1.0)
        cur, nxt = nxt, cur
    pick = cur
    with gl.if_(n_steps % 2 == 1):
        pick = nxt
    left, right = pick.load(L).reshape([BM, 2, BN // 2]).permute((0, 2, 1)).split()
    out = gl.allocate_shared_memory(gl.float32, [BM, BN], y_desc.layout)
    out.slice(0, BN // 2, dim=1).store(gl.convert_layout(right, Lh))
    out.slice(BN // 2, BN // 2, dim=1).store(gl.convert_layout(left, Lh))
    fence_async_shared()
    tma.async_store(y_desc, [gl.program_id(0) * BM, 0], out)
    tma.store_wait(0)


@pytest.mark.parametrize("shape, BM, n", [((64, 32), 32, 3), ((64, 64), 16, 4), ((32, 32), 32, 0)])
def test_buffers_swapped_in_a_loop_and_picked_by_a_branch(shape, BM, n):
    rng = np.random.default_rng()
    x = rng.standard_normal(shape).astype(np.float32)
    hist = [x]
    for _ in range(n):
        hist.append(hist[-1] * 2 + 1)
    p = hist[n - 1] if n % 2 else hist[n]
    h = shape[1] // 2
    exp = np.concatenate([p[:, h:], p[:, :h]], axis=1)

    def make():
        lay = NV([BM, shape[1]], gl.float32)
        return [TensorDescriptor.from_tensor(x.copy(), [BM, shape[1]], lay),
                TensorDescriptor.from_tensor(np.full(shape, np.nan, np.float32), [BM, shape[1]], lay), n]
    ref, sim, _ = both(pingpong, make, (shape[0] // BM,))
    assert np.array_equal(_arr(sim[1]), exp) and np.array_equal(_arr(ref[1]), exp)
    pingpong.trace(*make(), target="sm_90a").compile("sm_90a")   # ptxas takes it


@gt.jit
def half_by_branch(x_ptr, out, c, DIM: gl.constexpr):
    """One half of a 32x32 swizzled buffer, picked at run time, read back."""
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    rows = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None]
    cols = gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [32, 32], gl.SwizzledSharedLayout(4, 1, 8, [1, 0]))
    buf.store(gl.load(x_ptr + rows * 32 + cols))
    v = buf.slice(0, 16, dim=DIM)
    with gl.if_(c > 0):
        v = buf.slice(16, 16, dim=DIM)
    H: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0]) if DIM == 0 else \
        gl.BlockedLayout([1, 4], [4, 4], [4, 1], [1, 0]) if False else gl.BlockedLayout([1, 2], [4, 8], [4, 1], [1, 0])
    shape: gl.constexpr = [16, 32] if DIM == 0 else [32, 16]
    r = gl.arange(0, shape[0], gl.SliceLayout(1, H))[:, None]
    q = gl.arange(0, shape[1], gl.SliceLayout(0, H))[None, :]
    gl.store(out + r * shape[1] + q, v.load(H))


@pytest.mark.parametrize("c", [0, 1])
def test_row_halves_picked_by_a_branch(c):
    """Rows 16..31 repeat the swizzle of rows 0..15: one offset table, a moved base."""
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    ref, sim, _ = both(half_by_branch, lambda: [x.copy(), np.full((16, 32), np.nan, np.float32), c], (1,), DIM=0)
    assert np.array_equal(sim[1], x[16 * c:16 * c + 16]) and np.array_equal(ref[1], sim[1])


def test_column_halves_picked_by_a_branch_are_refused_clearly():
    """Columns 16..31 of 128-byte swizzled rows sit at the left half's offsets XOR 64 bytes: two
    tables, which one carried address cannot select between (a design limit of the emitter)."""
    x = np.zeros((32, 32), np.float32)
    g = half_by_branch.trace(x, np.zeros((32, 16), np.float32), 1, DIM=1, target="sm_90a").graph
    with pytest.raises(CompileError, match="placed differently") as e:
        emit(g, "sm_90a")
    assert "test_first_week_sim.py" in str(e.value)


# -- warp specialization and an epilogue through shared memory -----------------------------------

def _loader(x_desc, bufs, ready, empty, n_tiles, NBUF: gl.constexpr):
    i = gl.full([], 0, gl.int32)
    for t in gl.range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        s = i % NBUF
        mbarrier.wait(empty.index(s), ((i // NBUF) & 1) ^ 1)
        mbarrier.expect(ready.index(s), x_desc.block_type.nbytes)
        tma.async_load(x_desc, [t * x_desc.block_type.shape[0], 0], ready.index(s), bufs.index(s))
        i += 1


def _scaler(y_desc, scale_ptr, bufs, out_s, ready, empty, n_tiles, NBUF: gl.constexpr):
    BM: gl.constexpr = y_desc.block_type.shape[0]
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [gl.num_warps(), 1], [1, 0])
    i = gl.full([], 0, gl.int32)
    for t in gl.range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        s = i % NBUF
        mbarrier.wait(ready.index(s), (i // NBUF) & 1)
        x = bufs.index(s).load(L)
        mbarrier.arrive(empty.index(s))
        y = x * gl.load(scale_ptr + t * BM + gl.arange(0, BM, gl.SliceLayout(1, L)))[:, None]
        tma.store_wait(0)
        out_s.store(y)
        fence_async_shared()
        tma.async_store(y_desc, [t * BM, 0], out_s)
        i += 1
    tma.store_wait(0)


@gt.jit
def ws_scale(x_desc, y_desc, scale_ptr, n_tiles, NBUF: gl.constexpr, LOADER_WARPS: gl.constexpr):
    """Persistent: a TMA loader partition fills a ring (ready/empty mbarriers), the default
    partition scales each row of a tile and stores it by TMA."""
    bufs = gl.allocate_shared_memory(x_desc.dtype, [NBUF] + x_desc.block_type.shape, x_desc.layout)
    out_s = gl.allocate_shared_memory(y_desc.dtype, y_desc.block_type.shape, y_desc.layout)
    ready = mbarrier.allocate_mbarrier(batch=NBUF)
    empty = mbarrier.allocate_mbarrier(batch=NBUF)
    for s in gl.static_range(NBUF):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize([(_scaler, (y_desc, scale_ptr, bufs, out_s, ready, empty, n_tiles, NBUF)),
                        (_loader, (x_desc, bufs, ready, empty, n_tiles, NBUF))], [LOADER_WARPS], [24])


@pytest.mark.parametrize("M, BM, nbuf, grid, num_warps, loader_warps", [(200, 32, 2, 3, 4, 1), (64, 16, 3, 1, 8, 2)])
def test_warp_specialized_ring(M, BM, nbuf, grid, num_warps, loader_warps):
    rng = np.random.default_rng()
    x = rng.standard_normal((M, 64)).astype(np.float32)
    scale = rng.standard_normal(-(-M // BM) * BM).astype(np.float32)

    def make():
        lay = NV([BM, 64], gl.float32)
        return [TensorDescriptor.from_tensor(x.copy(), [BM, 64], lay),
                TensorDescriptor.from_tensor(np.full((M, 64), np.nan, np.float32), [BM, 64], lay),
                scale.copy(), -(-M // BM)]
    ref, sim, _ = both(ws_scale, make, (grid,), ws=True, num_warps=num_warps, NBUF=nbuf, LOADER_WARPS=loader_warps)
    assert np.array_equal(_arr(sim[1]), x * scale[:M, None]) and np.array_equal(_arr(ref[1]), _arr(sim[1]))


@gt.jit
def mma_bias_relu(a_desc, b_desc, bias_ptr, c_ptr, M, N, stride_cm):
    """relu(A @ B + bias): a 2-slot TMA ring with one wgmma in flight, K from the descriptor, the
    accumulator read back through a swizzled buffer into a blocked layout, masked stores."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                    instr_shape=[16, BN, 16])
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [2, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [2, BK, BN], b_desc.layout)
    bars = mbarrier.allocate_mbarrier(batch=2)
    mbarrier.init(bars.index(0), count=1)
    mbarrier.init(bars.index(1), count=1)
    off_m = gl.program_id(0) * BM
    off_n = gl.program_id(1) * BN
    nk = gl.cdiv(a_desc.shape[1], BK)
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    mbarrier.expect(bars.index(0), nbytes)
    tma.async_load(a_desc, [off_m, 0], bars.index(0), a_bufs.index(0))
    tma.async_load(b_desc, [0, off_n], bars.index(0), b_bufs.index(0))
    acc = gl.zeros([BM, BN], gl.float32, acc_l)
    for k in gl.range(0, nk):
        s = k % 2
        mbarrier.wait(bars.index(s), (k // 2) & 1)
        acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc, is_async=True)
        acc = warpgroup_mma_wait(1, deps=[acc])   # step k - 1's wgmma is done: its slot is free
        with gl.if_(k + 1 < nk):
            ns = (k + 1) % 2
            mbarrier.expect(bars.index(ns), nbytes)
            tma.async_load(a_desc, [off_m, (k + 1) * BK], bars.index(ns), a_bufs.index(ns))
            tma.async_load(b_desc, [(k + 1) * BK, off_n], bars.index(ns), b_bufs.index(ns))
    acc = warpgroup_mma_wait(0, deps=[acc])
    epi = gl.allocate_shared_memory(gl.float32, [BM, BN], gl.SwizzledSharedLayout(4, 1, 8, [1, 0]))
    epi.store(acc)
    L: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [gl.num_warps(), 1], [1, 0])
    rows = off_m + gl.arange(0, BM, gl.SliceLayout(1, L))
    cols = off_n + gl.arange(0, BN, gl.SliceLayout(0, L))
    v = gl.maximum(epi.load(L) + gl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :], 0.0)
    gl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], v.to(c_ptr.dtype.element),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def test_mma_with_an_epilogue_through_shared_memory():
    rng = np.random.default_rng()
    M, N, K = int(rng.integers(65, 128)), int(rng.integers(33, 64)), 72
    a = rng.standard_normal((M, K)).astype(np.float16)
    b_rows = rng.standard_normal((K, 72)).astype(np.float16)   # rows padded to 144 bytes (TMA's strides)
    b = b_rows[:, :N]
    bias = rng.standard_normal(N).astype(np.float32)
    exp = np.maximum(a.astype(np.float32) @ b.astype(np.float32) + bias, 0)

    def make():
        return [TensorDescriptor.from_tensor(a.copy(), [64, 32], NV([64, 32], gl.float16)),
                TensorDescriptor.from_tensor(b_rows.copy()[:, :N], [32, 32], NV([32, 32], gl.float16)), bias.copy(),
                np.full((M, N), np.nan, np.float16), M, N, N]
    ref, sim, _ = both(mma_bias_relu, make, (-(-M // 64), -(-N // 32)))
    np.testing.assert_allclose(sim[3].astype(np.float32), exp, rtol=2e-3, atol=2e-2)
    # (the order of a wgmma's f32 sums is the hardware's: an fp16 rounding apart at most)
    np.testing.assert_allclose(sim[3].astype(np.float32), ref[3].astype(np.float32), rtol=1e-3, atol=1e-2)


@gt.jit
def mma_use_acc_then_reuse(a_desc, b_desc, c_desc, K):
    """A K loop whose first wgmma ignores the accumulator (use_acc=k > 0, the accumulator holds
    123 before it), A read into registers, and C stored through the A ring's bytes
    (reinterpret) once the loop is done with them."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                    instr_shape=[16, BN, 16])
    a_bufs = gl.allocate_shared_memory(gl.float16, [2, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(gl.float16, [2, BK, BN], b_desc.layout)
    bars = mbarrier.allocate_mbarrier(batch=2)
    for i in gl.static_range(2):
        mbarrier.init(bars.index(i), count=1)
    acc = gl.full([BM, BN], 123.0, gl.float32, acc_l)
    for k in gl.range(0, gl.cdiv(K, BK)):
        s = k % 2
        mbarrier.expect(bars.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
        tma.async_load(a_desc, [gl.program_id(0) * BM, k * BK], bars.index(s), a_bufs.index(s))
        tma.async_load(b_desc, [k * BK, 0], bars.index(s), b_bufs.index(s))
        mbarrier.wait(bars.index(s), (k // 2) & 1)
        acc = warpgroup_mma(a_bufs.index(s).load(gl.DotOperandLayout(0, acc_l, 2)), b_bufs.index(s), acc,
                            use_acc=k > 0)
    c_s = a_bufs.reinterpret(gl.float32, [BM, BN], c_desc.layout)
    c_s.store(acc)
    fence_async_shared()
    tma.async_store(c_desc, [gl.program_id(0) * BM, 0], c_s)
    tma.store_wait(0)


@pytest.mark.parametrize("M, N, K, num_warps", [(128, 32, 96, 4), (128, 32, 64, 8)])
def test_use_acc_and_a_reinterpreted_ring(M, N, K, num_warps):
    rng = np.random.default_rng()
    BM = 32 * num_warps // 2
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)

    def make():
        return [TensorDescriptor.from_tensor(a.copy(), [BM, 32], NV([BM, 32], gl.float16)),
                TensorDescriptor.from_tensor(b.copy(), [32, N], NV([32, N], gl.float16)),
                TensorDescriptor.from_tensor(np.full((M, N), np.nan, np.float32), [BM, N], NV([BM, N], gl.float32)), K]
    ref, sim, _ = both(mma_use_acc_then_reuse, make, (M // BM,), num_warps=num_warps)
    np.testing.assert_allclose(_arr(sim[2]), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(_arr(sim[2]), _arr(ref[2]), rtol=1e-5, atol=1e-5)


@gt.jit
def int8_rowsums(a_ptr, b_ptr, out_ptr, K, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr):
    """Row sums of A @ B in int8 -> int32: a 2-slot cp.async ring whose copies complete on one
    mbarrier a slot (async_copy.mbarrier_arrive, increment_count=False), mma_v2."""
    W: gl.constexpr = gl.num_warps()
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[W, 1], instr_shape=[16, 8])
    ld: gl.constexpr = gl.BlockedLayout([1, 16], [32 // (BK // 16), BK // 16], [W, 1], [1, 0])
    ldb: gl.constexpr = gl.BlockedLayout([1, 16], [32 // (BN // 16), BN // 16], [W, 1], [1, 0])
    sl: gl.constexpr = gl.SwizzledSharedLayout(vec=16, per_phase=1, max_phase=4, order=[1, 0])
    a_s = gl.allocate_shared_memory(gl.int8, [2, BM, BK], sl)
    b_s = gl.allocate_shared_memory(gl.int8, [2, BK, BN], sl)
    bars = mbarrier.allocate_mbarrier(batch=2)
    mbarrier.init(bars.index(0), count=1)
    mbarrier.init(bars.index(1), count=1)
    rm = gl.arange(0, BM, gl.SliceLayout(1, ld))
    rk = gl.arange(0, BK, gl.SliceLayout(0, ld))
    kb = gl.arange(0, BK, gl.SliceLayout(1, ldb))
    rn = gl.arange(0, BN, gl.SliceLayout(0, ldb))
    acc = gl.zeros([BM, BN], gl.int32, acc_l)
    for k in gl.range(0, gl.cdiv(K, BK)):
        s = k % 2
        async_copy.async_load(a_s.index(s), a_ptr + rm[:, None] * K + (k * BK + rk)[None, :])
        async_copy.async_load(b_s.index(s), b_ptr + (k * BK + kb)[:, None] * BN + rn[None, :])
        async_copy.mbarrier_arrive(bars.index(s), increment_count=False)
        mbarrier.wait(bars.index(s), (k // 2) & 1)
        acc = mma_v2(a_s.index(s).load(gl.DotOperandLayout(0, acc_l, 4)),
                     b_s.index(s).load(gl.DotOperandLayout(1, acc_l, 4)), acc)
    gl.store(out_ptr + gl.arange(0, BM, gl.SliceLayout(1, acc_l)), gl.sum(acc, axis=1))


@pytest.mark.parametrize("BM, BN, BK, K, num_warps", [(64, 32, 32, 96, 4), (32, 64, 64, 128, 2)])
def test_int8_mma_v2_fed_by_copies_on_mbarriers(BM, BN, BK, K, num_warps):
    rng = np.random.default_rng()
    a = rng.integers(-128, 128, (BM, K)).astype(np.int8)
    b = rng.integers(-128, 128, (K, BN)).astype(np.int8)
    ref, sim, _ = both(int8_rowsums, lambda: [a.copy(), b.copy(), np.full(BM, -123456789, np.int32), K], (1,),
                       num_warps=num_warps, BM=BM, BN=BN, BK=BK)
    assert np.array_equal(sim[2], (a.astype(np.int64) @ b.astype(np.int64)).sum(1).astype(np.int32))
    assert np.array_equal(ref[2], sim[2])


@pytest.mark.parametrize("shape, nl, ns, num_warps", ADD_WS)
def test_three_partitions_and_a_predicated_arrive_on_an_out_of_range_slot(shape, nl, ns, num_warps):
    """Gluon's warp-specialization tutorial shape on ptxsim_races: the store partition's arrive on
    slot (0 - 1) % n = -1 is predicated off (its address is computed, never used)."""
    make, exp = add_ws_args(shape, np.random.default_rng())
    ref, sim, _ = both(add_ws, make, (-(-shape[0] // 32),), ws=True, num_warps=num_warps, XBLOCK=32, YBLOCK=64,
                       NL=nl, NS=ns)
    assert np.array_equal(_arr(sim[2]), exp) and np.array_equal(_arr(ref[2]), exp)


def test_maxnreg_reaches_ptxas():
    """maxnreg caps a plain kernel's registers (.maxnreg), and is the starting budget a
    warp-specialized kernel's setmaxnreg moves share."""
    make, _ = add_ws_args((32, 64), np.random.default_rng())
    ck = add_ws.trace(*make(), XBLOCK=32, YBLOCK=64, NL=1, NS=1, num_warps=4, maxnreg=128,
                      target="sm_90a").compile("sm_90a")
    assert ".maxnreg 128" in ck.asm and ck.registers <= 128
    make, _ = small_mma_args(64, 32, 32, np.random.default_rng())
    ck = small_mma.trace(*make(), LHS_IN_REG=True, INSTR_N=32, WARPS=[4, 1], num_warps=4, maxnreg=64,
                         target="sm_90a").compile("sm_90a")
    assert ".maxnreg 64" in ck.asm and ck.registers <= 64


@pytest.mark.parametrize("shape, nb, grid, num_warps", PERSISTENT)
def test_persistent_matmul_with_aggregates(shape, nb, grid, num_warps):
    """Gluon's persistence tutorial shape: the wgmma state and the scheduler are objects carried
    through the tile and K loops (they were escaped values)."""
    make, exp = persistent_args(*shape, num_warps, np.random.default_rng())
    ref, sim, _ = both(persistent_matmul, make, (grid,), num_warps=num_warps, NB=nb)
    np.testing.assert_allclose(_arr(sim[2]).astype(np.float32), exp, rtol=2e-3, atol=2e-2)
    # (the order of a wgmma's f32 sums is the hardware's: an fp16 rounding apart at most)
    np.testing.assert_allclose(_arr(sim[2]).astype(np.float32), _arr(ref[2]).astype(np.float32), rtol=1e-3, atol=1e-2)


@gt.jit
def linear_smem_transpose(x_ptr, y_ptr, SL: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, gl.threads_per_warp() // 4], [4, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    s = gl.allocate_shared_memory(gl.float32, [32, 32], SL, gl.load(x_ptr + r))
    gl.store(y_ptr + r, s.permute((1, 0)).load(L))


# columns, then rows, the row bits XORed into the column's groups of 4 (a hand-made swizzle)
LINEAR_BASES = [[0, 1], [0, 2], [0, 4], [0, 8], [0, 16], [1, 4], [2, 8], [4, 16], [8, 0], [16, 0]]


def test_a_transposed_read_through_a_shared_linear_layout():
    """gl.SharedLinearLayout (Gluon's name; it was not exported) and .permute of it (was refused)."""
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    sl = gl.SharedLinearLayout(offset_bases=LINEAR_BASES)
    ref, sim, _ = both(linear_smem_transpose, lambda: [x.copy(), np.full((32, 32), np.nan, np.float32)], (1,), SL=sl)
    assert np.array_equal(sim[1], x.T) and np.array_equal(ref[1], x.T)


@gt.jit
def int8_wgmma(a_desc, b_desc, out_ptr, LHS_REG: gl.constexpr):
    """A @ B^T in 8-bit integers on wgmma (K-major B), accumulated in int32, A from shared memory or
    registers."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0]
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 32])
    a_s = gl.allocate_shared_memory(a_desc.dtype, [BM, BK], a_desc.layout)
    b_s = gl.allocate_shared_memory(b_desc.dtype, [BN, BK], b_desc.layout)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma.async_load(a_desc, [gl.program_id(0) * BM, 0], bar, a_s)
    tma.async_load(b_desc, [0, 0], bar, b_s)
    mbarrier.wait(bar, 0)
    a = a_s.load(gl.DotOperandLayout(0, acc_l, 4)) if LHS_REG else a_s
    acc = warpgroup_mma(a, b_s.permute((1, 0)), gl.full([BM, BN], 7, gl.int32, acc_l))
    rows = gl.program_id(0) * BM + gl.arange(0, BM, gl.SliceLayout(1, acc_l))
    cols = gl.arange(0, BN, gl.SliceLayout(0, acc_l))
    gl.store(out_ptr + rows[:, None] * BN + cols[None, :], acc)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("BN, BK, lhs", [(32, 64, False), (16, 128, True), (64, 32, True)])
def test_8_bit_integer_wgmma(dtype, BN, BK, lhs):
    """ptxsim_hopper had no s8/u8 wgmma (NotImplementedError): the emitter's integer wgmma had
    only been assembled, never run."""
    rng = np.random.default_rng()
    lo, hi = (-128, 128) if dtype == "int8" else (0, 256)
    a = rng.integers(lo, hi, (128, BK)).astype(dtype)
    b = rng.integers(lo, hi, (BN, BK)).astype(dtype)
    g = getattr(gl, dtype)

    def make():
        return [TensorDescriptor.from_tensor(a.copy(), [64, BK], NV([64, BK], g)),
                TensorDescriptor.from_tensor(b.copy(), [BN, BK], NV([BN, BK], g)),
                np.full((128, BN), -123456789, np.int32)]
    ref, sim, text = both(int8_wgmma, make, (2,), LHS_REG=lhs)
    exp = ((a.astype(np.int64) @ b.astype(np.int64).T + 7) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    assert f".s32.{'s8.s8' if dtype == 'int8' else 'u8.u8'}" in text
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp)


@gt.jit
def mma_v2_from_shared(a_ptr, b_ptr, out_ptr, M: gl.constexpr, N: gl.constexpr, K: gl.constexpr, KW: gl.constexpr):
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[gl.num_warps(), 1],
                                                    instr_shape=[16, 8])
    ld: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [gl.num_warps(), 1], [1, 0])
    sl: gl.constexpr = gl.SwizzledSharedLayout(vec=4, per_phase=1, max_phase=8, order=[1, 0])
    rm = gl.arange(0, M, gl.SliceLayout(1, ld))
    rk = gl.arange(0, K, gl.SliceLayout(0, ld))
    rkb = gl.arange(0, K, gl.SliceLayout(1, ld))
    rn = gl.arange(0, N, gl.SliceLayout(0, ld))
    a_s = gl.allocate_shared_memory(a_ptr.dtype.element, [M, K], sl, gl.load(a_ptr + rm[:, None] * K + rk[None, :]))
    b_s = gl.allocate_shared_memory(b_ptr.dtype.element, [K, N], sl, gl.load(b_ptr + rkb[:, None] * N + rn[None, :]))
    acc = mma_v2(a_s.load(gl.DotOperandLayout(0, acc_l, KW)), b_s.load(gl.DotOperandLayout(1, acc_l, KW)),
                 gl.zeros([M, N], gl.float32, acc_l))
    om = gl.arange(0, M, gl.SliceLayout(1, acc_l))
    on = gl.arange(0, N, gl.SliceLayout(0, acc_l))
    gl.store(out_ptr + om[:, None] * N + on[None, :], acc)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_mma_v2(dtype):
    """mma.sync on fp8 (sm_89+): ptxsim_tc decoded no e4m3/e5m2 fragments (NotImplementedError)."""
    rng = np.random.default_rng()
    h = getattr(ml_dtypes, dtype)
    a = rng.standard_normal((32, 64)).astype(h)
    b = rng.standard_normal((64, 32)).astype(h)
    ref, sim, text = both(mma_v2_from_shared, lambda: [a.copy(), b.copy(), np.full((32, 32), np.nan, np.float32)], (1,),
                          M=32, N=32, K=64, KW=4)
    exp = a.astype(np.float64) @ b.astype(np.float64)
    assert "mma.sync.aligned.m16n8k32" in text
    np.testing.assert_allclose(sim[2], exp, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(sim[2], ref[2], rtol=1e-5, atol=1e-4)

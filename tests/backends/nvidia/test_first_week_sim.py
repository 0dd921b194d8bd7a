"""A Gluon user's first-week Hopper kernels with shared memory, TMA, mbarriers and warp
specialization (tests/test_first_week_hopper.py and below) emitted for sm_90a and run on the CPU
Hopper simulators against the interpreter and numpy, on fresh random inputs with NaN-poisoned
outputs, and assembled by ptxas. Each found a gap: a view rebound inside a loop or branch (``bar =
bars.index(s)`` in a ``gl.if_``, buffers swapped each step) crashed the emitter; a slice of a
swizzled dim from inside the swizzle's period was refused by it; ``.index`` of a 3-D TMA block was
refused by the tracer. The tensor-core kernels are in test_first_week_mma_sim.py.
"""
import os
import re
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
from gluon_trace.language.nvidia.ampere import async_copy  # noqa: E402
from gluon_trace.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma  # noqa: E402
from gluon_trace.nvidia.hopper import TensorDescriptor  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from test_first_week_hopper import (ADD_WS, BATCHED, LINEAR_BASES, add_ws, add_ws_args, batched_args,  # noqa: E402
                                    batched_half_transpose, linear_smem_transpose)

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


@pytest.mark.parametrize("c", [0, 1])
def test_column_halves_picked_by_a_branch(c):
    """Columns 16..31 of the swizzled rows sit at the left half's offsets XOR 64 bytes: the join
    carries that XOR in a register beside the address (was refused: 'placed differently')."""
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    ref, sim, _ = both(half_by_branch, lambda: [x.copy(), np.full((32, 16), np.nan, np.float32), c], (1,), DIM=1)
    exp = x[:, 16 * c:16 * c + 16]
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


def test_a_run_time_xor_costs_one_xor_per_thread_register():
    """The chosen half's XOR goes into the thread's address register once (not once per element):
    one xor.b32 reads the joined XOR, then every load is [that address + an immediate]."""
    g = half_by_branch.trace(np.zeros((32, 32), np.float32), np.zeros((32, 16), np.float32), 1, DIM=1,
                             target="sm_90a").graph
    text, _, _ = emit(g, "sm_90a")
    body = text.splitlines()
    joins = [ln.split()[1].rstrip(",") for ln in body if re.fullmatch(r"\s*mov\.b32 %r\d+, 64;", ln)]
    assert len(joins) == 1   # the right half's XOR, copied into the carried register by its arm
    xors = [ln for ln in body if re.fullmatch(rf"\s*xor\.b32 %r\d+, %r\d+, {re.escape(joins[0])};", ln)]
    loads = [ln for ln in body if "ld.shared" in ln]
    assert len(xors) == 1 and len(loads) == 2, (xors, loads)   # two v2 loads a thread, one xor
    addr = xors[0].split()[1].rstrip(",")
    assert all(any(f"add.u32 {a}" in ln and addr in ln for ln in body) for a in
               {re.search(r"\[(%r\d+)", ln).group(1) for ln in loads})


@gt.jit
def nv_half_rw(x_ptr, y_ptr, out, c, STORE: gl.constexpr, DT: gl.constexpr):
    """A column half of a 32x32 NVMMA-swizzled buffer picked at run time: read back (STORE=0),
    or y written into it and the whole buffer read back (STORE=1). 16-bit halves move by
    ldmatrix/stmatrix (the layout HL puts each row's 8 columns in a quad)."""
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    HL: gl.constexpr = gl.BlockedLayout([1, 2], [8, 4], [4, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 32, gl.SliceLayout(1, HL))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, HL))[None, :]
    buf = gl.allocate_shared_memory(DT, [32, 32], gl.NVMMASharedLayout.get_default_for([32, 32], DT))
    buf.store(gl.load(x_ptr + r))
    v = buf.slice(0, 16, dim=1)
    with gl.if_(c > 0):
        v = buf.slice(16, 16, dim=1)
    if STORE:
        v.store(gl.load(y_ptr + rh))
        gl.store(out + r, buf.load(L))
    else:
        gl.store(out + rh, v.load(HL))


@pytest.mark.parametrize("c", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("store", [0, 1])
def test_column_halves_of_an_nvmma_buffer_read_and_written_through_a_branch(c, dtype, store):
    rng = np.random.default_rng()
    x = rng.standard_normal((32, 32)).astype(dtype)
    y = rng.standard_normal((32, 16)).astype(dtype)
    exp = x.copy()
    exp[:, 16 * c:16 * c + 16] = y
    if not store:
        exp = x[:, 16 * c:16 * c + 16]
    ref, sim, text = both(nv_half_rw, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, dtype), c], (1,),
                          STORE=store, DT=gl.float16 if dtype == np.float16 else gl.float32)
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp)
    if dtype == np.float16:   # the XOR-joined view takes the matrix path too
        assert ("stmatrix" if store else "ldmatrix") in text


@gt.jit
def alternating_halves(x_ptr, out_ptr, n, SWAP: gl.constexpr):
    """Step i writes the column half of a 128-byte-swizzled buffer it was handed: the left one,
    then the right, and so on. The carried view's XOR changes every iteration, by swapping the
    two halves (SWAP) or by a branch in the body picking the next."""
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    H: gl.constexpr = gl.BlockedLayout([1, 2], [4, 8], [4, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 32, gl.SliceLayout(1, H))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, H))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [32, 32], gl.NVMMASharedLayout.get_default_for([32, 32], gl.float32))
    buf.store(gl.load(x_ptr + r))
    half = buf.slice(0, 16, dim=1)
    other = buf.slice(16, 16, dim=1)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 512 + rh, half.load(H))
        if SWAP:
            half, other = other, half
        else:
            nxt = buf.slice(0, 16, dim=1)
            with gl.if_(i % 2 == 0):
                nxt = buf.slice(16, 16, dim=1)
            half = nxt


@pytest.mark.parametrize("swap", [0, 1])
def test_a_carried_view_alternating_between_column_halves(swap):
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    n = 5
    ref, sim, _ = both(alternating_halves, lambda: [x.copy(), np.full((n, 32, 16), np.nan, np.float32), n], (1,),
                       SWAP=swap)
    exp = np.stack([x[:, 16 * (i % 2):16 * (i % 2) + 16] for i in range(n)])
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@gt.jit
def picked_half_carried(x_ptr, out_ptr, c, n):
    """A column half picked by a branch, then carried unchanged through a loop (its run-time XOR
    with it) and read transposed each step."""
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    T: gl.constexpr = gl.BlockedLayout([1, 1], [8, 4], [4, 1], [0, 1])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rt = gl.arange(0, 16, gl.SliceLayout(1, T))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, T))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [32, 32], gl.NVMMASharedLayout.get_default_for([32, 32], gl.float32))
    buf.store(gl.load(x_ptr + r))
    v = buf.slice(0, 16, dim=1)
    with gl.if_(c > 0):
        v = buf.slice(16, 16, dim=1)
    acc = gl.zeros([16, 32], gl.float32, T)
    for i in gl.range(0, n):
        acc += v.permute((1, 0)).load(T)
        v = v
    gl.store(out_ptr + rt, acc)


@pytest.mark.parametrize("c", [0, 1])
def test_a_picked_half_carried_through_a_loop_and_permuted(c):
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    ref, sim, _ = both(picked_half_carried, lambda: [x.copy(), np.full((16, 32), np.nan, np.float32), c, 3], (1,))
    exp = np.zeros((16, 32), np.float32)
    for _ in range(3):
        exp += x[:, 16 * c:16 * c + 16].T
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@gt.jit
def half_by_branch_misused(a_desc, b_ptr, out, c, USE: gl.constexpr):
    """The column half of a swizzled buffer picked by a branch, then used where the backend
    does not take a run-time XOR: a wgmma operand (USE=0, a descriptor) or a cp.async
    destination (USE=1). (A TMA box into such a half is refused by the tracer already: the
    half's 64-byte swizzle does not fit its 32-byte rows.)"""
    a_s = gl.allocate_shared_memory(a_desc.dtype, a_desc.block_type.shape, a_desc.layout)
    BL: gl.constexpr = gl.NVMMASharedLayout.get_default_for([32, 32], gl.float16)
    b_s = gl.allocate_shared_memory(gl.float16, [32, 32], BL)
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    b_s.store(gl.load(b_ptr + r))
    v = b_s.slice(0, 16, dim=1)
    with gl.if_(c > 0):
        v = b_s.slice(16, 16, dim=1)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    if USE == 1:
        H: gl.constexpr = gl.BlockedLayout([1, 8], [16, 2], [4, 1], [1, 0])
        rh = gl.arange(0, 32, gl.SliceLayout(1, H))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, H))[None, :]
        async_copy.async_load(v, b_ptr + rh)
        async_copy.commit_group()
        async_copy.wait_group(0)
    else:
        mbarrier.expect(bar, a_desc.block_type.nbytes)
        tma.async_load(a_desc, [0, 0], bar, a_s)
        mbarrier.wait(bar, 0)
        acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 16, 16])
        acc = warpgroup_mma(a_s, v, gl.zeros([64, 16], gl.float32, acc_l))
        rows = gl.arange(0, 64, gl.SliceLayout(1, acc_l))
        cols = gl.arange(0, 16, gl.SliceLayout(0, acc_l))
        gl.store(out + rows[:, None] * 16 + cols[None, :], acc)


@pytest.mark.parametrize("use, what", [(0, "wgmma"), (1, "cp.async")])
def test_a_view_with_a_run_time_xor_is_refused_where_its_placement_must_be_static(use, what):
    """Uses other than .load()/.store() do not take a run-time XOR: the user's line is named,
    with what to do instead (never wrong code)."""
    a = np.zeros((64, 32), np.float16)
    desc = TensorDescriptor.from_tensor(a, [64, 32], NV([64, 32], gl.float16))
    g = half_by_branch_misused.trace(desc, np.zeros((32, 32), np.float16), np.zeros((64, 16), np.float32), 1,
                                     USE=use, target="sm_90a").graph
    with pytest.raises(CompileError, match="slice or index the buffer inside the branch") as e:
        emit(g, "sm_90a")
    msg = str(e.value)
    assert "test_first_week_sim.py" in msg and "only .load() and .store()" in msg, msg
    line = "async_copy.async_load(v, b_ptr + rh)" if use else "warpgroup_mma(a_s, v,"
    src = open(__file__).read().splitlines()
    at = int(re.search(r"test_first_week_sim\.py:(\d+)", msg).group(1))
    assert line in src[at - 1], (what, src[at - 1])


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


@pytest.mark.parametrize("shape, nl, ns, num_warps", ADD_WS)
def test_three_partitions_and_a_predicated_arrive_on_an_out_of_range_slot(shape, nl, ns, num_warps):
    """Gluon's warp-specialization tutorial shape on ptxsim_races: the store partition's arrive on
    slot (0 - 1) % n = -1 is predicated off (its address is computed, never used)."""
    make, exp = add_ws_args(shape, np.random.default_rng())
    ref, sim, _ = both(add_ws, make, (-(-shape[0] // 32),), ws=True, num_warps=num_warps, XBLOCK=32, YBLOCK=64,
                       NL=nl, NS=ns)
    assert np.array_equal(_arr(sim[2]), exp) and np.array_equal(_arr(ref[2]), exp)


def test_a_transposed_read_through_a_shared_linear_layout():
    """gl.SharedLinearLayout (Gluon's name; it was not exported) and .permute of it (was refused)."""
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    sl = gl.SharedLinearLayout(offset_bases=LINEAR_BASES)
    ref, sim, _ = both(linear_smem_transpose, lambda: [np.full((32, 32), np.nan, np.float32), x.copy()], (1,), SL=sl)
    assert np.array_equal(sim[0], x.T) and np.array_equal(ref[0], x.T)


@gt.jit
def right_halves_of_a_ring(x_ptr, out_ptr, n):
    """The right column half of each slot of a 2-slot ring (a slice from inside the 128-byte
    swizzle's period) carried through the loop: its table is XOR-linear only with its constant."""
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    H: gl.constexpr = gl.BlockedLayout([1, 2], [4, 8], [4, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 32, gl.SliceLayout(1, H))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, H))[None, :]
    bufs = gl.allocate_shared_memory(gl.float32, [2, 32, 32], gl.NVMMASharedLayout.get_default_for([32, 32], gl.float32))
    half = bufs.index(0).slice(16, 16, dim=1)
    acc = gl.zeros([32, 16], gl.float32, H)
    for i in gl.range(0, n):
        bufs.index(i % 2).store(gl.load(x_ptr + i * 1024 + r))
        acc += half.load(H)
        half = bufs.index((i + 1) % 2).slice(16, 16, dim=1)
    gl.store(out_ptr + rh, acc)


def test_a_carried_slice_from_inside_the_swizzle_period():
    x = np.random.default_rng().standard_normal((3, 32, 32)).astype(np.float32)
    ref, sim, _ = both(right_halves_of_a_ring, lambda: [x.copy(), np.full((32, 16), np.nan, np.float32), 3], (1,))
    exp = x[:, :, 16:].sum(0, dtype=np.float32)
    np.testing.assert_allclose(sim[1], exp, rtol=1e-6, atol=1e-6)
    assert np.array_equal(sim[1], ref[1])


def test_the_simulator_also_refuses_a_producer_that_loads_more_than_is_consumed():
    """As the interpreter does (test_first_week_mistakes): the extra load is never waited for."""
    from test_first_week_mistakes import ws_block_sum
    x = np.random.default_rng().standard_normal((256, 32)).astype(np.float32)

    def make():
        return [TensorDescriptor.from_tensor(x.copy(), [32, 32], NV([32, 32], gl.float32)),
                np.full((32, 32), np.nan, np.float32), 5]
    ref, sim, _ = both(ws_block_sum, make, (1,), ws=True, EXTRA=0)
    np.testing.assert_allclose(sim[1], x[:160].reshape(5, 32, 32).sum(0), rtol=1e-5, atol=1e-5)
    g = ws_block_sum.trace(*make(), target="sm_90a", EXTRA=1).graph
    text, _, smem = emit(g, "sm_90a")
    with pytest.raises(RuntimeError, match=r"exits with 1 TMA load\(s\) no mbarrier wait saw complete"):
        ptxsim_races.run(text, (1,), make(), smem, order="random", seed=1)


@gt.jit
def padded_ring(x_ptr, y_ptr, n, N: gl.constexpr, PAIRS: gl.constexpr, DT: gl.constexpr):
    """Sum of transposed tiles: cp.async into a 2-slot ring of a PaddedSharedLayout buffer, read
    back through a permuted view."""
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [gl.num_warps(), 1], [1, 0])
    LT: gl.constexpr = gl.BlockedLayout([4, 1], [8, 4], [1, gl.num_warps()], [0, 1])
    r = gl.arange(0, N, gl.SliceLayout(1, L))[:, None] * N + gl.arange(0, N, gl.SliceLayout(0, L))[None, :]
    rt = gl.arange(0, N, gl.SliceLayout(1, LT))[:, None] * N + gl.arange(0, N, gl.SliceLayout(0, LT))[None, :]
    sl: gl.constexpr = gl.PaddedSharedLayout.with_identity_for(PAIRS, [N, N], [1, 0])
    bufs = gl.allocate_shared_memory(DT, [2, N, N], sl)
    acc = gl.zeros([N, N], gl.float32, LT)
    for i in gl.range(0, n):
        s = i % 2
        async_copy.async_load(bufs.index(s), x_ptr + i * N * N + r)
        async_copy.commit_group()
        async_copy.wait_group(0)
        acc += bufs.index(s).permute((1, 0)).load(LT).to(gl.float32)
    gl.store(y_ptr + rt, acc)


@pytest.mark.parametrize("N, pairs, dtype, num_warps", [(32, [[32, 4]], "float32", 4),
                                                       (64, [[64, 8], [256, 4]], "float16", 4),
                                                       (32, [[16, 2]], "float16", 2)])
def test_padded_shared_layouts(N, pairs, dtype, num_warps):
    """The NVIDIA backend refused PaddedSharedLayout (its addressing was XOR-linear only); padded
    offsets add over coordinate bits, so the thread part and register parts are summed."""
    x = np.random.default_rng().standard_normal((3, N, N)).astype(dtype)
    ref, sim, text = both(padded_ring, lambda: [x.copy(), np.full((N, N), np.nan, np.float32), 3], (1,),
                          num_warps=num_warps, N=N, PAIRS=pairs, DT=getattr(gl, dtype))
    exp = x.astype(np.float32).transpose(0, 2, 1).sum(0)
    np.testing.assert_allclose(sim[1], exp, rtol=1e-5, atol=1e-5)
    assert np.array_equal(sim[1], ref[1])

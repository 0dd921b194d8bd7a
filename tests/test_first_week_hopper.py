"""What a Gluon user writes in a first week with shared memory, TMA, mbarriers and wgmma, in
the interpreter against numpy on fresh random inputs with NaN-poisoned outputs: Gluon's own
spellings (``desc.type.block_type``, ``num_warps: gl.constexpr``, list constexprs,
``dtype.primitive_bitwidth``, ``gl.allocate_shared_memory(gl.int64, [1], MBarrierLayout())``,
the positional ``TensorDescriptor(t, shape, strides, block, layout)``), views of a 3-D TMA
block, Gluon's warp-specialization and persistence tutorials' shapes (three partitions; @aggregate
state carried through loops). Mistakes are in test_first_week_mistakes.py; the same kernels run on
the Hopper simulator in tests/backends/nvidia/test_first_week_sim.py.
"""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import ArgumentValueError, InterpreterError, TraceError
from gluon_trace.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                warpgroup_mma_wait)
from gluon_trace.nvidia.hopper import TensorDescriptor

NV = gl.NVMMASharedLayout.get_default_for


def _nan(shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype)


# -- Gluon's spellings ---------------------------------------------------------------------------

@gt.jit
def memcpy_1d(in_desc, out_desc, XBLOCK: gl.constexpr):
    """Gluon's first TMA kernel, as its users write it."""
    pid = gl.program_id(0)
    smem = gl.allocate_shared_memory(in_desc.dtype, [XBLOCK], in_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    gl.static_assert(in_desc.block_type == out_desc.block_type)
    gl.static_assert(in_desc.type.block_type.element_ty == out_desc.dtype)
    mbarrier.expect(bar, in_desc.nbytes_per_cta)
    tma.async_copy_global_to_shared(in_desc, [pid * XBLOCK], bar, smem)
    mbarrier.wait(bar, phase=0)
    mbarrier.invalidate(bar)
    tma.async_copy_shared_to_global(out_desc, [pid * XBLOCK], smem)
    tma.store_wait(pendings=0)


def test_block_types_compare_equal_and_desc_type_has_one():
    rng = np.random.default_rng()
    n = 4 * int(rng.integers(17, 125))  # a 1-D TMA store writes whole 16-byte pieces
    x = rng.standard_normal(n).astype(np.float32)
    out = _nan(n)
    lay = NV([64], gl.float32)
    a, b = TensorDescriptor(x, x.shape, [1], [64], lay), TensorDescriptor(out, out.shape, [1], [64], lay)
    assert a.block_type == b.block_type and hash(a.block_type) == hash(b.block_type)
    assert a.block_type != TensorDescriptor(out, out.shape, [1], [32], NV([32], gl.float32)).block_type
    memcpy_1d[(-(-n // 64),)](a, b, XBLOCK=64, num_warps=1, backend="interpreter")
    assert np.array_equal(out, x)


@gt.jit
def small_mma(a_desc, b_desc, c_desc, d_desc, LHS_IN_REG: gl.constexpr, INSTR_N: gl.constexpr,
              WARPS: gl.constexpr, num_warps: gl.constexpr):
    """D = A @ B + C on one tile; C is read from shared memory straight into the wgmma layout,
    D stored from it; k from ``primitive_bitwidth`` and the warps as a list constexpr."""
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    a_smem = gl.allocate_shared_memory(a_desc.dtype, a_desc.block_type.shape, a_desc.layout)
    b_smem = gl.allocate_shared_memory(b_desc.dtype, b_desc.block_type.shape, b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes + c_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(a_desc, [0, 0], bar, a_smem)
    tma.async_copy_global_to_shared(b_desc, [0, 0], bar, b_smem)
    tma.async_copy_global_to_shared(c_desc, [0, 0], bar, c_smem)
    mbarrier.wait(bar, phase=0)
    mbarrier.invalidate(bar)
    k: gl.constexpr = 256 // a_desc.dtype.primitive_bitwidth
    c_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=WARPS,
                                                       instr_shape=[16, INSTR_N, k])
    if LHS_IN_REG:
        a = a_smem.load(gl.DotOperandLayout(operand_index=0, parent=c_layout,
                                            k_width=32 // a_desc.dtype.primitive_bitwidth))
    else:
        a = a_smem
    d = warpgroup_mma(a, b_smem, c_smem.load(c_layout), is_async=True)
    d = warpgroup_mma_wait(num_outstanding=0, deps=(d,))
    d_smem = gl.allocate_shared_memory(d_desc.dtype, d_desc.block_type.shape, d_desc.layout)
    d_smem.store(d)
    fence_async_shared()
    tma.async_copy_shared_to_global(d_desc, [0, 0], d_smem)
    tma.store_wait(pendings=0)


# (M, N, K), A from registers, wgmma's n, num_warps, warps_per_cta
SMALL_MMA = [((64, 32, 32), False, 16, 4, [4, 1]), ((64, 64, 64), True, 32, 8, [4, 2]),
             ((128, 64, 32), False, 64, 8, [8, 1])]


def small_mma_args(M, N, K, rng):
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    C = rng.standard_normal((M, N)).astype(np.float32)
    exp = A.astype(np.float32) @ B.astype(np.float32) + C

    def make():
        D = _nan((M, N))
        return [TensorDescriptor(A.copy(), A.shape, [K, 1], A.shape, NV([M, K], gl.float16)),
                TensorDescriptor(B.copy(), B.shape, [N, 1], B.shape, NV([K, N], gl.float16)),
                TensorDescriptor(C.copy(), C.shape, [N, 1], C.shape, NV([M, N], gl.float32)),
                TensorDescriptor(D, D.shape, [N, 1], D.shape, NV([M, N], gl.float32))]
    return make, exp


@pytest.mark.parametrize("shape, lhs, n, num_warps, warps", SMALL_MMA)
def test_small_mma_with_num_warps_a_constexpr_parameter(shape, lhs, n, num_warps, warps):
    make, exp = small_mma_args(*shape, np.random.default_rng())
    args = make()
    small_mma[(1,)](*args, LHS_IN_REG=lhs, INSTR_N=n, WARPS=warps, num_warps=num_warps, backend="interpreter")
    np.testing.assert_allclose(args[3].base, exp, rtol=1e-3, atol=1e-3)
    k = small_mma.trace(*make(), LHS_IN_REG=lhs, INSTR_N=n, WARPS=warps, num_warps=num_warps, target="sm_90a")
    assert k.graph.num_warps == num_warps and k.graph.constexprs["num_warps"] == num_warps


def test_num_warps_parameter_defaults_like_the_launch():
    @gt.jit
    def k(out, num_warps: gl.constexpr):
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        gl.store(out + gl.arange(0, 32 * num_warps, lay), gl.full([32 * num_warps], num_warps, gl.int32, lay))
    out = np.zeros(128, np.int32)
    k[(1,)](out, backend="interpreter")          # no num_warps: the launch's default, 4
    assert (out == 4).all()
    out = np.zeros(256, np.int32)
    k[(1,)](out, num_warps=8, backend="interpreter")
    assert (out == 8).all()


# -- a 3-D TMA block: views of one batch ------------------------------------------------------------

@gt.jit
def batched_half_transpose(src, dst_ptr, num_warps: gl.constexpr):
    """A [B, R, C] block by TMA (a rank-3 NVMMA layout); batch b's right half of the columns,
    transposed, to dst[b]."""
    B: gl.constexpr = src.block_type.shape[0]
    R: gl.constexpr = src.block_type.shape[1]
    C: gl.constexpr = src.block_type.shape[2]
    buf = gl.allocate_shared_memory(src.dtype, [B, R, C], src.layout)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, src.block_type.nbytes)
    tma.async_load(src, [gl.program_id(0) * B, 0, 0], bar, buf)
    mbarrier.wait(bar, 0)
    L: gl.constexpr = gl.BlockedLayout([1, 1], [8, 4], [num_warps, 1], [0, 1])
    for b in gl.static_range(B):
        t = buf.index(b).slice(C // 2, C // 2, dim=1).permute((1, 0)).load(L)
        rr = gl.arange(0, C // 2, gl.SliceLayout(1, L))
        cc = gl.arange(0, R, gl.SliceLayout(0, L))
        gl.store(dst_ptr + (gl.program_id(0) * B + b) * (C // 2) * R + rr[:, None] * R + cc[None, :], t)


# (tensor shape, block, dtype, num_warps)
BATCHED = [((6, 16, 32), (2, 16, 32), np.float16, 4), ((4, 8, 16), (4, 8, 16), np.float32, 2)]


def batched_args(shape, block, dtype, rng):
    X = rng.standard_normal(shape).astype(dtype)
    exp = np.ascontiguousarray(X[:, :, shape[2] // 2:].transpose(0, 2, 1))
    gdt = gl.float16 if dtype == np.float16 else gl.float32
    return (lambda: [TensorDescriptor.from_tensor(X.copy(), list(block), NV(list(block), gdt)),
                     _nan(exp.shape, dtype)]), exp


@pytest.mark.parametrize("shape, block, dtype, num_warps", BATCHED)
def test_index_of_a_3d_tma_block(shape, block, dtype, num_warps):
    """.index(b) of a rank-3 NVMMA buffer is a rank-2 NVMMA view when each batch's rows fill the
    swizzle's period (was refused as dropping a swizzled dim)."""
    make, exp = batched_args(shape, block, dtype, np.random.default_rng())
    args = make()
    batched_half_transpose[(shape[0] // block[0],)](*args, num_warps=num_warps, backend="interpreter")
    assert np.array_equal(args[1], exp)


def test_index_of_a_3d_block_whose_batches_split_the_swizzle_is_refused():
    """4 rows of 128 bytes are half of the 128-byte swizzle's 8-row period: batch 1 starts
    mid-pattern, which no rank-2 layout describes."""
    @gt.jit
    def k(out):
        lay: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=3)
        buf = gl.allocate_shared_memory(gl.float16, [2, 4, 64], lay)
        buf.index(1).load(gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0]))
    with pytest.raises(TraceError, match="drops the leading dim") as e:
        k[(1,)](np.zeros(1, np.float32), backend="interpreter")
    assert "test_first_week_hopper.py" in str(e.value)


# -- a transposed read through a hand-made shared linear layout (NVIDIA and AMD tests) -----------

@gt.jit
def linear_smem_transpose(y_ptr, x_ptr, SL: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, gl.threads_per_warp() // 4], [4, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    s = gl.allocate_shared_memory(gl.float32, [32, 32], SL, gl.load(x_ptr + r))
    gl.store(y_ptr + r, s.permute((1, 0)).load(L))


# columns, then rows, the row bits XORed into the column's groups of 4 (a hand-made swizzle)
LINEAR_BASES = [[0, 1], [0, 2], [0, 4], [0, 8], [0, 16], [1, 4], [2, 8], [4, 16], [8, 0], [16, 0]]


# -- Gluon's warp-specialization tutorial shape: three partitions, tuples of descriptors ----------

def _ws_load(descs, barriers, buffers, xoff, numel, YBLOCK: gl.constexpr):
    a_desc, b_desc, c_desc = descs
    load_empty, load_ready, c_empty, c_ready = barriers
    a_bufs, b_bufs, c_bufs = buffers
    xnumel, ynumel = numel
    nb: gl.constexpr = a_bufs.type.shape[0]
    for i in gl.range(gl.cdiv(ynumel, YBLOCK)):
        idx = i % nb
        mbarrier.wait(load_empty.index(idx), (i // nb & 1) ^ 1)
        mbarrier.expect(load_ready.index(idx), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(a_desc, [xoff, i * YBLOCK], load_ready.index(idx), a_bufs.index(idx))
        tma.async_copy_global_to_shared(b_desc, [xoff, i * YBLOCK], load_ready.index(idx), b_bufs.index(idx))


def _ws_store(descs, barriers, buffers, xoff, numel, YBLOCK: gl.constexpr):
    a_desc, b_desc, c_desc = descs
    load_empty, load_ready, c_empty, c_ready = barriers
    a_bufs, b_bufs, c_bufs = buffers
    xnumel, ynumel = numel
    nb: gl.constexpr = c_bufs.type.shape[0]
    outstanding: gl.constexpr = nb - 1
    for i in gl.range(gl.cdiv(ynumel, YBLOCK)):
        idx = i % nb
        mbarrier.wait(c_ready.index(idx), i // nb & 1)
        tma.async_copy_shared_to_global(c_desc, [xoff, i * YBLOCK], c_bufs.index(idx))
        tma.store_wait(outstanding)
        # at i = 0 the slot (0 - 1) % nb is -1 (% keeps the dividend's sign): out of range, but the
        # arrive is predicated off, so nothing reads it
        mbarrier.arrive(c_empty.index((i - outstanding) % nb), count=1, pred=i >= outstanding)
    tma.store_wait(0)


def _ws_compute(barriers, buffers, ynumel, YBLOCK: gl.constexpr, layout: gl.constexpr):
    load_empty, load_ready, c_empty, c_ready = barriers
    a_bufs, b_bufs, c_bufs = buffers
    nl: gl.constexpr = a_bufs.type.shape[0]
    ns: gl.constexpr = c_bufs.type.shape[0]
    for i in gl.range(gl.cdiv(ynumel, YBLOCK)):
        li = i % nl
        mbarrier.wait(load_ready.index(li), i // nl & 1)
        a = a_bufs.index(li).load(layout)
        b = b_bufs.index(li).load(layout)
        fence_async_shared()
        mbarrier.arrive(load_empty.index(li), count=1)
        si = i % ns
        mbarrier.wait(c_empty.index(si), (i // ns & 1) ^ 1)
        c_bufs.index(si).store(a + b)
        fence_async_shared()
        mbarrier.arrive(c_ready.index(si), count=1)


@gt.jit
def add_ws(a_desc, b_desc, c_desc, xnumel, ynumel, XBLOCK: gl.constexpr, YBLOCK: gl.constexpr,
           NL: gl.constexpr, NS: gl.constexpr, num_warps: gl.constexpr):
    """c = a + b: a TMA load partition, a compute partition (the default), a TMA store partition,
    mbarrier pairs between them; arguments cross as tuples."""
    layout: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, num_warps], [1, 0])
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [NL] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [NL] + b_desc.block_type.shape, b_desc.layout)
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [NS] + c_desc.block_type.shape, c_desc.layout)
    load_empty = gl.allocate_shared_memory(gl.int64, [NL, 1], mbarrier.MBarrierLayout())
    load_ready = gl.allocate_shared_memory(gl.int64, [NL, 1], mbarrier.MBarrierLayout())
    c_empty = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
    c_ready = gl.allocate_shared_memory(gl.int64, [NS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NL):
        mbarrier.init(load_empty.index(i), count=1)
        mbarrier.init(load_ready.index(i), count=1)
    for i in gl.static_range(NS):
        mbarrier.init(c_empty.index(i), count=1)
        mbarrier.init(c_ready.index(i), count=1)
    descs = (a_desc, b_desc, c_desc)
    barriers = (load_empty, load_ready, c_empty, c_ready)
    buffers = (a_bufs, b_bufs, c_bufs)
    xoff = gl.program_id(0) * XBLOCK
    gl.warp_specialize([(_ws_compute, (barriers, buffers, ynumel, YBLOCK, layout)),
                        (_ws_load, (descs, barriers, buffers, xoff, (xnumel, ynumel), YBLOCK)),
                        (_ws_store, (descs, barriers, buffers, xoff, (xnumel, ynumel), YBLOCK))], [1, 1], [24, 24])


# (shape, load buffers, store buffers, num_warps)
ADD_WS = [((64, 200), 2, 2, 4), ((40, 120), 1, 1, 8), ((32, 256), 3, 2, 4)]


def add_ws_args(shape, rng):
    a, b = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))

    def make():
        lay = NV([32, 64], gl.float32)
        return [TensorDescriptor.from_tensor(a.copy(), [32, 64], lay), TensorDescriptor.from_tensor(b.copy(), [32, 64], lay),
                TensorDescriptor.from_tensor(_nan(shape), [32, 64], lay), *shape]
    return make, a + b


@pytest.mark.parametrize("shape, nl, ns, num_warps", ADD_WS)
def test_warp_specialized_add_with_a_predicated_arrive_on_an_out_of_range_slot(shape, nl, ns, num_warps):
    """smem.index(-1) under a false predicate was refused at the index."""
    make, exp = add_ws_args(shape, np.random.default_rng())
    args = make()
    add_ws[(-(-shape[0] // 32),)](*args, XBLOCK=32, YBLOCK=64, NL=nl, NS=ns, num_warps=num_warps,
                                  maxnreg=128, backend="interpreter")
    assert np.array_equal(args[2].base, exp)


def test_an_out_of_range_slot_is_reported_where_it_is_used():
    @gt.jit
    def k(out, n):
        bufs = gl.allocate_shared_memory(gl.float32, [2, 128], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        L: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        slot = bufs.index(n - 3)
        slot.store(gl.zeros([128], gl.float32, L))
    k[(1,)](np.zeros(1, np.float32), 3, backend="interpreter")
    with pytest.raises(InterpreterError, match=r"smem_store uses smem.index\(-1\) \(the view made at line \d+\), "
                                               r"out of bounds for a buffer of 2") as e:
        k[(1,)](np.zeros(1, np.float32), 2, backend="interpreter")
    assert "slot.store" in str(e.value)


def test_python_range_over_a_run_time_bound_points_to_gl_range():
    @gt.jit
    def k(x_ptr, n):
        L: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        for i in range(n):
            gl.store(x_ptr + i * 128 + gl.arange(0, 128, L), gl.zeros([128], gl.float32, L))
    with pytest.raises(TraceError, match="cannot be used as a Python int") as e:
        k[(1,)](np.zeros(512, np.float32), 4, backend="interpreter")
    assert "gl.range(" in str(e.value)


def test_maxnreg_is_a_launch_option():
    """Triton's maxnreg (Gluon's warp-specialization tutorial passes maxnreg=128) was an
    unexpected keyword; it is part of the trace's key and checked."""
    make, _ = add_ws_args((32, 64), np.random.default_rng())
    g = add_ws.trace(*make(), XBLOCK=32, YBLOCK=64, NL=1, NS=1, num_warps=4, maxnreg=128, target="sm_90a").graph
    assert g.maxnreg == 128 and "maxnreg=128" in g.text
    g2 = add_ws.trace(*make(), XBLOCK=32, YBLOCK=64, NL=1, NS=1, num_warps=4, target="sm_90a").graph
    assert g2.maxnreg is None and g2.text != g.text
    with pytest.raises(ArgumentValueError, match=r"maxnreg=300 must be an int in \[24, 256\]"):
        add_ws.trace(*make(), XBLOCK=32, YBLOCK=64, NL=1, NS=1, num_warps=4, maxnreg=300, target="sm_90a")


# -- Gluon's persistence tutorial shape: @aggregate state carried through run-time loops ---------

@gt.constexpr_function
def wgmma_layout(BN, num_warps):
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BN, 16])


@gl.aggregate
class WGMMA:
    """An async wgmma accumulator and whether the next MMA adds to it; each call returns a new one."""

    def __init__(self, acc, use_acc):
        self.acc = acc
        self.use_acc = use_acc

    @staticmethod
    def initialize(BM, BN, num_warps):
        return WGMMA(gl.zeros((BM, BN), gl.float32, wgmma_layout(BN, num_warps)), gl.to_tensor(False))

    def issue(self, a, b):
        return WGMMA(warpgroup_mma(a, b, self.acc, is_async=True, use_acc=self.use_acc), gl.to_tensor(True))

    def wait(self, n):
        return WGMMA(warpgroup_mma_wait(n, (self.acc,)), self.use_acc)

    def take(self):
        return self.acc, WGMMA(self.acc, gl.to_tensor(False))


@gl.aggregate
class Scheduler:
    """Contiguous ranges of tiles per program, tiles numbered along M first."""

    def __init__(self, start, end, num_m):
        self.start, self.end, self.num_m = start, end, num_m

    @staticmethod
    def initialize(M, N, BM, BN):
        num_m = gl.cdiv(M, BM)
        total = num_m * gl.cdiv(N, BN)
        per = gl.cdiv(total, gl.num_programs(0))
        start = gl.program_id(0) * per
        return Scheduler(start, gl.minimum(start + per, total), num_m)

    def tile(self, idx):
        pid = self.start + idx
        return pid % self.num_m, pid // self.num_m


def _issue_loads(producer, a_desc, b_desc, off_m, off_n, k, bars, a_bufs, b_bufs, NB):
    index = producer % NB
    mbarrier.expect(bars.index(index), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(a_desc, [off_m, k], bars.index(index), a_bufs.index(index))
    tma.async_copy_global_to_shared(b_desc, [k, off_n], bars.index(index), b_bufs.index(index))
    return producer + 1


def _issue_mma(consumer, mma, bars, a_bufs, b_bufs, NB):
    index = consumer % NB
    mbarrier.wait(bars.index(index), consumer // NB & 1)
    mma = mma.wait(0)   # the wgmma before still reads the slot the next load refills
    return consumer + 1, mma.issue(a_bufs.index(index), b_bufs.index(index))


@gt.jit
def persistent_matmul(a_desc, b_desc, c_desc, M, N, NB: gl.constexpr, num_warps: gl.constexpr):
    """C = A @ B, persistent: the MMA state and the tile scheduler are objects, the ring's
    producer and consumer counts scalars, all carried through the tile and K loops."""
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    bars = gl.allocate_shared_memory(gl.int64, [NB, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NB):
        mbarrier.init(bars.index(i), count=1)
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [NB] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [NB] + b_desc.block_type.shape, b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    producer = gl.to_tensor(0)
    consumer = gl.to_tensor(0)
    mma = WGMMA.initialize(BM, BN, num_warps)
    sched = Scheduler.initialize(M, N, BM, BN)
    for idx in gl.range(sched.end - sched.start):
        pid_m, pid_n = sched.tile(idx)
        off_m = pid_m * BM
        off_n = pid_n * BN
        for k in gl.static_range(0, BK * (NB - 2), BK):
            producer = _issue_loads(producer, a_desc, b_desc, off_m, off_n, k, bars, a_bufs, b_bufs, NB)
        for k in gl.range(BK * (NB - 2), a_desc.shape[1], BK):
            producer = _issue_loads(producer, a_desc, b_desc, off_m, off_n, k, bars, a_bufs, b_bufs, NB)
            consumer, mma = _issue_mma(consumer, mma, bars, a_bufs, b_bufs, NB)
        for _ in gl.static_range(NB - 2):
            consumer, mma = _issue_mma(consumer, mma, bars, a_bufs, b_bufs, NB)
        c, mma = mma.wait(0).take()
        tma.store_wait(0)
        c_smem.store(c.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)
    tma.store_wait(0)


# (M, N, K), ring slots, programs, num_warps
PERSISTENT = [((128, 96, 128), 3, 2, 4), ((64, 64, 64), 2, 3, 4), ((192, 64, 96), 4, 2, 8)]


def persistent_args(M, N, K, num_warps, rng):
    BM, BN, BK = (64 if num_warps == 4 else 128), 32, 32
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    exp = a.astype(np.float32) @ b.astype(np.float32)
    return (lambda: [TensorDescriptor.from_tensor(a.copy(), [BM, BK], NV([BM, BK], gl.float16)),
                     TensorDescriptor.from_tensor(b.copy(), [BK, BN], NV([BK, BN], gl.float16)),
                     TensorDescriptor.from_tensor(_nan((M, N), np.float16), [BM, BN], NV([BM, BN], gl.float16)),
                     M, N]), exp


@pytest.mark.parametrize("shape, nb, grid, num_warps", PERSISTENT)
def test_persistent_matmul_with_aggregates(shape, nb, grid, num_warps):
    make, exp = persistent_args(*shape, num_warps, np.random.default_rng())
    args = make()
    persistent_matmul[(grid,)](*args, NB=nb, num_warps=num_warps, backend="interpreter")
    np.testing.assert_allclose(args[2].base.astype(np.float32), exp, rtol=2e-3, atol=2e-2)

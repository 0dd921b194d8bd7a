"""The interpreter's synchronisation checks: for each rule, a small kernel with that bug, and
the error must name the line that broke it and the line it conflicts with. Then the same
kernel fixed runs and gives numpy's answer (so a check never fires on correct code)."""
import inspect

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import InterpreterError
from gluon_trace.language.nvidia.ampere import async_copy
from gluon_trace.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                warpgroup_mma_wait)
from gluon_trace.nvidia.hopper import TensorDescriptor



def line(marker: str) -> int:
    """The line of this file that ends in ``# @marker``."""
    for i, text in enumerate(open(__file__).read().splitlines(), 1):
        if text.rstrip().endswith(f"# @{marker}"):
            return i
    raise KeyError(marker)


def raises_at(fn, at: str, other: str | None, *words):
    with pytest.raises(InterpreterError) as e:
        fn()
    msg = str(e.value)
    if at is not None:
        assert e.value.loc is not None and e.value.loc.line == line(at), msg
        assert "test_sync_checks.py" in msg
    if other is not None:
        assert f"line {line(other)}" in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


L2 = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
L1 = gl.BlockedLayout([1], [32], [1], [0])
L1W4 = gl.BlockedLayout([1], [32], [4], [0])


def desc(a, block):
    return TensorDescriptor.from_tensor(a, block, gl.NVMMASharedLayout.get_default_for(block, gl.float32))


# -- TMA: a read before the mbarrier wait ------------------------------------------------------

def make_tma_copy(wait: bool, expect_scale: int = 1):
    @gt.jit
    def tma_copy(in_desc, out_ptr, BM: gl.constexpr, BN: gl.constexpr):
        smem = gl.allocate_shared_memory(gl.float32, [BM, BN], in_desc.layout)
        bar = mbarrier.allocate_mbarrier()
        mbarrier.init(bar, count=1)  # @init
        mbarrier.expect(bar, in_desc.block_type.nbytes * expect_scale)  # @expect
        tma.async_load(in_desc, [gl.program_id(0) * BM, 0], bar, smem)  # @tma_load
        if wait:
            mbarrier.wait(bar, 0)  # @tma_wait
        x = smem.load(L2)  # @tma_read
        r = gl.program_id(0) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, L2))
        c = gl.arange(0, BN, layout=gl.SliceLayout(0, L2))
        gl.store(out_ptr + r[:, None] * BN + c[None, :], x)
    return tma_copy


def test_tma_read_before_wait(rng):
    a = rng.standard_normal((64, 32)).astype(np.float32)
    out = np.full_like(a, np.nan)
    raises_at(lambda: make_tma_copy(False)[(2,)](desc(a, [32, 32]), out, BM=32, BN=32),
              "tma_read", "tma_load", "TMA load", "mbarrier.wait")
    make_tma_copy(True)[(2,)](desc(a, [32, 32]), out, BM=32, BN=32)
    assert np.array_equal(out, a)


def test_expect_more_bytes_than_arrive_deadlocks_and_says_so(rng):
    a = rng.standard_normal((32, 32)).astype(np.float32)
    out = np.zeros_like(a)
    msg = raises_at(lambda: make_tma_copy(True, 2)[(1,)](desc(a, [32, 32]), out, BM=32, BN=32),
                    "tma_wait", "init", "deadlock", "4096 of the 8192 bytes")
    assert f"line {line('expect')}" in msg


# -- mbarrier phase -----------------------------------------------------------------------------

@gt.jit
def wrong_phase(out_ptr, PHASE: gl.constexpr):
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)  # @phase_init
    mbarrier.arrive(bar)
    mbarrier.wait(bar, PHASE)  # @phase_wait
    gl.store(out_ptr + gl.arange(0, 128, layout=L1W4), gl.full([128], 1.0, gl.float32, L1W4))


def test_wait_on_a_phase_that_never_completes_is_a_deadlock():
    out = np.zeros(128, np.float32)
    # phase 0 completed with the arrive; now waiting for parity 1 waits for phase 1: never
    raises_at(lambda: wrong_phase[(1,)](out, PHASE=1), "phase_wait", "phase_init", "deadlock",
              "1 phases completed", "1 of 1 arrivals missing")
    wrong_phase[(1,)](out, PHASE=0)
    assert (out == 1).all()


@gt.jit
def too_many_arrivals(out_ptr):
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=2)  # @count_init
    mbarrier.arrive(bar, count=3)  # @count_arrive


def test_more_arrivals_than_the_count():
    raises_at(lambda: too_many_arrivals[(1,)](np.zeros(1, np.float32)), "count_arrive", "count_init",
              "more arrivals")


@gt.jit
def uninitialized_barrier(out_ptr):
    bar = mbarrier.allocate_mbarrier()  # @uninit_alloc
    mbarrier.arrive(bar)  # @uninit_arrive


def test_barrier_used_before_init():
    raises_at(lambda: uninitialized_barrier[(1,)](np.zeros(1, np.float32)), "uninit_arrive",
              "uninit_alloc", "before mbarrier.init")


# -- Ampere async copies --------------------------------------------------------------------------

def make_cp_async(wait: bool):
    @gt.jit
    def cp_async(out_ptr, in_ptr, n):
        offs = gl.arange(0, 128, layout=L1W4)
        smem = gl.allocate_shared_memory(gl.float32, [128], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        async_copy.async_load(smem, in_ptr + offs, mask=offs < n)  # @cp_issue
        async_copy.commit_group()
        if wait:
            async_copy.wait_group(0)
        gl.store(out_ptr + offs, smem.load(L1W4))  # @cp_read
    return cp_async


def test_cp_async_read_before_wait_group(rng):
    x = rng.standard_normal(100).astype(np.float32)
    out = np.full(128, np.nan, np.float32)
    raises_at(lambda: make_cp_async(False)[(1,)](out, x, 100), "cp_read", "cp_issue", "cp.async",
              "wait_group")
    make_cp_async(True)[(1,)](out, x, 100)
    assert np.array_equal(out[:100], x) and (out[100:] == 0).all()  # masked elements land as zeros


# -- TMA store: the source reused before store_wait ---------------------------------------------

def make_store_reuse(wait: bool):
    @gt.jit
    def store_reuse(out_desc, BM: gl.constexpr, BN: gl.constexpr):
        smem = gl.allocate_shared_memory(gl.float32, [BM, BN], out_desc.layout)
        smem.store(gl.full([BM, BN], 1.0, gl.float32, L2))
        fence_async_shared()
        tma.async_store(out_desc, [0, 0], smem)  # @store_issue
        if wait:
            tma.store_wait(0)
        smem.store(gl.full([BM, BN], 2.0, gl.float32, L2))  # @store_overwrite
        fence_async_shared()
        tma.async_store(out_desc, [BM, 0], smem)
        tma.store_wait(0)
    return store_reuse


def test_tma_store_source_overwritten_before_store_wait():
    out = np.zeros((64, 32), np.float32)
    raises_at(lambda: make_store_reuse(False)[(1,)](desc(out, [32, 32]), BM=32, BN=32),
              "store_overwrite", "store_issue", "TMA store", "store_wait")
    make_store_reuse(True)[(1,)](desc(out, [32, 32]), BM=32, BN=32)
    assert (out[:32] == 1).all() and (out[32:] == 2).all()


# -- fence between ordinary stores and an async-proxy read -------------------------------------------

@gt.jit
def missing_fence(out_desc, BM: gl.constexpr, BN: gl.constexpr):
    smem = gl.allocate_shared_memory(gl.float32, [BM, BN], out_desc.layout)
    smem.store(gl.full([BM, BN], 1.0, gl.float32, L2))  # @fence_store
    tma.async_store(out_desc, [0, 0], smem)  # @fence_tma
    tma.store_wait(0)


def test_async_read_of_stores_without_fence():
    out = np.zeros((32, 32), np.float32)
    raises_at(lambda: missing_fence[(1,)](desc(out, [32, 32]), BM=32, BN=32), "fence_tma",
              "fence_store", "fence_async_shared")


# -- warp partitions ---------------------------------------------------------------------------

def _producer(bufs, ready, empty, x_ptr, n, STAGES, BLOCK, wait_empty):
    offs = gl.arange(0, BLOCK, layout=L1)
    for i in gl.range(0, n):
        s = i % STAGES
        if wait_empty:
            mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
        bufs.index(s).store(gl.load(x_ptr + i * BLOCK + offs))  # @ws_write
        mbarrier.arrive(ready.index(s))


def _consumer(bufs, ready, empty, out_ptr, n, STAGES, BLOCK):
    offs = gl.arange(0, BLOCK, layout=L1W4)
    acc = gl.zeros([BLOCK], gl.float32, layout=L1W4)
    for i in gl.range(0, n):
        s = i % STAGES
        mbarrier.wait(ready.index(s), (i // STAGES) & 1)
        acc += bufs.index(s).load(L1W4)  # @ws_read
        mbarrier.arrive(empty.index(s))
    gl.store(out_ptr + offs, acc)


def make_ring(wait_empty: bool, extra_items: int = 0):
    """``extra_items``: how many more items the consumer waits for than the producer sends."""
    @gt.jit
    def ring(x_ptr, out_ptr, n, STAGES: gl.constexpr, BLOCK: gl.constexpr):
        bufs = gl.allocate_shared_memory(gl.float32, [STAGES, BLOCK], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        ready = mbarrier.allocate_mbarrier(batch=STAGES)
        empty = mbarrier.allocate_mbarrier(batch=STAGES)
        for s in gl.static_range(STAGES):
            mbarrier.init(ready.index(s), count=1)
            mbarrier.init(empty.index(s), count=1)
        gl.warp_specialize([(_consumer, (bufs, ready, empty, out_ptr, n + extra_items, STAGES, BLOCK)),
                            (_producer, (bufs, ready, empty, x_ptr, n, STAGES, BLOCK, wait_empty))],
                           [1], [24])
    return ring


def test_race_between_partitions(rng):
    x = rng.standard_normal((10, 128)).astype(np.float32)
    out = np.zeros(128, np.float32)
    raises_at(lambda: make_ring(False)[(1,)](x, out, 10, STAGES=3, BLOCK=128), "ws_write", "ws_read",
              "race", "worker partition 1", "default partition")
    make_ring(True)[(1,)](x, out, 10, STAGES=3, BLOCK=128)
    np.testing.assert_allclose(out, x.sum(0), rtol=1e-5, atol=1e-5)


def test_partitions_waiting_on_each_other_report_every_wait():
    x = np.ones((4, 128), np.float32)
    out = np.zeros(128, np.float32)
    # consumer waits for 5 items but the producer sends 4: the consumer waits forever
    with pytest.raises(InterpreterError) as e:
        make_ring(True, extra_items=1)[(1,)](x, out, 4, STAGES=2, BLOCK=128)
    assert "deadlock" in str(e.value) and "the default partition" in str(e.value)
    make_ring(True)[(1,)](x, out, 4, STAGES=2, BLOCK=128)
    assert (out == 4).all()


# -- wgmma: the async result and the buffers it reads ----------------------------------------------

ACC = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16])


def _mma_setup(a_desc, b_desc, STAGES):
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, 64, 64], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, 64, 64], b_desc.layout)
    bars = mbarrier.allocate_mbarrier(batch=STAGES)
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    return a_bufs, b_bufs, bars


def _store_acc(c_ptr, acc):
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, ACC))
    c = gl.arange(0, 64, layout=gl.SliceLayout(0, ACC))
    gl.store(c_ptr + r[:, None] * 64 + c[None, :], acc)


def make_pipelined(outstanding: int):
    @gt.jit
    def pipelined(a_desc, b_desc, c_ptr, k_tiles, STAGES: gl.constexpr):
        a_bufs, b_bufs, bars = _mma_setup(a_desc, b_desc, STAGES)
        nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
        for s in gl.static_range(STAGES):
            mbarrier.expect(bars.index(s), nbytes)
            tma.async_load(a_desc, [0, s * 64], bars.index(s), a_bufs.index(s))
            tma.async_load(b_desc, [s * 64, 0], bars.index(s), b_bufs.index(s))
        acc = gl.zeros([64, 64], gl.float32, ACC)
        for k in gl.range(0, k_tiles):
            s = k % STAGES
            mbarrier.wait(bars.index(s), (k // STAGES) & 1)
            acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc, is_async=True)  # @mma_read
            acc = warpgroup_mma_wait(outstanding, deps=[acc])
            with gl.if_(k + STAGES < k_tiles):  # refill the slot just consumed
                mbarrier.expect(bars.index(s), nbytes)
                tma.async_load(a_desc, [0, (k + STAGES) * 64], bars.index(s), a_bufs.index(s))  # @mma_reuse
                tma.async_load(b_desc, [(k + STAGES) * 64, 0], bars.index(s), b_bufs.index(s))
        acc = warpgroup_mma_wait(0, deps=[acc])
        _store_acc(c_ptr, acc)
    return pipelined


def _bf16_pair(rng, k):
    a = rng.standard_normal((64, k)).astype(np.float32)
    b = rng.standard_normal((k, 64)).astype(np.float32)
    import gluon_trace.dtypes as dt
    a, b = dt.round_bf16(a), dt.round_bf16(b)
    return a, b


def _bf16_desc(x, block):
    import ml_dtypes
    t = x.astype(ml_dtypes.bfloat16)
    return t, TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16))


def test_stage_refilled_while_the_mma_may_still_read_it(rng):
    a, b = _bf16_pair(rng, 256)
    (ta, da), (tb, db) = _bf16_desc(a, [64, 64]), _bf16_desc(b, [64, 64])
    c = np.full((64, 64), np.nan, np.float32)
    raises_at(lambda: make_pipelined(1)[(1,)](da, db, c, 4, STAGES=2), "mma_reuse", "mma_read",
              "async warpgroup_mma", "too early")
    make_pipelined(0)[(1,)](da, db, c, 4, STAGES=2)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


@gt.jit
def read_before_mma_wait(a_desc, b_desc, c_ptr):
    a_bufs, b_bufs, bars = _mma_setup(a_desc, b_desc, 1)
    mbarrier.expect(bars.index(0), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma.async_load(a_desc, [0, 0], bars.index(0), a_bufs.index(0))
    tma.async_load(b_desc, [0, 0], bars.index(0), b_bufs.index(0))
    mbarrier.wait(bars.index(0), 0)
    acc = gl.zeros([64, 64], gl.float32, ACC)
    acc = warpgroup_mma(a_bufs.index(0), b_bufs.index(0), acc, is_async=True)  # @async_mma
    _store_acc(c_ptr, acc * 2.0)  # @async_use


def test_async_mma_result_read_before_wait(rng):
    a, b = _bf16_pair(rng, 64)
    (ta, da), (tb, db) = _bf16_desc(a, [64, 64]), _bf16_desc(b, [64, 64])
    raises_at(lambda: read_before_mma_wait[(1,)](da, db, np.zeros((64, 64), np.float32)), "async_use",
              "async_mma", "warpgroup_mma_wait")


# -- the backends' own barriers (gluon_trace.membar) are checked too ---------------------------------

def make_transpose(explicit_barrier: bool):
    @gt.jit
    def transpose(out_ptr, in_ptr):
        rows = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
        cols = gl.BlockedLayout([4, 1], [4, 8], [1, 4], [0, 1])
        r = gl.arange(0, 32, layout=gl.SliceLayout(1, rows))
        c = gl.arange(0, 16, layout=gl.SliceLayout(0, rows))
        smem = gl.allocate_shared_memory(gl.float32, [32, 16], gl.SwizzledSharedLayout(4, 1, 4, [1, 0]))
        smem.store(gl.load(in_ptr + r[:, None] * 16 + c[None, :]))  # @bar_store
        if explicit_barrier:
            gl.thread_barrier()
        x = smem.load(cols)  # @bar_load
        r2 = gl.arange(0, 32, layout=gl.SliceLayout(1, cols))
        c2 = gl.arange(0, 16, layout=gl.SliceLayout(0, cols))
        gl.store(out_ptr + r2[:, None] * 16 + c2[None, :], x)
    return transpose


def test_a_missing_backend_barrier_would_be_caught(rng, monkeypatch):
    import gluon_trace.membar as membar
    x = rng.standard_normal((32, 16)).astype(np.float32)
    out = np.full_like(x, np.nan)
    make_transpose(False)[(1,)](out, x)   # membar puts a barrier before the load: fine
    assert np.array_equal(out, x)
    monkeypatch.setattr(membar, "barriers", lambda graph, plan=None: set())
    raises_at(lambda: make_transpose(False)[(1,)](out, x), "bar_load", "bar_store", "missed this hazard")
    make_transpose(True)[(1,)](out, x)    # a user barrier covers it even then


@gt.jit
def crossing_copy(out_ptr, x_ptr, M: gl.constexpr, N: gl.constexpr):
    """A cp.async into `a`, then an unrelated store/load round trip through `b` (membar puts a
    barrier there), then the wait and a read of `a` by other threads than copied it."""
    L = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    LT = gl.BlockedLayout([4, 1], [8, 4], [1, 4], [0, 1])
    r = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    offs = r[:, None] * N + c[None, :]
    sl = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[1, 0])
    a = gl.allocate_shared_memory(gl.float32, [M, N], sl)
    b = gl.allocate_shared_memory(gl.float32, [M, N], sl)
    async_copy.async_load(a, x_ptr + offs)
    async_copy.commit_group()
    b.store(gl.load(x_ptr + M * N + offs))
    y = b.load(LT)
    async_copy.wait_group(0)
    z = a.load(LT)
    rt = gl.arange(0, M, layout=gl.SliceLayout(1, LT))
    ct = gl.arange(0, N, layout=gl.SliceLayout(0, LT))
    gl.store(out_ptr + rt[:, None] * N + ct[None, :], y - z)


def test_a_copy_lands_at_its_wait_so_its_readers_get_a_barrier_after_it(rng):
    """membar took a cp.async as written when issued, so the barrier it placed for `b` seemed
    to order the copy too and the read of `a` after the wait got none: other threads' copies
    were read with no barrier after their wait (seen by the AMD simulator). The copy is now
    pending until its wait_group."""
    import gluon_trace.membar as membar
    x = rng.standard_normal((2, 16, 64)).astype(np.float32)
    out = np.full((16, 64), np.nan, np.float32)
    crossing_copy[(1,)](out, x, M=16, N=64, backend="interpreter", target="sm_80")
    assert np.array_equal(out, x[1] - x[0])
    g = crossing_copy.trace(out, x, M=16, N=64, target="sm_80").graph
    need = membar.barriers(g)
    loads = [op for op in g.body.walk() if op.name == "smem_load"]
    assert set(loads) <= need                      # b's read, and a's after the wait
    pytest.importorskip("gluon_trace.backends.nvidia")
    text = crossing_copy.trace(out, x, M=16, N=64, target="sm_80").ptx("sm_80")
    after = text[text.index("cp.async.wait_group 0;"):]
    assert after.index("bar.sync") < after.index("ld.shared")

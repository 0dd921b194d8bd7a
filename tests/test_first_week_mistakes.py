"""A Gluon user's first-week mistakes with shared memory, TMA, mbarriers and async copies, and the
trace-time rules a Gluon user does not expect (a Python number rebound in a run-time body; tiles
inside tuples, lists and objects carried through loops and branches), in the interpreter against
numpy on fresh random inputs with NaN-poisoned outputs. Each error must name the user's line and
say what to do. The kernels that work are in test_first_week_hopper.py.
"""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import InterpreterError, TraceError
from gluon_trace.language.nvidia.ampere import async_copy
from gluon_trace.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from gluon_trace.nvidia.hopper import TensorDescriptor

NV = gl.NVMMASharedLayout.get_default_for


def _nan(shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype)


# -- Python numbers rebound in run-time bodies, async operations left in flight ---------------------

@gt.jit
def counter_kernel(x_desc, out_ptr, n_tiles, FIX: gl.constexpr):
    """Each program loads its tiles through a 2-slot ring, its slot and phase from a counter."""
    bufs = gl.allocate_shared_memory(x_desc.dtype, [2] + x_desc.block_type.shape, x_desc.layout)
    bars = mbarrier.allocate_mbarrier(batch=2)
    mbarrier.init(bars.index(0), count=1)
    mbarrier.init(bars.index(1), count=1)
    L: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    BM: gl.constexpr = x_desc.block_type.shape[0]
    i = gl.full([], 0, gl.int32) if FIX else 0
    acc = gl.zeros([BM], gl.float32, L)
    for t in gl.range(0, n_tiles):
        s = i % 2
        mbarrier.expect(bars.index(s), x_desc.block_type.nbytes)
        tma.async_load(x_desc, [t * BM], bars.index(s), bufs.index(s))
        mbarrier.wait(bars.index(s), (i // 2) & 1)
        acc += bufs.index(s).load(L)
        i += 1
    gl.store(out_ptr + gl.arange(0, BM, L), acc)


def test_a_python_counter_rebound_in_a_run_time_loop_is_an_error():
    """Gluon carries ``i = 0; ... i += 1`` through the loop; a trace runs the body once, so the
    counter would stay 0 at run time (a wrong slot and phase from the second tile on)."""
    rng = np.random.default_rng()
    n = int(rng.integers(2, 6))
    x = rng.standard_normal(n * 128).astype(np.float32)
    desc = TensorDescriptor.from_tensor(x, [128], NV([128], gl.float32))
    with pytest.raises(TraceError, match=r"`i` is a Python int that the gl.range loop at line \d+ changes "
                                         r"\(0 before, 1 after\)") as e:
        counter_kernel[(1,)](desc, _nan(128), n, FIX=False, backend="interpreter")
    assert "test_first_week_mistakes.py" in str(e.value) and "i = gl.full([], 0, gl.int32)" in str(e.value)
    out = _nan(128)
    counter_kernel[(1,)](desc, out, n, FIX=True, backend="interpreter")
    np.testing.assert_allclose(out, x.reshape(n, 128).sum(0), rtol=1e-5, atol=1e-5)


def test_a_python_number_rebound_in_a_branch_is_an_error():
    @gt.jit
    def k(out, c):
        phase = 0
        with gl.if_(c > 0):
            phase ^= 1
        gl.store(out, gl.full([], phase, gl.int32))
    with pytest.raises(TraceError, match=r"`phase` is a Python int that the branch at line \d+ changes"):
        k[(1,)](np.zeros(1, np.int32), 1, backend="interpreter")


def test_static_loop_variables_and_unchanged_numbers_are_not_reported():
    @gt.jit
    def k(out, n):
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        acc = gl.zeros([128], gl.int32, lay)
        for j in gl.static_range(3):    # j ends at 2 here ...
            acc += j
        step = 1
        for t in gl.range(0, n):
            for j in gl.static_range(2):   # ... and at 1 after the loop body: a static loop's variable
                acc += step
            step = 1                       # rebound to the same value
        gl.store(out + gl.arange(0, 128, lay), acc)
    out = np.zeros(128, np.int32)
    k[(1,)](out, 5, backend="interpreter")
    assert (out == 3 + 10).all()


@gt.jit
def store_then_exit(x_desc, WAIT: gl.constexpr):
    s = gl.allocate_shared_memory(x_desc.dtype, x_desc.block_type.shape, x_desc.layout)
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    s.store(gl.full(x_desc.block_type.shape, 3.0, gl.float32, L))
    fence_async_shared()
    tma.async_store(x_desc, [gl.program_id(0) * x_desc.block_type.shape[0], 0], s)
    if WAIT:
        tma.store_wait(0)


def test_exiting_with_a_tma_store_in_flight_is_an_error():
    """ptxsim_hopper refuses such a kernel (the CTA's shared memory is freed under the store);
    the interpreter accepted it."""
    out = _nan((64, 32))
    desc = TensorDescriptor.from_tensor(out, [32, 32], NV([32, 32], gl.float32))
    with pytest.raises(InterpreterError, match=r"ends with the TMA store at line \d+ in flight") as e:
        store_then_exit[(2,)](desc, WAIT=False, backend="interpreter")
    assert "tma.store_wait(0)" in str(e.value) and "test_first_week_mistakes.py" in str(e.value)
    store_then_exit[(2,)](desc, WAIT=True, backend="interpreter")
    assert (out == 3).all()


def test_an_expect_short_of_its_copies_says_so():
    """expect(A's bytes) for two copies: the phase completes with A alone, B's bytes count toward
    the next phase; the read of B is reported with the likely cause."""
    @gt.jit
    def k(a_desc, b_desc, out):
        L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
        a = gl.allocate_shared_memory(gl.float32, [32, 32], a_desc.layout)
        b = gl.allocate_shared_memory(gl.float32, [32, 32], b_desc.layout)
        bar = mbarrier.allocate_mbarrier()
        mbarrier.init(bar, count=1)
        mbarrier.expect(bar, a_desc.block_type.nbytes)
        tma.async_load(a_desc, [0, 0], bar, a)
        tma.async_load(b_desc, [0, 0], bar, b)
        mbarrier.wait(bar, 0)
        rows = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32
        gl.store(out + rows + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :], a.load(L) + b.load(L))
    x = np.ones((32, 32), np.float32)
    d = TensorDescriptor.from_tensor(x, [32, 32], NV([32, 32], gl.float32))
    with pytest.raises(InterpreterError, match="did the expect of phase 0 count fewer bytes than its copies"):
        k[(1,)](d, d, _nan((32, 32)), backend="interpreter")


@gt.jit
def copies_on_an_mbarrier(a_ptr, out_ptr, NOINC: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [32, 32], gl.SwizzledSharedLayout(4, 1, 8, [1, 0]))
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    async_copy.async_load(buf, a_ptr + r)
    async_copy.mbarrier_arrive(bar, increment_count=not NOINC)
    mbarrier.wait(bar, 0)
    gl.store(out_ptr + r, buf.load(L))


def test_a_copy_arrival_that_adds_none_is_named_in_the_deadlock():
    """async_copy.mbarrier_arrive's default (increment_count=True) only holds the phase until the
    copies land; with no other arrival the wait never completes, and the report says why."""
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    with pytest.raises(InterpreterError, match=r"the async_copy.mbarrier_arrive at line \d+ adds no arrival"):
        copies_on_an_mbarrier[(1,)](x, _nan((32, 32)), NOINC=False, backend="interpreter")
    out = _nan((32, 32))
    copies_on_an_mbarrier[(1,)](x, out, NOINC=True, backend="interpreter")
    assert np.array_equal(out, x)


def test_tuples_and_objects_are_carried_tile_by_tile():
    class Stats:
        def __init__(self, total, count, scale):
            self.total, self.count, self.scale = total, count, scale

    @gt.jit
    def k(x_ptr, out_ptr, n):
        L: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        st = Stats(gl.zeros([128], gl.float32, L), gl.to_tensor(0), 0.5)   # scale: a Python float
        pair = (gl.zeros([128], gl.float32, L), [gl.full([128], -1e30, gl.float32, L)])
        for i in gl.range(0, n):
            x = gl.load(x_ptr + i * 128 + gl.arange(0, 128, L))
            st = Stats(st.total + x, st.count + 1, st.scale)
            pair = (pair[0] - x, [gl.maximum(pair[1][0], x)])
        with gl.if_(n > 2):
            st.total = st.total * st.scale        # in place, in a branch
        gl.store(out_ptr + gl.arange(0, 128, L), st.total / st.count.to(gl.float32))
        gl.store(out_ptr + 128 + gl.arange(0, 128, L), pair[0] + pair[1][0])
    rng = np.random.default_rng()
    for n in (2, 3):
        x = rng.standard_normal(n * 128).astype(np.float32).reshape(n, 128)
        out = _nan(256)
        k[(1,)](x, out, n, backend="interpreter")
        total = x.sum(0, dtype=np.float32) * (0.5 if n > 2 else 1)
        np.testing.assert_allclose(out[:128], total / n, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out[128:], -x.sum(0) + x.max(0), rtol=1e-5, atol=1e-5)


def test_a_carried_structure_that_changes_shape_is_named():
    @gt.jit
    def k(out_ptr, n):
        L: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        pair = (gl.zeros([128], gl.float32, L), gl.zeros([128], gl.float32, L))
        for i in gl.range(0, n):
            pair = (pair[0] + 1.0, 0.0)
        gl.store(out_ptr + gl.arange(0, 128, L), pair[0])
    with pytest.raises(TraceError, match=r"`pair` changes structure in the loop at line \d+: pair\[1\] holds a tile"):
        k[(1,)](np.zeros(128, np.float32), 3, backend="interpreter")


def test_a_list_a_helper_updates_in_a_loop_is_the_callers():
    """Lists and objects get the carried tiles in place, so the caller of a helper that loops over
    them sees the result (a copy would leave the caller's list at its values before the loop)."""
    def accumulate(accs, x_ptr, n, L):
        for i in gl.range(0, n):
            for j in gl.static_range(2):
                accs[j] = accs[j] + gl.load(x_ptr + (2 * i + j) * 128 + gl.arange(0, 128, L))

    @gt.jit
    def k(x_ptr, out_ptr, n):
        L: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        accs = [gl.zeros([128], gl.float32, L), gl.zeros([128], gl.float32, L)]
        accumulate(accs, x_ptr, n, L)
        gl.store(out_ptr + gl.arange(0, 128, L), accs[0])
        gl.store(out_ptr + 128 + gl.arange(0, 128, L), accs[1])
    x = np.random.default_rng().standard_normal((3, 2, 128)).astype(np.float32)
    out = _nan(256)
    k[(1,)](x, out, 3, backend="interpreter")
    np.testing.assert_allclose(out.reshape(2, 128), x.sum(0), rtol=1e-5, atol=1e-6)


def test_a_python_count_kept_in_an_object_is_reported_too():
    class State:
        def __init__(self, acc, count):
            self.acc, self.count = acc, count

    @gt.jit
    def k(x_ptr, out_ptr, n):
        L: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        st = State(gl.zeros([128], gl.float32, L), 0)
        for i in gl.range(0, n):
            st = State(st.acc + gl.load(x_ptr + i * 128 + gl.arange(0, 128, L)), st.count + 1)
        gl.store(out_ptr + gl.arange(0, 128, L), st.acc / st.count)
    with pytest.raises(TraceError, match=r"`st.count` is a Python int that the gl.range loop at line \d+ changes "
                                         r"\(0 before, 1 after\)"):
        k[(1,)](np.zeros(512, np.float32), _nan(128), 4, backend="interpreter")


def _producer(x_desc, bufs, ready, empty, n, EXTRA: gl.constexpr):
    for i in gl.range(0, n + EXTRA):
        s = i % 2
        mbarrier.wait(empty.index(s), ((i // 2) & 1) ^ 1)
        mbarrier.expect(ready.index(s), x_desc.block_type.nbytes)
        tma.async_load(x_desc, [i * 32, 0], ready.index(s), bufs.index(s))


def _consumer(out_ptr, bufs, ready, empty, n):
    L: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    acc = gl.zeros([32, 32], gl.float32, L)
    for i in gl.range(0, n):
        s = i % 2
        mbarrier.wait(ready.index(s), (i // 2) & 1)
        acc += bufs.index(s).load(L)
        mbarrier.arrive(empty.index(s))
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    gl.store(out_ptr + r, acc)


@gt.jit
def ws_block_sum(x_desc, out_ptr, n, EXTRA: gl.constexpr):
    bufs = gl.allocate_shared_memory(gl.float32, [2, 32, 32], x_desc.layout)
    ready = mbarrier.allocate_mbarrier(batch=2)
    empty = mbarrier.allocate_mbarrier(batch=2)
    for s in gl.static_range(2):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize([(_consumer, (out_ptr, bufs, ready, empty, n)),
                        (_producer, (x_desc, bufs, ready, empty, n, EXTRA))], [1], [24])


def test_a_producer_that_loads_more_than_is_consumed_is_reported():
    """Its last loads are never waited for: on the GPU they may land after the CTA exited, in the
    shared memory of the next CTA on the SM. The interpreter let such a kernel end silently."""
    x = np.random.default_rng().standard_normal((256, 32)).astype(np.float32)
    desc = TensorDescriptor.from_tensor(x, [32, 32], NV([32, 32], gl.float32))
    out = _nan((32, 32))
    ws_block_sum[(1,)](desc, out, 5, EXTRA=0, backend="interpreter")
    np.testing.assert_allclose(out, x[:160].reshape(5, 32, 32).sum(0), rtol=1e-5, atol=1e-5)
    with pytest.raises(InterpreterError, match=r"ends with the TMA load at line \d+ possibly in flight") as e:
        ws_block_sum[(1,)](desc, _nan((32, 32)), 5, EXTRA=1, backend="interpreter")
    assert "test_first_week_mistakes.py" in str(e.value)


def test_a_nan_constant_is_not_a_changed_number():
    @gt.jit
    def k(x_ptr, out_ptr, n):
        L: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        fill = float("nan")              # NaN != NaN: must not read as rebound
        acc = gl.zeros([128], gl.float32, L)
        for i in gl.range(0, n):
            acc += gl.load(x_ptr + i * 128 + gl.arange(0, 128, L), mask=gl.arange(0, 128, L) < 200, other=fill)
        gl.store(out_ptr + gl.arange(0, 128, L), acc)
    x = np.ones(256, np.float32)
    out = _nan(128)
    k[(1,)](x, out, 2, backend="interpreter")
    assert (out == 2).all()


def test_barrier_and_buffer_swapped_in_a_tma_load_says_so():
    @gt.jit
    def k(x_desc):
        s = gl.allocate_shared_memory(gl.float32, [32, 32], x_desc.layout)
        bar = mbarrier.allocate_mbarrier()
        mbarrier.init(bar, count=1)
        mbarrier.expect(bar, x_desc.block_type.nbytes)
        tma.async_load(x_desc, [0, 0], s, bar)
    d = TensorDescriptor.from_tensor(np.zeros((32, 32), np.float32), [32, 32], NV([32, 32], gl.float32))
    with pytest.raises(TraceError, match="takes the barrier before the buffer"):
        k[(1,)](d, backend="interpreter")


def test_a_cluster_sharded_blocked_layout_is_refused_clearly():
    """Gluon's newer multi-CTA tutorial shards a register tile over the cluster (cga_layout); here
    each CTA is its own program: a clear error at the line (was 'unexpected keyword argument')."""
    with pytest.raises(gt.LayoutError, match=r"cga_layout=\[\[1\]\] .* each CTA of a num_ctas cluster") as e:
        gl.BlockedLayout([4], [32], [4], [0], cga_layout=[[1]])
    assert "test_first_week_mistakes.py" in str(e.value)
    assert gl.BlockedLayout([4], [32], [4], [0], cga_layout=[]) == gl.BlockedLayout([4], [32], [4], [0])

"""Shared memory, TMA descriptors and MMA ops at trace time: what they build, and every wrong
call as a clear error naming the user's line."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import ArgumentError, CompileError, LayoutError, TraceError
from gluon_trace.language.nvidia.ampere import mma_v2
from gluon_trace.language.nvidia.hopper import mbarrier, tma, warpgroup_mma
from gluon_trace.membar import barriers
from gluon_trace.nvidia.hopper import TensorDescriptor
from gluon_trace.smem_plan import plan

SW = gl.SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])
B2 = gl.BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
F16 = gl.pointer(gl.float16)


def trace(fn, *args, **kw):
    kw.setdefault("target", "interpreter")
    return gt.jit(fn).trace(*args, **kw)


def fails(fn, *args, exc=TraceError, words=(), **kw):
    with pytest.raises(exc) as e:
        trace(fn, *args, **kw)
    msg = str(e.value)
    assert "test_tensorcore_api.py" in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


# -- shared memory ----------------------------------------------------------------------------------

def test_views_have_the_types_gluon_gives():
    def k(p):
        bufs = gl.allocate_shared_memory(gl.float16, [3, 64, 32], SW)
        one = bufs.index(1)
        assert one.shape == [64, 32] and one.dtype == gl.float16 and one.layout == SW
        part = one.slice(16, 16, dim=1)
        assert part.shape == [64, 16]
        t = one.permute((1, 0))
        assert t.shape == [32, 64] and t.layout.order == (0, 1)
        flat = gl.allocate_shared_memory(gl.float16, [4, 64, 32], SW).reshape([256, 32])
        assert flat.shape == [256, 32]  # the swizzle's 8-row period divides 64: nothing moves
        raw = bufs.reinterpret(gl.int32, [3, 64, 16], SW)
        assert raw.shape == [3, 64, 16] and raw.dtype == gl.int32
    ir = trace(k, F16).ir
    assert "!smem<3x64x32xfloat16" in ir and "smem_index" in ir and "smem_reinterpret" in ir


def test_descriptors_are_carried_by_loops():
    def k(p, n):
        bufs = gl.allocate_shared_memory(gl.float32, [2, 32], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        cur = bufs.index(0)
        for i in gl.range(0, n):
            cur = bufs.index(i % 2)
        cur.store(gl.full([32], 1.0, gl.float32, gl.BlockedLayout([1], [32], [4], [0])))
    trace(k, gl.pointer(gl.float32), gl.int32)


def test_shared_memory_errors():
    def not_shared(p):
        gl.allocate_shared_memory(gl.float16, [64, 32], B2)
    fails(not_shared, F16, exc=LayoutError, words=("needs a shared layout",))

    def bad_store(p):
        s = gl.allocate_shared_memory(gl.float16, [64, 32], SW)
        s.store(gl.zeros([64, 32], gl.float32, B2))
    fails(bad_store, F16, words=("storing", "float16"))

    def index_swizzled(p):
        gl.allocate_shared_memory(gl.float16, [64, 32], SW).index(0)
    fails(index_swizzled, F16, words=("swizzles",))

    def arith_on_buffer(p):
        s = gl.allocate_shared_memory(gl.float16, [64, 32], SW)
        s + 1.0
    fails(arith_on_buffer, F16, words=("shared-memory descriptor", ".load(layout)"))

    def slice_out(p):
        gl.allocate_shared_memory(gl.float16, [64, 32], SW).slice(16, 32, dim=1)
    fails(slice_out, F16, words=("outside dim 1",))

    def too_big(p):
        gl.allocate_shared_memory(gl.float16, [64, 32], SW).reinterpret(gl.float32, [64, 64], SW)
    fails(too_big, F16, words=("needs 16384 bytes",))


def test_interpreter_index_out_of_bounds(rng):
    from gluon_trace.errors import InterpreterError

    @gt.jit
    def k(p, i):
        bufs = gl.allocate_shared_memory(gl.float32, [2, 32], gl.SwizzledSharedLayout(1, 1, 1, [0]))
        bufs.index(i).store(gl.full([32], 1.0, gl.float32, gl.BlockedLayout([1], [32], [4], [0])))
    with pytest.raises(InterpreterError) as e:
        k[(1,)](np.zeros(1, np.float32), 2)
    assert "out of bounds" in str(e.value) and "test_tensorcore_api.py" in str(e.value)


def test_store_load_roundtrip_through_every_view(rng):
    L = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])

    @gt.jit
    def k(out_ptr, in_ptr):
        r = gl.arange(0, 32, layout=gl.SliceLayout(1, L))
        c = gl.arange(0, 16, layout=gl.SliceLayout(0, L))
        x = gl.load(in_ptr + r[:, None] * 16 + c[None, :])
        bufs = gl.allocate_shared_memory(gl.float32, [2, 32, 16], gl.SwizzledSharedLayout(4, 2, 4, [1, 0]))
        bufs.index(1).store(x)
        t = bufs.index(1).permute((1, 0)).load(gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0]))
        rt = gl.arange(0, 16, layout=gl.SliceLayout(1, gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])))
        ct = gl.arange(0, 32, layout=gl.SliceLayout(0, gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])))
        gl.store(out_ptr + rt[:, None] * 32 + ct[None, :], t)
    x = rng.standard_normal((32, 16)).astype(np.float32)
    out = np.full((16, 32), np.nan, np.float32)
    k[(1,)](out, x)
    assert np.array_equal(out, x.T)


# -- TMA descriptors ---------------------------------------------------------------------------------

NV = gl.NVMMASharedLayout.get_default_for


def test_descriptor_reads_at_trace_time():
    a = np.zeros((100, 64), np.float16)
    d = TensorDescriptor.from_tensor(a, [32, 64], NV([32, 64], gl.float16))
    assert d.block_type.shape == [32, 64] and d.block_type.nbytes == 4096
    seen = {}

    def k(desc):
        seen.update(shape=desc.block_type.shape, nbytes=desc.block_type.nbytes, dtype=desc.dtype,
                    layout=desc.layout, rank=len(desc.shape))
    trace(k, d)
    assert seen == dict(shape=[32, 64], nbytes=4096, dtype=gl.float16, layout=d.layout, rank=2)


@pytest.mark.parametrize("case, words", [
    ("last_stride", "stride 1"), ("rank", "rank 1 to 5"), ("row_bytes", "multiple of 16 bytes"),
    ("box", "1 to 256"), ("inner", "16 bytes"), ("layout", "NVMMASharedLayout"), ("align", "16-byte"),
    ("tile_pow2", "must be powers of two"),
])
def test_descriptor_rules_checked_when_built(case, words):
    base = np.zeros((64, 128), np.float16)
    lay = NV([32, 64], gl.float16)
    with pytest.raises(ArgumentError) as e:
        if case == "last_stride":
            TensorDescriptor.from_tensor(base.T, [32, 32], lay)
        elif case == "rank":
            TensorDescriptor.from_tensor(np.zeros((2,) * 6, np.float16), [2] * 6, lay)
        elif case == "row_bytes":
            TensorDescriptor.from_tensor(np.zeros((64, 100), np.float16)[:, :96], [32, 64], lay)
        elif case == "box":
            TensorDescriptor.from_tensor(np.zeros((1024, 64), np.float16), [512, 64], lay)
        elif case == "inner":
            TensorDescriptor.from_tensor(base, [32, 4], lay)
        elif case == "layout":
            TensorDescriptor.from_tensor(base, [32, 64], SW)
        elif case == "align":
            flat = np.zeros(64 * 128 + 1, np.float16)
            TensorDescriptor.from_tensor(flat[1:].reshape(64, 128), [32, 64], lay)
        elif case == "tile_pow2":   # the swizzled tile's rows: 48 is no power of two
            TensorDescriptor.from_tensor(base, [48, 64], lay)
    assert words in str(e.value) and "test_tensorcore_api.py" in str(e.value)


def test_descriptor_blocks_stack_tiles_of_any_count():
    """A block's leading dims stack shared tiles, as a buffer's do, and may be any size: a 5-D
    view of [B*H, S, D] whose box is 10 pieces x 2 head-dim chunks of [16, 64] (attention's
    KV tile of 160 rows in one box); only the swizzled trailing dims must be powers of two."""
    k = np.zeros((2, 320, 128), np.float16)
    view = k.reshape(2, 20, 16, 2, 64).transpose(0, 3, 1, 2, 4)
    d = TensorDescriptor.from_tensor(view, [1, 2, 10, 16, 64], NV([16, 64], gl.float16))
    assert d.block_shape == [1, 2, 10, 16, 64] and d.block_type.nbytes == 2 * 10 * 16 * 64 * 2
    assert d.strides == [320 * 128, 64, 16 * 128, 128, 1]   # a view: no copy, strides as they are


def test_tma_op_errors():
    a = np.zeros((64, 64), np.float16)
    d = TensorDescriptor.from_tensor(a, [32, 64], NV([32, 64], gl.float16))

    def coords(desc):
        s = gl.allocate_shared_memory(gl.float16, [32, 64], desc.layout)
        bar = mbarrier.allocate_mbarrier()
        tma.async_load(desc, [0], bar, s)
    fails(coords, d, words=("give 2 coordinates",))

    def wrong_layout(desc):
        s = gl.allocate_shared_memory(gl.float16, [32, 64], SW)
        bar = mbarrier.allocate_mbarrier()
        tma.async_load(desc, [0, 0], bar, s)
    fails(wrong_layout, d, exc=LayoutError, words=("desc.layout",))

    def on_sm80(desc):
        s = gl.allocate_shared_memory(gl.float16, [32, 64], desc.layout)
        bar = mbarrier.allocate_mbarrier()
        tma.async_load(desc, [0, 0], bar, s)
    fails(on_sm80, d, target="sm_80", words=("sm_90",))


# -- MMA ------------------------------------------------------------------------------------------

V2 = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[2, 2], instr_shape=[16, 8])
V3 = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16])


def _mma_v2_call(k_width=2, parent=V2, m=64, dtype=gl.float16, acc_dtype=gl.float32):
    def k(p):
        a = gl.zeros([m, 32], dtype, gl.DotOperandLayout(0, parent, k_width=k_width))
        b = gl.zeros([32, 64], dtype, gl.DotOperandLayout(1, V2, k_width=2))
        mma_v2(a, b, gl.zeros([m, 64], acc_dtype, V2))
    return k


def test_mma_v2_checks():
    trace(_mma_v2_call(), F16, target="sm_80")
    fails(_mma_v2_call(k_width=4), F16, exc=LayoutError, words=("k_width=2",))
    other = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1], instr_shape=[16, 8])
    fails(_mma_v2_call(parent=other), F16, exc=LayoutError, words=("parent",))
    fails(_mma_v2_call(m=8), F16, words=("not a multiple",))
    fails(_mma_v2_call(acc_dtype=gl.int32), F16, words=("accumulate into",))
    fails(_mma_v2_call(), F16, target="gfx1100", words=("NVIDIA instruction",))


def _wgmma_call(a_in_smem=True, b_layout=None, warps=4):
    def k(p):
        nv = NV([64, 64], gl.float16)
        a = gl.allocate_shared_memory(gl.float16, [64, 64], nv)
        b = gl.allocate_shared_memory(gl.float16, [64, 64], b_layout or nv)
        acc = gl.zeros([64, 64], gl.float32, V3 if warps == 4 else gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[warps, 1], instr_shape=[16, 64, 16]))
        warpgroup_mma(a, b, acc)
    return k


def test_wgmma_checks():
    trace(_wgmma_call(), F16, target="sm_90a")
    fails(_wgmma_call(), F16, target="sm_90", words=("sm_90a",))
    fails(_wgmma_call(b_layout=SW), F16, target="sm_90a", exc=LayoutError, words=("NVMMASharedLayout",))
    fails(_wgmma_call(warps=2), F16, target="sm_90a", num_warps=2, words=("multiple of 4",))


def _wgmma_pieces_call(b_shape=(5, 32, 64), accs=5, other_acc=False, n=32):
    def k(p):
        a = gl.allocate_shared_memory(gl.float16, [64, 64], NV([64, 64], gl.float16))
        b = gl.allocate_shared_memory(gl.float16, list(b_shape), NV([n, 64], gl.float16))
        lay = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])
        acc = [gl.zeros([64, n], gl.float32, lay) for _ in range(accs)]
        if other_acc:
            acc[-1] = gl.zeros([64, 2 * n], gl.float32, gl.NVMMADistributedLayout(
                version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 2 * n, 16]))
        view = b.permute((0, 2, 1)) if len(b_shape) == 3 else b.permute((1, 0))
        out = warpgroup_mma(a, view, acc)
        gl.static_assert(len(out) == accs)
    return k


def test_wgmma_pieces_checks():
    """A list of accumulators takes a stacked B [P, K, n], one piece each, all of one type."""
    trace(_wgmma_pieces_call(), F16, target="sm_90a")
    fails(_wgmma_pieces_call(b_shape=(128, 64)), F16, target="sm_90a", words=("stacked shared view", "[5, K, n]"))
    fails(_wgmma_pieces_call(accs=4), F16, target="sm_90a", words=("stacks 5 pieces", "4 accumulators"))
    fails(_wgmma_pieces_call(other_acc=True), F16, target="sm_90a", words=("accumulator 4", "one type"))
    fails(_wgmma_pieces_call(accs=0), F16, target="sm_90a", words=("empty list",))
    fails(_wgmma_pieces_call(b_shape=(5, 64, 64)), F16, target="sm_90a", words=("do not chain",))


def test_warp_partitions_take_no_register_tiles():
    def worker(x):
        x + 1.0

    def k(p):
        x = gl.zeros([32], gl.float32, gl.BlockedLayout([1], [32], [4], [0]))
        gl.warp_specialize([(lambda: None, ()), (worker, (x,))], [1], [24])
    fails(k, gl.pointer(gl.float32), words=("register tile defined outside",))

    def closure(p):
        x = gl.zeros([32], gl.float32, gl.BlockedLayout([1], [32], [4], [0]))

        def worker2():
            gl.store(p + gl.arange(0, 32, layout=gl.BlockedLayout([1], [32], [1], [0])),
                     gl.convert_layout(x, gl.BlockedLayout([1], [32], [1], [0])))
        gl.warp_specialize([(lambda: None, ()), (worker2, ())], [1], [24])
    fails(closure, gl.pointer(gl.float32), words=("register tile defined outside",))


# -- one analysis for every backend: offsets from live ranges, barriers -------------------------------

def test_buffers_with_disjoint_live_ranges_share_offsets():
    L1 = gl.BlockedLayout([1], [32], [4], [0])
    one = gl.SwizzledSharedLayout(1, 1, 1, [0])

    def k(p):
        a = gl.allocate_shared_memory(gl.float32, [1024], one)
        a.store(gl.zeros([1024], gl.float32, L1))
        x = a.load(L1)
        b = gl.allocate_shared_memory(gl.float32, [1024], one)
        b.store(x)
        gl.store(p + gl.arange(0, 1024, layout=L1), b.load(L1))
    g = trace(k, gl.pointer(gl.float32)).graph
    pl = plan(g)
    assert pl.total == 4096 and len({b.offset for b in pl.buffers}) == 1
    need = barriers(g, pl)  # b reuses a's bytes: its store waits for every read of a
    assert [op.name for op in g.body.walk() if op in need] == ["smem_load", "smem_store", "smem_load"]


def test_over_the_limit_lists_the_buffers():
    def k(p):
        a = gl.allocate_shared_memory(gl.float16, [4, 128, 128], SW)
        b = gl.allocate_shared_memory(gl.float16, [4, 128, 128], SW)
        a.index(0).store(b.index(0).load(B2))
    g = trace(k, F16, target="sm_90a").graph
    with pytest.raises(CompileError) as e:
        plan(g)
    msg = str(e.value)
    assert "262144 bytes" in msg and "232448" in msg and msg.count("131072 bytes") == 2


def test_descriptor_errors_are_python_errors_too():
    base = np.zeros((64, 128), np.float16)
    with pytest.raises(ValueError):      # a bad value: the last dim not contiguous
        TensorDescriptor.from_tensor(base.T, [32, 32], NV([32, 32], gl.float16))
    with pytest.raises(TypeError):       # a wrong kind of object
        TensorDescriptor.from_tensor([1, 2, 3], [32, 32], NV([32, 32], gl.float16))
    with pytest.raises(TypeError):
        TensorDescriptor.from_tensor(base, [32, 64], SW)

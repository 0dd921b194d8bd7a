"""Hopper's mbarriers, async-proxy fence, TMA copies and wgmma (rules_hopper.py, wgmma.py).

CPU: the instructions each op becomes (one elected thread issues barrier and copy state
changes, every thread spins on try_wait.parity), the descriptor parameters, wgmma's
shared-memory matrix descriptors against the PTX ISA's field layout, and ptxas assembling the
kernels (TMA copies, the Hopper GEMM, attention) for sm_90a. GPU (``pytest -m gpu
tests/backends/nvidia/test_hopper.py``): TMA copy round trips (2-D and 3-D, odd shapes: zero
fill of loads past the tensor, clipping of stores), the Hopper GEMM against torch, attention
against torch's SDPA.
"""
import re

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import CompileError
from gluon_trace.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma
from gluon_trace.kernels.attention_hopper import attention_fwd
from gluon_trace.kernels.matmul_hopper import matmul_hopper
from gluon_trace.nvidia.hopper import TensorDescriptor

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia import ptxas  # noqa: E402
from gluon_trace.backends.nvidia.compiler import arg_layout  # noqa: E402
from gluon_trace.backends.nvidia import wgmma  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from gluon_trace.ops_memory import element_offsets  # noqa: E402

NV = gl.NVMMASharedLayout.get_default_for


@gt.jit
def copy2d(src, dst):
    """dst[block] = src[block] through shared memory: TMA load onto an mbarrier, TMA store."""
    BM: gl.constexpr = src.block_type.shape[0]
    BN: gl.constexpr = src.block_type.shape[1]
    buf = gl.allocate_shared_memory(src.dtype, [BM, BN], src.layout)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    m = gl.program_id(0) * BM
    n = gl.program_id(1) * BN
    mbarrier.expect(bar, src.block_type.nbytes)
    tma.async_load(src, [m, n], bar, buf)
    mbarrier.wait(bar, 0)
    fence_async_shared()
    tma.async_store(dst, [m, n], buf)
    tma.store_wait(0)
    mbarrier.invalidate(bar)


@gt.jit
def copy3d(src, dst):
    """The same over a [1, BM, BN] block of a 3-D tensor; program_id(2) walks the first dim."""
    BM: gl.constexpr = src.block_type.shape[1]
    BN: gl.constexpr = src.block_type.shape[2]
    buf = gl.allocate_shared_memory(src.dtype, [1, BM, BN], src.layout)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, src.block_type.nbytes)
    z = gl.program_id(2)
    m = gl.program_id(0) * BM
    n = gl.program_id(1) * BN
    tma.async_load(src, [z, m, n], bar, buf)
    mbarrier.wait(bar, 0)
    fence_async_shared()
    tma.async_store(dst, [z, m, n], buf)
    tma.store_wait(0)


@gt.jit
def ring(src, out, K_TILES: gl.constexpr):
    """Two slots, phases flipping: sums the column blocks of a row of tiles (arrive/expect/wait
    with a run-time phase and the consumer's arrive on an 'empty' barrier)."""
    BM: gl.constexpr = src.block_type.shape[0]
    BN: gl.constexpr = src.block_type.shape[1]
    lay: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    bufs = gl.allocate_shared_memory(src.dtype, [2, BM, BN], src.layout)
    full = mbarrier.allocate_mbarrier(batch=2)
    empty = mbarrier.allocate_mbarrier(batch=2)
    for s in gl.static_range(2):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    acc = gl.zeros([BM, BN], gl.float32, lay)
    for k in gl.range(0, K_TILES):
        s = k % 2
        with gl.if_(k >= 2):
            mbarrier.wait(empty.index(s), ((k // 2) - 1) & 1)
        mbarrier.expect(full.index(s), src.block_type.nbytes)
        tma.async_load(src, [0, k * BN], full.index(s), bufs.index(s))
        mbarrier.wait(full.index(s), (k // 2) & 1)
        acc += bufs.index(s).load(lay)
        mbarrier.arrive(empty.index(s))
    rows = gl.arange(0, BM, gl.SliceLayout(1, lay))
    cols = gl.arange(0, BN, gl.SliceLayout(0, lay))
    gl.store(out + rows[:, None] * BN + cols[None, :], acc)


def _wide(n, item):
    """Row length >= n elements and a multiple of 16 bytes (TMA's stride rule), plus 16 bytes."""
    return -(-n * item // 16) * 16 // item + 16 // item


def _desc2(shape, block, dtype=np.float32):
    """A descriptor over an odd-shaped view whose rows are padded to 16 bytes."""
    base = np.zeros((shape[0], _wide(shape[1], np.dtype(dtype).itemsize)), dtype)[:, :shape[1]]
    gd = {np.float32: gl.float32, np.float16: gl.float16}[dtype]
    return base, TensorDescriptor.from_tensor(base, block, NV(block, gd))


def _ptx(kernel, *args, **kw):
    g = kernel.trace(*args, target="sm_90a", num_warps=4, **kw).graph
    text, locs, _ = emit(g, "sm_90a")
    return g, text, locs


def _assemble(text, locs, name):
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(str(e))
    return ptxas.assemble(text, "sm_90a", locs, name)[1]


# -- CPU ----------------------------------------------------------------------------------------

def test_the_kernels_on_the_interpreter():
    """The GPU tests' kernels themselves, against numpy (the device runs must agree with these)."""
    src, s = _desc2((100, 130), [64, 64])
    src[...] = np.random.default_rng(0).standard_normal(src.shape)
    big = np.full((128, 196), 7.0, np.float32)
    d = TensorDescriptor.from_tensor(big[:101, :132], [64, 64], NV([64, 64], gl.float32))
    copy2d[(2, 3)](s, d, backend="interpreter", target="sm_90a")
    exp = np.full(big.shape, 7.0, np.float32)
    exp[:101, :132] = 0.0
    exp[:100, :130] = src
    np.testing.assert_array_equal(big, exp)
    # rows that end inside a 16-byte piece: the box's store also writes the rest of that piece
    # (the H100 does: its 132nd float here), within the row's pitch
    big[...] = 7.0
    odd = TensorDescriptor.from_tensor(big[:101, :131], [64, 64], NV([64, 64], gl.float32))
    copy2d[(2, 3)](s, odd, backend="interpreter", target="sm_90a")
    exp = np.full(big.shape, 7.0, np.float32)
    exp[:101, :132] = 0.0
    exp[:100, :130] = src
    np.testing.assert_array_equal(big, exp)
    x, xd = _desc2((32, 256), [32, 32])
    x[...] = np.random.default_rng(1).standard_normal(x.shape)
    out = np.zeros(32 * 32, np.float32)
    ring[(1,)](xd, out, K_TILES=8, backend="interpreter", target="sm_90a")
    np.testing.assert_allclose(out.reshape(32, 32), x.reshape(32, 8, 32).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_copy_instructions():
    _, s = _desc2((100, 130), [64, 64])       # 64 f32 = 256 bytes: two 128-byte boxes per block
    _, d = _desc2((100, 130), [64, 64])
    g, text, locs = _ptx(copy2d, s, d)
    assert re.search(r"\.param \.align 64 \.b8 copy2d_param_0\[128\]", text)
    assert "copy2d_param_0_dim1" in text and text.count("cvta.param.u64") == 2
    loads = re.findall(r"@(%p\d+) cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\.mbarrier::"
                       r"complete_tx::bytes \[(%r\d+)\], \[%rd\d+, \{(%r\d+), (%r\d+)\}\], \[%r\d+\];", text)
    stores = re.findall(r"@(%p\d+) cp\.async\.bulk\.tensor\.2d\.global\.shared::cta\.bulk_group", text)
    assert len(loads) == 2 and len(stores) == 2
    elected = {p for p, *_ in loads} | set(stores)
    assert len(elected) == 1                  # one thread issues every copy
    e = elected.pop()
    assert re.search(rf"setp\.eq\.u32 {re.escape(e)}, %r\d+, 0;", text)
    assert loads[0][3] == loads[1][3] and loads[0][2] != loads[1][2]  # same row, next column block
    assert re.search(rf"@{re.escape(e)} mbarrier\.init\.shared::cta\.b64 \[%r\d+\], 1;\n\t@{re.escape(e)} "
                     r"fence\.mbarrier_init\.release\.cluster;\n\tbar\.sync 0;", text)
    for ins in ("mbarrier.arrive.expect_tx.shared::cta.b64 _,",
                "mbarrier.inval.shared::cta.b64", "cp.async.bulk.commit_group"):
        assert f"@{e} {ins}" in text, ins
    assert re.search(r"mbarrier.arrive.expect_tx.shared::cta.b64 _, \[%r\d+\], 16384;", text)  # 64*64*4
    wait = re.search(r"(\$L\w+):\n\tmbarrier\.try_wait\.parity\.shared::cta\.b64 (%p\d+), .*\n\t@!\2 bra \1;",
                     text)
    assert wait                               # unpredicated: every thread spins on the phase
    # the store reads only what the TMA load wrote, which the issuing thread waited for on the
    # mbarrier itself: no bar.sync between them (membar drops async writes once waited for)
    body = text[text.index("fence.proxy.async.shared::cta;"):]
    assert "bar.sync" not in body[:body.index("cp.async.bulk.tensor.2d.global")]
    assert re.search(r"cp\.async\.bulk\.wait_group\.read 0;\n\tbar\.sync 0;", text)
    assert ".extern .shared .align 1024 .b8 gt_smem[];" in text
    _assemble(text, locs, "copy2d")


def test_parameter_layout_matches_the_ptx():
    _, s = _desc2((100, 130), [64, 64])
    g, text, _ = _ptx(copy2d, s, s)
    lay = arg_layout(g)
    assert lay == [("src", "tensordesc", 0, 136), ("dst", "tensordesc", 192, 136)]


def test_three_dims_assemble():
    x = np.zeros((3, 40, 72), np.float16)
    d = TensorDescriptor.from_tensor(x, [1, 32, 64], NV([32, 64], gl.float16))
    _, text, locs = _ptx(copy3d, d, d)
    assert len(re.findall(r"cp\.async\.bulk\.tensor\.3d\.shared::cluster", text)) == 1
    assert re.search(r"\[%rd\d+, \{%r\d+, %r\d+, %r\d+\}\]", text)
    _assemble(text, locs, "copy3d")


def test_ring_of_barriers_assembles():
    _, s = _desc2((32, 256), [32, 32])
    _, text, locs = _ptx(ring, s, np.zeros(32 * 32, np.float32), K_TILES=8)
    # only mbarrier.arrive arrives on the "empty" barriers: each thread arrives for itself after
    # its own reads (backends/nvidia/arrivals.py), the count scaled by the CTA's threads, no bar.sync
    threads = int(re.search(r"\.maxntid (\d+)", text).group(1))
    counts = [int(c) for c in re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], (\d+);", text)]
    assert threads in counts and 1 in counts   # "empty" per thread, "ready" (TMA expect) single
    arrive = text.index("\tmbarrier.arrive.shared::cta.b64 _,")
    assert not text[:arrive].rstrip().endswith("bar.sync 0;")
    assert text.count("mbarrier.try_wait.parity") == 2
    # the four inits (their views computed between them) share one fence and one barrier,
    # after the last: no thread uses a barrier before the bar.sync
    inits = re.search(r"(\t@%p\d+ mbarrier\.init[^\n]*\n(?:\t(?!@%p\d+ mbarrier|@%p\d+ fence|bar)[^\n]*\n)*){4}",
                      text)
    assert inits and text.count("fence.mbarrier_init.release.cluster;") == 1
    assert re.match(r"\t@%p\d+ fence\.mbarrier_init\.release\.cluster;\n\tbar\.sync 0;", text[inits.end():])
    assert text.index("bar.sync 0;") < text.index("mbarrier.try_wait")
    _assemble(text, locs, "ring")


@gt.jit
def init_then_timer(out):
    a = mbarrier.allocate_mbarrier(batch=2)
    mbarrier.init(a.index(0), count=1)
    t = gl.globaltimer()   # a side effect between two inits: the first is fenced on its own
    mbarrier.init(a.index(1), count=1)
    gl.store(out, t)


def test_an_init_run_ends_at_any_side_effect():
    text, locs, _ = emit(init_then_timer.trace(gl.pointer(gl.int64), num_warps=4, target="sm_90a").graph, "sm_90a")
    assert text.count("fence.mbarrier_init.release.cluster;") == 2
    assert text.index("fence.mbarrier_init") < text.index("%globaltimer")


@gt.jit
def dims(d, out):
    sh = d.shape
    gl.store(out, sh[0] * 1000 + sh[1])


def test_tensordesc_dim_reads_the_shape_parameters():
    _, s = _desc2((100, 130), [64, 64])
    _, text, locs = _ptx(dims, s, np.zeros(1, np.int32))
    r0 = re.search(r"ld\.param\.u32 (%r\d+), \[dims_param_0_dim0\];", text).group(1)
    r1 = re.search(r"ld\.param\.u32 (%r\d+), \[dims_param_0_dim1\];", text).group(1)
    assert re.search(rf"mul\.lo\.s32 %r\d+, {re.escape(r0)}, %r\d+;", text) or r0 + ", 1000" in text
    assert r1 in text[text.index("dims_param_0_dim1];") + 20:]
    _assemble(text, locs, "dims")


def test_lowered_ops_leave_the_refusal_table():
    from gluon_trace.backends.nvidia import rules_tensorcore
    for name in ("tensordesc_dim", "tma_load", "tma_store", "tma_store_wait", "mbarrier_init",
                 "mbarrier_wait", "mbarrier_arrive", "mbarrier_expect", "fence_async_shared", "wgmma",
                 "wgmma_wait"):
        assert name not in rules_tensorcore.UNLOWERED
    assert "warp_specialize" not in rules_tensorcore.UNLOWERED   # warpspec.py, test_warpspec.py


class _FakeDriver:
    """What KernelLauncher.__init__ and the argument checks touch of the driver, without a GPU."""
    cu = type("cu", (), {"CUfunction": staticmethod(lambda k: k)})
    ndev = 1

    def kernel(self, ck):
        return None, 0, set()


def _launcher(monkeypatch, g):
    from gluon_trace.backends.nvidia import launcher
    from gluon_trace.compiled import CompiledKernel
    monkeypatch.setattr(launcher, "driver", lambda: _FakeDriver())
    ck = CompiledKernel(name="copy2d", target="sm_90a", asm="", binary=b"", registers=0, shared_bytes=0,
                        spill_bytes=0, num_warps=4, threads_per_warp=32)
    return launcher.KernelLauncher(g, ck)


def test_launcher_packs_descriptors_where_the_ptx_declares_them(monkeypatch):
    _, s = _desc2((100, 130), [64, 64])
    g = copy2d.trace(s, s, target="sm_90a").graph
    k = _launcher(monkeypatch, g)
    # map (128 bytes at 0), dims at 128 and 132, the next map at the next 64-byte boundary
    assert k.offsets == [0, 128, 132, 192, 320, 324] and k.packer.size == 328
    raw = bytes(range(128))
    k.packer.pack_into(k.buf, 0, raw, 100, 130, raw, 7, 9)
    assert bytes(k.buf)[192:320] == raw and np.frombuffer(bytes(k.buf)[320:328], np.uint32).tolist() == [7, 9]
    assert k.fast([], {}) is None                     # no fast path without the arguments' specs


def test_launcher_refuses_bad_descriptor_arguments(monkeypatch):
    from gluon_trace.errors import LaunchError, LaunchTypeError
    base, s = _desc2((100, 130), [64, 64])
    g = copy2d.trace(s, s, target="sm_90a").graph
    k = _launcher(monkeypatch, g)
    with pytest.raises(LaunchTypeError, match="`src` is a ndarray; the kernel was traced with a TMA"):
        k.launch((1, 1, 1), [base, s])
    _, other = _desc2((100, 130), [32, 64])
    with pytest.raises(LaunchTypeError, match="trace again for this descriptor"):
        k.launch((1, 1, 1), [other, s])
    with pytest.raises(LaunchError, match="describes a cpu tensor; the NVIDIA backend needs CUDA"):
        k.launch((1, 1, 1), [s, s])



# -- wgmma: descriptors ---------------------------------------------------------------------------

def _table(shape, dtype):
    offs, _ = element_offsets(NV(list(shape), dtype), tuple(shape), dtype.bits)
    return np.asarray(offs, np.int64) * (dtype.bits // 8)


def test_descriptor_bit_fields():
    # PTX ISA "Matrix Descriptor Format": start >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in
    # 32-45, swizzle mode in 62-63 (1: 128B, 2: 64B, 3: 32B)
    assert wgmma.encode(0x400, 16, 1024, 128) == 0x40 | 1 << 16 | 64 << 32 | 1 << 62
    assert wgmma.encode(0x2020, 8192, 1024, 128) == 0x202 | 512 << 16 | 64 << 32 | 1 << 62
    assert wgmma.encode(0, 16, 512, 64) >> 62 == 2 and wgmma.encode(0, 16, 256, 32) >> 62 == 3
    assert wgmma.encode(0, 128, 256, 0) == 8 << 16 | 16 << 32
    op = wgmma.Operand(0x60, 8192, 1024, 128, False)
    assert wgmma.hi_word(op) << 32 | wgmma.lo_fields(op) == wgmma.encode(0x60, 8192, 1024, 128)


@pytest.mark.parametrize("shape, dtype, mn_first, rows, kc, want", [
    # K-major A [M, K] f16, 128B: 8-row atoms of 128-byte rows, SBO = 1024; K steps 32 bytes in
    ((128, 64), gl.float16, True, 64, 16, [(0, 1024, 128, True), (32, 1024, 128, True)]),
    # 64B and 32B swizzles: SBO = 8 rows of 64 / 32 bytes
    ((64, 32), gl.float16, True, 64, 16, [(0, 512, 64, True), (32, 512, 64, True)]),
    ((64, 16), gl.float16, True, 64, 16, [(0, 256, 32, True)]),
    # tf32: k8 is 32 bytes too
    ((64, 32), gl.float32, True, 64, 8, [(0, 1024, 128, True), (32, 1024, 128, True)]),
    # MN-major B [K, N] f16, 128B: 64 N per swizzle row, next 64 N at LBO (the column block),
    # 8 K rows per atom (SBO = 1024); the second K step starts 16 rows = 2048 bytes on
    ((64, 128), gl.float16, False, 128, 16, [(0, 1024, 128, False), (2048, 1024, 128, False)]),
])
def test_descriptor_plans(shape, dtype, mn_first, rows, kc, want):
    t = _table(shape, dtype)
    t = t if mn_first else t.T
    es = dtype.bits // 8
    for j, (start, sbo, width, k_major) in enumerate(want):
        p = wgmma.plan(t, es, 0, j * kc, rows, kc)
        assert (p.start, p.sbo, p.width, p.k_major) == (start, sbo, width, k_major)
        assert np.array_equal(wgmma.model(p, rows, kc, es), t[:rows, j * kc:(j + 1) * kc])
    if not want[0][3]:
        assert wgmma.plan(t, es, 0, 0, rows, kc).lbo == shape[0] * 128  # a column block's bytes


def test_a_tile_that_is_not_canonical_has_no_plan():
    t = _table((64, 64), gl.float16)
    assert wgmma.plan(t, 2, 4, 0, 32, 16) is None          # starts mid-atom (row 4)
    plain = np.arange(64 * 64).reshape(64, 64) * 2          # row-major, 128-byte rows, no swizzle
    assert wgmma.plan(plain, 2, 0, 0, 64, 16) is None


# -- wgmma: kernels ---------------------------------------------------------------------------------

def _host(dtype):
    import ml_dtypes
    return {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}[dtype]


def _gemm_descs(m, n, k, bm, bn, bk, dtype, b_kmajor=False):
    """Descriptors over zero host arrays: tracing reads only shapes, dtypes and layouts."""
    gd, t = getattr(gl, dtype), _host(dtype)
    a = np.zeros((m, k), t)
    b = np.zeros((n, k) if b_kmajor else (k, n), t)
    c = np.zeros((m, n), t)
    bb = [bn, bk] if b_kmajor else [bk, bn]
    return (TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], gd)),
            TensorDescriptor.from_tensor(b, bb, NV(bb, gd)),
            TensorDescriptor.from_tensor(c, [bm, bn], NV([bm, bn], gd)))


@pytest.mark.parametrize("dtype, bm, bn, bk, warps, b_kmajor", [
    ("float16", 128, 128, 64, 4, False), ("bfloat16", 128, 256, 64, 8, False),
    ("float16", 64, 64, 32, 4, True), ("bfloat16", 128, 128, 64, 8, True)])
def test_hopper_gemm_assembles(dtype, bm, bn, bk, warps, b_kmajor):
    g = matmul_hopper.trace(*_gemm_descs(512, 512, 512, bm, bn, bk, dtype, b_kmajor), 512, 512, 512,
                            STAGES=3, GROUP_M=8, B_KMAJOR=b_kmajor, target="sm_90a", num_warps=warps).graph
    text, locs, _ = emit(g, "sm_90a")
    ins = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.(\w+)\.\w+ \{[^}]*\}, "
                     r"(%rd\d+), (%rd\d+), (%p\d+), 1, 1, 0, (\d);", text)
    per_warpgroup_rows = bm // (warps // 4)
    assert len(ins) == (per_warpgroup_rows // 64) * (bk // 16)
    assert {n for n, *_ in ins} == {str(bn)} and {t for _, t, *_ in ins} == {"f16" if dtype == "float16" else "bf16"}
    assert {tb for *_, tb in ins} == {"0" if b_kmajor else "1"}   # trans-b: MN-major B unless K-major
    assert "wgmma.fence.sync.aligned;" in text and "wgmma.commit_group.sync.aligned;" in text
    assert "wgmma.wait_group.sync.aligned 1;" in text and "wgmma.wait_group.sync.aligned 0;" in text
    _assemble(text, locs, "matmul_hopper")


@pytest.mark.parametrize("d, causal, warps", [(64, False, 4), (128, True, 8), (64, True, 4)])
def test_attention_assembles(d, causal, warps):
    q = np.zeros((2, 256, d), _host("bfloat16"))
    bm = 64 if warps == 4 else 128
    qd = TensorDescriptor.from_tensor(q, [1, bm, d], NV([bm, d], gl.bfloat16))
    kd = TensorDescriptor.from_tensor(q, [1, 64, d], NV([64, d], gl.bfloat16))
    g = attention_fwd.trace(qd, kd, kd, qd, 256, 0.125, CAUSAL=causal, target="sm_90a",
                            num_warps=warps).graph
    text, locs, _ = emit(g, "sm_90a")
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.bf16\.bf16 \{[^}]*\}, "
                     r"\{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+", text)  # P @ V: A from registers
    _assemble(text, locs, "attention_fwd")


@pytest.mark.parametrize("bn, causal", [(128, False), (64, True)])
def test_warp_specialized_attention_assembles_without_spills(bn, causal):
    """Two 240-register consumers and a 24-register producer: ptxas keeps everything in
    registers, and P reaches the wgmma packed by paired cvts."""
    from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws
    spec = lambda blk: TensorDescriptor.type_spec(gl.bfloat16, [1] + blk, NV(blk, gl.bfloat16))  # noqa: E731
    g = attention_fwd_ws.trace(spec([64, 128]), spec([bn, 128]), spec([bn, 128]), spec([64, 128]), gl.int32,
                               gl.float32, CAUSAL=causal, STAGES=2, num_warps=4, target="sm_90a").graph
    text, locs, _ = emit(g, "sm_90a")
    assert "setmaxnreg.inc.sync.aligned.u32 240;" in text and "setmaxnreg.dec.sync.aligned.u32 24;" in text
    labels = re.findall(r"(\$L_loop_\d+):\n", text)
    bodies = [re.search(re.escape(lb) + r":\n(.*?)\n\tbra\.uni " + re.escape(lb) + ";", text, re.S).group(1)
              for lb in labels]
    loops = [b for b in bodies if "wgmma.mma_async" in b]
    loop = min(loops, key=len)  # the KV loop (inside the persistent loop over tiles)
    # P (BM*BN/128 values a thread) is rounded by one paired cvt per two values in each softmax
    # branch (masked or not), never one at a time, and carried to its wgmma in those .b32 pairs
    assert loop.count("cvt.rn.bf16x2.f32") == 2 * (64 * bn // 128 // 2)
    assert "cvt.rn.bf16.f32" not in loop
    # S(j) retires at wait_group 1 while P(j-1) @ V runs on: the masked branch's copy of S must
    # not wait for that one too (it did: every in-flight group counted until a wait_group 0)
    assert loop.count("wgmma.wait_group.sync.aligned 1;") == 1
    assert loop.count("wgmma.wait_group.sync.aligned 0;") == 1
    # the wgmma of P @ V takes the carried .b32 pairs as they are: nothing packs halves again
    assert not re.search(r"mov\.b32 %r\d+, \{%h\d+, %h\d+\};", loop)
    # operands are made before the fence: an A register written after it has ptxas fence and
    # wait before every wgmma of P @ V (seen in the SASS as one WARPGROUP.ARRIVE per HGMMA)
    for group in re.findall(r"wgmma\.fence\.sync\.aligned;\n(.*?)\twgmma\.commit_group", text, re.S):
        assert all(line.startswith("\twgmma.mma_async") for line in group.splitlines())
    info = _assemble(text, locs, "attention_fwd_ws")
    assert info["spill_stores"] == 0 and info["spill_loads"] == 0


def _sass(cubin: bytes) -> list[str]:
    """The instructions of a cubin, by nvdisasm (the dev extras install it beside ptxas)."""
    import os
    import shutil
    import subprocess
    import tempfile
    exe = os.path.join(os.path.dirname(ptxas.locate()[0]), "nvdisasm")
    exe = exe if os.path.exists(exe) else shutil.which("nvdisasm")
    if exe is None:
        pytest.skip("nvdisasm is not installed (pip install -e '.[dev]' brings it)")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([exe, "-c", f.name], capture_output=True, text=True, check=True).stdout
    return [m.group(1).strip() for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(.*?);", out)]


@pytest.mark.parametrize("d, consumers, regs", [(128, 2, 240), (64, 3, 160)])
def test_warp_specialized_attention_overlaps_the_softmax_with_p_v(d, consumers, regs):
    """In the SASS of each consumer's KV loop, the softmax's exponentials run between the wait
    that retires S(j) (gsb0 0x1) and the one that retires P(j-1) @ V (0x0). Seen on the H100:
    when P(j) was rounded into the registers P(j-1) @ V was reading, ptxas hoisted the second
    wait above the softmax and the kernel ran at 0.65x."""
    from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws
    spec = lambda blk: TensorDescriptor.type_spec(gl.bfloat16, [1] + blk, NV(blk, gl.bfloat16))  # noqa: E731
    g = attention_fwd_ws.trace(spec([64, d]), spec([128, d]), spec([128, d]), spec([64, d]), gl.int32,
                               gl.float32, CAUSAL=False, STAGES=2, CONSUMERS=consumers, CONSUMER_REGS=regs,
                               num_warps=4, target="sm_90a").graph
    text, locs, _ = emit(g, "sm_90a")
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(str(e))
    sass = _sass(ptxas.assemble(text, "sm_90a", locs, "attention_fwd_ws")[0])
    waits = [i for i, x in enumerate(sass) if x.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x1")]
    assert len(waits) == consumers  # one KV loop per consumer
    for w in waits:
        nxt = next(i for i in range(w + 1, len(sass)) if sass[i].startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
        exps = sum(x.startswith("MUFU.EX2") for x in sass[w:nxt])
        assert exps >= 64 * 128 // 128, (exps, sass[w:w + 8])


@gt.jit
def wgmma_tile(a_desc, b_desc, c_ptr, A_REGS: gl.constexpr, B_KMAJOR: gl.constexpr):
    """C[BM, BN] = A[BM, BK] @ B, one tile: TMA in, one wgmma (A from shared memory or from
    registers), C out with plain stores. B is [BK, BN], or with B_KMAJOR [BN, BK]."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[0 if B_KMAJOR else 1]
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                    instr_shape=[16, BN, 16])
    a_s = gl.allocate_shared_memory(a_desc.dtype, [BM, BK], a_desc.layout)
    b_s = gl.allocate_shared_memory(b_desc.dtype, b_desc.block_type.shape, b_desc.layout)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma.async_load(a_desc, [0, 0], bar, a_s)
    tma.async_load(b_desc, [0, 0], bar, b_s)
    mbarrier.wait(bar, 0)
    b = b_s.permute((1, 0)) if B_KMAJOR else b_s
    acc = gl.zeros([BM, BN], gl.float32, acc_l)
    if A_REGS:
        acc = warpgroup_mma(a_s.load(gl.DotOperandLayout(0, acc_l, k_width=2)), b, acc)
    else:
        acc = warpgroup_mma(a_s, b, acc)
    rows = gl.arange(0, BM, gl.SliceLayout(1, acc_l))
    cols = gl.arange(0, BN, gl.SliceLayout(0, acc_l))
    gl.store(c_ptr + rows[:, None] * BN + cols[None, :], acc)


# (BM, BN, BK, dtype, warps, A from registers, B K-major): every swizzle width of A (BK * size
# 32/64/128 bytes), B MN-major and K-major, two warpgroups
WGMMA_TILES = [(64, 64, 16, "float16", 4, False, False), (64, 64, 32, "float16", 4, False, False),
               (64, 128, 64, "bfloat16", 4, False, False), (64, 256, 64, "float16", 4, False, True),
               (128, 64, 64, "float16", 4, False, False), (128, 128, 64, "bfloat16", 8, False, True),
               (64, 64, 64, "float16", 4, True, False), (128, 32, 32, "bfloat16", 8, True, True),
               (64, 64, 32, "float32", 4, False, True)]


def _tile_descs(bm, bn, bk, dtype, b_kmajor, a=None, b=None):
    gd = getattr(gl, dtype)
    if a is None:
        a = np.zeros((bm, bk), _host(dtype))
        b = np.zeros((bn, bk) if b_kmajor else (bk, bn), _host(dtype))
    bb = [bn, bk] if b_kmajor else [bk, bn]
    return (TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], gd)),
            TensorDescriptor.from_tensor(b, bb, NV(bb, gd)))


@pytest.mark.parametrize("bm, bn, bk, dtype, warps, a_regs, b_kmajor", WGMMA_TILES)
def test_wgmma_tiles_on_the_interpreter_and_ptxas(bm, bn, bk, dtype, warps, a_regs, b_kmajor):
    rng = np.random.default_rng(bm + bn + bk)
    t = _host(dtype)
    a = rng.standard_normal((bm, bk)).astype(np.float32).astype(t)
    b = rng.standard_normal((bn, bk) if b_kmajor else (bk, bn)).astype(np.float32).astype(t)
    c = np.zeros(bm * bn, np.float32)
    da, db = _tile_descs(bm, bn, bk, dtype, b_kmajor, a, b)
    wgmma_tile[(1,)](da, db, c, A_REGS=a_regs, B_KMAJOR=b_kmajor, num_warps=warps, backend="interpreter",
                     target="sm_90a")
    ref = a.astype(np.float64) @ (b.astype(np.float64).T if b_kmajor else b.astype(np.float64))
    np.testing.assert_allclose(c.reshape(bm, bn), ref, rtol=2e-2 if dtype == "float32" else 1e-5,
                               atol=2e-2 if dtype == "float32" else 1e-4)
    g = wgmma_tile.trace(da, db, c, A_REGS=a_regs, B_KMAJOR=b_kmajor, num_warps=warps, target="sm_90a").graph
    text, locs, _ = emit(g, "sm_90a")
    _assemble(text, locs, "wgmma_tile")


def _wgmma_kernel(acc_dtype=gl.float32, start=0):
    @gt.jit
    def k(p):
        nv = NV([64, 64], gl.float16)
        a = gl.allocate_shared_memory(gl.float16, [128, 64], nv)
        b = gl.allocate_shared_memory(gl.float16, [64, 64], nv)
        acc = gl.zeros([64, 64], acc_dtype, gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16]))
        warpgroup_mma(a.slice(start, 64, 0), b, acc)
    return k


def test_wgmma_refusals_name_the_line():
    g = _wgmma_kernel(start=4).trace(np.zeros(4, np.float32), target="sm_90a").graph
    with pytest.raises(CompileError, match="operand A is not in a layout wgmma reads") as e:
        emit(g, "sm_90a")
    assert e.value.loc is not None
    # a float16 accumulator runs the f32 form, rounded once the group retires (it was refused);
    # test_first_week_mma_sim runs it against numpy
    g = _wgmma_kernel(acc_dtype=gl.float16).trace(np.zeros(4, np.float32), target="sm_90a").graph
    text, _, _ = emit(g, "sm_90a")
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16" in text   # (the unused result: no rounding kept)
    g = _wgmma_kernel().trace(np.zeros(4, np.float32), target="sm_90a").graph
    with pytest.raises(CompileError, match="warpgroup_mma \\(wgmma\\) needs sm_90a; this kernel is compiled "
                       "for sm_90") as e:
        emit(g, "sm_90")                                      # traced for sm_90a, compiled for sm_90
    assert e.value.loc is not None
    _, s = _desc2((100, 130), [64, 64])
    g = copy2d.trace(s, s, target="sm_90a").graph
    with pytest.raises(CompileError, match=r"needs sm_90; this kernel is compiled for sm_89") as e:
        emit(g, "sm_89")
    assert e.value.loc is not None
    g = _wgmma_kernel(start=64).trace(np.zeros(4, np.float32), target="sm_90a").graph
    text, locs, _ = emit(g, "sm_90a")                           # whole atoms: fine
    assert "wgmma.wait_group.sync.aligned 0;" in text         # a synchronous wgmma waits for itself
    _assemble(text, locs, "k")


# -- GPU ----------------------------------------------------------------------------------------

# named: a launch whose tensors all sit behind TensorDescriptors would otherwise pick the
# interpreter (gluon_trace.backend.pick looks at tensor arguments only)
NVIDIA = "nvidia"

def _gpu():
    try:
        import torch
        if torch.cuda.is_available():
            return torch
    except ImportError:
        pass
    pytest.skip("no CUDA GPU (torch.cuda)")


@pytest.mark.gpu
@pytest.mark.parametrize("shape,block,dtype", [((100, 130), (64, 64), "float32"),
                                               ((128, 256), (64, 64), "float16"),
                                               ((77, 200), (32, 64), "float16"),
                                               ((5, 12), (16, 16), "float32")])
def test_gpu_tma_copy_zero_fills_and_clips(shape, block, dtype):
    torch = _gpu()
    td = getattr(torch, dtype)
    gd = getattr(gl, dtype)
    m, n = shape
    bm, bn = block
    grid_m, grid_n = -(-m // bm), -(-n // bn)
    item = torch.tensor([], dtype=td).element_size()
    src = torch.randn(m, _wide(n, item), device="cuda").to(td)[:, :n]
    # dst is larger than src: loads past src's edges must come back as zeros, and the part of
    # each stored block past dst's own edge (dst is cut one row and column short) is clipped
    big = torch.full((grid_m * bm, _wide(grid_n * bn, item)), 7.0, device="cuda").to(td)
    dst = big[:m + 1, :n + 1] if (m + 1) <= grid_m * bm and (n + 1) <= grid_n * bn else big[:m, :n]
    sd = TensorDescriptor.from_tensor(src, list(block), NV(list(block), gd))
    dd = TensorDescriptor.from_tensor(dst, list(block), NV(list(block), gd))
    copy2d[(grid_m, grid_n)](sd, dd, backend=NVIDIA)
    torch.cuda.synchronize()
    got = big.float().cpu().numpy()
    h, w = dst.shape
    exp = np.full(got.shape, 7.0, np.float32)
    per = 16 // item   # the store writes whole 16-byte pieces of a row (the interpreter models it)
    exp[:h, :-(-w // per) * per] = 0.0
    exp[:m, :n] = src.float().cpu().numpy()
    np.testing.assert_array_equal(got, exp)


@pytest.mark.gpu
def test_gpu_tma_copy_3d():
    torch = _gpu()
    x = torch.randn(3, 40, 72, device="cuda").half()
    y = torch.zeros(3, 40, 72 + 8, device="cuda").half()
    sd = TensorDescriptor.from_tensor(x, [1, 32, 64], NV([32, 64], gl.float16))
    dd = TensorDescriptor.from_tensor(y[:, :, :72], [1, 32, 64], NV([32, 64], gl.float16))
    copy3d[(2, 2, 3)](sd, dd, backend=NVIDIA)
    torch.cuda.synchronize()
    assert torch.equal(y[:, :, :72], x) and not y[:, :, 72:].any()


@pytest.mark.gpu
def test_gpu_barrier_ring_matches_numpy():
    torch = _gpu()
    k_tiles = 8
    x = torch.randn(32, 32 * k_tiles + 4, device="cuda")[:, :32 * k_tiles]
    out = torch.zeros(32 * 32, device="cuda")
    d = TensorDescriptor.from_tensor(x, [32, 32], NV([32, 32], gl.float32))
    ring[(1,)](d, out, K_TILES=k_tiles, backend=NVIDIA)
    torch.cuda.synchronize()
    exp = x.cpu().numpy().reshape(32, k_tiles, 32).sum(axis=1)
    np.testing.assert_allclose(out.cpu().numpy().reshape(32, 32), exp, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_moved_tensor_is_refused_before_launch():
    torch = _gpu()
    from gluon_trace.errors import LaunchError
    x = torch.zeros(64, 64, device="cuda")
    d = TensorDescriptor.from_tensor(x, [64, 64], NV([64, 64], gl.float32))
    d.base = torch.zeros(64, 64, device="cuda")   # as if the storage had been reallocated
    with pytest.raises(LaunchError, match="moved"):
        copy2d[(1, 1)](d, d, backend=NVIDIA)


@pytest.mark.gpu
def test_gpu_tma_kernels_take_the_fast_path_and_keep_its_checks():
    """Repeated launches with descriptors go through the generated fast path (no re-binding,
    re-keying or re-encoding per launch); a descriptor it cannot vouch for (a new one, a moved
    tensor) falls back to the checked path, which encodes it or refuses it."""
    torch = _gpu()
    from gluon_trace.errors import LaunchError
    x = torch.randn(64, 128, device="cuda")
    y = torch.full_like(x, float("nan"))
    dx = TensorDescriptor.from_tensor(x, [64, 64], NV([64, 64], gl.float32))
    dy = TensorDescriptor.from_tensor(y, [64, 64], NV([64, 64], gl.float32))
    from gluon_trace.backends.nvidia import claunch
    copy2d._fast.clear()
    copy2d._fast_keys.clear()
    for _ in range(3):
        copy2d[(1, 2)](dx, dy, backend=NVIDIA)
    assert copy2d._fast, "no fast launcher was registered for a TMA kernel"
    assert claunch.status().startswith("on"), claunch.status()
    assert type(copy2d._fast[0]).__name__ == "Launch"  # the C path takes descriptors
    torch.cuda.synchronize()
    assert torch.equal(y, x)
    x2 = torch.randn(64, 128, device="cuda")    # a new descriptor: encoded once, then fast
    d2 = TensorDescriptor.from_tensor(x2, [64, 64], NV([64, 64], gl.float32))
    for _ in range(2):
        copy2d[(1, 2)](d2, dy, backend=NVIDIA)
    torch.cuda.synchronize()
    assert torch.equal(y, x2)
    d2.base = torch.zeros(64, 128, device="cuda")   # as if reallocated: refused, not launched
    with pytest.raises(LaunchError, match="moved"):
        copy2d[(1, 2)](d2, dy, backend=NVIDIA)


def _padded(torch, rows, cols, dtype, fill=None):
    """A [rows, cols] view of a tensor whose rows are padded to 16 bytes (TMA's stride rule)."""
    item = torch.tensor([], dtype=dtype).element_size()
    if fill is None:
        return torch.randn(rows, _wide(cols, item), device="cuda").to(dtype)[:, :cols]
    return torch.full((rows, _wide(cols, item)), fill, device="cuda", dtype=dtype)[:, :cols]


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(512, 512, 512), (1000, 520, 333), (16, 2048, 512), (2048, 24, 1024),
                                     (4096, 4096, 256)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("b_kmajor", [False, True])
def test_gpu_hopper_gemm_matches_torch(m, n, k, dtype, b_kmajor):
    """TMA + mbarrier ring + wgmma, persistent; float32 C; B as [K, N] (MN-major in shared
    memory: trans-b) or as [N, K] (K-major)."""
    torch = _gpu()
    td, gd = getattr(torch, dtype), getattr(gl, dtype)
    bm, bn, bk = 128, 128, 64
    a = _padded(torch, m, k, td)
    b = _padded(torch, n, k, td) if b_kmajor else _padded(torch, k, n, td)
    c = _padded(torch, m, n, torch.float32, fill=float("nan"))
    bb = [bn, bk] if b_kmajor else [bk, bn]
    da = TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], gd))
    db = TensorDescriptor.from_tensor(b, bb, NV(bb, gd))
    dc = TensorDescriptor.from_tensor(c, [bm, bn], NV([bm, bn], gl.float32))
    tiles = -(-m // bm) * -(-n // bn)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    matmul_hopper[(min(tiles, sms),)](da, db, dc, m, n, k, STAGES=3, GROUP_M=8, B_KMAJOR=b_kmajor,
                                      num_warps=4, backend=NVIDIA)
    torch.cuda.synchronize()
    ref = a.double() @ (b.double().T if b_kmajor else b.double())
    torch.testing.assert_close(c.double(), ref, rtol=1e-4, atol=1e-4 * ref.abs().max().item())


@pytest.mark.gpu
@pytest.mark.parametrize("d, bm, warps", [(64, 64, 4), (128, 64, 4), (64, 128, 8), (128, 128, 8)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [256, 200, 1000])
@pytest.mark.parametrize("kernel", ["attention_fwd", "attention_fwd_pipelined"])
def test_gpu_attention_matches_sdpa(d, bm, warps, causal, seq, kernel):
    torch = _gpu()
    bh, bn = 4, 64
    q, k, v = (torch.randn(bh, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.full((bh, seq, d), float("nan"), device="cuda", dtype=torch.bfloat16)
    lay_m, lay_n = NV([bm, d], gl.bfloat16), NV([bn, d], gl.bfloat16)
    qd = TensorDescriptor.from_tensor(q, [1, bm, d], lay_m)
    od = TensorDescriptor.from_tensor(o, [1, bm, d], lay_m)
    kd = TensorDescriptor.from_tensor(k, [1, bn, d], lay_n)
    vd = TensorDescriptor.from_tensor(v, [1, bn, d], lay_n)
    scale = 1.0 / d ** 0.5
    from gluon_trace.kernels import attention_hopper
    getattr(attention_hopper, kernel)[(-(-seq // bm), bh)](qd, kd, vd, od, seq, scale, CAUSAL=causal,
                                                           num_warps=warps, backend=NVIDIA)
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                           is_causal=causal, scale=scale)
    assert not o.isnan().any()
    torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("d, bn, stages, consumers, ctas", [(64, 64, 2, 2, None), (128, 128, 2, 2, None),
                                                            (128, 64, 4, 2, None), (64, 128, 2, 2, None),
                                                            (64, 64, 4, 3, None), (128, 128, 2, 2, 5),
                                                            (64, 64, 2, 3, 7), (64, 128, 3, 3, 6)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [256, 200, 1000])
def test_gpu_attention_warp_specialized_matches_sdpa(d, bn, stages, consumers, ctas, causal, seq):
    """ctas: a persistent 1-D grid of that many CTAs."""
    torch = _gpu()
    from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws
    bh, bm = 4, 64
    q, k, v = (torch.randn(bh, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.full((bh, seq, d), float("nan"), device="cuda", dtype=torch.bfloat16)
    lay_m, lay_n = NV([bm, d], gl.bfloat16), NV([bn, d], gl.bfloat16)
    qd, od = (TensorDescriptor.from_tensor(x, [1, bm, d], lay_m) for x in (q, o))
    kd, vd = (TensorDescriptor.from_tensor(x, [1, bn, d], lay_n) for x in (k, v))
    scale = 1.0 / d ** 0.5
    grid = (-(-seq // (consumers * bm)), bh) if ctas is None else (ctas,)
    attention_fwd_ws[grid](qd, kd, vd, od, seq, scale, CAUSAL=causal, STAGES=stages,
                                                        CONSUMERS=consumers, CONSUMER_REGS=240 if consumers == 2 else 160,
                                                        num_warps=4, backend=NVIDIA)
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                           is_causal=causal, scale=scale)
    assert not o.isnan().any()
    torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=2e-2)


def test_attention_split_tail_is_one_loop_with_the_unsplit_kernels_matrix_products():
    """The split tail's units are items of the same persistent loop as whole tiles: the PTX holds
    the unsplit kernel's wgmmas once, not a second copy of the KV loop for the tail (which tripled
    ptxas's time), and ptxas keeps it in registers."""
    from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws, attention_fwd_ws_split
    spec = lambda blk: TensorDescriptor.type_spec(gl.bfloat16, [1] + blk, NV(blk, gl.bfloat16))  # noqa: E731
    descs = (spec([64, 128]), spec([128, 128]), spec([128, 128]), spec([64, 128]))
    kw = dict(CAUSAL=False, num_warps=4, target="sm_90a")
    plain, _, _ = emit(attention_fwd_ws.trace(*descs, gl.int32, gl.float32, **kw).graph, "sm_90a")
    text, locs, _ = emit(attention_fwd_ws_split.trace(*descs, gl.pointer(gl.float32), gl.pointer(gl.int32),
                                                      gl.int32, gl.float32, **kw).graph, "sm_90a")
    assert text.count("wgmma.mma_async") == plain.count("wgmma.mma_async")
    assert text.count("atom.global.acq_rel.gpu.add") == 2  # one count a consumer
    info = _assemble(text, locs, "attention_fwd_ws_split")
    assert info["spill_stores"] == 0 and info["spill_loads"] == 0

@pytest.mark.gpu
@pytest.mark.parametrize("d, bn, stages, consumers, bh, seq", [
    (128, 128, 2, 2, 20, 1024),   # 160 tiles on the SMs: a partial round, its tiles cut along KV
    (128, 128, 2, 2, 33, 1000),   # a ragged last KV tile in one part
    (64, 128, 3, 3, 40, 1000),    # three consumers, 192-row tiles
    (64, 64, 2, 2, 4, 256),       # fewer tiles than SMs: nothing to cut
])
def test_gpu_attention_split_tail_matches_sdpa_and_repeats_bit_for_bit(d, bn, stages, consumers, bh, seq):
    """attention_fwd_ws_split on a grid of one CTA per SM: against SDPA, the same bits on a second
    launch over the same workspace (parts combined in part order), counters back at zero."""
    torch = _gpu()
    from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws_split, attention_split_workspace
    bm = 64
    q, k, v = (torch.randn(bh, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    lay_m, lay_n = NV([bm, d], gl.bfloat16), NV([bn, d], gl.bfloat16)
    kd, vd = (TensorDescriptor.from_tensor(x, [1, bn, d], lay_n) for x in (k, v))
    scale = 1.0 / d ** 0.5
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    size, count = attention_split_workspace(programs, bm, d, consumers)
    parts = torch.full((size,), float("nan"), device="cuda")
    counters = torch.zeros(count, device="cuda", dtype=torch.int32)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=scale)
    outs = []
    for _ in range(2):
        o = torch.full((bh, seq, d), float("nan"), device="cuda", dtype=torch.bfloat16)
        qd, od = (TensorDescriptor.from_tensor(x, [1, bm, d], lay_m) for x in (q, o))
        attention_fwd_ws_split[(programs,)](qd, kd, vd, od, parts, counters, seq, scale, CAUSAL=False,
                                            STAGES=stages, CONSUMERS=consumers,
                                            CONSUMER_REGS=240 if consumers == 2 else 160, num_warps=4,
                                            backend=NVIDIA)
        torch.cuda.synchronize()
        assert not o.isnan().any()
        torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=2e-2)
        assert not counters.any()
        outs.append(o)
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


def test_attention_in_kv_pieces_issues_s_as_one_wide_wgmma_and_stays_in_registers():
    """KV tiles of 10 pieces of 16 rows: S = Q K^T is one m64n160 instruction a K step (K's
    chunk-major slots are one operand), P V one m64n128k16 a piece; two 240-register consumers
    and the producer assemble without spills."""
    from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws
    spec = lambda blk: TensorDescriptor.type_spec(gl.bfloat16, [1] + blk, NV(blk, gl.bfloat16))  # noqa: E731
    lay = NV([16, 64], gl.bfloat16)
    k5, v5 = (TensorDescriptor.type_spec(gl.bfloat16, blk, lay) for blk in ([1, 2, 10, 16, 64], [1, 10, 2, 16, 64]))
    g = attention_fwd_ws.trace(spec([64, 128]), k5, v5, spec([64, 128]), gl.int32,
                               gl.float32, CAUSAL=False, KV_PIECES=10, num_warps=4, target="sm_90a").graph
    text, locs, _ = emit(g, "sm_90a")
    # one box a K tile and one a V tile (piece_descriptors' 5-D views), not one a piece
    assert text.count("cp.async.bulk.tensor.5d") == 2
    wide = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16", text)
    assert set(wide) == {"160", "128"}
    # S twice in each consumer (its first tile and the loop): 2 chunks x 4 K steps each; P V a piece
    assert wide.count("160") == 2 * 2 * 8 and wide.count("128") == 2 * 2 * 10
    info = _assemble(text, locs, "attention_fwd_ws")
    assert info["spill_stores"] == 0 and info["spill_loads"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("d, pieces, consumers, ctas, split", [
    (128, 10, 2, None, False), (128, 10, 2, "sms", False), (64, 5, 3, "sms", False), (128, 9, 2, None, False),
    (128, 10, 2, "sms", True)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bh, seq", [(4, 1000), (3, 4096), (2, 200)])
def test_gpu_attention_in_kv_pieces_matches_sdpa(d, pieces, consumers, ctas, split, causal, bh, seq):
    """KV tiles of ``pieces`` x 16 rows (160, 144, 80: no powers of two) against SDPA; ctas "sms":
    persistent on one CTA per SM; split: the split tail over pieces (non-causal only)."""
    torch = _gpu()
    if split and causal:
        pytest.skip("the split tail is non-causal")
    from gluon_trace.kernels.attention_hopper_ws import (attention_fwd_ws, attention_fwd_ws_split,
                                                         attention_split_workspace, piece_descriptors)
    bm = 64
    q, k, v = (torch.randn(bh, seq, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.full((bh, seq, d), float("nan"), device="cuda", dtype=torch.bfloat16)
    qd, od = (TensorDescriptor.from_tensor(x, [1, bm, d], NV([bm, d], gl.bfloat16)) for x in (q, o))
    kd, vd = piece_descriptors(k, v, pieces)
    scale = 1.0 / d ** 0.5
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = (-(-seq // (consumers * bm)), bh) if ctas is None else (sms,)
    kw = dict(CAUSAL=causal, CONSUMERS=consumers, CONSUMER_REGS=240 if consumers == 2 else 160, KV_PIECES=pieces,
              num_warps=4, backend=NVIDIA)
    if split:
        size, count = attention_split_workspace(sms, bm, d, consumers)
        parts = torch.full((size,), float("nan"), device="cuda")
        counters = torch.zeros(count, device="cuda", dtype=torch.int32)
        attention_fwd_ws_split[grid](qd, kd, vd, od, parts, counters, seq, scale, **kw)
    else:
        attention_fwd_ws[grid](qd, kd, vd, od, seq, scale, **kw)
    torch.cuda.synchronize()
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                                           scale=scale)
    assert not o.isnan().any()
    torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("bm, bn, bk, dtype, warps, a_regs, b_kmajor", WGMMA_TILES)
def test_gpu_wgmma_tiles(bm, bn, bk, dtype, warps, a_regs, b_kmajor):
    """One wgmma tile per swizzle width, B major-ness and A source: the descriptors' first check
    (a wrong field shows up here as a permuted or garbled C, before the GEMM's pipeline)."""
    torch = _gpu()
    td = getattr(torch, dtype)
    a = torch.randn(bm, bk, device="cuda").to(td)
    b = torch.randn((bn, bk) if b_kmajor else (bk, bn), device="cuda").to(td)
    c = torch.full((bm * bn,), float("nan"), device="cuda")
    da, db = _tile_descs(bm, bn, bk, dtype, b_kmajor, a, b)
    wgmma_tile[(1,)](da, db, c, A_REGS=a_regs, B_KMAJOR=b_kmajor, num_warps=warps, backend=NVIDIA)
    torch.cuda.synchronize()
    ref = a.double() @ (b.double().T if b_kmajor else b.double())
    tol = 2e-2 if dtype == "float32" else 1e-4   # float32 operands go through tf32
    torch.testing.assert_close(c.view(bm, bn).double(), ref, rtol=tol, atol=tol * ref.abs().max().item())


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(1024, 1024, 1024), (1000, 1000, 1000)])
def test_gpu_hopper_gemm_big_tiles_bf16_out(m, n, k):
    """The benchmark's shape of kernel: 128x256 tiles over two warpgroups (rows split between
    them: their A descriptors differ by 64 rows), 213 KB of shared memory, bf16 C."""
    torch = _gpu()
    bm, bn, bk = 128, 256, 64
    a = _padded(torch, m, k, torch.bfloat16)
    b = _padded(torch, k, n, torch.bfloat16)
    c = _padded(torch, m, n, torch.bfloat16, fill=float("nan"))
    da = TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], gl.bfloat16))
    db = TensorDescriptor.from_tensor(b, [bk, bn], NV([bk, bn], gl.bfloat16))
    dc = TensorDescriptor.from_tensor(c, [bm, bn], NV([bm, bn], gl.bfloat16))
    tiles = -(-m // bm) * -(-n // bn)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    matmul_hopper[(min(tiles, sms),)](da, db, dc, m, n, k, STAGES=3, GROUP_M=8, num_warps=8,
                                      backend=NVIDIA)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


def test_an_in_flight_accumulator_is_not_copied_before_its_group_retires():
    """A loop that carries an async wgmma result it did not accumulate in place (attention's
    O += P V after the rescale) must not copy those registers at the back edge while the
    tensor cores may still write them (seen on the H100 as results wrong under memcheck's
    timing): the copy waits for every group first. A GEMM's in-place chain waits nowhere new."""
    from gluon_trace.kernels.attention_hopper import attention_fwd_pipelined
    spec = lambda blk: TensorDescriptor.type_spec(gl.bfloat16, [1] + blk, NV(blk, gl.bfloat16))  # noqa: E731
    g = attention_fwd_pipelined.trace(spec([64, 128]), spec([64, 128]), spec([64, 128]), spec([64, 128]),
                                      gl.int32, gl.float32, CAUSAL=False, STAGES=3, target="sm_90a").graph
    text, _, _ = emit(g, "sm_90a")
    loop = re.findall(r"(\$L_loop_\d+):\n(.*?)\n\tbra\.uni \1;", text, re.S)
    body = max((b for _, b in loop), key=len)           # the K/V loop
    tail = body[body.rindex("wgmma.commit_group"):]
    assert "wgmma.wait_group.sync.aligned 1;" in tail and tail.rstrip().count("wgmma.wait_group.sync.aligned 0;") == 1
    moves = tail[tail.index("wgmma.wait_group.sync.aligned 0;"):]
    assert re.search(r"mov\.f32 %f\d+, %f\d+;", moves)   # the carried O copied after the wait
    spec2 = lambda blk: TensorDescriptor.type_spec(gl.bfloat16, blk, NV(blk, gl.bfloat16))  # noqa: E731
    g = matmul_hopper.trace(spec2([128, 64]), spec2([64, 128]), spec2([128, 128]), gl.int32, gl.int32, gl.int32,
                            STAGES=3, GROUP_M=8, target="sm_90a").graph
    assert emit(g, "sm_90a")[0].count("wgmma.wait_group.sync.aligned 0;") == 1   # only after the K loop


@gt.jit
def copy1d(src, dst):
    B: gl.constexpr = src.block_type.shape[0]
    buf = gl.allocate_shared_memory(src.dtype, [B], src.layout)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, src.block_type.nbytes)
    tma.async_load(src, [gl.program_id(0) * B], bar, buf)
    mbarrier.wait(bar, 0)
    tma.async_store(dst, [gl.program_id(0) * B], buf)
    tma.store_wait(0)


def test_a_tma_store_past_the_end_of_a_1d_tensor_is_refused(monkeypatch):
    """A 1-D tensor has no row pitch after its end: the 16-byte piece a TMA store writes whole
    would lie outside it, so such a store is refused (interpreter at the op, NVIDIA at launch)."""
    from gluon_trace.errors import InterpreterError, LaunchError
    lay = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)
    src = np.arange(64, dtype=np.float32)
    ds = TensorDescriptor.from_tensor(src, [32], lay)
    out = np.zeros(64, np.float32)
    copy1d[(2,)](ds, TensorDescriptor.from_tensor(out[:60], [32], lay), backend="interpreter", target="sm_90a")
    np.testing.assert_array_equal(out[:60], src[:60])           # 240 bytes: whole pieces, fine
    bad = TensorDescriptor.from_tensor(out[:30], [32], lay)     # 120 bytes
    with pytest.raises(InterpreterError, match="past the end of its 1-D tensor") as e:
        copy1d[(1,)](ds, bad, backend="interpreter", target="sm_90a")
    assert "test_hopper.py" in str(e.value)
    k = _launcher(monkeypatch, copy1d.trace(ds, bad, target="sm_90a").graph)
    with pytest.raises(LaunchError, match="argument `dst`: a TMA store through this descriptor could write past"):
        k.launch((1, 1, 1), [ds, bad])


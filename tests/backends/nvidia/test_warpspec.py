"""warp_specialize on NVIDIA (backends/nvidia/warpspec.py).

CPU: the shape of the code (workers branch away at the start and meet the default partition
at two CTA barriers; each partition's own barriers are named and counted; captured scalars
cross through shared memory; setmaxnreg moves registers on sm_90a; a worker's reduction
scratch sits above the default's), ptxas assembling it, the launch width in the compile
summary, and the refusal of a form the backend does not lower. The partitions run
concurrently and spin on mbarriers, which the lockstep PTX simulator cannot interleave, so
execution is proven on the GPU (``pytest -m gpu``) and in the interpreter, which runs the
partitions as threads and checks their synchronisation.
"""
import re

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import CompileError
from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws
from gluon_trace.kernels.matmul_hopper_ws import matmul_hopper_pingpong, matmul_hopper_ws
from gluon_trace.language.nvidia.hopper import mbarrier
from gluon_trace.nvidia.hopper import TensorDescriptor

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia import ptxas  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from gluon_trace.backends.nvidia.warpspec import plan  # noqa: E402

NV = gl.NVMMASharedLayout.get_default_for


def _produce(buf, bar, x_ptr, out_ptr, N, shift):
    lay = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    x = gl.load(x_ptr + gl.arange(0, N, layout=lay))
    buf.store(x * 2.0)
    gl.store(out_ptr + N, gl.sum(x, axis=0) + shift)   # a reduction in the worker: scratch of its own
    mbarrier.arrive(bar)


def _consume(buf, bar, out_ptr, N, bias):
    lay = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    mbarrier.wait(bar, 0)
    y = buf.load(lay)
    gl.store(out_ptr + gl.arange(0, N, layout=lay), y + bias)
    gl.store(out_ptr + N + 1, gl.max(y, axis=0))


@gt.jit
def handoff(x_ptr, out_ptr, n, N: gl.constexpr, WORKER_WARPS: gl.constexpr):
    """out[:N] = 2x + (n - 1), out[N] = sum(x) + 2n (worker), out[N+1] = max(2x) (default)."""
    buf = gl.allocate_shared_memory(gl.float32, [N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    bias = (n - 1).to(gl.float32)    # computed before the op, used by the default partition
    shift = (n * 2).to(gl.float32)   # computed before the op, used by the worker: crosses over
    gl.warp_specialize([(_consume, (buf, bar, out_ptr, N, bias)),
                        (_produce, (buf, bar, x_ptr, out_ptr, N, shift))], [WORKER_WARPS], [48])


def _handoff_graph(target, worker_warps=2, num_warps=4):
    return handoff.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), gl.int32, N=256,
                         WORKER_WARPS=worker_warps, num_warps=num_warps, target=target).graph


def _assemble(text, locs, name, target):
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(str(e))
    return ptxas.assemble(text, target, locs, name)[1]


def test_handoff_runs_in_the_interpreter():
    x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    out = np.full(258, np.nan, np.float32)
    handoff[(1,)](x, out, 5, N=256, WORKER_WARPS=2, num_warps=4, backend="interpreter", target="sm_90")
    np.testing.assert_allclose(out[:256], 2 * x + 4, rtol=1e-6)
    np.testing.assert_allclose(out[256], x.sum(dtype=np.float64) + 10, rtol=1e-5)
    assert out[257] == (2 * x).max()


def _add_one(x_ptr, out_ptr, N):
    lay = gl.BlockedLayout([4], [32], [gl.num_warps()], [0])
    offs = gl.arange(0, N, layout=lay)
    gl.store(out_ptr + offs, gl.load(x_ptr + offs) + 1.0)


@gt.jit
def halves_plus_one(x_ptr, out_ptr, N: gl.constexpr):
    """out = x + 1: the default partition takes the first N elements, the worker the next N."""
    gl.warp_specialize([(_add_one, (x_ptr, out_ptr, N)), (_add_one, (x_ptr + N, out_ptr + N, N))], [4], [48])


def test_partitions_keep_what_the_axis_analysis_knows_of_the_kernels_values():
    """A partition's loads and stores of 4 consecutive, 16-byte aligned floats a thread are
    one 128-bit access each, in the default partition and in the worker (the analysis once
    skipped partitions, and every access in them was split into 32-bit ones)."""
    x = np.random.default_rng(1).standard_normal(1024).astype(np.float32)
    out = np.full(1024, np.nan, np.float32)
    halves_plus_one[(1,)](x, out, N=512, num_warps=4, backend="interpreter", target="sm_90")
    np.testing.assert_array_equal(out, x + 1)
    text = halves_plus_one.trace(x, out, N=512, num_warps=4, target="sm_90").ptx()
    assert len(re.findall(r"ld\.global\.v4\.f32", text)) == 2 and "ld.global.f32" not in text
    assert len(re.findall(r"st\.global\.v4\.f32", text)) == 2 and "st.global.f32" not in text



def _store_twice(x_ptr, out_ptr, N, scale):
    lay = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    offs = gl.arange(0, N, layout=lay)
    y = gl.load(x_ptr + offs)
    k = scale * 3.0                          # pure, and not needed by the first store
    gl.store(out_ptr + offs, y + 1.0)        # hoisted above k by schedule.hoist_stores
    gl.store(out_ptr + N + offs, y * k)


@gt.jit
def worker_stores(x_ptr, out_ptr, scale, N: gl.constexpr):
    """out[:N] = x + 1 and out[N:2N] = 3 * scale * x, both by the worker partition."""
    gl.warp_specialize([(_add_one, (x_ptr, out_ptr + 2 * N, N)), (_store_twice, (x_ptr, out_ptr, N, scale))],
                       [4], [48])


def test_a_worker_whose_stores_are_hoisted_captures_only_what_it_reads_from_outside():
    """hoist_stores hands the backend a reordered copy of the worker's block; the values made in
    it (3.0, k) must not count as captured from outside (they did: a KeyError in the emitter)."""
    from gluon_trace.backends.nvidia.warpspec import captured
    from gluon_trace.schedule import hoist_stores
    x = np.random.default_rng(2).standard_normal(128).astype(np.float32)
    out = np.full(3 * 128, np.nan, np.float32)
    worker_stores[(1,)](x, out, 0.5, N=128, num_warps=4, backend="interpreter", target="sm_90")
    np.testing.assert_allclose(out[:128], x + 1, rtol=1e-6)
    np.testing.assert_allclose(out[128:256], 1.5 * x, rtol=1e-6)
    g = worker_stores.trace(x, out, 0.5, N=128, num_warps=4, target="sm_90").graph
    ws = next(op for op in hoist_stores(g).body.walk() if op.name == "warp_specialize")
    assert set(captured(ws)) <= set(g.args)  # x_ptr, out_ptr, scale: nothing the worker made
    text = worker_stores.trace(x, out, 0.5, N=128, num_warps=4, target="sm_90").ptx()
    _assemble(text, {}, "worker_stores", "sm_90")

def test_partitions_branch_meet_and_use_their_own_barriers():
    text, locs, smem = emit(_handoff_graph("sm_90"), "sm_90")
    assert ".maxntid 192, 1, 1" in text          # 4 default warps + 2 worker warps, no padding
    assert "setmaxnreg" not in text and ".maxnreg" not in text   # sm_90: no register moves
    body = text[text.index("{"):]
    first = re.search(r"setp\.ge\.u32 (%p\d+), (%r\d+), 128;\n\t@\1 bra (\$L_ws_meet_\d+);", body)
    assert first, "workers (threads >= 128) jump away before any code of the default partition"
    # the first meeting: one aligned bar.sync for the whole CTA, after which the workers leave
    meet = re.search(re.escape(first.group(3)) + r":\n\tbar\.sync 0;\n\t@" + re.escape(first.group(1)) +
                     r" bra (\$L_ws_workers_\d+);", body)
    assert meet and body.count("bar.sync 0;") == 1
    # the join is reached from each partition's code: the non-aligned barrier.sync, on each side
    assert body.count("barrier.sync 0;") == 2
    head = body.index(meet.group(1) + ":")
    default, workers = body[:head], body[head:]
    assert set(re.findall(r"bar\.sync 1, (\d+);", default)) == {"128"}
    assert "bar.sync 2," not in default and "bar.sync 1," not in workers
    assert set(re.findall(r"bar\.sync 2, (\d+);", workers)) == {"64"}   # the worker's reduction and arrive
    # the worker's thread index counts from its first thread
    assert re.search(r"mov\.u32 (%r\d+), %tid\.x;\n\tsub\.u32 \1, \1, 128;", workers)
    # a scalar the default computed before the op and the worker reads (shift) crosses in shared
    # memory into the same register; the pointers, set by the prologue every warp ran, do not
    stored = dict((r, off) for off, r in re.findall(r"st\.shared\.b\d+ \[%r\d+\+(\d+)\], (%\w+);", default))
    loaded = dict((r, off) for r, off in re.findall(r"ld\.shared\.b\d+ (%\w+), \[%r\d+\+(\d+)\];", workers))
    assert len(stored) == 1 and stored == loaded and list(stored)[0].startswith("%f")
    assert "__GT_SCRATCH" not in text
    _assemble(text, locs, "handoff", "sm_90")


def test_worker_scratch_sits_above_the_default_partitions():
    text, _, smem = emit(_handoff_graph("sm_90"), "sm_90")
    head = re.search(r"\n\$L_ws_workers_\d+:", text).start()
    offs = [int(o) for o in re.findall(r"add\.u32 %r\d+, %r\d+, (\d+);", text[head:])]
    default_scratch = [int(o) for o in re.findall(r"add\.u32 %r\d+, %r\d+, (\d+);", text[:head])]
    assert offs and max(offs) >= max(default_scratch, default=0)
    assert smem > max(offs)


def test_sm90a_moves_registers_between_warpgroups():
    text, locs, _ = emit(_handoff_graph("sm_90a"), "sm_90a")
    p = plan(_handoff_graph("sm_90a"), "sm_90a")
    assert p.spans == (4,) and p.total_warps == 8        # the 2-warp worker padded to a warpgroup
    assert ".maxntid 256, 1, 1" in text and f".maxnreg {p.start_regs}" in text
    assert f"setmaxnreg.inc.sync.aligned.u32 {p.default_regs};" in text
    assert "setmaxnreg.dec.sync.aligned.u32 48;" in text
    assert p.default_regs * 128 + 48 * 128 <= p.start_regs * 256   # the CTA's pool covers both
    # the padding warps (6, 7) execute the worker's setmaxnreg, then go to the join
    pad = re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32 48;\n\tsub\.u32 %r\d+, %r\d+, 4;\n\t"
                    r"setp\.ge\.u32 (%p\d+), %r\d+, 2;\n\t@\1 bra \$L_ws_join_\d+;", text)
    assert pad
    _assemble(text, locs, "handoff", "sm_90a")


def _two_producers_graph(regs):
    """Eight default warps and two one-warp workers asking for ``regs`` registers each."""
    def worker(out, which):
        gl.store(out + which, gl.full([], 1.0, gl.float32) * which)

    def default(out):
        x = gl.arange(0, 256, layout=gl.BlockedLayout([1], [32], [8], [0]))
        gl.store(out + 2 + x, x.to(gl.float32))

    @gt.jit
    def two_producers(out):
        gl.warp_specialize([(default, (out,)), (worker, (out, 0)), (worker, (out, 1))],
                           worker_num_warps=[1, 1], worker_num_regs=regs)
    return two_producers.trace(gl.pointer(gl.float32), num_warps=8, target="sm_90a").graph


def test_workers_asking_for_the_same_registers_share_a_warpgroup():
    """Two one-warp producers beside two consumer warpgroups: one warpgroup for both (384
    threads, a start budget of 168 registers), not one each (512 threads: 128, too few for a
    128x256 wgmma accumulator)."""
    p = plan(_two_producers_graph([40, 40]), "sm_90a")
    assert p.groups == ((0, 1),) and p.spans == (4,) and p.bases == (8, 9) and p.total_warps == 12
    assert p.start_regs == 168 and p.worker_regs == (40,)
    text, locs, _ = emit(_two_producers_graph([40, 40]), "sm_90a")
    assert text.count("setmaxnreg.dec.sync.aligned.u32 40;") == 1 and ".maxntid 384, 1, 1" in text
    # the group's warps execute its setmaxnreg together, then warp 8 goes to the first worker,
    # warp 9 to the second, warps 10 and 11 (padding) to the join
    group = re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32 40;\n\tsub\.u32 %r\d+, (%r\d+), 8;\n\t"
                      r"setp\.lt\.u32 (%p\d+), %r\d+, 1;\n\t@\2 bra \$L_ws_worker1_\d+;\n\t"
                      r"sub\.u32 %r\d+, \1, 9;\n\tsetp\.lt\.u32 (%p\d+), %r\d+, 1;\n\t@\3 bra \$L_ws_worker2_\d+;"
                      r"\n\tbra\.uni \$L_ws_join_\d+;", text)
    assert group
    _assemble(text, locs, "two_producers", "sm_90a")
    apart = plan(_two_producers_graph([40, 48]), "sm_90a")   # different registers: a warpgroup each
    assert apart.groups == ((0,), (1,)) and apart.spans == (4, 4) and apart.bases == (8, 12)
    assert apart.total_warps == 16 and apart.start_regs == 128 and apart.worker_regs == (40, 48)


def test_workers_of_whole_warpgroups_keep_their_own_setmaxnreg():
    """Three attention consumers (4 warps each, the same registers) and a loader: each consumer
    keeps its own warpgroup, label and setmaxnreg (grouped, they ran 5% slower on the H200)."""
    gd = gl.bfloat16
    mk = lambda blk: TensorDescriptor.type_spec(gd, blk, NV(blk[1:], gd), rank=3)  # noqa: E731
    g = attention_fwd_ws.trace(mk([1, 64, 64]), mk([1, 128, 64]), mk([1, 128, 64]), mk([1, 64, 64]), gl.int32,
                               gl.float32, CAUSAL=False, CONSUMERS=3, CONSUMER_REGS=160, num_warps=4,
                               target="sm_90a").graph
    p = plan(g, "sm_90a")
    assert p.groups == ((0,), (1,), (2,)) and p.spans == (4, 4, 4) and p.worker_regs == (160, 160, 24)
    text, _, _ = emit(g, "sm_90a")
    assert "ws_group" not in text and text.count("setmaxnreg.inc.sync.aligned.u32 160;") == 2


def _ws_gemm_graph(bm, bn, bk, warps, stages=3):
    gd = gl.bfloat16
    mk = lambda blk: TensorDescriptor.type_spec(gd, blk, NV(blk, gd))  # noqa: E731
    return matmul_hopper_ws.trace(mk([bm, bk]), mk([bk, bn]), mk([bm, bn]), gl.int32, gl.int32, gl.int32,
                                  STAGES=stages, GROUP_M=8, num_warps=warps, target="sm_90a").graph


@pytest.mark.parametrize("bm, bn, bk, warps", [(128, 256, 64, 8), (128, 128, 64, 4)])
def test_warp_specialized_gemm_assembles(bm, bn, bk, warps):
    g = _ws_gemm_graph(bm, bn, bk, warps)
    text, locs, _ = emit(g, "sm_90a")
    head = re.search(r"\n\$L_ws_workers_\d+:", text).start()
    assert "wgmma.mma_async" in text[:head] and "wgmma" not in text[head:]
    assert "cp.async.bulk.tensor.2d.shared::cluster.global" in text[head:]       # the producer's loads
    assert "cp.async.bulk.tensor.2d.shared::cluster.global" not in text[:head]
    info = _assemble(text, locs, "matmul_hopper_ws", "sm_90a")
    assert not info["spill_stores"] and not info["stack"]


def test_pingpong_gemm_moves_registers_to_both_consumers():
    gd = gl.bfloat16
    mk = lambda blk: TensorDescriptor.type_spec(gd, blk, NV(blk, gd))  # noqa: E731
    g = matmul_hopper_pingpong.trace(mk([128, 64]), mk([64, 128]), mk([128, 128]), gl.int32, gl.int32, gl.int32,
                                     STAGES=5, GROUP_M=8, num_warps=4, target="sm_90a").graph
    p = plan(g, "sm_90a")
    assert p.total_warps == 12 and p.start_regs == 168 and p.default_regs == 232
    text, locs, _ = emit(g, "sm_90a")
    assert text.count("setmaxnreg.inc.sync.aligned.u32 232;") == 2     # the default and consumer 2
    assert text.count("setmaxnreg.dec.sync.aligned.u32 40;") == 1      # the producer's warpgroup
    info = _assemble(text, locs, "matmul_hopper_pingpong", "sm_90a")
    assert not info["spill_stores"] and not info["stack"]


def test_compile_summary_counts_every_partitions_warps():
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(str(e))
    k = handoff.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), gl.int32, N=256, WORKER_WARPS=2,
                      num_warps=4, target="sm_90a")
    ck = k.compile("sm_90a")
    assert ck.num_warps == 8


def _produce_round(buf, bar, x_ptr, N, r):
    lay = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    x = gl.load(x_ptr + gl.arange(0, N, layout=lay))
    buf.store(x * (r + 1).to(gl.float32))
    mbarrier.arrive(bar)


def _consume_round(buf, bar, out_ptr, N, r):
    lay = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    mbarrier.wait(bar, r & 1)
    gl.store(out_ptr + r * N + gl.arange(0, N, layout=lay), buf.load(lay) + 1.0)


def _total(x_ptr, out_ptr, N, T):
    lay = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    gl.store(out_ptr + T * N, gl.sum(gl.load(x_ptr + gl.arange(0, N, layout=lay)), axis=0))


@gt.jit
def rounds(x_ptr, out_ptr, T, N: gl.constexpr, WORKER_WARPS: gl.constexpr):
    """out[r*N:(r+1)*N] = (r+1) x + 1 for r < T, each round a warp_specialize inside a loop (the
    worker fills the buffer, the default reads it), then out[T*N] = sum(x) from a second
    warp_specialize of another width after the loop."""
    buf = gl.allocate_shared_memory(gl.float32, [N], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=1)
    for r in gl.range(0, T):
        gl.warp_specialize([(_consume_round, (buf, bar, out_ptr, N, r)),
                            (_produce_round, (buf, bar, x_ptr, N, r))], [WORKER_WARPS], [48])
    gl.warp_specialize([(lambda: None, ()), (_total, (x_ptr, out_ptr, N, T))], [1], [48])


def _rounds_expected(x, t):
    return np.concatenate([(r + 1) * x + 1 for r in range(t)] + [[x.sum(dtype=np.float64)]])


def test_warp_specialize_in_a_loop_and_twice_runs_in_the_interpreter():
    x = np.random.default_rng(1).standard_normal(128).astype(np.float32)
    out = np.full(3 * 128 + 1, np.nan, np.float32)
    rounds[(1,)](x, out, 3, N=128, WORKER_WARPS=2, num_warps=4, backend="interpreter", target="sm_90")
    np.testing.assert_allclose(out, _rounds_expected(x, 3), rtol=1e-5)


@pytest.mark.parametrize("target", ["sm_90", "sm_90a"])
def test_warp_specialize_in_a_loop_lowers_to_a_worker_loop(target):
    """The general form: workers wait at the top of a loop; the default partition writes which
    op runs (or -1: leave) and meets them with the non-aligned barrier.sync, runs its part and
    joins them; each op's workers have their own block; no register moves."""
    g = rounds.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), gl.int32, N=128, WORKER_WARPS=2,
                     num_warps=4, target=target).graph
    p = plan(g, target)
    assert p.ops and p.total_warps == 6 and not p.moves_registers
    text, locs, _ = emit(g, target)
    body = text[text.index("{"):]
    assert ".maxntid 192, 1, 1" in text and "setmaxnreg" not in text and ".maxnreg" not in text
    assert "bar.sync 0;" not in body                       # only non-aligned CTA barriers
    first = re.search(r"setp\.ge\.u32 (%p\d+), (%r\d+), 128;\n\t@\1 bra (\$L_ws_loop_\d+);", body)
    assert first
    loop = body.index(first.group(3) + ":")
    default, workers = body[:loop], body[loop:]
    # default: per op a word, a meeting and a join; at its end the "leave" word and a last meeting
    assert re.findall(r"st\.shared\.u32 \[%r\d+\+\d+\], (-?\d+);", default) == ["0", "1", "-1"]
    assert default.count("barrier.sync 0;") == 5
    # workers: the meeting at the top, the word, a block per op, each ending at its join
    assert re.search(re.escape(first.group(3)) + r":\n\tbarrier\.sync 0;\n\tld\.shared\.u32", workers)
    assert workers.count("barrier.sync 0;") == 3 and len(re.findall(r"\$L_ws_op\d+_\d+:", workers)) == 2
    _assemble(text, locs, "rounds", target)


# -- GPU ---------------------------------------------------------------------------------------

def _gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a machine with an NVIDIA GPU")
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs a Hopper GPU (sm_90)")
    return torch


def gpu_bf16(rows, cols, fill=None):
    """A bf16 [rows, cols] CUDA tensor, random or ``fill``, in rows padded to 16 bytes (TMA's
    stride rule)."""
    import torch
    wide = -(-cols // 8) * 8
    t = torch.randn(rows, wide, device="cuda") if fill is None else torch.full((rows, wide), fill, device="cuda")
    return t.to(torch.bfloat16)[:, :cols]


@pytest.mark.gpu
@pytest.mark.parametrize("worker_warps, num_warps", [(1, 4), (2, 4), (4, 8)])
def test_gpu_handoff(worker_warps, num_warps):
    torch = _gpu()
    x = torch.randn(256, device="cuda")
    out = torch.full((258,), float("nan"), device="cuda")
    handoff[(3,)](x, out, 7, N=256, WORKER_WARPS=worker_warps, num_warps=num_warps, backend="nvidia")
    torch.cuda.synchronize()
    torch.testing.assert_close(out[:256], 2 * x + 6)
    torch.testing.assert_close(out[256], x.sum() + 14, rtol=1e-5, atol=1e-5)
    assert out[257].item() == (2 * x).max().item()


@pytest.mark.gpu
def test_gpu_partitions_with_128_bit_accesses():
    torch = _gpu()
    x = torch.randn(1024, device="cuda")
    out = torch.full((1024,), float("nan"), device="cuda")
    halves_plus_one[(1,)](x, out, N=512, num_warps=4, backend="nvidia")
    torch.cuda.synchronize()
    assert torch.equal(out, x + 1)


@pytest.mark.gpu
@pytest.mark.parametrize("worker_warps, num_warps, t", [(1, 4, 5), (2, 4, 1), (4, 8, 7)])
def test_gpu_warp_specialize_in_a_loop_and_twice(worker_warps, num_warps, t):
    torch = _gpu()
    x = torch.randn(256, device="cuda")
    out = torch.full((t * 256 + 1,), float("nan"), device="cuda")
    rounds[(2,)](x, out, t, N=256, WORKER_WARPS=worker_warps, num_warps=num_warps, backend="nvidia")
    torch.cuda.synchronize()
    ref = torch.tensor(_rounds_expected(x.cpu().numpy(), t), dtype=torch.float32)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(512, 512, 512), (1000, 520, 333), (4096, 4096, 256), (128, 1024, 2048)])
@pytest.mark.parametrize("kernel, bm, bn, bk, warps, stages", [
    (matmul_hopper_ws, 128, 256, 64, 8, 3), (matmul_hopper_ws, 128, 128, 64, 4, 4),
    (matmul_hopper_pingpong, 128, 128, 64, 4, 5), (matmul_hopper_pingpong, 64, 256, 64, 4, 4),
    (matmul_hopper_ws, 64, 128, 64, 8, 8)])   # two consumer warpgroups side by side along N
@pytest.mark.parametrize("ctas", [1, 2])      # 2: launched in clusters of two (co-located, no cluster code)
def test_gpu_warp_specialized_gemm_matches_torch(m, n, k, kernel, bm, bn, bk, warps, stages, ctas):
    torch = _gpu()
    a, b, c = gpu_bf16(m, k), gpu_bf16(k, n), gpu_bf16(m, n, float("nan"))
    da = TensorDescriptor.from_tensor(a, [bm, bk], NV([bm, bk], gl.bfloat16))
    db = TensorDescriptor.from_tensor(b, [bk, bn], NV([bk, bn], gl.bfloat16))
    dc = TensorDescriptor.from_tensor(c, [bm, bn], NV([bm, bn], gl.bfloat16))
    tiles = -(-m // bm) * -(-n // bn)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    programs = min(tiles, sms) // ctas * ctas or ctas
    kernel[(programs,)](da, db, dc, m, n, k, STAGES=stages, GROUP_M=8, num_warps=warps, num_ctas=ctas,
                        backend="nvidia")
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


@pytest.mark.gpu
@pytest.mark.parametrize("a_evict, b_evict", [("evict_last", "evict_first"), ("evict_first", "evict_normal")])
def test_gpu_gemm_with_l2_eviction_policies_matches_torch(a_evict, b_evict):
    """The TMA loads with L2 cache hints (createpolicy + .L2::cache_hint): a hint, the answer
    unchanged. The skinny shape, in co-located pairs, as perf/probe_evict.py runs it."""
    torch = _gpu()
    m, n, k = 128, 2048, 1024
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda").to(torch.bfloat16)
    da = TensorDescriptor.from_tensor(a, [64, 64], NV([64, 64], gl.bfloat16))
    db = TensorDescriptor.from_tensor(b, [64, 128], NV([64, 128], gl.bfloat16))
    dc = TensorDescriptor.from_tensor(c, [64, 128], NV([64, 128], gl.bfloat16))
    matmul_hopper_ws[(32,)](da, db, dc, m, n, k, STAGES=8, GROUP_M=8, num_warps=4, num_ctas=2,
                            A_EVICT=a_evict, B_EVICT=b_evict, backend="nvidia")
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    torch.testing.assert_close(c.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())

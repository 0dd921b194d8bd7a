"""Per-thread mbarrier arrivals (backends/nvidia/arrivals.py): which barriers get them, the
scaled init counts, and the arrive without a partition barrier before it. Execution is proven
on the GPU by the warp-specialized GEMMs and attention (pytest -m gpu) and in compute-sanitizer."""
import re

import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.kernels.attention_hopper_ws import attention_fwd_ws
from gluon_trace.language.nvidia.hopper import mbarrier
from gluon_trace.nvidia.hopper import TensorDescriptor

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.arrivals import per_thread_arrivals  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

NV = gl.NVMMASharedLayout.get_default_for


def _big(bars):
    mbarrier.arrive(bars.index(0))                 # 4 warps
    mbarrier.arrive(bars.index(1), count=2)
    mbarrier.wait(bars.index(2), 0)


def _small(bars):
    mbarrier.arrive(bars.index(1))                 # 1 warp: bars[1] mixes sizes
    mbarrier.expect(bars.index(2), 64)             # an expect: bars[2] keeps one arriving thread
    mbarrier.wait(bars.index(0), 0)


@gt.jit
def mixed():
    a = mbarrier.allocate_mbarrier(batch=3)
    b = mbarrier.allocate_mbarrier(batch=3)
    c = mbarrier.allocate_mbarrier(batch=3)
    for i in gl.static_range(3):
        mbarrier.init(a.index(i), count=3)
        mbarrier.init(b.index(i), count=1)
        mbarrier.init(c.index(i), count=1)
    gl.warp_specialize([(_big, (a,)), (_small, (b,)), (_big, (c,))], [1, 4], [24, 24])


def _graph():
    return mixed.trace(num_warps=4, target="sm_90a").graph


def test_only_uniform_plain_arrivals_go_per_thread():
    g = _graph()
    allocs = [op for op in g.body.ops if op.name == "smem_alloc"]
    t = per_thread_arrivals(g)
    a, b, c = (op.result for op in allocs)
    assert t[a] == 128              # arrived on by the 4-warp default only
    assert b not in t               # 4-warp and 1-warp partitions, and an expect
    assert t[c] == 128              # the 4-warp worker
    views = [n for v, n in t.items() if v is not a and v is not c]
    assert views and all(n == 128 for n in views)   # the .index(i) views carry it too


def test_per_thread_barriers_are_initialised_for_every_thread_and_arrive_without_a_bar_sync():
    text, _, _ = emit(_graph(), "sm_90a")
    counts = [int(c) for c in re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], (\d+);", text)]
    assert sorted(counts) == sorted([3 * 128] * 3 + [1] * 3 + [1 * 128] * 3)
    per_thread = re.findall(r"\n\t(mbarrier\.arrive\.shared::cta\.b64 _, \[%r\d+\], (\d+);)", text)
    assert {n for _, n in per_thread} == {"1", "2"}             # unpredicated: every thread
    single = re.findall(r"\n\t(?:bar\.sync [^\n]*)\n\t@%p\d+ mbarrier\.arrive\.shared::cta\.b64", text)
    assert len(single) == 1                                     # the 1-warp worker's arrive on b[1]


def test_attention_releases_slots_per_thread_and_keeps_tma_barriers_single():
    spec = lambda blk: TensorDescriptor.type_spec(gl.bfloat16, [1] + blk, NV(blk, gl.bfloat16))  # noqa: E731
    g = attention_fwd_ws.trace(spec([64, 128]), spec([128, 128]), spec([128, 128]), spec([64, 128]), gl.int32,
                               gl.float32, CAUSAL=False, STAGES=2, num_warps=4, target="sm_90a").graph
    text, _, _ = emit(g, "sm_90a")
    counts = sorted(int(c) for c in re.findall(r"mbarrier\.init\.shared::cta\.b64 \[%r\d+\], (\d+);", text))
    # q (2) + k/v ready (4): TMA, one thread; turn and q_free (2 each): 128 threads; k/v empty (4):
    # both consumers
    assert counts == [1] * 6 + [128] * 4 + [256] * 4
    assert "bar.sync 1, 128;\n\tmbarrier.arrive" not in text

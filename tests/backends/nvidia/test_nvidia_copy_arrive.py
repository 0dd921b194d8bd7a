"""async_copy.mbarrier_arrive on NVIDIA (backends/nvidia/rules_async_copy.py): cp.async copies waited
for through an mbarrier instead of wait_group.

CPU: a two-slot ring (copies of a K tile into a slot, the arrive, the consumer's wait with
a run-time phase, a sum of the tiles) and a single copy, with ``increment_count`` True (net
zero; an mbarrier.arrive or expect completes the phase) and False (the call is the arrival),
emitted for sm_90a and run on the PTX simulator (ptxsim_tc's mbarrier model: pending count,
phase, arrivals deferred until the arriving thread's copies land) against the interpreter on
fresh random inputs with poisoned outputs, and assembled by ptxas for sm_80 (the arrive alone)
and sm_90a. The simulator's mbarrier model is itself checked to fail a kernel whose phase
would complete before every thread's copies are tracked. GPU (``pytest -m gpu``): the same
kernels against numpy.
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim_async  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402
from gluon_trace.errors import CompileError  # noqa: E402
from gluon_trace.language.nvidia.ampere import async_copy, mbarrier  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia import ptxas  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

LAY = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
SL = gl.SwizzledSharedLayout(vec=4, per_phase=1, max_phase=8, order=[1, 0])


@gt.jit
def ring_k(src, out, K_TILES: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, INC: gl.constexpr,
           L: gl.constexpr, SL: gl.constexpr):
    """out = sum over k of src[:, k*BN:(k+1)*BN], each tile copied by cp.async into one of two
    slots and waited for on the slot's mbarrier (phase k // 2)."""
    bufs = gl.allocate_shared_memory(gl.float32, [2, BM, BN], SL)
    full = mbarrier.allocate_mbarrier(batch=2)
    for s in gl.static_range(2):
        mbarrier.init(full.index(s), count=1)
    rows = gl.arange(0, BM, gl.SliceLayout(1, L))
    cols = gl.arange(0, BN, gl.SliceLayout(0, L))
    acc = gl.zeros([BM, BN], gl.float32, L)
    for k in gl.range(0, K_TILES):
        s = k % 2
        async_copy.async_load(bufs.index(s), src + rows[:, None] * (K_TILES * BN) + (k * BN + cols)[None, :])
        async_copy.mbarrier_arrive(full.index(s), increment_count=INC)
        if INC:
            mbarrier.arrive(full.index(s))
        mbarrier.wait(full.index(s), (k // 2) & 1)
        acc += bufs.index(s).load(L)
    gl.store(out + rows[:, None] * BN + cols[None, :], acc)


def _run(inc, k_tiles=5, bm=32, bn=32, target="sm_90a"):
    rng = np.random.default_rng()
    src = rng.standard_normal((bm, k_tiles * bn)).astype(np.float32)
    out = np.full((bm, bn), np.nan, np.float32)
    g = ring_k.trace(src, out, K_TILES=k_tiles, BM=bm, BN=bn, INC=inc, L=LAY, SL=SL,
                     target=target, num_warps=4).graph
    text, locs, smem = emit(g, target)
    ref, sim = [src.copy(), out.copy()], [src.copy(), out.copy()]
    get("interpreter").run(g, (1, 1, 1), ref)
    return g, text, locs, smem, src, ref, sim


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("inc", [True, False])
def test_ring_simulated_matches_interpreter(inc, target):
    """sm_80 waits by an mbarrier.test_wait.parity loop and arrives once per count (no count
    operand there), sm_90 by try_wait.parity and one counted arrive."""
    g, text, _, smem, src, ref, sim = _run(inc, target=target)
    wait = "mbarrier.try_wait.parity" if target == "sm_90a" else "mbarrier.test_wait.parity"
    other = "mbarrier.test_wait.parity" if target == "sm_90a" else "mbarrier.try_wait.parity"
    assert wait in text and other not in text
    ptxsim_async.run(text, (1, 1, 1), sim, smem)
    assert not np.isnan(sim[1]).any()
    assert np.array_equal(sim[1], ref[1])
    np.testing.assert_allclose(ref[1], src.reshape(32, 5, 32).sum(1, dtype=np.float64), rtol=1e-5, atol=1e-5)


def test_instructions():
    """Every thread makes the mbarrier track its copies (net zero), the partition meets, and with
    increment_count=False one thread adds the arrival; no wait_group."""
    for inc in (True, False):
        text = _run(inc)[1]
        assert text.count("cp.async.mbarrier.arrive.shared::cta.b64") == 1
        assert text.count("cp.async.mbarrier.arrive.noinc.shared::cta.b64") == (0 if inc else 1)
        assert "cp.async.wait_group" not in text
        body = text[text.index("cp.async.mbarrier.arrive.shared::cta.b64"):]
        assert body.splitlines()[1].strip().startswith("bar.sync")


def test_interpreter_counts_as_gluon_does():
    """increment_count=True (no .noinc) is net zero on the pending count: with nothing else
    arriving, the wait is a deadlock the interpreter names; increment_count=False is the arrival."""
    from gluon_trace.errors import InterpreterError

    @gt.jit
    def one(src, out, INC: gl.constexpr, L: gl.constexpr, SL: gl.constexpr):
        buf = gl.allocate_shared_memory(gl.float32, [32, 32], SL)
        bar = mbarrier.allocate_mbarrier()
        mbarrier.init(bar, count=1)
        rows = gl.arange(0, 32, gl.SliceLayout(1, L))
        cols = gl.arange(0, 32, gl.SliceLayout(0, L))
        async_copy.async_load(buf, src + rows[:, None] * 32 + cols[None, :])
        async_copy.mbarrier_arrive(bar, increment_count=INC)
        mbarrier.wait(bar, 0)
        gl.store(out + rows[:, None] * 32 + cols[None, :], buf.load(L))
    src = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    for inc in (False, True):
        args = [src, np.full((32, 32), np.nan, np.float32)]
        g = one.trace(*args, INC=inc, L=LAY, SL=SL, target="sm_90a", num_warps=4).graph
        if inc:
            with pytest.raises(InterpreterError, match="deadlock"):
                get("interpreter").run(g, (1, 1, 1), args)
            continue
        get("interpreter").run(g, (1, 1, 1), args)
        assert np.array_equal(args[1], src)
        text, _, smem = emit(g, "sm_90a")
        sim = [src.copy(), np.full((32, 32), np.nan, np.float32)]
        ptxsim_async.run(text, (1, 1, 1), sim, smem)
        assert np.array_equal(sim[1], src)


def test_left_the_refusal_table():
    from gluon_trace.backends.nvidia import rules_tensorcore
    assert "async_copy_mbarrier_arrive" not in rules_tensorcore.UNLOWERED
    assert "dot_fma" not in rules_tensorcore.UNLOWERED


@pytest.mark.parametrize("target", ["sm_80", "sm_86", "sm_89", "sm_90a"])
def test_assembles(target):
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(str(e))
    for inc in (True, False):  # the whole ring: copies, their arrivals, the waits
        _, text, locs, *_ = _run(inc, target=target)
        ptxas.assemble(text, target, locs, "copy_arrive_ring")

    @gt.jit
    def arrive_only(src, out, INC: gl.constexpr, L: gl.constexpr, SL: gl.constexpr):
        buf = gl.allocate_shared_memory(gl.float32, [32, 32], SL)
        bar = mbarrier.allocate_mbarrier()
        mbarrier.init(bar, count=1)
        rows = gl.arange(0, 32, gl.SliceLayout(1, L))
        cols = gl.arange(0, 32, gl.SliceLayout(0, L))
        async_copy.async_load(buf, src + rows[:, None] * 32 + cols[None, :])
        async_copy.mbarrier_arrive(bar, increment_count=INC)
        async_copy.wait_group(0)
        gl.store(out + rows[:, None] * 32 + cols[None, :], buf.load(L))
    for inc in (True, False):
        a = [np.zeros((32, 32), np.float32)] * 2
        g = arrive_only.trace(*a, INC=inc, L=LAY, SL=SL, target=target, num_warps=4).graph
        text, locs, _ = emit(g, target)
        ptxas.assemble(text, target, locs, "copy_arrive_sm80")


def test_simulator_catches_an_early_phase():
    """Without the partition's meeting, the .noinc arrival of thread 0 could complete the phase
    before the other threads' copies are tracked: the simulator's model must catch that (it
    delays the copies' landing until the arriving thread's next wait)."""
    g, text, _, smem, src, ref, sim = _run(False)
    lines = text.splitlines()
    i = next(j for j, l in enumerate(lines) if "cp.async.mbarrier.arrive.shared::cta.b64" in l)
    assert lines[i + 1].strip().startswith("bar.sync")
    broken = "\n".join(lines[:i] + lines[i + 2:])  # drop the tracking arrive and the meeting
    with pytest.raises(RuntimeError, match="before the copies"):
        ptxsim_async.run(broken, (1, 1, 1), sim, smem)


@pytest.mark.gpu
@pytest.mark.parametrize("inc", [True, False])
def test_gpu_ring_matches_numpy(inc):
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError
    except ImportError:
        pytest.skip("no CUDA GPU (torch.cuda)")
    src = torch.randn(32, 5 * 32, device="cuda")
    out = torch.full((32, 32), float("nan"), device="cuda")
    ring_k[(1,)](src, out, K_TILES=5, BM=32, BN=32, INC=inc, L=LAY, SL=SL, num_warps=4)
    torch.cuda.synchronize()
    exp = src.double().reshape(32, 5, 32).sum(1)
    torch.testing.assert_close(out.double(), exp, rtol=1e-5, atol=1e-5)


@gt.jit
def counted_k(src, out, L: gl.constexpr, SL: gl.constexpr):
    """A phase of count 3 completed by one arrival of count 2 and one of count 1, then waited on."""
    buf = gl.allocate_shared_memory(gl.float32, [32, 32], SL)
    bar = mbarrier.allocate_mbarrier()
    mbarrier.init(bar, count=3)
    rows = gl.arange(0, 32, gl.SliceLayout(1, L))
    cols = gl.arange(0, 32, gl.SliceLayout(0, L))
    buf.store(gl.load(src + rows[:, None] * 32 + cols[None, :]) * 2.0)
    mbarrier.arrive(bar, count=2)
    mbarrier.arrive(bar)
    mbarrier.wait(bar, 0)
    gl.store(out + rows[:, None] * 32 + cols[None, :], buf.load(L))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_counted_arrivals(target):
    """sm_80 has no count operand: an arrival of count 2 is two arrives (the phase must not
    complete early, nor never)."""
    src = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    args = [src, np.full((32, 32), np.nan, np.float32)]
    g = counted_k.trace(*args, L=LAY, SL=SL, target=target, num_warps=4).graph
    text, _, smem = emit(g, target)
    arrives = [ln for ln in text.splitlines() if "mbarrier.arrive.shared::cta.b64" in ln]
    assert len(arrives) == (3 if target == "sm_80" else 2)
    get("interpreter").run(g, (1, 1, 1), args)
    sim = [src.copy(), np.full((32, 32), np.nan, np.float32)]
    ptxsim_async.run(text, (1, 1, 1), sim, smem)
    assert np.array_equal(sim[1], args[1]) and np.array_equal(args[1], src * 2)

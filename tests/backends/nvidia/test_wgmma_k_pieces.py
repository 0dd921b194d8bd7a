"""warpgroup_mma with K pieces: A a list of Q operands [64, k] (register tiles or shared views)
against B stacked [Q, k, N] (or [Q, P, k, n] with a list of accumulators): one wgmma group
computing acc + sum_q A[q] @ B[q]. Against numpy on the interpreter and on the GPU, the PTX as
one fence and one commit, and the trace-time checks."""
import re

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import TraceError
from gluon_trace.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402

LD = gl.BlockedLayout([1, 8], [8, 4], [4, 1], [1, 0])
NV = gl.NVMMASharedLayout.get_default_for


def _grid(ptr, rows, cols, layout, stride):
    r = gl.arange(0, rows, layout=gl.SliceLayout(1, layout))
    c = gl.arange(0, cols, layout=gl.SliceLayout(0, layout))
    return ptr + r[:, None] * stride + c[None, :]


@gt.jit
def k_pieces(a_ptr, b_ptr, c_ptr, Q: gl.constexpr, KP: gl.constexpr, N: gl.constexpr, NP: gl.constexpr,
             A_REGS: gl.constexpr):
    """C [64, N] = A [64, Q*KP] @ B [Q*KP, N]: A in Q pieces of KP columns, B in Q slots of KP rows
    (MN-major), with NP > 1 also cut along N into NP accumulators of N / NP columns."""
    W: gl.constexpr = N // NP
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, W, 16])
    a_op: gl.constexpr = gl.DotOperandLayout(0, acc_l, k_width=2)
    K: gl.constexpr = Q * KP
    b_bufs = gl.allocate_shared_memory(gl.bfloat16, [Q, NP, KP, W], NV([KP, W], gl.bfloat16))
    for q in gl.static_range(Q):
        for n in gl.static_range(NP):
            b_bufs.index(q).index(n).store(gl.load(_grid(b_ptr + q * KP * N + n * W, KP, W, LD, N)))
    if A_REGS:
        terms = [gl.load(_grid(a_ptr + q * KP, 64, KP, a_op, K)) for q in range(Q)]
    else:
        a_bufs = gl.allocate_shared_memory(gl.bfloat16, [Q, 64, KP], NV([64, KP], gl.bfloat16))
        for q in gl.static_range(Q):
            a_bufs.index(q).store(gl.load(_grid(a_ptr + q * KP, 64, KP, LD, K)))
        terms = [a_bufs.index(q) for q in range(Q)]
    fence_async_shared()
    if NP == 1:
        acc = gl.load(_grid(c_ptr, 64, N, acc_l, N))   # C's initial values are added to
        out = warpgroup_mma_wait(0, deps=[warpgroup_mma(terms, b_bufs.reshape([Q, KP, W]), acc, is_async=True)])
        gl.store(_grid(c_ptr, 64, N, acc_l, N), out)
    else:
        accs = [gl.load(_grid(c_ptr + n * W, 64, W, acc_l, N)) for n in range(NP)]
        outs = warpgroup_mma_wait(0, deps=list(warpgroup_mma(terms, b_bufs, accs, is_async=True)))
        for n in gl.static_range(NP):
            gl.store(_grid(c_ptr + n * W, 64, W, acc_l, N), outs[n])


CASES = [(10, 16, 128, 1, True), (3, 32, 64, 1, False), (2, 64, 64, 2, False), (5, 16, 64, 2, True)]


def _operands(rng, q, kp, n):
    a = rng.standard_normal((64, q * kp)).astype(np.float32)
    b = rng.standard_normal((q * kp, n)).astype(np.float32)
    c = rng.standard_normal((64, n)).astype(np.float32)
    return a, b, c


def _expect(a, b, c):
    import ml_dtypes
    r = lambda x: x.astype(ml_dtypes.bfloat16).astype(np.float64)  # noqa: E731
    return c + r(a) @ r(b)


@pytest.mark.parametrize("q, kp, n, np_, a_regs", CASES)
def test_k_pieces_match_numpy_on_the_interpreter(rng, q, kp, n, np_, a_regs):
    import ml_dtypes
    a, b, c = _operands(rng, q, kp, n)
    out = c.copy()
    k_pieces[(1,)](a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16), out, Q=q, KP=kp, N=n, NP=np_,
                   A_REGS=a_regs, num_warps=4, backend="interpreter", target="sm_90a")
    np.testing.assert_allclose(out, _expect(a, b, c), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("q, kp, n, np_, a_regs", CASES)
def test_k_pieces_are_one_group(q, kp, n, np_, a_regs):
    """One fence and one commit for every term and K step: Q * KP / 16 instructions (N pieces of
    adjacent slots fused into one m64nN each)."""
    p = gl.pointer(gl.bfloat16)
    g = k_pieces.trace(p, p, gl.pointer(gl.float32), Q=q, KP=kp, N=n, NP=np_, A_REGS=a_regs, num_warps=4,
                       target="sm_90a").graph
    text, _, _ = emit(g, "sm_90a")
    assert text.count("wgmma.fence.sync.aligned;") == 1 and text.count("wgmma.commit_group.sync.aligned;") == 1
    calls = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16", text)
    per_step = 1 if np_ == 1 else len(calls) // (q * kp // 16)
    assert len(calls) == q * kp // 16 * per_step
    # the first term's first step alone may drop the old accumulator (use_acc): later ones add
    assert len(re.findall(r"wgmma\.mma_async[^;]*, %p\d+(, \d)*;", text)) == len(calls)


@pytest.mark.gpu
@pytest.mark.parametrize("q, kp, n, np_, a_regs", CASES)
def test_gpu_k_pieces_match_numpy(rng, q, kp, n, np_, a_regs):
    try:
        import torch
        assert torch.cuda.is_available()
    except (ImportError, AssertionError):
        pytest.skip("no CUDA GPU (torch.cuda)")
    a, b, c = _operands(rng, q, kp, n)
    ta, tb = (torch.tensor(x, device="cuda").to(torch.bfloat16) for x in (a, b))
    out = torch.tensor(c, device="cuda")
    k_pieces[(1,)](ta, tb, out, Q=q, KP=kp, N=n, NP=np_, A_REGS=a_regs, num_warps=4, backend="nvidia")
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), _expect(a, b, c), rtol=1e-4, atol=1e-3)


def _bad(kind):
    def k(p):
        lay = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16])
        a_op = gl.DotOperandLayout(0, lay, k_width=2)
        b = gl.allocate_shared_memory(gl.bfloat16, [3, 16, 64], NV([16, 64], gl.bfloat16))
        terms = [gl.zeros([64, 16], gl.bfloat16, a_op) for _ in range(3)]
        if kind == "types":
            terms[2] = gl.zeros([64, 32], gl.bfloat16, a_op)
        if kind == "empty":
            terms = []
        view = b.index(0) if kind == "unstacked" else b.slice(0, 2) if kind == "count" else b
        warpgroup_mma(terms, view, gl.zeros([64, 64], gl.float32, lay))
    return gt.jit(k)


@pytest.mark.parametrize("kind, words", [("types", ["A piece 2", "one type"]), ("empty", ["empty list"]),
                                         ("unstacked", ["3 A pieces", "[3, K, N]"]),
                                         ("count", ["3 A pieces", "[3, K, N]"])])
def test_k_pieces_errors_name_the_line(kind, words):
    with pytest.raises(TraceError) as e:
        _bad(kind).trace(gl.pointer(gl.float32), num_warps=4, target="sm_90a")
    msg = str(e.value)
    assert "test_wgmma_k_pieces.py" in msg and all(w in msg for w in words), msg

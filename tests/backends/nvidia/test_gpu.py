"""The NVIDIA backend on a GPU: every corpus kernel against the interpreter on fresh
random inputs with poisoned outputs, softmax/layernorm against torch, hypothesis-made
elementwise kernels, and the launcher's checks. Run with ``pytest -m gpu``."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import nv_corpus as corpus  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import dtypes as dt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import get  # noqa: E402
from gluon_trace.errors import LaunchError  # noqa: E402

pytestmark = pytest.mark.gpu


def _gpu_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    try:
        from cuda.bindings import driver
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return f"cuInit failed: {err.name}"
    except Exception as e:  # no driver: cuda-python raises a RuntimeError subclass
        return f"no NVIDIA driver ({type(e).__name__}: {e})"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    return None


WHY = _gpu_reason()
if WHY:
    pytest.skip(f"no GPU: {WHY}", allow_module_level=True)

import torch  # noqa: E402

CASES = corpus.cases()
_TD = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
       "float64": torch.float64, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
       "int64": torch.int64, "uint8": torch.uint8, "uint16": torch.uint16, "uint32": torch.uint32,
       "uint64": torch.uint64, "int1": torch.bool}


def to_gpu(a: corpus.Arr):
    t = torch.from_numpy(np.ascontiguousarray(a.data)).to(_TD[a.dtype.name]).cuda()
    if a.out:
        if t.is_floating_point():
            t.fill_(float("nan"))
        else:
            t.view(torch.uint8).fill_(0x5A)
    return t


def from_gpu(t, a: corpus.Arr) -> np.ndarray:
    if a.dtype.name == "bfloat16":
        return dt.f32_to_bf16_bits(t.float().cpu().numpy())
    if a.dtype.name in ("uint16", "uint32", "uint64"):
        return t.cpu().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[a.dtype.itemsize]).numpy().view(a.dtype.np)
    return t.cpu().numpy()


def reference(case, args):
    """The interpreter on the same inputs (outputs poisoned)."""
    specs = [a.spec() if isinstance(a, corpus.Arr) else a for a in args]
    graph = case.kernel.trace(*specs, target="sm_90", **case.kw).graph
    ref = [a.storage() if isinstance(a, corpus.Arr) else a for a in args]
    for a, r in zip(args, ref):
        if isinstance(a, corpus.Arr) and a.out:
            if r.dtype.kind == "f":
                r[...] = np.nan
            else:
                r.reshape(-1).view(np.uint8)[...] = 0x5A
    grid = tuple(case.grid) + (1,) * (3 - len(case.grid))
    with np.errstate(all="ignore"):
        get("interpreter").run(graph, grid, ref)
    return ref


def compare(case, got, exp, t):
    if t.name == "bfloat16":
        got, exp = dt.bf16_bits_to_f32(got), dt.bf16_bits_to_f32(exp)
    if case.order_free:
        got, exp = np.sort(got.reshape(-1)), np.sort(exp.reshape(-1))
    if got.dtype.kind == "f":
        ok = np.isclose(got, exp, rtol=case.rtol or 0, atol=case.atol or 0, equal_nan=True)
    else:
        ok = got == exp
    if not ok.all():
        bad = np.argwhere(~ok.reshape(got.shape))[:8]
        rows = [f"  {tuple(i)}: got {got[tuple(i)]!r} expected {exp[tuple(i)]!r}" for i in bad]
        raise AssertionError(f"{case.name}: {int((~ok).sum())} of {ok.size} differ\n" + "\n".join(rows))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_matches_interpreter(case):
    rng = np.random.default_rng()
    args = case.make(rng)
    ref = reference(case, args)
    dev = [to_gpu(a) if isinstance(a, corpus.Arr) else a for a in args]
    case.kernel[case.grid](*dev, **case.kw)
    torch.cuda.synchronize()
    for i in case.outputs:
        compare(case, from_gpu(dev[i], args[i]), ref[i], args[i].dtype)


def test_softmax_and_layernorm_match_torch():
    x = torch.randn(64, 1024, device="cuda")
    out = torch.full_like(x, float("nan"))
    corpus.softmax_k[(64,)](out, x, 1024, 1000, BLOCK=1024, L=corpus.L1_8)
    ref = torch.softmax(x[:, :1000], dim=1)
    torch.testing.assert_close(out[:, :1000], ref, rtol=1e-5, atol=1e-6)
    xh = torch.randn(32, 1024, device="cuda", dtype=torch.float16)
    w = torch.randn(1000, device="cuda", dtype=torch.float16)
    b = torch.randn(1000, device="cuda", dtype=torch.float16)
    y = torch.full_like(xh, float("nan"))
    mean = torch.empty(32, device="cuda")
    rstd = torch.empty(32, device="cuda")
    corpus.layernorm_k[(32,)](y, xh, w, b, mean, rstd, 1024, 1000, 1e-5, BLOCK=1024, L=corpus.L1_8)
    ref = torch.nn.functional.layer_norm(xh[:, :1000].float(), (1000,), w.float(), b.float(), 1e-5)
    torch.testing.assert_close(y[:, :1000].float(), ref, rtol=2e-3, atol=4e-3)


# -- random elementwise kernels (hypothesis) ---------------------------------------------------

_EXACT_F = ("add", "sub", "mul", "div", "max", "min")
_EXACT_I = ("add", "sub", "mul", "max", "min", "and", "or", "xor")


def _eval(e, xs):
    op = e[0]
    if op == "x":
        return xs[e[1]]
    if op == "c":
        return gl.full([], e[1], xs[0].dtype)
    if op == "neg":
        return -_eval(e[1], xs)
    if op == "abs":
        return gl.abs(_eval(e[1], xs))
    if op == "where":
        a, b = _eval(e[1], xs), _eval(e[2], xs)
        return gl.where(a > b, a, b - a)
    a, b = _eval(e[1], xs), _eval(e[2], xs)
    return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a / b,
            "max": lambda: gl.maximum(a, b), "min": lambda: gl.minimum(a, b), "and": lambda: a & b,
            "or": lambda: a | b, "xor": lambda: a ^ b}[op]()


@gt.jit
def expr_k(out, a, b, c, n, EXPR: gl.constexpr, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=corpus.L1)
    m = offs < n
    xs = [gl.load(p + offs, mask=m) for p in (a, b, c)]
    gl.store(out + offs, _eval(EXPR, xs).to(out.dtype.element), mask=m)


def test_random_elementwise_kernels_match_interpreter():
    from hypothesis import given, settings, strategies as st

    def exprs(is_float):
        leaf = st.one_of(st.tuples(st.just("x"), st.integers(0, 2)),
                         st.tuples(st.just("c"), st.sampled_from([2.0, -0.5, 3.25] if is_float else [3, 7, 1])))
        ops = _EXACT_F if is_float else _EXACT_I
        return st.recursive(leaf, lambda kids: st.one_of(
            st.tuples(st.sampled_from(ops), kids, kids),
            st.tuples(st.sampled_from(["neg", "abs"]), kids),
            st.tuples(st.just("where"), kids, kids)), max_leaves=8)

    @st.composite
    def case(draw):
        t = draw(st.sampled_from([dt.float32, dt.float16, dt.bfloat16, dt.int32, dt.int8, dt.uint8]))
        e = draw(exprs(t.is_floating))
        if e[0] in ("x", "c"):
            e = ("add", e, ("x", 0))
        return t, e

    @settings(max_examples=25, deadline=None)
    @given(case(), st.integers(1, 1500))
    def check(tc, n):
        t, e = tc
        rng = np.random.default_rng()
        args = [corpus.empty(n, t)] + [corpus.arr(rng, n, t) for _ in range(3)] + [n]
        c = corpus.Case("expr", expr_k, None, (max(1, -(-n // 512)),), (0,), dict(EXPR=e, BLOCK=512))
        ref = reference(c, args)
        dev = [to_gpu(a) if isinstance(a, corpus.Arr) else a for a in args]
        expr_k[c.grid](*dev, EXPR=e, BLOCK=512)
        torch.cuda.synchronize()
        compare(c, from_gpu(dev[0], args[0]), ref[0], t)
    check()


# -- the launcher -------------------------------------------------------------------------

def test_launch_errors_name_the_call_line():
    x = torch.randn(1000, device="cuda")
    out = torch.empty_like(x)
    with pytest.raises(LaunchError, match="tensor on cpu") as e:
        corpus.copy_k[(2,)](out, x.cpu(), 1000, BLOCK=512, L=corpus.L1)
    assert e.value.loc.line == sys._getframe().f_lineno - 1
    k = corpus.copy_k.trace(out, x, 1000, BLOCK=512, L=corpus.L1)
    with pytest.raises(LaunchError, match="dtype torch.float16"):
        get("nvidia").run(k.graph, (2, 1, 1), [out, x.half(), 1000])
    with pytest.raises(LaunchError, match="takes 3 run-time arguments"):
        get("nvidia").run(k.graph, (2, 1, 1), [out, x])
    if torch.cuda.device_count() > 1:
        with pytest.raises(LaunchError, match="on cuda:1"):
            corpus.copy_k[(2,)](out, x.to("cuda:1"), 1000, BLOCK=512, L=corpus.L1)


def test_fast_path_and_respecialization():
    k = corpus.add_k
    a, b = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
    out = torch.empty_like(a)
    for _ in range(3):
        k[(8,)](out, a, b, 4096, BLOCK=512, L=corpus.L1)
    assert k._fast, "no fast launcher was registered"
    torch.testing.assert_close(out, a + b)
    ah, bh = a.half(), b.half()
    outh = torch.empty_like(ah)
    k[(8,)](outh, ah, bh, 4096, BLOCK=512, L=corpus.L1)  # a new dtype: a new specialization
    torch.testing.assert_close(outh, ah + bh)
    k[(8,)](out, a[1:], b[1:], 4095, BLOCK=512, L=corpus.L1)  # unaligned: another one
    torch.cuda.synchronize()
    torch.testing.assert_close(out[:4095], a[1:] + b[1:])
    s = torch.cuda.Stream()
    out.fill_(0)
    with torch.cuda.stream(s):
        k[(8,)](out, a, b, 4096, BLOCK=512, L=corpus.L1)
    k[(8,)](out, a, b, 4096, BLOCK=512, L=corpus.L1, stream=s)
    s.synchronize()
    torch.testing.assert_close(out, a + b)


def test_more_than_48k_of_shared_memory():
    L = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    A = gl.BlockedLayout([4, 1], [8, 4], [1, 4], [0, 1])
    x = torch.randn(128, 128, device="cuda")
    out = torch.full_like(x, float("nan"))
    corpus.convert_k[(1,)](out, x, M=128, N=128, A=L, B=A)
    torch.testing.assert_close(out, x * 3.0)
    ck = corpus.convert_k.trace(out, x, M=128, N=128, A=L, B=A).compile("sm_90a")
    assert ck.shared_bytes >= 64 * 1024


def test_cupy_arrays():
    cp = pytest.importorskip("cupy")
    x = cp.random.standard_normal(1000, dtype=cp.float32)
    out = cp.full(1000, cp.nan, dtype=cp.float32)
    corpus.copy_k[(2,)](out, x, 1000, BLOCK=512, L=corpus.L1)
    cp.cuda.runtime.deviceSynchronize()
    assert cp.array_equal(out, x)


def test_device_print(capfd):
    x = torch.arange(8, dtype=torch.float32, device="cuda") * 0.5
    corpus.print_k[(1,)](x, 8)
    torch.cuda.synchronize()
    out = capfd.readouterr().out
    assert "pid (0, 0, 0) v=[3]: 1.500000" in out and "pid (0, 0, 0) n=8" in out
    assert out.count("v=[") == 8 and out.count("n=8") == 1


def test_c_launch_path_is_used_and_defers_to_the_checked_path():
    from gluon_trace.backends.nvidia import claunch
    k = corpus.add_k
    a, b = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
    out = torch.full_like(a, float("nan"))
    k._fast.clear()
    k._fast_keys.clear()
    for _ in range(2):
        k[(8,)](out, a, b, 4096, BLOCK=512, L=corpus.L1)
    assert claunch.status().startswith("on"), claunch.status()
    assert type(k._fast[0]).__name__ == "Launch"
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a + b)
    with pytest.raises(LaunchError, match="tensor on cpu") as e:
        k[(8,)](out, a.cpu(), b, 4096, BLOCK=512, L=corpus.L1)
    assert e.value.loc.line == sys._getframe().f_lineno - 1
    with pytest.raises(LaunchError, match="exceeds the device limits"):
        k[(1, 1 << 16)](out, a, b, 4096, BLOCK=512, L=corpus.L1)
    out.fill_(float("nan"))
    k[(8,)](out, a, b, 4096, BLOCK=512, L=corpus.L1)  # the fast path still works after the errors
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a + b)


@gt.jit
def _row_divide(out_ptr, num_ptr, den_ptr, N: gl.constexpr, L: gl.constexpr):
    row = gl.program_id(0)
    c = gl.arange(0, N, layout=L)
    x = gl.load(num_ptr + row * N + c)
    d = gl.load(den_ptr + row)
    gl.store(out_ptr + row * N + c, x / d)


def test_shared_divisor_division_is_bit_identical_to_torch():
    """Markstein's division (rules_division.py) against torch's IEEE division, bit for bit,
    on normal data and on the special values that must take the div.rn.f32 path."""
    g = torch.Generator(device="cuda").manual_seed(11)
    rows, n = 2048, 4096  # 32 elements per thread share each divisor
    num = torch.randn(rows, n, device="cuda", generator=g) * torch.exp2(
        torch.randint(-60, 60, (rows, n), device="cuda", generator=g).float())
    den = torch.randn(rows, device="cuda", generator=g) * torch.exp2(
        torch.randint(-60, 60, (rows,), device="cuda", generator=g).float())
    specials = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-45, -3e-39, 3e38,
                             1e-30, 2.0 ** 126], device="cuda")
    num[::97, :10] = specials
    den[1::53] = specials.repeat(len(den[1::53]) // 10 + 1)[:len(den[1::53])]
    out = torch.full_like(num, float("nan"))
    L = gl.BlockedLayout([8], [32], [4], [0])
    assert "rcp.rn.f32" in _row_divide.trace(out, num, den, N=n, L=L, num_warps=4).ptx("sm_90")
    _row_divide[(rows,)](out, num, den, N=n, L=L, num_warps=4)
    want = num / den[:, None]
    torch.cuda.synchronize()
    diff = (out.view(torch.int32) != want.view(torch.int32)) & ~(out.isnan() & want.isnan())
    assert int(diff.sum()) == 0, (num[diff][:5], den[:, None].expand_as(num)[diff][:5], out[diff][:5], want[diff][:5])


# -- float64 math (gluon_trace.decompose) ----------------------------------------------------

@gt.jit
def f64_math_k(out, x, n, OP: gl.constexpr):
    fn = {"exp": gl.exp, "exp2": gl.exp2, "log": gl.log, "log2": gl.log2, "sin": gl.sin,
          "cos": gl.cos, "erf": gl.erf}[OP]
    offs = gl.program_id(0) * 512 + gl.arange(0, 512, layout=corpus.L1)
    m = offs < n
    gl.store(out + offs, fn(gl.load(x + offs, mask=m, other=1.0)), mask=m)


@pytest.mark.parametrize("op", ["exp", "exp2", "log", "log2", "sin", "cos", "erf"])
def test_float64_math_within_ulp_bounds(op):
    """Fused fma, real instructions: the expansions on the GPU against numpy/math.erf over
    the whole double range (subnormals, overflow, huge sin/cos arguments, specials)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    import decompose_cases as C
    x = C.inputs(op, np.random.default_rng(), 1 << 18)
    xt = torch.from_numpy(x).cuda()
    out = torch.full_like(xt, float("nan"))
    f64_math_k[(-(-x.size // 512),)](out, xt, x.size, OP=op)
    torch.cuda.synchronize()
    got = out.cpu().numpy()
    u = C.ulps(got, C.reference(op, x))
    i = int(np.argmax(u))
    assert u.max() <= C.BOUND[op], f"{op}: x={x[i]!r} got {got[i]!r} want {C.reference(op, x[i:i + 1])[0]!r}"
    specials = np.array([a for a, _ in C.SPECIALS[op]])
    want = np.array([b for _, b in C.SPECIALS[op]])
    st = torch.from_numpy(specials).cuda()
    so = torch.full_like(st, 1234.5)
    f64_math_k[(1,)](so, st, specials.size, OP=op)
    torch.cuda.synchronize()
    sg = so.cpu().numpy()
    same = (sg == want) & (np.signbit(sg) == np.signbit(want)) | np.isnan(sg) & np.isnan(want)
    assert same.all(), [(specials[i], sg[i], want[i]) for i in np.flatnonzero(~same)]


# -- several GPUs (run on a machine with two: `pytest -m gpu -k two_gpus`) --------------------

two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2,
                              reason=f"needs 2 GPUs, this machine has {torch.cuda.device_count()}")


@two_gpus
def test_two_gpus_each_tensor_launches_on_its_own_device():
    torch.cuda.set_device(0)
    k = corpus.add_k
    res = {}
    for d in (0, 1, 1, 0, 1):  # alternate, so each device's fast path and the switching path both run
        a = torch.randn(4096, device=f"cuda:{d}")
        b = torch.randn(4096, device=f"cuda:{d}")
        out = torch.full_like(a, float("nan"))
        k[(8,)](out, a, b, 4096, BLOCK=512, L=corpus.L1)
        res.setdefault(d, []).append((out, a, b))
        assert torch.cuda.current_device() == 0  # the caller's device is left as it was
    for d, runs in res.items():
        torch.cuda.synchronize(d)
        for out, a, b in runs:
            torch.testing.assert_close(out, a + b)
    with torch.cuda.device(1):  # the usual way: make device 1 current, then launch there
        a, b = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
        out = torch.full_like(a, float("nan"))
        for _ in range(3):
            k[(8,)](out, a, b, 4096, BLOCK=512, L=corpus.L1)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):  # device 1's current stream is the one used
            out2 = torch.full_like(a, float("nan"))
            k[(8,)](out2, a, b, 4096, BLOCK=512, L=corpus.L1)
        s.synchronize()
        torch.testing.assert_close(out, a + b)
        torch.testing.assert_close(out2, a + b)


@two_gpus
def test_two_gpus_mixed_devices_are_refused_before_launch():
    a = torch.randn(1024, device="cuda:0")
    b = torch.randn(1024, device="cuda:1")
    out = torch.full_like(a, float("nan"))
    with pytest.raises(LaunchError, match="`b` is on cuda:1 but `out` is on cuda:0") as e:
        corpus.add_k[(2,)](out, a, b, 1024, BLOCK=512, L=corpus.L1)
    assert e.value.loc.line == sys._getframe().f_lineno - 1
    torch.cuda.synchronize(0)
    assert torch.isnan(out).all()  # nothing ran


@two_gpus
def test_two_gpus_cupy_arrays_on_device_one():
    cp = pytest.importorskip("cupy")
    with cp.cuda.Device(1):
        x = cp.random.standard_normal(1000, dtype=cp.float32)
        out = cp.full(1000, cp.nan, dtype=cp.float32)
    corpus.copy_k[(2,)](out, x, 1000, BLOCK=512, L=corpus.L1)
    with cp.cuda.Device(1):
        cp.cuda.runtime.deviceSynchronize()
        assert cp.array_equal(out, x)


@gt.jit
def _strided_rows(out, x, stride_x, n, BLOCK: gl.constexpr, L: gl.constexpr):
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=L)
    gl.store(out + row * BLOCK + cols, gl.load(x + row * stride_x + cols, mask=cols < n) * 2.0, mask=cols < n)


def test_non_contiguous_views_where_the_kernel_assumes_contiguity():
    k = corpus.add_k
    a, b = torch.randn(8192, device="cuda"), torch.randn(4096, device="cuda")
    out = torch.full((4096,), float("nan"), device="cuda")
    for _ in range(3):  # the fast paths exist before the bad call
        k[(8,)](out, a[:4096], b, 4096, BLOCK=512, L=corpus.L1)
    torch.cuda.synchronize()
    before = out.clone()
    with pytest.raises(LaunchError, match="`a` is not contiguous .shape .4096,., strides .2,..") as e:
        k[(8,)](out, a[::2], b, 4096, BLOCK=512, L=corpus.L1)
    assert e.value.loc.line == sys._getframe().f_lineno - 1
    torch.cuda.synchronize()
    assert torch.equal(out, before)  # nothing was launched
    # a kernel that takes the row stride from its caller takes a view
    x = torch.randn(64, 1024, device="cuda")
    o = torch.full((64, 1024), float("nan"), device="cuda")
    _strided_rows[(64,)](o, x[:, 24:], x.stride(0), 1000, BLOCK=1024, L=gl.BlockedLayout([4], [32], [8], [0]),
                         num_warps=8)
    torch.cuda.synchronize()
    torch.testing.assert_close(o[:, :1000], x[:, 24:] * 2)
    cp = pytest.importorskip("cupy")
    xc = cp.random.standard_normal(2000, dtype=cp.float32)
    oc = cp.full(1000, cp.nan, dtype=cp.float32)
    with pytest.raises(LaunchError, match="`inp` is not contiguous"):
        corpus.copy_k[(2,)](oc, xc[::2], 1000, BLOCK=512, L=corpus.L1)


def test_clock_reads_on_the_gpu():
    """gl.globaltimer() around a loop of dependent work grows by a plausible amount (more than
    nothing, less than a second), gl.clock64() grows too, and the CTAs' global readings fall in
    one window (one clock for the whole launch)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    from test_language_ops import timed_loop
    out = torch.full((64, 5), -1, device="cuda", dtype=torch.int64)
    timed_loop[(64,)](out, 100000, backend="nvidia")
    torch.cuda.synchronize()
    o = out.cpu().numpy()
    assert (o[:, 4] == 100000).all()
    dt_ns = o[:, 1] - o[:, 0]
    assert (dt_ns > 0).all() and (dt_ns < 1_000_000_000).all(), dt_ns
    assert (o[:, 3] - o[:, 2] > 0).all()
    assert o[:, 0].max() - o[:, 0].min() < 1_000_000_000

"""Integer min/max where ptxas 12.6-13.3 would fold two of them into a VIMNMX3 it miscompiles
(ptxas.minmax3_affected, Emitter.int_minmax; the GPU fuzzer's seed 330070402): which targets and
versions count as affected, that no min/max then reads another's result (the shape ptxas folds),
and that the kernels still compute the interpreter's values -- on the PTX simulator here, and on
the GPU where one is (the device's ptxas 13.0.88 is affected)."""
import os
import re
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backends.nvidia import ptxas
from gluon_trace.backends.nvidia.emitter import emit
from gluon_trace.errors import CompileError

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

N = 256
INT_EDGES = {np.int32: [-2**31, -2**31 + 1, -1, 0, 1, 2**31 - 2, 2**31 - 1],
             np.uint32: [0, 1, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1],
             np.int8: [-128, -127, -1, 0, 1, 126, 127]}


@gt.jit
def negated_trees(a, b, c, out, red, N: gl.constexpr, L: gl.constexpr):
    # the fuzz seed's shape (a max over -|a + b|) and its relatives: min/max of negations, in
    # trees, elementwise and reduced
    offs = gl.arange(0, N, layout=L)
    x, y, z = gl.load(a + offs), gl.load(b + offs), gl.load(c + offs)
    m = gl.maximum(gl.maximum(-gl.abs(x + y), gl.minimum(-x, z)), gl.minimum(y - z, -y))
    gl.store(out + offs, gl.minimum(gl.maximum(m, -z), gl.maximum(-x, x ^ y)))
    gl.store(red, gl.max(-gl.abs(x + y), axis=0))
    gl.store(red + 1, gl.min(-m, axis=0))


@gt.jit
def selected_trees(a, b, c, out, N: gl.constexpr, L: gl.constexpr):
    # min/max written as selects of a comparison of the same two values: ptxas folds these too
    offs = gl.arange(0, N, layout=L)
    x, y, z = gl.load(a + offs), gl.load(b + offs), gl.load(c + offs)
    nx, nz = -x, -z
    m1 = gl.where(nx > y, nx, y)
    m2 = gl.where(m1 < nz, m1, nz)
    m3 = gl.where(nz >= m2, m2, nz)
    m4 = gl.where(x <= m3, m3, x)
    gl.store(out + offs, gl.where(y > m4, m4, y) + gl.where(nz < x, nz, x + 1))


@gt.jit
def saturate(x, out, N: gl.constexpr, L: gl.constexpr):
    # float -> int8 clamps to the type (two min/max of their own), then a max over the row
    offs = gl.arange(0, N, layout=L)
    v = gl.load(x + offs).to(gl.int8)
    gl.store(out + offs, gl.maximum(v, -gl.load(out + offs)))


def _layout():
    return gl.BlockedLayout([2], [32], [4], [0])


def _trace_trees(dtype, target="sm_90a"):
    p = gl.pointer(dtype)
    return negated_trees.trace(p, p, p, p, p, N=N, L=_layout(), num_warps=4, target=target).graph


def _version(monkeypatch, version):
    if version is None:
        def missing():
            raise CompileError("ptxas (NVIDIA's PTX assembler) was not found")
        monkeypatch.setattr(ptxas, "locate", missing)
    else:
        monkeypatch.setattr(ptxas, "locate", lambda: ("/opt/cuda/bin/ptxas", version))


@pytest.mark.parametrize("version, affected", [("12.4.131", True), ("12.6.85", True), ("13.0.88", True),
                                               ("13.3.73", True), ("13.4.92", False), ("13.5.37", False),
                                               ("14.0.1", False), (None, True)])
def test_ptxas_versions_before_13_4_count_as_affected_on_sm_90(monkeypatch, version, affected):
    _version(monkeypatch, version)
    assert ptxas.minmax3_affected("sm_90a") is affected
    assert ptxas.minmax3_affected("sm_90") is affected
    assert ptxas.minmax3_affected("sm_100a") is affected
    # no VIMNMX3 before sm_90 (IMNMX) nor on sm_120 (VIMNMX.S32 with two inputs)
    assert not ptxas.minmax3_affected("sm_80")
    assert not ptxas.minmax3_affected("sm_89")
    assert not ptxas.minmax3_affected("sm_120")


_DEST = re.compile(r"^\s*(?:@%p\d+ )?([a-z][\w.]*) (%\w+)")


def _min_max_reading_min_max(text: str) -> list:
    """Lines where an integer min/max reads another integer min/max's result."""
    made_by = {}
    found = []
    for line in text.splitlines():
        m = _DEST.match(line)
        if not m:
            continue
        opcode, d = m.groups()
        is_mm = re.fullmatch(r"(min|max)\.[su](32|16|8)", opcode) is not None
        if is_mm:
            srcs = re.findall(r"%\w+", line.split(",", 1)[1])
            found += [line.strip() for s in srcs if made_by.get(s)]
        made_by[d] = is_mm
    return found


@pytest.mark.parametrize("dtype", [gl.int32, gl.uint32, gl.int8])
def test_affected_ptxas_gets_no_min_max_of_a_min_max(monkeypatch, dtype):
    graph = _trace_trees(dtype)
    _version(monkeypatch, "13.5.37")
    plain = emit(graph, "sm_90a")[0]
    # the premise: 32-bit trees chain min/max (int8 values are sign-extended after each op)
    assert bool(_min_max_reading_min_max(plain)) is (dtype.bits == 32)
    assert "~min(~a, ~b)" not in plain
    _version(monkeypatch, "13.0.88")
    guarded = emit(graph, "sm_90a")[0]
    assert _min_max_reading_min_max(guarded) == []
    assert "~min(~a, ~b)" in guarded.split(".version")[0]  # the header says why
    # for sm_80 (no VIMNMX3) the kernel is the same under either ptxas
    graph80 = _trace_trees(dtype, "sm_80")
    assert emit(graph80, "sm_80")[0] == guarded80 if (guarded80 := emit(graph80, "sm_80")[0]) else False
    _version(monkeypatch, "13.5.37")
    assert emit(graph80, "sm_80")[0] == guarded80


def _inputs(rng, np_t, n=N):
    info = np.iinfo(np_t)
    full = rng.integers(info.min, int(info.max) + 1, size=n, dtype=np.int64)
    small = rng.integers(-8, 9, size=n) if info.min < 0 else rng.integers(0, 17, size=n)
    edge = rng.choice(np.array(INT_EDGES[np_t], dtype=np.int64), size=n)
    pick = rng.random(n)
    return np.where(pick < 0.4, small, np.where(pick < 0.8, full, edge)).astype(np_t)


@pytest.mark.parametrize("version", ["13.0.88", "13.5.37"])
@pytest.mark.parametrize("dtype, np_t", [(gl.int32, np.int32), (gl.uint32, np.uint32), (gl.int8, np.int8)])
def test_trees_compute_the_interpreters_values_on_the_simulator(monkeypatch, version, dtype, np_t):
    graph = _trace_trees(dtype)
    _version(monkeypatch, version)
    text, _, smem = emit(graph, "sm_90a")
    for seed in range(3):
        rng = np.random.default_rng(seed)
        a, b, c = (_inputs(rng, np_t) for _ in range(3))
        want_out, want_red = np.full(N, 0x5A, np_t), np.full(2, 0x5A, np_t)
        negated_trees[(1,)](a, b, c, want_out, want_red, N=N, L=_layout(), num_warps=4, backend="interpreter")
        out, red = np.full(N, 0x5A, np_t), np.full(2, 0x5A, np_t)
        ptxsim.run(text, (1, 1, 1), [a, b, c, out, red], smem)
        np.testing.assert_array_equal(out, want_out)
        np.testing.assert_array_equal(red, want_red)


def test_saturating_conversion_is_guarded_and_right(monkeypatch):
    graph = saturate.trace(gl.pointer(gl.float32), gl.pointer(gl.int8), N=N, L=_layout(), num_warps=4,
                           target="sm_90a").graph
    _version(monkeypatch, "13.0.88")
    text, _, smem = emit(graph, "sm_90a")
    assert _min_max_reading_min_max(text) == []
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.normal(0, 200, N - 6), [np.nan, np.inf, -np.inf, 127.9, -128.9, 1e9]]).astype(np.float32)
    start = _inputs(rng, np.int8)
    want = start.copy()
    saturate[(1,)](x, want, N=N, L=_layout(), num_warps=4, backend="interpreter")
    got = start.copy()
    ptxsim.run(text, (1, 1, 1), [x, got], smem)
    np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, np_t", [(gl.int32, np.int32), (gl.uint32, np.uint32), (gl.int8, np.int8)])
def test_trees_on_the_gpu_with_this_machines_ptxas(dtype, np_t):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a machine with an NVIDIA GPU")
    _, version = ptxas.locate()
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        a, b, c = (_inputs(rng, np_t) for _ in range(3))
        want_out, want_red = np.full(N, 0x5A, np_t), np.full(2, 0x5A, np_t)
        negated_trees[(1,)](a, b, c, want_out, want_red, N=N, L=_layout(), num_warps=4, backend="interpreter")
        dev = [torch.from_numpy(x.view(np.uint8).copy()).cuda() for x in (a, b, c)]
        out, red = (torch.full((n * np_t().itemsize,), 0x5A, dtype=torch.uint8, device="cuda") for n in (N, 2))
        views = [t.view({np.int32: torch.int32, np.uint32: torch.uint32, np.int8: torch.int8}[np_t])
                 for t in dev + [out, red]]
        negated_trees[(1,)](*views, N=N, L=_layout(), num_warps=4, backend="nvidia")
        torch.cuda.synchronize()
        got_out = out.cpu().numpy().view(np_t)
        got_red = red.cpu().numpy().view(np_t)
        assert np.array_equal(got_out, want_out), f"ptxas {version}, seed {seed}"
        assert np.array_equal(got_red, want_red), f"ptxas {version}, seed {seed}"


@pytest.mark.parametrize("dtype, np_t", [(gl.int32, np.int32), (gl.uint32, np.uint32)])
def test_selects_of_a_comparison_are_guarded_and_right(monkeypatch, dtype, np_t):
    p = gl.pointer(dtype)
    graph = selected_trees.trace(p, p, p, p, N=N, L=_layout(), num_warps=4, target="sm_90a").graph
    _version(monkeypatch, "13.5.37")
    plain = emit(graph, "sm_90a")[0]
    # two values a thread (the layout's size_per_thread), six selects each
    assert plain.count("selp.b32") == 12 and not re.search(r"\t(min|max)\.", plain)
    _version(monkeypatch, "13.0.88")
    text, _, smem = emit(graph, "sm_90a")
    # the five min/max selects became guarded min/max; where(nz < x, nz, x + 1) is no min/max
    assert text.count("selp.b32") == 2 and len(re.findall(r"\t(min|max)\.[su]32", text)) == 10
    assert _min_max_reading_min_max(text) == []
    for seed in range(3):
        rng = np.random.default_rng(20 + seed)
        a, b, c = (_inputs(rng, np_t) for _ in range(3))
        want = np.full(N, 0x5A, np_t)
        selected_trees[(1,)](a, b, c, want, N=N, L=_layout(), num_warps=4, backend="interpreter")
        for version_text in (plain, text):
            got = np.full(N, 0x5A, np_t)
            ptxsim.run(version_text, (1, 1, 1), [a, b, c, got], smem)
            np.testing.assert_array_equal(got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, np_t", [(gl.int32, np.int32), (gl.uint32, np.uint32)])
def test_selects_on_the_gpu_with_this_machines_ptxas(dtype, np_t):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a machine with an NVIDIA GPU")
    _, version = ptxas.locate()
    tt = {np.int32: torch.int32, np.uint32: torch.uint32}[np_t]
    for seed in range(20):
        rng = np.random.default_rng(200 + seed)
        a, b, c = (_inputs(rng, np_t) for _ in range(3))
        want = np.full(N, 0x5A, np_t)
        selected_trees[(1,)](a, b, c, want, N=N, L=_layout(), num_warps=4, backend="interpreter")
        dev = [torch.from_numpy(x.view(np.uint8).copy()).cuda().view(tt) for x in (a, b, c)]
        out = torch.full((4 * N,), 0x5A, dtype=torch.uint8, device="cuda")
        selected_trees[(1,)](*dev, out.view(tt), N=N, L=_layout(), num_warps=4, backend="nvidia")
        torch.cuda.synchronize()
        assert np.array_equal(out.cpu().numpy().view(np_t), want), f"ptxas {version}, seed {seed}"

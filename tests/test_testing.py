"""The property-testing kit: strategies give only valid things (checked by the layouts'
own verifier), edge values do appear, and assert_kernel_matches catches wrong kernels,
unwritten outputs and clobbered inputs with a diff that names index, got and expected."""
import math
import re
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, find, given, settings, strategies as st

import gluon_trace as gt
from gluon_trace import backend as backends
from gluon_trace import language as gl
from gluon_trace import testing as gtt
from gluon_trace.compiled import CompiledKernel
from gluon_trace.errors import ArgumentError
from gluon_trace.layouts import DistributedLinearLayout, SliceLayout

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _line_of(text: str) -> int:
    """The line of this file holding ``text`` (for messages that must name it)."""
    with open(__file__) as f:
        for i, line in enumerate(f, 1):
            if text in line and "_line_of" not in line:
                return i
    raise AssertionError(text)


# ------------------------------------------------------------------------- strategies
@SETTINGS
@given(st.data(), st.sampled_from(["interpreter", "sm_90", "gfx942"]), st.sampled_from([1, 2, 4, 8]))
def test_every_drawn_layout_fits_its_shape_warps_and_target(data, target, num_warps):
    shape = data.draw(gtt.shapes(rank=(1, 3), max_numel=1024))
    tpw = 64 if target == "gfx942" else 32
    lay = data.draw(gtt.layouts(shape, num_warps, target))
    lay.verify(shape, num_warps, tpw)  # raises LayoutError if not
    lin = lay.to_linear(shape, num_warps, tpw)
    assert lin.is_surjective() and lin.num_lanes == tpw and lin.num_warps == num_warps
    if isinstance(lay, gt.language.BlockedLayout):
        assert math.prod(lay.threads_per_warp) == tpw
        assert all(s <= d for s, d in zip(lay.size_per_thread, shape))


def test_all_layout_kinds_and_warp_sizes_are_drawn():
    kinds = set()

    @settings(max_examples=60, deadline=None, database=None)
    @given(gtt.layouts((16, 8), 4, "gfx942"))
    def collect(lay):
        kinds.add(type(lay).__name__)
        assert lay.num_lanes == 64

    collect()
    assert kinds == {"BlockedLayout", "SliceLayout", "DistributedLinearLayout"}
    assert gtt.warp_size("gfx942") == 64 and gtt.warp_size("gfx1100") == 32 and gtt.warp_size("sm_90") == 32


@SETTINGS
@given(gtt.shapes(rank=(1, 3), min_side=2, max_side=64, max_numel=512))
def test_shapes_are_powers_of_two_within_bounds(shape):
    assert 1 <= len(shape) <= 3 and math.prod(shape) <= 512
    assert all(2 <= s <= 64 and s & (s - 1) == 0 for s in shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_float_arrays_include_inf_nan_negative_zero_and_extremes(dtype):
    strat = gtt.arrays(dtype, (8,))
    assert np.isnan(find(strat, lambda a: np.isnan(a).any())).any()
    assert np.isneginf(find(strat, lambda a: np.isneginf(a).any())).any()
    z = find(strat, lambda a: bool((np.signbit(a) & (a == 0)).any()))
    assert ((z == 0) & np.signbit(z)).any()
    assert find(strat, lambda a: (a == np.finfo(dtype).max).any()).dtype == dtype
    finite = gtt.arrays(dtype, (8,), finite=True)
    with pytest.raises(Exception):  # hypothesis finds no non-finite value: none can be drawn
        find(finite, lambda a: not np.isfinite(a).all(), settings=settings(max_examples=200, database=None))


def test_int_arrays_include_the_extremes_and_respect_bounds():
    assert find(gtt.arrays(np.int32, (4,)), lambda a: (a == np.iinfo(np.int32).min).any()).dtype == np.int32
    assert (find(gtt.arrays(np.uint8, (4,)), lambda a: (a == 255).any()) == 255).any()
    bounded = gtt.arrays(np.int16, (16,), min_value=-5, max_value=5, dense=True)

    @settings(max_examples=30, deadline=None, database=None)
    @given(bounded)
    def check(a):
        assert a.min() >= -5 and a.max() <= 5

    check()


def test_dtype_strategy_and_bfloat16_arrays_refused_with_the_line():
    names = set()

    @settings(max_examples=60, deadline=None, database=None)
    @given(gtt.dtypes(kinds=("float",)))
    def collect(t):
        names.add(t.name)

    collect()
    assert names == {"float16", "float32", "float64"}
    with pytest.raises(ArgumentError) as e:
        gtt.arrays(gl.bfloat16, (4,))  # bf16-line
    assert f"test_testing.py:{_line_of('# bf16-line')}" in str(e.value) and "round_bf16" in str(e.value)


# --------------------------------------------------------------- assert_kernel_matches
@gt.jit
def scale_add(out_ptr, x_ptr, y_ptr, n, alpha, BLOCK: gl.constexpr):
    L = gl.BlockedLayout([2], [32], [gl.num_warps()], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    m = offs < n
    gl.store(out_ptr + offs, alpha * gl.load(x_ptr + offs, mask=m) + gl.load(y_ptr + offs, mask=m), mask=m)


@gt.jit
def scale_add_stops_early(out_ptr, x_ptr, y_ptr, n, alpha, BLOCK: gl.constexpr):
    L = gl.BlockedLayout([2], [32], [gl.num_warps()], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    m = offs < n - 1  # the bug: forgets the last element
    gl.store(out_ptr + offs, alpha * gl.load(x_ptr + offs, mask=m) + gl.load(y_ptr + offs, mask=m), mask=m)


@gt.jit
def clobbers_input(out_ptr, x_ptr, y_ptr, n, alpha, BLOCK: gl.constexpr):
    L = gl.BlockedLayout([2], [32], [gl.num_warps()], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    m = offs < n
    v = alpha * gl.load(x_ptr + offs, mask=m) + gl.load(y_ptr + offs, mask=m)
    gl.store(out_ptr + offs, v, mask=m)
    gl.store(x_ptr + offs, v, mask=m)


def _ref(out, x, y, n, alpha):
    return alpha * x + y


def _inputs(n=300, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(dtype)
    y = rng.standard_normal(n).astype(dtype)
    return np.empty_like(x), x, y


def test_a_correct_kernel_matches_and_the_report_says_what_ran_and_why_not():
    out, x, y = _inputs()
    out[:] = 7.0
    x0 = x.copy()
    rep = gtt.assert_kernel_matches(scale_add, _ref, out, x, y, 300, 1.5, grid=(3,), outputs=[0],
                                    BLOCK=128, num_warps=2)
    assert rep.ran == ["interpreter"]
    for name in ("nvidia", "amd"):
        ok, why = gtt.backend_status(name)
        if not ok:
            assert rep.skipped[name] == why and why
    assert "matched the reference on interpreter" in str(rep)
    assert (out == 7.0).all() and np.array_equal(x, x0)  # the kernel ran on copies


def test_a_wrong_kernel_fails_with_index_got_expected_and_the_calling_line():
    out, x, y = _inputs()
    with pytest.raises(AssertionError) as e:
        gtt.assert_kernel_matches(scale_add, lambda o, x, y, n, a: a * x - y, out, x, y, 300, 1.5,  # wrong-ref
                                  grid=(3,), outputs=["out_ptr"], BLOCK=128, num_warps=2)
    msg = str(e.value)
    assert "kernel `scale_add` on the interpreter backend does not match" in msg
    assert f"checked at test_testing.py:{_line_of('# wrong-ref')}" in msg
    assert re.search(r"output `out_ptr` \(argument 0, float32, rtol=1.3e-06, atol=1e-05\) differs from the "
                     r"reference at \d+ of 300 elements", msg)
    row = msg.splitlines()[3].split()
    assert row[0] == "0" and float(row[1]) == pytest.approx(1.5 * x[0] + y[0], rel=1e-5)
    assert float(row[2]) == pytest.approx(1.5 * x[0] - y[0], rel=1e-5)
    assert "... and" in msg and len(msg.splitlines()) <= 16  # the first 10 only


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_an_unwritten_element_is_caught_by_the_poison(dtype):
    out, x, y = _inputs(dtype=np.float32)
    x, y, out = (x * 100).astype(dtype), (y * 100).astype(dtype), np.zeros(300, dtype)
    with pytest.raises(AssertionError) as e:
        gtt.assert_kernel_matches(scale_add_stops_early, lambda o, x, y, n, a: a * x + y, out, x, y, 300, 1,
                                  grid=(3,), outputs=[0], BLOCK=128, num_warps=1)
    msg = str(e.value)
    assert "at 1 of 300 elements" in msg
    assert re.search(r"\n\s+299\s+(nan \(computed, or never written\)|1515870810 \(poison 0x5A..: not written\))",
                     msg)


def test_in_place_reference_nan_equal_nan_and_int_exactness():
    out, x, y = _inputs(n=256)
    x[3], y[7] = np.nan, np.inf

    def ref(o, x, y, n, a):
        o[:] = a * x + y  # in place, returns None

    gtt.assert_kernel_matches(scale_add, ref, out, x, y, 256, 2.0, grid=(2,), outputs=[0], BLOCK=128)
    xi = np.arange(256, dtype=np.int32) * 7 - 900
    yi = np.arange(256, dtype=np.int32)[::-1].copy()
    oi = np.empty_like(xi)
    gtt.assert_kernel_matches(scale_add, lambda o, x, y, n, a: 3 * x + y, oi, xi, yi, 256, 3,
                              grid=(2,), outputs=[0], BLOCK=128)
    with pytest.raises(AssertionError, match=r"argument 0, int32\) differs from the reference at 1 of 256"):
        gtt.assert_kernel_matches(scale_add, lambda o, x, y, n, a: 3 * x + y + (x == -900), oi, xi, yi, 256, 3,
                                  grid=(2,), outputs=[0], BLOCK=128)


def test_half_precision_uses_looser_tolerances_and_user_tolerances_override():
    out, x, y = _inputs(n=256, dtype=np.float16)
    ref64 = lambda o, x, y, n, a: 1.1 * x.astype(np.float64) + y  # noqa: E731  (rounds differently)
    gtt.assert_kernel_matches(scale_add, ref64, out, x, y, 256, 1.1, grid=(2,), outputs=[0], BLOCK=128)
    with pytest.raises(AssertionError, match="float16, rtol=0, atol=0"):
        gtt.assert_kernel_matches(scale_add, ref64, out, x, y, 256, 1.1, grid=(2,), outputs=[0], BLOCK=128,
                                  rtol=0, atol=0)


def test_a_kernel_that_writes_an_input_is_reported():
    out, x, y = _inputs()
    with pytest.raises(AssertionError, match=r"input `x_ptr` \(argument 1\) was changed by the kernel"):
        gtt.assert_kernel_matches(clobbers_input, _ref, out, x, y, 300, 1.5, grid=(3,), outputs=[0], BLOCK=128)
    gtt.assert_kernel_matches(clobbers_input, lambda o, x, y, n, a: (a * x + y, a * x + y), out, x, y, 300,
                              1.5, grid=(3,), outputs=[0, 1], BLOCK=128)


def test_misuse_is_an_argument_error_naming_the_calling_line():
    out, x, y = _inputs()
    with pytest.raises(ArgumentError) as e:
        gtt.assert_kernel_matches(scale_add, _ref, out, x, y, 300, 1.5, grid=(3,), outputs=[7], BLOCK=128)  # idx
    assert "not the index of one of the 5 arguments" in str(e.value) and f":{_line_of('# idx')}" in str(e.value)
    with pytest.raises(ArgumentError) as e:
        gtt.assert_kernel_matches(scale_add, _ref, out, x, y, 300, 1.5, grid=(3,), outputs=["z"], BLOCK=128)  # nm
    assert "`z`, which is not a run-time argument of scale_add" in str(e.value)
    assert f":{_line_of('# nm')}" in str(e.value)
    with pytest.raises(ArgumentError) as e:
        gtt.assert_kernel_matches(scale_add, _ref, out, x, y, 300, 1.5, grid=(3,), outputs=[3], BLOCK=128)  # int
    assert "output argument 3 is a int; outputs must be numpy arrays" in str(e.value)
    assert f":{_line_of('# int')}" in str(e.value)
    with pytest.raises(ArgumentError) as e:
        gtt.assert_kernel_matches(scale_add, lambda *a: (1, 2), out, x, y, 300, 1.5, grid=(3,), outputs=[0], BLOCK=128)  # two
    assert "returned 2 arrays for 1 outputs" in str(e.value) and f":{_line_of('# two')}" in str(e.value)
    with pytest.raises(ArgumentError) as e:
        gtt.assert_kernel_matches(scale_add, lambda *a: np.zeros(5), out, x, y, 300, 1.5, grid=(3,), outputs=[0], BLOCK=128)  # shape
    assert "has shape (5,), the output has (300,)" in str(e.value) and f":{_line_of('# shape')}" in str(e.value)
    with pytest.raises(ArgumentError) as e:
        gtt.assert_kernel_matches(scale_add, _ref, out, x, y, 300, 1.5, grid=(3,), outputs=[0], backend="nvidia")  # be
    assert "pass backends=(...)" in str(e.value) and f":{_line_of('# be')}" in str(e.value)


# ----------------------------------------------- backends missing, present, or assembling
class FakeBackend:
    """Stands in for a GPU backend: compiles by recording, never runs."""
    name = "nvidia"
    targets = ("sm_80", "sm_90")
    RULES = {}

    def __init__(self):
        self.compiled = []

    def threads_per_warp(self, target):
        return 32

    def default_target(self, args):
        return "sm_90"

    def emit(self, graph, target):
        return f".target {target}\n// {graph.name}"

    def compile(self, graph, target):
        self.compiled.append((graph.name, target))
        return CompiledKernel(graph.name, target, self.emit(graph, target), b"cubin")


def test_assemble_skips_a_missing_backend_and_compiles_with_a_present_one(monkeypatch):
    out, x, y = _inputs(n=128)
    monkeypatch.setitem(backends._BACKENDS, "nvidia", "gluon_trace.backends.not_written_yet")
    monkeypatch.delitem(backends._loaded, "nvidia", raising=False)
    rep = gtt.assert_kernel_matches(scale_add, _ref, out, x, y, 128, 1.5, grid=(1,), outputs=[0], BLOCK=128,
                                    assemble=("sm_90",))
    ok, why = gtt.compile_status("sm_90")
    assert not ok and rep.skipped["sm_90"] == why and rep.skipped["nvidia"] == why
    assert "the nvidia backend is not available (ModuleNotFoundError" in why
    fake = FakeBackend()
    monkeypatch.setitem(backends._loaded, "nvidia", fake)
    rep = gtt.assert_kernel_matches(scale_add, _ref, out, x, y, 128, 1.5, grid=(1,), outputs=[0], BLOCK=128,
                                    backends=("interpreter",), assemble=("sm_90",))
    assert rep.assembled == ["sm_90"] and fake.compiled == [("scale_add", "sm_90")]
    assert gtt.backend_status("nvidia") == gtt.gpu_status("nvidia") or not gtt.gpu_status("nvidia")[0]

    def broken(graph, target):
        raise gt.CompileError("ptxas: too much shared memory")

    monkeypatch.setattr(fake, "compile", broken)
    with pytest.raises(AssertionError, match="failed to assemble for sm_90 .*\n  CompileError: ptxas: too much"):
        gtt.assert_kernel_matches(scale_add, _ref, out, x, y, 128, 1.5, grid=(1,), outputs=[0], BLOCK=128,
                                  backends=("interpreter",), assemble=("sm_90",))


def test_without_torch_gpu_backends_say_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    ok, why = gtt.gpu_status("nvidia")
    assert not ok and "torch is not installed" in why
    monkeypatch.setitem(backends._loaded, "nvidia", FakeBackend())
    assert gtt.backend_status("nvidia") == (False, why)
    assert gtt.backend_status("cerebras") == (False, "unknown backend 'cerebras'")


# ------------------------------------------- the kit in use: layouts x values x shapes
@gt.jit
def copy2d(out_ptr, in_ptr, LAYOUT: gl.constexpr, R: gl.constexpr, C: gl.constexpr):
    rows = gl.arange(0, R, layout=gl.SliceLayout(1, LAYOUT))
    cols = gl.arange(0, C, layout=gl.SliceLayout(0, LAYOUT))
    offs = gl.expand_dims(rows, 1) * C + gl.expand_dims(cols, 0)
    x = gl.load(in_ptr + offs)
    gl.store(out_ptr + offs, gl.abs(x) + 1)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_2d_kernel_agrees_with_numpy_for_any_layout_and_values(data):
    shape = data.draw(gtt.shapes(rank=2, max_side=32, max_numel=512))
    lay = data.draw(gtt.blocked_layouts(shape, num_warps=2))
    x = data.draw(gtt.arrays(np.float32, shape))
    gtt.assert_kernel_matches(copy2d, lambda o, x: np.abs(x) + 1, np.empty_like(x), x, grid=(1,), outputs=[0],
                              LAYOUT=lay, R=shape[0], C=shape[1], num_warps=2, backends=("interpreter",))


@settings(max_examples=10, deadline=None, database=None)
@given(gtt.slice_layouts((8,), 4), gtt.linear_layouts((8, 4), 2))
def test_slice_and_linear_strategies_build_real_layout_objects(s, d):
    assert isinstance(s, SliceLayout) and isinstance(d, DistributedLinearLayout)
    assert s.rank == 1 and d.shape == (8, 4) and len(d.lane_bases) == 5 and len(d.warp_bases) == 1

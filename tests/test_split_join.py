"""gl.split / gl.join: the layouts they give, the interpreter against numpy over random
layouts, and their errors at the user's line."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import TraceError
from gluon_trace.layouts import join_layout, split_layout

import split_join_cases as S


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(S.cases(lanes_log=5))
def test_interpreter_matches_numpy(case):
    S.reference(case, seed=1)


def test_split_of_a_register_dimension_renames_registers():
    """The usual case (a thread holds both halves): each half's layout is the source's
    with that register bit dropped; join puts it back at register bit 0."""
    lay = gl.BlockedLayout([1, 2], [8, 4], [2, 1], [1, 0])
    half = split_layout(lay, (16, 2), 2, 32).to_linear((16,), 2, 32)
    assert len(half.reg_bases) == 0 and half.lane_bases[:2] == ((0,), (0,))  # 4 lanes along the cut dim copy
    back = join_layout(split_layout(lay, (16, 2), 2, 32), (16,), 2, 32).to_linear((16, 2), 2, 32)
    assert back.reg_bases == ((0, 1),)
    acc = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16])
    from gluon_trace.layouts import permute_layout, reshape_layout
    r = reshape_layout(acc, (64, 64), (64, 2, 32), 4, 32)
    p = permute_layout(r, (64, 2, 32), (0, 2, 1), 4, 32)
    h = split_layout(p, (64, 32, 2), 4, 32).to_linear((64, 32), 4, 32)
    full = acc.to_linear((64, 64), 4, 32)
    assert len(h.reg_bases) == len(full.reg_bases) - 1 and h.lane_bases == full.lane_bases


@gt.jit
def acc_halves(out, x, M: gl.constexpr, N: gl.constexpr):
    """An accumulator's column halves, as an epilogue writes them in chunks."""
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N, 16])
    bl: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [4, 1], [1, 0])
    rm = gl.arange(0, M, layout=gl.SliceLayout(1, bl))[:, None]
    rn = gl.arange(0, N, layout=gl.SliceLayout(0, bl))[None, :]
    v = gl.convert_layout(gl.load(x + rm * N + rn), acc_l)
    lo, hi = v.reshape([M, 2, N // 2]).permute((0, 2, 1)).split()
    hm = gl.arange(0, M, layout=gl.SliceLayout(1, lo.layout))[:, None]
    hn = gl.arange(0, N // 2, layout=gl.SliceLayout(0, lo.layout))[None, :]
    gl.store(out + hm * N + hn + N // 2, lo)
    gl.store(out + hm * N + hn, hi)


def test_accumulator_column_halves():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    out = np.full_like(x, np.nan)
    acc_halves[(1,)](out, x, M=64, N=64, num_warps=4, backend="interpreter")
    np.testing.assert_array_equal(out, np.concatenate([x[:, 32:], x[:, :32]], axis=1))


@gt.jit
def bad_split(x, N: gl.constexpr):
    v = gl.load(x + gl.arange(0, N, layout=gl.BlockedLayout([1], [32], [1], [0])))
    v.split()


@gt.jit
def bad_split_2d(x):
    L: gl.constexpr = gl.BlockedLayout([1, 4], [32, 1], [1, 1], [1, 0])
    o = gl.arange(0, 32, layout=gl.SliceLayout(1, L))[:, None] * 4 + gl.arange(0, 4, layout=gl.SliceLayout(0, L))[None, :]
    gl.split(gl.load(x + o))


@gt.jit
def bad_join(x, y):
    L: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    o = gl.arange(0, 32, layout=L)
    gl.join(gl.load(x + o), gl.load(y + o))


def _line_of(fn, text):
    import inspect
    lines, first = inspect.getsourcelines(fn.fn if hasattr(fn, "fn") else fn)
    return first + next(i for i, s in enumerate(lines) if text in s)


@pytest.mark.parametrize("kernel,needle", [(bad_split, "v.split()"), (bad_split_2d, "gl.split(")])
def test_split_of_a_tile_without_a_last_dimension_of_two(kernel, needle):
    x = np.zeros(128, np.float32)
    with pytest.raises(TraceError, match="split needs a tile of 2 or more dimensions whose last is 2") as e:
        kernel[(1,)](x, **({"N": 32} if kernel is bad_split else {}), num_warps=1, backend="interpreter")
    assert e.value.loc.line == _line_of(kernel, needle) and e.value.loc.file.endswith("test_split_join.py")


def test_join_of_two_dtypes_is_a_type_error():
    with pytest.raises(TypeError, match="join needs two tiles of one dtype") as e:
        bad_join[(1,)](np.zeros(32, np.float32), np.zeros(32, np.int32), num_warps=1, backend="interpreter")
    assert e.value.loc.line == _line_of(bad_join, "gl.join(")


@gt.jit
def join_broadcast(out, x, y):
    L: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 1], [1, 0])
    L2: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [1, 1], [0, 1])
    r = gl.arange(0, 32, layout=gl.SliceLayout(1, L))[:, None]
    c = gl.arange(0, 4, layout=gl.SliceLayout(0, L))[None, :]
    a = gl.load(x + r * 4 + c)                         # [32, 4]
    b = gl.convert_layout(gl.load(y + r * 0 + c * 0) + 0 * a, L2)  # another layout
    j = gl.join(a, b)
    jr = gl.arange(0, 32, layout=gl.SliceLayout(1, gl.SliceLayout(2, j.layout)))[:, None, None]
    jc = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, j.layout)))[None, :, None]
    jk = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(1, j.layout)))[None, None, :]
    gl.store(out + jr * 8 + jc * 2 + jk, j)


def test_join_converts_the_second_operand_to_the_first_ones_layout():
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal(128).astype(np.float32), rng.standard_normal(1).astype(np.float32)
    out = np.full((32, 4, 2), np.nan, np.float32)
    join_broadcast[(1,)](out, x, y, num_warps=1, backend="interpreter")
    np.testing.assert_array_equal(out[..., 0], x.reshape(32, 4))
    np.testing.assert_array_equal(out[..., 1], np.full((32, 4), y[0], np.float32))

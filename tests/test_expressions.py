"""Random expression trees over random shapes, dtypes and layouts, against numpy."""
import numpy as np
from hypothesis import given, strategies as st

import gluon_trace as gt
from gluon_trace import language as gl

FLOAT_OPS = ["add", "sub", "mul", "maximum", "minimum", "where_gt", "neg", "abs", "exp_small", "fma"]
INT_OPS = ["add", "sub", "mul", "maximum", "minimum", "where_gt", "neg", "and", "or", "xor", "shl3"]

NP = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "maximum": np.fmax, "minimum": np.fmin, "and": np.bitwise_and, "or": np.bitwise_or,
    "xor": np.bitwise_xor, "where_gt": lambda a, b: np.where(a > b, a, b),
}
GL = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "maximum": gl.maximum, "minimum": gl.minimum, "and": lambda a, b: a & b,
    "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "where_gt": lambda a, b: gl.where(a > b, a, b),
}


@st.composite
def trees(draw, ops, n_leaves, depth=0):
    if depth >= 3 or draw(st.integers(0, 3)) == 0:
        return ("leaf", draw(st.integers(0, n_leaves - 1)))
    op = draw(st.sampled_from(ops))
    if op in ("neg", "abs", "exp_small", "shl3"):
        return (op, draw(trees(ops, n_leaves, depth + 1)))
    if op == "fma":
        return (op, *(draw(trees(ops, n_leaves, depth + 1)) for _ in range(3)))
    return (op, draw(trees(ops, n_leaves, depth + 1)), draw(trees(ops, n_leaves, depth + 1)))


def eval_tree(t, leaves, lib):
    kind = t[0]
    if kind == "leaf":
        return leaves[t[1]]
    args = [eval_tree(c, leaves, lib) for c in t[1:]]
    if lib == "np":
        if kind == "neg":
            return -args[0]
        if kind == "abs":
            return np.abs(args[0])
        if kind == "exp_small":
            return np.exp(np.clip(args[0], -4, 4) * args[0].dtype.type(0.25))
        if kind == "shl3":
            return args[0] << args[0].dtype.type(3)
        if kind == "fma":
            return args[0] * args[1] + args[2]
        return NP[kind](*args)
    if kind == "neg":
        return -args[0]
    if kind == "abs":
        return gl.abs(args[0])
    if kind == "exp_small":
        return gl.exp(gl.clamp(args[0], -4.0, 4.0) * 0.25)
    if kind == "shl3":
        return args[0] << 3
    if kind == "fma":
        return gl.fma(args[0], args[1], args[2])
    return GL[kind](*args)


@st.composite
def layouts_2d(draw, shape, num_warps):
    tpw0 = 2 ** draw(st.integers(0, 5))
    wpc0 = 2 ** draw(st.integers(0, num_warps.bit_length() - 1))
    spt = [2 ** draw(st.integers(0, 2)), 2 ** draw(st.integers(0, 2))]
    order = draw(st.sampled_from([[0, 1], [1, 0]]))
    return gl.BlockedLayout(spt, [tpw0, 32 // tpw0], [wpc0, num_warps // wpc0], order)


def make_kernel(tree, n_leaves):
    @gt.jit
    def kernel(out_ptr, a_ptr, b_ptr, c_ptr, M: gl.constexpr, N: gl.constexpr,
               L: gl.constexpr):
        rows = gl.arange(0, M, layout=gl.SliceLayout(1, L))
        cols = gl.arange(0, N, layout=gl.SliceLayout(0, L))
        offs = rows[:, None] * N + cols[None, :]
        leaves = [gl.load(p + offs) for p in (a_ptr, b_ptr, c_ptr)[:n_leaves]]
        gl.store(out_ptr + offs, eval_tree(tree, leaves, "gl"))
    return kernel


@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float16, np.int32, np.int16]),
       m=st.sampled_from([1, 4, 16]), n=st.sampled_from([8, 32, 64]),
       num_warps=st.sampled_from([1, 2, 4]))
def test_random_expression_matches_numpy(data, dtype, m, n, num_warps):
    is_float = np.issubdtype(dtype, np.floating)
    tree = data.draw(trees(FLOAT_OPS if is_float else INT_OPS, 3))
    layout = data.draw(layouts_2d((m, n), num_warps))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    if is_float:
        ins = [rng.uniform(-3, 3, (m, n)).astype(dtype) for _ in range(3)]
    else:
        ins = [rng.integers(-1000, 1000, (m, n)).astype(dtype) for _ in range(3)]
    out = np.full((m, n), np.nan if is_float else -7, dtype)
    make_kernel(tree, 3)[(1,)](out, *ins, M=m, N=n, L=layout, num_warps=num_warps)
    with np.errstate(all="ignore"):
        want = eval_tree(tree, ins, "np")
    want = np.asarray(want).astype(dtype)
    if is_float:
        tol = 2e-2 if dtype == np.float16 else 1e-5
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol, err_msg=str(tree))
    else:
        np.testing.assert_array_equal(out, want, err_msg=str(tree))

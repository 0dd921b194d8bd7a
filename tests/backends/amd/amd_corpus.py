"""Kernels the AMD backend must emit, assemble and link for every target.

Layouts are written against ``gl.threads_per_warp()`` (64 on CDNA, 32 on RDNA3), so
each kernel traces for every target. ``CORPUS`` lists (name, kernel, argument specs,
constexprs, num_warps)."""
from __future__ import annotations

import gluon_trace as gt
from gluon_trace import language as gl

f32, i32 = gl.float32, gl.int32
P = gl.pointer


def blocked1d(spt=1, warps=4):
    return gl.BlockedLayout([spt], [gl.threads_per_warp()], [warps], [0])


def blocked2d(warps=4):
    tpw = gl.threads_per_warp()
    return gl.BlockedLayout([1, 4], [tpw // 8, 8], [warps, 1], [1, 0])


@gt.jit
def add_kernel(out_ptr, a_ptr, b_ptr, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=blocked1d(4))
    mask = offs < n
    a = gl.load(a_ptr + offs, mask=mask, other=0.0)
    b = gl.load(b_ptr + offs, mask=mask)
    gl.store(out_ptr + offs, a + b * 2.0, mask=mask)


@gt.jit
def math_kernel(out_ptr, x_ptr, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=blocked1d(2))
    mask = offs < n
    x = gl.load(x_ptr + offs, mask=mask, other=1.0)
    y = gl.exp(x) + gl.log(gl.abs(x) + 1.0) + gl.sqrt(gl.abs(x)) + gl.exp2(x) + gl.log2(x * x + 1.0)
    y = y + gl.sin(x) * gl.cos(x) + gl.rsqrt(x * x + 1.0) + gl.erf(x) + gl.floor(x) - gl.ceil(x)
    y = y + x / (x * x + 1.0) + gl.maximum(x, 0.5) - gl.minimum(x, -0.5) + gl.fma(x, x, 1.0)
    y = gl.where(x > 0.0, y, -y) + (x % 1.5)
    gl.store(out_ptr + offs, y, mask=mask)


@gt.jit
def int_kernel(out_ptr, x_ptr, y_ptr, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=blocked1d(1))
    mask = offs < n
    x = gl.load(x_ptr + offs, mask=mask, other=1)
    y = gl.load(y_ptr + offs, mask=mask, other=1)
    r = x // y + x % y + (x << 3) + (x >> 2) + (x & y) + (x | y) + (x ^ y) - gl.maximum(x, y)
    r = r * 3 + gl.minimum(x, y) + gl.abs(x) + (-x) + (~x) + gl.where(x < y, x, y)
    gl.store(out_ptr + offs, r, mask=mask)


@gt.jit
def dtype_kernel(out_h, out_b, out_d, out_c, out_u, x_h, x_b, x_d, x_c, x_u, n, BLOCK: gl.constexpr):
    """float16, bfloat16, float64, int8, uint8 and int64 arithmetic and casts."""
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=blocked1d(1))
    mask = offs < n
    h = gl.load(x_h + offs, mask=mask, other=0.0)
    b = gl.load(x_b + offs, mask=mask, other=0.0)
    d = gl.load(x_d + offs, mask=mask, other=0.0)
    c = gl.load(x_c + offs, mask=mask, other=0)
    u = gl.load(x_u + offs, mask=mask, other=0)
    gl.store(out_h + offs, h * h + gl.exp(h) + b.to(gl.float16), mask=mask)
    gl.store(out_b + offs, b * 2.0 + h.to(gl.bfloat16) - gl.sqrt(gl.abs(b)), mask=mask)
    wide = offs.to(gl.int64) * 3 + c.to(gl.int64)
    gl.store(out_d + offs, d * d / (d + 3.0) + gl.sqrt(gl.abs(d)) + wide.to(gl.float64), mask=mask)
    gl.store(out_c + offs, c * 3 + (c >> 1) + u.to(gl.int8), mask=mask)
    gl.store(out_u + offs, u + c.to(gl.uint8) + (d > 0.0).to(gl.uint8), mask=mask)


@gt.jit
def cast_kernel(out_i, out_f, out_l, x_ptr, i_ptr, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=blocked1d(1))
    mask = offs < n
    x = gl.load(x_ptr + offs, mask=mask, other=0.0)
    i = gl.load(i_ptr + offs, mask=mask, other=0)
    gl.store(out_i + offs, x.to(gl.int32) + i.to(gl.float32).to(gl.int32) +
             x.to(gl.int32, bitcast=True), mask=mask)
    gl.store(out_f + offs, i.to(gl.float32) + x.to(gl.uint32).to(gl.float32), mask=mask)
    gl.store(out_l + offs, x.to(gl.int64) + i.to(gl.int64) * i.to(gl.int64), mask=mask)


@gt.jit
def scalar_kernel(out_ptr, x_ptr, alpha, k, n):
    """Scalar arguments, scalar loads/stores and uniform arithmetic."""
    pid = gl.program_id(0)
    v = gl.load(x_ptr + pid)
    w = v * alpha + (k * pid + n // 3).to(gl.float32)
    gl.store(out_ptr + pid, w)
    gl.store(out_ptr + pid + gl.num_programs(0), (pid % 7).to(gl.float32))


@gt.jit
def tile2d_kernel(out_ptr, x_ptr, bias_ptr, M, N, stride, BM: gl.constexpr, BN: gl.constexpr):
    L = blocked2d()
    rows = gl.program_id(0) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, L))
    r2 = gl.expand_dims(rows, 1)
    c2 = gl.expand_dims(cols, 0)
    mask = (r2 < M) & (c2 < N)
    x = gl.load(x_ptr + r2 * stride + c2, mask=mask, other=0.0)
    bias = gl.load(bias_ptr + cols, mask=cols < N, other=0.0)
    y = x + gl.expand_dims(bias, 0)
    gl.store(out_ptr + r2 * stride + c2, y, mask=mask)


@gt.jit
def reduce_kernel(out0, out1, x_ptr, M, N, BM: gl.constexpr, BN: gl.constexpr):
    """Sums along each axis of a 2-D tile."""
    L = blocked2d()
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, L))
    r2, c2 = gl.expand_dims(rows, 1), gl.expand_dims(cols, 0)
    mask = (r2 < M) & (c2 < N)
    x = gl.load(x_ptr + r2 * N + c2, mask=mask, other=0.0)
    s0 = gl.sum(x, axis=0)
    s1 = gl.max(x, axis=1)
    gl.store(out0 + cols, s0, mask=cols < N)
    gl.store(out1 + rows, s1, mask=rows < M)


@gt.jit
def argmax_kernel(out_ptr, x_ptr, n, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=blocked1d(2))
    row = gl.program_id(0)
    x = gl.load(x_ptr + row * n + offs, mask=offs < n, other=-float("inf"))
    gl.store(out_ptr + row, gl.argmax(x, axis=0))


@gt.jit
def cumsum_kernel(out_ptr, x_ptr, n, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=blocked1d(2))
    x = gl.load(x_ptr + offs, mask=offs < n, other=0.0)
    gl.store(out_ptr + offs, gl.cumsum(x, axis=0), mask=offs < n)


@gt.jit
def convert_kernel(out_ptr, x_ptr, M, N, BM: gl.constexpr, BN: gl.constexpr):
    """Load row-major, convert to a column-major layout, transpose-store."""
    L = blocked2d()
    T = gl.BlockedLayout([4, 1], [8, gl.threads_per_warp() // 8], [1, 4], [0, 1])
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, L))
    r2, c2 = gl.expand_dims(rows, 1), gl.expand_dims(cols, 0)
    x = gl.load(x_ptr + r2 * N + c2, mask=(r2 < M) & (c2 < N), other=0.0)
    y = gl.convert_layout(x, T)
    rows_t = gl.arange(0, BM, layout=gl.SliceLayout(1, T))
    cols_t = gl.arange(0, BN, layout=gl.SliceLayout(0, T))
    rt, ct = gl.expand_dims(rows_t, 1), gl.expand_dims(cols_t, 0)
    gl.store(out_ptr + ct * M + rt, y, mask=(rt < M) & (ct < N))


@gt.jit
def loop_kernel(out_ptr, x_ptr, n_cols, BLOCK: gl.constexpr):
    L = blocked1d(1)
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=L)
    acc = gl.zeros([BLOCK], gl.float32, layout=L)
    p = x_ptr + row * n_cols
    for start in gl.range(0, n_cols, BLOCK):
        x = gl.load(p + cols, mask=start + cols < n_cols, other=0.0)
        acc += x
        p += BLOCK
    s = gl.sum(acc, axis=0)
    with gl.if_(row == 0):
        s = s * 2.0
    with gl.else_():
        s = s + 1.0
    gl.store(out_ptr + row, s)


@gt.jit
def atomic_kernel(hist_ptr, sum_ptr, cnt_ptr, x_ptr, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=blocked1d(1))
    mask = offs < n
    x = gl.load(x_ptr + offs, mask=mask, other=0)
    gl.atomic_add(hist_ptr + (x & 15), 1, mask=mask)
    gl.atomic_max(sum_ptr + 1, x.to(gl.float32), mask=mask)
    gl.atomic_add(sum_ptr, x.to(gl.float32), mask=mask)
    old = gl.atomic_add(cnt_ptr, 1)
    gl.atomic_cas(cnt_ptr + 1, old, old + 1)
    gl.atomic_xchg(cnt_ptr + 2, gl.program_id(0))


@gt.jit
def softmax_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: gl.constexpr):
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=blocked1d(4))
    mask = cols < n_cols
    x = gl.load(in_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    x = x - gl.max(x, axis=0)
    e = gl.exp(x)
    gl.store(out_ptr + row * stride + cols, e / gl.sum(e, axis=0), mask=mask)


@gt.jit
def layernorm_kernel(out_ptr, x_ptr, w_ptr, b_ptr, n_cols, eps, BLOCK: gl.constexpr):
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=blocked1d(2))
    mask = cols < n_cols
    x = gl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean = gl.sum(x, axis=0) / n_cols.to(gl.float32)
    xc = gl.where(mask, x - mean, 0.0)
    var = gl.sum(xc * xc, axis=0) / n_cols.to(gl.float32)
    rstd = 1.0 / gl.sqrt(var + eps)
    w = gl.load(w_ptr + cols, mask=mask, other=0.0)
    b = gl.load(b_ptr + cols, mask=mask, other=0.0)
    gl.store(out_ptr + row * n_cols + cols, xc * rstd * w + b, mask=mask)


CORPUS = [
    ("add", add_kernel, [P(f32), P(f32), P(f32), i32], dict(BLOCK=1024), 4),
    ("math", math_kernel, [P(f32), P(f32), i32], dict(BLOCK=512), 4),
    ("int", int_kernel, [P(i32), P(i32), P(i32), i32], dict(BLOCK=256), 4),
    ("dtypes", dtype_kernel, [P(gl.float16), P(gl.bfloat16), P(gl.float64), P(gl.int8), P(gl.uint8),
                              P(gl.float16), P(gl.bfloat16), P(gl.float64), P(gl.int8), P(gl.uint8),
                              i32], dict(BLOCK=256), 4),
    ("casts", cast_kernel, [P(i32), P(f32), P(gl.int64), P(f32), P(i32), i32], dict(BLOCK=256), 4),
    ("scalar", scalar_kernel, [P(f32), P(f32), f32, i32, i32], {}, 4),
    ("tile2d", tile2d_kernel, [P(f32), P(f32), P(f32), i32, i32, i32], dict(BM=32, BN=32), 4),
    ("reduce", reduce_kernel, [P(f32), P(f32), P(f32), i32, i32], dict(BM=32, BN=64), 4),
    ("argmax", argmax_kernel, [P(i32), P(f32), i32], dict(BLOCK=512), 4),
    ("cumsum", cumsum_kernel, [P(f32), P(f32), i32], dict(BLOCK=256), 4),
    ("convert", convert_kernel, [P(f32), P(f32), i32, i32], dict(BM=32, BN=32), 4),
    ("loop", loop_kernel, [P(f32), P(f32), i32], dict(BLOCK=256), 4),
    ("atomic", atomic_kernel, [P(i32), P(f32), P(i32), P(i32), i32], dict(BLOCK=256), 4),
    ("softmax", softmax_kernel, [P(f32), P(f32), i32, i32], dict(BLOCK=1024), 4),
    ("layernorm", layernorm_kernel, [P(f32), P(f32), P(f32), P(f32), i32, f32], dict(BLOCK=512), 4),
]

"""Kernels every NVIDIA test runs: emitted and assembled for each target (test_ptx.py),
and run on the GPU against the interpreter (test_gpu.py).

A case builds fresh random arguments from an rng: ``Arr`` marks an array argument (numpy
data plus its gl dtype, so bfloat16 can be described), other arguments are ints/floats.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import gluon_trace as gt
from gluon_trace import dtypes as dt
from gluon_trace import language as gl


@dataclass
class Arr:
    data: np.ndarray          # float32 data for bfloat16
    dtype: dt.dtype
    out: bool = False         # written by the kernel only: poisoned before each run

    def storage(self) -> np.ndarray:
        """A fresh copy as the bytes memory holds (bfloat16 as its bits)."""
        if self.dtype.name == "bfloat16":
            return dt.f32_to_bf16_bits(self.data)
        return self.data.copy()

    def spec(self):
        return gl.pointer(self.dtype)


@dataclass
class Case:
    name: str
    kernel: object
    make: Callable            # rng -> list of args
    grid: tuple
    outputs: tuple            # argument indices written by the kernel
    kw: dict = field(default_factory=dict)   # constexprs and launch options
    rtol: float | None = None
    atol: float | None = None
    exact_ints: bool = True
    order_free: bool = False  # outputs compared as sorted (atomics returning old values)


def arr(rng, shape, dtype, lo=-4.0, hi=4.0, nonzero=False):
    t = dtype
    if t.is_bool:
        return Arr(rng.random(shape) < 0.5, t)
    if t.is_int:
        info = np.iinfo(t.np)
        a = rng.integers(max(info.min, -100 if lo < 0 else 0), min(info.max, 100), size=shape, endpoint=True)
        if nonzero:
            a[a == 0] = 1
        return Arr(a.astype(t.np), t)
    a = rng.uniform(lo, hi, size=shape)
    if nonzero:
        a = np.where(np.abs(a) < 0.25, 0.5, a)
    if t.name == "bfloat16":
        return Arr(dt.round_bf16(a.astype(np.float32)), t)
    return Arr(a.astype(t.np), t)


def empty(shape, dtype):
    return Arr(np.zeros(shape, dtype=np.float32 if dtype.name == "bfloat16" else dtype.np), dtype, out=True)


L1 = gl.BlockedLayout([4], [32], [4], [0])
L1_1 = gl.BlockedLayout([1], [32], [4], [0])
L1_8 = gl.BlockedLayout([8], [32], [4], [0])
L2_ROW = gl.BlockedLayout([1, 4], [4, 8], [2, 2], [1, 0])
L2_COL = gl.BlockedLayout([4, 1], [8, 4], [2, 2], [0, 1])
L2_WARPS_N = gl.BlockedLayout([1, 4], [1, 32], [1, 4], [1, 0])   # warps split the columns
L2_WARPS_M = gl.BlockedLayout([1, 2], [8, 4], [4, 1], [1, 0])   # warps split the rows
L2_SMALL = gl.BlockedLayout([1, 1], [4, 8], [2, 2], [1, 0])      # tiles larger than the layout


# -- kernels --------------------------------------------------------------------------------

@gt.jit
def copy_k(out, inp, n, BLOCK: gl.constexpr, L: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    m = offs < n
    gl.store(out + offs, gl.load(inp + offs, mask=m), mask=m)


@gt.jit
def add_k(out, a, b, n, BLOCK: gl.constexpr, L: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    m = offs < n
    gl.store(out + offs, gl.load(a + offs, mask=m) + gl.load(b + offs, mask=m), mask=m)


_BIN = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y, "floordiv": lambda x, y: x // y, "mod": lambda x, y: x % y,
    "max": lambda x, y: gl.maximum(x, y), "min": lambda x, y: gl.minimum(x, y),
    "and": lambda x, y: x & y, "or": lambda x, y: x | y, "xor": lambda x, y: x ^ y,
    "shl": lambda x, y: x << y, "shr": lambda x, y: x >> y,
    "lt": lambda x, y: x < y, "le": lambda x, y: x <= y, "gt": lambda x, y: x > y,
    "ge": lambda x, y: x >= y, "eq": lambda x, y: x == y, "ne": lambda x, y: x != y,
    "fdiv": lambda x, y: gl.fdiv(x, y),
}


@gt.jit
def binop_k(out, a, b, n, OP: gl.constexpr, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L1)
    m = offs < n
    x = gl.load(a + offs, mask=m)
    y = gl.load(b + offs, mask=m)
    gl.store(out + offs, _BIN[OP](x, y), mask=m)


_UN = {
    "exp": gl.exp, "exp2": gl.exp2, "log": gl.log, "log2": gl.log2, "sqrt": gl.sqrt,
    "rsqrt": gl.rsqrt, "sin": gl.sin, "cos": gl.cos, "erf": gl.erf, "floor": gl.floor,
    "ceil": gl.ceil, "abs": gl.abs, "neg": lambda x: -x, "not": lambda x: ~x,
}


@gt.jit
def unary_k(out, a, n, OP: gl.constexpr, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L1)
    m = offs < n
    gl.store(out + offs, _UN[OP](gl.load(a + offs, mask=m)), mask=m)


@gt.jit
def cast_k(out, a, n, TO: gl.constexpr, BITCAST: gl.constexpr, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L1)
    m = offs < n
    gl.store(out + offs, gl.load(a + offs, mask=m).to(TO, bitcast=BITCAST), mask=m)


@gt.jit
def fma_where_k(out, a, b, c, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L1_1)
    m = offs < n
    x = gl.load(a + offs, mask=m, other=1.0)
    y = gl.load(b + offs, mask=m, other=2.0)
    z = gl.load(c + offs, mask=m, other=3.0)
    r = gl.fma(x, y, z)
    r = gl.where(x > 0, r, gl.maximum(y, z) - 1.0)
    gl.store(out + offs, r, mask=m)


@gt.jit
def masked_other_k(out, a, n, BLOCK: gl.constexpr):
    """Every lane stores (no mask on the store): masked-off loads read `other` or 0."""
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L1)
    m = offs < n
    x = gl.load(a + offs, mask=m, other=-7.0)
    y = gl.load(a + offs, mask=m)
    gl.store(out + offs, x + y * 2.0)


@gt.jit
def bias2d_k(out, x, rb, cb, M, N, stride, BM: gl.constexpr, BN: gl.constexpr, L: gl.constexpr):
    rm = gl.program_id(0) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, L))
    rn = gl.program_id(1) * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, L))
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * stride + rn[None, :]
    v = gl.load(x + offs, mask=mask, other=0.0)
    r = gl.load(rb + rm, mask=rm < M, other=0.0)
    c = gl.load(cb + rn, mask=rn < N, other=0.0)
    gl.store(out + offs, v + r[:, None] * 2.0 + c[None, :], mask=mask)


_RED = {"sum": gl.sum, "max": gl.max, "min": gl.min}


@gt.jit
def reduce2d_k(out, x, stride, M: gl.constexpr, N: gl.constexpr, AXIS: gl.constexpr, OP: gl.constexpr,
               L: gl.constexpr):
    rm = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    rn = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    v = gl.load(x + rm[:, None] * stride + rn[None, :])
    r = _RED[OP](v, axis=AXIS)
    if AXIS == 0:
        gl.store(out + rn, r)
    else:
        gl.store(out + rm, r)


@gt.jit
def reduce1d_k(out, x, n, BLOCK: gl.constexpr, OP: gl.constexpr, L: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=L)
    v = gl.load(x + offs, mask=offs < n, other=0)
    gl.store(out + gl.program_id(0), _RED[OP](v, axis=0))


@gt.jit
def argmax_k(out, x, stride, M: gl.constexpr, N: gl.constexpr, L: gl.constexpr):
    rm = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    rn = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    v = gl.load(x + rm[:, None] * stride + rn[None, :])
    gl.store(out + rm, gl.argmax(v, axis=1))
    gl.store(out + M + rn, gl.argmin(v, axis=0))


@gt.jit
def cumsum1d_k(out, x, BLOCK: gl.constexpr, REVERSE: gl.constexpr, L: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=L)
    gl.store(out + offs, gl.cumsum(gl.load(x + offs), axis=0, reverse=REVERSE))


@gt.jit
def cumsum2d_k(out, x, M: gl.constexpr, N: gl.constexpr, AXIS: gl.constexpr, REVERSE: gl.constexpr,
               L: gl.constexpr):
    rm = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    rn = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    offs = rm[:, None] * N + rn[None, :]
    gl.store(out + offs, gl.cumsum(gl.load(x + offs), axis=AXIS, reverse=REVERSE))


@gt.jit
def convert_k(out, x, M: gl.constexpr, N: gl.constexpr, A: gl.constexpr, B: gl.constexpr):
    rm = gl.arange(0, M, layout=gl.SliceLayout(1, A))
    rn = gl.arange(0, N, layout=gl.SliceLayout(0, A))
    v = gl.load(x + rm[:, None] * N + rn[None, :])
    w = gl.convert_layout(v * 3.0, B)
    sm = gl.arange(0, M, layout=gl.SliceLayout(1, B))
    sn = gl.arange(0, N, layout=gl.SliceLayout(0, B))
    gl.store(out + sm[:, None] * N + sn[None, :], w)


@gt.jit
def trans_k(out, x, M: gl.constexpr, N: gl.constexpr, L: gl.constexpr):
    rm = gl.arange(0, M, layout=gl.SliceLayout(1, L))
    rn = gl.arange(0, N, layout=gl.SliceLayout(0, L))
    v = gl.load(x + rm[:, None] * N + rn[None, :])
    t = gl.convert_layout(gl.permute(v, (1, 0)), L)
    tm = gl.arange(0, N, layout=gl.SliceLayout(1, L))
    tn = gl.arange(0, M, layout=gl.SliceLayout(0, L))
    gl.store(out + tm[:, None] * M + tn[None, :], t)
    r = gl.reshape(v, [M * N])
    gl.store(out + M * N + gl.convert_layout(gl.arange(0, M * N, layout=L1), r.layout), r)


@gt.jit
def loop_k(out, x, n_cols, BLOCK: gl.constexpr):
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=L1_1)
    acc = gl.zeros([BLOCK], gl.float32, layout=L1_1)
    mx = gl.full([BLOCK], -float("inf"), gl.float32, layout=L1_1)
    p = x + row * n_cols
    for start in gl.range(0, n_cols, BLOCK):
        v = gl.load(p + cols, mask=start + cols < n_cols, other=0.0)
        acc += v
        mx = gl.maximum(mx, v)
        p += BLOCK
    k = gl.full([], 0, gl.int32)
    for i in gl.range(n_cols, 0, -3):  # a negative step
        k += i
    gl.store(out + row * 3, gl.sum(acc, axis=0))
    gl.store(out + row * 3 + 1, gl.max(mx, axis=0))
    gl.store(out + row * 3 + 2, k.to(gl.float32))


@gt.jit
def ifelse_k(out, x, n, BLOCK: gl.constexpr):
    pid = gl.program_id(0)
    offs = pid * BLOCK + gl.arange(0, BLOCK, layout=L1)
    m = offs < n
    v = gl.load(x + offs, mask=m, other=0.0)
    s = gl.sum(v, axis=0)
    with gl.if_(pid % 2 == 0):
        v = v * 2.0
        s = s + 1.0
    with gl.else_():
        v = v - gl.max(v, axis=0)
    with gl.if_(s > 1e9):
        v = v * 0.0
    gl.store(out + offs, v + s, mask=m)


@gt.jit
def atomic_k(counts, fmax, imax, x, n, BLOCK: gl.constexpr):
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L1)
    m = offs < n
    v = gl.load(x + offs, mask=m, other=0.0)
    bucket = (gl.abs(v) * 4.0).to(gl.int32) % 16
    gl.atomic_add(counts + bucket, 1, mask=m)
    gl.atomic_max(fmax + bucket, v, mask=m)
    gl.atomic_min(imax + bucket, (v * 1000.0).to(gl.int32), mask=m)


@gt.jit
def atomic_old_k(ctr, olds, flags, slots):
    pid = gl.program_id(0)
    old = gl.atomic_add(ctr, 1)
    gl.store(olds + pid, old)
    prev = gl.atomic_cas(flags + pid, 0, pid + 1)
    gl.store(olds + gl.num_programs(0) + pid, prev)
    offs = gl.arange(0, 128, layout=L1_1)
    x = gl.atomic_xchg(slots + pid * 4 + offs, offs * 0 + pid, mask=offs < 4)
    gl.store(olds + 2 * gl.num_programs(0) + pid * 4 + offs, x, mask=offs < 4)


@gt.jit
def softmax_k(out, x, stride, n_cols, BLOCK: gl.constexpr, L: gl.constexpr):
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=L)
    mask = cols < n_cols
    v = gl.load(x + row * stride + cols, mask=mask, other=-float("inf"))
    v = v - gl.max(v, axis=0)
    e = gl.exp(v)
    gl.store(out + row * stride + cols, e / gl.sum(e, axis=0), mask=mask)


@gt.jit
def layernorm_k(out, x, w, b, mean_out, rstd_out, stride, N, eps, BLOCK: gl.constexpr, L: gl.constexpr):
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=L)
    m = cols < N
    xv = gl.load(x + row * stride + cols, mask=m, other=0.0).to(gl.float32)
    mean = gl.sum(xv, axis=0) / N
    d = gl.where(m, xv - mean, 0.0)
    var = gl.sum(d * d, axis=0) / N
    rstd = gl.rsqrt(var + eps)
    wv = gl.load(w + cols, mask=m, other=0.0).to(gl.float32)
    bv = gl.load(b + cols, mask=m, other=0.0).to(gl.float32)
    y = d * rstd * wv + bv
    gl.store(out + row * stride + cols, y.to(gl.float16), mask=m)
    gl.store(mean_out + row, mean)
    gl.store(rstd_out + row, rstd)


@gt.jit
def scalar_k(out, x, k, f):
    """Scalar loads, stores and arithmetic (one thread stores)."""
    pid = gl.program_id(0)
    v = gl.load(x + pid)
    r = v * f + (pid * k).to(gl.float32)
    gl.store(out + pid, r)


@gt.jit
def print_k(x, n):
    offs = gl.arange(0, 8, layout=gl.BlockedLayout([1], [32], [4], [0]))
    v = gl.load(x + offs, mask=offs < n, other=0.0)
    gl.device_print("v=", v)
    gl.device_print("n=", n)


# -- cases ----------------------------------------------------------------------------------

F16, BF16, F32, F64 = dt.float16, dt.bfloat16, dt.float32, dt.float64
I8, I16, I32, I64, U8, U16, U32, U64, B1 = (dt.int8, dt.int16, dt.int32, dt.int64, dt.uint8, dt.uint16,
                                          dt.uint32, dt.uint64, dt.int1)
FLOATS = (F16, BF16, F32, F64)
INTS = (I8, I16, I32, I64, U8, U16, U32, U64)


def _copy(t, n=1000, L=L1, block=512):
    return Case(f"copy_{t}" + ("" if L is L1 else f"_{_lname(L)}"), copy_k, lambda r: [empty(n, t), arr(r, n, t), n], (math.ceil(n / block),), (0,),
                dict(BLOCK=block, L=L))


def _binop(op, t, n=777):
    def make(r):
        a = arr(r, n, t)
        b = arr(r, n, t, nonzero=op in ("div", "fdiv", "floordiv", "mod"))
        if op in ("shl", "shr"):
            b = Arr(r.integers(0, t.bits + 3 if t.bits <= 32 else 70, size=n).astype(t.np), t)
        if op == "mod" and t.is_int and t.is_signed:
            b.data[b.data == -1] = 3
        if op == "floordiv" and t.is_int and t.is_signed:
            b.data[b.data == -1] = 3
        out_t = B1 if op in ("lt", "le", "gt", "ge", "eq", "ne") else t
        return [empty(n, out_t), a, b, n]
    return Case(f"binop_{op}_{t}", binop_k, make, (2,), (0,), dict(OP=op, BLOCK=512),
                rtol=1e-6 if op == "fdiv" else None)


def _unary(op, t, n=600):
    lo, hi = {"log": (0.01, 50.0), "log2": (0.01, 50.0), "sqrt": (0.0, 50.0), "rsqrt": (0.05, 50.0),
              "exp": (-20.0, 20.0), "exp2": (-20.0, 20.0), "sin": (-20.0, 20.0), "cos": (-20.0, 20.0),
              "erf": (-3.0, 3.0)}.get(op, (-8.0, 8.0))
    approx = op in ("exp", "exp2", "log", "log2", "rsqrt", "sin", "cos", "erf")
    rtol = {16: 2e-3, 32: 1e-5, 64: 1e-5}[t.bits] if approx else None
    atol = 2e-6 if approx else None
    if t.bits == 64 and approx:  # float64: gluon_trace.decompose, within a few ulp
        rtol, atol = 1e-13, 1e-300
    return Case(f"unary_{op}_{t}", unary_k, lambda r: [empty(n, t), arr(r, n, t, lo, hi), n], (2,), (0,),
                dict(OP=op, BLOCK=512), rtol=rtol, atol=atol)


def _cast(src, to, bitcast=False, n=520):
    lo, hi = (-100.0, 100.0) if not (to.is_int and not to.is_signed) else (0.0, 200.0)
    return Case(f"cast_{src}_{to}{'_bits' if bitcast else ''}", cast_k,
                lambda r: [empty(n, to), arr(r, n, src, lo, hi), n], (2,), (0,),
                dict(TO=to, BITCAST=bitcast, BLOCK=512))


def _reduce2d(op, axis, L, M=32, N=64, t=F32):
    return Case(f"reduce2d_{op}_ax{axis}_{_lname(L)}_{t}", reduce2d_k,
                lambda r: [empty(N if axis == 0 else M, t), arr(r, (M, N), t), N], (1,), (0,),
                dict(M=M, N=N, AXIS=axis, OP=op, L=L), rtol=1e-5, atol=1e-5)


def _lname(L):
    for k, v in globals().items():
        if v is L and k.startswith("L"):
            return k
    return "L" + "x".join(map(str, L.size_per_thread)) + f"w{L.num_warps}"


def cases() -> list[Case]:
    out = []
    for t in (F32, F16, BF16, F64, I8, U8, B1, I16, I64):
        out.append(_copy(t))
    out.append(_copy(F32, L=L1_8, block=1024, n=4096))
    out.append(_copy(F16, L=L1_8, block=1024, n=4096))
    out.append(_copy(I8, L=gl.BlockedLayout([16], [32], [4], [0]), block=2048, n=4096))
    out.append(Case("add_f32", add_k, lambda r: [empty(4096, F32), arr(r, 4096, F32), arr(r, 4096, F32), 4096],
                    (8,), (0,), dict(BLOCK=512, L=L1)))
    for t in (F32, F16, BF16, F64):
        for op in ("add", "sub", "mul", "div", "max", "min", "mod", "lt", "le", "eq", "ne"):
            out.append(_binop(op, t))
    out.append(_binop("fdiv", F32))
    for t in (I8, I16, I32, I64, U8, U32, U64):
        for op in ("add", "sub", "mul", "floordiv", "mod", "max", "min", "and", "or", "xor", "shl", "shr",
                   "lt", "ge", "ne"):
            out.append(_binop(op, t))
    for op in ("and", "or", "xor", "eq", "lt"):
        out.append(_binop(op, B1))
    for t in (F32, F16, BF16, F64):
        for op in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "floor", "ceil",
                   "abs", "neg"):
            out.append(_unary(op, t))
    for t in (I8, I32, I64, U8):
        for op in ("abs", "neg", "not"):
            out.append(_unary(op, t))
    out.append(_unary("not", B1))
    for src, to in [(F32, F16), (F32, BF16), (F16, F32), (BF16, F32), (F16, BF16), (BF16, F16), (F64, F16),
                    (F64, BF16), (F32, F64), (F64, F32), (F32, I32), (F32, I8), (F32, U8), (F32, I64),
                    (F64, I32), (I32, F32), (I32, F16), (I32, BF16), (I64, F64), (U32, F32), (I8, I32),
                    (I32, I8), (U8, I32), (I32, U8), (I64, I32), (I32, I64), (U32, I64), (I8, U8),
                    (F32, B1), (I32, B1), (B1, F32), (B1, I32), (F16, F64), (I16, F16)]:
        out.append(_cast(src, to))
    for src, to in [(F32, I32), (I32, F32), (F16, I16), (I16, F16), (BF16, I16), (F64, I64), (U8, I8)]:
        out.append(_cast(src, to, bitcast=True))
    out.append(Case("fma_where_f32", fma_where_k,
                    lambda r: [empty(700, F32)] + [arr(r, 700, F32) for _ in range(3)] + [700], (2,), (0,),
                    dict(BLOCK=512)))
    out.append(Case("fma_where_f16", fma_where_k,
                    lambda r: [empty(700, F16)] + [arr(r, 700, F16) for _ in range(3)] + [700], (2,), (0,),
                    dict(BLOCK=512)))
    out.append(Case("masked_other", masked_other_k, lambda r: [empty(1024, F32), arr(r, 1000, F32), 1000],
                    (2,), (0,), dict(BLOCK=512)))
    for L in (L2_ROW, L2_COL, L2_SMALL, L2_WARPS_N):
        out.append(Case(f"bias2d_{_lname(L)}", bias2d_k,
                        lambda r: [empty((100, 72), F32), arr(r, (100, 72), F32), arr(r, 100, F32),
                                   arr(r, 72, F32), 100, 72, 72],
                        (4 if L is not L2_WARPS_N else 25, 2), (0,),
                        dict(BM=32 if L is not L2_WARPS_N else 4, BN=64, L=L)))
    for L in (L2_ROW, L2_COL, L2_WARPS_N, L2_WARPS_M, L2_SMALL):
        for axis in (0, 1):
            out.append(_reduce2d("sum", axis, L))
    for op in ("max", "min"):
        for axis in (0, 1):
            out.append(_reduce2d(op, axis, L2_WARPS_N))
    out.append(_reduce2d("sum", 1, L2_ROW, t=I32))
    out.append(_reduce2d("max", 0, L2_COL, t=F16))
    for L in (L1, L1_1, L1_8):
        out.append(Case(f"reduce1d_sum_{_lname(L)}", reduce1d_k, lambda r: [empty(1, F32), arr(r, 1000, F32), 1000],
                        (1,), (0,), dict(BLOCK=1024, OP="sum", L=L), rtol=1e-5, atol=1e-5))
    out.append(Case("reduce1d_max_i64", reduce1d_k, lambda r: [empty(1, I64), arr(r, 100, I64), 100],
                    (1,), (0,), dict(BLOCK=128, OP="max", L=L1_1)))
    for L in (L2_ROW, L2_WARPS_N, L2_COL):
        out.append(Case(f"argmax_{_lname(L)}", argmax_k,
                        lambda r: [empty(32 + 64, I32),
                                   Arr(r.integers(-5, 5, size=(32, 64)).astype(np.float32), F32), 64],
                        (1,), (0,), dict(M=32, N=64, L=L)))
    for L in (L1, L1_1, L1_8, gl.BlockedLayout([2], [32], [2], [0])):
        for rev in (False, True):
            out.append(Case(f"cumsum1d_{_lname(L)}_{'rev' if rev else 'fwd'}", cumsum1d_k,
                            lambda r: [empty(1024, I32), arr(r, 1024, I32)], (1,), (0,),
                            dict(BLOCK=1024, REVERSE=rev, L=L, num_warps=L.num_warps)))
    # the GPU scan (in-thread, then lanes, then warps) and the interpreter's add in different
    # orders: prefix sums of 512 normals reach ~30, where f32 rounding differences of a few
    # hundred ulp accumulate (an H200 run saw 1e-5 exceeded)
    out.append(Case("cumsum1d_f32", cumsum1d_k, lambda r: [empty(512, F32), arr(r, 512, F32)], (1,), (0,),
                    dict(BLOCK=512, REVERSE=False, L=L1), rtol=1e-5, atol=2e-4))
    for L in (L2_ROW, L2_COL, L2_WARPS_N, L2_WARPS_M):
        for axis in (0, 1):
            for rev in (False, True):
                out.append(Case(f"cumsum2d_{_lname(L)}_ax{axis}_{'rev' if rev else 'fwd'}", cumsum2d_k,
                                lambda r: [empty((32, 64), I32), arr(r, (32, 64), I32)], (1,), (0,),
                                dict(M=32, N=64, AXIS=axis, REVERSE=rev, L=L)))
    for A, B in [(L2_ROW, L2_COL), (L2_COL, L2_ROW), (L2_ROW, L2_WARPS_N), (L2_WARPS_M, L2_SMALL)]:
        out.append(Case(f"convert_{_lname(A)}_{_lname(B)}", convert_k,
                        lambda r: [empty((32, 64), F32), arr(r, (32, 64), F32)], (1,), (0,),
                        dict(M=32, N=64, A=A, B=B)))
    out.append(Case("convert_i8", convert_k, lambda r: [empty((32, 64), I8), arr(r, (32, 64), I8)], (1,), (0,),
                    dict(M=32, N=64, A=L2_ROW, B=L2_COL)))
    out.append(Case("trans", trans_k, lambda r: [empty(2 * 32 * 64, F32), arr(r, (32, 64), F32)], (1,), (0,),
                    dict(M=32, N=64, L=L2_ROW)))
    out.append(Case("loop", loop_k, lambda r: [empty(3 * 6, F32), arr(r, (6, 1000), F32), 1000], (6,), (0,),
                    dict(BLOCK=128), rtol=1e-5, atol=1e-5))
    out.append(Case("ifelse", ifelse_k, lambda r: [empty(2000, F32), arr(r, 2000, F32), 2000], (4,), (0,),
                    dict(BLOCK=512), rtol=1e-5, atol=1e-4))
    out.append(Case("atomics", atomic_k,
                    lambda r: [Arr(np.zeros(16, np.int32), I32), Arr(np.full(16, -1e30, np.float32), F32),
                               Arr(np.full(16, 1 << 30, np.int32), I32), arr(r, 3000, F32), 3000],
                    (6,), (0, 1, 2), dict(BLOCK=512)))
    out.append(Case("atomic_old", atomic_old_k,
                    lambda r: [Arr(np.zeros(1, np.int32), I32), empty(8 * 6, I32),
                               Arr(np.where(r.random(8) < 0.5, 0, 7).astype(np.int32), I32), arr(r, 32, I32)],
                    (8,), (0, 2, 3)))
    out.append(Case("atomic_old_order_free", atomic_old_k,
                    lambda r: [Arr(np.zeros(1, np.int32), I32), empty(8 * 6, I32),
                               Arr(np.zeros(8, np.int32), I32), arr(r, 32, I32)],
                    (8,), (1,), order_free=True))
    for L in (L1, L1_8):
        for n in (1000, 1024):
            out.append(Case(f"softmax_{_lname(L)}_{n}", softmax_k,
                            lambda r, n=n: [empty((8, 1024), F32), arr(r, (8, 1024), F32), 1024, n], (8,), (0,),
                            dict(BLOCK=1024, L=L), rtol=1e-5, atol=1e-6))
    out.append(Case("layernorm", layernorm_k,
                    lambda r: [empty((6, 1024), F16), arr(r, (6, 1024), F16), arr(r, 1000, F16),
                               arr(r, 1000, F16), empty(6, F32), empty(6, F32), 1024, 1000, 1e-5],
                    (6,), (0, 4, 5), dict(BLOCK=1024, L=L1_8), rtol=2e-3, atol=2e-3))
    out.append(Case("scalar", scalar_k, lambda r: [empty(4, F32), arr(r, 4, F32), 3, 0.5], (4,), (0,)))
    return out


def print_case() -> Case:
    return Case("print", print_k, lambda r: [arr(r, 8, F32), 8], (1,), ())

"""Runs a traced graph with numpy: the reference semantics of every op.

A graph is first compiled to a flat list of steps (one Python closure per op, operands
resolved to slots), then run once per program of the grid. Within a program every tile
op is one vectorized numpy call.

Semantics (the GPU backends match them bit for bit; README "Semantics" says the same):
- int1 (bool) arithmetic computes in int32, as Python's bool: True + True == 2, -True == -1;
  & | ^ ~, comparisons, maximum and minimum stay int1 (tracer's job, see language/tensor.py);
- integer ``//`` and ``%`` truncate toward zero (C, Triton); ``x // 0`` has all bits set (-1,
  or the unsigned maximum) and ``x % 0`` is x; integer arithmetic wraps;
- shifts by a negative amount or by the width or more shift everything out: 0, or for a
  signed ``>>`` the sign (-1 or 0); the amount is the operand's own type (int8 included);
- float ``%`` is C's ``fmod``, exact: the result has a's sign; NaN where a is inf or NaN or b
  is NaN or 0; a where b is inf;
- float16 rounds after every op; bfloat16 values are kept in float32 and rounded to
  bfloat16 after every op; ``fma`` rounds once, for every float type (see :func:`fma`);
- ``maximum``/``minimum`` return the non-NaN operand (PTX ``max.f32``, AMD ``v_max_f32``), so
  ``gl.max``/``gl.min`` reductions skip NaN; the sign of a zero result of maximum(+0, -0) is
  not specified; ``gl.sum`` propagates NaN and gives NaN for inf + -inf; ``!=`` is true for NaN;
- float -> int truncates toward zero and saturates at the target type's range; NaN -> 0
  (PTX ``cvt.rzi``); int -> float rounds to nearest even; int -> narrower int wraps;
- a masked-off lane of a load without ``other`` reads 0;
- atomics apply once per element (a layout's copies of it included), in row-major order;
  ``atomic_cas`` compares bit patterns (float -0.0 is not 0.0; int1 compares truth values);
- reductions combine adjacent pairs in a tree, keeping operand order (so an associative,
  non-commutative combine function gets the order it expects).
"""
from __future__ import annotations

import math
import time

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace import fp8
from gluon_trace.backend import rule_table
from gluon_trace.errors import InterpreterError
from gluon_trace.ir import Block, Graph

from .memory import Memory

RULES, rule = rule_table()


def fix(x, t: dt.dtype):
    """Bring a numpy result back to the IR dtype's exact value set."""
    x = np.asarray(x)
    if t.name == "bfloat16":
        if x.dtype.kind in "iu" and x.dtype.itemsize >= 4:
            x = _exact_f64(x)
        if x.dtype == np.float64:  # one rounding: through float32 rounded to odd
            x = _f32_round_odd(x)
        return dt.round_bf16(x)
    if t.is_fp8:
        return fp8.round_to(x, t.name)
    if x.dtype != t.np:
        return x.astype(t.np)
    return x


def _exact_f64(x):
    """Integers as float64 that round to float32 as the integers do: past 2**53 the low 12
    bits fold into one sticky bit (the float64 would round, and a rounding after it would
    be a second one)."""
    if x.dtype.itemsize == 8:
        with np.errstate(all="ignore"):
            big = (x >= 2 ** 53) | ((x < -(2 ** 53)) if x.dtype.kind == "i" else False)
        low = x & x.dtype.type(0xFFF)
        folded = (x & ~x.dtype.type(0xFFF)) | np.where(low != 0, x.dtype.type(0x800), x.dtype.type(0))
        x = np.where(big, folded, x)
    return x.astype(np.float64)


class Program:
    __slots__ = ("pid", "grid", "mem", "env", "sync", "tma_arrays", "strict", "barriers", "cluster", "rank")

    def __init__(self, pid, grid, mem, env, tma_arrays=None, strict=False, barriers=None):
        self.pid, self.grid, self.mem, self.env = pid, grid, mem, env
        self.sync = None  # shared memory and barriers (rules_memory.state), made on first use
        self.tma_arrays = tma_arrays  # id(TensorDescriptor) -> its tensor's storage array
        self.strict = strict  # the graph has async wgmmas: check no op reads a Pending value
        self.barriers = barriers  # the ops the backends put a barrier before (membar), checked
        self.cluster = None  # cluster.Cluster when the kernel runs in clusters of CTAs
        self.rank = 0  # this program's rank in its cluster


# -- element-wise ----------------------------------------------------------------------------

def _trunc_div(a, b):
    q = np.floor_divide(a, b)
    if a.dtype.kind == "i":
        r = np.remainder(a, b)
        q = q + ((r != 0) & ((a < 0) != (b < 0))).astype(q.dtype)
    return q


_BIN = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply,
    "maximum": np.fmax, "minimum": np.fmin,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal,
}


def _binary(fn):
    def run(p, op, a, b):
        return fix(fn(a, b), op.results[0].type.dtype)
    return run


for _n, _f in _BIN.items():
    RULES[_n] = _binary(_f)


@rule("div")
def _div(p, op, a, b):
    return fix(np.true_divide(a, b), op.results[0].type.dtype)


@rule("floordiv")
def _floordiv(p, op, a, b):
    q = _trunc_div(a, b)
    if a.dtype.kind in "iu":  # by 0: all bits set (PTX div's answer; C leaves it undefined)
        q = np.where(b == 0, np.array(-1).astype(a.dtype), q)
    return fix(q, op.results[0].type.dtype)


@rule("mod")
def _mod(p, op, a, b):
    r = np.fmod(a, b)
    if a.dtype.kind in "iu":  # by 0: a, so that a == (a // b) * b + a % b still holds
        r = np.where(b == 0, a, r)
    return fix(r, op.results[0].type.dtype)


def _shift_amount(b, bits):
    return np.where((b < 0) | (b >= bits), bits, b)


@rule("shl")
def _shl(p, op, a, b):
    t = op.results[0].type.dtype
    s = _shift_amount(b, t.bits)
    out = np.left_shift(a, np.minimum(s, t.bits - 1).astype(a.dtype))
    return fix(np.where(s >= t.bits, 0, out), t)


@rule("shr")
def _shr(p, op, a, b):
    t = op.results[0].type.dtype
    s = _shift_amount(b, t.bits)
    out = np.right_shift(a, np.minimum(s, t.bits - 1).astype(a.dtype))
    if t.is_signed:  # arithmetic: past the width only the sign remains
        return fix(np.where(s >= t.bits, np.right_shift(a, t.bits - 1), out), t)
    return fix(np.where(s >= t.bits, 0, out), t)


def _rsqrt(x):
    return 1.0 / np.sqrt(x)


_erf = np.frompyfunc(math.erf, 1, 1)

_UN = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "exp2": np.exp2, "log": np.log,
    "log2": np.log2, "sqrt": np.sqrt, "rsqrt": _rsqrt, "sin": np.sin, "cos": np.cos,
    "floor": np.floor, "ceil": np.ceil,
}


def _unary(fn):
    def run(p, op, a):
        return fix(fn(a), op.results[0].type.dtype)
    return run


for _n, _f in _UN.items():
    RULES[_n] = _unary(_f)

_SMALLEST_NORMAL32 = np.float32(2.0 ** -126)


@rule("exp2")
def _exp2(p, op, a):
    r = np.exp2(a)
    if op.attrs.get("ftz"):  # gl.exp2(x, ftz=True): results below float32's normals are zero
        r = np.where(np.abs(r) < _SMALLEST_NORMAL32, np.zeros_like(r), r)
    return fix(r, op.results[0].type.dtype)


@rule("not")
def _not(p, op, a):
    return fix(np.logical_not(a) if a.dtype == np.bool_ else np.invert(a), op.results[0].type.dtype)


@rule("erf")
def _erf_rule(p, op, a):
    return fix(np.asarray(_erf(a.astype(np.float64)), np.float64), op.results[0].type.dtype)


@rule("fma")
def _fma(p, op, a, b, c):
    return fma(a, b, c, op.results[0].type.dtype)


def fma(a, b, c, t: dt.dtype) -> np.ndarray:
    """``a * b + c`` rounded once to ``t``, as the hardware's fma instructions round.

    float16/bfloat16/float32: the product of two p-bit values is exact in float64; the sum is
    rounded to odd in float64 and then to nearest in ``t``, which is one rounding because
    53 >= 2p + 2 (Boldo & Melquiond, "Emulation of FMA and correctly rounded sums", 2008).
    bfloat16 (computed in float32 arrays) goes through float32 rounded to odd too (24 >= 18).
    float64: the same construction one level up (see ``_fma64``)."""
    a, b, c = (np.asarray(v) for v in (a, b, c))
    with np.errstate(all="ignore"):
        if t.name == "float64":
            return _fma64(a.astype(np.float64), b.astype(np.float64), c.astype(np.float64))
        wide = a.astype(np.float64) * b.astype(np.float64)
        s = _add_round_odd(wide, c.astype(np.float64))
        if t.name == "bfloat16":
            return dt.round_bf16(_f32_round_odd(s))
        return s.astype(t.np)


def _two_sum(x, y):
    s = x + y
    bv = s - x
    return s, (x - (s - bv)) + (y - bv)


def _add_round_odd(x, y):
    """x + y rounded to odd: when inexact, the neighbour with an odd last bit."""
    s, e = _two_sum(x, y)
    even = (s.view(np.int64) & 1) == 0
    nudge = (e != 0) & even & np.isfinite(s)
    return np.where(nudge, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)


def _f32_round_odd(x):
    f = x.astype(np.float32)
    even = (f.view(np.int32) & 1) == 0
    nudge = (f.astype(np.float64) != x) & even & np.isfinite(f)
    return np.where(nudge, np.nextafter(f, np.where(x > f, np.float32(np.inf), np.float32(-np.inf))), f)


_SPLIT = 2.0 ** 27 + 1  # Veltkamp: a 53-bit significand as two 26-bit halves


def _two_prod(a, b):
    """p + e == a * b exactly (Dekker), where nothing overflows or underflows."""
    p = a * b
    ta, tb = _SPLIT * a, _SPLIT * b
    ah, bh = ta - (ta - a), tb - (tb - b)
    al, bl = a - ah, b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _fma64(a, b, c):
    """Exact float64 fma: a*b = uh + ul exactly, c + uh = th + tl exactly, then
    RN(th + RO(tl + ul)) is the correctly rounded sum (Boldo & Melquiond, Theorem 6).
    Elements outside the exponent range where that holds (nothing there over- or
    underflows) are computed with exact rationals; a zero product or a non-finite operand
    gives what IEEE ``a*b + c`` gives, which is then the fma's answer too."""
    a, b, c = np.broadcast_arrays(a, b, c)
    shape = a.shape
    a, b, c = (np.ravel(v) for v in (a, b, c))
    out = a * b + c
    fa, fb, fc = np.abs(a), np.abs(b), np.abs(c)
    lo, hi = 2.0 ** -450, 2.0 ** 450
    fast = ((fa >= lo) & (fa <= hi) & (fb >= lo) & (fb <= hi)
            & ((fc == 0) | (fc >= 2.0 ** -900) & (fc <= 2.0 ** 1000)))
    uh, ul = _two_prod(a[fast], b[fast])
    th, tl = _two_sum(c[fast], uh)
    out[fast] = th + _add_round_odd(tl, ul)
    slow = np.isfinite(a) & np.isfinite(b) & np.isfinite(c) & (a != 0) & (b != 0) & ~fast
    for i in np.nonzero(slow)[0]:
        out[i] = _fma_rational(float(a[i]), float(b[i]), float(c[i]))
    # finite a and b: the exact product is finite, so an infinite c wins, even where
    # a*b rounded alone would overflow to the opposite infinity (IEEE's a*b + c gives NaN)
    inf_c = np.isfinite(a) & np.isfinite(b) & np.isinf(c)
    out[inf_c] = c[inf_c]
    return out.reshape(shape)


def _fma_rational(a: float, b: float, c: float) -> float:
    from fractions import Fraction
    x = Fraction(a) * Fraction(b) + Fraction(c)
    if x == 0:  # a*b and c cancel exactly: +0 under round-to-nearest
        return 0.0
    try:
        return float(x)  # int / int in CPython rounds correctly
    except OverflowError:
        return math.inf if x > 0 else -math.inf


@rule("where")
def _where(p, op, c, a, b):
    return np.where(c, a, b)


@rule("ptr_add")
def _ptr_add(p, op, ptr, off):
    size = op.operands[0].type.dtype.element.itemsize
    return ptr + off.astype(np.int64) * size


@rule("cast")
def _cast(p, op, x):
    src = op.operands[0].type.dtype
    to = op.attrs["dtype"]
    if op.attrs.get("bitcast"):
        from .memory import from_storage, to_storage
        raw = to_storage(x, src)
        return from_storage(np.asarray(raw).view(to.np_storage), to)
    if to.is_bool:
        return x != 0
    if src.is_floating and to.is_int:
        return _float_to_int(x, to)
    return fix(x, to)


def _float_to_int(x, to: dt.dtype):
    """Truncate toward zero, saturate at ``to``'s range, NaN -> 0: what PTX cvt.rzi and
    AMD v_cvt_*_f32 do in hardware (numpy's cast is undefined out of range)."""
    info = np.iinfo(to.np)
    t = np.trunc(np.asarray(x, np.float64))  # exact for every float16/32 value
    # float(info.max) rounds up to 2**63 / 2**64 for 64 bits: >= catches exactly the overflow
    big, small, nan = t >= float(info.max), t <= float(info.min), np.isnan(t)
    mid = np.where(big | small | nan, 0, t).astype(to.np)
    out = np.where(big, info.max, np.where(small, info.min, mid))
    return np.asarray(out, to.np)


@rule("hint")
def _hint(p, op, x):
    n = op.attrs.get("multiple_of")
    a = np.asarray(x)
    if n is not None and (a % n).any():
        bad = a.flat[int(np.argmax((a % n != 0).ravel()))]
        notes = ()
        if a.ndim and a.shape[-1] > 1 and (np.diff(a, axis=-1) == 1).all() and not (a[..., 0] % n).any():
            # Triton's tutorials hint a base plus an arange; here the fact covers every element
            notes = ("gl.multiple_of states that every element is a multiple; for a base plus "
                     "consecutive offsets, hint the base: gl.multiple_of(base, n) + gl.arange(...)",)
        raise InterpreterError(f"gl.multiple_of({n}) claims a fact that is false at run time: "
                               f"{int(bad)} is not a multiple of {n} (program {p.pid})", op.loc, notes=notes)
    return x


# -- creation, shape, layout -------------------------------------------------------------------

@rule("const")
def _const(p, op):
    t = op.attrs["dtype"]
    return fix(np.array(op.attrs["value"], dtype=t.np if t.name != "bfloat16" else np.float32), t)


@rule("program_id")
def _pid(p, op):
    return np.int32(p.pid[op.attrs["axis"]])


@rule("num_programs")
def _nprog(p, op):
    return np.int32(p.grid[op.attrs["axis"]])


@rule("read_timer")
def _timer(p, op):
    return np.int64(time.perf_counter_ns())  # both clocks: the host's nanoseconds


@rule("arange")
def _arange(p, op):
    return np.arange(op.attrs["start"], op.attrs["end"], dtype=np.int32)


@rule("splat")
def _splat(p, op, x):
    return np.full(op.attrs["shape"], x, dtype=np.asarray(x).dtype)


@rule("broadcast")
def _broadcast(p, op, x):
    return np.broadcast_to(x, op.attrs["shape"])


@rule("expand_dims")
def _expand(p, op, x):
    return np.expand_dims(x, op.attrs["axis"])


@rule("convert_layout")
def _convert(p, op, x):
    return x


@rule("reshape")
def _reshape(p, op, x):
    return np.reshape(x, op.attrs["shape"])


@rule("permute")
def _permute(p, op, x):
    return np.transpose(x, op.attrs["dims"])



@rule("split")
def _split(p, op, x):
    return np.ascontiguousarray(x[..., 0]), np.ascontiguousarray(x[..., 1])


@rule("join")
def _join(p, op, a, b):
    return np.stack([a, b], axis=-1)

# -- memory --------------------------------------------------------------------------------

@rule("load")
def _load(p, op, ptr, *rest):
    elem = op.operands[0].type.dtype.element
    ptr = np.asarray(ptr)
    if not op.attrs.get("mask"):
        return p.mem.load(ptr, elem, op)
    mask = np.broadcast_to(rest[0], ptr.shape)
    other = rest[1] if op.attrs.get("other") else np.zeros((), elem.np)
    out = np.array(np.broadcast_to(other, ptr.shape), dtype=elem.np)
    if mask.any():
        out[mask] = p.mem.load(ptr[mask], elem, op)
    return out


@rule("store")
def _store(p, op, ptr, val, *rest):
    elem = op.operands[0].type.dtype.element
    ptr = np.asarray(ptr)
    val = np.broadcast_to(val, ptr.shape)
    if op.attrs.get("mask"):
        mask = np.broadcast_to(rest[0], ptr.shape)
        ptr, val = ptr[mask], val[mask]
    p.mem.store(ptr, val, elem, op)


_ATOMIC = {"add": np.add, "max": np.fmax, "min": np.fmin, "and": np.bitwise_and,
           "or": np.bitwise_or, "xor": np.bitwise_xor, "xchg": lambda old, v: v}


def _atomic_apply(p, op, ptr, vals, mask, update):
    """Apply ``update(old, operand) -> new`` lane by lane in order; returns the old values."""
    elem = op.operands[0].type.dtype.element
    ptr = np.asarray(ptr)
    shape = ptr.shape
    mask = np.ones(shape, bool) if mask is None else np.broadcast_to(mask, shape)
    old = np.zeros(shape, elem.np)
    sel_ptr = ptr[mask]
    bid, idx, view_of = p.mem.target(sel_ptr, elem, op, f"atomic {op.attrs.get('kind', 'cas')}")
    from .memory import from_storage, to_storage
    olds = np.empty(sel_ptr.shape, elem.np)
    ops_vals = [np.broadcast_to(v, shape)[mask] for v in vals]
    for i in range(sel_ptr.size):
        view = view_of(bid[i])
        cur = from_storage(view[idx[i]:idx[i] + 1], elem)
        olds[i] = cur[0]
        new = update(cur, *[v[i:i + 1] for v in ops_vals])
        view[idx[i]] = to_storage(fix(new, elem), elem)[0]
    old[mask] = olds
    return old


@rule("atomic_rmw")
def _atomic_rmw(p, op, ptr, val, *rest):
    fn = _ATOMIC[op.attrs["kind"]]
    mask = rest[0] if op.attrs.get("mask") else None
    return _atomic_apply(p, op, ptr, [val], mask, fn)


def _same_bits(old, c):
    """What compare-and-swap compares: the bit patterns (the hardware's cmpxchg, on both GPU
    backends), so -0.0 does not match 0.0 and a NaN matches its own bits -- a CAS loop over a
    float that holds NaN ends; int1 compares truth values (any nonzero byte is true)."""
    old = np.asarray(old)
    c = np.asarray(c, old.dtype)
    if old.dtype.kind == "f":
        u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[old.dtype.itemsize]
        return old.view(u) == c.view(u)
    return old == c


@rule("atomic_cas")
def _atomic_cas(p, op, ptr, cmp, val):
    return _atomic_apply(p, op, ptr, [cmp, val], None, lambda old, c, v: np.where(_same_bits(old, c), v, old))


@rule("print")
def _print(p, op, *vals):
    shown = " ".join(np.array2string(np.asarray(v), threshold=64) for v in vals)
    print(f"pid ({p.pid[0]}, {p.pid[1]}, {p.pid[2]}) {op.attrs['prefix']}{shown}")


# -- regions ---------------------------------------------------------------------------------

def _pairs(x: np.ndarray, axis: int):
    """Views of the even and odd positions along ``axis`` (its length is a power of two)."""
    n = x.shape[axis]
    y = x.reshape(x.shape[:axis] + (n // 2, 2) + x.shape[axis + 1:])
    head = (slice(None),) * (axis + 1)
    return y[head + (0,)], y[head + (1,)]


@rule("reduce")
def _reduce(p, op, *xs):
    axis = op.attrs["axis"]
    body = op.regions[0]
    xs = [np.ascontiguousarray(x) for x in xs]
    while xs[0].shape[axis] > 1:
        halves = [_pairs(x, axis) for x in xs]
        xs = [np.ascontiguousarray(v) for v in
              run_block(p, body, [h[0] for h in halves] + [h[1] for h in halves])]
    return tuple(np.squeeze(x, axis=axis) for x in xs)


@rule("scan")
def _scan(p, op, *xs):
    axis, reverse = op.attrs["axis"], op.attrs["reverse"]
    body = op.regions[0]
    xs = [np.asarray(x) for x in xs]
    if reverse:
        xs = [np.flip(x, axis) for x in xs]
    n = xs[0].shape[axis]
    d = 1
    while d < n:
        hi = [np.take(x, np.arange(d, n), axis=axis) for x in xs]
        lo = [np.take(x, np.arange(0, n - d), axis=axis) for x in xs]
        comb = run_block(p, body, (hi + lo) if reverse else (lo + hi))
        new = []
        for x, c in zip(xs, comb):
            y = np.array(x)
            idx = [slice(None)] * x.ndim
            idx[axis] = slice(d, n)
            y[tuple(idx)] = c
            new.append(y)
        xs = new
        d *= 2
    if reverse:
        xs = [np.flip(x, axis) for x in xs]
    return tuple(xs)


@rule("for")
def _for(p, op, lo, hi, step, *init):
    body = op.regions[0]
    lo, hi, step = int(lo), int(hi), int(step)
    if step == 0:
        raise InterpreterError("gl.range step is 0", op.loc)
    carried = list(init)
    ity = op.operands[0].type.dtype.np
    for i in range(lo, hi, step):
        carried = run_block(p, body, [ity.type(i)] + carried)
    return tuple(carried)


@rule("if")
def _if(p, op, cond):
    block = op.regions[0] if bool(cond) else op.regions[1]
    return tuple(run_block(p, block, []))


# -- execution -----------------------------------------------------------------------------

def run_block(p: Program, block: Block, args) -> list:
    # values are SSA, so one environment per program serves every nested block
    env = p.env
    for a, v in zip(block.args, args):
        env[a] = v
    return _exec(p, block, env)


def _exec(p: Program, block: Block, env: dict) -> list:
    for op in block.ops:
        if op.name == "yield":
            return [env[v] for v in op.operands]
        fn = RULES[op.name]
        args = [env[v] for v in op.operands]
        if p.strict and op.name not in PASS_PENDING:
            for a in args:
                if isinstance(a, Pending):
                    raise pending_error(op, a)
        try:
            out = fn(p, op, *args)
        except InterpreterError:
            raise
        except (FloatingPointError, ValueError, IndexError, TypeError) as e:
            raise InterpreterError(f"{op.name} failed in program {p.pid}: {e}", op.loc) from e
        if isinstance(out, tuple):  # ops with regions give one value per result
            for r, v in zip(op.results, out):
                env[r] = v
        elif op.results:
            env[op.results[0]] = out
    return []


def graph_facts(graph: Graph) -> tuple[bool, frozenset | None]:
    """(has async wgmmas, ops the backends put a barrier before or None without shared memory),
    worked out once per graph; a kernel over the shared-memory limit is refused here, every time."""
    facts = getattr(graph, "_interpreter_facts", None)
    if facts is None:
        ops = list(graph.body.walk())
        strict = any(op.name == "wgmma" and op.attrs.get("is_async") for op in ops)
        need = None
        if any(op.name == "smem_alloc" for op in ops):
            from gluon_trace.membar import barriers
            from gluon_trace.smem_plan import plan
            plan(graph, target="interpreter")  # over the limit: an error listing the buffers
            need = frozenset(barriers(graph))
        facts = graph._interpreter_facts = (strict, need)
    return facts


def run(graph: Graph, grid, args, mem: Memory, tma_arrays=None) -> None:
    env0 = {}
    for v, a in zip(graph.args, args):
        env0[v] = a
    strict, need = graph_facts(graph)
    if graph.num_ctas > 1:
        from .cluster import run_clusters
        run_clusters(graph, grid, env0, lambda pid, env: Program(pid, grid, mem, env, tma_arrays, strict, need))
        return
    with np.errstate(all="ignore"):
        for z in range(grid[2]):
            for y in range(grid[1]):
                for x in range(grid[0]):
                    env = dict(env0)
                    prog = Program((x, y, z), grid, mem, env, tma_arrays, strict, need)
                    _exec(prog, graph.body, env)
                    rules_memory.check_stores_retired(prog)


from . import rules_memory  # noqa: E402,F401  (shared memory, barriers, async copies, TMA)
from .rules_mma import PASS_PENDING, Pending, pending_error  # noqa: E402  (MMA, warp specialization)
from . import cluster  # noqa: E402,F401  (clusters of CTAs)

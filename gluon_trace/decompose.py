"""Target-independent decompositions: an op rewritten as a sequence of core ops.

``expand_math(graph, names)`` returns a new graph in which every op named in ``names``
(pairs of op name and result dtype name, such as ``("sin", "float64")``) is replaced by
core ops (``fma``, ``mul``, ``add``, ``sub``, ``div``, ``floor``, ``where``,
comparisons, ``cast`` including float64 <-> int64 bitcasts, int64 ``and``/``or``/
``shl``/``shr``/``add``/``sub``/``mul``, ``const``, ``splat``; sin/cos also a
max-``reduce`` and an ``if``). Backends call it on the graph they are about to emit, so
a function is written once for every target (as JAX decomposes a primitive into
others) instead of once per backend. The interpreter keeps numpy's functions: it is the
reference the expansions are tested against. Every new op carries the expanded op's
source location, tiles keep their layout, scalars stay scalars, region bodies are
rewritten too, and the input graph is left untouched (it is cached and hashed); a graph
with nothing to expand comes back as it is.

The float64 functions (``F64_MATH``). ``fma`` may be fused (GPUs) or not (the
interpreter rounds the product): no step relies on either.

- ``exp``: x = k ln2 + r, k = round(x/ln2) by the 1.5*2**52 trick (which also leaves k
  in the low bits), ln2 in two parts, the first of 32 bits so that k*LN2_HI and
  x - k*LN2_HI are exact; exp(r) = 1 + (r + (c + r*r*P(r))) with c the rounding error
  of r and P the Taylor polynomial to degree 13 (truncation below 5e-18 on |r| <= ln2/2);
  then times 2**k as two exact powers of two built in the exponent field, so a subnormal
  result rounds once. x is clamped to [-746, 710] first (0 and inf then come out of the
  arithmetic); NaN passes through.
- ``exp2``: k = round(x), f = x - k (exact), r = f*ln2 plus its fma residual (exact when
  fma is fused), then as exp.
- ``log``/``log2``: x = 2**e * m with m in [sqrt(1/2), sqrt(2)) by integer arithmetic on
  the bits (subnormals scaled by 2**54 first); with f = m - 1, s = f/(2 + f) and R the
  atanh series to s**21, log(m) = f - (f*f/2 - s*(f*f/2 + R)) (fdlibm's arrangement:
  the error of s hardly matters). log adds e*ln2 in two parts; log2 splits log(m) into
  a 21-bit head and a tail, multiplies each by a two-part 1/ln2 and adds e with the
  rounding error carried (as FreeBSD's log2). 0 -> -inf, x < 0 -> NaN, inf -> inf.
- ``sin``/``cos``: for |x| < 2**22, Cody-Waite: k = round(x*2/pi), pi/2 in three 30-bit
  parts and a 53-bit tail (k*part exact while |k| < 2**23), the reduced argument kept
  as an exact double-double (TwoSum at every step), so x close to a multiple of pi/2
  keeps full relative accuracy. For larger |x|, Payne-Hanek (``_reduce_big``): the
  exponent picks a window of 2/pi's bits (a shifter of selects over a 1344-bit table),
  the 53-bit significand times the window is summed exactly in 24-bit columns of
  integer-valued doubles, giving k mod 4 and the fraction to 2**-117 (the double closest
  to a multiple of pi/2 is about 2**-61 from it), so every finite double gets the
  same accuracy. It runs inside an ``if`` taken only when some element of the tile
  needs it (a max-reduce of |x| >= 2**22); in reduce/scan combine bodies, whose
  scalars are per element, it runs unconditionally. Kernels: Taylor polynomials to
  r**17 (sin) and r**16 (cos) on |r| <= pi/4, arranged as fdlibm's
  __kernel_sin/__kernel_cos so the tail of r enters to first order; k mod 4 picks and
  negates. sin(x) = x for |x| < 2**-27 (so sin(-0) = -0); inf -> NaN.
- ``erf``: |x| < 0.84375: x + x*A(x*x); then erf(1) + B(|x| - 1) up to 1.25; then
  1 - exp(-x*x) * C(1/|x|) up to 6, C approximating erfc(x)*exp(x*x) on [1.25, 2.25)
  and [2.25, 6) (erfc < 0.08 there, so C's and exp's relative errors shrink below 0.1
  ulp of erf); +-1 beyond. A, B and C are Chebyshev interpolants computed with mpmath
  at 40 digits and rounded to double (max error: A 1.9e-17 and B 4.8e-18 absolute,
  C 9.1e-17 and 5.3e-15 relative).

Measured max error in ulp (tests/test_decompose.py and tests/decompose_cases.py make
the inputs: log-uniform over the whole exponent range with both signs, subnormals,
the overflow/underflow edges, near multiples of pi/2, the erf piece boundaries,
specials), in the interpreter with fma unfused / fused:

    vs numpy (math.erf)   exp 1/1  exp2 1/1  log 1/1  log2 1/1  sin 1/1  cos 1/1  erf 1/1
      (3-4 million inputs each; the same, max 1 ulp, on an H100 with 3-4 million each)
    vs exact (mpmath)     exp .83/.83  exp2 .98/.83  log .78/.78  log2 .71/.71
      (140-200 thousand   sin .74/.74  cos .73/.73   erf .93/.81
       inputs each)       (numpy itself: .71 .74 .58 .51 .51 .56 .91)

The tests hold them to 2 ulp (4 for erf) of numpy. Special values are exact: exp(-inf)
= 0, exp(710) = inf, exp2(-1074) = 2**-1074, log(+-0) = -inf, log(x < 0) = NaN,
log2(2**k) = k, sin(+-0) = +-0, sin/cos(+-inf) = NaN, erf(+-0) = +-0, erf(+-inf) = +-1,
NaN -> NaN.
"""
from __future__ import annotations

import dataclasses
import math
import struct

from . import dtypes as dt
from . import ops as op_table
from .ir import Block, Graph, Op, Type, Value

F64_MATH = frozenset((n, "float64") for n in ("exp", "exp2", "log", "log2", "sin", "cos", "erf"))


# |x| from here on: sin/cos reduce by Payne-Hanek (Cody-Waite below: exact up to
# 2**23 * pi/2)
SINCOS_BIG = 2.0 ** 22


# -- rewriting a graph -------------------------------------------------------------------------

def expand_math(graph: Graph, names) -> Graph:
    """A copy of ``graph`` with each op whose (name, result dtype name) is in ``names``
    replaced by its decomposition; ``graph`` itself when there is none to replace."""
    names = frozenset(names)
    unknown = {n for n, _ in names if n not in EXPANSIONS}
    if unknown:
        raise ValueError(f"no decomposition for {sorted(unknown)}; known: {sorted(EXPANSIONS)}")
    if not any(_wanted(op, names) for op in graph.body.walk()):
        return graph
    vmap: dict[Value, Value] = {}
    body = _rewrite(graph.body, None, vmap, names, graph, uniform=True)
    return dataclasses.replace(graph, body=body, _text=None)


def _wanted(op: Op, names) -> bool:
    return (len(op.results) == 1 and op.name in EXPANSIONS
            and (op.name, op.results[0].type.dtype.name) in names)


def _rewrite(old: Block, parent: Block | None, vmap: dict, names, graph: Graph, uniform: bool) -> Block:
    """``uniform``: scalars here hold one value for the whole program (false in the
    combine bodies of reduce/scan, whose scalars are per element)."""
    new = Block(parent)
    for a in old.args:
        vmap[a] = new.add_arg(a.type, a.name)
    for op in old.ops:
        operands = [vmap.get(v, v) for v in op.operands]  # kernel arguments map to themselves
        if _wanted(op, names):
            b = Builder(new, op.loc, op.results[0].type, graph, uniform)
            vmap[op.results[0]] = EXPANSIONS[op.name](b, b.wrap(operands[0])).v
            continue
        n = Op(op.name, operands, op.attrs, op.loc)
        inner = uniform and op.name not in ("reduce", "scan")
        n.regions = [_rewrite(r, new, vmap, names, graph, inner) for r in op.regions]
        n.results = [Value(r.type, n, new, r.name) for r in op.results]
        vmap.update(zip(op.results, n.results))
        new.ops.append(n)
    return new


class Builder:
    """Appends ops to a block outside tracing, each at one source location and shaped like
    one result type (constants are splat to its layout when it is a tile)."""

    def __init__(self, block: Block, loc, like: Type, graph: Graph, uniform: bool = True):
        self.block, self.loc, self.like, self.graph = block, loc, like, graph
        self.uniform = uniform  # a scalar condition here may drive an ``if``
        self.consts: dict = {}

    def op(self, name: str, operands: list, attrs: dict, dtype: dt.dtype) -> Value:
        ty = Type(dtype) if name == "const" else self.like.with_dtype(dtype)
        return self._append(name, operands, attrs, [ty]).results[0]

    def wrap(self, v: Value) -> "V":
        return V(self, v)

    def _append(self, name, operands, attrs, types, regions=()) -> Op:
        o = Op(name, operands, attrs, self.loc)
        o.regions = list(regions)
        o.results = [Value(t, o, self.block) for t in types]
        self.block.ops.append(o)
        return o

    def any(self, c: "V") -> "V":
        """A scalar int1: whether ``c`` holds anywhere in the tile (max-reductions)."""
        if c.v.type.is_scalar:
            return c
        flag = where(c, self.const(1, dt.int32), 0)
        v = flag.v
        while not v.type.is_scalar:
            body = Block(self.block)
            a, b = body.add_arg(Type(dt.int32)), body.add_arg(Type(dt.int32))
            m = Op("maximum", [a, b], {}, self.loc)
            m.results = [Value(Type(dt.int32), m, body)]
            body.ops += [m, Op("yield", [m.results[0]], {}, self.loc)]
            attrs = {"axis": len(v.type.shape) - 1}
            ctx = op_table.Ctx(self.graph.num_warps, self.graph.threads_per_warp, self.loc, "reduce")
            types = op_table.OPS["reduce"].infer(ctx, [v.type], attrs, [body])
            v = self._append("reduce", [v], attrs, types, [body]).results[0]
        scalar = Builder(self.block, self.loc, Type(dt.int32), self.graph, self.uniform)
        return V(scalar, v).ne(0)

    def branch(self, cond: "V", then, otherwise: list) -> list:
        """``if cond`` (a uniform scalar int1): ``then(builder)`` builds the taken branch in
        a block of its own and returns its values; ``otherwise`` are the values of the
        other branch (already computed). Returns the ``if``'s results."""
        tb, eb = Block(self.block), Block(self.block)
        inner = Builder(tb, self.loc, self.like, self.graph, self.uniform)
        outs = [o.v for o in then(inner)]
        tb.ops.append(Op("yield", outs, {}, self.loc))
        eb.ops.append(Op("yield", [o.v for o in otherwise], {}, self.loc))
        o = self._append("if", [cond.v], {}, [v.type for v in outs], [tb, eb])
        return [V(self, r) for r in o.results]

    def const(self, value, dtype: dt.dtype) -> "V":
        value = float(value) if dtype.is_floating else int(value)
        key = (dtype.name, struct.pack("<d", value) if dtype.is_floating else value)
        v = self.consts.get(key)
        if v is None:
            v = self.op("const", [], {"value": value, "dtype": dtype}, dtype)
            if not self.like.is_scalar:
                v = self._append("splat", [v], {"shape": tuple(self.like.shape),
                                                "layout": self.like.layout},
                                 [self.like.with_dtype(dtype)]).results[0]
            self.consts[key] = v
        return V(self, v)


class V:
    """A value being built, with Python's operators recording ops (left to right, as
    written: the order of float operations is part of each algorithm)."""

    __slots__ = ("b", "v")

    def __init__(self, b: Builder, v: Value):
        self.b, self.v = b, v

    @property
    def dtype(self) -> dt.dtype:
        return self.v.type.dtype

    def _lift(self, x) -> "V":
        return x if isinstance(x, V) else self.b.const(x, self.dtype)

    def _bin(self, name, other, swap=False, dtype=None) -> "V":
        a, c = self, self._lift(other)
        if swap:
            a, c = c, a
        return V(self.b, self.b.op(name, [a.v, c.v], {}, dtype or self.dtype))

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __and__(self, o): return self._bin("and", o)
    def __or__(self, o): return self._bin("or", o)
    def __lshift__(self, o): return self._bin("shl", o)
    def __rshift__(self, o): return self._bin("shr", o)
    def __lt__(self, o): return self._bin("lt", o, dtype=dt.int1)
    def __le__(self, o): return self._bin("le", o, dtype=dt.int1)
    def __gt__(self, o): return self._bin("gt", o, dtype=dt.int1)
    def __ge__(self, o): return self._bin("ge", o, dtype=dt.int1)
    def eq(self, o): return self._bin("eq", o, dtype=dt.int1)
    def ne(self, o): return self._bin("ne", o, dtype=dt.int1)

    def __neg__(self): return V(self.b, self.b.op("neg", [self.v], {}, self.dtype))
    def abs(self): return V(self.b, self.b.op("abs", [self.v], {}, self.dtype))

    def cast(self, to: dt.dtype, bitcast=False) -> "V":
        return V(self.b, self.b.op("cast", [self.v], {"dtype": to, "bitcast": bitcast}, to))


def fma(a: V, b, c) -> V:
    return V(a.b, a.b.op("fma", [a.v, a._lift(b).v, a._lift(c).v], {}, a.dtype))


def where(c: V, a, b) -> V:
    like = a if isinstance(a, V) else b if isinstance(b, V) else \
        c.b.const(a, dt.float64 if isinstance(a, float) else dt.int64)
    return V(c.b, c.b.op("where", [c.v, like._lift(a).v, like._lift(b).v], {}, like.dtype))


def maximum(a: V, b) -> V:
    return a._bin("maximum", b)


def minimum(a: V, b) -> V:
    return a._bin("minimum", b)


def bits(x: V) -> V:
    return x.cast(dt.int64, bitcast=True)


def from_bits(i: V) -> V:
    return i.cast(dt.float64, bitcast=True)


def horner(x: V, coeffs) -> V:
    """coeffs[0] + x*(coeffs[1] + x*(...)), one fma per step."""
    acc = x.b.const(coeffs[-1], x.dtype)
    for c in reversed(coeffs[:-1]):
        acc = fma(acc, x, c)
    return acc


def two_sum(a: V, b: V) -> tuple[V, V]:
    """s + e == a + b exactly (Knuth's TwoSum: any magnitudes, round to nearest)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


# -- constants -----------------------------------------------------------------------------------

# Parts of ln 2, 1/ln 2 and pi/2: each rounded to nearest with the given number of
# significant bits, the next part rounding what is left (tests/test_decompose.py derives
# them again from 80-digit decimal values). A product k*part with |k| < 2**(53 - bits) is
# exact.
_h = float.fromhex
LN2_HI, LN2_LO = _h("0x1.62e42ff000000p-1"), _h("-0x1.718432a1b0e26p-35")    # 32, 53 bits
LN2, LN2_TAIL = _h("0x1.62e42fefa39efp-1"), _h("0x1.abc9e3b39803fp-56")     # 53, 53
INV_LN2 = _h("0x1.71547652b82fep+0")
IVLN2_HI, IVLN2_LO = _h("0x1.7154765200000p+0"), _h("0x1.705fc2eefa200p-33")  # 32, 53
PIO2_1, PIO2_2, PIO2_3, PIO2_4 = (_h("0x1.921fb54800000p+0"), _h("-0x1.de973dc800000p-31"),
                                  _h("-0x1.9d9cceb800000p-62"), _h("-0x1.1fc8f8cbb5bf7p-93"))
TWO_OVER_PI = _h("0x1.45f306dc9c883p-1")
PIO2, PIO2_TAIL = _h("0x1.921fb54442d18p+0"), _h("0x1.1a62633145c07p-54")  # 53, 53
# 2/pi in 24-bit limbs after the binary point (56 limbs: 1344 bits)
_TWO_OVER_PI_HEX = (
    "a2f9836e4e441529fc2757d1f534ddc0db6295993c439041fe5163abdebbc561b7246e3a424dd2e006492eea"
    "09d1921cfe1deb1cb129a73ee88235f52ebb4484e99c7026b45f7e413991d639835339f49c845f8bbdf9283b"
    "1ff897ffde05980fef2f118b5a0a6d1f6d367ecf27cb09b74f463f669e5fea2d7527bac7ebe5f17b3d0739f7"
    "8a5292ea6bfb5fb11f8d5d0856033046fc7b6babf0cfbc209af4361da9e391615ee61b08")
_TWO_OVER_PI_LIMBS = tuple((int(_TWO_OVER_PI_HEX[i:i + 6], 16))
                           for i in range(0, len(_TWO_OVER_PI_HEX), 6))
ROUNDER = 1.5 * 2.0 ** 52        # x + ROUNDER - ROUNDER rounds |x| < 2**51 to an integer
ROUNDER_BITS = 0x4338000000000000  # its bits: bits(x + ROUNDER) - ROUNDER_BITS is that integer
SQRT_HALF_BITS = 0x3FE6A09E667F3BCD  # bits of sqrt(1/2) rounded down

# Taylor coefficients (int / int is correctly rounded in Python)
_EXP_TAYLOR = tuple(1 / math.factorial(k) for k in range(2, 14))                # 1/2! .. 1/13!
_LOG_ATANH = tuple(2 / (2 * k + 1) for k in range(1, 11))                       # 2/3 .. 2/21
_SIN_TAYLOR = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(1, 9))  # -1/3! .. 1/17!
_COS_TAYLOR = tuple((-1) ** k / math.factorial(2 * k) for k in range(2, 9))      # 1/4! .. 1/16!

# erf pieces (see the module docstring): A in x*x, B in |x| - 1, C1/C2 in 1/|x| - center
_ERF_A = (0.12837916709551256, -0.376126389031834, 0.11283791670935311, -0.02686617064077985,
          0.005223977576377844, -0.000854832379116413, 0.00012055199941321885,
          -1.4922121574443055e-05, 1.640162967934702e-06, -1.571446067260244e-07,
          1.0726571432176348e-08)
_ERX = 0.8427007929497149  # erf(1) rounded
_ERF_B = (-2.5281614226004374e-17, 0.4151074974205947, -0.4151074974205935, 0.13836916580686642,
          0.06918458290293396, -0.06918458290289049, 0.004612305602586737, 0.015154717952365138,
          -0.004777035856883553, -0.0018851667279788675, 0.0012264355237814905,
          8.461871552376003e-05, -0.00020086312275290722, 3.1933346569686056e-05)
_ERFC_C1_CENTER = 0.6222222222222222  # 1/|x| in [1/2.25, 1/1.25]
_ERFC_C1 = (0.3048897618082222, 0.3832425147944176, -0.1727583929834492, 0.043506468377920236,
            0.0239864640058133, -0.047763995907820225, 0.04379042023219374,
            -0.025440268207851634, 0.0031584415165345743, 0.015684235930195214,
            -0.02674831337842698, 0.028596434676079228, -0.021747169604973225,
            0.005766603058230182, 0.010829915602180709)
_ERFC_C2_CENTER = 0.3055555555555556  # 1/|x| in [1/6, 1/2.25]
_ERFC_C2 = (0.16526927712770434, 0.49929873686945725, -0.17646176114181691, -0.06912194674530321,
            0.179999102156963, -0.13078397977631329, -0.046181030768704306, 0.247394567937321,
            -0.3152375333631215, 0.10207848794544186, 0.4211191425379348, -1.0167907066833415,
            0.9226497409047136, 0.3737010072385349)

INF = math.inf
NAN = math.nan


# -- exp, exp2 -----------------------------------------------------------------------------------

def _exp_kernel(r: V, c: V, k: V) -> V:
    """exp(r + c) * 2**k for |r| <= ln2/2 (a little more is fine), c tiny, k an int64 in
    [-1080, 1030]."""
    q = (r * r) * horner(r, _EXP_TAYLOR)
    p = 1.0 + (r + (c + q))
    k1 = k >> 1
    k2 = k - k1
    s1 = from_bits((k1 + 1023) << 52)
    s2 = from_bits((k2 + 1023) << 52)
    return (p * s1) * s2


def _round_int(y: V) -> tuple[V, V]:
    """(round(y) as float64, as int64) for |y| < 2**51, ties to even."""
    t = y + ROUNDER
    return t - ROUNDER, bits(t) - ROUNDER_BITS


def _exp_finite(b: Builder, x: V) -> V:
    """exp(x) without the NaN check (NaN gives 0 here: the clamp drops it)."""
    xc = minimum(maximum(x, -746.0), 710.0)
    kf, k = _round_int(xc * INV_LN2)
    hi = xc - kf * LN2_HI       # exact
    lo = kf * LN2_LO
    r = hi - lo
    c = (hi - r) - lo           # what r lost
    return _exp_kernel(r, c, k)


def expand_exp(b: Builder, x: V) -> V:
    return where(x.ne(x), x, _exp_finite(b, x))


def expand_exp2(b: Builder, x: V) -> V:
    xc = minimum(maximum(x, -1080.0), 1030.0)
    kf, k = _round_int(xc)
    f = xc - kf                 # exact, |f| <= 1/2
    r = f * LN2
    c = fma(f, LN2, -r) + f * LN2_TAIL   # r's rounding error when fma is fused, else 0
    return where(x.ne(x), x, _exp_kernel(r, c, k))


# -- log, log2 -----------------------------------------------------------------------------------

def _log_parts(b: Builder, x: V) -> tuple[V, V, V, V, V]:
    """x = 2**e * (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)): (e as float64, f, s, hfsq,
    R) with s = f/(2+f), hfsq = f*f/2 and R the atanh tail, as fdlibm's k_log."""
    sub = x < 2.2250738585072014e-308
    xs = where(sub, x * 2.0 ** 54, x)
    ib = bits(xs)
    e = (ib - SQRT_HALF_BITS) >> 52
    m = from_bits(ib - (e << 52))
    ef = e.cast(dt.float64) - where(sub, 54.0, 0.0)
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    R = z * horner(z, _LOG_ATANH)
    hfsq = 0.5 * f * f
    return ef, f, s, hfsq, R


def _log_special(x: V, r: V) -> V:
    r = where(x.eq(0.0), -INF, r)
    r = where(x < 0.0, NAN, r)
    r = where(x.eq(INF), x, r)
    return where(x.ne(x), x, r)


def expand_log(b: Builder, x: V) -> V:
    ef, f, s, hfsq, R = _log_parts(b, x)
    r = ef * LN2_HI - ((hfsq - (s * (hfsq + R) + ef * LN2_LO)) - f)
    return _log_special(x, r)


def expand_log2(b: Builder, x: V) -> V:
    ef, f, s, hfsq, R = _log_parts(b, x)
    hi = from_bits(bits(f - hfsq) & -(1 << 32))   # 21 significant bits: hi*IVLN2_HI is exact
    lo = ((f - hi) - hfsq) + s * (hfsq + R)
    val_hi = hi * IVLN2_HI
    val_lo = (lo + hi) * IVLN2_LO + lo * IVLN2_HI
    w = ef + val_hi
    val_lo = val_lo + ((ef - w) + val_hi)
    return _log_special(x, val_lo + w)


# -- sin, cos ------------------------------------------------------------------------------------

def _reduce_pio2(b: Builder, x: V) -> tuple[V, V, V]:
    """Cody-Waite: x = k*pi/2 + (rh + rl) as (rh, rl, k as int64), exact for
    |x| < 2**23 * pi/2."""
    kf, k = _round_int(x * TWO_OVER_PI)
    a = x - kf * PIO2_1         # exact: close operands, exact product
    s, e1 = two_sum(a, -(kf * PIO2_2))
    s, e2 = two_sum(s, -(kf * PIO2_3))
    lo = (e1 + e2) - kf * PIO2_4
    rh, rl = two_sum(s, lo)
    return rh, rl, k


def two_prod(a: V, c: float) -> tuple[V, V]:
    """p + e == a*c exactly (Dekker, with Veltkamp's split: no fma needed), |a| < 2**995."""
    p = a * c
    t = a * 134217729.0                      # 2**27 + 1
    ah = t - (t - a)
    al = a - ah
    ch, cl = _veltkamp(c)
    return p, ((ah * ch - p) + ah * cl + al * ch) + al * cl


def _veltkamp(c: float) -> tuple[float, float]:
    t = c * 134217729.0
    h = t - (t - c)
    return h, c - h


def _reduce_big(b: Builder, x: V) -> tuple[V, V, V]:
    """Payne-Hanek: x = k*pi/2 + (rh + rl) for normal |x| >= 2**22, however large. With
    x = M * 2**e (M a 53-bit integer), only the bits of 2/pi from about 2**-e on matter
    mod 4: a window of 10 24-bit limbs of 2/pi, picked by the exponent through a
    six-stage shifter of int32 selects. M times the window is summed in 24-bit columns
    of integer-valued doubles (each product below 2**49, each column below 2**53: all
    exact), carries are propagated, the column of weight 1 gives k mod 4 and the lower
    six the fraction, to within 2**-117 (the double closest to a multiple of pi/2 is
    about 2**-61 away from it)."""
    ib = bits(x.abs())
    # v = e + 48 clamped to [0, 1020]: e = 24*(q - 2) + t with q = v // 24, t = v % 24
    v = minimum(maximum((ib >> 52) - 1027, 0), 1020)
    q = (v * 2731) >> 16                     # v // 24 for 0 <= v < 1100
    t = v - q * 24
    m = (ib & ((1 << 52) - 1)) | (1 << 52)
    # M * 2**t in four limbs of weight 2**(24 i) (not normalized: each below 2**25)
    a0 = (m & 0xFFFFFF) << t
    a1 = ((m >> 24) & 0xFFFFFF) << t
    a2 = (m >> 48) << t
    limbs = [a0 & 0xFFFFFF, (a0 >> 24) + (a1 & 0xFFFFFF), (a1 >> 24) + (a2 & 0xFFFFFF), a2 >> 24]
    limbs = [w.cast(dt.float64) for w in limbs]
    # the window: w[i] = limb q + i of 2/pi (with three zero limbs in front: q = 3 is the
    # first limb when e = -24)
    n = 10
    arr = [0, 0, 0] + list(_TWO_OVER_PI_LIMBS) + [0] * 32
    q32 = q.cast(dt.int32)
    for bit in (32, 16, 8, 4, 2, 1):
        on = (q32 & bit).ne(0)
        arr = [a if _same(a, c) else where(on, _lift32(b, c), _lift32(b, a))
               for a, c in zip(arr[:n + bit - 1], arr[bit:n + 2 * bit - 1])]
    w = [_lift32(b, a).cast(dt.float64) for a in arr[:n]]
    # columns of weight 2**(24 d), d = 0 (the integer part) down to -6; higher ones are
    # multiples of 4
    cols = []
    for d in range(0, -7, -1):
        terms = [limbs[k] * w[k - d] for k in range(4) if k - d < n]
        c = terms[0]
        for tm in terms[1:]:
            c = c + tm
        cols.append(c)
    for i in range(6, 0, -1):                # carries, from the lowest column up
        carry = _floor(cols[i] * 2.0 ** -24)
        cols[i] = cols[i] - carry * 2.0 ** 24
        cols[i - 1] = cols[i - 1] + carry
    k = cols[0] - 4.0 * _floor(cols[0] * 0.25)
    hi = cols[1] * 2.0 ** -24 + cols[2] * 2.0 ** -48       # exact
    lo = cols[3] * 2.0 ** -72 + cols[4] * 2.0 ** -96       # exact
    tail = cols[5] * 2.0 ** -120 + cols[6] * 2.0 ** -144
    fh, fl = two_sum(hi, lo)
    fl = fl + tail
    up = fh >= 0.5                           # to the nearest quadrant
    fh = where(up, fh - 1.0, fh)
    k = where(up, k + 1.0, k)
    s = fh + fl
    fl = fl - (s - fh)
    fh = s
    # r = f * pi/2 as a double-double
    p, e = two_prod(fh, PIO2)
    e = e + (fh * PIO2_TAIL + fl * PIO2)
    rh = p + e
    rl = e - (rh - p)
    neg = x < 0.0
    ki = k.cast(dt.int64)
    return where(neg, -rh, rh), where(neg, -rl, rl), where(neg, 0 - ki, ki)


def _lift32(b: Builder, a):
    return a if isinstance(a, V) else b.const(a, dt.int32)


def _same(a, c) -> bool:
    return not isinstance(a, V) and not isinstance(c, V) and a == c


def _floor(x: V) -> V:
    return V(x.b, x.b.op("floor", [x.v], {}, x.dtype))


def _sin_kernel(rh: V, rl: V, z: V) -> V:
    v = rh * z
    return rh + (v * horner(z, _SIN_TAYLOR) + rl * (1.0 - 0.5 * z))


def _cos_kernel(rh: V, rl: V, z: V) -> V:
    hz = 0.5 * z
    w = 1.0 - hz
    return w + (((1.0 - w) - hz) + ((z * z) * horner(z, _COS_TAYLOR) - rh * rl))


def _sincos(b: Builder, x: V, shift: int) -> V:
    rh, rl, k = _reduce_pio2(b, x)
    big = x.abs() >= SINCOS_BIG

    def pick(bb: Builder) -> list:
        bx = bb.wrap(x.v)
        bh, bl, bk = _reduce_big(bb, bx)
        on = bb.wrap(big.v)
        return [where(on, bh, bb.wrap(rh.v)), where(on, bl, bb.wrap(rl.v)), where(on, bk, bb.wrap(k.v))]
    if b.uniform:  # Payne-Hanek only when some element needs it (a uniform branch)
        rh, rl, k = b.branch(b.any(big), pick, [rh, rl, k])
    else:          # per-element scalars (a combine body): always
        rh, rl, k = pick(b)
    z = rh * rh
    s = _sin_kernel(rh, rl, z)
    c = _cos_kernel(rh, rl, z)
    q = k + shift
    odd = (q & 1).ne(0)
    val = where(odd, c, s)
    val = where((q & 2).ne(0), -val, val)
    return where(x.abs().eq(INF), NAN, val)


def expand_sin(b: Builder, x: V) -> V:
    return where(x.abs() < 2.0 ** -27, x, _sincos(b, x, 0))


def expand_cos(b: Builder, x: V) -> V:
    return _sincos(b, x, 1)


# -- erf -----------------------------------------------------------------------------------------

def expand_erf(b: Builder, x: V) -> V:
    ax = x.abs()
    ra = x + x * horner(x * x, _ERF_A)
    rb = _ERX + horner(ax - 1.0, _ERF_B)
    u = 1.0 / ax
    c = where(ax < 2.25, horner(u - _ERFC_C1_CENTER, _ERFC_C1), horner(u - _ERFC_C2_CENTER, _ERFC_C2))
    rc = 1.0 - _exp_finite(b, -(ax * ax)) * c
    r = where(ax < 1.25, rb, where(ax >= 6.0, 1.0, rc))
    r = where(x < 0.0, -r, r)
    r = where(ax < 0.84375, ra, r)
    return where(x.ne(x), x, r)


EXPANSIONS = {"exp": expand_exp, "exp2": expand_exp2, "log": expand_log, "log2": expand_log2,
              "sin": expand_sin, "cos": expand_cos, "erf": expand_erf}

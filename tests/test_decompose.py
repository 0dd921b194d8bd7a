"""gluon_trace.decompose: the float64 math expansions run in the interpreter (which keeps
numpy's functions as the reference) on fresh random inputs over the whole double range,
with fma unfused (the interpreter's own rule) and fused (emulated exactly, as GPUs do),
and the graph rewrite itself: locations, layouts, scalars, regions, no mutation."""
import inspect
import math
import os
import sys
from fractions import Fraction

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import decompose as D
from gluon_trace import language as gl
from gluon_trace.backend import get
from gluon_trace.backends.interpreter import interpreter as interp
from gluon_trace.errors import CompileError
from gluon_trace.verifier import verify

sys.path.insert(0, os.path.dirname(__file__))
import decompose_cases as C  # noqa: E402

FN = {"exp": gl.exp, "exp2": gl.exp2, "log": gl.log, "log2": gl.log2, "sin": gl.sin, "cos": gl.cos,
      "erf": gl.erf}
BLOCK = 4096


@gt.jit
def unary64(out, x, n, OP: gl.constexpr, BLOCK: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([BLOCK // 128], [32], [4], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=L)
    m = offs < n
    v = gl.load(x + offs, mask=m, other=1.0)
    r = FN[OP](v)
    gl.store(out + offs, r, mask=m)


def traced(op, block=BLOCK):
    P = gl.pointer(gl.float64)
    return unary64.trace(P, P, gl.int32, OP=op, BLOCK=block, target="interpreter").graph


def run_expanded(op, x):
    g = D.expand_math(traced(op), {(op, "float64")})
    out = np.full(x.size, 1234.5)
    get("interpreter").run(g, (-(-x.size // BLOCK), 1, 1), [out, x.copy(), x.size])
    return out


# -- fma fused or not ----------------------------------------------------------------------

def _two_prod(a, b):
    p = a * b

    def split(v):  # Veltkamp: 26-bit halves
        c = 134217729.0 * v
        h = c - (c - v)
        return h, v - h
    ah, al = split(a)
    bh, bl = split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def fused_fma(a, b, c):
    """a*b + c with one rounding: the product exactly as p + e (Dekker), then p + c + e
    (TwoSum). Operands near overflow or products near underflow fall back to a*b + c;
    the expansions' fma operands are far from both."""
    a, b, c = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (a, b, c)))
    with np.errstate(all="ignore"):
        p, e = _two_prod(a, b)
        s = p + c
        bb = s - p
        t = (p - (s - bb)) + (c - bb)
        r = s + (t + e)
        ok = (np.isfinite(r) & (np.abs(a) < 2.0 ** 900) & (np.abs(b) < 2.0 ** 900)
              & ((np.abs(p) > 2.0 ** -900) | (p == 0)))
        return np.where(ok, r, a * b + c)


@pytest.fixture(params=["unfused", "fused"])
def fma_mode(request, monkeypatch):
    if request.param == "fused":
        plain = interp.RULES["fma"]

        def rule(p, op, a, b, c):
            if op.results[0].type.dtype.name == "float64":
                return fused_fma(a, b, c)
            return plain(p, op, a, b, c)
        monkeypatch.setitem(interp.RULES, "fma", rule)
    return request.param


def test_fused_fma_emulation_is_exact():
    rng = np.random.default_rng()
    a, b, c = (rng.standard_normal(300) * 10.0 ** rng.integers(-20, 20, 300) for _ in range(3))
    want = [float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(a, b, c)]
    np.testing.assert_array_equal(fused_fma(a, b, c), want)


# -- accuracy ------------------------------------------------------------------------------

@pytest.mark.parametrize("op", C.OPS)
def test_accuracy_over_all_doubles(op, fma_mode, rng):
    x = C.inputs(op, rng, 1 << 18)
    got = run_expanded(op, x)
    u = C.ulps(got, C.reference(op, x))
    worst = np.argsort(u)[-4:][::-1]
    assert u.max() <= C.BOUND[op], f"{op} ({fma_mode}): " + ", ".join(
        f"x={x[i]!r}: got {got[i]!r}, want {C.reference(op, x[i:i + 1])[0]!r} ({u[i]} ulp)"
        for i in worst)


@pytest.mark.parametrize("op", C.OPS)
def test_special_values_exact(op, fma_mode):
    x = np.array([a for a, _ in C.SPECIALS[op]])
    want = np.array([b for _, b in C.SPECIALS[op]])
    got = run_expanded(op, x)
    same = (got == want) & (np.signbit(got) == np.signbit(want)) | np.isnan(got) & np.isnan(want)
    assert same.all(), [(x[i], got[i], want[i]) for i in np.flatnonzero(~same)]


def test_sin_cos_near_multiples_of_pi_over_2():
    """The reduced argument stays exact when x is within an ulp of k*pi/2 (the
    cancellation a one-part reduction gets wrong), on both sides of the switch from
    Cody-Waite to Payne-Hanek."""
    rng = np.random.default_rng()
    k = np.concatenate([np.arange(1, 300), rng.integers(1, 2**53, 3000),
                        rng.integers(int(D.SINCOS_BIG / 2), int(D.SINCOS_BIG * 2), 2000)])
    x = k * (math.pi / 2)
    x = np.concatenate([x, np.nextafter(x, 0), np.nextafter(x, np.inf), -x])
    for op in ("sin", "cos"):
        u = C.ulps(run_expanded(op, x), C.reference(op, x))
        assert u.max() <= C.BOUND[op], (op, x[np.argmax(u)])


def test_sin_cos_hardest_arguments():
    """The doubles closest to multiples of pi/2 (x mod pi/2 about 2**-61 and 2**-60),
    against mpmath at 3000 bits: numpy itself is several ulp off on the first."""
    mp = pytest.importorskip("mpmath")
    xs = [6381956970095103 * 2.0 ** 797, 5261692873635770 * 2.0 ** 499, 2.0 ** 1023, 1e22, 1e300]
    xs = np.array(xs + [-v for v in xs])
    with mp.workprec(3000):
        for op, f in (("sin", mp.sin), ("cos", mp.cos)):
            got = run_expanded(op, xs)
            for g, v in zip(got, xs):
                exact = f(mp.mpf(float(v)))
                err = abs(mp.mpf(float(g)) - exact) / mp.mpf(float(np.spacing(abs(float(exact)))))
                assert err < 1, (op, v, g, exact)


def test_payne_hanek_pieces():
    """v // 24 by multiply-shift over the whole clamped range; the 2/pi limbs."""
    v = np.arange(0, 1100)
    np.testing.assert_array_equal((v * 2731) >> 16, v // 24)
    # 2/pi from Machin's formula for pi, in integer arithmetic with 64 guard bits
    bits = 24 * len(D._TWO_OVER_PI_LIMBS) + 64
    one = 1 << (bits + 8)

    def arctan_inv(n):
        total, term, k, sign = 0, one // n, 1, 1
        while term:
            total += sign * (term // k)
            term //= n * n
            k += 2
            sign = -sign
        return total
    pi = 16 * arctan_inv(5) - 4 * arctan_inv(239)        # pi * 2**(bits + 8)
    two_over_pi = (2 * one * (1 << bits)) // pi           # 2/pi * 2**bits
    want = [(two_over_pi >> (bits - 24 * (i + 1))) & 0xFFFFFF for i in range(len(D._TWO_OVER_PI_LIMBS))]
    assert list(D._TWO_OVER_PI_LIMBS)[:-1] == want[:-1]


def test_constants_are_the_documented_splits():
    ln2 = Fraction("0.69314718055994530941723212145817656807550013436025525412068000949339362196969")
    pi = Fraction("3.14159265358979323846264338327950288419716939937510582097494459230781640628620")

    def split(v, widths):
        out = []
        for w in widths:
            e = v.numerator.bit_length() - v.denominator.bit_length()
            while Fraction(2) ** e > abs(v):
                e -= 1
            while Fraction(2) ** (e + 1) <= abs(v):
                e += 1
            q = Fraction(2) ** (e - w + 1)
            part = round(v / q) * q
            out.append(float(part))
            v -= part
        return tuple(out)
    assert (D.LN2_HI, D.LN2_LO) == split(ln2, (32, 53))
    assert (D.LN2, D.LN2_TAIL) == split(ln2, (53, 53))
    assert (D.IVLN2_HI, D.IVLN2_LO) == split(1 / ln2, (32, 53))
    assert D.INV_LN2 == float(1 / ln2) and D.TWO_OVER_PI == float(2 / pi)
    assert (D.PIO2_1, D.PIO2_2, D.PIO2_3, D.PIO2_4) == split(pi / 2, (30, 30, 30, 53))
    assert D.ROUNDER_BITS == np.float64(D.ROUNDER).view(np.int64)


# -- the rewrite -----------------------------------------------------------------------------

def _line(fn, text):
    src, start = inspect.getsourcelines(fn.fn)
    return start + next(i for i, s in enumerate(src) if text in s)


def test_expanded_graph_verifies_and_keeps_the_user_line():
    from collections import Counter
    for op_name in C.OPS:
        g = traced(op_name, 512)
        before = g.text, g.hash
        e = D.expand_math(g, D.F64_MATH)
        assert (g.text, g.hash) == before, "the input graph was modified"
        assert e is not g and e.args == g.args and e.name == g.name
        verify(e)
        (orig,) = [op for op in g.body.walk() if op.name == op_name]
        assert orig.loc.line == _line(unary64, "FN[OP]")

        def others(graph):
            return Counter(op.name for op in graph.body.walk() if op.loc is not orig.loc)
        assert others(e) == others(g)            # everything else copied as it was
        new = [op for op in e.body.walk() if op.loc is orig.loc]
        assert len(new) > 50 and op_name not in {op.name for op in new}
        tiles = [r.type for op in new for r in op.results if not r.type.is_scalar]
        assert tiles and {(t.shape, t.layout) for t in tiles} == {((512,), orig.results[0].type.layout)}
    # nothing to expand: the same graph object comes back
    assert D.expand_math(g, {("sin", "float32")}) is g


@gt.jit
def regions64(out, x, s, n, BLOCK: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([BLOCK // 128], [32], [4], [0])
    offs = gl.arange(0, BLOCK, layout=L)
    v = gl.load(x + offs, mask=offs < n, other=0.5)
    acc = gl.zeros([BLOCK], gl.float64, layout=L)
    for i in gl.range(0, 3):
        acc += gl.sin(v * (i + 1).to(gl.float64)) + gl.exp2(acc * 0.25)
    with gl.if_(n > 10):
        acc = acc + gl.erf(v)
    with gl.else_():
        acc = acc - gl.log(gl.abs(v) + 1.0)
    r = gl.reduce(acc, 0, lambda a, b: a + gl.cos(b) * 0.5)
    t = gl.exp(s) + gl.log2(s * s + 1.0)         # scalars stay scalars
    gl.store(out + offs, acc)
    gl.store(out + BLOCK, r + t)


def test_scalars_and_region_bodies_expand():
    rng = np.random.default_rng()
    P = gl.pointer(gl.float64)
    g = regions64.trace(P, P, gl.float64, gl.int32, BLOCK=256, target="interpreter").graph
    e = D.expand_math(g, D.F64_MATH)
    verify(e)
    left = [op.name for op in e.body.walk() if op.name in ("sin", "cos", "exp", "exp2", "erf", "log", "log2")]
    assert not left, left
    at_exp = _line(regions64, "gl.exp(s)")
    scalar_ops = [op for op in e.body.walk() if op.loc is not None and op.loc.line == at_exp]
    assert scalar_ops and all(r.type.is_scalar for op in scalar_ops for r in op.results)
    for n in (200, 5):
        x = rng.uniform(-3, 3, 256)
        s = float(rng.uniform(0.5, 2))
        outs = []
        for graph in (g, e):
            out = np.full(257, np.nan)
            get("interpreter").run(graph, (1, 1, 1), [out, x, s, n])
            outs.append(out)
        np.testing.assert_allclose(outs[1], outs[0], rtol=1e-13, atol=1e-15)


def test_only_the_listed_ops_and_dtypes_expand():
    L = gl.BlockedLayout([1], [32], [4], [0])

    @gt.jit
    def mixed(o64, o32, x64, x32):
        offs = gl.arange(0, 128, layout=L)
        gl.store(o64 + offs, gl.exp(gl.load(x64 + offs)) + gl.sin(gl.load(x64 + offs)))
        gl.store(o32 + offs, gl.exp(gl.load(x32 + offs)))
    g = mixed.trace(gl.pointer(gl.float64), gl.pointer(gl.float32), gl.pointer(gl.float64),
                    gl.pointer(gl.float32), target="interpreter").graph
    e = D.expand_math(g, {("exp", "float64")})
    names = [(op.name, op.results[0].type.dtype.name) for op in e.body.walk() if op.results]
    assert ("exp", "float64") not in names and ("sin", "float64") in names and ("exp", "float32") in names
    with pytest.raises(ValueError, match="no decomposition for"):
        D.expand_math(g, {("tanh", "float64")})


def test_backend_error_in_an_expanded_op_names_the_users_line(monkeypatch):
    """Errors raised while emitting the ops of an expansion point at the user's gl.* line."""
    pytest.importorskip("gluon_trace.backends.nvidia")
    from gluon_trace.backends.nvidia import emitter
    from gluon_trace.backends.nvidia import _rules
    _rules()

    def refuse(em, op):
        raise CompileError("fma refused for this test", op.loc)
    monkeypatch.setitem(emitter.RULES, "fma", refuse)
    P = gl.pointer(gl.float64)
    g = unary64.trace(P, P, gl.int32, OP="erf", BLOCK=512, target="sm_90").graph
    with pytest.raises(CompileError, match="fma refused") as e:
        emitter.emit(g, "sm_90")
    assert e.value.loc.line == _line(unary64, "FN[OP]")
    assert "test_decompose.py" in str(e.value)


def test_interpreter_does_not_expand():
    g = traced("erf", 512)
    assert any(op.name == "erf" for op in g.body.walk())
    x = np.array([0.3, 1.0, 2.5, -4.0] * 128)
    out = np.zeros(512)
    get("interpreter").run(g, (1, 1, 1), [out, x, 512])
    np.testing.assert_array_equal(out, C.reference("erf", x))

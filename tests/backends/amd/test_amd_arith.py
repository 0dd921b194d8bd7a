"""Float16/bfloat16 fma (backends/amd/arith.py, ``_fma16``) rounded once, on the AMDGCN
simulator against the exact reference (gluon_trace.fuzz.reference.fma: rationals, one
rounding) and the interpreter. A bfloat16 product can sit on a rounding tie with a c too small
for float64 to keep beside it (fuzz seeds 950128 dot_split/gfx1100 and 950243 stress/gfx942:
one ulp off); the sum's exact error (TwoSum) carries c's side of the tie."""
import ml_dtypes
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.fuzz import reference as R

import amdsim

pytestmark = pytest.mark.usefixtures("amd_toolchain")
N = 256


def _kernel(lanes):
    L = gl.BlockedLayout([N // lanes // 2], [lanes], [2], [0])

    @gt.jit
    def fma16(a, b, c, out):
        o = gl.arange(0, N, layout=L)
        gl.store(out + o, gl.fma(gl.load(a + o), gl.load(b + o), gl.load(c + o)))
    return fma16


def _inputs(kind, rng):
    """Ties: (1 + 2^-7) 2^30 * 1.5 2^30 is halfway between two bfloat16s; c = +-1, +-2^-100
    picks the side. The rest: random values over the type's range, signs and zeros."""
    if kind == "bfloat16":
        a = np.full(N, (1 + 2 ** -7) * 2.0 ** 30)
        b = np.full(N, 1.5 * 2.0 ** 30)
        c = rng.choice([1.0, -1.0, 2.0 ** -100, -2.0 ** -100, 0.0], N)
        a[N // 2:] = rng.normal(0, 1, N // 2) * 2.0 ** rng.integers(-60, 60, N // 2)
        b[N // 2:] = rng.normal(0, 1, N // 2) * 2.0 ** rng.integers(-60, 60, N // 2)
        c[N // 2:] = rng.normal(0, 1, N // 2) * 2.0 ** rng.integers(-130, 120, N // 2)
        a[:N // 4] *= np.where(rng.random(N // 4) < 0.5, -1, 1)
    else:
        a, b, c = (rng.normal(0, 1, N) * 2.0 ** rng.integers(-12, 8, N) for _ in range(3))
    return [R.fix(v, kind) for v in (a, b, c)]


@pytest.mark.parametrize("target, lanes", [("gfx942", 64), ("gfx1100", 32), ("gfx90a", 64)])
@pytest.mark.parametrize("kind", ["bfloat16", "float16"])
def test_fma16_rounds_once(target, lanes, kind):
    rng = np.random.default_rng(5)
    a, b, c = _inputs(kind, rng)
    store = (lambda v: v.astype(np.float32).astype(ml_dtypes.bfloat16)) if kind == "bfloat16" \
        else (lambda v: v.astype(np.float16))
    want = R.fma(a, b, c, kind)
    k = _kernel(lanes)
    ref = [store(a), store(b), store(c), store(np.full(N, np.nan))]
    k[(1,)](*ref, num_warps=2, backend="interpreter", target=target)
    got = [store(a), store(b), store(c), store(np.full(N, np.nan))]
    ty = gl.pointer(gl.bfloat16 if kind == "bfloat16" else gl.float16)
    with np.errstate(all="ignore"):
        amdsim.simulate(k.trace(ty, ty, ty, ty, num_warps=2, target=target), target, (1,), got)
    for name, out in (("interpreter", ref[3]), (target, got[3])):
        o = out.astype(np.float64)
        ok = (o == want) | (np.isnan(o) & np.isnan(want))
        assert ok.all(), (name, np.flatnonzero(~ok)[:5], o[~ok][:5], want[~ok][:5])

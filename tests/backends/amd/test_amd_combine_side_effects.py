"""A store, atomic or print inside a combine function is refused by the AMD backend at the
user's line, with what to do instead (the interpreter runs it once per combined pair; the
lowering combines in several lanes at once). A combine that loads still compiles."""
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.errors import CompileError


@gt.jit
def combine_with(x, log, out, KIND: gl.constexpr, W: gl.constexpr):
    offs = gl.arange(0, 2 * W, layout=gl.BlockedLayout([2], [W], [1], [0]))

    def comb(a, b):
        if KIND == "store":
            gl.store(log + b, a)
        elif KIND == "atomic":
            gl.atomic_add(log + b, 1)
        elif KIND == "print":
            gl.device_print("pair ", a, b)
        else:
            a = a + gl.load(log + b) * 0
        return gl.minimum(a, b)

    v = gl.load(x + offs)
    if KIND == "print":
        gl.store(out + offs, gl.associative_scan(v, 0, comb))
    else:
        gl.store(out, gl.reduce(v, 0, comb))


def _amdgcn(kind, target):
    w = 32 if target == "gfx1100" else 64
    p = gl.pointer(gl.int32)
    return combine_with.trace(p, p, p, KIND=kind, W=w, num_warps=1, target=target).amdgcn(target)


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
@pytest.mark.parametrize("kind, op", [("store", "store"), ("atomic", "atomic_rmw"), ("print", "print")])
def test_a_side_effect_in_a_combine_is_refused_at_its_line(kind, op, target):
    with pytest.raises(CompileError) as e:
        _amdgcn(kind, target)
    msg = str(e.value)
    assert f"`{op}` inside a combine function" in msg and "store them after it" in msg
    assert "test_amd_combine_side_effects.py" in msg


def test_a_combine_that_loads_still_compiles():
    assert "global_load" in _amdgcn("load", "gfx942")

"""A store, atomic or print inside a combine function: the interpreter runs it once per
combined pair (a reduce of n elements: n - 1 calls); the NVIDIA backend would inline it as a
scalar op of one thread (6-7 of 63 calls' effects, found on ptxsim), so it refuses it at the
user's line instead of computing something else. A combine that loads still compiles."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backend import get
from gluon_trace.errors import CompileError


@gt.jit
def reduce_logging(x, log, cnt, out, KIND: gl.constexpr):
    offs = gl.arange(0, 64, layout=gl.BlockedLayout([2], [32], [1], [0]))

    def comb(a, b):
        if KIND == "store":
            gl.store(log + b, a)
        elif KIND == "atomic":
            gl.atomic_add(cnt + b, 1)
        elif KIND == "load":
            a = a + gl.load(cnt + b) * 0
        return gl.minimum(a, b)

    v = gl.load(x + offs)
    if KIND == "scan":
        gl.store(out + offs, gl.associative_scan(v, 0, _logging_max))
    else:
        gl.store(out, gl.reduce(v, 0, comb))


def _logging_max(a, b):
    gl.device_print("pair ", a, b)
    return gl.maximum(a, b)


def _trace(kind):
    p = gl.pointer(gl.int32)
    return reduce_logging.trace(p, p, p, p, KIND=kind, num_warps=1, target="sm_90")


def test_the_interpreter_calls_the_combine_once_per_pair():
    tr = _trace("atomic")
    x = np.arange(64, dtype=np.int32)  # min keeps the left index: every b != 0 is one call's
    log, cnt, out = np.full(64, -7, np.int32), np.zeros(64, np.int32), np.full(1, -9, np.int32)
    get("interpreter").run(tr.graph, (1, 1, 1), [x, log, cnt, out])
    assert out[0] == 0 and cnt[0] == 0 and (cnt[1:] == 1).all()


@pytest.mark.parametrize("kind, op", [("store", "store"), ("atomic", "atomic_rmw"), ("scan", "print")])
def test_a_side_effect_in_a_combine_is_refused_at_its_line(kind, op):
    with pytest.raises(CompileError) as e:
        _trace(kind).ptx("sm_90")
    msg = str(e.value)
    assert f"`{op}` inside a combine function" in msg and "store them after it" in msg
    assert "test_combine_side_effects.py" in msg


def test_a_combine_that_loads_still_compiles():
    assert "ld.global" in _trace("load").ptx("sm_90")

"""The IR: printing, verification, and op coverage of every backend."""
import pytest

import gluon_trace as gt
from gluon_trace import backend, ops
from gluon_trace import language as gl
from gluon_trace.errors import VerifyError
from gluon_trace.ir import Op
from gluon_trace.verifier import verify

L = gl.BlockedLayout([1], [32], [4], [0])


@gt.jit
def k(out_ptr, n):
    offs = gl.arange(0, 128, layout=L)
    acc = gl.zeros([128], gl.float32, layout=L)
    for i in gl.range(0, n):
        acc = acc + 1.0
    gl.store(out_ptr + offs, acc)


def test_ir_text_names_the_source_lines():
    ir = k.trace(gl.pointer(gl.float32), gl.int32).ir
    assert "# test_ir.py:" in ir and "kernel @k(" in ir and "#L0 = BlockedLayout" in ir


def test_verifier_rejects_broken_graphs():
    g = k.trace(gl.pointer(gl.float32), gl.int32).graph
    verify(g)
    bad = Op("add", [g.args[1], g.args[0]], {}, None)   # int + pointer
    bad.results = []
    g.body.ops.insert(0, bad)
    try:
        with pytest.raises(VerifyError):
            verify(g)
    finally:
        g.body.ops.remove(bad)


@pytest.mark.parametrize("name", backend.names())
def test_every_op_has_a_rule_in_every_backend(name):
    try:
        be = backend.get(name)
    except (ImportError, AttributeError) as e:
        pytest.skip(f"backend {name} is not importable here: {e}")
    missing = [op for op in ops.OPS if op != "yield" and op not in be.RULES]
    assert not missing, f"{name} has no rule for {missing}"
    for op, rule in be.RULES.items():
        if isinstance(rule, backend.Unsupported):
            assert rule.why, f"{name}: Unsupported({op}) needs a reason"

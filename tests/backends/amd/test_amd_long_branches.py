"""Branches past simm16's reach (128 KiB of code) become long jumps through an SGPR pair, as
LLVM's branch relaxation does: a huge kernel (float64 math over many registers, spill code)
must assemble, not fail with "branch size exceeds simm16". The reach is shrunk here so a
small kernel needs them; the assembler resolves the label arithmetic."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backends.amd import compiler
from gluon_trace.backends.amd.assembler import assemble

L = gl.BlockedLayout([1], [64], [1], [0])
L32 = gl.BlockedLayout([1], [32], [1], [0])


def make(layout, n_lanes):
    @gt.jit
    def loop_and_branch(out_ptr, x_ptr, n, flag):
        offs = gl.arange(0, n_lanes, layout=layout)
        acc = gl.zeros([n_lanes], gl.float32, layout)
        for i in gl.range(0, n):
            acc = acc + gl.load(x_ptr + i * n_lanes + offs)
        with gl.if_(flag > 0):
            acc = acc * 2.0
        with gl.else_():
            acc = acc - 1.0
        gl.store(out_ptr + offs, acc)
    return loop_and_branch


@pytest.mark.parametrize("target, layout, lanes", [("gfx90a", L, 64), ("gfx942", L, 64), ("gfx1100", L32, 32)])
def test_far_branches_become_long_jumps_that_assemble(target, layout, lanes, monkeypatch, amd_toolchain):
    k = make(layout, lanes)
    args = (gl.pointer(gl.float32), gl.pointer(gl.float32), gl.int32, gl.int32)
    near = compiler.lower(k.trace(*args, target=target, num_warps=1).graph, target)
    assert "s_setpc_b64" not in near.text
    monkeypatch.setattr(compiler, "_BRANCH_REACH", 8)
    far = compiler.lower(k.trace(*args, target=target, num_warps=1).graph, target)
    assert far.text.count("s_setpc_b64") >= 3 and "s_getpc_b64" in far.text
    hsaco = assemble(far.text, target, far.name)
    assert len(hsaco) > 0

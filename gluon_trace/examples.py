"""Example kernels shared by ``python -m gluon_trace``, the benchmarks and the notebooks."""
from __future__ import annotations

import gluon_trace as gt
from gluon_trace import language as gl


@gt.jit
def softmax(out_ptr, in_ptr, stride, n_cols, BLOCK: gl.constexpr):
    """Row softmax, one program per row: DESIGN.md's example."""
    layout = gl.BlockedLayout(size_per_thread=[4], threads_per_warp=[32],
                              warps_per_cta=[4], order=[0])
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=layout)
    mask = cols < n_cols
    x = gl.load(in_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    x = x - gl.max(x, axis=0)
    e = gl.exp(x)
    gl.store(out_ptr + row * stride + cols, e / gl.sum(e, axis=0), mask=mask)


SOFTMAX_SPECS = (gl.pointer(gl.float32), gl.pointer(gl.float32), gl.int32, gl.int32)


@gt.jit
def softmax_sweep(out_ptr, in_ptr, stride, n_cols, BLOCK: gl.constexpr, SPT: gl.constexpr):
    """The same softmax with the block size and elements per thread left to a variant sweep;
    the warps follow the launch's ``num_warps``."""
    layout = gl.BlockedLayout([SPT], [32], [gl.num_warps()], [0])
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=layout)
    mask = cols < n_cols
    x = gl.load(in_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    x = x - gl.max(x, axis=0)
    e = gl.exp(x)
    gl.store(out_ptr + row * stride + cols, e / gl.sum(e, axis=0), mask=mask)

"""Reproducer saved by gluon_trace.fuzz."""
# sm_90a: out0 = v5 (int32[]): 1 of 1 differ: [0] got np.int32(2135500405) expected np.int32(-5)
import numpy as np

import gluon_trace as gt
from gluon_trace import language as gl


def _offsets(shape, layout):
    """Row-major offsets of a tile's elements, in ``layout`` (runs at trace time)."""
    rank, offs, stride = len(shape), None, 1
    for d in reversed(range(rank)):
        lay = layout
        for e in reversed(range(rank)):
            if e != d:
                lay = gl.SliceLayout(e, lay)
        idx = gl.arange(0, shape[d], layout=lay)
        for e in range(rank):
            if e != d:
                idx = gl.expand_dims(idx, e)
        offs = idx * stride if offs is None else offs + idx * stride
        stride *= shape[d]
    return offs


def _xor(a, b):
    return a ^ b


def _max(a, b):
    return gl.maximum(a, b)


@gt.jit
def fuzz_kernel(in0, in1, out0, n_valid, n_iter, flag):
    v0 = gl.load(in0 + _offsets([8], gl.SliceLayout(0, gl.BlockedLayout(size_per_thread=[1, 1], threads_per_warp=[32, 1], warps_per_cta=[8, 1], order=[1, 0]))))
    v1 = gl.load(in1 + _offsets([8], gl.SliceLayout(0, gl.BlockedLayout(size_per_thread=[1, 1], threads_per_warp=[32, 1], warps_per_cta=[8, 1], order=[1, 0]))))
    v2 = v0 + v1
    v3 = gl.abs(v2)
    v4 = -v3
    v5 = gl.max(v4, axis=0, keep_dims=False)
    gl.store(out0, v5)


IN0 = np.frombuffer(bytes.fromhex('3b51deac020000004e1c4026fcffffff7fb2ed00f8fffffff9fffffff8ffffff'), np.dtype('int32'))  # int32[8]
IN1 = np.frombuffer(bytes.fromhex('fefffffff0e0891df8fffffffafffffff8ffffff7d26497fffffffff03000000'), np.dtype('int32'))  # int32[8]
PROGRAM = {'nodes': [{'name': 'v0', 'op': 'load', 'args': [], 'attrs': {'input': 0, 'masked': False, 'other': None}, 'dtype': 'int32', 'shape': [8], 'layout': 'gl.SliceLayout(0, gl.BlockedLayout(size_per_thread=[1, 1], threads_per_warp=[32, 1], warps_per_cta=[8, 1], order=[1, 0]))'}, {'name': 'v1', 'op': 'load', 'args': [], 'attrs': {'input': 1, 'masked': False, 'other': None}, 'dtype': 'int32', 'shape': [8], 'layout': 'gl.SliceLayout(0, gl.BlockedLayout(size_per_thread=[1, 1], threads_per_warp=[32, 1], warps_per_cta=[8, 1], order=[1, 0]))'}, {'name': 'v2', 'op': 'binary', 'args': ['v0', 'v1'], 'attrs': {'fn': 'add'}, 'dtype': 'int32', 'shape': [8], 'layout': 'gl.SliceLayout(0, gl.BlockedLayout(size_per_thread=[1, 1], threads_per_warp=[32, 1], warps_per_cta=[8, 1], order=[1, 0]))'}, {'name': 'v3', 'op': 'unary', 'args': ['v2'], 'attrs': {'fn': 'abs'}, 'dtype': 'int32', 'shape': [8], 'layout': 'gl.SliceLayout(0, gl.BlockedLayout(size_per_thread=[1, 1], threads_per_warp=[32, 1], warps_per_cta=[8, 1], order=[1, 0]))'}, {'name': 'v4', 'op': 'unary', 'args': ['v3'], 'attrs': {'fn': 'neg'}, 'dtype': 'int32', 'shape': [8], 'layout': 'gl.SliceLayout(0, gl.BlockedLayout(size_per_thread=[1, 1], threads_per_warp=[32, 1], warps_per_cta=[8, 1], order=[1, 0]))'}, {'name': 'v5', 'op': 'reduce', 'args': ['v4'], 'attrs': {'kind': 'max', 'axis': 0, 'keep': False}, 'dtype': 'int32', 'shape': [], 'layout': None}], 'outputs': ['v5'], 'num_warps': 8, 'warp_size': 32, 'n_valid': 0, 'n_iter': 0, 'flag': 0, 'seed': 0}

if __name__ == "__main__":
    from gluon_trace import fuzz
    prog = fuzz.program_from_dict(PROGRAM)
    outcome = fuzz.check_program(prog, targets=['sm_90a'])
    for where, msg in outcome.failures:
        print(where, ":", msg)
    print("ok" if outcome.ok else f"{len(outcome.failures)} failure(s)")

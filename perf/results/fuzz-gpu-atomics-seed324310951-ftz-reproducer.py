"""Reproducer saved by gluon_trace.fuzz."""
# sm_90a: out1 = v2 (float32[258]): 1 of 258 differ: [70] got np.float32(0.0) expected np.float32(1e-45)
import numpy as np

import gluon_trace as gt
from gluon_trace import language as gl

L0 = gl.BlockedLayout(size_per_thread=[1, 1], threads_per_warp=[32, 1], warps_per_cta=[4, 1], order=[1, 0])
L1 = gl.DistributedLinearLayout(reg_bases=[[0, 16], [0, 32]], lane_bases=[[1, 0], [2, 0], [0, 1], [0, 2], [0, 4]], warp_bases=[[0, 8], [0, 0]], block_bases=[], shape=[4, 64])

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
def fuzz_kernel(in0, out0, out1, n_valid, n_iter, flag):
    v0 = gl.load(in0 + _offsets([4, 64], L0))
    v1 = gl.convert_layout(v0, L1)
    o = _offsets([4, 64], L1)
    v3 = gl.atomic_add(out1 + (o ^ 1), v1)
    o = _offsets([4, 64], L1)
    gl.store(out0 + o, v3)


IN0 = np.frombuffer(bytes.fromhex('7d111fbe537d884033f06bc0ee014e4000000000000080ff7029273f0000c0c0b82116410000c07f00000040616d88c0ffff7f7faf8bc0bc000040c0da481cc0000080bf864fb5c0a2d053c0275f304175478540680b48c0d52fabc0ccbf79c008b1b1bdba3e0e3edb5634c6feff5d468010b6405143e73f61c7bfbf03f561bf4f8f07c00000a0c01ce0ec3e990789c0f65780c0000080ff0000c07ff4d395c08996b7c058cd2340521e4140ae7c75c04bf90f400000c07ff8429a3f2567a1c09238554000000040000000c05eef0e40000080bf4371853fb272d0bd199316bf8f6d21c0000080400d01d33f3e0f87bfd238edbf93689d40ab7c8dc020dc8340540e353ffae64dc0827894bf000080ff07d12c402e20b23f328a0ec001000000887a9a3fe999adc50823e9be4d32d63fa186c0bf152e0e4100000000b18c963f0000803face924406c736bbf00000040213daebf0000e0400000804000000080c00ddac00000c0c00000807ff59c064692668e3f0000803f1d083c46e6c89ac41dd5a2bdfd5564450000807f0000a040c0b60141bc3ecabf000080bf000080bfb2cc4bbe321cbcbf6f09603f0000803f484b7e40000000c03eceff40856572400000a040b19351c0000080bfd6adfc3e00000080c8ce43c0000000c092a8ba3f3e05cabfa7f73b409200d24575188cc056711ac0aa4f714001000000bf23683f38ca9440864a8bc06354bdc06dd35dc0000040c058cc4bc0a874f9bf9c9979c00000c040de9c80c0291a93c6fb7d4b4003fdf5bf7c3d54bf0000a040140008400363b63e000000806d388cc00000e040d752e33f000080bf7e6215408321b8c0789a07411dc8abc07d786b4000008040010000001a01c5bfffff7ffffb7e5a3edbe48c40dea1a4bf57e63dc10a42da44000000c00c85e1bffb1245400100000000000080b3acbec0532cb14075e9e5c4952f99bf33ee0641000000000000e0c0499d1fbfa849c2460000c07f000000c10100000005557440e3610b4022c11dbf0000404068f9bfc0eac4ad400000807f09dd0ac0dfc93f40c5aa874050114540beefff403b558a40ff5b29c586340ac02329da3e0000a0c0b1b0f2c5ef6f9a3f672ada3f5f2058405218d0bee218b3bf7f0c54c0924864c03661ed459a19adbe3075494000004040e415f8c09f4886c0acc492400000c0c0f700aa3f065b4dc0ffff7f7f107498bf0000803f0000e0400000807fe7ab42bf4e1ac240d499243f00000080f493c9bf666081bf209079c1a239ed3f760e0c400000c040c438f9bfe5d3c03e00008040978f96c03e8e36c0a6a3b0bf000080bf89f0103cc40e93466c48113fdf2e5946000080407b5592400000004071ab5abfc5412a400000807f40f6b83f000080bf9a47e83f2957d8c0daffa9c50000004066bf983f638721bd'), np.dtype('float32'))  # float32[4, 64]
PROGRAM = {'nodes': [{'name': 'v0', 'op': 'load', 'args': [], 'attrs': {'input': 0, 'masked': False, 'other': None}, 'dtype': 'float32', 'shape': [4, 64], 'layout': 'gl.BlockedLayout(size_per_thread=[1, 1], threads_per_warp=[32, 1], warps_per_cta=[4, 1], order=[1, 0])'}, {'name': 'v1', 'op': 'convert', 'args': ['v0'], 'attrs': {}, 'dtype': 'float32', 'shape': [4, 64], 'layout': 'gl.DistributedLinearLayout(reg_bases=[[0, 16], [0, 32]], lane_bases=[[1, 0], [2, 0], [0, 1], [0, 2], [0, 4]], warp_bases=[[0, 8], [0, 0]], block_bases=[], shape=[4, 64])'}, {'name': 'v2', 'op': 'atomic_buf', 'args': [], 'attrs': {'pool': False}, 'dtype': 'float32', 'shape': [258], 'layout': None}, {'name': 'v3', 'op': 'atomic', 'args': ['v2', 'v1'], 'attrs': {'kind': 'add', 'index': ('xor', 1), 'mask': 'none'}, 'dtype': 'float32', 'shape': [4, 64], 'layout': 'gl.DistributedLinearLayout(reg_bases=[[0, 16], [0, 32]], lane_bases=[[1, 0], [2, 0], [0, 1], [0, 2], [0, 4]], warp_bases=[[0, 8], [0, 0]], block_bases=[], shape=[4, 64])'}], 'outputs': ['v3', 'v2'], 'num_warps': 4, 'warp_size': 32, 'n_valid': 0, 'n_iter': 0, 'flag': 0, 'seed': 0}

if __name__ == "__main__":
    from gluon_trace import fuzz
    prog = fuzz.program_from_dict(PROGRAM)
    outcome = fuzz.check_program(prog, targets=['sm_90a'])
    for where, msg in outcome.failures:
        print(where, ":", msg)
    print("ok" if outcome.ok else f"{len(outcome.failures)} failure(s)")

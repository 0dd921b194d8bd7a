"""Shared-memory buffers and their views on NVIDIA: allocation and the view ops (index, slice,
permute, reshape, reinterpret), each re-indexing the view's table at compile time (smem_view.py);
views chosen by a branch or carried by a loop go through smem_join.py, smem_padded.py and
smem_swizzled_runtime.py.
"""
from __future__ import annotations

import numpy as np

from gluon_trace.errors import CompileError
from gluon_trace.ops_memory import element_offsets

from .emitter import rule
from .rules_smem import _store_tile
from .smem_view import Smem, _barrier_if_needed, _esize, _plin_of, _pow2_div, _view_of


@rule("smem_alloc")
def _alloc(em, op):
    t = op.results[0].type
    if t.dtype.is_bool:
        raise CompileError("int1 shared buffers are not supported on NVIDIA; store int8 (x.to(gl.int8)) "
                           "instead", op.loc)
    off = em.smem_plan.offsets[op]
    key = ("smem_buf", off)
    base = em.thread_cache.get(key)
    if base is None:
        base = em.thread_cache[key] = em.reg("b32")
        em.pro(f"add.u32 {base}, {em.smem_start()}, {off};")
    es = _esize(t.dtype)
    offs, _ = element_offsets(t.layout, tuple(t.shape), t.dtype.bits)
    rel = np.asarray(offs, np.int64) * es
    plin = _plin_of(t.layout, tuple(t.shape))
    s = Smem(base, 0, rel, t.dtype, _pow2_div(off, 16),  # gt_smem: .align 16
             plin=plin, coff=None if plin is not None else (rel, (0,) * rel.ndim))
    if op.operands:
        _barrier_if_needed(em, op)
        _store_tile(em, s, op.operands[0])
    return [[s]]


@rule("smem_index")
def _index(em, op):
    s = _view_of(em, op.operands[0], xor_ok=True)
    i_v = op.operands[1]
    if s.creg is not None:
        from .smem_swizzled_runtime import index_view
        return [[index_view(em, s, _index_reg(em, i_v), op.loc)]]
    if s.sreg is not None:
        from .smem_padded import index_view
        return [[index_view(em, s, _index_reg(em, i_v), op.loc)]]
    n = s.rel.shape[0]
    stride = int(s.rel[1].flat[0] - s.rel[0].flat[0]) if n > 1 else 0
    for j in range(n):
        if not np.array_equal(s.rel[j], s.rel[0] + j * stride):
            raise CompileError("the leading dim of this buffer is not evenly strided in shared memory; "
                               "index a buffer allocated with stacked leading dims", op.loc)
    if s.xreg is not None:
        from .smem_join import index_xor
        index_xor(s, stride, n, op.loc)
    coff = None
    if s.coff is not None and s.coff[1][0] == 0:  # (slot i: the base moved by i * stride)
        coff = (s.coff[0][0], s.coff[1][1:])
    elif s.coff is not None:  # (from a stacked start: moved into the base first, smem_stacked.py)
        from .smem_stacked import fold_plain
        s0 = s.coff[1][0]
        s, coff = fold_plain(em, s, s.rel[0], lambda c: (c[0][0], c[1][1:]) if c[1][0] == 0 else None)
        if coff is None and s.coff is not None and s.xreg is None:
            # (a table fold_plain leaves as it was: slot i of the view is slot s0 + i of the buffer,
            # the base moved by i * stride; its table is the buffer's slot s0's, XOR-linear but
            # for the slot's offset: an affine coff, which only the splits refused otherwise read)
            coff = (s.coff[0][s0], s.coff[1][1:])
    i = _index_reg(em, i_v)
    base = em.ins("b32", f"mad.lo.u32 {{d}}, {i}, {stride}, {s.base};") if stride else s.base
    align = min(s.align, _pow2_div(stride, 16))
    return [[Smem(base, s.const, s.rel[0], s.dtype, align, s.xreg, s.xmask, s.plin_at(0), coff=coff)]]


def _index_reg(em, i_v) -> str:
    i = em.vals[i_v][0]
    if i_v.type.dtype.bits == 64:
        i = em.ins("b32", f"cvt.u32.u64 {{d}}, {i};")
    return i


@rule("smem_slice")
def _slice(em, op):
    s = _view_of(em, op.operands[0], xor_ok=True)
    a = op.attrs
    idx = [slice(None)] * s.rel.ndim
    idx[a["dim"]] = slice(a["start"], a["start"] + a["length"])
    if s.xreg is not None:
        from .smem_join import slice_xor
        return [[slice_xor(em, s, s.rel[tuple(idx)], op.loc, tuple(idx))]]
    if s.sreg is not None:
        from .smem_padded import slice_view
        return [[slice_view(em, s, tuple(idx))]]
    if s.creg is not None:
        from .smem_swizzled_runtime import slice_view
        return [[slice_view(em, s, tuple(idx))]]
    return [[s.shifted(s.rel[tuple(idx)], tuple(idx))]]


@rule("smem_permute")
def _permute(em, op):  # (a re-indexed table places elements where they were: the XOR still holds)
    s = _view_of(em, op.operands[0], xor_ok=True)
    order = op.attrs["order"]
    coff = None if s.coff is None else (np.transpose(s.coff[0], order), tuple(s.coff[1][o] for o in order))
    cdim = None if s.creg is None else tuple(sorted((list(order).index(d), b) for d, b in s.cdim))
    return [[Smem(s.base, s.const, np.transpose(s.rel, order), s.dtype, s.align, s.xreg, s.xmask,
                  s.plin_at(lambda a: np.transpose(a, order)), s.sreg, s.salign, coff=coff, creg=s.creg, cdim=cdim)]]


@rule("smem_reshape")
def _reshape(em, op):
    s = _view_of(em, op.operands[0], xor_ok=True)
    shape = tuple(op.attrs["shape"])
    if s.creg is not None:
        from .smem_swizzled_runtime import reshape_view
        return [[reshape_view(em, s, shape, op.loc)]]
    coff = None
    if s.coff is not None:  # (the buffer's table and the start, reshaped alike where they can be)
        from .smem_swizzled import reshape_coff
        coff = reshape_coff(s.coff, tuple(s.rel.shape), shape)
        if coff is None:  # (a stacked start it splits unevenly: moved into the base first, smem_stacked.py)
            from .smem_stacked import fold_plain
            s, coff = fold_plain(em, s, np.reshape(s.rel, shape), lambda c: reshape_coff(c, tuple(s.rel.shape), shape))
    return [[Smem(s.base, s.const, np.reshape(s.rel, shape), s.dtype, s.align, s.xreg, s.xmask,
                  s.plin_at(lambda a: np.reshape(a, shape)), s.sreg, s.salign, coff=coff)]]


@rule("smem_reinterpret")
def _reinterpret(em, op):
    s = _view_of(em, op.operands[0], xor_ok=True)
    t = op.results[0].type
    if t.dtype.is_bool:
        raise CompileError("int1 shared buffers are not supported on NVIDIA; use int8", op.loc)
    if s.creg is not None:
        from .smem_swizzled_runtime import refuse_runtime
        refuse_runtime(".reinterpret()", op.loc)
    start = s.const + int(s.rel.min())
    es = _esize(t.dtype)
    base, align = s.base, s.align
    if s.sreg is not None:  # (it starts at pad(S), known at run time: the base takes it)
        from .smem_padded import start_reg
        base, align = start_reg(em, s)
    if s.xreg is not None:  # (its lowest offset moves with the XOR: the base takes it)
        from .smem_join import reinterpret_start
        base, align = reinterpret_start(em, s, es, op.loc)
    if start % es:
        raise CompileError(f"reinterpret as {t.dtype} starts at byte {start}, not a multiple of {es}", op.loc)
    offs, _ = element_offsets(t.layout, tuple(t.shape), t.dtype.bits)
    plin = _plin_of(t.layout, tuple(t.shape)) if s.xreg is None else None
    return [[Smem(base, start, np.asarray(offs, np.int64) * es, t.dtype, align, plin=plin)]]

"""LDS views on AMD: the rules that make a buffer's .index/.slice/.permute/.reshape/.reinterpret
views (:class:`~.lds_buffer.Lds` values, no code but a run-time slot's or start's SGPR), and the
checks every use of a view makes (``_view``: which run-time placements it takes).
"""
from __future__ import annotations

import numpy as np

from gluon_trace.errors import CompileError

from .emitter import elem_key
from .lds_buffer import _BIG, Lds, _fresh, _pow2_div, _table, pad
from .mir import Imm


def _view(em, val, xor_ok: bool = False, start_ok: bool = False) -> Lds:
    """The view ``val``; ``xor_ok``: the caller addresses its elements through Access, which
    folds a run-time XOR (lds_join.py) into each thread register; ``start_ok``: it takes a run-time
    start (lds_join_start.shift_join: Access adds it per access) but no run-time XOR; every other use
    needs the view's placement at compile time."""
    s = em.vals[val]
    if not isinstance(s, Lds):
        raise CompileError("a shared-memory descriptor reached the AMD backend through a path it does "
                           "not follow (a loop-carried or branch-selected buffer); pass the buffer "
                           "itself and index it inside the loop", em.loc)
    if s.xreg is not None and not xor_ok:
        raise em.error("this shared-memory view was chosen by a branch (or carried by a loop) among views "
                       "placed differently (column halves of a swizzled tile: their offsets differ by an "
                       "XOR known only at run time), which only .load() and .store() (and views of it: "
                       ".index/.slice/.permute/.reshape/.reinterpret) take; slice or index the buffer inside "
                       "the branch (or loop body), right where it is used here, or branch around this operation")
    if s.sdim is not None and not (xor_ok or start_ok):
        raise em.error("this shared-memory view was chosen by a branch (or carried by a loop) among slices of a "
                       "swizzled buffer starting at different places inside a swizzle period (its start is known "
                       "only at run time), which only .load(), .store() and async copies (and views of it: "
                       ".index/.slice/.permute) take; slice or index the buffer inside the branch (or loop body), "
                       "right where it is used here")
    if s.sreg is not None and not (xor_ok or start_ok):
        raise em.error("this shared-memory view was chosen by a branch (or carried by a loop) among padded views "
                       "starting at different places inside a padding period (its start is known only at run "
                       "time), which only .load() and .store() (and views of it: .index/.slice/.permute/"
                       ".reinterpret) take; slice or index the buffer inside the branch (or loop body), right "
                       "where it is used here")
    return s



def _membar(em, op) -> None:
    last = em.code[-1] if em.code else None
    if op in em.membar and getattr(last, "kind", None) != "barrier":  # (one right before: enough)
        em.barrier()



def rule_index(em, op):  # (a run-time XOR acts on lin, the slot's bytes add outside it: it stays)
    v = _view(em, op.operands[0], xor_ok=True)
    stride = v.lead[0]
    i = em.vals[op.operands[1]]
    i = em.real(i)
    if isinstance(i, Imm):
        k = i.bits if i.size == 1 else i.bits & 0xFFFFFFFF
        k = k - (1 << 32) if k >> 31 else k
        em.vals[op.result] = v.with_(const=v.const + k * stride, lead=v.lead[1:])
        return
    key = ("lds_index", elem_key(v.base) if v.base is not None else None, elem_key(i), stride)
    base = em.cse_get(key)
    if base is None:
        s = em.to_s(i if i.size == 1 else i[0])
        base = em.s()
        em.salu("s_mul_i32", base, [s, Imm(stride)])
        if v.base is not None:
            acc = em.s()
            em.salu("s_add_u32", acc, [base, v.base])
            base = acc
        em.cse_put(key, base)
    em.vals[op.result] = v.with_(base=base, balign=min(v.balign, _pow2_div(stride)), lead=v.lead[1:])



def rule_slice(em, op):  # (lin[c + start] ^ X: the sliced table, X as it was; Access checks the split)
    v = _view(em, op.operands[0], xor_ok=True)
    a = op.attrs
    dim, start, n = a["dim"], a["start"], a["length"]
    nl = len(v.lead)
    if dim < nl:
        em.vals[op.result] = v.with_(const=v.const + start * v.lead[dim])
        return
    idx = [slice(None)] * v.lin.ndim
    idx[dim - nl] = slice(start, start + n)
    coff = v.coff
    if coff is not None:
        coff = (tuple(s + start * (d == dim - nl) for d, s in enumerate(coff[0])), coff[1])
    em.vals[op.result] = v.with_(lin=v.lin[tuple(idx)], coff=coff)



def rule_permute(em, op):
    v = _view(em, op.operands[0], xor_ok=True)
    order = list(op.attrs["order"])
    nl = len(v.lead)
    perm = [d - nl for d in order[nl:]]
    coff = v.coff and tuple(tuple(x[d] for d in perm) for x in v.coff)
    w = v.with_(lin=np.transpose(v.lin, perm), coff=coff)
    em.vals[op.result] = w.with_(sdim=tuple(sorted((perm.index(d), b) for d, b in v.sdim))) if v.sdim is not None else w



def rule_reshape(em, op):
    v = _view(em, op.operands[0], xor_ok=True)
    src, dst = tuple(op.operands[0].type.shape), tuple(op.result.type.shape)
    r = v.lin.ndim
    nl_new = len(dst) - r
    if dst[nl_new:] == src[len(src) - r:]:  # stacked dims regrouped: strides from the new shape
        unit = v.lead[-1] if v.lead else 0
        w = v.with_(lead=[unit * int(np.prod(dst[d + 1:nl_new], dtype=np.int64)) for d in range(nl_new)])
        if not np.array_equal(_table(w, dst), _table(v, src).reshape(dst)):
            raise em.error(f"reshape {list(src)} -> {list(dst)} of this view (its stacked dims were "
                           "sliced) is not supported on AMD; reshape the whole buffer")
        em.vals[op.result] = w
        return
    # the type rule allowed tiles merged into the swizzled dims: the layout places them as before
    t = op.result.type
    if v.sdim is not None:
        raise em.error(f"reshape {list(src)} -> {list(dst)} of a shared-memory view chosen by a branch (or carried "
                       "by a loop) among slices of a swizzled buffer starting at different places inside a swizzle "
                       "period is not supported on AMD; slice or index the buffer inside the branch (or loop body) "
                       "instead")
    if v.sreg is not None:
        raise em.error(f"reshape {list(src)} -> {list(dst)} of a shared-memory view chosen by a branch (or carried "
                       "by a loop) among padded views starting at different places inside a padding period is "
                       "not supported on AMD; slice or index the buffer inside the branch (or loop body) instead")
    w = _fresh(em, t.layout, dst, t.dtype, v.base, v.balign, v.const)
    if v.xreg is not None:  # the run-time XOR holds where it places every element alike (below)
        if w.pads:
            raise em.error(f"reshape {list(src)} -> {list(dst)} of a shared-memory view chosen by a branch "
                           "among views placed differently (a run-time XOR) into a padded layout is not "
                           "supported on AMD; slice or index the buffer inside the branch (or loop body) instead")
        w = w.with_(xreg=v.xreg, xmask=v.xmask)
        for x in _xor_values(v.xmask):
            if not np.array_equal(_table(w.with_(lin=w.lin ^ x), dst), _table(v.with_(lin=v.lin ^ x), src).reshape(dst)):
                raise em.error(f"reshape {list(src)} -> {list(dst)} of a shared-memory view chosen by a branch "
                               "among views placed differently (a run-time XOR) moves elements differently "
                               f"for XOR {x}; slice or index the buffer inside the branch (or loop body) instead")
    if not np.array_equal(_table(w, dst), _table(v, src).reshape(dst)):
        raise em.error(f"reshape {list(src)} -> {list(dst)} of this view is not supported on AMD; "
                       "reshape the whole buffer")
    em.vals[op.result] = w



def rule_reinterpret(em, op):
    v = _view(em, op.operands[0], xor_ok=True)
    t = op.result.type
    es = max(t.dtype.bits // 8, 1)
    if v.xreg is not None:
        from .lds_join import reinterpret_start
        base, balign, start = reinterpret_start(em, v, es)
        em.vals[op.result] = _fresh(em, t.layout, tuple(t.shape), t.dtype, base, balign, start)
        return
    if v.sdim is not None:
        raise em.error(f"reinterpret as {t.dtype} of a shared-memory view chosen by a branch (or carried by a loop) "
                       "among slices of a swizzled buffer starting at different places inside a swizzle period is "
                       "not supported on AMD (its elements would be placed by the swizzle of a start known only at "
                       "run time); slice or index the buffer inside the branch (or loop body) instead")
    if v.sreg is not None:   # (a run-time start S: at base + const + es * pad(S + m), m lin's least)
        m = int(np.asarray(v.lin, np.int64).min())
        if any((v.const + v.es * int(pad(np.int64(s + m), v.pads))) % es for s in v.svals):
            raise em.error(f"reinterpret as {t.dtype} of this shared-memory view (its start known only at run "
                           f"time) may start inside an element of {es} bytes")
        x = em.salu("s_add_u32", em.s(), [v.sreg, Imm(m)]) if m else v.sreg
        acc = x
        for k, p in v.pads:
            u = em.salu("s_lshr_b32", em.s(), [x, Imm(k)])
            u = em.salu("s_lshl_b32", em.s(), [u, Imm(p)]) if p else u
            acc = em.salu("s_add_u32", em.s(), [acc, u])
        if v.es > 1:
            acc = em.salu("s_lshl_b32", em.s(), [acc, Imm(v.es.bit_length() - 1)])
        base = acc if v.base is None else em.salu("s_add_u32", em.s(), [v.base, acc])
        balign = min([v.balign if v.base is not None else _BIG]
                     + [_pow2_div(v.es * int(pad(np.int64(s + m), v.pads))) for s in v.svals])
        em.vals[op.result] = _fresh(em, t.layout, tuple(t.shape), t.dtype, base, balign, v.const)
        return
    start = int(_table(v, tuple(op.operands[0].type.shape)).min())
    if start % es:
        raise em.error(f"reinterpret as {t.dtype} starts at byte {start}, not a multiple of {es}")
    em.vals[op.result] = _fresh(em, t.layout, tuple(t.shape), t.dtype, v.base, v.balign, start)



def _xor_values(mask: int):
    """Every value a run-time XOR within ``mask`` may take."""
    bits = [1 << b for b in range(mask.bit_length()) if mask >> b & 1]
    for k in range(1 << len(bits)):
        yield sum(b for j, b in enumerate(bits) if k >> j & 1)


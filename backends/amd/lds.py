"""Shared memory on AMD: LDS buffers' allocation, ds_read/ds_write of tiles, barriers, and the rule
table of every shared-memory op.

Where a view's elements live is lds_buffer.py; each register's address and the vector widths,
lds_address.py; the view rules (.index/.slice/...), lds_views.py; 16- and 8-bit elements packed
into LDS dwords and back, lds_words.py; async copies, lds_async.py (LDS DMA: lds_dma.py); views a
branch or loop picks at run time, lds_join.py (a run-time XOR), lds_join_start.py (a run-time start)
and lds_join_predict.py (the views predicted ahead).

Barriers: ``s_barrier`` right before each access :mod:`gluon_trace.membar` names, and for
``thread_barrier``; the ``s_waitcnt lgkmcnt(0)`` before every barrier comes from waitcnt.py.
"""
from __future__ import annotations

from gluon_trace.backend import Unsupported

from .emitter import elem_key
from .layout import _free_reg_mask
from .lds_address import Access
from .lds_async import rule_async_copy, rule_commit, rule_wait
from .lds_buffer import _BIG, Lds, _fresh
from .lds_views import (_membar, _view, rule_index, rule_permute, rule_reinterpret, rule_reshape,
                        rule_slice)
from .lds_words import _READ, _WRITE, _gather, packed, unpack
from .memory import ExecMask, owner_lanes
from .mir import Imm


# -- allocation -----------------------------------------------------------------------------------

def rule_alloc(em, op):
    t = op.result.type
    off = em.smem_plan.offsets[op]
    v = _fresh(em, t.layout, tuple(t.shape), t.dtype, None, _BIG, off)
    em.vals[op.result] = v
    if op.operands:
        _membar(em, op)
        _store(em, v, op.operands[0])


# -- loads and stores ------------------------------------------------------------------------------

def _paired(items, unit: int):
    """Accesses of ``unit`` bytes (4 or 8) as ``ds_read2/ds_write2``: two per instruction when
    they share an address register and their offsets, in units, fit the two 8-bit fields
    (directly, every 64 units with the st64 forms, or from that register plus a multiple of
    256 units). ``items``: [(address register key, imm)]; returns, in order, groups
    (indices, offsets, st64, bytes to add to the address register)."""
    singles: dict = {}
    out = []
    for k, (key, imm) in enumerate(items):
        if unit not in (4, 8) or imm % unit:
            out.append(([k], [imm], False, 0))
            continue
        j = singles.pop(key, None)
        if j is None:
            singles[key] = k
            continue
        a, b = items[j][1] // unit, imm // unit
        if max(a, b) < 256:
            out.append(([j, k], [a, b], False, 0))
        elif a % 64 == 0 and b % 64 == 0 and max(a, b) < 256 * 64:
            out.append(([j, k], [a // 64, b // 64], True, 0))
        elif a // 256 == b // 256:
            out.append(([j, k], [a % 256, b % 256], False, a // 256 * 256 * unit))
        else:
            out.append(([j], [items[j][1]], False, 0))
            singles[key] = k
    out += [([k], [items[k][1]], False, 0) for k in singles.values()]
    return sorted(out, key=lambda g: g[0][0])



def _group_addr(em, acc, r, delta):
    reg, imm = acc.addr(r)
    if delta:
        ck = ("lds_rebase", elem_key(reg), delta)
        base = em.cse_get(ck)
        if base is None:
            base = em.cse_put(ck, em.valu("v_add_u32" if em.t.gfx9 else "v_add_nc_u32", em.v(),
                                          [Imm(delta), reg]))
        reg = base
    return reg, imm



def _suffix(offs):
    if len(offs) == 1:
        return f"offset:{offs[0]}" if offs[0] else ""
    return f"offset0:{offs[0]} offset1:{offs[1]}"



def _store(em, v: Lds, val) -> None:
    acc = Access(em, v, val.type)
    lay = acc.lay
    V = acc.vec()
    vals = em.elems(val)
    free_r = _free_reg_mask(lay)
    nbytes = V * v.es
    starts = [r for r in range(0, lay.num_regs, V) if not r & free_r]  # (others: copies)
    owner = owner_lanes(em, lay)
    writes = []
    for idx, offs, st64, delta in _paired([acc.where(r) for r in starts], nbytes):
        rs = [starts[k] for k in idx]
        reg, _ = _group_addr(em, acc, rs[0], delta)
        name = _WRITE[nbytes] if len(rs) == 1 else f"ds_write2{'st64' if st64 else ''}_b{8 * nbytes}"
        half = em.cse_get(("lds_half", v.dtype.name, elem_key(vals[rs[0]]))) if nbytes == 2 else None
        if half is not None:  # one 16-bit element still in the dword it was loaded in
            data = [half[0]]
            name += "_d16_hi" if half[1] else ""
        else:
            data = [_gather(em, packed(em, v.dtype, [vals[r + j] for j in range(V)])) for r in rs]
        writes.append((name, reg, data, _suffix(offs)))
        if owner is None:
            _emit_writes(em, writes, None)
            writes = []
    # with copies in other lanes, only their owners write: addresses and data are made first,
    # as values made under a partial EXEC mask must not be reused
    _emit_writes(em, writes, owner)



def _emit_writes(em, writes, owner) -> None:
    if not writes:
        return
    with ExecMask(em, None, owner):
        for name, reg, data, sfx in writes:
            em.emit(name, [], [reg, *data], suffix=sfx, kind="lds_store")



def rule_store(em, op):
    v = _view(em, op.operands[0], xor_ok=True)
    _membar(em, op)
    _store(em, v, op.operands[1])



def rule_load(em, op):
    v = _view(em, op.operands[0], xor_ok=True)
    _membar(em, op)
    d = v.dtype
    acc = Access(em, v, op.result.type)
    V = acc.vec()
    es = v.es
    nbytes = V * es
    free_r = _free_reg_mask(acc.lay)
    starts = [r for r in range(0, acc.lay.num_regs, V) if not r & free_r]
    elems_of: dict = {}
    nw = max(nbytes // 4, 1)
    # pairs of 64-bit elements would land in one 4-dword register: they load one by one; so do
    # 8-byte runs of narrow elements (MMA operands: a ds_read2_b64's halves, as the MFMA's
    # register pair, cost two copies each -- more than the instruction pairing saves)
    pair_unit = nbytes if es == 4 or (es < 4 and nbytes == 4) else 0
    for idx, offs, st64, delta in _paired([acc.where(r) for r in starts], pair_unit):
        reg, _ = _group_addr(em, acc, starts[idx[0]], delta)
        if nbytes < 4:
            name = {1: "i8" if d.is_signed else "u8", 2: "i16" if (d.is_signed and es == 2) else "u16"}[nbytes]
            raw = em.v()
            em.emit(f"ds_read_{name}", [raw], [reg], suffix=_suffix(offs), kind="lds_load")
            elems_of[starts[idx[0]]] = [raw if d.is_int else unpack(em, d, raw, 0)] if V == 1 else \
                [unpack(em, d, raw, 0), unpack(em, d, raw, 1)]  # (two bytes)
            continue
        dst = em.v(nw * len(idx))
        name = _READ[nbytes] if len(idx) == 1 else f"ds_read2{'st64' if st64 else ''}_b{8 * nbytes}"
        em.emit(name, [dst], [reg], suffix=_suffix(offs), kind="lds_load")
        for n, k in enumerate(idx):
            if es == 8:
                elems_of[starts[k]] = [dst]
                continue
            words = [dst] if dst.size == 1 else [dst[n * nw + j] for j in range(nw)]
            if es == 4:
                elems_of[starts[k]] = words
                continue
            per = 4 // es
            elems = [unpack(em, d, words[j // per], j % per) for j in range(V)]
            for j in range(0, V, per):  # an MMA packing these again takes the loaded dword
                em.cse_put(("lds_word", d.name) + tuple(elem_key(x) for x in elems[j:j + per]), words[j // per])
            elems_of[starts[k]] = elems
    out = []
    for r in range(0, acc.lay.num_regs, V):
        # a copy of an element this thread already loaded: the same registers
        out += elems_of[r] if not r & free_r else out[r & ~free_r:(r & ~free_r) + V]
    em.vals[op.result] = out



# -- barriers ---------------------------------------------------------------------------------------

def rule_thread_barrier(em, op):
    em.barrier()



_NVIDIA = ("is an NVIDIA instruction ({}); AMD GPUs have no equivalent. On AMD, {}")
_ASYNC = "stage global -> LDS copies with async_copy (or plain loads and smem.store) and gl.thread_barrier()"

RULES = {
    "smem_alloc": rule_alloc,
    "smem_index": rule_index,
    "smem_slice": rule_slice,
    "smem_permute": rule_permute,
    "smem_reshape": rule_reshape,
    "smem_reinterpret": rule_reinterpret,
    "smem_load": rule_load,
    "smem_store": rule_store,
    "thread_barrier": rule_thread_barrier,
    "async_copy_load": rule_async_copy,
    "async_copy_commit_group": rule_commit,
    "async_copy_wait_group": rule_wait,
}

NVIDIA_ONLY = {
    "mbarrier_init": ("Hopper/Ampere mbarrier", _ASYNC),
    "mbarrier_invalidate": ("Hopper/Ampere mbarrier", _ASYNC),
    "mbarrier_expect": ("Hopper mbarrier transaction counts", _ASYNC),
    "mbarrier_arrive": ("Hopper/Ampere mbarrier", _ASYNC),
    "mbarrier_wait": ("Hopper/Ampere mbarrier", _ASYNC),
    "async_copy_mbarrier_arrive": ("Ampere cp.async.mbarrier.arrive", "use async_copy.wait_group and "
                                   "gl.thread_barrier()"),
    "tma_load": ("Hopper TMA", "load tiles with gl.load (or async_copy) and smem.store"),
    "tma_store": ("Hopper TMA", "store tiles with smem.load and gl.store"),
    "tma_store_wait": ("Hopper TMA", "global stores need no wait"),
    "tensordesc_dim": ("Hopper TMA descriptors", "pass sizes and pointers as kernel arguments"),
    "fence_async_shared": ("Hopper async proxy fence", "LDS needs no proxy fence; gl.thread_barrier() "
                           "orders waves"),
    "wgmma": ("Hopper warpgroup_mma", "use gl.amd.cdna3.mfma (gfx90a, gfx942) or gl.amd.rdna3.wmma (gfx1100)"),
    "wgmma_wait": ("Hopper warpgroup_mma_wait", "MFMA/WMMA results need no wait"),
    "mma_v2": ("Ampere mma.sync", "use gl.amd.cdna3.mfma (gfx90a, gfx942) or gl.amd.rdna3.wmma (gfx1100)"),
    "cluster_cta_id": ("Hopper clusters of CTAs", "launch one CTA per workgroup (num_ctas=1)"),
    "cluster_barrier": ("Hopper clusters of CTAs", "launch one CTA per workgroup (num_ctas=1)"),
}

for _n, (_what, _instead) in NVIDIA_ONLY.items():
    RULES[_n] = Unsupported(_NVIDIA.format(_what, _instead))

"""Shared memory on AMD: LDS buffers and their views, ds_read/ds_write, barriers, async copies.

Addressing (where a view's elements live, each register's address, vector widths) is in
lds_address.py. 16- and 8-bit elements, kept widened in registers, are packed into dwords
(``v_perm_b32``) for the LDS, so a run of 8 f16 is one ``ds_write_b128``; MMA operands get the
loaded dwords back through :func:`packed`.

Barriers: ``s_barrier`` right before each access :mod:`gluon_trace.membar` names, and for
``thread_barrier``; the ``s_waitcnt lgkmcnt(0)`` before every barrier comes from waitcnt.py.
An async copy is a global load into VGPRs and, later, a ds_write of the same bytes (masked-off
elements written as zeros): see :class:`AsyncCopies` for when. On gfx942, where each wave's
lanes fill consecutive LDS dwords, it is one ``buffer_load_dword ... lds`` a dword instead, the
bytes going straight to LDS (lds_dma.py). The user's ``wait_group`` and the barrier membar puts
before the first read of the buffer make them visible to every wave.
"""
from __future__ import annotations

import numpy as np

from gluon_trace.backend import Unsupported
from gluon_trace.errors import CompileError

from . import lds_dma
from .emitter import elem_key
from .layout import _free_reg_mask
from .lds_address import Access
from .lds_buffer import _BIG, Lds, _fresh, _pow2_div, _table, pad
from .memory import ExecMask, _base_key, address, owner_lanes
from .mir import Imm, Sub, strip


def _view(em, val, xor_ok: bool = False, start_ok: bool = False) -> Lds:
    """The view ``val``; ``xor_ok``: the caller addresses its elements through Access, which
    folds a run-time XOR (lds_join.py) into each thread register; ``start_ok``: it takes a run-time
    start (lds_join.shift_join: Access adds it per access) but no run-time XOR; every other use
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


# -- allocation and views ---------------------------------------------------------------------

def rule_alloc(em, op):
    t = op.result.type
    off = em.smem_plan.offsets[op]
    v = _fresh(em, t.layout, tuple(t.shape), t.dtype, None, _BIG, off)
    em.vals[op.result] = v
    if op.operands:
        _membar(em, op)
        _store(em, v, op.operands[0])


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


# -- data to and from LDS words -------------------------------------------------------------------

def _sel(em, value: int):
    """A v_perm_b32 selector: a literal where VOP3 takes one (gfx11), else a hoisted SGPR."""
    if em.t.vop3_literal:
        return Imm(value)
    key = ("perm_sel", value)
    if key not in em.memo:
        with em.hoisted():
            r = em.s()
            em.emit("s_mov_b32", [r], [Imm(value)])
            em.memo[key] = r
    return em.memo[key]


_WRITE = {1: "ds_write_b8", 2: "ds_write_b16", 4: "ds_write_b32", 8: "ds_write_b64", 16: "ds_write_b128"}
_READ = {4: "ds_read_b32", 8: "ds_read_b64", 16: "ds_read_b128"}


def _perm(em, hi, lo, sel, dst=None):
    return em.valu("v_perm_b32", dst if dst is not None else em.v(), [hi, lo, _sel(em, sel)], form="vop3")


def _narrow(em, d, x):
    """The element's memory bits in the low bytes of a VGPR (higher bits: don't care)."""
    if d.bits == 8:  # a byte still in the dword it was loaded in: that dword, shifted down
        hit = em.cse_get(("lds_byte", d.name, elem_key(x)))
        if hit is not None:
            word, k = hit
            if not k:
                return word
            key = ("byte_down", elem_key(word), k)
            down = em.cse_get(key)
            return down if down is not None else \
                em.cse_put(key, em.valu("v_lshrrev_b32", em.v(), [Imm(8 * k), word]))
    x = em.real(x)
    if d.name == "float16":
        return em.valu("v_cvt_f16_f32", em.v(), [x], form="vop1")
    if d.name == "bfloat16":
        return em.valu("v_lshrrev_b32", em.v(), [Imm(16), x])
    return em.to_v(x)


def pack(em, d, xs, dsts=None) -> list:
    """Dwords (or one narrow word) holding elements ``xs`` as memory bytes (16-bit elements:
    into ``dsts`` when given, the dwords of one register an instruction reads whole)."""
    es = max(d.bits // 8, 1)
    if es >= 4:
        return [em.to_v(em.real(x)) for x in xs]
    if len(xs) * es < 4:
        if len(xs) == 1:
            return [_narrow(em, d, xs[0])]
        b = [_narrow(em, d, x) for x in xs]  # two bytes
        return [_perm(em, b[1], b[0], 0x0C0C0400)]
    words = []
    if es == 2:
        for i in range(0, len(xs), 2):
            dst = dsts[i // 2] if dsts else None
            if d.name == "bfloat16":  # the f32 register's high half is the bf16
                words.append(_perm(em, em.to_v(em.real(xs[i + 1])), em.to_v(em.real(xs[i])), 0x07060302, dst))
            elif d.name == "float16":  # exact in f16 (widened f16 values): one packing convert
                words.append(em.valu("v_cvt_pkrtz_f16_f32", dst if dst is not None else em.v(),
                                     [em.real(xs[i]), em.real(xs[i + 1])]))
            else:
                a, b = _narrow(em, d, xs[i]), _narrow(em, d, xs[i + 1])
                words.append(_perm(em, b, a, 0x05040100, dst))
        return words
    if d.is_fp8 and dsts is None:  # bytes just rounded from f32: two v_cvt_pk and a v_perm a dword
        from gluon_trace import dtypes as dt
        from .fp8 import operand_words
        return operand_words(em, d, xs, lambda g: pack(em, dt.uint8, g))
    for i in range(0, len(xs), 4):
        b = [em.to_v(em.real(x)) for x in xs[i:i + 4]]
        p01 = _perm(em, b[1], b[0], 0x0C0C0400)
        p23 = _perm(em, b[3], b[2], 0x0C0C0400)
        words.append(_perm(em, p23, p01, 0x05040100))
    return words


def packed(em, d, xs) -> list:
    """Dwords holding 16/8-bit elements ``xs`` (2 or 4 per dword, lowest first): the dword they
    were loaded from LDS in when that load is in scope, else packed here (for MMA operands)."""
    es = max(d.bits // 8, 1)
    if es >= 4:
        return pack(em, d, xs)
    per = 4 // es
    groups = [xs[i:i + per] for i in range(0, len(xs), per)]
    hits = [em.cse_get(("lds_word", d.name) + tuple(elem_key(x) for x in g)) for g in groups]
    if es == 2 and len(groups) > 1 and all(h is None for h in hits) and len(xs) % 2 == 0:
        r = em.v(len(groups))  # packed straight into one register: no copies to gather them
        return pack(em, d, xs, [r[k] for k in range(len(groups))])
    return [h if h is not None else pack(em, d, g)[0] for g, h in zip(groups, hits)]


def unpack(em, d, word, k: int):
    """Element k of a loaded dword (or of a narrow load's result when the word holds one)."""
    es = max(d.bits // 8, 1)
    if es == 2:
        if d.name == "float16":
            src = word if k == 0 else em.valu("v_lshrrev_b32", em.v(), [Imm(16), word])
            return em.valu("v_cvt_f32_f16", em.v(), [src], form="vop1")
        if d.name == "bfloat16":
            if k == 0:
                return em.valu("v_lshlrev_b32", em.v(), [Imm(16), word])
            return em.valu("v_and_b32", em.v(), [Imm(0xFFFF0000), word])
        if d.is_signed:
            if k == 0:
                return em.valu("v_bfe_i32", em.v(), [word, Imm(0), Imm(16)], form="vop3")
            return em.valu("v_ashrrev_i32", em.v(), [Imm(16), word])
        if k == 0:
            return em.valu("v_and_b32", em.v(), [Imm(0xFFFF), word])
        return em.valu("v_lshrrev_b32", em.v(), [Imm(16), word])
    op = "v_bfe_i32" if d.is_signed else "v_bfe_u32"
    r = em.valu(op, em.v(), [word, Imm(8 * k), Imm(8)], form="vop3")
    if d.is_fp8:  # fp8.to_f32 widens it straight from the word (two bytes an instruction)
        em.cse_put(("fp8_in_word", elem_key(r)), (word, k))
    return r


def _gather(em, words):
    """The words as one register (a vector write takes consecutive VGPRs)."""
    if len(words) == 1:
        return words[0]
    first = strip(words[0])
    if isinstance(first, Sub) and first.reg.size == len(words) and all(
            isinstance(strip(w), Sub) and strip(w).reg is first.reg and strip(w).index == k
            for k, w in enumerate(words)):
        return first.reg  # already consecutive: the dwords of one load
    data = em.v(len(words))
    for j, w in enumerate(words):
        em.emit("v_mov_b32", [data[j]], [w], kind="valu")
    return data


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


# -- barriers and async copies ----------------------------------------------------------------------

def rule_thread_barrier(em, op):
    em.barrier()


_GLOAD = {1: "global_load_ubyte", 2: "global_load_ushort", 4: "global_load_dword",
          8: "global_load_dwordx2", 16: "global_load_dwordx4"}


def rule_async_copy(em, op):
    # (a run-time start: each copy's LDS address is made where it is issued, from the loop's or
    # branch's start, and written in the same block; LDS DMA, whose M0 is made at the entry, is not taken)
    v = _view(em, op.operands[0], start_ok=True)
    ptr_v = op.operands[1]
    _membar(em, op)
    es = v.es
    acc = Access(em, v, ptr_v.type)
    lay = acc.lay
    ps = em.elems(ptr_v)
    ms = [em.real(x) for x in em.elems(op.operands[2])] if op.attrs.get("mask") else None
    V = acc.vec()
    groups = lds_dma.plan(em, acc, ps, ms)
    if groups is not None:  # gfx942: each dword straight into LDS (lds_dma.py)
        for token in lds_dma.emit(em, acc, ps, ms, groups):
            async_copies(em).add((None, None, token, 4, None, len(em.code)))
        return

    def contiguous(r, n):
        b0, c0 = _base_key(ps[r])
        mk = elem_key(ms[r]) if ms else None
        for j in range(1, n):
            b, c = _base_key(ps[r + j])
            if b != b0 or c != c0 + j * es or (ms and elem_key(ms[r + j]) != mk):
                return False
        return True
    while V > 1 and not all(contiguous(r, V) for r in range(0, lay.num_regs, V)):
        V //= 2
    free_r = _free_reg_mask(lay)
    owner = owner_lanes(em, lay)
    for r in range(0, lay.num_regs, V):
        if r & free_r:
            continue
        nbytes = V * es
        m = ms[r] if ms else None
        if isinstance(m, Imm):
            m = None if m.bits else m
        nw = max(nbytes // 4, 1)
        reg, imm = acc.addr(r)
        addr, sfx = address(em, ps[r], room=nbytes)
        raw = em.v(nw)
        if isinstance(m, Imm):  # never copied: zeros
            for j in range(nw):
                em.emit("v_mov_b32", [raw if nw == 1 else raw[j]], [Imm(0)], kind="valu")
        else:
            if m is not None:
                for j in range(nw):
                    em.emit("v_mov_b32", [raw if nw == 1 else raw[j]], [Imm(0)], kind="valu")
            with ExecMask(em, m, owner):
                em.emit(_GLOAD[nbytes], [raw], addr, suffix=sfx, kind="vmem_load")
        async_copies(em).add((reg, imm, raw, nbytes, owner, len(em.code)))


class AsyncCopies:
    """The LDS writes of async copies wait in VGPRs until the copy must be complete: a
    ``wait_group`` that covers its group, or the end of the block it was issued in, or the
    next loop/branch (so other work overlaps the global loads' latency, as cp.async's does).
    A barrier emitted between the copy and its writes no longer orders them before the
    readers membar placed no barrier for (it took the copy as written at issue): then one
    more ``s_barrier`` follows the writes. An LDS DMA copy (lds_dma.py) has no writes to place:
    its loads land on their own, and where the writes would go an ``lds_dma_wait`` makes
    waitcnt.py wait for them (the same barrier rule follows)."""

    def __init__(self, em):
        self.em = em
        self.scopes: list = []     # per block being emitted: [uncommitted writes, committed groups]

    def enter(self) -> None:
        self.scopes.append([[], []])

    def leave(self) -> None:
        self.flush()
        self.scopes.pop()

    def add(self, write) -> None:
        self.scopes[-1][0].append(write)

    def commit(self) -> None:
        scope = self.scopes[-1]
        scope[1].append(scope[0])
        scope[0] = []

    def wait(self, n: int) -> None:
        groups = self.scopes[-1][1]
        done = groups[:max(len(groups) - n, 0)]
        del groups[:len(done)]
        self._write([w for g in done for w in g])

    def flush(self) -> None:
        if not self.scopes:
            return
        scope = self.scopes[-1]
        writes = [w for g in scope[1] for w in g] + scope[0]
        scope[0], scope[1] = [], []
        self._write(writes)

    def _write(self, writes) -> None:
        if not writes:
            return
        em = self.em
        first = min(w[5] for w in writes)
        crossed = any(getattr(i, "kind", None) == "barrier" for i in em.code[first:])
        tokens = [w[2] for w in writes if w[0] is None]
        if tokens:  # LDS DMA: waitcnt.py waits until these loads have retired (their bytes landed)
            em.emit("lds_dma_wait", kind="lds_dma_wait", imp=tokens)
        for reg, imm, raw, nbytes, owner, _ in writes:
            if reg is None:
                continue
            with ExecMask(em, None, owner):
                em.emit(_WRITE[nbytes], [], [reg, raw], suffix=f"offset:{imm}" if imm else "",
                        kind="lds_store")
        if crossed:
            em.barrier()


def async_copies(em) -> AsyncCopies:
    if not hasattr(em, "async_copies"):
        em.async_copies = AsyncCopies(em)
    return em.async_copies


def rule_commit(em, op):
    async_copies(em).commit()


def rule_wait(em, op):
    async_copies(em).wait(int(op.attrs["num_outstanding"]))


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

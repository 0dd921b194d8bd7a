"""Reductions and scans across registers, lanes (DPP, ds_swizzle, ds_bpermute) and
warps (LDS).

Both follow the interpreter's combination order exactly, so float sums agree bit for
bit: a reduction combines coordinate bit 0 first, then bit 1, ..., always with the
element whose bit is 0 on the left (the interpreter's tree of adjacent pairs); a scan
is the same Hillis-Steele sequence (combine with the element d before, d = 1, 2, 4...).
The direct reduction needs a layout in which each basis moving along the reduced axis
is one coordinate bit of that axis alone, no two the same -- true of every
BlockedLayout and most linear ones. Any other legal layout (bases mixing the axis with
another dimension, multi-bit or repeated bases) is first moved through LDS into
``canonical``'s layout and reduced there; the result then takes one more LDS round trip
into its SliceLayout (a write, barrier and read per operand each way). The scan goes
through LDS at element addresses, so it takes every layout as it is.
"""
from __future__ import annotations

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace.errors import CompileError
from gluon_trace.layouts import LinearLayout

from . import arith
from .emitter import dwords
from .layout import (_free_reg_mask, byte_addresses, lds_exchange, lds_load, lds_store_owned, log2,
                     reg_part, row_major, thread_part, tid_pairs, wave_owner, _strides)
from .mir import Imm, Sub, hi, is_vgpr, lo

COMMUTATIVE = {"add", "mul", "maximum", "minimum", "and", "or", "xor"}


def is_commutative(body) -> bool:
    ops = body.ops
    if len(body.args) != 2 or len(ops) != 2 or ops[0].name not in COMMUTATIVE:
        return False
    a, b = body.args
    return set(ops[0].operands) == {a, b} and ops[1].operands == [ops[0].results[0]]


def _order_free(body, d) -> bool:
    """A combine whose result does not depend on the order of combination."""
    name = body.ops[0].name
    return name in ("maximum", "minimum", "and", "or", "xor") or (
        name in ("add", "mul") and not d.is_floating)


def _check_region(em, body, allow=()) -> None:
    for o in body.walk():
        if o.name in ("store", "atomic_rmw", "atomic_cas", "print") and o.name not in allow:
            # the interpreter runs it once per combined pair. A reduce forms exactly its
            # pairs (lanes holding copies store the same value again: harmless for a store,
            # not for an atomic or a print); the scan also combines, then discards, pairs
            # for positions before each step's distance
            where = "a reduce's or scan's" if allow else "a scan's"
            raise CompileError(f"AMD backend ({em.t.name}): `{o.name}` inside {where} combine function "
                               "is not supported; return the values from the reduction or scan and "
                               "store them after it", o.loc or em.loc)
        if o.regions:
            raise em.error(f"a combine function may only compute on its arguments; "
                           f"found `{o.name}`")


# -- cross-lane moves ----------------------------------------------------------------------------

def shuffle_xor(em, x, m: int):
    """The value lane (lane ^ m) holds. Uniform values are the same in every lane."""
    x = em.real(x)
    if not is_vgpr(x):
        return x
    if x.size == 2:
        r = em.v(2)
        for k in range(2):
            _shuffle32(em, Sub(x, k), m, r[k])
        return r
    r = em.v()
    _shuffle32(em, x, m, r)
    return r


def _shuffle32(em, x, m, dst):
    if m in (1, 2):
        perm = "[1,0,3,2]" if m == 1 else "[2,3,0,1]"
        em.emit("v_mov_b32_dpp", [dst], [x], suffix=f"quad_perm:{perm} row_mask:0xf bank_mask:0xf",
                kind="valu")
    elif m < 32:
        # ds_swizzle bit mode: and_mask 0x1f, or_mask 0, xor_mask m (within 32 lanes)
        em.emit("ds_swizzle_b32", [dst], [x], suffix=f"offset:{0x1F | (m << 10):#x}", kind="lds_load")
    else:
        key = ("bperm", m)
        if key not in em.memo:
            with em.hoisted():
                ln = em.valu("v_and_b32", em.v(), [Imm(em.wave - 1), em.tid])
                t = em.valu("v_xor_b32", em.v(), [Imm(m), ln])
                em.memo[key] = em.valu("v_lshlrev_b32", em.v(), [Imm(2), t])
        em.emit("ds_bpermute_b32", [dst], [em.memo[key], x], kind="lds_load")


def lane_bit_mask(em, bit: int):
    """SGPR lane mask of the threads whose work-item id has ``bit`` set."""
    key = ("lanebit", bit)
    if key not in em.memo:
        with em.hoisted():
            t = em.valu("v_bfe_u32", em.v(), [em.tid, Imm(bit), Imm(1)], form="vop3")
            em.valu("v_cmp_ne_u32", em.vcc, [Imm(0), t], form="vopc")
            m = em.mask_reg()
            em.emit(f"s_mov_{em.t.mask_suffix}", [m], [em.vcc])
            em.memo[key] = m
    return em.memo[key]


def _select(em, mask, if_clear, if_set):
    if_clear, if_set = em.real(if_clear), em.real(if_set)
    if not is_vgpr(if_clear) and not is_vgpr(if_set) and if_clear == if_set:
        return if_clear
    if getattr(if_clear, "size", 1) == 2:
        r = em.v(2)
        for k, f in ((0, lo), (1, hi)):
            em.valu("v_cndmask_b32", r[k], [f(if_clear), f(if_set), mask], form="vop3")
        return r
    return em.valu("v_cndmask_b32", em.v(), [if_clear, if_set, mask], form="vop3")


# -- reduce ----------------------------------------------------------------------------------------

def _axis_steps(lin, axis, nbits):
    """{coordinate bit of the axis: ("reg"|"lane"|"warp", base index)}, or None when a
    basis moving along the axis also moves along another dimension, is not a single
    coordinate bit, or repeats another's bit: the direct lowering pairs elements by
    such bits, so it would combine the wrong elements or count one twice."""
    steps = {}
    for kind, bases in (("reg", lin.reg_bases), ("lane", lin.lane_bases), ("warp", lin.warp_bases)):
        for j, b in enumerate(bases):
            a = b[axis]
            if a == 0:
                continue
            if a & (a - 1) or any(c for d, c in enumerate(b) if d != axis) or log2(a) in steps:
                return None
            steps[log2(a)] = (kind, j)
    return steps if sorted(steps) == list(range(nbits)) else None


def canonical(shape, axis: int, lanes: int, warps: int) -> LinearLayout:
    """The layout the fallback goes through: the axis's coordinate bits, lowest first, in
    registers, then lanes, then warps; the other dimensions' bits after them; lanes/warps
    left over hold copies (zero bases)."""
    rank = len(shape)

    def unit(d, k):
        return tuple((1 << k) if e == d else 0 for e in range(rank))
    bits = [unit(axis, k) for k in range(log2(shape[axis]))]
    for d in reversed(range(rank)):
        if d != axis:
            bits += [unit(d, k) for k in range(log2(shape[d]))]
    nl, nw = log2(lanes), log2(warps)
    nr = max(0, len(bits) - nl - nw)
    pad = bits[nr:] + [(0,) * rank] * (nl + nw)
    return LinearLayout(tuple(shape), tuple(bits[:nr]), tuple(pad[:nl]), tuple(pad[nl:nl + nw]))


def rule_reduce(em, op):
    axis = op.attrs["axis"]
    body = op.regions[0]
    _check_region(em, body, allow=("store",))
    xs = op.operands
    ty = xs[0].type
    lin = em.linear(ty)
    nbits = log2(ty.shape[axis])
    steps = _axis_steps(lin, axis, nbits)
    ins = [em.elems(x) for x in xs]  # var + c elements are materialized at first use
    if steps is None:
        # Fallback: one LDS round trip per operand (write, barrier, read) into the
        # canonical layout, then the direct reduction there.
        canon = canonical(ty.shape, axis, em.wave, lin.num_warps)
        ins = [lds_exchange(em, x.type.dtype, v, lin, canon, lambda c: c) for x, v in zip(xs, ins)]
        lin = canon
        steps = _axis_steps(lin, axis, nbits)
    comm = len(xs) == 1 and is_commutative(body)
    free_r = _free_reg_mask(lin)
    cur = {r: tuple(v[r] for v in ins) for r in range(lin.num_regs) if not r & free_r}

    def comb(a, b):
        return tuple(em.run_region(body, list(a) + list(b)))

    # The interpreter's order (coordinate bit 0 first) matters for float sums; for
    # order-free combines (max/min, integer add, bitwise) registers go first, which
    # halves the live values before any cross-lane traffic.
    order = list(range(nbits))
    if comm and _order_free(body, xs[0].type.dtype):
        rank = {"reg": 0, "lane": 1, "warp": 2}
        order.sort(key=lambda b: rank[steps[b][0]])
    def lane_step(v, j):
        other = tuple(shuffle_xor(em, x, 1 << j) for x in v)
        if comm:
            return comb(v, other)
        mask = lane_bit_mask(em, j)  # the lane with the bit set holds the right-hand element
        lhs = tuple(_select(em, mask, a, b) for a, b in zip(v, other))
        rhs = tuple(_select(em, mask, b, a) for a, b in zip(v, other))
        return comb(lhs, rhs)

    def run_steps(cur, run):
        """Register and lane steps, one output at a time: the registers that end up in
        one result are combined to the end before the next result starts, so only the
        results and one group's partial values are live together."""
        jmask = sum(1 << j for kind, j in run if kind == "reg")
        groups: dict = {}
        for r in sorted(cur):
            groups.setdefault(r & ~jmask, []).append(r)
        out = {}
        for members in groups.values():
            sub = {r: cur[r] for r in members}
            for kind, j in run:
                if kind == "reg":
                    sub = {r: comb(v, sub[r | 1 << j]) for r, v in sub.items() if not r >> j & 1}
                else:
                    sub = {r: lane_step(v, j) for r, v in sub.items()}
            out.update(sub)
        return out

    done_lanes = done_warps = 0
    k = 0
    while k < len(order):
        run = []
        while k < len(order) and steps[order[k]][0] != "warp":
            run.append(steps[order[k]])
            k += 1
        if run:
            cur = run_steps(cur, run)
            done_lanes |= sum(1 << j for kind, j in run if kind == "lane")
        group = []
        while k < len(order) and steps[order[k]][0] == "warp":
            group.append(steps[order[k]][1])
            k += 1
        if group:
            cur = _warp_reduce(em, op, lin, ty.shape, cur, group, done_lanes, done_warps, comb)
            done_warps |= sum(1 << g for g in group)
    res = op.results
    if res[0].type.is_scalar:
        (v,) = cur.values()
        for r, x in zip(res, v):
            em.vals[r] = x
        return
    out_lin = em.linear(res[0].type)
    mapping = _out_mapping(lin, axis, out_lin, sorted(cur))
    if mapping is not None:
        for k, r in enumerate(res):
            em.vals[r] = [cur[q][k] for q in mapping]
        return
    # After the fallback the partial results sit in the canonical layout's slice, not the
    # result's: one more LDS round trip per result.
    keep = [j for j, b in enumerate(lin.reg_bases) if not b[axis]]
    drop = lambda b: tuple(b[:axis]) + tuple(b[axis + 1:])  # noqa: E731
    held = LinearLayout(out_lin.shape, tuple(drop(lin.reg_bases[j]) for j in keep),
                        tuple(map(drop, lin.lane_bases)), tuple(map(drop, lin.warp_bases)))
    keys = [sum(1 << j for i, j in enumerate(keep) if k >> i & 1) & ~free_r for k in range(held.num_regs)]
    for k, r in enumerate(res):
        em.vals[r] = lds_exchange(em, r.type.dtype, [cur[q][k] for q in keys], held, out_lin, lambda c: c)


def _out_mapping(lin, axis, out_lin, kept):
    sc = np.delete(lin.coords(), axis, axis=-1)[:, :, kept, :]
    dc = out_lin.coords()
    if sc.shape[:2] != dc.shape[:2]:
        return None
    strides = _strides(out_lin.shape)
    ks = sum(sc[..., d] * s for d, s in enumerate(strides))
    kd = sum(dc[..., d] * s for d, s in enumerate(strides))
    first = {}
    for i, k in enumerate(np.atleast_1d(ks[0, 0]).tolist()):
        first.setdefault(k, i)
    cand = [first.get(k) for k in np.atleast_1d(kd[0, 0]).tolist()]
    if any(c is None for c in cand) or not np.array_equal(ks[:, :, cand], kd):
        return None
    return [kept[c] for c in cand]


def _warp_reduce(em, op, lin, shape, cur, group, done_lanes, done_warps, comb):
    """Combine across the warps of ``group`` through LDS: every thread writes its partial
    at the slot of its (partially reduced) element, then reads all the group's partials
    of its element and combines them in tree order."""
    dts = [x.type.dtype for x in op.operands]
    numel = int(np.prod(shape))
    fn = row_major(shape)
    bases = []
    total = 0
    for d in dts:
        bases.append(total)
        total += numel * 4 * dwords(d)
    em.use_lds(total)
    regs = sorted(cur)
    # waves holding the same partials (copies, or already combined) leave their slots to one
    owner = wave_owner(em, _slots_layout(lin, regs, done_lanes, done_warps))
    em.lds_begin()
    for k, d in enumerate(dts):
        es = 4 * dwords(d)
        lds_store_owned(em, [(addr, off, cur[r][k], dwords(d)) for (addr, off), r in zip(
            byte_addresses(em, lin, fn, es, regs, done_lanes, done_warps, base=bases[k]), regs)], owner)
    em.barrier()
    gmask = sum(1 << g for g in group)
    new = {}
    for k, d in enumerate(dts):
        es = 4 * dwords(d)
        addrs = byte_addresses(em, lin, fn, es, regs, done_lanes, done_warps | gmask, base=bases[k])
        for (addr, off), r in zip(addrs, regs):
            parts = []
            for c in range(1 << len(group)):
                delta = 0
                for i, g in enumerate(group):
                    if c >> i & 1:
                        delta ^= fn(lin.warp_bases[g])
                o = off + delta * es
                if o >= 65536:
                    a2 = em.valu("v_add_u32", em.v(), [Imm(o), addr])
                    parts.append(lds_load(em, a2, 0, dwords(d)))
                else:
                    parts.append(lds_load(em, addr, o, dwords(d)))
            new.setdefault(r, []).append(parts)
    em.lds_end()
    out = {}
    for r in regs:
        parts = [tuple(new[r][k][c] for k in range(len(dts))) for c in range(1 << len(group))]
        while len(parts) > 1:
            parts = [comb(parts[2 * i], parts[2 * i + 1]) for i in range(len(parts) // 2)]
        out[r] = parts[0]
    return out


def _slots_layout(lin, regs, done_lanes, done_warps) -> LinearLayout:
    """The layout of the slots _warp_reduce's stores address: ``lin`` with the bases they
    leave out zero -- registers no longer held (reduced or copies: ``regs`` are a product set
    of the others) and lanes and waves already reduced, whose threads now hold one partial.
    Its wave copies are the waves that would store the same slots as another."""
    held = 0
    for r in regs:
        held |= r
    zero = tuple(0 for _ in lin.shape)

    def keep(bases, mask):
        return tuple(tuple(b) if mask >> j & 1 else zero for j, b in enumerate(bases))
    return LinearLayout(lin.shape, keep(lin.reg_bases, held), keep(lin.lane_bases, ~done_lanes),
                        keep(lin.warp_bases, ~done_warps))


# -- scan ------------------------------------------------------------------------------------------

def rule_scan(em, op):
    """Hillis-Steele through LDS: in round d each element combines with the one d before
    it (after it when reversed), exactly the interpreter's sequence."""
    axis, reverse = op.attrs["axis"], op.attrs["reverse"]
    body = op.regions[0]
    _check_region(em, body)
    xs = op.operands
    ty = xs[0].type
    lin = em.linear(ty)
    n = ty.shape[axis]
    dts = [x.type.dtype for x in xs]
    cur = [[em.real(e) for e in em.elems(x)] for x in xs]
    if n == 1:
        for r, v in zip(op.results, cur):
            em.vals[r] = v
        return
    numel = int(np.prod(ty.shape))
    fn = row_major(ty.shape)
    stride = _strides(ty.shape)[axis]
    nreg = lin.num_regs
    free_r = _free_reg_mask(lin)
    bases, total = [], 0
    for d in dts:
        bases.append(total)
        total += numel * 4 * dwords(d)
    em.use_lds(total)
    pairs = tid_pairs(em, lin, fn)
    tp = thread_part(em, pairs)
    from .layout import combine as xor_const

    def axis_index(r):  # the register's index along the axis, from its flat index
        flat = xor_const(em, tp, pairs, reg_part(lin, fn, r))
        if isinstance(flat, Imm):
            return Imm((flat.bits // stride) % n)
        return em.valu("v_bfe_u32", em.v(), [flat, Imm(log2(stride)), Imm(log2(n))], form="vop3")
    addrs = [byte_addresses(em, lin, fn, 4 * dwords(d), range(nreg), base=bases[k])
             for k, d in enumerate(dts)]
    owner = wave_owner(em, lin)   # waves holding copies leave the slots to one of them
    d_ = 1
    while d_ < n:
        em.lds_begin()
        lds_store_owned(em, [addrs[k][r] + (cur[k][r], dwords(d)) for k, d in enumerate(dts)
                             for r in range(nreg) if not r & free_r], owner)
        em.barrier()
        new = [[None] * nreg for _ in dts]
        # one register at a time: read its partner, combine, select (keeps pressure low)
        for r in range(nreg):
            oth = []
            for k, d in enumerate(dts):
                es = 4 * dwords(d)
                addr, off = addrs[k][r]
                o = off + d_ * stride * es * (1 if reverse else -1)
                if 0 <= o < 65536:
                    oth.append(lds_load(em, addr, o, dwords(d)))
                else:
                    a2 = em.valu("v_add_u32", em.v(), [Imm(o & 0xFFFFFFFF), addr])
                    oth.append(lds_load(em, a2, 0, dwords(d)))
            own = [cur[k][r] for k in range(len(dts))]
            comb = em.run_region(body, own + oth if reverse else oth + own)
            if reverse:
                valid = arith.compare(em, "lt", dt.int32, axis_index(r), Imm(n - d_))
            else:
                valid = arith.compare(em, "ge", dt.int32, axis_index(r), Imm(d_))
            for k, d in enumerate(dts):
                new[k][r] = arith.where(em, d, valid, comb[k], own[k])
        em.lds_end()
        cur = new
        d_ *= 2
    for r, v in zip(op.results, cur):
        em.vals[r] = v

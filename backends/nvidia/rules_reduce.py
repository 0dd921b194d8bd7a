"""Lowering of reduce and scan.

Both have a direct lowering for layouts in which every register/lane/warp basis that
moves along the axis is one coordinate bit of the axis alone, no two the same (every
BlockedLayout, most linear ones). Any other legal layout -- bases mixing the axis
with another dimension, multi-bit (swizzled) bases, an axis bit held twice, lanes
in an order the scan cannot shuffle -- is first moved through shared memory into
``canonical``'s layout (axis bits in registers, then lanes, then warps), lowered
directly there, and (scan) moved back; the cost is a store, ``bar.sync`` and load
per operand each way. Zero (broadcast) bases never move along the axis, so copies
are reduced side by side and never combined with each other.

reduce(axis): the combine region is inlined on registers. First within a thread
(registers along the axis, pairing by coordinate bit, lowest first, as the
interpreter's pairwise tree), then across lanes with ``shfl.sync.bfly`` (one step per
lane bit along the axis), then, when warps split the axis, through shared memory:
each warp writes its partial, one barrier, and every thread combines the partials of
its output elements in warp order. The lower-coordinate operand is always the left
one. A combine not known to commute (argmax, custom) also needs the steps in
coordinate order: registers below the lanes, lanes, then the warps' partials and the
registers above them together through shared memory (one slot per pair, combined in
coordinate order); a layout with axis bits in another order takes the fallback.
Known commutative bodies
(add, max, ...) reduce all registers first (fewer shuffles); the grouping then differs
from the interpreter's, which changes float sums by rounding only.

scan(axis, reverse): the direct lowering needs the axis bits, from the lowest
coordinate bit: registers, then lanes (at consecutive lane-id bits), then warps, then
registers again (every BlockedLayout). A thread scans its registers, lanes run a
Hillis-Steele scan with ``shfl.sync.up`` (``down`` for reverse), warps exchange their
totals through shared memory, and chunks of repeated registers carry their totals
forward.
"""
from __future__ import annotations

import re

from gluon_trace.errors import CompileError

from . import ptx
from .emitter import Lin, _pack, rule, select
from .rules_layout import move

_COMMUTATIVE = {"add", "mul", "maximum", "minimum", "and", "or", "xor"}


def _commutative(region) -> bool:
    ops = region.ops
    if len(ops) != 2 or len(region.args) != 2:
        return False
    op, y = ops
    return (op.name in _COMMUTATIVE and y.name == "yield" and y.operands == [op.result]
            and set(op.operands) == set(region.args) and len(set(op.operands)) == 2)


SIDE_EFFECTS = ("store", "atomic_rmw", "atomic_cas", "print")


def combiner(em, region, allow_stores: bool = False):
    """combine(lhs regs, rhs regs) -> regs: the region inlined; a body of one binary op on
    its two arguments is emitted directly (the common sum/max/min), with CSE."""
    for o in region.walk():
        # the interpreter runs these once per combined pair. A reduce forms exactly its pairs
        # and a store inside runs on every thread that combines one (copies of a pair store
        # the same value again: harmless for a store, not for an atomic or a print); the scan
        # below combines other pairs than the interpreter's Hillis-Steele ones (serially in a
        # thread, then across lanes and warps: the same result, other calls)
        if o.name in SIDE_EFFECTS and not (o.name == "store" and allow_stores):
            where = "a reduce's or scan's" if allow_stores else "a scan's"
            raise CompileError(f"`{o.name}` inside {where} combine function is not supported by the "
                               "NVIDIA backend; return the values from the reduction or scan and "
                               "store them after it", o.loc)
    if _commutative(region) or (len(region.ops) == 2 and len(region.args) == 2
                                and region.ops[0].operands == region.args):
        op = region.ops[0]
        from .emitter import RULES
        rule_fn = RULES[op.name]

        def direct(a, b):
            em.vals[region.args[0]], em.vals[region.args[1]] = [a[0]], [b[0]]
            ((r,),) = rule_fn(em, op)
            return [r]
        if region.ops[1].name == "yield" and region.ops[1].operands == [op.result]:
            return direct

    def inlined(a, b):
        saved = getattr(em, "per_thread_scalars", False)
        em.per_thread_scalars = True  # a store in the region: each thread's own call
        try:
            return em.call_region(region, list(a) + list(b))
        finally:
            em.per_thread_scalars = saved
    return inlined


def shfl(em, kind: str, x: str, t, lane_arg, clamp: int = 31) -> str:
    """shfl.sync.<kind> of one register of dtype t (64-bit and pred values split)."""
    cls = ptx.rclass(t)
    if cls in ("b64", "f64"):
        lo, hi = em.reg("b32"), em.reg("b32")
        em.emit(f"mov.b64 {{{lo}, {hi}}}, {x};")
        a = em.ins("b32", f"shfl.sync.{kind}.b32 {{d}}, {lo}, {lane_arg}, {clamp}, -1;")
        b = em.ins("b32", f"shfl.sync.{kind}.b32 {{d}}, {hi}, {lane_arg}, {clamp}, -1;")
        return em.ins(cls, f"mov.b64 {{d}}, {{{a}, {b}}};")
    if cls == "pred":
        v = em.ins("b32", f"selp.u32 {{d}}, 1, 0, {x};")
        s = em.ins("b32", f"shfl.sync.{kind}.b32 {{d}}, {v}, {lane_arg}, {clamp}, -1;")
        return em.ins("pred", f"setp.ne.u32 {{d}}, {s}, 0;")
    if cls == "f32":
        return em.ins("f32", f"shfl.sync.{kind}.b32 {{d}}, {x}, {lane_arg}, {clamp}, -1;")
    return em.ins("b32", f"shfl.sync.{kind}.b32 {{d}}, {x}, {lane_arg}, {clamp}, -1;")


def _smem_slot(t) -> tuple[str, int]:
    cls = ptx.rclass(t)
    return ({"pred": "b32", "b32": "b32", "f32": "f32", "b64": "b64", "f64": "f64"}[cls],
            8 if cls in ("b64", "f64") else 4)


def _st(em, t, addr, off, r, pred=None):
    st, _ = _smem_slot(t)
    if ptx.rclass(t) == "pred":
        r = em.to_b32(r, t)
    g = f"@{pred} " if pred else ""
    em.emit(f"{g}st.shared.{st} [{addr}+{off}], {r};")


def _one_warp_of_copies(em, writer, lin):
    """``writer`` (None: every thread) narrowed to one warp of each set of warp copies. Warps
    whose bases repeat others' hold the same partials and would store them to the same slots
    in the same instruction, with nothing ordering the stores: a data race, if of one value
    (a419c62 in convert_layout's scratch). Lanes of one warp may repeat a store."""
    copies = em.owner_pred(lin, lanes=False)
    if copies is None or writer is None:
        return writer or copies
    return em.ins("pred", f"and.pred {{d}}, {writer}, {copies};")


def _ld(em, t, addr, off):
    st, _ = _smem_slot(t)
    cls = ptx.rclass(t)
    r = em.ins("b32" if cls == "pred" else cls, f"ld.shared.{st} {{d}}, [{addr}+{off}];")
    if cls == "pred":
        r = em.ins("pred", f"setp.ne.u32 {{d}}, {r}, 0;")
    return r


def _axis_bases(lin, axis):
    """[(axis coordinate, "r"|"l"|"w", base index)] of the bases that move along ``axis``,
    lowest coordinate first; None when one of them also moves along another dimension,
    is not a single coordinate bit, or repeats another's bit (the direct lowerings pair
    elements by such bits; anything else would combine the wrong elements or count one
    twice)."""
    out, seen = [], set()
    for kind, bases in (("r", lin.reg_bases), ("l", lin.lane_bases), ("w", lin.warp_bases)):
        for i, b in enumerate(bases):
            a = b[axis]
            if not a:
                continue
            if a & (a - 1) or a in seen or any(c for d, c in enumerate(b) if d != axis):
                return None
            seen.add(a)
            out.append((a, kind, i))
    return sorted(out)


def canonical(shape, axis: int, num_warps: int) -> Lin:
    """The layout the fallbacks go through: the axis's coordinate bits, lowest first, in
    registers, then lanes (from lane-id bit 0), then warps; the other dimensions' bits
    after them; lanes/warps left over hold copies (zero bases). Every direct lowering
    takes it, in the interpreter's combination order."""
    rank = len(shape)
    unit = lambda d, k: tuple((1 << k) if e == d else 0 for e in range(rank))  # noqa: E731
    bits = [unit(axis, k) for k in range(int(shape[axis]).bit_length() - 1)]
    for d in reversed(range(rank)):
        if d != axis:
            bits += [unit(d, k) for k in range(int(shape[d]).bit_length() - 1)]
    nl, nw = 5, num_warps.bit_length() - 1
    nr = max(0, len(bits) - nl - nw)
    zero = (0,) * rank
    pad = bits[nr:] + [zero] * (nl + nw)
    return Lin(shape, bits[:nr], pad[:nl], pad[nl:nl + nw])


def _regions(dtypes, count: int) -> list[int]:
    """Byte offset of each input's part of the scratch, for ``count`` slots each."""
    offs, o = [], 0
    for t in dtypes:
        _, es = _smem_slot(t)
        o = (o + 7) // 8 * 8
        offs.append(o)
        o += es * count
    offs.append(o)
    return offs


def _lane_test(em, mask: int, zero: bool) -> str:
    """A predicate, computed once per kernel: (lane & mask) == 0 if ``zero`` else != 0."""
    key = ("lanetest", mask, zero)
    p = em.thread_cache.get(key)
    if p is None:
        _, lane, _ = em.tid()
        x = em.reg("b32")
        em.pro(f"and.b32 {x}, {lane}, {mask};")
        p = em.reg("pred")
        em.pro(f"setp.{'eq' if zero else 'ne'}.u32 {p}, {x}, 0;")
        em.thread_cache[key] = p
    return p


@rule("reduce")
def _reduce(em, op):
    axis = op.attrs["axis"]
    xs = op.operands
    n = len(xs)
    dtypes = [v.type.dtype for v in xs]
    lin = em.lin(xs[0])
    region = op.regions[0]
    comm = _commutative(region)
    combine = combiner(em, region, allow_stores=True)
    regs = [em.vals[v] for v in xs]
    steps = _axis_bases(lin, axis)
    kinds = "".join(k for _, k, _ in steps or ())
    # A combine that may not commute needs its operands in coordinate order: registers
    # below the lanes first, lanes, then the warps and the registers above them together
    # (one shared-memory slot per pair, combined in coordinate order).
    if steps is None or not (comm or re.fullmatch("r*l*w*r*", kinds)):
        # Fallback: one shared-memory round trip per operand (store, bar.sync, load) into
        # the canonical layout, then the direct reduction there.
        canon = canonical(lin.shape, axis, em.nw)
        regs = [move(em, r, t, lin, canon) for r, t in zip(regs, dtypes)]
        lin, kinds = canon, "".join(k for _, k, _ in _axis_bases(canon, axis))
    vals = {r: [regs[j][r] for j in range(n)] for r in range(lin.num_regs)}
    by_coord = lambda bases: sorted((i for i, b in enumerate(bases) if b[axis]), key=lambda i: bases[i][axis])  # noqa: E731
    reg_bits = by_coord(lin.reg_bases)
    early = reg_bits if comm else reg_bits[:len(kinds) - len(kinds.lstrip("r"))]

    def reg_steps(bits):
        for i in bits:
            bit = 1 << i
            for r in sorted(vals):
                if not r & bit and r | bit in vals:
                    vals[r] = combine(vals[r], vals.pop(r | bit))
    reg_steps(early)
    for i in by_coord(lin.lane_bases):
        for r in vals:
            other = [shfl(em, "bfly", x, t, 1 << i) for x, t in zip(vals[r], dtypes)]
            if comm:
                vals[r] = combine(vals[r], other)
            else:
                p = _lane_test(em, 1 << i, zero=False)
                lhs = [select(em, t, p, o, x) for x, o, t in zip(vals[r], other, dtypes)]
                rhs = [select(em, t, p, x, o) for x, o, t in zip(vals[r], other, dtypes)]
                vals[r] = combine(lhs, rhs)
    late = [i for i in reg_bits if i not in early]
    warp_axis = by_coord(lin.warp_bases)
    if not warp_axis:
        reg_steps(late)
        late = []
    res = op.results
    out_shape = res[0].type.shape
    drop = lambda b: tuple(b[:axis]) + tuple(b[axis + 1:])  # noqa: E731
    keep = [i for i, b in enumerate(lin.reg_bases) if not b[axis]]
    out_lin = em.lin(res[0])
    if not warp_axis:
        if out_lin is None:
            return [[vals[0][j]] for j in range(n)]
        pseudo = Lin(out_shape, [drop(lin.reg_bases[i]) for i in keep],
                     [drop(b) for b in lin.lane_bases], [drop(b) for b in lin.warp_bases])
        keys = sorted(vals)
        return [move(em, [vals[k][j] for k in keys], dtypes[j], pseudo, out_lin) for j in range(n)]
    # warps split the axis: partials through shared memory, slot = the warp's axis index
    # (and above it, for a combine that may not commute, the late registers' axis index)
    numel = 1
    for s in out_shape:
        numel *= s
    nslots = 1 << (len(warp_axis) + len(late))
    late_slot = {i: (1 << (len(warp_axis) + k)) * numel for k, i in enumerate(late)}
    offs = _regions(dtypes, nslots * numel)
    base = em.scratch(offs[-1])
    pk = lambda b: _pack(drop(b), out_shape) if out_shape else 0  # noqa: E731
    rank = {i: k for k, i in enumerate(warp_axis)}
    lane_vals = tuple(pk(b) for b in lin.lane_bases)
    warp_vals = tuple((1 << rank[i]) * numel if i in rank else pk(b) for i, b in enumerate(lin.warp_bases))
    tp, tmask = em.thread_xor(lane_vals, warp_vals)
    axis_lanes = sum(1 << i for i, b in enumerate(lin.lane_bases) if b[axis])
    writer = _one_warp_of_copies(em, _lane_test(em, axis_lanes, zero=True) if axis_lanes else None, lin)
    for r in sorted(vals):
        rp = 0
        for i, b in enumerate(lin.reg_bases):
            if r >> i & 1:
                rp ^= late_slot[i] if i in late_slot else pk(b)
        for j, t in enumerate(dtypes):
            _, es = _smem_slot(t)
            a = _slot_addr(em, base, tp, tmask, rp, es, offs[j])
            _st(em, t, a[0], a[1], vals[r][j], writer)
    em.barrier()
    # read back for the output layout
    if out_lin is None:
        otp, omask, oregs = None, 0, [0]
    else:
        otp, omask = em.thread_part(out_lin, lambda b: _pack(b, out_shape))
        oregs = [em.reg_part(out_lin, r, lambda b: _pack(b, out_shape)) for r in range(out_lin.num_regs)]
    outs = [[] for _ in range(n)]
    for orp in oregs:
        parts = []
        for k in range(nslots):
            row = []
            for j, t in enumerate(dtypes):
                _, es = _smem_slot(t)
                if otp is None:
                    row.append(_ld(em, t, base, offs[j] + k * numel * es))
                else:
                    a = _slot_addr(em, base, otp, omask, orp, es, offs[j] + k * numel * es)
                    row.append(_ld(em, t, a[0], a[1]))
            parts.append(row)
        while len(parts) > 1:
            parts = [combine(parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]
        for j in range(n):
            outs[j].append(parts[0][j])
    return outs


def _slot_addr(em, base, tp, tmask, rp, es, off):
    """(register, immediate) addressing element (thread part ^ rp) of a slot array."""
    if rp & tmask == 0:
        key = ("slotaddr", tp, es)
        a = em.thread_cache.get(key)
        if a is None:
            a = em.reg("b32")
            em.pro(f"mad.lo.u32 {a}, {tp}, {es}, {base};")
            em.thread_cache[key] = a
        return a, off + rp * es
    x = em.ins("b32", f"xor.b32 {{d}}, {tp}, {rp};")
    return em.ins("b32", f"mad.lo.u32 {{d}}, {x}, {es}, {base};"), off


# -- scan -----------------------------------------------------------------------------------

class _Maybe:
    """A value that may be absent at run time (flag None: always present)."""
    __slots__ = ("regs", "flag")

    def __init__(self, regs, flag=None):
        self.regs, self.flag = regs, flag


def _combine_opt(em, dtypes, combine, a, b):
    if a is None:
        return b
    if b is None:
        return a
    c = combine(a.regs, b.regs)
    sel = lambda p, x, y: [select(em, t, p, u, v) for t, u, v in zip(dtypes, x, y)]  # noqa: E731
    if a.flag is None and b.flag is None:
        return _Maybe(c)
    if a.flag is None:
        return _Maybe(sel(b.flag, c, a.regs))
    if b.flag is None:
        return _Maybe(sel(a.flag, c, b.regs))
    both = em.ins("pred", f"and.pred {{d}}, {a.flag}, {b.flag};")
    r = sel(a.flag, a.regs, b.regs)
    r = sel(both, c, r)
    return _Maybe(r, em.ins("pred", f"or.pred {{d}}, {a.flag}, {b.flag};"))


def _scan_bits(lin, axis):
    """The axis bases in coordinate order when the direct scan takes them: registers,
    lanes at consecutive lane-id bits (lowest coordinate at the lowest bit), warps, then
    repeated registers; None otherwise."""
    bits = _axis_bases(lin, axis)
    if bits is None or not re.fullmatch("r*l*w*r*", "".join(k for _, k, _ in bits)):
        return None
    lanes = [i for _, k, i in bits if k == "l"]
    if lanes and lanes != list(range(lanes[0], lanes[0] + len(lanes))):
        return None
    return bits


@rule("scan")
def _scan(em, op):
    axis, reverse = op.attrs["axis"], op.attrs["reverse"]
    xs = op.operands
    n = len(xs)
    dtypes = [v.type.dtype for v in xs]
    lin = em.lin(xs[0])
    region = op.regions[0]
    combine = combiner(em, region)
    regs = [em.vals[v] for v in xs]
    src_lin = lin
    bits = _scan_bits(lin, axis)
    if bits is None:
        # Fallback: the canonical layout (one shared-memory round trip per operand there
        # and one back, each a store, bar.sync and load), the direct scan in between.
        lin = canonical(lin.shape, axis, em.nw)
        regs = [move(em, r, t, src_lin, lin) for r, t in zip(regs, dtypes)]
        bits = _scan_bits(lin, axis)
    kinds = "".join(k for _, k, _ in bits)
    m = re.fullmatch(r"(r*)(l*)(w*)(r*)", kinds)
    nlo = len(m.group(1))
    lo_regs = [i for _, k, i in bits[:nlo]]
    lanes = [i for _, k, i in bits if k == "l"]
    warps = [i for _, k, i in bits if k == "w"]
    hi_regs = [i for _, k, i in bits[nlo + len(lanes) + len(warps):]]
    axis_reg_mask = sum(1 << i for i in lo_regs + hi_regs)
    groups = [g for g in range(lin.num_regs) if not g & axis_reg_mask]

    def deposit(idx, positions):
        r = 0
        for k, p in enumerate(positions):
            if idx >> k & 1:
                r |= 1 << p
        return r

    nl = len(lanes)
    _, lane, _ = em.tid()
    lane_idx = None
    if nl:
        key = ("laneidx", lanes[0], nl)
        lane_idx = em.thread_cache.get(key)
        if lane_idx is None:
            lane_idx = em.reg("b32")
            em.pro(f"bfe.u32 {lane_idx}, {lane}, {lanes[0]}, {nl};")
            em.thread_cache[key] = lane_idx
    last_lane = (1 << nl) - 1
    H = 1 << len(hi_regs)
    L = 1 << len(lo_regs)
    # local scans and lane scans, per (group, chunk)
    local: dict = {}
    lane_excl: dict = {}
    totals: dict = {}   # warp-inclusive total (in the last lane along the axis)
    for g in groups:
        for h in range(H):
            base_r = g | deposit(h, hi_regs)
            order = [base_r | deposit(k, lo_regs) for k in range(L)]
            if reverse:
                order = order[::-1]
            s = [regs[j][order[0]] for j in range(n)]
            seq = {order[0]: s}
            for r in order[1:]:
                x = [regs[j][r] for j in range(n)]
                s = combine(x, s) if reverse else combine(s, x)
                seq[r] = s
            local[(g, h)] = seq
            T = s
            for step in range(nl):
                d = 1 << step
                kind = "down" if reverse else "up"
                y = [shfl(em, kind, v, t, d << lanes[0], 0 if not reverse else 31) for v, t in zip(T, dtypes)]
                ok = em.ins("pred", f"setp.{'lt' if reverse else 'ge'}.u32 {{d}}, {lane_idx}, "
                                    f"{last_lane - d + 1 if reverse else d};")
                c = combine(T, y) if reverse else combine(y, T)
                T = [select(em, t, ok, cv, tv) for t, cv, tv in zip(dtypes, c, T)]
            totals[(g, h)] = T
            if nl:
                kind = "down" if reverse else "up"
                y = [shfl(em, kind, v, t, 1 << lanes[0], 0 if not reverse else 31) for v, t in zip(T, dtypes)]
                ok = em.ins("pred", f"setp.{'lt' if reverse else 'ge'}.u32 {{d}}, {lane_idx}, "
                                    f"{last_lane if reverse else 1};")
                lane_excl[(g, h)] = _Maybe(y, ok)
            else:
                lane_excl[(g, h)] = None
    # warps: each warp's total through shared memory
    warp_excl: dict = {}
    chunk_total: dict = {}
    out_shape = tuple(s for d, s in enumerate(lin.shape) if d != axis)
    drop = lambda b: tuple(b[:axis]) + tuple(b[axis + 1:])  # noqa: E731
    pk = lambda b: _pack(drop(b), out_shape) if out_shape else 0  # noqa: E731
    if warps:
        numel = 1
        for s in out_shape:
            numel *= s
        nslots = 1 << len(warps)
        per = nslots * numel
        offs = _regions(dtypes, per * H)
        base = em.scratch(offs[-1])
        rank = {i: k for k, i in enumerate(warps)}
        lane_vals = tuple(pk(b) for b in lin.lane_bases)
        warp_vals = tuple((1 << rank[i]) * numel if i in rank else pk(b) for i, b in enumerate(lin.warp_bases))
        tp, tmask = em.thread_xor(lane_vals, warp_vals)
        rtp, rmask = em.thread_xor(lane_vals, tuple(0 if i in rank else pk(b) for i, b in enumerate(lin.warp_bases)))
        widx, _ = em.thread_xor((0,) * len(lin.lane_bases),
                                tuple((1 << rank[i]) if i in rank else 0 for i in range(len(lin.warp_bases))))
        writer = None
        if nl:
            writer = em.ins("pred", f"setp.eq.u32 {{d}}, {lane_idx}, {0 if reverse else last_lane};")
        writer = _one_warp_of_copies(em, writer, lin)
        for (g, h), T in totals.items():
            rp = em.reg_part(lin, g, pk)
            for j, t in enumerate(dtypes):
                _, es = _smem_slot(t)
                a, off = _slot_addr(em, base, tp, tmask, rp, es, offs[j] + h * per * es)
                _st(em, t, a, off, T[j], writer)
        em.barrier()
        for (g, h) in totals:
            rp = em.reg_part(lin, g, pk)
            slots = []
            for k in range(nslots):
                row = []
                for j, t in enumerate(dtypes):
                    _, es = _smem_slot(t)
                    a, off = _slot_addr(em, base, rtp, rmask, rp, es, offs[j] + (h * per + k * numel) * es)
                    row.append(_ld(em, t, a, off))
                slots.append(row)
            ks = range(nslots - 1, -1, -1) if reverse else range(nslots)
            acc, accs = None, {}
            for k in ks:
                acc = slots[k] if acc is None else (combine(slots[k], acc) if reverse else combine(acc, slots[k]))
                accs[k] = acc
            chunk_total[(g, h)] = acc
            # exclusive over the warps before this one (after it, for reverse)
            sel = None
            for k in ks:
                prev = k + 1 if reverse else k - 1
                if prev < 0 or prev >= nslots:
                    continue
                is_k = em.ins("pred", f"setp.eq.u32 {{d}}, {widx}, {k};")
                sel = accs[prev] if sel is None else [select(em, t, is_k, a, b) for t, a, b in zip(dtypes, accs[prev], sel)]
            has = em.ins("pred", f"setp.{'lt' if reverse else 'gt'}.u32 {{d}}, {widx}, "
                                 f"{nslots - 1 if reverse else 0};")
            warp_excl[(g, h)] = _Maybe(sel, has) if sel is not None else None
    else:
        for key, T in totals.items():
            if nl:
                src = 0 if reverse else last_lane << lanes[0]
                mask = last_lane << lanes[0]
                # the lane at the end of this lane's axis segment holds the total
                sl = em.thread_cache.get(("seglane", mask, src))
                if sl is None:
                    sl = em.reg("b32")
                    em.pro(f"and.b32 {sl}, {lane}, {~mask & 31};")
                    if src:
                        em.pro(f"or.b32 {sl}, {sl}, {src};")
                    em.thread_cache[("seglane", mask, src)] = sl
                chunk_total[key] = [shfl(em, "idx", v, t, sl) for v, t in zip(T, dtypes)]
            else:
                chunk_total[key] = T
    out = [[None] * lin.num_regs for _ in range(n)]
    for g in groups:
        carry = None
        hs = range(H - 1, -1, -1) if reverse else range(H)
        for h in hs:
            if reverse:
                post = _combine_opt(em, dtypes, combine, lane_excl[(g, h)], warp_excl.get((g, h)))
                post = _combine_opt(em, dtypes, combine, post, carry)
            else:
                pre = _combine_opt(em, dtypes, combine, carry, warp_excl.get((g, h)))
                pre = _combine_opt(em, dtypes, combine, pre, lane_excl[(g, h)])
            for r, s in local[(g, h)].items():
                if reverse:
                    v = _combine_opt(em, dtypes, combine, _Maybe(s), post)
                else:
                    v = _combine_opt(em, dtypes, combine, pre, _Maybe(s))
                for j in range(n):
                    out[j][r] = v.regs[j]
            if h != hs[-1]:
                ct = _Maybe(chunk_total[(g, h)])
                carry = (_combine_opt(em, dtypes, combine, ct, carry) if reverse
                         else _combine_opt(em, dtypes, combine, carry, ct))
    if lin is not src_lin:
        out = [move(em, r, t, lin, src_lin) for r, t in zip(out, dtypes)]
    return out

"""Lowering of ``for`` and ``if`` to PTX branches.

Loop-carried values get their own registers (one per register of the tile), set
before the loop and by a parallel copy at the end of the body. A float16/bfloat16 value is
carried in its 16 bits (ptxas packs two to a register) and widened where it is read: a carried
bf16 tile costs half the registers of its widened f32 copy, and one widened only to feed an
MMA operand or a store is never widened at all (the widening is dead). The condition of an
``if`` and the bounds of a ``for`` are scalars, hence the same in every thread, so
the branches never diverge and barriers inside them are safe.
"""
from __future__ import annotations

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace.errors import CompileError
from gluon_trace.ir import MemDescType, TensorDescType

from . import ptx, smem_join
from .emitter import rule


def _mov(cls: str) -> str:
    return {"b32": "b32", "b64": "b64", "f32": "f32", "f64": "f64", "pred": "pred", "b16": "b16"}[cls]


def _is16(t) -> bool:
    return t.name in ("float16", "bfloat16")


def _paired(t, n: int) -> bool:
    """Whether a value of ``n`` registers of ``t`` is carried two to a .b32 (the pairs an MMA
    operand, a vector store and a tile's paired cvts all take: registers 2i and 2i+1)."""
    return _is16(t) and n % 2 == 0


def _carried(em, types, ns: list[int]) -> list[list[str]]:
    """Fresh registers carrying values of ``types`` (``ns`` registers each)."""
    out = []
    for t, n in zip(types, ns):
        if _paired(t, n):
            out.append([em.reg("b32") for _ in range(n // 2)])
        else:
            out.append([em.reg("b16" if _is16(t) else ptx.rclass(t)) for _ in range(n)])
    return out


def _widened(em, carriers: list[list[str]], types, ns: list[int]) -> list[list[str]]:
    """The carried values as every other rule holds them (widenings nobody reads are dead)."""
    out = []
    for rs, t, n in zip(carriers, types, ns):
        if _paired(t, n):
            out.append([em.widen16_half(w, j, t) for w in rs for j in (0, 1)])
        elif _is16(t):
            out.append([em.widen16(h, t) for h in rs])
        else:
            out.append(rs)
    return out


def _copy(em, dsts: list[list[str]], srcs: list[list[str]], types, ns: list[int]) -> None:
    """dsts := srcs as one parallel copy (a source may be another destination); 16-bit floats
    land in their bits, paired where ``_paired`` says."""
    dset = {d for ds in dsts for d in ds}
    moves = [(ds, ss if len(ss) == n else ss * n, t, n) for ds, ss, t, n in zip(dsts, srcs, types, ns)]
    read = set()  # (a 16-bit value is always converted: its carrier is never its own register)
    for ds, ss, t, _ in moves:
        read.update(ss if _is16(t) else (s for d, s in zip(ds, ss) if d != s))
    if read and "wgmma_inflight" in em.flags:
        from .rules_hopper import settle_inflight
        settle_inflight(em, read)
    pending = []
    for ds, ss, t, n in moves:
        cls = "b32" if _paired(t, n) else "b16" if _is16(t) else ptx.rclass(t)
        if _paired(t, n):
            ss = [em.pack16x2(ss[i], ss[i + 1], t) for i in range(0, n, 2)]
        elif _is16(t):
            ss = [em.to16(x, t) for x in ss]
        for d, x in zip(ds, ss):
            if d != x:
                pending.append((d, x, cls))
    if any(s in dset for _, s, _ in pending):
        tmp = []
        for d, s, cls in pending:
            x = em.reg(cls)
            em.emit(f"mov.{_mov(cls)} {x}, {s};")
            tmp.append((d, x, cls))
        pending = tmp
    for d, s, cls in pending:
        em.emit(f"mov.{_mov(cls)} {d}, {s};")


def _const_value(v):
    op = v.owner
    if op is not None and op.name == "const":
        return op.attrs["value"]
    return None


# -- shared-memory views carried by a loop or chosen by a branch ---------------------------------
# A view is a base register, a constant and a compile-time table of byte offsets (smem_view.Smem);
# what a loop or branch may change is where the view starts (a ring slot, buffers swapped, a row
# half), so it is carried as one b32 register: base + const. A table that is not XOR-linear (a
# padded layout's, or a slice from inside a swizzle's period: XOR-linear only with its constant,
# smem_access._xor_affine) keeps a constant: the lowest start among the views the join receives
# that are known before its code is emitted (the arms of a branch, what a loop's body yields), and
# the register carries base + (const - that), never below the base.
# Views whose tables differ by a constant XOR (the column halves of a swizzled tile) are carried
# with that XOR in a second register (smem_join.py): the "xor" dicts below, {index: the joined
# view's spec}, decided before the code that receives the view is emitted.

def _carrier_types(vals) -> list:
    """The carried registers' types: a shared view's home is one b32 address."""
    return [dt.int32 if isinstance(v.type, MemDescType) else v.type.dtype for v in vals]


def _refuse_tensordesc(vals, loc) -> None:
    for v in vals:
        if isinstance(v.type, TensorDescType):
            raise CompileError("a TMA tensor descriptor is rebound inside a loop or branch (it is carried); "
                               "TMA descriptors are kernel arguments: pick one by name outside the branch, "
                               "or branch around the tma call itself", loc)


def _linear(s) -> bool:
    from .smem_access import _linear_bits
    return _linear_bits(tuple(s.rel.shape), np.ascontiguousarray(s.rel).tobytes()) is not None


def _kept_const(first, others=()) -> int:
    """The constant a carried view keeps (0: all of it goes into the carried register): for a
    table that is not XOR-linear, the lowest start of ``first`` and the views ``others`` (known
    at compile time, None where not) of the same table."""
    if _linear(first):
        return 0
    return min([first.const] + [o.const for o in others if o is not None and o.xreg is None and o.sreg is None
                                and o.creg is None
                                and o.rel.shape == first.rel.shape and np.array_equal(o.rel, first.rel)])


def _home_align(s, kept: int) -> int:
    """Alignment of the carried register for view ``s`` (base + s.const - the kept constant)."""
    d = s.const - kept
    return min(s.align, ptx.pow2_div(d, 16) if d else 16)


def _addresses(em, vals: list, regs: list[list], firsts: dict, loc, xor: dict, kept: dict) -> list[list[str]]:
    """``regs`` with each shared view replaced by the register(s) carrying it."""
    out = []
    for i, (v, r) in enumerate(zip(vals, regs)):
        if i in xor:
            out.append(smem_join.carry(em, r[0], xor[i]))
        elif i in firsts:
            s = r[0]
            d = s.const - kept[i]
            if d < 0:   # (an address below the view's base would wrap)
                raise CompileError("a loop or branch carries views whose offsets are not XOR-linear (a padded "
                                   "layout, or a slice from inside a swizzle's period) from the lowest start "
                                   f"known at compile time (byte {kept[i]}); this one starts before it (byte "
                                   f"{s.const}), made by code the backend does not predict ahead (views are "
                                   "followed through slices, indexes, nested branches and loops): carry the "
                                   "slot index instead and slice inside", loc)
            out.append([em.ins("b32", f"add.u32 {{d}}, {s.base}, {d};") if d else s.base])
        else:
            out.append(r)
    return out


def _check_same_view(s, first, loc, what: str) -> None:
    """A view joined with ``first`` (an Smem): the same offset table (and no run-time XOR, which
    one carried register would drop: only a join decided to carry one takes such a view)."""
    if s.rel.shape != first.rel.shape or not np.array_equal(s.rel, first.rel) or \
            s.xreg is not None or first.xreg is not None or s.sreg is not None or first.sreg is not None or \
            s.creg is not None or first.creg is not None:
        raise CompileError(f"{what} yields shared-memory views placed differently (another layout, a "
                           "slice or permutation of the buffer): only the base may change, e.g. "
                           "bufs.index(i) of one buffer, or two buffers of the same shape and layout", loc)


def _as_views(vals, regs: list[list[str]], firsts: dict, aligns: dict, xor: dict, kept: dict,
              coffs: dict | None = None) -> list[list]:
    """Carried registers back as the Smem views the other rules read (``coffs``: {index: where
    the joined view starts in its swizzled buffer}, smem_swizzled.joined_coff)."""
    from .smem_view import Smem
    out = []
    for i, (v, r) in enumerate(zip(vals, regs)):
        if i in xor:
            out.append([smem_join.view(r, xor[i], aligns[i])])
        elif i in firsts:
            f = firsts[i]
            out.append([Smem(r[0], kept[i], f.rel, f.dtype, aligns[i], plin=_kept_plin(f), joined=True,
                             coff=(coffs or {}).get(i))])
        else:
            out.append(r)
    return out


def _joined_plin(f):
    """``f.plin`` where a join of views of ``f``'s table needs it to address them: a padded view
    from inside a padding period (rows 25.. and 41.. padded every 16), whose one table
    Access._padded_shift splits by them; None where the table is XOR-linear or additive (a branch
    an enclosing join carries at a run-time start then carries the start too:
    smem_join.branch_specs)."""
    from .smem_access import _additive_bits
    if f.plin is None or f.sreg is not None or f.xreg is not None or _linear(f) or \
            _additive_bits(tuple(f.rel.shape), np.ascontiguousarray(f.rel).tobytes()) is not None:
        return None
    return f.plin


def _kept_plin(f):
    """``plin`` the view a join carries in one register keeps: its first view's linear indices,
    which describe the one table every view it receives has (_check_same_view), wherever they
    start (rows 25.. and 41.. padded every 16; columns 0 and 1 of rows padded every 16, the
    same table a byte apart). Access splits a view of it by them only where its table has no
    other split (a slice from inside a padding period: Access._padded_shift, checked against the
    table), so every view lowered before is lowered as before; None for no padded view."""
    if f.plin is None or f.sreg is not None or f.xreg is not None:
        return None
    return f.plin


def _first_views(vals, regs) -> dict:
    return {i: r[0] for i, (v, r) in enumerate(zip(vals, regs)) if isinstance(v.type, MemDescType)}


def _loop_kept(em, op, firsts: dict, xor: dict, outer: dict | None = None) -> dict:
    """{carried index: kept constant} of a ``for``'s carried views without a run-time XOR: the
    lowest start among the entering view and what the body yields (views of the carried ones
    start at least at their kept constants; views made by branches and loops nested in the body
    as those joins will make them: smem_join._static), repeated until none lowers. ``outer``:
    the predicted views of the code around (a loop nested in a body not emitted yet)."""
    from .smem_view import Smem
    body = op.regions[0]
    args = body.args[1:]
    kept = {i: _kept_const(f) for i, f in firsts.items() if i not in xor}
    if all(_linear(firsts[i]) for i in kept):
        return kept
    while True:
        env = dict(outer or {})
        env.update({args[i]: xor[i] if i in xor else Smem(f.base, kept[i], f.rel, f.dtype, f.align)
                    for i, f in firsts.items()})
        new = {}
        for i in kept:
            v = body.yielded(i)
            new[i] = _kept_const(env[args[i]], [smem_join._static(em, v, env) if v is not None else None])
        if new == kept:
            return kept
        kept = new


def _loop_aligns(em, op, firsts: dict, xor: dict, kept: dict, aligns: dict) -> dict:
    """``aligns`` lowered to the alignment of what the body yields (predicted: smem_join._static),
    repeated until none lowers: the body is emitted once, for every view it will receive (columns
    3.. on entry, then 12..: 4-byte aligned from the second step on)."""
    from .smem_view import Smem
    body = op.regions[0]
    args = body.args[1:]
    while True:
        env = {args[i]: xor[i] if i in xor else Smem(f.base, kept[i], f.rel, f.dtype, aligns[i])
               for i, f in firsts.items()}
        new = dict(aligns)
        for i in firsts:
            v = body.yielded(i)
            y = smem_join._static(em, v, env) if v is not None else None
            if i in xor:   # (carried with a run-time XOR or start: where the body's view starts, as that join carries it)
                a = smem_join.yield_home_align(y, xor[i]) if y is not None else None
                j = next((k for k in firsts if args[k] is v), None)
                if j is not None and j != i:   # (another carried view swapped in: at most as aligned as it is carried)
                    a = min(a or new[j], new[j])
                new[i] = min(new[i], a or new[i])
            elif y is not None and y.xreg is None and y.sreg is None and y.creg is None and y.const >= kept[i]:
                new[i] = min(new[i], _home_align(y, kept[i]))
        if new == aligns:
            return aligns
        aligns = new


def _loop_coffs(em, op, firsts: dict, xor: dict, kept: dict) -> dict:
    """{carried index: coff} of a ``for``'s carried views (smem_swizzled.joined_coff: one slice
    on entry and in what the body yields, predicted by smem_join._static, or the one starting at
    the kept constant), repeated until none changes. Access checks a coff against the carried
    view's table before it uses it."""
    from .smem_view import Smem
    from .smem_swizzled import joined_coff
    body = op.regions[0]
    args = body.args[1:]
    coffs = {i: f.coff for i, f in firsts.items() if i not in xor and f.coff is not None and f.const == kept[i]}
    for _ in range(8):
        env = {args[i]: xor[i] if i in xor else Smem(f.base, kept[i], f.rel, f.dtype, f.align, coff=coffs.get(i))
               for i, f in firsts.items()}
        new = {}
        for i, f in firsts.items():
            if i in xor:
                continue
            v = body.yielded(i)
            y = smem_join._static(em, v, env) if v is not None else None
            c = joined_coff([f, y], kept[i]) if y is not None else None
            if c is not None:
                new[i] = c
        if new.keys() == coffs.keys() and all(new[i] is coffs[i] for i in new):
            break
        coffs = new
    return coffs


@rule("for")
def _for(em, op):
    lo, hi, step = (em.vals[v][0] for v in op.operands[:3])
    it = op.operands[0].type.dtype
    cls = ptx.rclass(it)
    ty = ptx.ity(it)
    carried = op.operands[3:]
    _refuse_tensordesc(carried, op.loc)
    types = _carrier_types(carried)
    firsts = _first_views(carried, [em.vals[v] for v in carried])
    xor = smem_join.loop_plan(em, op, firsts)
    for i, spec in xor.items():
        if spec.sreg is not None:
            smem_join.demand_padded(em, op.regions[0].yielded(i))
    kept = _loop_kept(em, op, firsts, xor)
    ns = [2 if i in xor else len(em.vals[v]) for i, v in enumerate(carried)]
    aligns = {i: smem_join.home_align(f, xor[i]) if i in xor else _home_align(f, kept[i])  # the body is emitted
              for i, f in firsts.items()}                                                  # for the first's
    aligns = _loop_aligns(em, op, firsts, xor, kept, aligns)                               # and its yields'
    coffs = _loop_coffs(em, op, firsts, xor, kept)
    phis = _carried(em, types, ns)
    _copy(em, phis, _addresses(em, carried, [em.vals[v] for v in carried], firsts, op.loc, xor, kept), types, ns)
    iv = em.reg(cls)
    em.emit(f"mov.{_mov(cls)} {iv}, {lo};")
    head, end = em.label("loop"), em.label("loop_end")
    em.emit(f"{head}:")
    s = _const_value(op.operands[2])
    if s is not None and s > 0:
        p = em.ins("pred", f"setp.ge.{ty} {{d}}, {iv}, {hi};")
    elif s is not None and s < 0:
        p = em.ins("pred", f"setp.le.{ty} {{d}}, {iv}, {hi};")
    else:  # sign known at run time only; a zero step runs no iteration
        up = em.ins("pred", f"setp.gt.{ty} {{d}}, {step}, 0;")
        a = em.ins("pred", f"setp.ge.{ty} {{d}}, {iv}, {hi};")
        b = em.ins("pred", f"setp.le.{ty} {{d}}, {iv}, {hi};")
        z = em.ins("pred", f"setp.eq.{ty} {{d}}, {step}, 0;")
        x = em.reg("b32")
        em.emit(f"selp.u32 {x}, 1, 0, {a};")
        y = em.reg("b32")
        em.emit(f"selp.u32 {y}, 1, 0, {b};")
        sel = em.ins("b32", f"selp.b32 {{d}}, {x}, {y}, {up};")
        stop = em.ins("pred", f"setp.ne.u32 {{d}}, {sel}, 0;")
        p = em.ins("pred", f"or.pred {{d}}, {stop}, {z};")
    em.emit(f"@{p} bra {end};")
    dirty0 = em.smem_dirty
    uses0 = em.flags.get("scratch_uses", 0)
    em.smem_dirty = True  # the previous iteration may still be reading the scratch
    saved = em.loc
    with em.scope():
        args = _as_views(carried, _widened(em, phis, types, ns), firsts, aligns, xor, kept, coffs)
        ys = em.run_block(op.regions[0], [[iv]] + args)
        em.loc = saved
        for i, f in firsts.items():
            if i in xor:
                smem_join.check(ys[i][0], xor[i], op.loc, "this loop's body")
                align = smem_join.home_align(ys[i][0], xor[i])
            else:
                _check_same_view(ys[i][0], f, op.loc, "this loop's body")
                align = _home_align(ys[i][0], kept[i])
            if align < aligns[i]:
                raise CompileError(f"this loop's body yields a shared-memory view less aligned "
                                   f"({align} bytes) than its first value ({aligns[i]}); "
                                   "carry views of whole slots", op.loc)
        _copy(em, phis, _addresses(em, carried, ys, firsts, op.loc, xor, kept), types, ns)
    em.emit(f"add.{ty} {iv}, {iv}, {step};")
    em.emit(f"bra.uni {head};")
    em.emit(f"{end}:")
    used = em.flags.get("scratch_uses", 0) != uses0
    em.smem_dirty = True if used else dirty0
    return _as_views(carried, _widened(em, phis, types, ns), firsts, aligns, xor, kept, coffs)


@rule("if")
def _if(em, op):
    cond = em.vals[op.operands[0]][0]
    _refuse_tensordesc(op.results, op.loc)
    types = _carrier_types(op.results)
    xor = smem_join.branch_specs(em, op)
    for i, spec in xor.items():
        if spec.sreg is not None:
            for b in op.regions:
                smem_join.demand_padded(em, b.yielded(i))
    arms = {i: [smem_join._static(em, a, {}) if a is not None else None
                for a in (b.yielded(i) for b in op.regions)]
            for i, r in enumerate(op.results) if isinstance(r.type, MemDescType) and i not in xor}
    ns = [2 if i in xor else 1 if isinstance(r.type, MemDescType) else em.nregs(r) for i, r in enumerate(op.results)]
    firsts, aligns, kept, coffs = {}, {}, {}, {}
    outs = _carried(em, types, ns)
    then_b, else_b = op.regions
    has_else = len(else_b.ops) > 1 or bool(op.results)
    els, end = em.label("else"), em.label("endif")
    em.emit(f"@!{cond} bra {els if has_else else end};")
    dirty0 = em.smem_dirty
    saved = em.loc
    inflight0 = list(em.flags.get("wgmma_inflight", []))
    with em.scope():
        ys = em.run_block(then_b, [])
        em.loc = saved
        firsts = _first_views(op.results, ys)
        for i in xor:
            smem_join.check(firsts[i], xor[i], op.loc, "this branch")
        kept = {i: _kept_const(f, arms[i]) for i, f in firsts.items() if i not in xor}
        aligns = {i: smem_join.home_align(f, xor[i]) if i in xor else _home_align(f, kept[i])
                  for i, f in firsts.items()}
        _copy(em, outs, _addresses(em, op.results, ys, firsts, op.loc, xor, kept), types, ns)
    dirty_then = em.smem_dirty
    inflight_then = list(em.flags.get("wgmma_inflight", []))
    em.flags["wgmma_inflight"] = list(inflight0)  # the else branch starts where the then did
    if has_else:
        em.emit(f"bra.uni {end};")
        em.emit(f"{els}:")
        em.smem_dirty = dirty0
        with em.scope():
            ys = em.run_block(else_b, [])
            em.loc = saved
            for i, f in firsts.items():  # the join's alignment: the weaker arm's
                if i in xor:
                    smem_join.check(ys[i][0], xor[i], op.loc, "this branch")
                    aligns[i] = min(aligns[i], smem_join.home_align(ys[i][0], xor[i]))
                else:
                    _check_same_view(ys[i][0], f, op.loc, "this branch")
                    aligns[i] = min(aligns[i], _home_align(ys[i][0], kept[i]))
                    c = smem_join.joined_coff([f, ys[i][0]], kept[i])
                    if c is not None:
                        coffs[i] = c
            _copy(em, outs, _addresses(em, op.results, ys, firsts, op.loc, xor, kept), types, ns)
    em.emit(f"{end}:")
    em.smem_dirty = dirty_then or em.smem_dirty
    # after the join a wgmma group is in flight if it may be on either path
    inflight_else = em.flags.get("wgmma_inflight", [])
    em.flags["wgmma_inflight"] = [g for g in inflight0 if any(g is x for x in inflight_then + inflight_else)] + \
        [g for g in inflight_then + inflight_else if not any(g is x for x in inflight0)]
    return _as_views(op.results, _widened(em, outs, types, ns), firsts, aligns, xor, kept, coffs)


@rule("yield")
def _yield(em, op):  # handled by the block walker; listed so every op has a rule
    return []

"""MFMA accumulators in AGPRs (gfx90a, gfx942), a rewrite of the machine IR before register
allocation.

CDNA's unified register file gives each lane up to 512 registers, but VALU instructions address
only the 256 below ``accum_offset`` (VGPRs); the ones above (AGPRs) are read and written by MFMA
(srcC and vdst, both in one file), by ``v_accvgpr_read/write/mov_b32`` and by memory instructions.
Keeping the accumulators there frees the VGPRs for operands and addresses, which is what lets a
kernel hold a large accumulator tile (AMD "CDNA3 ISA", 3.6.4 "Accumulation VGPRs (AccVGPRs)").

Which virtual registers move: every MFMA's C and D, and the registers joined to them only by
copies (the loop-carried homes of an accumulator and the gathers into an MFMA's srcC). Copies
between two moved registers become ``v_accvgpr_mov_b32``, into one ``v_accvgpr_write_b32``, out
of one ``v_accvgpr_read_b32``; any other instruction that reads a moved register reads a VGPR
copy made just before it (an accumulator stored after the loop, cast, reduced ...).
"""
from __future__ import annotations

from .mir import Imm, Inst, Label, Neg, Reg, Sub, strip

AGPR_MAX = 256  # a[0:255]


def _reg(x):
    x = strip(x)
    if isinstance(x, Reg):
        return x
    if isinstance(x, Sub):
        return x.reg
    return None


def _is_copy(i) -> bool:
    return isinstance(i, Inst) and i.op == "v_mov_b32" and len(i.defs) == 1 and len(i.uses) == 1


def _moved(code) -> set:
    """Ids of the registers that go to AGPRs."""
    mf = [i for i in code if isinstance(i, Inst) and i.op.startswith("v_mfma")]
    if not mf:
        return set()
    defs: dict = {}
    for i in code:
        if isinstance(i, Inst):
            for r in i.regs("defs"):
                defs.setdefault(r.id, []).append(i)

    def copy_only(r) -> bool:
        return r.fixed is None and r.cls == "v" and all(_is_copy(d) for d in defs.get(r.id, []))
    moved = set()
    for i in mf:
        moved.add(_reg(i.defs[0]).id)
        c = _reg(i.uses[2])
        if c is not None and copy_only(c):
            moved.add(c.id)
    copies = [i for i in code if _is_copy(i)]
    grew = True
    while grew:
        grew = False
        for i in copies:
            d, s = _reg(i.defs[0]), _reg(i.uses[0])
            if s is None or s.cls != "v":
                continue
            for a, b in ((d, s), (s, d)):
                if a.id in moved and b.id not in moved and copy_only(b):
                    moved.add(b.id)
                    grew = True
    return moved


def _worked_on_in_loops(code, moved: set) -> set:
    """``moved`` less the accumulators (with the registers copies join them to) that a VALU
    instruction reads or writes inside a loop: on gfx90a/gfx942 an MFMA takes srcC and vdst in
    VGPRs as well, and an accumulator in AGPRs costs a v_accvgpr_read and a v_accvgpr_write for
    every value of it the loop computes on (attention's S each step, O rescaled each step); the
    GEMM's accumulator, touched only by its MFMAs in the loop, stays in AGPRs."""
    if not moved:
        return moved
    parent = {r: r for r in moved}

    def find(r):
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r
    for i in code:  # an accumulator: its chain of MFMAs (srcC -> vdst) and the copies of it
        if _is_copy(i) or (isinstance(i, Inst) and i.op.startswith("v_mfma")):
            a, b = _reg(i.defs[0]), _reg(i.uses[0] if _is_copy(i) else i.uses[2])
            if a is not None and b is not None and a.id in moved and b.id in moved:
                parent[find(a.id)] = find(b.id)
    labels = {x.name: k for k, x in enumerate(code) if isinstance(x, Label)}
    spans = [(labels[i.target], k) for k, i in enumerate(code)
             if isinstance(i, Inst) and i.kind in ("branch", "cbranch") and labels.get(i.target, k) < k]
    inside = [False] * len(code)
    for a, b in spans:
        for k in range(a, b + 1):
            inside[k] = True
    worked = set()
    for k, i in enumerate(code):
        if inside[k] and isinstance(i, Inst) and not _is_copy(i) and not i.op.startswith("v_mfma"):
            for r in i.mentioned():
                if r.id in moved:
                    worked.add(find(r.id))
    return {r for r in moved if find(r) not in worked}


def _as_agpr(x, regs: dict):
    """The operand with its register swapped for the AGPR one."""
    neg = isinstance(x, Neg)
    x = strip(x)
    if isinstance(x, Reg):
        y = regs[x.id]
    else:
        y = Sub(regs[x.reg.id], x.index)
    return Neg(y) if neg else y


def agpr_variants(code: list, target):
    """The programs to try allocating, best first (each different from ``code``, which is the
    all-VGPR fallback): accumulators the loops compute on kept in VGPRs, the rest in AGPRs; then
    every accumulator in AGPRs, for when the first does not fit the VGPRs."""
    first = use_agprs(code, target)
    if first is not code:
        yield first
    if target.gfx9 and _worked_on_in_loops(code, _moved(code)) != _moved(code):
        yield use_agprs(code, target, keep_worked=False)


def use_agprs(code: list, target, keep_worked: bool = True) -> list:
    """The program with MFMA accumulators (and their copies) in AGPRs -- but for those a loop
    computes on, with ``keep_worked`` -- ; on RDNA3 the WMMA accumulators stay in VGPRs and only
    their loop copies go (``coalesce``)."""
    if not target.gfx9:
        return coalesce(code)
    moved = _moved(code)
    if not moved:  # no MFMA
        return code
    moved = _worked_on_in_loops(code, moved) if keep_worked else moved
    if not moved:  # every accumulator in VGPRs: their chains still accumulate in place
        return read_through(copy_back(in_place(coalesce(code))))
    regs: dict = {}
    for i in code:
        if isinstance(i, Inst):
            for r in i.mentioned():
                if r.id in moved and r.id not in regs:
                    regs[r.id] = Reg("a", r.size)

    def hit(x) -> bool:
        r = _reg(x)
        return r is not None and r.id in moved

    out = []
    for i in code:
        if not isinstance(i, Inst) or not any(hit(x) for x in (*i.defs, *i.uses)):
            out.append(i)
            continue
        if i.op.startswith("v_mfma") and hit(i.defs[0]):
            pre = []
            c = i.uses[2]
            if not hit(c):  # srcC from a register that also has other writers: copy it over
                tmp = Reg("a", c.size)
                for k in range(c.size):
                    src = c if c.size == 1 else Sub(_reg(c), k) if isinstance(strip(c), Reg) else c
                    pre.append(Inst("v_accvgpr_write_b32", [tmp if c.size == 1 else tmp[k]], [src],
                                    kind="valu", loc=i.loc))
                c = tmp
            else:
                c = _as_agpr(c, regs)
            out += pre
            out.append(Inst(i.op, [_as_agpr(i.defs[0], regs)], [i.uses[0], i.uses[1], c], i.suffix,
                            i.kind, i.loc))
            continue
        if _is_copy(i):
            d, s = i.defs[0], i.uses[0]
            if hit(d) and hit(s):
                out.append(Inst("v_accvgpr_mov_b32", [_as_agpr(d, regs)], [_as_agpr(s, regs)],
                                kind="valu", loc=i.loc))
            elif hit(d):
                if not (getattr(strip(s), "cls", None) == "v" or (isinstance(s, Imm) and s.is_inline)):
                    t = Reg("v")  # an SGPR or a literal: through a VGPR
                    out.append(Inst("v_mov_b32", [t], [s], kind="valu", loc=i.loc))
                    s = t
                out.append(Inst("v_accvgpr_write_b32", [_as_agpr(d, regs)], [s], kind="valu", loc=i.loc))
            else:
                out.append(Inst("v_accvgpr_read_b32", [d], [_as_agpr(s, regs)], kind="valu", loc=i.loc))
            continue
        # any other instruction reads VGPR copies, and writes through VGPRs
        uses, pre = [], []
        for x in i.uses:
            if hit(x):
                neg = isinstance(x, Neg)
                a = _as_agpr(strip(x), regs)
                t = Reg("v", a.size)
                for k in range(a.size):
                    pre.append(Inst("v_accvgpr_read_b32", [t if a.size == 1 else t[k]],
                                    [a if a.size == 1 else Sub(a, k)], kind="valu", loc=i.loc))
                x = Neg(t) if neg else t
            uses.append(x)
        defs, post = [], []
        for x in i.defs:
            if hit(x):
                a = _as_agpr(x, regs)
                t = Reg("v", a.size)
                for k in range(a.size):
                    post.append(Inst("v_accvgpr_write_b32", [a if a.size == 1 else Sub(a, k)],
                                     [t if a.size == 1 else t[k]], kind="valu", loc=i.loc))
                x = t
            defs.append(x)
        j = Inst(i.op, defs, uses, i.suffix, i.kind, i.loc, i.target, i.imp)
        out += pre + [j] + post
    return read_through(copy_back(in_place(coalesce(out))))


# -- the loop-carried accumulator as the MFMA's own srcC/vdst -------------------------------------

def _defs_uses(code):
    defs, uses = {}, {}
    for k, i in enumerate(code):
        if isinstance(i, Inst):
            for r in i.regs("defs"):
                defs.setdefault(r.id, []).append(k)
            for r in i.regs("uses"):
                uses.setdefault(r.id, []).append(k)
    return defs, uses


def _rename(code, old: Reg, new, drop: set) -> list:
    """Every mention of ``old`` (a 1-dword register or a whole one) replaced by ``new``; the
    instructions at indices in ``drop`` removed."""
    def sub(x):
        neg = isinstance(x, Neg)
        y = strip(x)
        if isinstance(y, Reg) and y is old:
            y = new
        elif isinstance(y, Sub) and y.reg is old:
            y = Sub(new, y.index) if isinstance(new, Reg) else new
        return Neg(y) if neg else y
    out = []
    for k, i in enumerate(code):
        if k in drop:
            continue
        if isinstance(i, Inst) and any(r is old for r in i.mentioned()):
            i = Inst(i.op, [sub(x) for x in i.defs], [sub(x) for x in i.uses], i.suffix, i.kind, i.loc,
                     i.target, i.imp)
        out.append(i)
    return out


_COPIES = ("v_accvgpr_mov_b32", "v_accvgpr_write_b32", "v_mov_b32")
_MOV = {"a": "v_accvgpr_mov_b32", "v": "v_mov_b32"}  # a register-to-register copy within a file


def _copy_src(i):
    return strip(i.uses[0]) if isinstance(i, Inst) and i.op in _COPIES and len(i.uses) == 1 else None


def _is_mma(i) -> bool:
    return isinstance(i, Inst) and i.op.startswith(("v_mfma", "v_wmma"))


def coalesce(code: list) -> list:
    """A loop-carried accumulator held in n one-dword homes (AGPRs, or VGPRs for WMMA), gathered into an MFMA's srcC
    tuple each iteration and copied back from the last MFMA's D: the tuple becomes the home and
    the last MFMA writes it in place, so neither copy is left (2n v_accvgpr_mov per tile and
    iteration). Applied only where nothing else reads or writes those registers in between."""
    changed = True
    while changed:
        changed = False
        defs, uses = _defs_uses(code)
        for k, m in enumerate(code):
            if not _is_mma(m):
                continue
            c = strip(m.uses[2])
            if not isinstance(c, Reg) or c.cls not in _MOV or c.size < 2 or c.fixed is not None:
                continue
            gather = defs.get(c.id, [])
            homes = [None] * c.size
            ok = len(gather) == c.size and all(p < k for p in gather)
            for p in gather if ok else ():
                i, src = code[p], _copy_src(code[p])
                d = i.defs[0] if isinstance(i, Inst) else None
                if not (i.op == _MOV[c.cls] and isinstance(d, Sub) and isinstance(src, Reg) and src.fixed is None
                        and src.size == 1 and src.cls == c.cls and homes[d.index] is None):
                    ok = False
                    break
                homes[d.index] = src
            if not ok or len({h.id for h in homes}) != c.size or any(h.id == c.id for h in homes):
                continue
            start = min(gather)
            # the homes: copies define them, nothing redefines them between the gather and the MFMA,
            # and the gather is their only use in that stretch
            if any(not all(_copy_src(code[p]) is not None for p in defs.get(h.id, [])) for h in homes):
                continue
            if any(start <= p <= k for h in homes for p in defs.get(h.id, [])):
                continue
            for h in homes:
                code = _rename(code, h, Sub(c, homes.index(h)), set())
            code = _rename(code, c, c, set(gather))  # the gather copies c[k] <- c[k] go
            code = _merge_last_d(code, c)
            changed = True
            break
    return code


def _merge_last_d(code: list, c: Reg) -> list:
    """c[k] <- D[k] for every k, D an MFMA's result read only there, and c untouched between that
    MFMA and the copies: the MFMA writes c itself."""
    defs, uses = _defs_uses(code)
    copies = [p for p in defs.get(c.id, []) if isinstance(strip(code[p].uses[0]), Sub)
              and code[p].op == _MOV[c.cls]]
    groups: dict = {}
    for p in copies:
        s, d = strip(code[p].uses[0]), code[p].defs[0]
        if isinstance(d, Sub) and s.index == d.index:
            groups.setdefault(s.reg.id, (s.reg, []))[1].append(p)
    for rid, (dreg, ps) in groups.items():
        if dreg.size != c.size or len(ps) != c.size or len(defs.get(rid, [])) != 1:
            continue
        k = defs[rid][0]
        if not _is_mma(code[k]) or sorted(uses.get(rid, [])) != sorted(ps):
            continue
        hi = max(ps)
        if any(k < p < hi and p not in ps and any(r is c for r in code[p].mentioned())
               for p in range(k + 1, hi)):
            continue
        if any(isinstance(code[p], Label) for p in range(k + 1, hi)):
            continue
        return _rename(code, dreg, c, set(ps))
    return code


def _block_of(code, k):
    """[start, end) of the straight-line block holding index k."""
    def edge(i):
        return isinstance(i, Label) or (isinstance(i, Inst) and i.kind in ("branch", "cbranch", "end"))
    s = k
    while s > 0 and not isinstance(code[s - 1], Label) and not (
            isinstance(code[s - 1], Inst) and code[s - 1].kind in ("branch", "cbranch", "end")):
        s -= 1
    e = k + 1
    while e < len(code) and not edge(code[e]):
        e += 1
    if e < len(code) and not isinstance(code[e], Label):
        e += 1  # the branch ends the block
    return s, e


def in_place(code: list) -> list:
    """An MFMA chain over one accumulator (K steps of one tile: D1 = mfma(C), D2 = mfma(D1), ...)
    written in C itself: vdst may be srcC exactly (CDNA3 ISA 7.1). Dk becomes C when Dk is
    defined only there and read only later in the same block, and C's value dies at the MFMA:
    either C is written again later in the block (the loop-carried accumulator: the chain's last
    MFMA writes it) and unread before that, or C lives only in this block (a tile zeroed or
    rescaled each iteration) and this MFMA is its last reader. Without this the allocator,
    which never lets an instruction's source and destination share a register, gave each chain
    two more AGPR tuples than the accumulator has values."""
    changed = True
    while changed:
        changed = False
        defs, uses = _defs_uses(code)
        for k, m in enumerate(code):
            if not _is_mma(m) or not m.op.startswith("v_mfma"):
                continue
            c, d = strip(m.uses[2]), strip(m.defs[0])
            if not (isinstance(c, Reg) and isinstance(d, Reg) and c is not d and c.cls == d.cls
                    and c.cls in ("a", "v") and c.size == d.size and c.fixed is None and d.fixed is None):
                continue
            if defs.get(d.id) != [k] or any(r is c for r in (strip(m.uses[0]), strip(m.uses[1]))):
                continue
            bs, be = _block_of(code, k)
            c_defs, c_uses = defs.get(c.id, []), uses.get(c.id, [])
            later_def = min((p for p in c_defs if k < p < be), default=None)
            if later_def is not None:  # C written again in the block: unread until then
                if any(k < p < later_def for p in c_uses):
                    continue
                limit = later_def
            else:  # C only in this block, first written there, last read here
                if any(not bs <= p < be for p in c_defs + c_uses) or not c_defs \
                        or min(c_defs) >= min(c_uses, default=be) or max(c_uses) != k:
                    continue
                limit = be - 1
            # D read only after k and up to limit; at limit only as srcC of an MFMA writing C
            du = uses.get(d.id, [])
            last = code[limit]
            if not du or any(not k < p <= limit for p in du) or (later_def is not None and limit in du and not (
                    _is_mma(last) and strip(last.uses[2]) is d and strip(last.defs[0]) is c
                    and all(strip(x) is not d for x in last.uses[:2]))):
                continue
            code = _rename(code, d, c, set())
            changed = True
            break
    return code


def _key(x):
    x = strip(x)
    return (x.reg.id, x.index) if isinstance(x, Sub) else (x.id, None) if isinstance(x, Reg) else None


def _overlaps(k, d) -> bool:
    """Whether writing operand d changes the dword named by key k."""
    kd = _key(d)
    return kd is not None and kd[0] == k[0] and (kd[1] is None or k[1] is None or kd[1] == k[1])


def read_through(code: list) -> list:
    """``v_accvgpr_read v, t`` after ``v_accvgpr_mov t, a`` in the same block reads ``a`` itself
    while neither is written in between; the copies left unread go (dce). The accumulator that
    leaves the loop was copied into a second set of AGPRs only to be read back into VGPRs."""
    from .dce import remove_dead
    out, src = [], {}
    for i in code:
        if isinstance(i, Label) or (isinstance(i, Inst) and i.kind in ("branch", "cbranch", "end")):
            src = {}
            out.append(i)
            continue
        if i.op == "v_accvgpr_read_b32" and _key(i.uses[0]) in src:
            i = Inst(i.op, i.defs, [src[_key(i.uses[0])]], i.suffix, i.kind, i.loc, i.target, i.imp)
        if i.defs:
            src = {k: v for k, v in src.items()
                   if not any(_overlaps(k, d) or _overlaps(_key(v), d) for d in i.defs)}
        if i.op == "v_accvgpr_mov_b32" and _key(i.defs[0]) is not None:
            src[_key(i.defs[0])] = i.uses[0]
        out.append(i)
    return remove_dead(out)


def _touches(x, reg, i) -> bool:
    """Whether operand x writes/reads dword i of reg (the whole register or that dword)."""
    x = strip(x)
    return (isinstance(x, Reg) and x is reg) or (isinstance(x, Sub) and x.reg is reg and x.index == i)


_FILE = {"v_accvgpr_mov_b32": "a", "v_mov_b32": "v"}


def _mfma_acc(code, r) -> bool:
    return any(isinstance(i, Inst) and i.op.startswith("v_mfma") and strip(i.defs[0]) is r for i in code)


def copy_back(code: list) -> list:
    """The loop-carried accumulator kept in one-dword AGPR homes, rescaled each iteration into a
    tuple the MFMAs accumulate in (``acc = mfma(p, v, acc * alpha)``) and copied back from it:
    home i becomes dword i of the tuple when that dword lives only in this block, every read of
    the home there comes before the tuple's dword i is first written, and the copy back comes
    after its last write (then 2n v_accvgpr_mov a step and n AGPRs go)."""
    changed = True
    while changed:
        changed = False
        defs, uses = _defs_uses(code)
        for p, i in enumerate(code):
            if not (isinstance(i, Inst) and i.op in ("v_accvgpr_mov_b32", "v_mov_b32") and len(i.uses) == 1):
                continue
            h, src = strip(i.defs[0]), strip(i.uses[0])
            if not (isinstance(h, Reg) and h.size == 1 and h.cls == _FILE[i.op] and h.fixed is None
                    and isinstance(src, Sub) and src.reg.cls == h.cls and src.reg.fixed is None
                    and src.reg.size > 1 and _mfma_acc(code, src.reg)):
                continue
            r, n = src.reg, src.index
            bs, be = _block_of(code, p)
            # dword n of the tuple lives only in this block, written before it is read
            r_at = sorted(q for q in set(defs.get(r.id, []) + uses.get(r.id, []))
                          if any(_touches(x, r, n) for x in (*code[q].defs, *code[q].uses)))
            n_defs = [q for q in defs.get(r.id, []) if any(_touches(x, r, n) for x in code[q].defs)]
            if not r_at or r_at[0] < bs or r_at[-1] >= be or not n_defs or r_at[0] != min(n_defs) \
                    or any(_touches(x, r, n) for x in code[r_at[0]].uses):
                continue
            if not n_defs or max(n_defs) > p:
                continue
            h_in = [q for q in sorted(set(defs.get(h.id, []) + uses.get(h.id, []))) if bs <= q < be and q != p]
            if any(q >= min(n_defs) for q in h_in):
                continue
            code = _rename(code, h, Sub(r, n), {p})
            changed = True
            break
    return code

"""Views of slots of stacked shared buffers picked at run time (``FuzzConfig.stacked_views``,
the "stacked" preset): the family a review found the NVIDIA backend refusing or mis-addressing
(joins of ``.slice(s, m, 0).index(k)`` views made in branch arms, at different starts inside the
swizzle period), which the views preset never drew: its branches pick whole slots or aligned
slices, and its loops move in one dim only.

A *recipe* here is one view chain from the view ``base`` the access starts at: a slice of the
first stacked dim at a start of its own, then (usually) an ``.index`` of it (a constant slot or
the run-time ``flag``), slices of laid-out dims (before or after the index), and perhaps a
permute. The recipes of one access all have one shape; they differ in the stacked start, the
slot and the start of one laid-out dim (any dims where the buffer is padded): a swizzled start
moving in two laid-out dims at once is refused by both backends, so it is not drawn. After the
join the chosen view is sliced, permuted or indexed further (``after``). An access's ``form``
says where its views are made: "arm" (the else-arm's before the branch, the then-arm's in it, as
the views preset), "else" (each in its own arm, ``gl.else_``) or "outside" (both before the
branch, which only picks one).

Only called with ``stacked_views`` on, so the other presets' programs are unchanged."""
from __future__ import annotations

from .program import _Builder, _log2


def stacked_shape(b: _Builder) -> tuple:
    """A tile shape with a stacked leading dim of 2 or 4 and (mostly) two laid-out dims of 4 or
    more elements, so swizzle periods have room to start inside."""
    ch = b.ch
    budget = _log2(b.cfg.max_numel)
    lead = 2 if ch.chance(70) else 4
    budget -= _log2(lead)
    if b.cfg.max_rank < 3 or budget < 4 or ch.chance(15):
        return (lead, 1 << ch.int(1, max(1, min(6, budget))))
    rows = ch.int(2, budget - 2)
    return (lead, 1 << rows, 1 << ch.int(2, budget - rows))


def recipes(b: _Builder, base, padded: bool, n: int):
    """``n`` recipes from ``base`` (a smem._View whose leading, stacked dim has 2 or more slots)
    and the view recipe 0 reaches."""
    ch = b.ch
    m = base.shape[0]
    length = 1 if ch.chance(40) else m >> ch.int(1, _log2(m)) if ch.chance(70) else m
    index = ch.chance(80)
    slot = "flag" if index and length >= 2 and ch.chance(50) else None
    before = index and ch.chance(30)   # the laid-out slices before the index (dims counted with it)
    shift = 0 if before or not index else 1
    lead = base.lead - (1 if index else 0)
    dims = [d for d in range(base.lead, len(base.shape)) if base.shape[d] >= 2]
    inner = []   # (dim in the recipe's numbering, its length, the slice's length, start or None: moving)
    if dims:
        moving = ch.choice(dims)
        for d in dims:
            if d != moving and not ch.chance(30):
                continue
            n_d = base.shape[d]
            ln = n_d >> ch.int(1, min(3, _log2(n_d)))
            fixed = None if d == moving or padded and ch.chance(50) else \
                (ch.int(0, n_d - ln) if ch.chance(50) else ln * ch.int(0, n_d // ln - 1))
            inner.append((d - shift, n_d, ln, fixed))
    perm = None
    k = len(base.shape) - base.lead
    if k >= 2 and ch.chance(25):
        p = list(range(k))[::-1] if k == 2 or ch.chance(50) else [1, 0, 2]
        perm = ("permute", list(range(lead)) + [lead + q for q in p])
    out = []
    for _ in range(n):
        r = [("slice", ch.int(0, m - length), length, 0)]
        sl = [("slice", st if st is not None else ch.int(0, n_d - ln), ln, d) for d, n_d, ln, st in inner]
        if index:
            kk = slot if slot is not None else ch.int(0, length - 1)
            r += sl + [("index", kk)] if before else [("index", kk)] + sl
        else:
            r += sl
        if perm is not None:
            r.append(perm)
        out.append(r)
    w = base.copy()
    for s in out[0]:
        w.apply(s)
    return out, w


def after_join(b: _Builder, v, indexed: bool) -> list:
    """Steps viewing the joined view further (applied to ``v``): an index where the recipes kept
    the stacked dim, then slices (from inside the period too) and permutes."""
    from .smem import _index_step, _permute_step, _slice_step
    ch = b.ch
    steps = []
    if not indexed and v.lead and ch.chance(75):
        steps.append(_index_step(b, v))
        v.apply(steps[-1])
    for _ in range(ch.int(0, 2)):
        pick = ch.int(0, 3)
        s = _slice_step(b, v) if pick <= 1 else _permute_step(b, v) if pick == 2 else _index_step(b, v)
        if s is not None:
            steps.append(s)
            v.apply(s)
    return steps


def draws_slots(prog) -> bool:
    """Whether ``prog`` has a branch or loop picking among slot views drawn here."""
    for n in prog.nodes:
        if n.op == "shared" and (any(acc and "form" in acc for acc in (n.attrs["read"], n.attrs["write"]))
                                 or (n.attrs.get("loop") or {}).get("slots")):
            return True
    return False

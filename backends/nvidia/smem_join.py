"""Shared-memory views joined by control flow whose offset tables differ by a constant XOR.

A view chosen by a branch or carried by a loop is carried as registers (rules_control). Where
the joined views share one offset table, one b32 register (the start address) does. The column
halves of a 128-byte-swizzled tile do not: element c of the right half sits at the left half's
offset of c XOR 64 bytes (a slice from inside the swizzle's period, rules_smem._xor_affine), and
no added offset expresses that. Such views are the same XOR-linear table ``lin`` up to a constant
XOR X that differs between the joined values, so the join carries X as a second b32 register:
element c at start + (lin[c] ^ X). Loads and stores fold X into the thread's part of the address
(one xor.b32 per thread register: rules_smem.Access); every other use of the view needs its
placement at compile time and refuses it (rules_smem._view_of).

Whether a join needs X is decided before its code is emitted, from the views' tables, which are
compile-time: the loop body is emitted once, for the carried view it will receive. Joins whose
views share one table (every kernel before this) are carried as before, in one register.
"""
from __future__ import annotations

import numpy as np

from gluon_trace.errors import CompileError
from gluon_trace.ir import MemDescType

from . import ptx
from .rules_smem import Smem, _linear_bits, _xor_affine

_STATIC = "%static"  # the run-time XOR of a view known only by its table (the decision below)
_PURE = ("smem_slice", "smem_permute", "smem_reshape", "smem_reinterpret")  # rules that emit nothing


def _linear(rel: np.ndarray) -> bool:
    return _linear_bits(tuple(rel.shape), np.ascontiguousarray(rel).tobytes()) is not None


def _canon(s: Smem):
    """(A, X, lin): ``s`` places element c at base + A + (lin[c] ^ X), lin XOR-linear; X None:
    the view's run-time XOR. None where the table is not XOR-linear up to a constant XOR (a
    padded layout's tables add: a moved start is all a join of them may change)."""
    if s.xreg is not None:
        return s.const, None, s.rel
    if _linear(s.rel):
        return s.const, 0, s.rel
    v, x = _xor_affine(s)
    return (0, x, v.rel) if x else None


def join_mask(views: list[Smem]) -> int | None:
    """The bits the joined views' XOR may have, if the join needs a run-time XOR; None if it
    does not (one table: carried as before) or cannot (tables that differ otherwise: refused
    where the join is emitted)."""
    first = views[0]
    if all(s.xreg is None and s.rel.shape == first.rel.shape and np.array_equal(s.rel, first.rel) for s in views):
        return None
    cs = [_canon(s) for s in views]
    if any(c is None for c in cs):
        return None
    lin = cs[0][2]
    if any(c[2].shape != lin.shape or not np.array_equal(c[2], lin) for c in cs):
        return None
    m = 0
    for s, (_, x, _) in zip(views, cs):
        m |= s.xmask if x is None else x
    return m


def _spec(s: Smem, mask: int) -> Smem:
    """The joined view as a table: ``s``'s XOR-linear table, a run-time XOR with bits of ``mask``."""
    a, _, lin = _canon(s)
    return Smem(s.base, a, lin, s.dtype, s.align, _STATIC, mask)


# -- what a view is at compile time ------------------------------------------------------------

def _static(em, v, env: dict) -> Smem | None:
    """The view ``v`` will be, as far as its table goes (its registers may not exist yet), from
    the views already emitted and the pure view ops between; None where that takes more (a view
    made by a nested branch or loop, a run-time index of a view with a run-time XOR)."""
    if v in env:
        return env[v]
    regs = em.vals.get(v)
    if regs is not None:
        return regs[0] if isinstance(regs[0], Smem) else None
    op = v.owner
    if op is not None and op.name == "if":  # (a branch inside a loop body picks the next view)
        i = next(k for k, r in enumerate(op.results) if r is v)
        arms = [_yielded(b, i) for b in op.regions]
        views = [_static(em, a, env) if a is not None else None for a in arms]
        if None in views:
            return None
        m = join_mask(views)
        if m is not None:
            return _spec(views[0], m)
        same = all(s.xreg is None and s.rel.shape == views[0].rel.shape and np.array_equal(s.rel, views[0].rel)
                   for s in views)
        return views[0] if same else None
    if op is None or op.name not in _PURE + ("smem_index",):
        return None
    s = _static(em, op.operands[0], env)
    if s is None:
        return None
    if op.name == "smem_index":  # (moves the base only; the rule checks the stride)
        return None if s.xreg is not None else Smem(s.base, s.const, s.rel[0], s.dtype, s.align)

    class _Views:  # the view rules read only these
        vals, loc = {op.operands[0]: [s]}, op.loc
    from .emitter import RULES
    try:
        return RULES[op.name](_Views, op)[0][0]
    except CompileError:  # (the rule says so again, with its reason, when it is emitted)
        return None


def _yielded(block, i: int):
    y = block.ops[-1] if block.ops else None
    return y.operands[i] if y is not None and y.name == "yield" else None


def branch_specs(em, op) -> dict:
    """{result index: joined view's spec} for an ``if``'s views that need a run-time XOR."""
    out = {}
    for i, r in enumerate(op.results):
        if not isinstance(r.type, MemDescType):
            continue
        arms = [_yielded(b, i) for b in op.regions]
        views = [_static(em, a, {}) if a is not None else None for a in arms]
        if None in views:
            continue
        m = join_mask(views)
        if m is not None:
            out[i] = _spec(views[0], m)
    return out


def loop_specs(em, op, firsts: dict) -> dict:
    """{carried index: spec} for a ``for``'s carried views that need a run-time XOR: a view
    that enters with one, or whose body yields a view of the same table up to another XOR. The
    body's views may be the carried ones (buffers swapped each step): repeated until no carried
    view gains a run-time XOR or bits of one."""
    body = op.regions[0]
    args = body.args[1:]  # (the first is the induction variable)
    masks = {i: f.xmask for i, f in firsts.items() if f.xreg is not None}
    while True:
        env = {args[i]: (_spec(f, masks[i]) if i in masks else f) for i, f in firsts.items()}
        new = dict(masks)
        for i in firsts:
            v = _yielded(body, i)
            y = _static(em, v, env) if v is not None else None
            m = join_mask([env[args[i]], y]) if y is not None else None
            if m is not None:
                new[i] = new.get(i, 0) | m
        if new == masks:
            return {i: _spec(firsts[i], m) for i, m in masks.items()}
        masks = new


# -- carrying it ------------------------------------------------------------------------------

def check(s: Smem, spec: Smem, loc, what: str) -> None:
    """A view the join receives: the spec's table, up to an XOR within its bits."""
    m = join_mask([spec, s])
    if m is None or m & ~spec.xmask:
        raise CompileError(f"{what} yields shared-memory views placed differently (another layout, a "
                           "slice or permutation of the buffer, not the same table up to a constant XOR): "
                           "only the base (and, for slices of a swizzled tile, that XOR) may change; slice "
                           "or index the buffer inside the branch or loop body instead", loc)


def home_align(s: Smem) -> int:
    """Alignment of the start register carried for ``s`` (its base + A)."""
    a = _canon(s)[0]
    return min(s.align, ptx.pow2_div(a, 16) if a else 16)


def carry(em, s: Smem) -> list[str]:
    """[start address, XOR]: the two b32 sources a join copies for view ``s`` (the XOR an
    immediate where it is a constant)."""
    a, x, _ = _canon(s)
    start = em.ins("b32", f"add.u32 {{d}}, {s.base}, {a};") if a else s.base
    return [start, s.xreg if x is None else str(x)]


def view(regs: list[str], spec: Smem, align: int) -> Smem:
    """The joined view on its carried registers."""
    return Smem(regs[0], 0, spec.rel, spec.dtype, align, regs[1], spec.xmask)

"""A shared buffer or view as the NVIDIA rules see it (:class:`Smem`), and the helpers every
shared-memory rule shares.

A buffer value is a b32 register holding a shared address, a constant byte offset, and the byte
offset of every element relative to both (numpy, from the shared layout's ``element_offsets``).
Views re-index the table at compile time (rules_smem_views.py); only ``index`` with a run-time
index moves the base register (base + i * the leading dim's stride). Where an element lives, per
thread and register, is smem_access.py's.
"""
from __future__ import annotations

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace.errors import CompileError

from . import ptx


class Smem:
    """A shared buffer or view: element c lives at base + const + rel[c] (bytes), or, with a
    run-time XOR ``xreg`` (a view chosen by a branch or carried by a loop among views whose
    XOR-linear tables differ by a constant XOR: smem_join.py), at base + const + (rel[c] ^ X)
    where X, the register's value, has only bits of ``xmask``. ``plin``: for a view of a
    padded buffer, (the padding's linear index of each element, re-indexed with ``rel``, and
    the padding pairs as (log2 interval, padding)); Access needs it only for a view whose table
    is no sum over its coordinate bits (a slice from inside a padding period). None elsewhere.
    ``sreg``: a padded view chosen by a branch or carried by a loop among views that start at
    different linear indices (smem_padded.py): element c at base + const + rel[c] + es *
    pad(S + plin[0][c]), S the register's value, a multiple of ``salign``. ``coff``: for a
    view made by slices (and run-time ``index``) of an unpadded buffer, (the buffer's table
    ``root`` with the indexed dims dropped, the view's start in each of its dims): element c
    at base + root[c + start]; Access needs it only for a view whose table is not XOR-linear
    (a slice from inside a swizzle period: smem_swizzled.py); with ``xreg``, the table T of the
    view X applies to and the start in it: element c at base + const + (T[c + start] ^ X), ``rel``
    being T[c + start] (smem_join.slice_xor). None elsewhere. ``joined``: the view
    a branch or loop carries with one table for all its views (only the refusal's words use it).
    ``creg``: a view with ``coff`` chosen by a branch or carried by a loop among slices whose
    starts in some dims differ (inside a swizzle period): the register holding those starts,
    packed as ``cdim`` ((dim, bit), ...) says (``coff``'s are 0 there; ``rel`` only gives the
    shape): smem_swizzled.py."""
    __slots__ = ("base", "const", "rel", "dtype", "align", "xreg", "xmask", "plin", "sreg", "salign", "coff", "joined",
                 "creg", "cdim")

    def __init__(self, base: str, const: int, rel: np.ndarray, dtype: dt.dtype, align: int,
                 xreg: str | None = None, xmask: int = 0, plin: tuple | None = None,
                 sreg: str | None = None, salign: int = 0, coff: tuple | None = None, joined: bool = False,
                 creg: str | None = None, cdim: tuple | None = None):
        self.base, self.const, self.rel, self.dtype, self.align = base, const, rel, dtype, align
        self.xreg, self.xmask, self.plin = xreg, xmask, plin
        self.sreg, self.salign = sreg, salign
        self.coff, self.joined = coff, joined
        self.creg, self.cdim = creg, cdim

    def shifted(self, rel: np.ndarray, idx=None) -> "Smem":
        """The same base, a re-indexed table (normalised so rel at the origin is 0); ``idx``,
        the index that re-indexed it, re-indexes ``plin`` (and a slice's ``coff``) too."""
        o = int(rel.flat[0]) if rel.size else 0
        coff = None
        if self.coff is not None and idx is not None:
            root, starts = self.coff
            coff = (root, tuple(st + (i.start or 0) for st, i in zip(starts, idx)))
        return Smem(self.base, self.const + o, rel - o, self.dtype, self.align,
                    plin=self.plin_at(idx) if idx is not None else None, coff=coff)

    def plin_at(self, fn) -> tuple | None:
        """``plin`` with its table re-indexed like ``rel`` (``fn``: an index, or a function of
        the table)."""
        if self.plin is None:
            return None
        lin, pads = self.plin
        return (fn(lin) if callable(fn) else lin[fn]), pads


def _plin_of(layout, shape: tuple) -> tuple | None:
    """``Smem.plin`` of a buffer of ``shape`` in ``layout`` (None unless padded)."""
    from gluon_trace.shared_layouts import PaddedSharedLayout, _offsets_from_bases
    if not isinstance(layout, PaddedSharedLayout) or len(shape) < len(layout.shape):
        return None
    inner = tuple(shape[len(shape) - len(layout.shape):])
    lin = np.broadcast_to(_offsets_from_bases(inner, layout.offset_bases), shape)
    pads = tuple((i.bit_length() - 1, p) for i, p in layout.interval_padding_pairs)
    return lin, pads


def _pad(x, pads):
    """A padded layout's element offset of linear index ``x`` (int or array)."""
    return x + sum((x >> k) * p for k, p in pads)


def _esize(t: dt.dtype) -> int:
    return max(t.bits // 8, 1)


def _pow2_div(v: int, cap: int = 1 << 12) -> int:
    return ptx.pow2_div(v, cap) if v else cap


def _view_of(em, v, xor_ok: bool = False, start_ok: bool = False) -> Smem:
    """The view ``v``; ``xor_ok``: the caller addresses elements through Access, which folds a
    run-time XOR into the thread's register (every other use needs the view's placement at
    compile time: a descriptor, a TMA box, one start address); ``start_ok`` (implied by
    ``xor_ok``): through Access, which takes a padded view's run-time start."""
    s = em.vals[v][0]
    if not isinstance(s, Smem):
        raise CompileError("a shared-memory descriptor reached the NVIDIA backend through a path it "
                           "does not follow (a loop-carried or branch-selected buffer); pass the "
                           "buffer itself and index it inside the loop", em.loc)
    if s.xreg is not None and not xor_ok:
        raise CompileError("this shared-memory view was chosen by a branch (or carried by a loop) among "
                           "views placed differently (column halves of a swizzled tile: their offsets "
                           "differ by an XOR known only at run time), which only .load() and .store() "
                           "(and views of it: .index/.slice/.permute/.reshape/.reinterpret) take; slice or "
                           "index the buffer inside the branch (or loop body), right where it is used here, "
                           "or branch around this operation", em.loc)
    if s.sreg is not None and not (xor_ok or start_ok):
        from .smem_padded import refuse
        refuse("this operation", em.loc)
    if s.creg is not None and not (xor_ok or start_ok):
        from .smem_swizzled_runtime import refuse_runtime
        refuse_runtime("this operation", em.loc)
    return s


def _barrier_if_needed(em, op) -> None:
    """membar's verdict for this access (scratch lives above every buffer: it never conflicts)."""
    if op in em.membar:
        em.barrier()

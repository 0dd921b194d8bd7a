"""A run-time start in a stacked dim, moved into the view's base for a .reshape that regroups it.

A view a branch picks (a loop carries) among slices of a swizzled buffer starting at different
places keeps each moving dim's start as a field of ``Smem.creg`` (smem_swizzled_runtime.py), which
serves a .reshape only where that dim survives it whole: merged with another dim, or split, its
start would move the other dim's coordinate. A swizzled buffer's leading (stacked) dims are not
swizzled, though: its table adds along them, root[.., j, ..] = root[.., 0, ..] + j * stride, so
the view starting at S there is the view starting at 0 from base + S * stride. Such a start
(moving: its field, one bfe and one mad; or a constant the regrouping cannot split: one add)
goes into the base, the dim starts at 0, which every row-major regrouping keeps, and the rest
reshapes as before; likewise an .index() of such a moving dim (smem_swizzled_runtime.index_view).
Only for reshapes and indexes refused before, so every kernel lowered before is lowered as before.
"""
from __future__ import annotations

import numpy as np

from . import ptx


def stride(root: np.ndarray, d: int) -> int | None:
    """The stride of dim d of the buffer table ``root`` where the table adds along it, else None."""
    n = root.shape[d]
    first = np.take(root, 0, d)
    st = int(np.take(root, 1, d).flat[0] - first.flat[0]) if n > 1 else 0
    if all(np.array_equal(np.take(root, j, d), first + j * st) for j in range(n)):
        return st
    return None


def fold(em, s):
    """``s`` (a view with ``creg``) with the start of every stacked dim where it moves or is not
    0 moved into its base; None where no dim is so. A view whose moving dims all went is a plain
    one (its table from the buffer's, as start_coords addresses it)."""
    from .smem_view import Smem
    root, starts = s.coff
    moving = dict(s.cdim)
    dims = [d for d in range(root.ndim) if (d in moving or starts[d]) and stride(root, d) is not None]
    if not dims:
        return None
    base, align, st = s.base, s.align, list(starts)
    for d in dims:
        by = stride(root, d)
        if d in moving:
            w = (int(root.shape[d]) - 1).bit_length()
            f = s.creg if s.cdim == ((d, 0),) else em.ins("b32", f"bfe.u32 {{d}}, {s.creg}, {moving[d]}, {w};")
            base = em.ins("b32", f"mad.lo.u32 {{d}}, {f}, {by}, {base};")
            align = min(align, ptx.pow2_div(by, 16))
        else:
            base = em.ins("b32", f"add.u32 {{d}}, {base}, {st[d] * by};")
            align = min(align, ptx.pow2_div(st[d] * by, 16))
            st[d] = 0
    keep = tuple((d, b) for d, b in s.cdim if d not in dims)
    if not keep:
        rel = root[tuple(i + x for i, x in zip(np.indices(s.rel.shape), st))]
        return Smem(base, 0, rel, s.dtype, align, coff=(root, tuple(st)))
    creg = s.creg
    if len(keep) < len(s.cdim):   # (the moved fields cleared: an access adds the kept ones only)
        mask = sum(((1 << (int(root.shape[d]) - 1).bit_length()) - 1) << b for d, b in keep)
        creg = em.ins("b32", f"and.b32 {{d}}, {s.creg}, {mask};")
    return Smem(base, 0, s.rel, s.dtype, align, coff=(root, tuple(st)), creg=creg, cdim=keep)


def fold_plain(em, s, rel: np.ndarray, fit) -> tuple:
    """(view, coff) for a .reshape or .index of the view ``s`` (a start known at compile time:
    a slice, or one table a join carries) that keeps no ``coff``, its table ``rel`` not XOR-linear
    even up to a constant XOR (so its access is refused without one): ``s`` with its stacked dims'
    starts moved into the base (one add), and ``fit`` (the op's coff of a coff) of that, where it
    is one (a stacked start the reshape splits unevenly, [4] from 1 as [2, 2]; a split one a later
    .index takes); else (``s``, None), as before."""
    from .smem_access import _linear_bits, _xor_affine
    from .smem_view import Smem
    if s.xreg is not None or s.sreg is not None or s.plin is not None or not rel.size:
        return s, None
    root, starts = s.coff
    dims = [d for d in range(root.ndim) if starts[d] and stride(root, d) is not None]
    lin = rel - rel.flat[0]
    if not dims or _linear_bits(tuple(lin.shape), np.ascontiguousarray(lin).tobytes()) is not None or \
            _xor_affine(Smem(s.base, s.const, rel, s.dtype, s.align))[1]:
        return s, None
    st = tuple(0 if d in dims else x for d, x in enumerate(starts))
    coff = fit((root, st))
    if coff is None:
        return s, None
    by = sum(starts[d] * stride(root, d) for d in dims)
    base = em.ins("b32", f"add.u32 {{d}}, {s.base}, {by};")
    return Smem(base, s.const - by, s.rel, s.dtype, min(s.align, ptx.pow2_div(by, 16)), coff=(root, st),
                joined=s.joined), coff

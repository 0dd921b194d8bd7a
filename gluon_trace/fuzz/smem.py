"""The shared-memory op family (``FuzzConfig.shared``): a tile already in the program goes
through a shared buffer and comes back, seen through a random chain of views.

One ``shared`` node stands for the whole round trip, so programs stay SSA:

- ``smem``: the buffer's shared layout as plain data, over the buffer's trailing ``lrank``
  dims (leading dims before them are stacked copies, which ``.index`` selects):
  ``("swizzled", vec, per_phase, max_phase, order)``, ``("nvmma", transposed)``
  (``NVMMASharedLayout.get_default_for``, 2-D) or ``("padded", [[interval, pad], ...], order)``
  (``PaddedSharedLayout.with_identity_for``);
- ``init``: ``"value"`` (``allocate_shared_memory(..., value)``) or ``"store"`` (``.store``);
- ``views``: the views every access starts from; each step is ``("slice", start, length, dim)``,
  ``("permute", order)``, ``("index", i)`` (``i`` an int or ``"flag"``, the run-time scalar) or
  ``("reshape", shape)`` (first step only: stacked dims regrouped on the whole buffer);
- ``read`` and, optionally, ``write``: an access ``{"a": [...], "b": [...] | None, "after": [...]}``:
  the view is ``views`` then ``a``; with ``b``, ``with gl.if_(flag > 0):`` rebinds it to
  ``views`` then ``b`` (both arms views of one buffer, of one shape: slices of one dim at
  different aligned starts, or different slots; with ``unaligned_views``, of a padded buffer
  at any different starts); ``after`` (permutes) applies to the chosen view. ``write`` stores the node's second argument there (after the first store);
- the node's own layout is the distributed layout ``read``'s view is loaded in;
- ``loop`` (``unaligned_views`` only, else absent): after ``write``, a ``gl.range(0, n_iter)`` loop
  carries a view ``{v}_c`` (``move`` "step": the body picks the next of K slices at starts
  a0 + j * step of one dim with ``gl.if_((i + 1) % K == j)``; "ring": ``.index((i + 1) % K * step
  + a0)``, a slot; "swap": two views, ``{v}_c, {v}_d = {v}_d, {v}_c``): step i sees ``pos[i % K]``
  (each ``pos`` a view chain from ``views``' end), always through ``after`` (slices, permutes,
  indexes). ``body``: ``("load", c)`` (``{v}_a``, the tile read, replaced or ``combine``d by
  ``gl.maximum``, first read before the loop), ``("store", c, k)`` (argument k), ``("copy", c, d)``
  (one carried view's contents into the other's); c/d 0 for ``{v}_c``, 1 for ``{v}_d``; ``lay``
  the loads' layout (source text). ``out``: the node is ``{v}_a`` ("acc"), the carried view read
  after the loop ("final"), or ``read`` as without a loop ("buf": what the stores left).

``FuzzConfig.stacked_views`` (the "stacked" preset) adds branches and loop bodies picking among
views of slots of stacked buffers made in each arm (fuzz/smem_stacked.py; an access's ``form``
and a loop's ``slots`` mark them).

Only programs the backends document as lowerable are drawn: slices of swizzled dims have
power-of-two lengths at aligned starts (``FuzzConfig.unaligned_views``: at any start, inside
a swizzle or padding period, as both backends lower; a branch then picks between views of a
swizzled or NVMMA buffer only where the views before it start on whole periods, since a start
changing inside a swizzle period is refused, and reshapes stay first, on the whole buffer, since
one of an unaligned swizzled slice is refused; a loop's views start apart in one dim only, and
are never reshaped or reinterpreted, both refused for a run-time start), permutes keep stacked
dims in front, int1 tiles go through int8 (neither backend keeps int1 in shared memory), a joined view is only permuted,
loaded and stored. Barriers are the backends' own (gluon_trace.membar), which users rely on
and the interpreter checks.
"""
from __future__ import annotations

from .program import _Builder, _log2, _permutation
from . import smem_stacked as stacked
from .render import layout_source


def _shared_layout(b: _Builder, shape: tuple, dtype: str):
    """(spec, lrank): a shared layout for the buffer ``shape`` of ``dtype``, over its trailing
    ``lrank`` dims (the rest stacked)."""
    ch, rank = b.ch, len(shape)
    kinds = ["swizzled", "padded"] + (["nvmma"] if rank >= 2 else [])
    if b.cfg.stacked_views and rank >= 2:   # (swizzles more often: their run-time starts)
        kinds += ["swizzled"] + (["nvmma"] if rank >= 3 else [])
    kind = ch.choice(kinds)
    if kind == "nvmma":
        lrank = 2
    else:
        lrank = rank if rank == 1 or not ch.chance(75 if b.cfg.stacked_views else 35) else ch.int(1, rank - 1)
    inner = shape[rank - lrank:]
    if kind == "nvmma":
        return ("nvmma", ch.chance(30)), lrank
    order = list(range(lrank))[::-1]
    if ch.chance(40):
        order = [order[i] for i in _permutation(ch, lrank)]
    if kind == "swizzled":
        ncols = inner[order[0]]
        vec = 1 << ch.int(0, min(3, _log2(ncols)))
        per_phase = 1 << ch.int(0, 2)
        if ch.chance(50):  # the whole row swizzled: column halves then differ by an XOR
            max_phase = ncols // vec
        else:
            max_phase = 1 << ch.int(0, max(0, min(3, _log2(ncols // vec)) if not ch.chance(15) else 3))
        return ("swizzled", vec, per_phase, max_phase, order), lrank
    numel = 1
    for s in inner:
        numel *= s
    pairs = []
    for _ in range(1 if ch.chance(75) else 2):
        interval = 1 << ch.int(0, max(0, _log2(numel)))
        if all(interval != p[0] for p in pairs):
            pairs.append([interval, 1 << ch.int(0, 2)])
    return ("padded", pairs, order), lrank


class _View:
    """The shape of a view, how many of its leading dims are stacked and whether a slice of a
    laid-out dim started off a multiple of its length (inside a swizzle or padding period)."""

    def __init__(self, shape, lead, moved=False):
        self.shape, self.lead, self.moved = list(shape), lead, moved

    def copy(self):
        return _View(self.shape, self.lead, self.moved)

    def apply(self, step):
        kind = step[0]
        if kind == "slice":
            _, start, length, dim = step
            self.shape[dim] = length
            self.moved |= dim >= self.lead and start % length != 0
        elif kind == "permute":
            self.shape = [self.shape[d] for d in step[1]]
        elif kind == "index":
            self.shape = self.shape[1:]
            self.lead -= 1
        elif kind == "reshape":
            self.lead += len(step[1]) - len(self.shape)
            self.shape = list(step[1])
        return self


def _slice_step(b: _Builder, v: _View, last: bool = False, aligned: bool = False):
    """A slice of a random dim (``last``: the last dim, where it can be sliced, more often: the
    contiguous dim of most layouts, whose swizzle makes halves differ by an XOR); with
    ``unaligned_views`` and not ``aligned``, often at any start."""
    dims = [d for d in range(len(v.shape)) if v.shape[d] >= 2]
    if not dims:
        return None
    d = dims[-1] if last and b.ch.chance(60) else b.ch.choice(dims)
    length = v.shape[d] >> (1 if last and b.ch.chance(50) else b.ch.int(1, min(3, _log2(v.shape[d]))))
    if b.cfg.unaligned_views and not aligned and b.ch.chance(60):
        return ("slice", b.ch.int(0, v.shape[d] - length), length, d)
    return ("slice", length * b.ch.int(0, v.shape[d] // length - 1), length, d)


def _permute_step(b: _Builder, v: _View):
    inner = len(v.shape) - v.lead
    if inner < 2:
        return None
    perm = _permutation(b.ch, inner)
    if perm == list(range(inner)):
        return None
    return ("permute", list(range(v.lead)) + [v.lead + p for p in perm])


def _index_step(b: _Builder, v: _View):
    if not v.lead:
        return None
    if v.shape[0] >= 2 and b.ch.chance(40):
        return ("index", "flag")
    return ("index", b.ch.int(0, v.shape[0] - 1))


def _reshape_step(b: _Builder, v: _View, max_rank: int):
    """Stacked dims regrouped: two merged, or one split in two (within ``max_rank``)."""
    if v.lead >= 2 and b.ch.chance(50):
        return ("reshape", [v.shape[0] * v.shape[1]] + v.shape[2:])
    cands = [d for d in range(v.lead) if v.shape[d] >= 2]
    if not cands or len(v.shape) >= max_rank:
        return None
    d = b.ch.choice(cands)
    k = 1 << b.ch.int(1, _log2(v.shape[d]))
    return ("reshape", v.shape[:d] + [k, v.shape[d] // k] + v.shape[d + 1:])


def _chain(b: _Builder, v: _View, n: int, max_rank: int = 0) -> list:
    """Up to ``n`` view steps from ``v`` (applied to it); ``max_rank`` > 0 lets the first be a
    reshape (the chain starts at the whole buffer)."""
    steps = []
    for i in range(n):
        pick = b.ch.int(0, 5 if b.cfg.unaligned_views else 3)  # (views: slices of slices more often)
        step = (_slice_step(b, v) if pick in (0, 4, 5) else _permute_step(b, v) if pick == 1 else
                _index_step(b, v) if pick == 2 else
                (_reshape_step(b, v, max_rank) if i == 0 and max_rank else None))
        if step is not None:
            steps.append(step)
            v.apply(step)
    return steps


def _access(b: _Builder, base: _View, branch: bool, padded: bool):
    """An access from the views' end: its spec and the view it reaches (``padded``: the buffer's
    layout is padded, whose views a branch may pick at any different starts)."""
    a, other = [], None
    v = base.copy()
    if branch and not padded and base.moved:
        # a swizzled view from inside a period: a branch between starts on it is refused
        branch = False
    if branch and b.cfg.stacked_views and base.lead and base.shape[0] >= 2 and b.ch.chance(70):
        (a, other), v = stacked.recipes(b, base, padded, 2)
        after = stacked.after_join(b, v, len(v.shape) < len(base.shape))
        return {"a": a, "b": other, "after": after, "form": b.ch.choice(["arm", "else", "outside"])}, v
    if branch:
        if base.lead and base.shape[0] >= 2 and b.ch.chance(30):
            i, j = b.ch.int(0, base.shape[0] - 1), b.ch.int(0, base.shape[0] - 2)
            a, other = [("index", i)], [("index", j if j < i else j + 1)]
        else:
            s = _slice_step(b, base, last=True, aligned=not padded)
            if s is not None:
                _, start, length, d = s
                if b.cfg.unaligned_views and padded:
                    starts = [k for k in range(base.shape[d] - length + 1) if k != start]
                else:
                    starts = [k * length for k in range(base.shape[d] // length) if k * length != start]
                a, other = [s], [("slice", b.ch.choice(starts), length, d)]
                if b.ch.chance(30):  # a second dim too (quarters): the same slice on both arms
                    t = _slice_step(b, v.copy().apply(s), aligned=not padded)
                    if t is not None and t[3] != d:
                        a, other = a + [t], other + [t]
    else:
        a = _chain(b, v.copy(), b.ch.int(0, 2 if b.cfg.unaligned_views else 1))
    for step in a:
        v.apply(step)
    after = []
    if b.ch.chance(30):
        p = _permute_step(b, v)
        if p is not None:
            after.append(p)
            v.apply(p)
    return {"a": a, "b": other, "after": after}, v


def op_shared(b: _Builder) -> None:
    t = b.pick(lambda n: n.shape)
    if b.cfg.stacked_views and b.ch.chance(75):
        t = b.load(stacked.stacked_shape(b))
    if t is None:
        return
    if t.dtype == "int1":
        t = b.add("cast", (t,), "int8", t.shape, t.layout, to="int8")
    spec, lrank = _shared_layout(b, t.shape, t.dtype)
    base = _View(t.shape, len(t.shape) - lrank)
    views = _chain(b, base, b.ch.int(0, 1 if b.cfg.stacked_views else 3 if b.cfg.unaligned_views else 2),
                   b.cfg.max_rank)
    padded = spec[0] == "padded"
    args = [t]
    write = None
    if b.ch.chance(35):
        write, wv = _access(b, base, b.ch.chance(70 if b.cfg.stacked_views else 50), padded)
        x = b.pick(lambda n: tuple(n.shape) == tuple(wv.shape) and n.dtype == t.dtype and n is not t)
        if x is None or b.ch.chance(30):
            x = b.load(tuple(wv.shape), t.dtype)
        args.append(x)
    loop = _loop(b, base, t.dtype, args, padded) if b.cfg.unaligned_views and b.ch.chance(40) else None
    extra = {}
    if loop is not None:
        loop, lshape = loop
        lay = b.layout(lshape)
        loop["lay"] = layout_source(lay, {})
        extra["loop"] = loop
    if loop is not None and loop["out"] != "buf":
        read, shape = None, lshape
    else:
        read, rv = _access(b, base, b.ch.chance(80 if b.cfg.stacked_views else 45), padded)
        shape = tuple(rv.shape)
        lay = b.layout(shape)
    b.add("shared", tuple(args), t.dtype, shape, lay, buf=list(t.shape), smem=spec, lrank=lrank,
          init="value" if b.ch.chance(50) else "store", views=views, read=read, write=write, **extra)


# -- views carried by a loop (``unaligned_views`` only) ---------------------------------------------
# A loop of ``n_iter`` steps carries one view (or two, swapped each step) of the buffer among K
# positions that differ in one dim only: ``i``'s view is position i % K. Both backends carry a
# swizzled view whose start moves in two dims at once, or reshape/reinterpret one whose start is
# known only at run time, only with an error at the user's line: neither is drawn.

def _moving(b: _Builder, v: _View, dims: list):
    """K >= 2 slices of ``v`` at starts a0 + j * step in one dim, step aligned (a multiple of the
    length) or, often, not; or None."""
    d = b.ch.choice(dims)
    n = v.shape[d]
    length = n >> b.ch.int(1, min(3, _log2(n)))
    k = b.ch.int(2, 4)
    room = n - length
    while k > 2 and room // (k - 1) < 1:
        k -= 1
    top = room // (k - 1)
    if top < 1:
        return None
    if top >= length and not b.ch.chance(60):
        step = length * b.ch.int(1, top // length)
    else:
        step = b.ch.int(1, top)
    a0 = b.ch.int(0, room - (k - 1) * step)
    return [("slice", a0 + j * step, length, d) for j in range(k)]


def _loop(b: _Builder, base: _View, dtype: str, args: list, padded: bool = False):
    """The ``loop`` attribute of a shared node (see the module docstring), or None."""
    ch = b.ch
    v = base.copy()
    pre = _chain(b, v, ch.int(0, 1))
    move = ch.choice(["step", "ring", "swap"])
    slots = {}
    if move == "ring" and not (v.lead and v.shape[0] >= 2):
        move = "step"
    if b.cfg.stacked_views and v.lead and v.shape[0] >= 2 and ch.chance(60):
        # slots at different stacked and in-period starts (fuzz/smem_stacked.py)
        move = "step" if ch.chance(60) else "swap"
        moves, _ = stacked.recipes(b, v, padded, 2 if move == "swap" else ch.int(2, 4))
        slots = {"slots": True}   # (marks the family for tests and campaigns)
    elif move == "ring":
        n = v.shape[0]
        step = 1 if ch.chance(60) else ch.int(1, n - 1)
        k = ch.int(2, (n - 1) // step + 1)
        a0 = ch.int(0, n - 1 - (k - 1) * step)
        moves = [[("index", a0 + j * step)] for j in range(k)]
    else:
        dims = [d for d in range(len(v.shape)) if v.shape[d] >= 2]
        moves = _moving(b, v, dims) if dims else None
        if moves is None:
            return None
        if move == "swap":
            moves = moves[:2] if ch.chance(50) else moves[:2][::-1]
        moves = [[mv] for mv in moves]
    pos = [pre + m for m in moves]
    for s in moves[0]:
        v.apply(s)
    after = _chain(b, v, ch.int(0, 2))  # (no reshape: max_rank 0)
    shape = tuple(v.shape)
    two = move == "swap"
    body = []
    for _ in range(ch.int(1, 2)):
        kind = ch.choice(["load", "store", "copy"] if two else ["load", "store"])
        if kind == "store":
            x = b.pick(lambda n: tuple(n.shape) == shape and n.dtype == dtype)
            if x is None or ch.chance(30):
                x = b.load(shape, dtype)
            args.append(x)
            body.append(("store", ch.int(0, 1) if two else 0, len(args) - 1))
        elif kind == "copy":
            src = ch.int(0, 1)
            body.append(("copy", src, 1 - src))
        else:
            body.append(("load", ch.int(0, 1) if two else 0))
    loads = any(op[0] == "load" for op in body)
    writes = any(op[0] != "load" for op in body)
    out = ch.choice((["acc"] if loads else []) + ["final"] + (["buf"] if writes else []))
    return {"move": move, "pos": pos, "after": after, "body": body, "out": out, **slots,
            "combine": "max" if loads and ch.chance(50) else "last"}, shape

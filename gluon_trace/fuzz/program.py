"""Random programs as plain data: what the fuzzer generates, renders and evaluates.

A :class:`Program` is a straight list of :class:`Node`\\ s in SSA order. Each node says what
it computes (``op`` + ``attrs``) from earlier nodes (``args``), and its result's dtype, shape
and layout. The same description is rendered to kernel source (:mod:`.render`) and evaluated
with numpy (:mod:`.reference`), so the two never share code that could hide a bug.

Every choice goes through a :class:`Chooser`, either hypothesis' ``draw`` (so failures
shrink: every choice shrinks toward its first, simplest option) or a seeded ``random``.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from .. import dtypes as dt
from ..layouts import BlockedLayout, DistributedLinearLayout, SliceLayout

INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
ALL_DTYPES = ("int32", "float32") + tuple(d for d in INT_DTYPES + FLOAT_DTYPES
                                          if d not in ("int32", "float32")) + ("int1",)

ARITH = ("add", "sub", "mul")
BINARY = ARITH + ("maximum", "minimum", "truediv", "floordiv", "mod", "and", "or", "xor",
                  "shl", "shr", "lt", "le", "gt", "ge", "eq", "ne")
COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
UNARY_ANY = ("neg", "abs", "not")
UNARY_FLOAT = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "floor", "ceil")
REDUCE_KINDS = ("sum", "max", "min", "argmax", "argmin", "xor_sum")
SCAN_KINDS = ("cumsum", "max_scan")


@dataclass
class FuzzConfig:
    """What the generator may produce. Shrinking makes programs shorter and simpler, never
    larger than these bounds."""
    warp_size: int = 32
    num_warps: tuple = (4, 1, 2, 8)
    max_numel: int = 1024
    max_rank: int = 3
    max_ops: int = 8
    max_inputs: int = 3
    dtypes: tuple = ALL_DTYPES
    # int1 arithmetic (+ - * // % << >> abs neg on bools compute in int32, as Python's bool)
    int1_arithmetic: bool = True
    loops: bool = True
    branches: bool = True
    math: bool = True
    max_trip: int = 3
    # values one thread may hold for one tile (None: any). Compile time grows with it far
    # faster than linearly (perf/bench_compile_fuzz.py): CI bounds it, the benchmark does not
    max_values_per_thread: int | None = None
    # gl.dot_fma on 2-D tiles (off by default: enabling an op changes which program a seed gives)
    dot_fma: bool = False
    # gl.split / gl.join (off by default for the same reason)
    split_join: bool = False
    # tiles through shared memory: a random shared layout, views (slices, permutes, stacked
    # slots, a view picked by a run-time branch), a load in a random layout (fuzz/smem.py;
    # off by default for the same reason). ``shared_weight``: how many op kinds' worth of
    # draws it gets when on
    shared: bool = False
    shared_weight: int = 3
    # with ``shared``: slices starting anywhere (inside a swizzle or padding period), longer view
    # chains, and padded views picked by a branch at different such starts (fuzz/smem.py; off
    # by default for the same reason)
    unaligned_views: bool = False
    # with ``unaligned_views``: views of slots of stacked buffers made in each arm of a branch
    # (and picked by a loop's body) at different stacked and in-period starts, then sliced,
    # permuted or indexed after the join (fuzz/smem_stacked.py; off by default for the same reason)
    stacked_views: bool = False
    # atomic read-modify-writes of a tile into a global buffer that starts with random contents,
    # through layouts holding elements more than once, at addresses that may repeat
    # (fuzz/atomics.py; off by default for the same reason)
    atomics: bool = False
    atomics_weight: int = 3


@dataclass
class Node:
    name: str
    op: str
    args: tuple = ()
    attrs: dict = field(default_factory=dict)
    dtype: str = "float32"
    shape: tuple = ()
    layout: object = None   # a gl layout, None for scalars

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def uses(self) -> tuple:
        """The names of the nodes this one reads: its args, and those its loop or branch steps
        name (``(fn, "node", name)`` in attrs, outside ``args``: a walk of the graph by args
        alone misses them)."""
        steps = self.attrs["steps"] if self.op == "loop" else \
            (self.attrs["then"], self.attrs["other"]) if self.op == "branch" else ()
        return tuple(self.args) + tuple(s[2] for s in steps if s and s[1] == "node")


@dataclass
class Program:
    nodes: list
    outputs: list            # names of nodes stored, in order
    num_warps: int
    warp_size: int
    n_valid: int = 0         # run-time bound of masked loads and stores
    n_iter: int = 0          # run-time trip count of gl.range loops
    flag: int = 0            # run-time condition of gl.if_ branches
    seed: int = 0            # input data

    def node(self, name: str) -> Node:
        return self._by_name()[name]

    def _by_name(self) -> dict:
        return {n.name: n for n in self.nodes}

    @property
    def inputs(self) -> list:
        return [n for n in self.nodes if n.op == "load"]


# ------------------------------------------------------------------------------- choices
class Chooser:
    """Every random choice of the generator; the first option of each is the simplest."""

    def __init__(self, draw_int):
        self._int = draw_int

    @classmethod
    def from_seed(cls, seed: int) -> "Chooser":
        rng = random.Random(seed)
        return cls(rng.randint)

    @classmethod
    def from_hypothesis(cls, draw) -> "Chooser":
        from hypothesis import strategies as st
        return cls(lambda lo, hi: draw(st.integers(lo, hi)))

    def int(self, lo: int, hi: int) -> int:
        return self._int(lo, hi) if hi > lo else lo

    def choice(self, seq):
        seq = list(seq)
        return seq[self.int(0, len(seq) - 1)]

    def chance(self, percent: int) -> bool:
        """True with about ``percent`` % probability; shrinks to False."""
        return self.int(0, 99) >= 100 - percent


# ------------------------------------------------------------------------------- layouts
def _log2(x: int) -> int:
    return x.bit_length() - 1


def _split(ch: Chooser, total_bits: int, rank: int) -> list:
    parts = [0] * rank
    for _ in range(total_bits):
        parts[ch.int(0, rank - 1)] += 1
    return parts


def blocked_layout(ch: Chooser, shape, num_warps: int, warp: int) -> BlockedLayout:
    rank = len(shape)
    order = list(range(rank))[::-1]
    if ch.chance(40):
        order = [order[i] for i in _permutation(ch, rank)]
    spt = [1 << ch.int(0, min(2, _log2(s))) for s in shape]
    tpw = [1 << b for b in _split(ch, _log2(warp), rank)]
    wpc = [1 << b for b in _split(ch, _log2(num_warps), rank)]
    return BlockedLayout(spt, tpw, wpc, order)


def _permutation(ch: Chooser, n: int) -> list:
    items, out = list(range(n)), []
    while items:
        out.append(items.pop(ch.int(0, len(items) - 1)))
    return out


def linear_layout(ch: Chooser, shape, num_warps: int, warp: int) -> DistributedLinearLayout:
    """Random invertible bases over GF(2): unit vectors in a random order, some mixed by
    XOR (swizzled, non-single-bit bases), and zero (broadcast) lane/warp bases where there are
    more threads than elements or by choice."""
    bits = [(d, k) for d in range(len(shape)) for k in range(_log2(shape[d]))]
    n = len(bits)
    vecs = [1 << i for i in _permutation(ch, n)]
    for _ in range(ch.int(0, 3) if n > 1 else 0):  # XOR one basis into another: stays invertible
        i, j = ch.int(0, n - 1), ch.int(0, n - 1)
        if i != j:
            vecs[i] ^= vecs[j]
    lane_bits, warp_bits = _log2(warp), _log2(num_warps)
    lanes, warps = [], []
    for want, out in ((lane_bits, lanes), (warp_bits, warps)):
        for _ in range(want):
            if vecs and not ch.chance(15):
                out.append(vecs.pop(ch.int(0, len(vecs) - 1)))
            else:
                out.append(0)
    regs = vecs
    regs, lanes, warps = ([bit_coord(bits, len(shape), v) for v in vs] for vs in (regs, lanes, warps))
    return DistributedLinearLayout(regs, lanes, warps, [], shape=list(shape))


def bit_coord(bits, rank: int, v: int) -> list:
    """The coordinate (of ``rank`` dims) of vector ``v`` over ``bits``: (dim, bit) per vector bit."""
    c = [0] * rank
    for i, (d, k) in enumerate(bits):
        if v >> i & 1:
            c[d] |= 1 << k
    return c


def random_layout(ch: Chooser, shape, num_warps: int, warp: int):
    """A blocked, slice or linear layout valid for ``shape``."""
    kind = ch.int(0, 2)
    if kind == 2 and len(shape) < 3:
        dim = ch.int(0, len(shape))
        parent_shape = list(shape[:dim]) + [1 << ch.int(0, 2)] + list(shape[dim:])
        maker = linear_layout if ch.chance(50) else blocked_layout
        return SliceLayout(dim, maker(ch, parent_shape, num_warps, warp))
    if kind == 1:
        return linear_layout(ch, shape, num_warps, warp)
    return blocked_layout(ch, shape, num_warps, warp)


# ------------------------------------------------------------------------------- generator
class _Builder:
    def __init__(self, ch: Chooser, cfg: FuzzConfig, num_warps: int):
        self.ch, self.cfg, self.num_warps = ch, cfg, num_warps
        self.nodes: list[Node] = []
        self.used: set = set()

    def add(self, op, args, dtype, shape, layout, **attrs) -> Node:
        n = Node(f"v{len(self.nodes)}", op, tuple(a.name for a in args), attrs, dtype, tuple(shape),
                 layout if shape else None)
        self.used.update(n.args)
        self.nodes.append(n)
        return n

    def layout(self, shape):
        limit, best = self.cfg.max_values_per_thread, None
        for _ in range(4):
            lay = random_layout(self.ch, shape, self.num_warps, self.cfg.warp_size)
            if limit is None:
                return lay
            n = 1 << len(lay.to_linear(tuple(shape)).reg_bases)
            if n <= limit:
                return lay
            if best is None or n < best[0]:
                best = (n, lay)
        return best[1]

    def shape(self):
        rank = self.ch.int(1, self.cfg.max_rank)
        budget = _log2(self.cfg.max_numel)
        sides = []
        for _ in range(rank):
            b = self.ch.int(0, min(budget, 6))
            budget -= b
            sides.append(1 << b)
        return tuple(sides)

    def dtype(self):
        return self.ch.choice(self.cfg.dtypes)

    def load(self, shape=None, dtype=None, layout=None) -> Node:
        shape = shape if shape is not None else self.shape()
        layout = layout if layout is not None else self.layout(shape)
        dtype = dtype or self.dtype()
        masked = self.ch.chance(30)
        other = _literal(self.ch, dtype) if masked and self.ch.chance(50) else None
        idx = len([n for n in self.nodes if n.op == "load"])
        return self.add("load", (), dtype, shape, layout, input=idx, masked=masked, other=other)

    def pick(self, pred=lambda n: True) -> Node | None:
        """An earlier node, preferring recent ones (so programs chain); never an atomics buffer
        (it is memory, not a value)."""
        cands = [n for n in self.nodes if n.op != "atomic_buf" and pred(n)][::-1]
        if not cands:
            return None
        return cands[min(self.ch.int(0, 3), len(cands) - 1)] if not self.ch.chance(25) else \
            self.ch.choice(cands)

    def same_tile(self, a: Node, dtype_ok=lambda d: True) -> Node:
        """A node shaped like ``a`` and in its layout (converted, or loaded fresh)."""
        b = self.pick(lambda n: n.shape == a.shape and n is not a and dtype_ok(n.dtype))
        if b is None or self.ch.chance(20):
            dtypes = [d for d in self.cfg.dtypes if dtype_ok(d)] or [a.dtype]
            b = self.load(a.shape, self.ch.choice(dtypes), a.layout if self.ch.chance(60) else None)
        return self.convert(b, a.layout)

    def convert(self, a: Node, layout) -> Node:
        if a.layout == layout or not a.shape:
            return a
        return self.add("convert", (a,), a.dtype, a.shape, layout)


def _literal(ch: Chooser, dtype: str):
    t = dt.BY_NAME[dtype]
    if t.is_bool:
        return ch.choice([True, False])
    if t.is_floating:
        return ch.choice([0.5, -2.0, 3.0, 0.0, -0.25, 1e3])
    lo, hi = (0, 2 ** t.bits - 1) if t.kind == "uint" else (-2 ** (t.bits - 1), 2 ** (t.bits - 1) - 1)
    return ch.choice([v for v in (1, -1, 3, 7, 0, -100, 100, lo, hi) if lo <= v <= hi])


def generate(ch: Chooser, cfg: FuzzConfig | None = None) -> Program:
    """One random program; ``ch`` makes every choice."""
    from .ops import OPS
    cfg = cfg or FuzzConfig()
    num_warps = ch.choice(cfg.num_warps)
    b = _Builder(ch, cfg, num_warps)
    for _ in range(ch.int(1, cfg.max_inputs)):
        b.load()
    for _ in range(ch.int(1, cfg.max_ops)):
        kinds = [k for k, (enabled, _) in OPS.items() if enabled(cfg)]
        if cfg.shared:
            kinds += ["shared"] * (cfg.shared_weight - 1)
        if cfg.atomics:
            kinds += ["atomics"] * (cfg.atomics_weight - 1)
        OPS[ch.choice(kinds)][1](b)
    outputs = [n.name for n in b.nodes if n.name not in b.used or (n.op != "load" and ch.chance(30))]
    # an atomics buffer is always checked: its final contents are the atomics' effect
    outputs += [n.name for n in b.nodes if n.op == "atomic_buf" and n.name not in outputs]
    return Program(b.nodes, outputs, num_warps, cfg.warp_size,
                   n_valid=ch.int(0, 1024), n_iter=ch.int(0, cfg.max_trip), flag=ch.int(0, 1),
                   seed=ch.int(0, 2 ** 31 - 1))


# ------------------------------------------------------------------------------- saving
def program_to_dict(prog: Program) -> dict:
    """Plain data (layouts as their source text), for reproducer files."""
    from .render import layout_source
    nodes = [{"name": n.name, "op": n.op, "args": list(n.args), "attrs": n.attrs, "dtype": n.dtype,
              "shape": list(n.shape), "layout": layout_source(n.layout, {}) if n.layout is not None else None}
             for n in prog.nodes]
    return {"nodes": nodes, "outputs": prog.outputs, "num_warps": prog.num_warps,
            "warp_size": prog.warp_size, "n_valid": prog.n_valid, "n_iter": prog.n_iter,
            "flag": prog.flag, "seed": prog.seed}


def program_from_dict(d: dict) -> Program:
    from .. import language as gl
    nodes = [Node(n["name"], n["op"], tuple(n["args"]), dict(n["attrs"]), n["dtype"], tuple(n["shape"]),
                  eval(n["layout"], {"gl": gl}) if n["layout"] else None)  # noqa: S307 - our own text
             for n in d["nodes"]]
    return Program(nodes, list(d["outputs"]), d["num_warps"], d["warp_size"], d["n_valid"],
                   d["n_iter"], d["flag"], d["seed"])

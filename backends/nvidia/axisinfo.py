"""What the emitter may assume about integer and pointer values: Triton's AxisInfo, small.

For each value and each dimension ``d`` of its tile (scalars have one pseudo-dim):

- ``contig[d]``: the value grows by exactly 1 (one element, for pointers) along ``d`` in
  runs of this length that start at coordinates that are multiples of it;
- ``const[d]``: it is constant along ``d`` in aligned runs of this length;
- ``div[d]``: a power of two dividing the value at the start of every run (every element
  where contig is 1); bytes for pointers.

Facts come from arguments (``divisibility=16``), constants, ``arange``, ``splat`` and
``broadcast`` and flow through add/sub/mul/ptr_add/comparisons; ``hint`` ops
(gl.multiple_of, gl.max_contiguous) add to them. Loop-carried values are solved to a
fixed point. The load/store rules read them to pick 128-bit accesses.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from gluon_trace.ir import Block, Graph, MemDescType, Value

from .ptx import pow2_div

HUGE = 1 << 30


@dataclass(frozen=True)
class AI:
    contig: tuple
    const: tuple
    div: tuple

    @property
    def rank(self):
        return len(self.contig)

    def div_all(self) -> int:
        """A power of two dividing every element."""
        if any(c > 1 for c in self.contig):
            return 1
        return min(self.div)


def unknown(rank: int) -> AI:
    r = max(rank, 1)
    return AI((1,) * r, (1,) * r, (1,) * r)


def scalar(div: int) -> AI:
    return AI((1,), (1,), (min(div, HUGE),))


def meet(a: AI, b: AI) -> AI:
    return AI(tuple(map(gcd, a.contig, b.contig)), tuple(map(gcd, a.const, b.const)),
              tuple(map(gcd, a.div, b.div)))


def _rank(v: Value) -> int:
    return max(len(v.type.shape), 1)


def _elementwise_default(op, infos, rank):
    """Runs of equal values the result keeps from its operands of its own shape. A shared-memory
    operand says nothing of the values loaded through it (its info is its stored tile's, in
    another shape and order: a random program loading a reshaped buffer crashed _cmp here)."""
    infos = [i for i, v in zip(infos, op.operands) if i.rank == rank and not isinstance(v.type, MemDescType)]
    const = [1] * rank
    if infos:
        const = list(infos[0].const)
        for i in infos[1:]:
            const = [gcd(a, b) for a, b in zip(const, i.const)]
    return AI((1,) * rank, tuple(const), (1,) * rank)


def _add(a: AI, b: AI, sub=False) -> AI:
    contig = tuple(max(gcd(ca, kb), 0 if sub else gcd(cb, ka))
                   for ca, cb, ka, kb in zip(a.contig, b.contig, a.const, b.const))
    return AI(contig, tuple(map(gcd, a.const, b.const)), tuple(map(gcd, a.div, b.div)))


def _cmp(a: AI, b: AI) -> AI:
    """A comparison of a contiguous run with a constant changes only at multiples of the
    constant's divisibility (cols < n with n % 16 == 0 is constant in runs of 16)."""
    const = []
    for d in range(a.rank):
        k = gcd(a.const[d], b.const[d])
        k = max(k, gcd(gcd(a.contig[d], a.div[d]), gcd(b.div[d], b.const[d])))
        k = max(k, gcd(gcd(b.contig[d], b.div[d]), gcd(a.div[d], a.const[d])))
        const.append(k)
    return AI((1,) * a.rank, tuple(const), (1,) * a.rank)


class Analysis:
    def __init__(self, graph: Graph):
        self.info: dict[Value, AI] = {}
        for v, attrs in zip(graph.args, graph.arg_attrs):
            t = v.type.dtype
            d = attrs.get("divisibility", 1)
            if t.is_ptr:
                d = max(d, t.element.itemsize)
            self.info[v] = scalar(d)
        self.block(graph.body)

    def get(self, v: Value) -> AI:
        ai = self.info.get(v)
        return ai if ai is not None else unknown(_rank(v))

    def block(self, block: Block) -> list[AI] | None:
        for op in block.ops:
            if op.name == "yield":
                return [self.get(v) for v in op.operands]
            self.op(op)
        return None

    def op(self, op) -> None:
        name = op.name
        ins = [self.get(v) for v in op.operands]
        res = op.results
        if name == "for":
            self._for(op, ins)
            return
        if name == "if":
            outs = [self.block(r) for r in op.regions]
            for i, r in enumerate(res):
                self.info[r] = meet(outs[0][i], outs[1][i])
            return
        if name == "warp_specialize":  # partitions read the kernel's values as they are
            outs = [self.block(r) for r in op.regions]
            for i, r in enumerate(res):
                self.info[r] = outs[0][i]
            return
        if name in ("reduce", "scan"):
            for a in op.regions[0].args:
                self.info[a] = unknown(1)
            self.block(op.regions[0])
            for r in res:
                self.info[r] = unknown(_rank(r))
            return
        if not res:
            return
        if name == "split":  # each half keeps the facts of the leading dimensions
            i = ins[0]
            for r in res:
                self.info[r] = AI(i.contig[:-1], i.const[:-1], i.div[:-1])
            return
        out = res[0]
        rank = _rank(out)
        shape = out.type.shape
        a = op.attrs
        if name == "const":
            t = a["dtype"]
            v = a["value"]
            self.info[out] = scalar(pow2_div(v) if t.is_int and not t.is_bool else 1)
        elif name == "arange":
            n = a["end"] - a["start"]
            self.info[out] = AI((n,), (1,), (pow2_div(a["start"]),))
        elif name == "splat":
            d = ins[0].div[0]
            self.info[out] = AI((1,) * rank, tuple(shape), (d,) * rank)
        elif name == "broadcast":
            src = op.operands[0].type.shape
            i = ins[0]
            self.info[out] = AI(
                tuple(1 if s != n else c for s, n, c in zip(src, shape, i.contig)),
                tuple(n if s != n else k for s, n, k in zip(src, shape, i.const)),
                i.div)
        elif name == "expand_dims":
            ax = a["axis"]
            i = ins[0]
            if not op.operands[0].type.shape:
                i = AI((), (), ())
                da = ins[0].div[0]
            else:
                da = i.div_all()
            self.info[out] = AI(i.contig[:ax] + (1,) + i.contig[ax:], i.const[:ax] + (1,) + i.const[ax:],
                                i.div[:ax] + (da,) + i.div[ax:])
        elif name == "convert_layout":
            self.info[out] = ins[0]
        elif name == "permute":
            i = ins[0]
            dims = a["dims"]
            self.info[out] = AI(tuple(i.contig[d] for d in dims), tuple(i.const[d] for d in dims),
                                tuple(i.div[d] for d in dims))
        elif name == "join":
            self.info[out] = unknown(rank)
        elif name == "reshape":
            self.info[out] = AI((1,) * rank, (1,) * rank, (ins[0].div_all(),) * rank)
        elif name == "hint":
            i = ins[0]
            if a.get("multiple_of") is not None:
                n = pow2_div(a["multiple_of"])
                i = AI(i.contig, i.const, tuple(max(d, n) for d in i.div))
            if a.get("max_contiguous") is not None:
                n = pow2_div(a["max_contiguous"])
                i = AI(i.contig[:-1] + (max(i.contig[-1], n),), i.const, i.div)
            self.info[out] = i
        elif name in ("add", "sub"):
            if out.type.dtype.is_int:
                self.info[out] = _add(ins[0], ins[1], sub=name == "sub")
            else:
                self.info[out] = _elementwise_default(op, ins, rank)
        elif name == "ptr_add":
            p, o = ins
            size = out.type.dtype.element.itemsize
            contig = tuple(max(gcd(cp, ko), gcd(co, kp)) for cp, co, kp, ko in
                           zip(p.contig, o.contig, p.const, o.const))
            div = tuple(gcd(dp, do * size) for dp, do in zip(p.div, o.div))
            self.info[out] = AI(contig, tuple(map(gcd, p.const, o.const)), div)
        elif name == "mul" and out.type.dtype.is_int:
            x, y = ins
            self.info[out] = AI((1,) * rank, tuple(map(gcd, x.const, y.const)),
                                tuple(min(dx * dy, HUGE) for dx, dy in zip(x.div, y.div)))
        elif name in ("lt", "le", "gt", "ge", "eq", "ne"):
            self.info[out] = _cmp(ins[0], ins[1])
        elif name == "cast":
            src, to = op.operands[0].type.dtype, a["dtype"]
            keep = (src.is_int and to.is_int and not to.is_bool and not a.get("bitcast")
                    and to.bits >= src.bits)
            self.info[out] = ins[0] if keep else _elementwise_default(op, ins, rank)
        elif name == "load":
            self.info[out] = AI((1,) * rank, ins[0].const, (1,) * rank)
        elif name in ("program_id", "num_programs", "cluster_cta_id"):
            self.info[out] = scalar(1)
        else:
            self.info[out] = _elementwise_default(op, ins, rank) if ins else unknown(rank)

    def _for(self, op, ins) -> None:
        body = op.regions[0]
        lo, hi, step = ins[:3]
        iv_div = gcd(lo.div[0], step.div[0])
        self.info[body.args[0]] = scalar(iv_div)
        carried = list(ins[3:])
        for _ in range(4):
            for a, c in zip(body.args[1:], carried):
                self.info[a] = c
            ys = self.block(body)
            new = [meet(c, y) for c, y in zip(carried, ys)]
            if new == carried:
                break
            carried = new
        else:
            carried = [unknown(c.rank) for c in carried]
            for a, c in zip(body.args[1:], carried):
                self.info[a] = c
            self.block(body)
        for r, c in zip(op.results, carried):
            self.info[r] = c

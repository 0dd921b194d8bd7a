"""The SSA graph a traced kernel becomes.

A :class:`Graph` is a kernel signature plus one :class:`Block` of :class:`Op`s. Ops
that own control flow (``for``, ``if``, ``reduce``, ``scan``) hold nested blocks
whose last op is a ``yield``. Every value has a :class:`Type`: a dtype, a shape
(``()`` for scalars) and, for tiles, the distributed layout that places it on
threads. Every op keeps the user's source location.
"""
from __future__ import annotations

import hashlib
import html
import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator

from . import dtypes as dt
from .errors import SourceLoc


@dataclass(frozen=True)
class Type:
    dtype: dt.dtype
    shape: tuple[int, ...] = ()
    layout: Any = None  # a DistributedLayout for tiles, None for scalars

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def with_dtype(self, dtype: dt.dtype) -> "Type":
        return Type(dtype, self.shape, self.layout)

    def __str__(self) -> str:
        return type_str(self, {})


@dataclass(frozen=True)
class _DescType(Type):
    """A descriptor of memory (not a register tile): never a scalar, sized in bytes."""

    @property
    def is_scalar(self) -> bool:
        return False

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.bits // 8


@dataclass(frozen=True)
class MemDescType(_DescType):
    """A shared-memory descriptor: a view (``shape``, ``layout``) into an allocation of
    ``alloc_shape``. Views (index/slice/permute/reshape) are pure; loads, stores, async copies
    and MMA reads through it are effects, ordered as traced."""

    alloc_shape: tuple[int, ...] = ()
    mutable: bool = True


class BlockType:
    """The block (box) one TMA copy moves: ``shape``, ``element_ty``, ``nbytes``, as Gluon's
    ``desc.block_type``. Equal when shape and element type are, so kernels can
    ``gl.static_assert(a_desc.block_type == b_desc.block_type)``."""

    __slots__ = ("shape", "element_ty", "nbytes")

    def __init__(self, shape, element_ty):
        self.shape = [int(s) for s in shape]
        self.element_ty = element_ty
        n = 1
        for s in self.shape:
            n *= s
        self.nbytes = n * element_ty.bits // 8

    def __eq__(self, other):
        return isinstance(other, BlockType) and self.shape == other.shape and self.element_ty == other.element_ty

    def __hash__(self):
        return hash((tuple(self.shape), self.element_ty))

    def __repr__(self):
        return f"block_type({self.shape}, {self.element_ty})"


@dataclass(frozen=True)
class TensorDescType(_DescType):
    """A TMA tensor descriptor argument: ``shape`` is the block (box) shape, ``layout`` the
    NVMMA shared layout of the block, ``rank`` the global tensor's rank."""

    rank: int = 2

    @property
    def block_type(self) -> BlockType:  # Gluon's desc.type.block_type
        return BlockType(self.shape, self.dtype)


def is_memory(t: Type) -> bool:
    """Descriptors (shared memory, TMA) as opposed to register tiles and scalars."""
    return isinstance(t, _DescType)


def type_str(t: Type, layout_names: dict) -> str:
    if isinstance(t, (MemDescType, TensorDescType)):
        lay = (layout_names.get(t.layout) if layout_names else None) or repr(t.layout)
        dims = "x".join(map(str, t.shape))
        if isinstance(t, TensorDescType):
            return f"!tensordesc<{dims}x{t.dtype}, {lay}, rank={t.rank}>"
        alloc = "" if t.alloc_shape == t.shape else f", alloc={'x'.join(map(str, t.alloc_shape))}"
        return f"!smem<{dims}x{t.dtype}, {lay}{alloc}{'' if t.mutable else ', const'}>"
    if t.is_scalar:
        return str(t.dtype)
    lay = layout_names.get(t.layout) if layout_names else None
    lay = lay or repr(t.layout)
    return f"tensor<{'x'.join(map(str, t.shape))}x{t.dtype}, {lay}>"


_ids = itertools.count()


class Value:
    """An SSA value: the result of an op, or an argument of a block."""

    __slots__ = ("type", "owner", "block", "name", "id")

    def __init__(self, type: Type, owner: "Op | None", block: "Block | None", name: str = ""):
        self.type = type
        self.owner = owner  # defining op; None for block arguments
        self.block = block  # the block this value is visible in
        self.name = name
        self.id = next(_ids)

    @property
    def loc(self) -> SourceLoc | None:
        return self.owner.loc if self.owner is not None else None

    def __repr__(self) -> str:
        return f"Value(#{self.id}: {self.type})"


class Op:
    __slots__ = ("name", "operands", "attrs", "results", "regions", "loc")

    def __init__(self, name: str, operands: list[Value], attrs: dict, loc: SourceLoc | None):
        self.name = name
        self.operands = list(operands)
        self.attrs = dict(attrs)
        self.results: list[Value] = []
        self.regions: list[Block] = []
        self.loc = loc

    @property
    def result(self) -> Value:
        (r,) = self.results
        return r

    def __repr__(self) -> str:
        return f"Op({self.name}, {len(self.operands)} operands, at {self.loc})"


class Block:
    __slots__ = ("args", "ops", "parent")

    def __init__(self, parent: "Block | None" = None):
        self.args: list[Value] = []
        self.ops: list[Op] = []
        self.parent = parent

    def add_arg(self, type: Type, name: str = "") -> Value:
        v = Value(type, None, self, name)
        self.args.append(v)
        return v

    def walk(self) -> Iterator[Op]:
        """Every op in this block and its nested blocks, in program order."""
        for op in self.ops:
            yield op
            for region in op.regions:
                yield from region.walk()

    def replace_uses(self, mapping: dict[Value, Value]) -> None:
        if not mapping:
            return
        for op in self.walk():
            op.operands = [mapping.get(v, v) for v in op.operands]

    def yielded(self, i: int) -> "Value | None":
        """The i-th value this region yields to its loop or branch (None: it yields none)."""
        y = self.ops[-1] if self.ops else None
        return y.operands[i] if y is not None and y.name == "yield" and i < len(y.operands) else None

    def is_within(self, other: "Block") -> bool:
        b: Block | None = self
        while b is not None:
            if b is other:
                return True
            b = b.parent
        return False


@dataclass
class Graph:
    """A traced kernel: the unit every backend compiles."""

    name: str
    args: list[Value]
    arg_names: list[str]
    arg_attrs: list[dict]
    body: Block
    num_warps: int
    threads_per_warp: int
    target: str
    constexprs: dict = field(default_factory=dict)
    _text: str | None = None
    # CTAs per cluster (along the grid's x): they run together, may multicast TMA loads into
    # each other's shared memory and arrive on each other's mbarriers
    num_ctas: int = 1
    # Triton's ``maxnreg`` launch option: a cap on registers per thread (NVIDIA's .maxnreg; in a
    # warp-specialized kernel, the starting budget the partitions' setmaxnreg share); None: none
    maxnreg: int | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = print_graph(self)
        return self._text

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:32]

    def __str__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        from .display import ir_html
        return ir_html(self)

    def layouts(self) -> list:
        seen: dict = {}
        for v in self.args:
            if v.type.layout is not None:
                seen.setdefault(v.type.layout, None)
        for op in self.body.walk():
            for r in itertools.chain(op.results, *(b.args for b in op.regions)):
                if r.type.layout is not None:
                    seen.setdefault(r.type.layout, None)
            for key in ("layout",):
                if op.attrs.get(key) is not None:
                    seen.setdefault(op.attrs[key], None)
        return list(seen)


def _fmt_attr(v) -> str:
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, dt.dtype):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt_attr(x) for x in v) + "]"
    return str(v)


class _Printer:
    def __init__(self, g: Graph, with_locs: bool):
        self.g = g
        self.names: dict[Value, str] = {}
        self.count = 0
        self.layout_names = {lay: f"#L{i}" for i, lay in enumerate(g.layouts())}
        self.with_locs = with_locs
        self.lines: list[str] = []
        self.files: dict[str, str] = {}

    def name(self, v: Value) -> str:
        if v not in self.names:
            self.names[v] = f"%{self.count}"
            self.count += 1
        return self.names[v]

    def ty(self, t: Type) -> str:
        return type_str(t, self.layout_names)

    def loc(self, loc: SourceLoc | None) -> str:
        if not self.with_locs or loc is None:
            return ""
        import os
        return f"  # {os.path.basename(loc.file)}:{loc.line}"

    def block(self, b: Block, indent: int) -> None:
        pad = "  " * indent
        for op in b.ops:
            res = ", ".join(self.name(r) for r in op.results)
            lhs = f"{res} = " if res else ""
            ops = ", ".join(self.name(v) for v in op.operands)
            attrs = {k: v for k, v in op.attrs.items() if k != "layout" or v is not None}
            if "layout" in attrs:
                attrs["layout"] = self.layout_names.get(attrs["layout"], repr(attrs["layout"]))
            attr_s = (" {" + ", ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(attrs.items())) + "}"
                      if attrs else "")
            tys = ", ".join(self.ty(r.type) for r in op.results)
            tys = f" : {tys}" if tys else ""
            head = f"{pad}{lhs}{op.name}{' ' + ops if ops else ''}{attr_s}{tys}"
            if op.regions:
                self.lines.append(head + " {" + self.loc(op.loc))
                for i, region in enumerate(op.regions):
                    if i:
                        self.lines.append(f"{pad}}} {{")
                    if region.args:
                        args = ", ".join(f"{self.name(a)}: {self.ty(a.type)}" for a in region.args)
                        self.lines.append(f"{pad}  ^({args}):")
                    self.block(region, indent + 1)
                self.lines.append(f"{pad}}}")
            else:
                self.lines.append(head + self.loc(op.loc))

    def run(self) -> str:
        g = self.g
        for lay, n in self.layout_names.items():
            self.lines.append(f"{n} = {lay!r}")
        args = []
        for v, n, a in zip(g.args, g.arg_names, g.arg_attrs):
            self.names[v] = f"%{n}"
            extra = (" {" + ", ".join(f"{k}={a[k]}" for k in sorted(a)) + "}") if a else ""
            args.append(f"%{n}: {self.ty(v.type)}{extra}")
        const = ""
        if g.constexprs:
            const = " constexprs={" + ", ".join(f"{k}={v!r}" for k, v in sorted(g.constexprs.items())) + "}"
        self.lines.append(f"kernel @{g.name}({', '.join(args)}) num_warps={g.num_warps} "
                          f"threads_per_warp={g.threads_per_warp}"
                          f"{f' num_ctas={g.num_ctas}' if g.num_ctas != 1 else ''}"
                          f"{f' maxnreg={g.maxnreg}' if g.maxnreg else ''} target={g.target}{const} {{")
        self.block(g.body, 1)
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"


def print_graph(g: Graph, with_locs: bool = True) -> str:
    return _Printer(g, with_locs).run()


def escape(s: str) -> str:
    return html.escape(s)

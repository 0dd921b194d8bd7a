"""Shared-memory offsets from live ranges: one analysis for every backend.

Each ``smem_alloc`` lives from its op to the last use of it or of any view made from it; a
use inside a loop that the allocation is outside of keeps it alive to the loop's end, and a
use inside a ``warp_specialize`` keeps it alive over the whole op (partitions run at the
same time). A backend's own scratch (reductions, layout conversions) is passed in as
``scratch(op) -> bytes`` and lives for that op only. Buffers whose live ranges overlap get
disjoint offsets (first fit, largest first, as Triton's allocator does); the total is
checked against the target's shared-memory limit, and a kernel over it is an error listing
every buffer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import CompileError
from .ir import Graph, MemDescType, Op

# bytes of shared memory one CTA may use (opt-in maximum), per target
LIMITS = {"sm_80": 166912, "sm_86": 101376, "sm_87": 166912, "sm_89": 101376, "sm_90": 232448,
          "sm_90a": 232448, "gfx90a": 65536, "gfx942": 65536, "gfx1100": 65536,
          "interpreter": 232448}

_VIEWS = {"smem_index", "smem_slice", "smem_permute", "smem_reshape", "smem_reinterpret"}


@dataclass
class Buffer:
    name: str
    size: int
    align: int
    start: int
    end: int
    op: Op | None
    offset: int = -1

    def describe(self) -> str:
        where = f" (line {self.op.loc.line})" if self.op is not None and self.op.loc else ""
        return f"{self.name}{where}: {self.size} bytes"


@dataclass
class Plan:
    buffers: list[Buffer] = field(default_factory=list)
    offsets: dict = field(default_factory=dict)   # smem_alloc / scratch op -> byte offset
    total: int = 0

    def describe(self) -> str:
        rows = [f"  {b.describe()} at offset {b.offset}, live over ops {b.start}..{b.end}"
                for b in sorted(self.buffers, key=lambda b: b.offset)]
        return f"shared memory: {self.total} bytes\n" + "\n".join(rows)


def _align(t: MemDescType) -> int:
    lay = t.layout
    if type(lay).__name__ == "NVMMASharedLayout":
        return max(128, 8 * getattr(lay, "swizzle_byte_width", 0))  # the swizzle's repeat
    return 16


def _size(t: MemDescType) -> int:
    from .ops_memory import layout_rank
    r = layout_rank(t.layout)
    lead, inner = t.shape[:len(t.shape) - r], t.shape[len(t.shape) - r:]
    n = 1
    for s in lead:
        n *= s
    return max(n * int(t.layout.alloc_elements(inner, t.dtype.bits)) * t.dtype.bits // 8, 8)


def plan(graph: Graph, scratch=None, target: str | None = None, limit: int | None = None) -> Plan:
    pos: dict[Op, tuple[int, int]] = {}
    counter = [0]
    # the outermost loop / warp_specialize enclosing each op, to stretch live ranges
    enclosing: dict[Op, list[Op]] = {}

    def walk(block, stack):
        for op in block.ops:
            start = counter[0]
            counter[0] += 1
            enclosing[op] = stack
            inner = stack + [op] if op.name in ("for", "warp_specialize") else stack
            for r in op.regions:
                walk(r, inner)
            pos[op] = (start, counter[0])
    walk(graph.body, [])

    root: dict = {}     # value -> the smem_alloc op it is a view of
    uses: dict[Op, list[Op]] = {}
    for op in graph.body.walk():
        if op.name == "smem_alloc":
            root[op.result] = op
            uses[op] = []
            continue
        for v in op.operands:
            a = root.get(v)
            if a is not None:
                uses[a].append(op)
        if op.name in _VIEWS and op.operands[0] in root:
            root[op.result] = root[op.operands[0]]
        for r in op.regions:  # carried descriptors: a loop's block args alias its inits
            if op.name == "for":
                for arg, init in zip(r.args[1:], op.operands[3:]):
                    if init in root:
                        root[arg] = root[init]
        if op.name in ("for", "if"):
            inits = op.operands[3:] if op.name == "for" else []
            for res, init in zip(op.results, inits):
                if init in root:
                    root[res] = root[init]

    p = Plan()
    for a, us in uses.items():
        start, end = pos[a][0], pos[a][0] + 1
        for u in us:
            e = pos[u][1]
            for outer in enclosing[u]:
                if outer not in enclosing[a] and outer is not a:
                    e = max(e, pos[outer][1])
                    break
            end = max(end, e)
        t = a.result.type
        p.buffers.append(Buffer(f"{list(t.shape)} x {t.dtype} buffer", _size(t), _align(t), start, end, a))
    if scratch is not None:
        for op in graph.body.walk():
            n = scratch(op)
            if n:
                s = pos[op][0]
                p.buffers.append(Buffer(f"{op.name} scratch", int(n), 16, s, s + 1, op))
    _assign(p)
    limit = limit if limit is not None else LIMITS.get(target or graph.target)
    if limit is not None and p.total > limit:
        biggest = max(p.buffers, key=lambda b: b.size)
        raise CompileError(
            f"the kernel needs {p.total} bytes of shared memory; {target or graph.target} has {limit} "
            "per block. Buffers live at the same time:\n" +
            "\n".join("  " + b.describe() for b in sorted(p.buffers, key=lambda b: -b.size)),
            biggest.op.loc if biggest.op is not None else None,
            notes=("use fewer pipeline stages, smaller tiles, or reuse a buffer with .reinterpret",))
    return p


def _assign(p: Plan) -> None:
    placed: list[Buffer] = []
    for b in sorted(p.buffers, key=lambda b: (-b.size, b.start)):
        off = 0
        for other in sorted((o for o in placed if o.start < b.end and b.start < o.end),
                            key=lambda o: o.offset):
            if off + b.size <= other.offset:
                break
            off = max(off, other.offset + other.size)
            off = -(-off // b.align) * b.align
        b.offset = -(-off // b.align) * b.align
        placed.append(b)
        if b.op is not None:
            p.offsets[b.op] = b.offset
    p.total = max((b.offset + b.size for b in p.buffers), default=0)

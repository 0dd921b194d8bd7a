"""Recording ops into a graph while a kernel function runs.

One :class:`Builder` is active per thread while a kernel is traced. It keeps the
stack of blocks being filled (the kernel body, then loop and branch bodies), checks
each op with its rule from the op table, and refuses a value used outside the block
that defined it (a value that escaped a loop or branch without being carried).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager

from . import ops as op_table
from .errors import SourceLoc, TraceError, user_location
from .ir import Block, Graph, Op, TensorDescType, Type, Value, is_memory

_state = threading.local()


def current() -> "Builder":
    b = getattr(_state, "builder", None)
    if b is None:
        raise TraceError("gl.* functions can only be called while a kernel is traced "
                         "(inside a @gt.jit function run through kernel[grid](...) or kernel.trace(...))",
                         user_location())
    return b


def active() -> "Builder | None":
    return getattr(_state, "builder", None)


class Builder:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.blocks: list[Block] = [graph.body]
        # which op opened each nested block, to name it when a value escapes
        self.block_owner: dict[int, tuple[str, SourceLoc | None]] = {}
        self.last_branch = None  # the gl.if_ a gl.else_ may extend
        # warps of the partition being traced (gl.warp_specialize workers have their own)
        self.warps: list[int] = [graph.num_warps]
        self.partition: list[int] = [0]  # 0: the default partition; k: worker k

    @property
    def block(self) -> Block:
        return self.blocks[-1]

    @property
    def num_warps(self) -> int:
        return self.warps[-1]

    @property
    def threads_per_warp(self) -> int:
        return self.graph.threads_per_warp

    def ctx(self, loc, opname="") -> op_table.Ctx:
        return op_table.Ctx(self.warps[-1], self.graph.threads_per_warp, loc, opname, self.graph.target)

    def check_visible(self, v: Value, loc) -> None:
        if v.block is None or self.block.is_within(v.block):
            return
        # v was defined in a block we are no longer inside: a loop/branch body
        inner = v.block
        while inner.parent is not None and not self.block.is_within(inner.parent):
            inner = inner.parent
        kind, where = self.block_owner.get(id(inner), ("a loop or branch", None))
        defined = f" (defined at line {v.loc.line})" if v.loc else ""
        raise TraceError(
            f"a value defined inside {kind}{f' at line {where.line}' if where else ''}{defined} "
            "is used outside it without being carried",
            loc, notes=("assign it to a variable before the loop or branch (e.g. x = gl.zeros(...)), "
                        "then rebind that variable inside; rebound variables are carried",))

    def create(self, name: str, operands: list[Value], attrs: dict | None = None,
               regions: list[Block] = (), loc: SourceLoc | None = None,
               results: list[Type] | None = None) -> Op:
        attrs = attrs or {}
        if loc is None:
            loc = user_location()
        for v in operands:
            self.check_visible(v, loc)
        opdef = op_table.OPS[name]
        if not opdef.memory_operands:
            for v in operands:
                if is_memory(v.type):
                    what = "a TMA tensor descriptor" if isinstance(v.type, TensorDescType) else \
                        "a shared-memory descriptor"
                    raise TraceError(f"{name}: an operand is {what} ({v.type}), not a register tile",
                                     loc, notes=("read a shared buffer into registers with "
                                                 "smem.load(layout) first",))
        types = opdef.infer(self.ctx(loc, name), [v.type for v in operands], attrs, list(regions))
        if results is not None:
            types = results
        op = Op(name, operands, attrs, loc)
        op.regions = list(regions)
        op.results = [Value(t, op, self.block) for t in types]
        self.block.ops.append(op)
        for r in op.regions:
            r.parent = self.block
        return op

    def value(self, name, operands, attrs=None, loc=None) -> Value:
        return self.create(name, operands, attrs, loc=loc).result

    @contextmanager
    def region(self, block: Block, kind: str, loc: SourceLoc | None):
        block.parent = self.block
        self.block_owner[id(block)] = (kind, loc)
        self.blocks.append(block)
        try:
            yield block
        finally:
            self.blocks.pop()


@contextmanager
def tracing(graph: Graph):
    prev = getattr(_state, "builder", None)
    b = Builder(graph)
    _state.builder = b
    try:
        yield b
    finally:
        _state.builder = prev

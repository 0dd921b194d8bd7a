"""Checks a finished graph: every op passes its type rule again, every operand is visible
where it is used, every region ends in ``yield``. A failure here is a library bug or a
hand-built graph, so the error names the op and the user line it came from."""
from __future__ import annotations

from . import ops as op_table
from .errors import GluonTraceError, VerifyError
from .ir import Block, Graph


def verify(graph: Graph) -> None:
    _block(graph, graph.body, set(graph.args), graph.num_warps)


def _block(graph: Graph, block: Block, visible: set, num_warps: int) -> None:
    visible = visible | set(block.args)
    for op in block.ops:
        if op.name not in op_table.OPS:
            raise VerifyError(f"unknown op {op.name!r}", op.loc)
        for v in op.operands:
            if v not in visible:
                raise VerifyError(f"{op.name} uses a value that is not visible here", op.loc)
        for region in op.regions:
            if not region.ops or region.ops[-1].name != "yield":
                raise VerifyError(f"a region of {op.name} does not end in yield", op.loc)
        for i, region in enumerate(op.regions):
            warps = num_warps
            if op.name == "warp_specialize" and i > 0:
                warps = op.attrs["worker_num_warps"][i - 1]
            _block(graph, region, visible, warps)
        ctx = op_table.Ctx(num_warps, graph.threads_per_warp, op.loc, op.name, graph.target)
        try:
            types = op_table.OPS[op.name].infer(ctx, [v.type for v in op.operands], op.attrs,
                                                op.regions)
        except GluonTraceError as e:
            raise VerifyError(f"{op.name}: {e.message}", op.loc) from None
        if [r.type for r in op.results] != list(types):
            raise VerifyError(f"{op.name} result types {[str(r.type) for r in op.results]} differ "
                              f"from its rule's {[str(t) for t in types]}", op.loc)
        visible.update(op.results)

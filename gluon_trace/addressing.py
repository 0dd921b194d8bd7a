"""Which pointer arguments a kernel addresses as contiguous tensors.

A kernel that indexes ``x_ptr + offs`` with offsets built only from constants, aranges and
program ids reads element i of a flat, dense array: handed a non-contiguous view (a
transpose, a slice with a step), it silently reads the wrong elements. A kernel that mixes
a run-time integer into the offsets (``row * stride``, ``n - 1 - i``) is taking the
layout from its caller, as Triton kernels do with ``x.stride(0)``. The launchers refuse a
non-contiguous tensor for the first kind of argument, before launching, and accept
anything for the second. The rule errs towards accepting: any run-time integer in the
address (a loop bound included) counts as the caller's say.
"""
from __future__ import annotations

from .ir import Block, Graph, Value


def _int_args(graph: Graph) -> dict[Value, int]:
    return {v: i for i, v in enumerate(graph.args) if not v.type.dtype.is_ptr and not v.type.dtype.is_floating}


def _dependencies(graph: Graph) -> dict[Value, frozenset]:
    """For every value: the run-time integer arguments it is computed from."""
    deps: dict[Value, frozenset] = {v: frozenset({i}) for v, i in _int_args(graph).items()}
    empty = frozenset()

    def of(v: Value) -> frozenset:
        return deps.get(v, empty)

    def block(b: Block, inputs: list[frozenset]) -> list[frozenset]:
        for a, d in zip(b.args, inputs):
            deps[a] = of(a) | d
        out = []
        for op in b.ops:
            ins = frozenset().union(*(of(v) for v in op.operands)) if op.operands else empty
            if op.name == "yield":
                out = [of(v) for v in op.operands]
                continue
            if op.name == "for":
                lo_hi_step, inits = op.operands[:3], op.operands[3:]
                bound = frozenset().union(*(of(v) for v in lo_hi_step))
                carried = [of(v) for v in inits]
                while True:  # carried values: until what flows around the loop stops growing
                    ys = block(op.regions[0], [bound] + carried)
                    grown = [c | y for c, y in zip(carried, ys)]
                    if grown == carried:
                        break
                    carried = grown
                for r, c in zip(op.results, carried):
                    deps[r] = c | bound
                continue
            if op.name == "if":
                branches = [block(b, []) for b in op.regions]
                for k, r in enumerate(op.results):
                    deps[r] = ins.union(*(ys[k] for ys in branches if k < len(ys)))
                continue
            for region in op.regions:  # reduce/scan combine bodies: scalars of the operands
                block(region, [ins] * len(region.args))
            for r in op.results:
                deps[r] = ins
        return out

    block(graph.body, [])
    return deps


def _base_and_offsets(v: Value, args: dict[Value, int], seen: set) -> list[tuple[int, list[Value]]]:
    """(pointer argument index, offset values) for each way a pointer value is built."""
    if v in args:
        return [(args[v], [])]
    op = v.owner
    if op is None or v in seen:
        return []
    seen.add(v)
    if op.name == "ptr_add":
        return [(i, offs + [op.operands[1]]) for i, offs in _base_and_offsets(op.operands[0], args, seen)]
    if op.name in ("splat", "broadcast", "expand_dims", "convert_layout", "reshape", "permute", "hint"):
        return _base_and_offsets(op.operands[0], args, seen)
    if op.name == "where":
        return [x for o in op.operands[1:] for x in _base_and_offsets(o, args, seen)]
    return []  # a pointer from memory or a cast: nothing to say


def contiguous_pointer_args(graph: Graph) -> frozenset[int]:
    """Indices of the pointer arguments every access of which uses offsets that no run-time
    integer argument enters: the kernel assumes those tensors are contiguous."""
    ptr_args = {v: i for i, v in enumerate(graph.args) if v.type.dtype.is_ptr}
    if not ptr_args:
        return frozenset()
    deps = _dependencies(graph)
    assumed: dict[int, bool] = {}
    for op in graph.body.walk():
        if op.name not in ("load", "store", "atomic_rmw", "atomic_cas"):
            continue
        for i, offsets in _base_and_offsets(op.operands[0], ptr_args, set()):
            if offsets:  # the first element alone is the same in any layout
                free = not any(deps.get(o) for o in offsets)
                assumed[i] = assumed.get(i, True) and free
    return frozenset(i for i, a in assumed.items() if a)


def not_contiguous(name: str, kernel: str, what: str) -> str:
    """The launchers' message for a non-contiguous tensor where the kernel assumes one."""
    return (f"argument `{name}` is not contiguous ({what}), but kernel {kernel} addresses it with offsets "
            "that no stride argument enters, so it would read the wrong elements: pass a contiguous "
            "tensor (.contiguous()), or pass its strides to the kernel and use them in the offsets")


def cai_contiguous(cai: dict) -> bool:
    """An ``__cuda_array_interface__`` array in C order (no strides given means C order)."""
    strides = cai.get("strides")
    if strides is None:
        return True
    import numpy as np
    step = np.dtype(cai["typestr"]).itemsize
    for n, s in zip(reversed(cai["shape"]), reversed(strides)):
        if n != 1 and s != step:
            return False
        step *= n
    return True

"""The numpy interpreter: runs any traced graph on the CPU; the reference semantics."""
from __future__ import annotations

import numpy as np

from gluon_trace.addressing import contiguous_pointer_args, not_contiguous
from gluon_trace.errors import ArgumentError, ArgumentTypeError, ArgumentValueError
from gluon_trace.ir import TensorDescType

from .interpreter import RULES, graph_facts, run
from .memory import Memory, _as_numpy


class InterpreterBackend:
    name = "interpreter"
    targets = ("interpreter",)
    RULES = RULES

    def threads_per_warp(self, target: str) -> int:
        return 32

    def default_target(self, args) -> str:
        return "interpreter"

    def run(self, graph, grid, args, stream=None, loc=None):
        mem = Memory()
        values = []
        tma_arrays = {}
        contiguous = contiguous_pointer_args(graph)
        graph_facts(graph)  # before any argument is touched: a kernel over the smem limit fails here
        for i, (v, name, a) in enumerate(zip(graph.args, graph.arg_names, args)):
            t = v.type.dtype
            if isinstance(v.type, TensorDescType):
                tma_arrays[id(a)] = _tma_array(a, name, loc)
                values.append(a)
            elif t.is_ptr:
                if isinstance(a, (int, float)):
                    raise ArgumentTypeError(f"argument `{name}` must be an array for the interpreter", loc)
                if i in contiguous and not _dense(a):
                    strides = a.strides if isinstance(a, np.ndarray) else a.stride()
                    raise ArgumentValueError(not_contiguous(name, graph.name, f"shape {tuple(a.shape)}, strides "
                                                       f"{tuple(strides)}"), loc)
                values.append(np.int64(mem.add(a, name, loc)))
            elif t.is_floating:
                values.append(t.np.type(a))
            elif t.is_bool:
                values.append(np.bool_(a))
            else:
                values.append(t.np.type(int(a)))
        run(graph, grid, values, mem, tma_arrays)


def _tma_array(desc, name, loc) -> np.ndarray:
    """The descriptor's global tensor as a numpy view of its storage (bfloat16 as its bits)."""
    if getattr(desc, "device", "cpu") != "cpu":
        raise ArgumentError(f"argument `{name}`: the interpreter runs on CPU tensors and numpy arrays; "
                            f"this TensorDescriptor describes a {desc.device} tensor", loc)
    if desc.current_address() != desc._address:
        raise ArgumentError(f"argument `{name}`: the tensor this TensorDescriptor was built from has moved "
                            "(its storage was reallocated); build the descriptor again", loc)
    arr = _as_numpy(desc.base, name, loc)
    storage = desc.dtype.np_storage
    if arr.dtype.itemsize == np.dtype(storage).itemsize and arr.dtype != storage:
        arr = arr.view(storage)
    item = arr.itemsize
    view = np.lib.stride_tricks.as_strided(arr, shape=tuple(desc.shape),
                                           strides=tuple(s * item for s in desc.strides))
    return view


def _dense(a) -> bool:
    """C-contiguous, as a GPU launcher would require (numpy arrays, torch CPU tensors)."""
    if isinstance(a, np.ndarray):
        return a.flags.c_contiguous
    is_contiguous = getattr(a, "is_contiguous", None)
    return bool(is_contiguous()) if callable(is_contiguous) else True


BACKEND = InterpreterBackend()

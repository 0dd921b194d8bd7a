"""Shared memory, barriers, TMA descriptors and warp specialization, as kernels call them.

``gl.allocate_shared_memory`` returns a :class:`shared_memory_descriptor`: a traced value
whose views (``index``, ``slice``, ``permute``, ``reshape``, ``reinterpret``) are pure and
whose ``load``/``store`` are effects kept in traced order. Descriptors are carried by
``gl.range`` loops and ``gl.if_`` branches like tiles are.
"""
from __future__ import annotations

from .. import dtypes as dt
from ..errors import TraceError, user_location
from ..ir import Block, BlockType, MemDescType, TensorDescType
from ..tracer import current
from .tensor import register_proxy, tensor, to_tensor, wrap


def _int(x, what: str) -> int:
    x = getattr(x, "value", x) if hasattr(x, "__gluon_constexpr__") else x
    if isinstance(x, tensor):
        raise TraceError(f"{what} must be known at trace time (a Python int or gl.constexpr)",
                         user_location())
    if isinstance(x, bool) or not isinstance(x, int):
        try:
            import numpy as np
            if isinstance(x, np.integer):
                return int(x)
        except ImportError:  # pragma: no cover
            pass
        raise TraceError(f"{what} must be an int, got {x!r}", user_location())
    return x


def _shape(shape, what="shape") -> tuple[int, ...]:
    try:
        return tuple(_int(s, what) for s in shape)
    except TypeError:
        raise TraceError(f"{what} must be a list of ints, got {shape!r}", user_location()) from None


def _unwrap(x):
    return x.value if hasattr(x, "__gluon_constexpr__") else x


class shared_memory_descriptor(tensor):
    """A view of a shared-memory allocation (Gluon's ``shared_memory_descriptor``)."""

    __slots__ = ()

    @property
    def type(self) -> MemDescType:
        return self.value.type

    @property
    def alloc_shape(self) -> list[int]:
        return list(self.value.type.alloc_shape)

    @property
    def rank(self) -> int:
        return len(self.value.type.shape)

    def __repr__(self) -> str:
        return f"shared_memory_descriptor({self.value.type})"

    def _view(self, name, operands=(), **attrs):
        return wrap(current().value(name, [self.value, *operands], attrs))

    def load(self, layout) -> tensor:
        return tensor(current().value("smem_load", [self.value], {"layout": _unwrap(layout)}))

    def store(self, value) -> None:
        v = to_tensor(value, self.dtype)
        current().create("smem_store", [self.value, v.value])

    def index(self, index) -> "shared_memory_descriptor":
        i = to_tensor(index, dt.int32)
        return self._view("smem_index", [i.value])

    def slice(self, start, length, dim=0) -> "shared_memory_descriptor":
        return self._view("smem_slice", start=_int(start, "slice start"),
                          length=_int(length, "slice length"), dim=_int(dim, "slice dim"))

    def permute(self, order) -> "shared_memory_descriptor":
        return self._view("smem_permute", order=_shape(order, "permute order"))

    trans = permute  # an older Gluon name

    def reshape(self, shape) -> "shared_memory_descriptor":
        return self._view("smem_reshape", shape=_shape(shape))

    def reinterpret(self, dtype, shape, layout) -> "shared_memory_descriptor":
        return self._view("smem_reinterpret", dtype=_unwrap(dtype), shape=_shape(shape),
                          layout=_unwrap(layout))

    def _keep_alive(self) -> None:
        """Gluon's liveness hint; buffers here live until their last use anyway."""


register_proxy(MemDescType, shared_memory_descriptor)

_ARITH = ("add", "sub", "mul", "truediv", "floordiv", "mod", "and", "or", "xor", "lshift", "rshift",
          "lt", "le", "gt", "ge", "eq", "ne", "neg", "invert", "abs", "getitem")


def _no_arithmetic(cls, what: str, fix: str) -> None:
    """Operators on a descriptor: a clear error at the user's line rather than a layout error."""
    def refuse(self, *args):
        raise TraceError(f"{what} ({self.value.type}) has no arithmetic or indexing; {fix}", user_location())
    for name in _ARITH:
        setattr(cls, f"__{name}__", refuse)
        if name not in ("lt", "le", "gt", "ge", "eq", "ne", "neg", "invert", "abs", "getitem"):
            setattr(cls, f"__r{name}__", refuse)
    cls.__hash__ = object.__hash__


class tensor_descriptor(tensor):
    """A TMA descriptor passed as a kernel argument (host side: gluon_trace.nvidia.hopper)."""

    __slots__ = ()

    @property
    def block_type(self) -> BlockType:
        return BlockType(self.value.type.shape, self.value.type.dtype)

    @property
    def block_shape(self) -> list[int]:
        return list(self.value.type.shape)

    @property
    def nbytes_per_cta(self) -> int:
        """Gluon's name for the bytes one copy of the block brings a CTA (each CTA of a cluster
        loads its own block here): what mbarrier.expect counts."""
        return self.block_type.nbytes

    @property
    def shape(self) -> list[tensor]:  # the global tensor's shape: run-time int32 scalars
        b = current()
        return [tensor(b.value("tensordesc_dim", [self.value], {"dim": d}))
                for d in range(self.value.type.rank)]

    def __repr__(self) -> str:
        return f"tensor_descriptor({self.value.type})"


register_proxy(TensorDescType, tensor_descriptor)
_no_arithmetic(shared_memory_descriptor, "a shared-memory descriptor",
               "read it into registers with .load(layout) first (views: .index/.slice/.permute)")
_no_arithmetic(tensor_descriptor, "a TMA tensor descriptor", "copy blocks with tma.async_load into shared memory")


def allocate_shared_memory(element_ty, shape, layout, value=None) -> shared_memory_descriptor:
    """A shared-memory buffer; with ``value`` (a register tile) it starts filled with it."""
    b = current()
    ops = [] if value is None else [to_tensor(value).value]
    return wrap(b.value("smem_alloc", ops, {"dtype": _unwrap(element_ty), "shape": _shape(shape),
                                            "layout": _unwrap(layout)}))


def thread_barrier() -> None:
    """A barrier across the partition's threads (bar.sync / s_barrier)."""
    current().create("thread_barrier", [])


def _traced_partition(fn, args, warps: int | None, index: int, loc) -> tuple[Block, bool]:
    b = current()
    block = Block(b.block)
    kind = "the default partition" if index == 0 else f"worker partition {index}"
    if index:
        for a in args:
            if isinstance(a, tensor) and not a.type.is_scalar and not isinstance(
                    a.type, (MemDescType, TensorDescType)):
                raise TraceError(f"{kind} ({getattr(fn, '__name__', fn)}) is passed a register tile defined "
                                 f"outside it ({a.type}); only shared-memory descriptors, barriers and "
                                 "scalars cross partitions", loc,
                                 notes=("pass the data through a shared buffer and an mbarrier",))
    if warps is not None:
        b.warps.append(warps)
    b.partition.append(index)
    try:
        with b.region(block, kind, loc):
            out = fn(*args)
            if index:
                if out is not None:
                    raise TraceError(f"{kind} ({fn.__name__}) returned a value; worker partitions "
                                     "communicate through shared memory and mbarriers", loc)
                outs = []
            else:
                single = out is not None and not isinstance(out, (tuple, list))
                outs = [] if out is None else [to_tensor(o) for o in ([out] if single else out)]
            b.create("yield", [o.value for o in outs], loc=loc)
    finally:
        b.partition.pop()
        if warps is not None:
            b.warps.pop()
    return block, out is not None and not isinstance(out, (tuple, list))


def _check_worker_captures(block: Block, index: int, loc) -> None:
    """Values crossing into a worker: descriptors and scalars only (a register tile's layout
    is written for another partition's warps)."""
    for op in block.walk():
        for v in op.operands:
            if v.block is not None and not v.block.is_within(block) and not v.type.is_scalar \
                    and not isinstance(v.type, (MemDescType, TensorDescType)):
                raise TraceError(
                    f"worker partition {index} uses a register tile defined outside it ({v.type}); "
                    "only shared-memory descriptors, barriers and scalars cross partitions",
                    op.loc or loc, notes=("pass the data through a shared buffer and an mbarrier",))


def warp_specialize(*args, **kwargs):
    """Run a default partition and worker partitions concurrently, each on its own warps.

    Today's Gluon form: ``warp_specialize([(default_fn, args), (worker_fn, args), ...],
    worker_num_warps, worker_num_regs)``. The older forms ``(default_args, default_fn,
    worker_args, worker_fns, worker_num_warps, worker_num_regs)`` and ``(args, default_fn,
    worker_fns, worker_num_warps, worker_num_regs)`` are accepted too.
    Returns what the default partition returns.
    """
    loc = user_location()
    b = current()
    if args and isinstance(args[0], (list, tuple)) and args[0] and isinstance(args[0][0], (list, tuple)) \
            and len(args[0][0]) == 2 and callable(args[0][0][0]):
        pairs = [(f, tuple(a)) for f, a in args[0]]
        rest = list(args[1:])
        warps = kwargs.pop("worker_num_warps", rest[0] if rest else None)
        regs = kwargs.pop("worker_num_regs", rest[1] if len(rest) > 1 else None)
    elif len(args) == 6:
        d_args, d_fn, w_args, w_fns, warps, regs = args
        pairs = [(d_fn, tuple(d_args))] + [(f, tuple(w_args)) for f in w_fns]
    elif len(args) == 5:
        shared, d_fn, w_fns, warps, regs = args
        pairs = [(d_fn, tuple(shared))] + [(f, tuple(shared)) for f in w_fns]
    else:
        raise TraceError("warp_specialize([(default_fn, args), (worker_fn, args), ...], "
                         "worker_num_warps, worker_num_regs): arguments not understood", loc)
    if kwargs:
        raise TraceError(f"warp_specialize got unexpected keywords {sorted(kwargs)}", loc)
    if warps is None:
        raise TraceError("warp_specialize needs worker_num_warps (one per worker partition)", loc)
    if regs is None:
        regs = [24] * len(warps)
    warps = [_int(w, "worker_num_warps") for w in warps]
    regs = [_int(r, "worker_num_regs") for r in regs]
    if len(warps) != len(pairs) - 1:
        raise TraceError(f"warp_specialize has {len(pairs) - 1} worker partitions but "
                         f"{len(warps)} worker_num_warps entries", loc)
    if len(b.partition) > 1:
        raise TraceError("warp_specialize cannot be nested inside another partition", loc)
    for fn, _ in pairs:
        if not callable(fn):
            raise TraceError(f"a partition must be a function, got {fn!r}", loc)
    regions, single = [], False
    for i, (fn, fargs) in enumerate(pairs):
        blk, one = _traced_partition(fn, fargs, None if i == 0 else warps[i - 1], i, loc)
        single = single or (i == 0 and one)
        if i:
            _check_worker_captures(blk, i, loc)
        regions.append(blk)
    op = b.create("warp_specialize", [], {"worker_num_warps": warps, "worker_num_regs": regs},
                  regions, loc=loc)
    res = [wrap(r) for r in op.results]
    if not res:
        return None
    return res[0] if single else tuple(res)

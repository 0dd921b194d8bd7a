"""The interpreter's memory: kernel arguments as byte buffers at virtual addresses.

Each array argument gets its own virtual base address, ``(k + 1) << 40`` plus the low
byte of its real address (so alignment hints see the real alignment). A pointer value
in the interpreter is a plain int64 byte address; pointer arithmetic is integer
arithmetic scaled by the element size. Every access is checked: an address outside
all buffers, or misaligned for its type, is an error naming the op and the line.
"""
from __future__ import annotations

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace.errors import ArgumentTypeError, ArgumentValueError, InterpreterError, OutOfBoundsError

SHIFT = 40
LOW = (1 << SHIFT) - 1


def _as_numpy(value, name: str, loc):
    if isinstance(value, np.ndarray):
        return value
    mod = type(value).__module__
    if mod.startswith("torch"):
        t = value.detach()
        if t.device.type != "cpu":
            raise ArgumentValueError(f"argument `{name}` is on {t.device}; the interpreter runs on CPU "
                                "tensors and numpy arrays", loc)
        import torch
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy()
        return t.numpy()
    raise ArgumentTypeError(f"argument `{name}` ({type(value).__name__}) is not an array the "
                        "interpreter can address", loc)


def _byte_view(arr: np.ndarray, name: str, loc) -> np.ndarray:
    if arr.size == 0:
        return np.zeros(0, np.uint8)
    if arr.flags.c_contiguous:
        return arr.reshape(-1).view(np.uint8)
    if any(s < 0 for s in arr.strides):
        raise ArgumentValueError(f"argument `{name}` has a negative stride; pass a copy "
                            "(np.ascontiguousarray)", loc)
    span = sum((n - 1) * s for n, s in zip(arr.shape, arr.strides)) + arr.itemsize
    flat = np.lib.stride_tricks.as_strided(arr, shape=(span // arr.itemsize,),
                                           strides=(arr.itemsize,))
    return flat.view(np.uint8)


class Memory:
    def __init__(self):
        self.bufs: list[np.ndarray] = []   # uint8 views
        self.bases: list[int] = []
        self.typed: dict = {}

    def add(self, value, name: str, loc) -> int:
        arr = _as_numpy(value, name, loc)
        if not arr.flags.writeable:
            arr = arr  # reads still work; a store will report the read-only buffer
        raw = _byte_view(arr, name, loc)
        base = ((len(self.bufs) + 1) << SHIFT) | (arr.ctypes.data & 0xFF)
        self.bufs.append(raw)
        self.bases.append(base)
        return base

    def _view(self, k: int, storage: np.dtype) -> np.ndarray:
        key = (k, storage)
        v = self.typed.get(key)
        if v is None:
            raw = self.bufs[k]
            n = raw.size - raw.size % storage.itemsize
            v = raw[:n].view(storage)
            self.typed[key] = v
        return v

    def locate(self, addr: np.ndarray, elem: dt.dtype, op, what: str):
        """(buffer index per element, element index per element) or a clear error."""
        size = elem.itemsize
        bid = (addr >> SHIFT) - 1
        if addr.size == 0:
            return bid, addr
        lo, hi = int(bid.min()), int(bid.max())
        if lo < 0 or hi >= len(self.bufs):
            bad = addr.flat[int(np.argmax(((bid < 0) | (bid >= len(self.bufs))).ravel()))]
            raise OutOfBoundsError(f"{what} through a pointer ({hex(int(bad))}) that points into no "
                                   "argument buffer", op.loc)
        bases = np.asarray(self.bases, dtype=np.int64)[bid]
        off = addr - bases
        nbytes = np.asarray([b.size for b in self.bufs], dtype=np.int64)[bid]
        bad = (off < 0) | (off + size > nbytes)
        if bad.any():
            i = int(np.argmax(bad.ravel()))
            o = int(off.flat[i])
            n = int(nbytes.flat[i])
            raise OutOfBoundsError(
                f"{what} out of bounds: element offset {o // size} of an argument buffer of "
                f"{n // size} {elem} elements (at tile index {np.unravel_index(i, addr.shape) if addr.shape else ()})",
                op.loc, notes=("mask the access (mask=offs < n) or fix the offsets",))
        if (off % size).any():
            raise InterpreterError(f"{what} of {elem} at a misaligned address", op.loc)
        return bid, off // size

    def load(self, addr, elem: dt.dtype, op) -> np.ndarray:
        shape = np.shape(addr)
        addr = np.asarray(addr).reshape(-1)
        return self._load(addr, elem, op).reshape(shape)

    def _load(self, addr, elem: dt.dtype, op) -> np.ndarray:
        bid, idx = self.locate(addr, elem, op, "load")
        storage = elem.np_storage
        if addr.size and bid.min() == bid.max():
            raw = self._view(int(bid.flat[0]), storage)[idx]
        else:
            raw = np.empty(addr.shape, storage)
            for k in np.unique(bid):
                sel = bid == k
                raw[sel] = self._view(int(k), storage)[idx[sel]]
        return from_storage(raw, elem)

    def store(self, addr, value, elem: dt.dtype, op) -> None:
        addr = np.asarray(addr)
        raw = np.broadcast_to(to_storage(value, elem), addr.shape).reshape(-1)
        addr = addr.reshape(-1)
        bid, idx = self.locate(addr, elem, op, "store")
        if bid.size and bid.min() == bid.max():
            k = int(bid[0])
            view = self._view(k, elem.np_storage)
            if not view.flags.writeable:
                raise InterpreterError("store into a read-only array", op.loc)
            view[idx] = raw
            return
        for k in np.unique(bid):
            sel = bid == k
            view = self._view(int(k), elem.np_storage)
            if not view.flags.writeable:
                raise InterpreterError("store into a read-only array", op.loc)
            view[idx[sel]] = raw[sel]

    def target(self, addr, elem: dt.dtype, op, what: str):
        """The typed view and indices for an atomic (one buffer at a time)."""
        bid, idx = self.locate(addr, elem, op, what)
        return bid, idx, lambda k: self._view(int(k), elem.np_storage)


def from_storage(raw: np.ndarray, elem: dt.dtype) -> np.ndarray:
    if elem.name == "bfloat16":
        return dt.bf16_bits_to_f32(raw)
    if elem.is_fp8:
        from gluon_trace import fp8
        return fp8.decode(raw, elem.name)
    if elem.is_bool:
        return raw != 0
    return raw


def to_storage(value: np.ndarray, elem: dt.dtype) -> np.ndarray:
    if elem.name == "bfloat16":
        return dt.f32_to_bf16_bits(value)
    if elem.is_fp8:
        from gluon_trace import fp8
        return fp8.encode(value, elem.name)
    if elem.is_bool:
        return np.asarray(value).astype(np.int8)
    return np.asarray(value).astype(elem.np_storage, copy=False)

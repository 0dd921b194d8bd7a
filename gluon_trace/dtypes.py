"""Scalar types and the promotion rules of binary operators.

Promotion (what ``a + b`` gives), applied in this order:

1. Equal types give that type.
2. A Python ``int``/``float``/``bool`` literal is *weak*: it takes the tile's type,
   except that a float literal beside an integer tile gives float32.
3. ``int1`` (bool) beside any other type gives the other type.
4. Float beside integer gives the float.
5. Two floats give the wider; float16 beside bfloat16 gives float32 (neither holds the other).
6. Two integers give the wider; at equal width, unsigned wins (as in C and Triton).
7. Arithmetic on int1 (``+ - * // % << >>``, unary ``-``, ``abs``) computes in int32, as
   Python's bool does (``True + True == 2``); logic, comparisons, maximum/minimum stay int1.

Pointers take part only in ``ptr + int``/``ptr - int`` (in elements) and comparisons.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class dtype:
    name: str
    bits: int
    kind: str  # "int", "uint", "float", "bool", "ptr"
    element: "dtype | None" = None  # pointee type of a pointer

    def __repr__(self) -> str:
        return f"gl.{self.name}" if self.kind != "ptr" else f"gl.pointer({self.element!r})"

    def __str__(self) -> str:
        return self.name if self.kind != "ptr" else f"ptr<{self.element}>"

    @property
    def is_floating(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint", "bool")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def is_ptr(self) -> bool:
        return self.kind == "ptr"

    @property
    def is_fp8(self) -> bool:
        """float8e4nv / float8e5 (NVIDIA's OCP formats), float8e4b8 / float8e5b16 (gfx942's FNUZ
        formats): storage and MMA operand types; convert them to compute."""
        return self.kind == "float" and self.bits == 8

    @property
    def primitive_bitwidth(self) -> int:
        """Triton's name for the width in bits (Gluon kernels compute wgmma's k as
        ``256 // dtype.primitive_bitwidth``)."""
        return 64 if self.kind == "ptr" else self.bits

    @property
    def itemsize(self) -> int:
        return 8 if self.kind == "ptr" else max(1, self.bits // 8)

    @property
    def np(self) -> np.dtype:
        """The numpy type the interpreter computes in (bfloat16 computes in float32)."""
        return _NUMPY[self.name] if self.kind != "ptr" else np.dtype(np.int64)

    @property
    def np_storage(self) -> np.dtype:
        """The numpy type of this value in memory (bfloat16 is stored as its bits)."""
        if self.name == "bfloat16":
            return np.dtype(np.uint16)
        if self.bits == 8 and self.kind == "float":
            return np.dtype(np.uint8)
        if self.name == "int1":
            return np.dtype(np.int8)
        return self.np

    def to(self) -> "dtype":
        return self


int1 = dtype("int1", 1, "bool")
int8 = dtype("int8", 8, "int")
int16 = dtype("int16", 16, "int")
int32 = dtype("int32", 32, "int")
int64 = dtype("int64", 64, "int")
uint8 = dtype("uint8", 8, "uint")
uint16 = dtype("uint16", 16, "uint")
uint32 = dtype("uint32", 32, "uint")
uint64 = dtype("uint64", 64, "uint")
float16 = dtype("float16", 16, "float")
bfloat16 = dtype("bfloat16", 16, "float")
float32 = dtype("float32", 32, "float")
float64 = dtype("float64", 64, "float")
float8e4nv = dtype("float8e4nv", 8, "float")  # OCP E4M3 (fn): max 448, no infinities
float8e5 = dtype("float8e5", 8, "float")      # E5M2
float8e4b8 = dtype("float8e4b8", 8, "float")  # E4M3 FNUZ (AMD gfx942): bias 8, max 240, NaN 0x80 only
float8e5b16 = dtype("float8e5b16", 8, "float")  # E5M2 FNUZ (AMD gfx942): bias 16, max 57344, NaN 0x80 only

ALL = (int1, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
       float16, bfloat16, float32, float64, float8e4nv, float8e5, float8e4b8, float8e5b16)
BY_NAME = {t.name: t for t in ALL}

_NUMPY = {
    "int1": np.dtype(np.bool_), "int8": np.dtype(np.int8), "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32), "int64": np.dtype(np.int64), "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16), "uint32": np.dtype(np.uint32), "uint64": np.dtype(np.uint64),
    "float16": np.dtype(np.float16), "bfloat16": np.dtype(np.float32),
    "float32": np.dtype(np.float32), "float64": np.dtype(np.float64),
    "float8e4nv": np.dtype(np.float32), "float8e5": np.dtype(np.float32),
    "float8e4b8": np.dtype(np.float32), "float8e5b16": np.dtype(np.float32),
}
_FROM_NUMPY = {np.dtype(v): BY_NAME[k] for k, v in _NUMPY.items()
               if k != "bfloat16" and not k.startswith("float8")}
try:  # ml_dtypes (JAX's numpy extension types) gives numpy arrays a real bfloat16
    import ml_dtypes as _ml

    _FROM_NUMPY[np.dtype(_ml.bfloat16)] = bfloat16
    _FROM_NUMPY[np.dtype(_ml.float8_e4m3fn)] = float8e4nv
    _FROM_NUMPY[np.dtype(_ml.float8_e5m2)] = float8e5
    _FROM_NUMPY[np.dtype(_ml.float8_e4m3fnuz)] = float8e4b8
    _FROM_NUMPY[np.dtype(_ml.float8_e5m2fnuz)] = float8e5b16
except ImportError:  # optional: without it, bfloat16 data comes as torch tensors
    _ml = None


def pointer(element: dtype) -> dtype:
    if not isinstance(element, dtype) or element.is_ptr:
        raise TypeError(f"gl.pointer() takes a scalar dtype such as gl.float32, not {element!r}")
    return dtype(f"ptr_{element.name}", 64, "ptr", element)


def from_numpy(dt) -> dtype:
    dt = np.dtype(dt)
    if dt not in _FROM_NUMPY:
        raise TypeError(f"numpy dtype {dt} has no gluon_trace equivalent")
    return _FROM_NUMPY[dt]


def from_torch(tdt) -> dtype:
    name = str(tdt).replace("torch.", "")
    name = {"bool": "int1", "half": "float16", "float": "float32", "double": "float64",
            "long": "int64", "int": "int32", "short": "int16", "float8_e4m3fn": "float8e4nv",
            "float8_e5m2": "float8e5", "float8_e4m3fnuz": "float8e4b8",
            "float8_e5m2fnuz": "float8e5b16"}.get(name, name)
    if name not in BY_NAME:
        raise TypeError(f"torch dtype {tdt} has no gluon_trace equivalent")
    return BY_NAME[name]


def promote(a: dtype, b: dtype) -> dtype:
    """Result type of a binary arithmetic op between two tile/scalar values."""
    if a == b:
        return a
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.is_floating and b.is_floating:
        if a.bits == b.bits:  # float16 vs bfloat16
            return float32
        return a if a.bits > b.bits else b
    if a.is_floating:
        return a
    if b.is_floating:
        return b
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if a.kind == "uint" else b


def literal_type(value, other: dtype | None) -> dtype:
    """Type of a Python literal used beside a value of type ``other`` (weak typing)."""
    if isinstance(value, bool):
        return other if other is not None and not other.is_ptr else int1
    if isinstance(value, int):
        if other is not None and (other.is_int and not other.is_bool or other.is_floating):
            return other
        return int32 if -2**31 <= value < 2**31 else int64
    if isinstance(value, float):
        if other is not None and other.is_floating:
            return other
        return float32
    raise TypeError(f"cannot use {type(value).__name__} {value!r} in a kernel expression")


# -- bfloat16 helpers: values live in float32 arrays, rounded to bf16 after each op ------

def round_bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even); NaN stays NaN."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out)


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    return (round_bf16(x).view(np.uint32) >> 16).astype(np.uint16)

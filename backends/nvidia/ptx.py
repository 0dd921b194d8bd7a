"""PTX vocabulary: register classes, instruction type suffixes, literals.

Values live in registers by class: int1 in ``.pred``; integers up to 32 bits in
``.b32`` (kept sign- or zero-extended, so int8/int16 wrap exactly after each op);
int64, uint64 and pointers in ``.b64``; float16, bfloat16 and float32 in ``.f32``
(16-bit floats hold an exactly representable value: each op computes in f32 and
rounds back, which is what the interpreter's numpy does); float64 in ``.f64``.
Memory holds the real widths; loads and stores convert.
"""
from __future__ import annotations

import struct

from gluon_trace import dtypes as dt

TARGETS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
PTX_VERSION = "8.0"  # the lowest that knows every target above (sm_90a); ptxas 12.0+ reads it

# register class -> name prefix
PREFIX = {"pred": "%p", "b16": "%h", "b32": "%r", "b64": "%rd", "f32": "%f", "f64": "%fd"}


_RCLASS: dict = {}


def rclass(t: dt.dtype) -> str:
    c = _RCLASS.get(t.name)
    if c is None:
        c = _RCLASS[t.name] = _rclass(t)
    return c


def _rclass(t: dt.dtype) -> str:
    if t.is_bool:
        return "pred"
    if t.is_ptr or (t.is_int and t.bits == 64):
        return "b64"
    if t.is_int:
        return "b32"
    if t.bits == 64:
        return "f64"
    return "f32"


def ity(t: dt.dtype) -> str:
    """Integer instruction type of a value held in a register (narrow ints compute at 32 bits)."""
    w = 64 if (t.is_ptr or t.bits == 64) else 32
    return f"{'s' if t.is_signed else 'u'}{w}"


def fty(t: dt.dtype) -> str:
    return "f64" if t.bits == 64 else "f32"


def bty(t: dt.dtype) -> str:
    """Bit type of the register holding ``t``."""
    c = rclass(t)
    return {"b32": "b32", "b64": "b64", "f32": "b32", "f64": "b64", "pred": "pred"}[c]


def mem_type(t: dt.dtype) -> str:
    """Type suffix of ld/st for one element of ``t`` in memory, loaded into its register."""
    if t.is_bool:
        return "u8"
    if t.is_ptr:
        return "u64"
    if t.is_int:
        return f"{'s' if t.is_signed else 'u'}{t.bits}"
    if t.bits == 64:
        return "f64"
    if t.bits == 32:
        return "f32"
    return "b16"


def needs_norm(t: dt.dtype) -> bool:
    """Integers narrower than their 32-bit register: re-extend after ops that can overflow."""
    return t.is_int and not t.is_bool and t.bits < 32


def f32_hex(x: float) -> str:
    return "0f%08X" % struct.unpack("<I", struct.pack("<f", x))[0]


def f64_hex(x: float) -> str:
    return "0d%016X" % struct.unpack("<Q", struct.pack("<d", x))[0]


def literal(value, t: dt.dtype) -> str:
    """A PTX immediate for ``value`` of type ``t`` (floats in exact hex form)."""
    if t.is_floating:
        if t.bits == 64:
            return f64_hex(float(value))
        v = float(value)
        if t.name == "float16":
            import numpy as np
            v = float(np.float16(v))
        elif t.name == "bfloat16":
            import numpy as np
            v = float(dt.round_bf16(np.float32(v)))
        return f32_hex(v)
    if t.is_bool:
        return "1" if value else "0"
    v = int(value)
    if t.bits < 64 and not t.is_ptr:
        bits = 32
        v &= (1 << t.bits) - 1
        if t.is_signed and v >= 1 << (t.bits - 1):
            v -= 1 << t.bits
        v &= (1 << bits) - 1
        return str(v)
    return str(v & ((1 << 64) - 1))


def pow2_div(v: int, cap: int = 1 << 30) -> int:
    """Largest power of two dividing ``v`` (capped; 0 is divisible by everything)."""
    v = abs(int(v))
    if v == 0:
        return cap
    return min(v & -v, cap)


def param_type(t: dt.dtype) -> str:
    """The .param type of a kernel argument."""
    if t.is_bool:
        return "u8"
    if t.is_ptr:
        return "u64"
    if t.is_floating:
        if t.bits == 16:
            from gluon_trace.errors import CompileError
            raise CompileError(f"a {t} scalar argument is not supported by the NVIDIA backend; "
                               "pass it as float32 and convert with .to()")
        return "f64" if t.bits == 64 else "f32"
    if t.bits < 32:
        return f"{'s' if t.is_signed else 'u'}{t.bits}"
    return f"{'s' if t.is_signed else 'u'}{64 if t.bits == 64 else 32}"


def require(target: str, what: str, sm: int, loc, suffix_a: bool = False) -> None:
    """Refuse an instruction the target lacks, before ptxas would (a kernel traced for one target
    and compiled for another can carry ops its trace-time check allowed)."""
    v = int("".join(ch for ch in target[3:] if ch.isdigit()))
    if v < sm or (suffix_a and not target.endswith("a")):
        from gluon_trace.errors import CompileError
        need = f"sm_{sm}{'a' if suffix_a else ''}"
        raise CompileError(f"{what} needs {need}; this kernel is compiled for {target}", loc,
                           notes=(f"compile with target='{need}' (an H100/H200), or use mma_v2 and "
                                  "cp.async, which every sm_80+ GPU has",))

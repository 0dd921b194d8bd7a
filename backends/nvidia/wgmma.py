"""wgmma's shared-memory matrix descriptors, read off a shared view's byte-offset table.

A descriptor (PTX ISA, "Matrix Descriptor Format") is 64 bits: bits 0-13 the start address
>> 4, 16-29 the leading-dimension byte offset (LBO) >> 4, 32-45 the stride byte offset
(SBO) >> 4, 62-63 the swizzle mode (0 none, 1 128B, 2 64B, 3 32B). The hardware walks one
instruction's operand tile (``rows`` along M or N, ``kc`` elements along K, kc * size = 32
bytes) in the "canonical layouts" of the PTX ISA, with T = 16 bytes' worth of elements and W
the swizzle width in bytes, then XORs address bits 4.. with bits 7.. (the swizzle):

- K-major (K contiguous), swizzled: row r at (r // 8) * SBO + (r % 8) * W, K bytes contiguous.
- MN-major, swizzled: W bytes of MN contiguous, the next W bytes of MN at LBO; K row j at
  (j // 8) * SBO + (j % 8) * W.
- Unswizzled ("interleave"): 8 x 16-byte core matrices; K-major: rows 16 bytes apart, 8-row
  groups SBO apart, 16-byte K chunks LBO apart; MN-major: 16 bytes of MN contiguous, K rows
  16 bytes apart, the next 16 bytes of MN at SBO, 8-row K groups LBO apart.

Rather than derive these from the layout's parameters, :func:`plan` fits them to the view's
table and then checks every element of the tile against the model, so a layout the
hardware would read differently is refused at compile time instead of computing garbage.
The start address sits in an 8-row swizzle atom at its first row, where the swizzle is the
identity; buffers are planned at multiples of 8 * W (smem_plan), so offsets from the buffer
base swizzle as absolute addresses do.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MODE = {0: 0, 128: 1, 64: 2, 32: 3}   # swizzle width (bytes) -> descriptor bits 62-63


@dataclass(frozen=True)
class Operand:
    """One instruction operand's descriptor fields (byte offsets from the view's base register)."""
    start: int
    lbo: int
    sbo: int
    width: int        # swizzle width in bytes, 0 for none
    k_major: bool


def swizzle(x, width: int):
    """The swizzle on a byte address: bits 4.. XOR bits 7.. (log2(width / 16) of them)."""
    if width == 0:
        return x
    mask = width // 16 - 1
    return x ^ (((x >> 7) & mask) << 4)


def encode(start: int, lbo: int, sbo: int, width: int) -> int:
    """The 64-bit descriptor for a start address (all fields in bytes)."""
    return (((start >> 4) & 0x3FFF) | ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32
            | MODE[width] << 62)


def hi_word(op: Operand) -> int:
    """Bits 32-63 of the descriptor: they do not depend on the start address."""
    return encode(0, op.lbo, op.sbo, op.width) >> 32


def lo_fields(op: Operand) -> int:
    """Bits 0-31 without the base register's address: (start >> 4) | LBO field."""
    return encode(op.start, op.lbo, op.sbo, op.width) & 0xFFFFFFFF


def model(op: Operand, rows: int, kc: int, es: int) -> np.ndarray:
    """[rows, kc] byte offsets the hardware reads for this descriptor (PTX canonical layouts)."""
    r = np.arange(rows)[:, None]
    k = np.arange(kc)[None, :]
    W = op.width
    if W:
        if op.k_major:
            lin = (r // 8) * op.sbo + (r % 8) * W + k * es
        else:
            per = W // es
            lin = (r // per) * op.lbo + (r % per) * es + (k // 8) * op.sbo + (k % 8) * W
    else:
        t = 16 // es
        if op.k_major:
            lin = (r // 8) * op.sbo + (r % 8) * 16 + (k // t) * op.lbo + (k % t) * es
        else:
            lin = (r // t) * op.sbo + (r % t) * es + (k // 8) * op.lbo + (k % 8) * 16
    return swizzle(op.start + lin, W)


def plan(table: np.ndarray, es: int, r0: int, k0: int, rows: int, kc: int) -> Operand | None:
    """The descriptor of tile [r0:r0+rows, k0:k0+kc] of ``table`` ([MN, K] byte offsets from
    the base register), or None when no canonical layout places it as the table does."""
    tile = table[r0:r0 + rows, k0:k0 + kc]
    if tile.shape != (rows, kc):
        return None
    start = int(tile[0, 0])
    if start % 16:
        return None

    def at(r, k):
        return int(table[r0 + r, k0 + k]) - start if r < tile.shape[0] and k < tile.shape[1] else 0

    k_major = kc > 1 and at(0, 1) == es
    cands = []
    for W in (128, 64, 32):
        if k_major:
            cands.append(Operand(start, 16, at(8, 0) if rows > 8 else 8 * W, W, True))
        else:
            per = W // es
            cands.append(Operand(start, at(per, 0) if rows > per else W * kc, at(0, 8) if kc > 8 else 8 * W,
                                 W, False))
    t = 16 // es
    if k_major:
        cands.append(Operand(start, at(0, t) if kc > t else 128, at(8, 0) if rows > 8 else 128, 0, True))
    else:
        cands.append(Operand(start, at(0, 8) if kc > 8 else 128, at(t, 0) if rows > t else 128, 0, False))
    for c in cands:
        if min(c.lbo, c.sbo) < 0 or c.lbo % 16 or c.sbo % 16 or max(c.lbo, c.sbo) >= 1 << 18:
            continue
        if np.array_equal(model(c, rows, kc, es), tile):
            return c
    return None

"""A swizzle for the shared-memory scratch of a layout conversion, against bank conflicts.

The scratch holds the tile at row-major offsets, so a conversion that reads along
columns what was written along rows (a transpose) sends the lanes of one load to one
bank: 16- or 32-way conflicts. Offsets are GF(2)-linear in the coordinate here (see
rules_layout.py), so any invertible linear map S of the offset bits can be put between
coordinate and address without changing what is stored where, only which bank it lands
in. Like the swizzled shared layouts of Triton and CUTLASS, S adds (XOR) bits above a
128-byte row into the bank bits below it: S(a) = a ^ sum of m_j over the set bits j >= 7.
It never touches the bits inside one vector access, so 128-bit stores and loads stay.

Bank model (sm_80 .. sm_90): 32 banks of 4 bytes; an access of W bytes per lane is served
in phases of 128 / W lanes; a phase costs one wavefront per distinct address on the same
bank. For linear offsets that is 2**(rank of the lanes' addresses - rank of their bank
bits) wavefronts per phase.
"""
from __future__ import annotations

ROW = 7  # log2 of the 128 bytes that one wavefront serves


def _reduce(basis: list[int], v: int) -> int:
    for b in basis:
        v = min(v, v ^ b)
    return v


def _add(basis: list[int], v: int) -> bool:
    """Add v to a GF(2) basis kept in reduced form; False when v is already in its span."""
    v = _reduce(basis, v)
    if not v:
        return False
    basis.append(v)
    basis.sort(reverse=True)
    return True


def _phase(lane_offsets: list[int], width: int) -> list[int]:
    """The lane bits of one phase: 128 / width lanes are served together."""
    return lane_offsets[:(128 // width).bit_length() - 1]


def _bank(a: int, width: int) -> int:
    return (a >> (width.bit_length() - 1)) & ((128 // width) - 1)


def wavefronts(lane_offsets: list[int], width: int, apply=lambda a: a) -> int:
    """Wavefronts of one phase of an access of ``width`` bytes per lane, given the byte
    offsets that the lane bits add (lane bits 0, 1, ...)."""
    phase = _phase(lane_offsets, width)
    full, bank = [], []
    for v in phase:
        _add(full, apply(v))
        _add(bank, _bank(apply(v), width))
    return 1 << (len(full) - len(bank))


def choose(accesses: list[tuple[list[int], int]], lo: int, nbits: int):
    """An offset map (bytes -> bytes) for the given accesses, each (the byte offsets of its
    lane bits, bytes per lane), or None when it would not reduce their wavefronts. ``lo``:
    log2 of the widest vector (bits below it stay), ``nbits``: log2 of the scratch size."""
    if nbits <= ROW or lo >= ROW:
        return None
    masks: dict[int, int] = {}

    def apply(a: int, m=masks) -> int:
        out = a
        j = ROW
        while a >> j:
            if a >> j & 1:
                out ^= m.get(j, 0)
            j += 1
        return out

    fixed: set[int] = set()  # high bits whose mask can no longer change
    for offsets, width in accesses:
        phase = _phase(offsets, width)
        full, bank = [], []
        for v in phase:
            if not _add(full, v):
                continue  # the same address as lanes already seen: a broadcast, no conflict
            if not _add(bank, _bank(apply(v), width)):
                for j in (j for j in range(ROW, nbits) if v >> j & 1 and j not in fixed):
                    hit = False
                    for t in range(max(lo, width.bit_length() - 1), ROW):
                        trial = {**masks, j: masks.get(j, 0) ^ (1 << t)}
                        if _add(bank, _bank(apply(v, trial), width)):
                            masks[j] = trial[j]
                            hit = True
                            break
                    if hit:
                        break
            fixed.update(j for j in range(ROW, nbits) if v >> j & 1)
    if not masks:
        return None
    before = sum(wavefronts(o, w) for o, w in accesses)
    after = sum(wavefronts(o, w, apply) for o, w in accesses)
    return apply if after < before else None

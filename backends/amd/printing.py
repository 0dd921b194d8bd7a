"""``gl.device_print`` on AMD through a print buffer the launcher owns.

ROCm's own device printf rides on the hostcall buffer, whose protocol is undocumented.
We use our own instead: a kernel that prints gets one more global-buffer argument
(``metadata.PRINT_ARG``), and every element printed becomes a fixed-size record in it,
which the launcher decodes after the kernel has finished and prints in the NVIDIA
backend's format -- ``pid (x, y, z) <prefix>[i, j]: value`` for a tile element,
``pid (x, y, z) <prefix>value`` for a scalar, one line per element, each element once
(by the thread that owns it; scalars by work-item 0).

The buffer, all little-endian dwords::

    header   cursor (records reserved so far), capacity (records), record bytes, MAGIC
    records  site, flat index, value lo, value hi, pid x, pid y, pid z, MAGIC
    sink     one more record slot, never decoded

A print reserves its records with one returning ``global_atomic_add`` per owning lane
(all of that lane's records for one printed value at once). A record whose slot is
past the capacity is written to the sink instead, so nothing lands outside the buffer;
the cursor still counts it, so the host knows ``cursor - capacity`` records were lost.
The site says which printed value a record belongs to; the compiled kernel carries the
table of sites (prefix, dtype, shape). The cost: the launcher synchronizes the stream
after every launch of a kernel that prints (a debugging feature, like printf).
"""
from __future__ import annotations

import os
import struct
import sys

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace.layouts import free_bits

from . import metadata as md
from .emitter import dwords
from .layout import _as_vgpr_hoisted, combine, reg_part, row_major, thread_part, tid_pairs
from .memory import ExecMask, owner_lanes
from .mir import Imm, hi, lo

HEADER_BYTES = 16
RECORD_BYTES = 32
RECORD_DWORDS = RECORD_BYTES // 4
MAGIC = 0x52505447  # "GTPR"
DEFAULT_RECORDS = 1 << 17  # 4 MiB of records; GLUON_TRACE_PRINT_RECORDS overrides it
MAX_RECORDS = (1 << 32) // RECORD_BYTES - 2  # slot * 32 is a 32-bit byte offset


def print_records() -> int:
    """Records a print buffer holds: GLUON_TRACE_PRINT_RECORDS, or the default."""
    try:
        n = int(os.environ.get("GLUON_TRACE_PRINT_RECORDS", DEFAULT_RECORDS))
    except ValueError:
        n = DEFAULT_RECORDS
    return min(max(n, 1), MAX_RECORDS)


def buffer_bytes(records: int) -> int:
    return HEADER_BYTES + (records + 1) * RECORD_BYTES  # + the sink


def capacity_of(nbytes: int) -> int:
    return max(0, (nbytes - HEADER_BYTES) // RECORD_BYTES - 1)


def header(records: int) -> bytes:
    """What the launcher writes before each launch: an empty buffer of ``records``."""
    return struct.pack("<IIII", 0, records, RECORD_BYTES, MAGIC)


# -- device side ---------------------------------------------------------------------------------

def _state(em):
    """(buffer address SGPR pair, capacity SGPR, site table), set up on the first print:
    the address comes in through the kernel argument, the capacity from the header."""
    st = em.memo.get(("print",))
    if st is None:
        slot = md.kernarg_layout(em.g).print_slot
        base = em.arg_elem(-1, slot.offset, dt.pointer(dt.uint32))
        cap = em.s()
        with em.hoisted():
            em.emit("s_load_dword", [cap], [base, Imm(4)], kind="smem")
        st = em.memo[("print",)] = (base, cap, em.__dict__.setdefault("print_sites", []))
    return st


def lower_print(em, op):
    for v in op.operands:
        _print_value(em, op.attrs.get("prefix", ""), v)


def _print_value(em, prefix: str, v):
    base, cap, sites = _state(em)
    ty = v.type
    d = ty.dtype
    site = len(sites)
    sites.append((prefix, d.name, tuple(ty.shape)))
    if ty.is_scalar:
        lin, elems, idx = None, [em.vals[v]], [Imm(0)]
    else:
        lin = em.linear(ty)
        free_r = free_bits(lin)["reg"]
        regs = [r for r in range(lin.num_regs) if not r & free_r]  # each element once
        fn = row_major(lin.shape)
        pairs = tid_pairs(em, lin, fn)
        tp = thread_part(em, pairs)
        elems = [em.vals[v][r] for r in regs]
        idx = [combine(em, tp, pairs, reg_part(lin, fn, r)) for r in regs]
    vals = []
    for x in elems:
        x = em.real(x)
        vals.append((lo(x), hi(x)) if dwords(d) == 2 else (x, Imm(0)))
    zero = _as_vgpr_hoisted(em, Imm(0))
    with ExecMask(em, None, owner_lanes(em, lin)):
        first = em.v()
        # device scope (sc1 on gfx942, whose L2 is per XCD): one cursor for every workgroup
        em.emit("global_atomic_add", [first], [zero, em.to_v(Imm(len(vals))), base],
                suffix=em.t.glc, kind="vmem_atomic")
        pid = em.v(4)
        for k in range(3):
            em.emit("v_mov_b32", [pid[k]], [em.wgid[k]], kind="valu")
        em.emit("v_mov_b32", [pid[3]], [Imm(MAGIC)], kind="valu")
        for j, ((vlo, vhi), i) in enumerate(zip(vals, idx)):
            slot = first if j == 0 else em.valu("v_add_u32", em.v(), [Imm(j), first])
            slot = em.valu("v_min_u32", em.v(), [cap, slot])  # past the capacity: the sink
            off = em.valu("v_lshlrev_b32", em.v(), [Imm(5), slot])
            data = em.v(4)
            for k, x in enumerate((Imm(site), i, vlo, vhi)):
                em.emit("v_mov_b32", [data[k]], [x], kind="valu")
            em.emit("global_store_dwordx4", [], [off, data, base], suffix=f"offset:{HEADER_BYTES}",
                    kind="vmem_store")
            em.emit("global_store_dwordx4", [], [off, pid, base],
                    suffix=f"offset:{HEADER_BYTES + 16}", kind="vmem_store")


# -- host side ------------------------------------------------------------------------------------

def _c_float(x: float) -> str:
    """C's ``%f`` (the NVIDIA backend prints floats through vprintf)."""
    if x != x:
        return "-nan" if np.signbit(x) else "nan"
    return "%f" % x


def format_value(dtype: str, lo: int, hi: int) -> str:
    """A record's value bits as the NVIDIA backend's printf conversion prints them."""
    if dtype.startswith("ptr_"):
        return f"0x{lo | hi << 32:x}"
    d = dt.BY_NAME[dtype]
    if d.is_fp8:  # travels as its byte (fp8.py)
        from gluon_trace import fp8
        return _c_float(float(fp8.decode(np.uint8(lo & 0xFF), d.name)))
    if d.is_floating:  # narrower floats travel as the float32 of their value
        bits = lo | hi << 32 if d.bits == 64 else lo
        x = np.array([bits], np.uint64 if d.bits == 64 else np.uint32).view(
            np.float64 if d.bits == 64 else np.float32)[0]
        return _c_float(float(x))
    if d.is_bool:
        return "1" if lo else "0"
    w = 64 if d.bits == 64 else d.bits
    v = (lo | hi << 32) & ((1 << w) - 1)
    if d.is_signed and v >> (w - 1):
        v -= 1 << w
    return str(v)


def format_record(site, index: int, lo: int, hi: int, pid) -> str:
    prefix, dtype, shape = site
    head = f"pid ({pid[0]}, {pid[1]}, {pid[2]}) {prefix}"
    value = format_value(dtype, lo, hi)
    if not shape:
        return head + value
    coords = np.unravel_index(index, tuple(shape))
    return f"{head}[{', '.join(str(int(c)) for c in coords)}]: {value}"


def decode(raw: bytes, sites) -> tuple[list[str], int]:
    """(lines in the order the GPU wrote them, records lost) from a print buffer: its
    header and at least the records the header says were kept."""
    if len(raw) < HEADER_BYTES:
        raise ValueError("a print buffer is at least its 16-byte header")
    cursor, cap, rec, magic = struct.unpack_from("<IIII", raw, 0)
    if magic != MAGIC or rec != RECORD_BYTES:
        raise ValueError("the print buffer's header is not ours (was it overwritten?)")
    n = min(cursor, cap)
    if len(raw) < HEADER_BYTES + n * RECORD_BYTES:
        raise ValueError(f"the header says {n} records were kept; the buffer holds fewer")
    recs = np.frombuffer(raw, np.uint32, n * RECORD_DWORDS, HEADER_BYTES).reshape(n, RECORD_DWORDS)
    lines, lost = [], max(0, cursor - cap)
    for site, index, low, high, px, py, pz, mark in recs.tolist():
        if mark != MAGIC or site >= len(sites):
            lost += 1  # reserved but never written: cannot happen once the kernel finished
            continue
        lines.append(format_record(sites[site], index, low, high, (px, py, pz)))
    return lines, lost


def report(lines, lost: int, name: str = "", out=None, err=None) -> None:
    """Print the decoded lines (stdout, as printf would), then any loss (stderr)."""
    out = out or sys.stdout
    err = err or sys.stderr
    if lines:
        out.write("\n".join(lines) + "\n")
        out.flush()
    if lost:
        err.write(f"gluon_trace: {lost} device_print record{'s' if lost != 1 else ''} lost"
                  f"{' in ' + name if name else ''}, print buffer full (set "
                  "GLUON_TRACE_PRINT_RECORDS to more than the records it holds)\n")
        err.flush()

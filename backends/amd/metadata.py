"""The kernel's ABI on disk: kernel-argument layout, the ``.amdhsa_kernel`` descriptor,
the code-object v5 ``.amdgpu_metadata`` YAML, and reading them back out of an HSACO.

Explicit arguments come first (pointers 8-byte aligned, every scalar in its own
4-byte-aligned slot so ``s_load_dword`` can fetch it), then the hidden arguments the
runtime fills, at the offsets clang uses for code object v5. A kernel that calls
``gl.device_print`` gets one more explicit argument the user never passes, ``PRINT_ARG``:
the print buffer the launcher owns (see ``printing.py``). The launcher never trusts this
module's layout: it packs from the metadata read back from the binary.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

HIDDEN = (  # name, offset from the start of the hidden block, size
    ("hidden_block_count_x", 0, 4), ("hidden_block_count_y", 4, 4), ("hidden_block_count_z", 8, 4),
    ("hidden_group_size_x", 12, 2), ("hidden_group_size_y", 14, 2), ("hidden_group_size_z", 16, 2),
    ("hidden_remainder_x", 18, 2), ("hidden_remainder_y", 20, 2), ("hidden_remainder_z", 22, 2),
    ("hidden_global_offset_x", 40, 8), ("hidden_global_offset_y", 48, 8),
    ("hidden_global_offset_z", 56, 8), ("hidden_grid_dims", 64, 2),
)
HIDDEN_BYTES = 256
PRINT_ARG = "__gt_print_buffer"  # the launcher's print buffer (kernels with gl.device_print)


@dataclass
class ArgSlot:
    name: str
    dtype: object
    offset: int
    size: int
    kind: str  # global_buffer / by_value


@dataclass
class KernargLayout:
    args: list = field(default_factory=list)
    hidden_start: int = 0
    hidden: dict = field(default_factory=dict)
    size: int = 0
    print_slot: ArgSlot | None = None  # after the user's arguments, when the kernel prints


def _align(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def kernarg_layout(graph) -> KernargLayout:
    lay = KernargLayout()
    off = 0
    for v, name in zip(graph.args, graph.arg_names):
        d = v.type.dtype
        if d.is_ptr:
            size, align, kind = 8, 8, "global_buffer"
        else:
            size, align, kind = d.itemsize, max(4, d.itemsize), "by_value"
        off = _align(off, align)
        lay.args.append(ArgSlot(name, d, off, size, kind))
        off += size
    if has_print(graph):
        off = _align(off, 8)
        lay.print_slot = ArgSlot(PRINT_ARG, None, off, 8, "global_buffer")
        off += 8
    lay.hidden_start = _align(off, 8)
    lay.hidden = {n: lay.hidden_start + o for n, o, _ in HIDDEN}
    lay.size = lay.hidden_start + HIDDEN_BYTES
    return lay


def has_print(graph) -> bool:
    return any(op.name == "print" for op in graph.body.walk())


def _q(s: str) -> str:
    """A YAML single-quoted string: never read as a bool (`n`, `y`, `on`) or a number."""
    return "'" + s.replace("'", "''") + "'"


@dataclass
class Spills:
    """What register spilling asks of the ABI: private segment bytes per lane, how it is
    reached (gfx90a: the private segment buffer in s[0:3] and the wave's offset in a
    system SGPR; gfx942/gfx1100: architected flat scratch), and counts for the summary."""
    scratch_bytes: int = 0
    private_buffer: bool = False
    vgprs: int = 0     # dwords spilled to scratch
    sgprs: int = 0     # dwords spilled to VGPR lanes

    @staticmethod
    def of(scratch) -> "Spills":
        if scratch is None:
            return Spills()
        return Spills(scratch.bytes, scratch.rsrc is not None, scratch.spilled_v,
                      scratch.spilled_s)


def metadata_kernel(*, name, lay: KernargLayout, lds: int, vgprs: int, sgprs: int, wave: int,
                    workgroup: int, gfx9: bool, spills: Spills = Spills(), agprs: int = 0) -> list:
    """The lines of one kernel's entry in ``amdhsa.kernels``."""
    lines = [f"  - .name: {_q(name)}",
             f"    .symbol: {_q(name + '.kd')}",
             f"    .kernarg_segment_size: {lay.size}",
             "    .kernarg_segment_align: 8",
             f"    .group_segment_fixed_size: {lds}",
             f"    .private_segment_fixed_size: {spills.scratch_bytes}",
             f"    .wavefront_size: {wave}",
             f"    .sgpr_count: {sgprs}",
             f"    .vgpr_count: {vgprs}",
             f"    .max_flat_workgroup_size: {workgroup}",
             "    .uniform_work_group_size: 1",
             f"    .vgpr_spill_count: {spills.vgprs}",
             f"    .sgpr_spill_count: {spills.sgprs}"]
    if gfx9:
        lines.append(f"    .agpr_count: {agprs}")
    lines.append("    .args:")
    for a in lay.args + ([lay.print_slot] if lay.print_slot else []):
        lines += [f"      - .name: {_q(a.name)}", f"        .offset: {a.offset}",
                  f"        .size: {a.size}", f"        .value_kind: {a.kind}"]
        if a.kind == "global_buffer":
            lines += ["        .address_space: global"]
    for n, o, size in HIDDEN:
        lines += [f"      - .offset: {lay.hidden_start + o}", f"        .size: {size}",
                  f"        .value_kind: {n}"]
    return lines


def metadata_document(target: str, kernels: list) -> str:
    """The code-object v5 metadata YAML for kernels (lists of lines)."""
    lines = ["---", "amdhsa.version:", "  - 1", "  - 2",
             f"amdhsa.target: {_q('amdgcn-amd-amdhsa--' + target)}", "amdhsa.kernels:"]
    for k in kernels:
        lines += k
    lines.append("...")
    return "\n".join(lines) + "\n"


def descriptor(*, name, lds: int, kernarg_size: int, vgprs: int, sgprs: int, gfx9: bool,
               wave: int, spills: Spills = Spills(), agprs: int = 0) -> str:
    v = max(vgprs, 1)
    # CDNA: AGPRs (MFMA accumulators) follow the VGPRs from accum_offset (a multiple of 4) on,
    # and next_free_vgpr counts both
    acc_off = min(256, _align(v, 4))
    if agprs:
        v = acc_off + agprs
    lines = [f".amdhsa_kernel {name}",
             f"  .amdhsa_group_segment_fixed_size {lds}",
             f"  .amdhsa_private_segment_fixed_size {spills.scratch_bytes}",
             f"  .amdhsa_kernarg_size {kernarg_size}",
             f"  .amdhsa_user_sgpr_count {6 if spills.private_buffer else 2}",
             "  .amdhsa_user_sgpr_private_segment_buffer 1" if spills.private_buffer else None,
             "  .amdhsa_user_sgpr_kernarg_segment_ptr 1",
             "  .amdhsa_system_sgpr_workgroup_id_x 1",
             "  .amdhsa_system_sgpr_workgroup_id_y 1",
             "  .amdhsa_system_sgpr_workgroup_id_z 1",
             "  .amdhsa_system_vgpr_workitem_id 0",
             f"  .amdhsa_next_free_vgpr {v}",
             f"  .amdhsa_next_free_sgpr {max(sgprs, 5)}",
             "  .amdhsa_reserve_vcc 1",
             "  .amdhsa_float_denorm_mode_32 3",
             "  .amdhsa_float_denorm_mode_16_64 3"]
    lines = [x for x in lines if x is not None]
    if spills.scratch_bytes:
        # the wave's scratch offset in an SGPR (private segment buffer targets), or the
        # hardware's own flat scratch base (architected flat scratch)
        lines.append("  .amdhsa_system_sgpr_private_segment_wavefront_offset 1"
                     if spills.private_buffer else "  .amdhsa_enable_private_segment 1")
    if gfx9:
        lines.append(f"  .amdhsa_accum_offset {acc_off}")
    if wave == 32:
        lines.append("  .amdhsa_wavefront_size32 1")
    lines.append(".end_amdhsa_kernel")
    return "\n".join(lines)


# -- reading an HSACO back -------------------------------------------------------------------

class ElfError(ValueError):
    pass


def _sections(data: bytes):
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ElfError("not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    secs = []
    for k in range(shnum):
        name, typ, flags, addr, off, size, link, info, align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + k * shentsize)
        secs.append(dict(name_off=name, type=typ, addr=addr, offset=off, size=size, link=link,
                         entsize=entsize))
    strtab = secs[shstrndx]
    for s in secs:
        s["name"] = _cstr(data, strtab["offset"] + s["name_off"])
    return secs


def _cstr(data: bytes, at: int) -> str:
    end = data.index(b"\0", at)
    return data[at:end].decode()


def read_notes(data: bytes):
    """[(owner, type, desc bytes)] of every note section."""
    out = []
    for s in _sections(data):
        if s["type"] != 7:  # SHT_NOTE
            continue
        p, end = s["offset"], s["offset"] + s["size"]
        while p + 12 <= end:
            namesz, descsz, typ = struct.unpack_from("<III", data, p)
            p += 12
            owner = data[p:p + namesz].rstrip(b"\0").decode()
            p += _align(namesz, 4)
            out.append((owner, typ, data[p:p + descsz]))
            p += _align(descsz, 4)
    return out


def read_symbols(data: bytes) -> dict:
    """{name: (value, size, section index)} from the symbol tables."""
    secs = _sections(data)
    syms = {}
    for s in secs:
        if s["type"] not in (2, 11):  # SYMTAB, DYNSYM
            continue
        strs = secs[s["link"]]
        for k in range(s["size"] // 24):
            name, info, other, shndx, value, size = struct.unpack_from(
                "<IBBHQQ", data, s["offset"] + 24 * k)
            if name:
                syms[_cstr(data, strs["offset"] + name)] = (value, size, shndx)
    return syms


def read_metadata(data: bytes) -> dict:
    """The code-object metadata map (NT_AMDGPU_METADATA, msgpack) of an HSACO."""
    for owner, typ, desc in read_notes(data):
        if owner == "AMDGPU" and typ == 32:
            return msgpack_decode(desc)
    raise ElfError("no AMDGPU metadata note in the code object")


def read_descriptor(data: bytes, kernel: str) -> dict:
    """Fields of the 64-byte kernel descriptor ``<kernel>.kd``."""
    secs = _sections(data)
    value, size, shndx = read_symbols(data)[kernel + ".kd"]
    sec = secs[shndx]
    raw = data[sec["offset"] + value - sec["addr"]:][:64]
    grp, priv, kargs = struct.unpack_from("<III", raw, 0)
    rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", raw, 44)
    props, = struct.unpack_from("<H", raw, 56)
    return {
        "group_segment_fixed_size": grp, "private_segment_fixed_size": priv,
        "kernarg_size": kargs,
        "vgpr_granules": (rsrc1 & 0x3F) + 1, "sgpr_granules": ((rsrc1 >> 6) & 0xF) + 1,
        "float_denorm_mode_32": (rsrc1 >> 16) & 3, "float_denorm_mode_16_64": (rsrc1 >> 18) & 3,
        "user_sgpr_count": (rsrc2 >> 1) & 0x1F,
        "workgroup_id": tuple((rsrc2 >> b) & 1 for b in (7, 8, 9)),
        "kernarg_segment_ptr": (props >> 3) & 1, "wavefront_size32": (props >> 10) & 1,
        "private_segment_buffer": props & 1,
        "rsrc1": rsrc1, "rsrc2": rsrc2, "rsrc3": rsrc3,
    }


# -- a small msgpack decoder (the subset code-object metadata uses) ---------------------------

def msgpack_decode(buf: bytes):
    try:
        import msgpack
        return msgpack.unpackb(buf, raw=False, strict_map_key=False)
    except ImportError:
        obj, _ = _mp(buf, 0)
        return obj


def _mp(b: bytes, p: int):
    t = b[p]
    p += 1
    if t <= 0x7F:
        return t, p
    if t >= 0xE0:
        return t - 256, p
    if 0x80 <= t <= 0x8F:
        return _mp_map(b, p, t & 0xF)
    if 0x90 <= t <= 0x9F:
        return _mp_arr(b, p, t & 0xF)
    if 0xA0 <= t <= 0xBF:
        n = t & 0x1F
        return b[p:p + n].decode(), p + n
    if t == 0xC0:
        return None, p
    if t in (0xC2, 0xC3):
        return t == 0xC3, p
    fixed = {0xCC: "<B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i",
             0xD3: ">q", 0xCA: ">f", 0xCB: ">d"}
    if t in fixed:
        fmt = fixed[t]
        (v,) = struct.unpack_from(fmt, b, p)
        return v, p + struct.calcsize(fmt)
    lens = {0xD9: ">B", 0xDA: ">H", 0xDB: ">I", 0xC4: ">B", 0xC5: ">H", 0xC6: ">I",
            0xDC: ">H", 0xDD: ">I", 0xDE: ">H", 0xDF: ">I"}
    if t in lens:
        (n,) = struct.unpack_from(lens[t], b, p)
        p += struct.calcsize(lens[t])
        if t in (0xD9, 0xDA, 0xDB):
            return b[p:p + n].decode(), p + n
        if t in (0xC4, 0xC5, 0xC6):
            return bytes(b[p:p + n]), p + n
        if t in (0xDC, 0xDD):
            return _mp_arr(b, p, n)
        return _mp_map(b, p, n)
    raise ElfError(f"unsupported msgpack byte {t:#x}")


def _mp_map(b, p, n):
    out = {}
    for _ in range(n):
        k, p = _mp(b, p)
        v, p = _mp(b, p)
        out[k] = v
    return out, p


def _mp_arr(b, p, n):
    out = []
    for _ in range(n):
        v, p = _mp(b, p)
        out.append(v)
    return out, p

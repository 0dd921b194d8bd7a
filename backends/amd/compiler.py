"""The pipeline: graph -> machine IR -> registers -> s_waitcnt -> hazards -> text ->
HSACO, and the CompiledKernel with its resources read back from the binary."""
from __future__ import annotations

import gc
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass

from gluon_trace.cache import DECOMPOSE_SOURCE, SCHEDULE_SOURCE, disk_cache, file_stamp, make_key
from gluon_trace.compiled import CompiledKernel
from gluon_trace.errors import CompileError

from . import metadata as md
from . import printing
from .agpr import agpr_variants
from .dce import remove_dead, reuse_literals
from .emitter import Emitter, prologue
from .hazards import fix_hazards
from .mir import Inst, Label, render_inst
from .regalloc import allocate, check_assigned
from .spill import Scratch
from .waitcnt import insert_waits

EMITTER_VERSION = 5  # bump when the emitted code changes for the same graph


@dataclass
class Emitted:
    text: str
    name: str
    target: str
    vgprs: int
    sgprs: int
    lds: int
    layout: md.KernargLayout
    code: list
    loops: list
    kernel: "KernelText"
    prints: list       # gl.device_print sites: (prefix, dtype name, shape), by site id
    agprs: int = 0     # MFMA accumulators in AGPRs (gfx90a, gfx942: agpr.py)


@contextmanager
def _gc_paused():
    """The collector off while a kernel is lowered: a spilling kernel makes millions of
    short-lived instructions, operands and dicts, and the collections they triggered (full
    ones walking everything alive) took a third of its compile; lowering leaves no
    cycles worth collecting midway (the peak memory is the same)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def lower(graph, target: str) -> Emitted:
    with _gc_paused():
        return _lower(graph, target)


def _lower(graph, target: str) -> Emitted:
    from .tensorcore import refuse_unlowered
    refuse_unlowered(graph)
    from gluon_trace.decompose import F64_MATH, expand_math
    from .fp8 import refuse_unlowered as refuse_fp8
    refuse_fp8(graph, target)  # fp8: gfx942's FNUZ formats only
    # float64 exp/log/sin/... become core ops here (one implementation for every backend)
    graph = expand_math(graph, F64_MATH)
    from gluon_trace.schedule import hoist_stores
    graph = hoist_stores(graph)  # each tile stored (and dead) as early as memory order allows
    em = Emitter(graph, target)
    lay = md.kernarg_layout(graph)
    for k, (v, slot) in enumerate(zip(graph.args, lay.args)):
        em.vals[v] = em.arg_elem(k, slot.offset, slot.dtype)
        if graph.arg_attrs[k].get("divisibility"):
            em.set_mult(em.vals[v], graph.arg_attrs[k]["divisibility"])
    em.emit_block(graph.body)
    em.loc = None
    em.emit("s_endpgm", kind="end")
    code = remove_dead(reuse_literals(prologue(em, lay.hidden_start, lay.hidden) + em.code))
    t = em.t
    alloc = None
    for with_agprs in agpr_variants(code, t):  # MFMA accumulators in AGPRs, unless VGPRs + AGPRs do not fit
        try:  # without spilling: spill code rewrites instructions both programs share
            alloc = allocate(with_agprs, em.loops, name=graph.name, vgpr_limit=t.vgpr_limit(graph.num_warps),
                             sgpr_limit=t.sgpr_limit, target=t.name, num_warps=graph.num_warps)
        except CompileError:
            alloc = None
        if alloc is not None and not fits_unified(graph, alloc):
            alloc = None
        if alloc is not None:
            break
    if alloc is None:  # all in VGPRs (spilling where they do not fit)
        alloc = allocate(code, em.loops, name=graph.name, vgpr_limit=t.vgpr_limit(graph.num_warps),
                         sgpr_limit=t.sgpr_limit, target=t.name, num_warps=graph.num_warps,
                         scratch=Scratch(t, em.kernarg, em.wgid))
    code = alloc.code  # with spill code, when the kernel did not fit
    check_assigned(code)
    code = insert_waits(code, t)
    code = fix_hazards(code, t)
    vgprs = _shift64_bump(code, alloc.vgprs) if t.name == "gfx90a" else alloc.vgprs
    kt = render_kernel(graph, em, code, lay, vgprs=vgprs, sgprs=alloc.sgprs, scratch=alloc.scratch,
                       agprs=alloc.agprs)
    text = module_text(t.name, [kt])
    return Emitted(text, graph.name, t.name, vgprs, alloc.sgprs, em.lds_size, lay, code, em.loops,
                   kt, list(getattr(em, "print_sites", [])), alloc.agprs)


def fits_unified(graph, alloc) -> bool:
    """VGPRs (rounded up to accum_offset's granule of 4) and AGPRs share each lane's 512 registers
    (fewer when several waves share a SIMD), at most 256 of them AGPRs, which are not spilled."""
    from .agpr import AGPR_MAX
    pool = 512 // -(-graph.num_warps // 4)  # the workgroup's waves per SIMD share its file
    need = -(-max(alloc.vgprs, 1) // 4) * 4 + alloc.agprs
    return alloc.agprs <= AGPR_MAX and need <= pool


def _shift64_bump(code, vgprs: int) -> int:
    """gfx90a misreads a 64-bit shift's amount in the last VGPR of an 8-register block
    when the register after it is unallocated: allocate one more (LLVM's workaround)."""
    for i in code:
        if isinstance(i, Inst) and i.op in ("v_lshlrev_b64", "v_lshrrev_b64", "v_ashrrev_i64"):
            amt = i.uses[0]
            phys = getattr(amt, "phys", None) if not hasattr(amt, "reg") else \
                (amt.reg.phys + amt.index if amt.reg.phys is not None else None)
            if phys is not None and getattr(amt, "cls", "") == "v" and phys % 8 == 7 and phys + 1 >= vgprs:
                vgprs = phys + 2
    return vgprs


@dataclass
class KernelText:
    code: str          # the function: label, instructions, size
    descriptor: str    # .amdhsa_kernel block
    meta: list         # its amdhsa.kernels entry (YAML lines)


_INVERSE = {"s_cbranch_scc0": "s_cbranch_scc1", "s_cbranch_scc1": "s_cbranch_scc0",
            "s_cbranch_vccz": "s_cbranch_vccnz", "s_cbranch_vccnz": "s_cbranch_vccz",
            "s_cbranch_execz": "s_cbranch_execnz", "s_cbranch_execnz": "s_cbranch_execz"}
_MAX_INST_BYTES = 12  # the longest encoding (VOP3 + a 32-bit literal): distances are overestimated
_BRANCH_REACH = 32767 * 4  # a branch's simm16 counts dwords


def _far_branches(code) -> set:
    """Indices of branches whose target may lie beyond simm16's reach (LLVM relaxes these too)."""
    pos, at = {}, 0
    for k, i in enumerate(code):
        if isinstance(i, Label):
            pos[i.name] = at
        else:
            at += _MAX_INST_BYTES
    far, at = set(), 0
    for k, i in enumerate(code):
        if isinstance(i, Label):
            continue
        at += _MAX_INST_BYTES
        if i.kind in ("branch", "cbranch") and i.target in pos and abs(pos[i.target] - at) > _BRANCH_REACH:
            far.add(k)
    return far


def _long_jump(target: str, pc_label: str, base: int) -> list[str]:
    """Jump anywhere: the PC plus the label's distance, through an SGPR pair."""
    return [f"  s_getpc_b64 s[{base}:{base + 1}]", f"{pc_label}:",
            f"  s_add_u32 s{base}, s{base}, ({target}-{pc_label})&4294967295",
            f"  s_addc_u32 s{base + 1}, s{base + 1}, ({target}-{pc_label})>>32",
            f"  s_setpc_b64 s[{base}:{base + 1}]"]


def render_kernel(graph, em, code, lay, *, vgprs, sgprs, scratch=None, agprs=0) -> KernelText:
    t = em.t
    name = graph.name
    out = [f".globl {name}", ".p2align 8", f".type {name},@function", f"{name}:"]
    last = None
    far = _far_branches(code)
    if far:  # a pair above every allocated SGPR holds the jump address
        base = sgprs + (sgprs & 1)
        if base + 2 > t.sgpr_limit:
            raise CompileError(f"kernel {name}: a branch spans more than 128 KiB of code and no SGPR pair "
                               "is left for a long jump", graph.body.ops[0].loc if graph.body.ops else None)
        sgprs = base + 2
    for k, i in enumerate(code):
        if isinstance(i, Label):
            out.append(f"{i.name}:")
            continue
        if i.loc is not None and i.loc != last:
            out.append(f"  ; loc {i.loc.file}:{i.loc.line}")
            last = i.loc
        if k in far:
            skip, pc = f".Lnear_{name}_{k}", f".Lpc_{name}_{k}"
            if i.kind == "cbranch":
                out.append(f"  {_INVERSE[i.op]} {skip}")
            out += _long_jump(i.target, pc, base)
            if i.kind == "cbranch":
                out.append(f"{skip}:")
            continue
        out.append("  " + render_inst(i))
    out += [f".Lfunc_end_{name}:", f".size {name}, .Lfunc_end_{name}-{name}"]
    spills = md.Spills.of(scratch)
    desc = md.descriptor(name=name, lds=em.lds_size, kernarg_size=lay.size, vgprs=vgprs,
                         sgprs=sgprs, gfx9=t.gfx9, wave=t.wave, spills=spills, agprs=agprs)
    meta = md.metadata_kernel(name=name, lay=lay, lds=em.lds_size, vgprs=max(vgprs, 1),
                              sgprs=max(sgprs, 5) + 2, wave=t.wave,
                              workgroup=graph.num_warps * t.wave, gfx9=t.gfx9, spills=spills,
                              agprs=agprs)
    return KernelText("\n".join(out), desc, meta)


def module_text(target: str, kernels: list) -> str:
    """One assembly file holding several kernels (each needs a distinct name)."""
    out = [f'.amdgcn_target "amdgcn-amd-amdhsa--{target}"', ".amdhsa_code_object_version 5",
           ".text"]
    out += [k.code for k in kernels]
    out += ["", ".rodata", ".p2align 6"]
    out += [k.descriptor for k in kernels]
    out += ["", ".amdgpu_metadata",
            md.metadata_document(target, [k.meta for k in kernels]).rstrip(),
            ".end_amdgpu_metadata", ""]
    return "\n".join(out)


_stamp: str | None = None


def _source_stamp() -> str:
    """The backend's own files (sizes and mtimes, as Python's bytecode cache): a fix to the
    emitter invalidates cached binaries even when nobody bumps EMITTER_VERSION."""
    global _stamp
    if _stamp is None:
        d = os.path.dirname(os.path.abspath(__file__))
        _stamp = "|".join(file_stamp(os.path.join(d, n)) for n in sorted(os.listdir(d))
                          if n.endswith(".py") and n != "launcher.py")
    return _stamp


def emit_text(graph, target: str) -> str:
    return lower(graph, target).text


def compile_graph(graph, target: str) -> CompiledKernel:
    from gluon_trace import __version__
    from .assembler import assemble, find_toolchain
    tc = find_toolchain()
    key = make_key(backend="amd", graph=graph.text, target=target, assembler=tc.version,
                   origin=tc.origin, library=__version__, emitter=EMITTER_VERSION,
                   decompose=file_stamp(DECOMPOSE_SOURCE), schedule=file_stamp(SCHEDULE_SOURCE),
                   sources=_source_stamp())
    def build() -> bytes:
        e = lower(graph, target)
        hsaco = assemble(e.text, target, graph.name)
        head = json.dumps({"asm": e.text, "prints": e.prints}).encode()
        return len(head).to_bytes(8, "little") + head + hsaco

    payload, hit = disk_cache().get_or_build(key, build)
    n = int.from_bytes(payload[:8], "little")
    head = json.loads(payload[8:8 + n])
    hsaco = payload[8 + n:]
    return from_hsaco(graph, target, head["asm"], hsaco, assembler=tc.version, cached=hit,
                      prints=head.get("prints", []))


def from_hsaco(graph, target, asm: str, hsaco: bytes, assembler="", cached=False,
               prints=()) -> CompiledKernel:
    """A CompiledKernel whose resources and argument layout come from the binary; a kernel
    that prints also carries its print sites and the print buffer size it wants."""
    meta = md.read_metadata(hsaco)
    (k,) = [k for k in meta["amdhsa.kernels"] if k[".name"] == graph.name]
    args = []
    explicit = [a for a in k[".args"] if not a[".value_kind"].startswith("hidden")]
    for v, a in zip(graph.args, explicit):
        args.append((a.get(".name", ""), str(v.type.dtype), a[".offset"], a[".size"]))
    return CompiledKernel(
        name=graph.name, target=target, asm=asm, binary=hsaco,
        registers=k[".vgpr_count"], shared_bytes=k[".group_segment_fixed_size"],
        spill_bytes=k[".private_segment_fixed_size"], num_warps=graph.num_warps,
        threads_per_warp=k[".wavefront_size"],
        extra={"sgprs": k[".sgpr_count"], "scratch_bytes": k[".private_segment_fixed_size"],
               "spilled_vgprs": k.get(".vgpr_spill_count", 0),
               "spilled_sgprs": k.get(".sgpr_spill_count", 0),
               "agprs": k.get(".agpr_count", 0),  # MFMA accumulators (registers: the VGPRs)
               "kernarg_bytes": k[".kernarg_segment_size"], "assembler": assembler,
               "cached": cached, "hsaco_bytes": len(hsaco),
               **_print_extra(prints)},
        arg_layout=args)


def _print_extra(prints) -> dict:
    if not prints:
        return {}
    sites = [(str(p), str(d), tuple(int(x) for x in s)) for p, d, s in prints]
    return {"print_sites": sites, "print_buffer_bytes": printing.buffer_bytes(printing.print_records())}

"""graph -> PTX -> cubin, with the in-process and on-disk caches.

The disk-cache key is the graph's text (which holds the signature, layouts, constexprs
and every op), the target, the ptxas version, the library version and a hash of this
backend's source, so a change to the emitter never serves a stale binary.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct

from gluon_trace.cache import DECOMPOSE_SOURCE, SCHEDULE_SOURCE, disk_cache, file_stamp, make_key
from gluon_trace.compiled import CompiledKernel
from gluon_trace.errors import CompileError
from gluon_trace.ir import Graph, TensorDescType

from . import ptxas
from .ptx import param_type

_memory: dict = {}
_src_hash: str | None = None


def source_hash() -> str:
    global _src_hash
    if _src_hash is None:
        # sizes and mtimes (as Python's own bytecode cache): cheap enough for every process
        h = hashlib.sha256()
        d = os.path.dirname(os.path.abspath(__file__))
        for name in sorted(os.listdir(d)):
            if name.endswith(".py") and name != "launcher.py":
                h.update(file_stamp(os.path.join(d, name)).encode())
        h.update(file_stamp(DECOMPOSE_SOURCE).encode())  # the float64 expansions emit() applies
        h.update(file_stamp(SCHEDULE_SOURCE).encode())  # and the store hoisting
        _src_hash = h.hexdigest()[:16]
    return _src_hash


def arg_layout(graph: Graph) -> list:
    """(name, dtype, offset, size) of each kernel parameter at its natural alignment."""
    out, off = [], 0
    for v, name in zip(graph.args, graph.arg_names):
        if isinstance(v.type, TensorDescType):  # CUtensorMap (64-aligned) + a u32 per global dim
            off = (off + 63) // 64 * 64
            out.append((name, "tensordesc", off, 128 + 4 * v.type.rank))
            off += 128 + 4 * v.type.rank
            continue
        pt = param_type(v.type.dtype)
        size = int(pt[1:]) // 8
        off = (off + size - 1) // size * size
        out.append((name, str(v.type.dtype), off, size))
        off += size
    return out


def _pack(ck: CompiledKernel) -> bytes:
    meta = {"name": ck.name, "target": ck.target, "asm": ck.asm, "registers": ck.registers,
            "shared_bytes": ck.shared_bytes, "spill_bytes": ck.spill_bytes, "num_warps": ck.num_warps,
            "threads_per_warp": ck.threads_per_warp, "extra": ck.extra, "arg_layout": ck.arg_layout}
    head = json.dumps(meta).encode()
    return struct.pack("<I", len(head)) + head + ck.binary


def _unpack(data: bytes) -> CompiledKernel:
    (n,) = struct.unpack_from("<I", data)
    meta = json.loads(data[4:4 + n])
    meta["arg_layout"] = [tuple(a) for a in meta["arg_layout"]]
    return CompiledKernel(binary=data[4 + n:], **meta)


# Per SM (sm_80 .. sm_90): registers, warps, shared memory usable by CTAs (bytes)
SM_REGS, SM_WARPS = 65536, 64
SM_SMEM = {"sm_80": 164 << 10, "sm_86": 100 << 10, "sm_89": 100 << 10, "sm_90": 228 << 10, "sm_90a": 228 << 10}


def ctas_per_sm(regs: int, warps: int, smem: int, target: str) -> int:
    """Resident CTAs per SM (registers are allocated per warp in units of 256)."""
    by_regs = SM_REGS // (max(8, -(-regs // 8) * 8) * 32 * warps)
    by_smem = SM_SMEM.get(target, 100 << 10) // (smem + 1024) if smem else 32
    return min(by_regs, SM_WARPS // warps, by_smem, 32)


def occupancy(regs: int, warps: int, smem: int, target: str) -> tuple[int, str]:
    """(resident CTAs per SM, what stops one more: registers, warps or shared memory)."""
    by = {"registers": SM_REGS // (max(8, -(-regs // 8) * 8) * 32 * warps),
          "warps": SM_WARPS // warps,
          "shared memory": SM_SMEM.get(target, 100 << 10) // (smem + 1024) if smem else 32}
    low = min(by.values())
    return min(low, 32), " and ".join(r for r, n in by.items() if n == low)


def register_cap(regs: int, warps: int, smem: int, target: str) -> int | None:
    """A register limit that fits one more CTA per SM, when registers are what stops it
    and the limit is within 1/8 of what ptxas used; else None."""
    k = ctas_per_sm(regs, warps, smem, target)
    if ctas_per_sm(32, warps, smem, target) <= k:
        return None  # warps or shared memory stop the next CTA, not registers
    cap = SM_REGS // (32 * warps * (k + 1)) // 8 * 8
    return cap if cap * 8 >= regs * 7 and cap < regs else None


# ptxas -O3 on a kernel whose threads each hold thousands of values spends time growing with
# the square of the values live at once, and allocates them to 64 registers with heavy
# spilling; -O1 takes 0.5-0.65 of the time and spills less (random programs of 1024 values
# a thread: 13 -> 7 s, 23 -> 14 s; see perf/results/compile-fuzz.json). Results are the
# same: every rounding is fixed in the PTX. Real kernels hold at most a few hundred.
LARGE_VALUES_PER_THREAD = 1024


def values_per_thread(graph: Graph) -> int:
    """The most 32-bit registers one thread needs for one tile of the kernel (64-bit
    values count twice; tiles of pointers not at all: their offsets' tile is counted, and
    affine addresses are one base plus immediates)."""
    from gluon_trace.ir import Type
    best = 0
    for op in graph.body.walk():
        for r in op.results:
            t = r.type
            if not isinstance(t, Type) or t.layout is None or not hasattr(t.layout, "to_linear") \
                    or t.dtype.is_ptr:
                continue
            try:
                regs = 1 << len(t.layout.to_linear(t.shape).reg_bases)
            except Exception:  # noqa: BLE001 - a layout without a linear form: not counted
                continue
            best = max(best, regs * (2 if t.dtype.itemsize == 8 else 1))
    return best


def ptxas_options(graph: Graph) -> tuple[tuple, str | None]:
    """(ptxas options, why) for the kernel: -O1 above LARGE_VALUES_PER_THREAD."""
    n = values_per_thread(graph)
    if n >= LARGE_VALUES_PER_THREAD:
        return ("-O1",), (f"-O1 ({n} registers of values per thread in one tile, >= "
                          f"{LARGE_VALUES_PER_THREAD}: -O3's time grows with their square)")
    return (), None


def build(graph: Graph, target: str) -> CompiledKernel:
    """Emit, then assemble. A kernel a few registers past an occupancy cliff (one CTA per SM
    fewer than its warps and shared memory allow) is assembled again with ``.maxnreg`` at
    the cliff, and that binary kept when ptxas fits it without spilling (CUDA's
    __launch_bounds__ does this on request; here it is automatic)."""
    from .emitter import emit, kernel_name
    text, line_locs, smem = emit(graph, target)
    name = kernel_name(graph)
    options, why = ptxas_options(graph)
    cubin, info = ptxas.assemble(text, target, line_locs, name, options)
    extra = {"ptxas_version": info["ptxas_version"], "stack_bytes": info["stack"],
             "spill_loads": info["spill_loads"], "scratch_bytes": smem}
    if why:
        extra["ptxas_opt_level"] = why
    from .warpspec import launch_warps
    warps = launch_warps(graph, target)
    # a warp-specialized kernel sets its own .maxnreg (the pool its partitions share)
    # a kernel that already spills would spill more under a lower limit: not assembled again
    spills = info["spill_stores"] or info["spill_loads"] or info["stack"]
    cap = None if warps != graph.num_warps or spills or graph.maxnreg else \
        register_cap(info["registers"], warps, smem + info["static_smem"], target)
    if cap is not None:
        maxntid = f".maxntid {32 * graph.num_warps}, 1, 1"
        capped = text.replace(maxntid, f"{maxntid}\n.maxnreg {cap}", 1)
        try:
            cubin2, info2 = ptxas.assemble(capped, target, line_locs, name, options)
        except CompileError:  # e.g. a wgmma that needs more registers than the cap: keep the first
            info2 = None
        if info2 is not None and not (info2["spill_stores"] or info2["spill_loads"] or info2["stack"]) \
                and info2["registers"] <= cap:
            extra["registers_uncapped"] = info["registers"]
            text, cubin, info = capped, cubin2, info2
            extra.update(stack_bytes=info["stack"], spill_loads=info["spill_loads"])
    ctas, limit = occupancy(info["registers"], warps, smem + info["static_smem"], target)
    extra["occupancy"] = f"{ctas} CTA(s), {ctas * warps} of {SM_WARPS} warps per SM (limited by {limit})"
    return CompiledKernel(name=name, target=target, asm=text, binary=cubin,
                          registers=info["registers"], shared_bytes=smem + info["static_smem"],
                          spill_bytes=info["spill_stores"], num_warps=warps,
                          threads_per_warp=32, extra=extra, arg_layout=arg_layout(graph))


def compile(graph: Graph, target: str) -> CompiledKernel:
    mkey = (graph.text, target)
    ck = _memory.get(mkey)
    if ck is not None:
        return ck
    from gluon_trace import __version__
    _, version = ptxas.locate()
    key = make_key(kind="nvidia-cubin", graph=graph.text, target=target, ptxas=version,
                   library=__version__, backend=source_hash())
    payload, hit = disk_cache().get_or_build(key, lambda: _pack(build(graph, target)))
    ck = _unpack(payload)
    ck.extra["disk_cache_hit"] = hit
    _memory[mkey] = ck
    return ck

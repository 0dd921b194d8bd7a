"""Op-table entries for matrix multiply-accumulate and warp specialization.

Every MMA op takes register tiles (or, for wgmma, shared-memory operands) in the layouts of
its instruction and returns a tile of the accumulator's type. The rules check everything a
wrong call would break (operand layouts whose parent is not the accumulator's layout,
k_width, shapes that are not multiples of the instruction, dtypes, the target) at trace time,
so the error names the user's line.
"""
from __future__ import annotations

import dataclasses

from . import dtypes as dt
from .errors import LayoutError
from .ir import MemDescType, TensorDescType, Type
from .ops import _yield_types, define
from .ops_memory import _require_target, is_tile_like, sm_version

_FLOAT_IN = ("float16", "bfloat16", "float32")
_FP8 = ("float8e4nv", "float8e5", "float8e4b8", "float8e5b16")


def _mma_layouts():
    from . import mma_layouts
    return mma_layouts


def _acc_dtypes(a: dt.dtype) -> tuple[str, ...]:
    if a.is_int:
        return ("int32",)
    if a.name in ("float16",) + _FP8:
        return ("float32", "float16")
    return ("float32",)


def _check_dtypes(ctx, name, a, b, acc, allowed) -> None:
    fnuz = {"float8e4b8", "float8e5b16"}
    if a.dtype != b.dtype and not (name == "mfma" and {a.dtype.name, b.dtype.name} <= fnuz):
        raise ctx.error(f"{name}: A is {a.dtype} and B is {b.dtype}; both operands need one dtype",
                        notes=("convert one with .to(dtype) (gfx942's mfma also takes float8e4b8 with "
                               "float8e5b16)",))
    if a.dtype.name not in allowed:
        raise ctx.error(f"{name} takes {', '.join(allowed)} operands, not {a.dtype}")
    if acc.dtype.name not in _acc_dtypes(a.dtype):
        raise ctx.error(f"{name}: {a.dtype} operands accumulate into "
                        f"{' or '.join(_acc_dtypes(a.dtype))}, not {acc.dtype}")
    if a.dtype.name in _FP8:
        _check_fp8_target(ctx, name, a.dtype)


def _check_fp8_target(ctx, name, d) -> None:
    """NVIDIA's MMAs take the OCP formats (float8e4nv, float8e5), gfx942's MFMAs the FNUZ ones
    (float8e4b8, float8e5b16): the same names mean different bits, so one is never taken for
    the other."""
    from .fp8 import AMD_NAME, FORMATS, NVIDIA_NAME, is_fnuz
    t = ctx.target
    v = sm_version(t)
    if v is not None and v < 89:
        raise ctx.error(f"{name}: fp8 MMA needs sm_89 or newer; this kernel is traced for {t}")
    if v is not None and is_fnuz(d.name):
        raise ctx.error(f"{name}: {d} is AMD gfx942's FNUZ fp8 (bias {FORMATS[d.name][1]}, no -0, NaN 0x80); "
                        f"no NVIDIA instruction takes it: use gl.{NVIDIA_NAME[d.name]}")
    if t == "gfx90a":
        raise ctx.error(f"{name}: fp8 MFMA needs CDNA3 (gfx942); this kernel is traced for gfx90a")
    if t == "gfx942" and not is_fnuz(d.name):
        raise ctx.error(f"{name}: gfx942's fp8 MFMAs take the FNUZ formats; {d} is NVIDIA's OCP format: "
                        f"use gl.{AMD_NAME[d.name]}")


def _check_shapes(ctx, name, a, b, acc, instr) -> None:
    if len(acc.shape) != 2 or len(b.shape) != 2 or len(a.shape) != 2:
        raise ctx.error(f"{name} multiplies 2-D tiles: A [M, K], B [K, N], acc [M, N]")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2 or tuple(acc.shape) != (m, n):
        raise ctx.error(f"{name}: shapes A {list(a.shape)}, B {list(b.shape)}, acc {list(acc.shape)} "
                        "do not chain as [M, K] x [K, N] -> [M, N]")
    im, in_, ik = instr
    for what, size, step in (("M", m, im), ("N", n, in_), ("K", k, ik)):
        if size % step:
            raise ctx.error(f"{name}: {what} = {size} is not a multiple of the instruction's {what} = {step} "
                            f"(instruction {im}x{in_}x{ik})",
                            notes=("pad the tile and mask its loads, or pick another instr_shape",))


def _check_operand(ctx, name, t, index: int, acc) -> None:
    ml = _mma_layouts()
    which = "A" if index == 0 else "B"
    lay = t.layout
    if not isinstance(lay, ml.DotOperandLayout) or lay.operand_index != index:
        raise ctx.error(f"{name}: operand {which} must be in gl.DotOperandLayout(operand_index={index}, "
                        f"parent=<the accumulator's layout>, k_width=...), got {lay!r}", LayoutError,
                        notes=("convert it with gl.convert_layout(x, gl.DotOperandLayout(...))",))
    if lay.parent != acc.layout:
        raise ctx.error(f"{name}: operand {which}'s DotOperandLayout parent {lay.parent!r} is not the "
                        f"accumulator's layout {acc.layout!r}", LayoutError)
    want = ml.expected_k_width(acc.layout, t.dtype.bits)
    # MFMA operands may hold two instructions' K slices per lane (Triton's kpack=2: k_width=8
    # for 16-bit types), which the layout describes and the emitter splits
    ok = lay.k_width == want or (isinstance(acc.layout, ml.AMDMFMALayout) and lay.k_width == 2 * want)
    if not ok:
        raise ctx.error(f"{name}: operand {which} has k_width={lay.k_width}; {t.dtype} operands of this "
                        f"MMA need k_width={want}", LayoutError)


def _acc(ctx, name, acc, cls_name: str):
    if not is_tile_like(acc):
        raise ctx.error(f"{name}: the accumulator must be a register tile, got {acc}")
    if type(acc.layout).__name__ != cls_name:
        raise ctx.error(f"{name}: the accumulator must be in a gl.{cls_name}, got {acc.layout!r}",
                        LayoutError)


def _register_mma(name, acc_cls, allowed, check_target):
    def rule(ctx, ts, attrs, regions):
        a, b, acc = ts
        check_target(ctx)
        _acc(ctx, name, acc, acc_cls)
        for t in (a, b):
            if not is_tile_like(t):
                raise ctx.error(f"{name} takes register tiles; load shared buffers first, got {t}")
        _check_dtypes(ctx, name, a, b, acc, allowed)
        _check_operand(ctx, name, a, 0, acc)
        _check_operand(ctx, name, b, 1, acc)
        _check_shapes(ctx, name, a, b, acc, _mma_layouts().mma_instr_shape(acc.layout, a.dtype.bits))
        return [acc]
    define(name, rule)


def _nv_mma_v2(ctx):
    _require_target(ctx, "mma_v2 (mma.sync)", 80)


def _amd(arches: tuple[str, ...], what: str):
    def check(ctx):
        t = ctx.target
        if t is None or t == "interpreter" or t in arches:
            return
        raise ctx.error(f"{what} exists on {', '.join(arches)}; this kernel is traced for {t}")
    return check


_register_mma("mma_v2", "NVMMADistributedLayout", _FLOAT_IN + _FP8 + ("int8",), _nv_mma_v2)
_register_mma("mfma", "AMDMFMALayout", _FLOAT_IN + _FP8 + ("int8",), _amd(("gfx90a", "gfx942"), "mfma"))
_register_mma("wmma", "AMDWMMALayout", ("float16", "bfloat16"), _amd(("gfx1100",), "wmma"))


def _dot_fma(ctx, ts, attrs, regions):
    a, b, acc = ts
    if not all(is_tile_like(t) for t in ts):
        raise ctx.error("gl.dot_fma takes register tiles")
    if a.dtype != b.dtype or a.dtype != acc.dtype:
        raise ctx.error(f"gl.dot_fma: A, B and acc must share one dtype, got {a.dtype}, {b.dtype}, "
                        f"{acc.dtype}", notes=("convert the operands with .to(acc.dtype)",))
    if a.dtype.is_ptr or a.dtype.is_bool:
        raise ctx.error(f"gl.dot_fma needs numbers, got {a.dtype}")
    ml = _mma_layouts()
    for t, i in ((a, 0), (b, 1)):
        lay = t.layout
        if not isinstance(lay, ml.DotOperandLayout) or lay.operand_index != i or lay.parent != acc.layout:
            raise ctx.error(f"gl.dot_fma: operand {'AB'[i]} must be in gl.DotOperandLayout({i}, "
                            f"parent=<acc's layout>, k_width=...), got {lay!r}", LayoutError)
    _check_shapes(ctx, "gl.dot_fma", a, b, acc, (1, 1, 1))
    return [acc]


define("dot_fma", _dot_fma, doc="acc + A @ B with FMAs on the CUDA/vector cores; any target")


def _wgmma_pieces(ctx, name, b, accs):
    """Pieces: b a stacked view [P, K, n], accs P tiles of one type [M, n]. Returns the view
    one piece of b is (what each acc multiplies), for the checks a single wgmma gets."""
    if not accs:
        raise ctx.error(f"{name}: acc is an empty list; give one accumulator a piece of B")
    if not isinstance(b, MemDescType) or len(b.shape) != 3:
        raise ctx.error(f"{name}: with a list of {len(accs)} accumulators, B must be a stacked shared view "
                        f"[{len(accs)}, K, n] (one [K, n] piece an accumulator), got {b}",
                        notes=("allocate the pieces as consecutive slots, e.g. [STAGES, P, n, K], and pass "
                               "bufs.index(s).permute((0, 2, 1))",))
    if b.shape[0] != len(accs):
        raise ctx.error(f"{name}: B stacks {b.shape[0]} pieces and acc lists {len(accs)} accumulators; "
                        "give one accumulator a piece")
    for i, t in enumerate(accs[1:], 1):
        if t != accs[0]:
            raise ctx.error(f"{name}: accumulator {i} is {t}, accumulator 0 {accs[0]}; the pieces' "
                            "accumulators share one type")
    return dataclasses.replace(b, shape=tuple(b.shape[1:]))


def _wgmma_k_pieces(ctx, name, terms, b):
    """K pieces: A's terms [M, k] of one type, b stacking one [..., k, n] operand a term. Returns
    the view one term of b is."""
    for i, t in enumerate(terms[1:], 1):
        if t != terms[0]:
            raise ctx.error(f"{name}: A piece {i} is {t}, A piece 0 {terms[0]}; the K pieces of A share one type")
    if not isinstance(b, MemDescType) or len(b.shape) < 3 or b.shape[0] != len(terms):
        raise ctx.error(f"{name}: with a list of {len(terms)} A pieces, B must stack one operand a piece: "
                        f"[{len(terms)}, K, N] (or [{len(terms)}, P, K, n] with a list of accumulators), got {b}",
                        notes=("allocate the K pieces as consecutive slots and pass the stacked view",))
    return dataclasses.replace(b, shape=tuple(b.shape[1:]))


def wgmma_operands(operands, attrs) -> tuple[list, object, list, object]:
    """(A's operands: one, or its K pieces; B; the accumulators; use_acc) of a wgmma's operands,
    or of their types or values. The order is a, b, the accumulators, use_acc, then A's further
    K pieces: the passes that read a and b by place keep them there."""
    n = 1 if attrs.get("pieces") is None else attrs["pieces"]
    return [operands[0], *operands[3 + n:]], operands[1], list(operands[2:2 + n]), operands[2 + n]


def _wgmma(ctx, ts, attrs, regions):
    terms, b, accs, use_acc = wgmma_operands(ts, attrs)
    a = terms[0]
    name = "warpgroup_mma"
    if attrs.get("k_pieces") is not None:
        if len(terms) != attrs["k_pieces"]:
            raise ctx.error(f"{name}: k_pieces={attrs['k_pieces']} but {len(terms)} A operands")
        b = _wgmma_k_pieces(ctx, name, terms, b)
    elif len(terms) > 1:
        raise ctx.error(f"{name} takes one A operand, or a list of them with K pieces")
    if attrs.get("pieces") is not None:
        b = _wgmma_pieces(ctx, name, b, accs)
    elif len(accs) != 1:
        raise ctx.error(f"{name} takes one accumulator, or a list of them with pieces")
    acc = accs[0]
    _require_target(ctx, "warpgroup_mma (wgmma)", 90, suffix_a=True)
    if ctx.num_warps % 4:
        raise ctx.error(f"{name} runs on whole warpgroups; num_warps={ctx.num_warps} is not a multiple of 4")
    _acc(ctx, name, acc, "NVMMADistributedLayout")
    if tuple(acc.layout.version) != (3, 0):
        raise ctx.error(f"{name}: the accumulator layout must be NVMMADistributedLayout version [3, 0], "
                        f"got {list(acc.layout.version)}", LayoutError)
    if not isinstance(b, MemDescType) or type(b.layout).__name__ != "NVMMASharedLayout":
        raise ctx.error(f"{name}: B must be a shared-memory buffer in gl.NVMMASharedLayout, got {b}",
                        LayoutError, notes=("allocate it with gl.allocate_shared_memory(dtype, [K, N], "
                                            "gl.NVMMASharedLayout.get_default_for([K, N], dtype))",))
    if isinstance(a, MemDescType):
        if type(a.layout).__name__ != "NVMMASharedLayout":
            raise ctx.error(f"{name}: A in shared memory must be in gl.NVMMASharedLayout, got {a.layout!r}",
                            LayoutError)
    elif isinstance(a, TensorDescType) or a.is_scalar:
        raise ctx.error(f"{name}: A must be a register tile or a shared buffer, got {a}")
    else:
        _check_operand(ctx, name, a, 0, acc)
    _check_dtypes(ctx, name, a, b, acc, _FLOAT_IN + _FP8 + ("int8", "uint8"))
    if a.dtype.bits != 16:  # only 16-bit operands may be MN-major in shared memory
        for what, t, k_major in (("A", a, False), ("B", b, True)):
            if isinstance(t, MemDescType) and bool(getattr(t.layout, "transposed", False)) != k_major:
                raise ctx.error(f"{name}: {a.dtype} operands must be K-major in shared memory; {what} "
                                f"[{', '.join(map(str, t.shape))}] is not",
                                LayoutError, notes=("store B as [N, K] and pass b_smem.permute((1, 0))",)
                                if what == "B" else ("store A as [M, K] with K contiguous",))
    if not use_acc.is_scalar or not use_acc.dtype.is_bool:
        raise ctx.error(f"use_acc must be a scalar int1 (or a Python bool), got {use_acc}")
    m, n, k = _mma_layouts().mma_instr_shape(acc.layout, a.dtype.bits)
    _check_shapes(ctx, name, a, b, acc, (64, n, k))
    return list(accs)


def _wgmma_wait(ctx, ts, attrs, regions):
    n = attrs["num_outstanding"]
    if not isinstance(n, int) or n < 0:
        raise ctx.error(f"warpgroup_mma_wait takes a non-negative int, got {n!r}")
    return list(ts)


define("wgmma", _wgmma, has_side_effects=True, memory_operands=True,
       doc="wgmma.mma_async: acc (+)= A @ B, A in registers or NVMMA shared memory, B in shared; with "
           "pieces a list of accumulators over a stacked B, with k_pieces a list of A operands (the further "
           "ones after use_acc) over B stacked once more, summed in one group")
define("wgmma_wait", _wgmma_wait, has_side_effects=True, memory_operands=True,
       doc="wgmma.wait_group: at most num_outstanding groups in flight; passes its deps through")


def _warp_specialize(ctx, ts, attrs, regions):
    warps, regs = attrs["worker_num_warps"], attrs["worker_num_regs"]
    if len(regions) - 1 != len(warps) or len(warps) != len(regs):
        raise ctx.error(f"warp_specialize has {len(regions) - 1} worker partitions, {len(warps)} warp "
                        f"counts and {len(regs)} register counts; give one of each per worker")
    for w in warps:
        if not isinstance(w, int) or w <= 0 or w & (w - 1):
            raise ctx.error(f"worker_num_warps entries must be powers of two, got {list(warps)}")
    for r in regs:
        if not isinstance(r, int) or not 24 <= r <= 256 or r % 8:
            raise ctx.error(f"worker_num_regs entries must be multiples of 8 in [24, 256] "
                            f"(setmaxnreg's range), got {list(regs)}")
    for w in regions[1:]:
        if _yield_types(w):
            raise ctx.error("worker partitions return nothing; only the default partition gives results")
    return _yield_types(regions[0])


define("warp_specialize", _warp_specialize, has_side_effects=True, memory_operands=True,
       doc="a default partition plus worker partitions with their own warps, run concurrently")

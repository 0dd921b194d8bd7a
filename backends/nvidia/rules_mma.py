"""mma_v2 as ``mma.sync.aligned`` (m16n8k16 f16/bf16 into f32, or f16 into f16; m16n8k8 tf32;
m16n8k32 s8).

The operand and accumulator layouts are built from the instruction's fragments, so register
r of a tile holds, in every thread, the element the fragment puts in that thread's slot of
one instruction: which registers form an instruction is read off the register part of the
layout alone (its coordinates in lane 0 of warp 0). Each instruction tile of the accumulator
chains the instructions along K in order (K outermost, so neighbours are independent);
16-bit operands are packed in pairs, int8 in fours.
"""
from __future__ import annotations

from gluon_trace.errors import CompileError

from . import ptx
from .emitter import rule
from .rules_memory import _extract16

# dtype -> (shape, type suffix, instruction K, elements per operand register)
_KINDS = {
    "float16": ("m16n8k16", "f32.f16.f16.f32", 16, 2),
    "bfloat16": ("m16n8k16", "f32.bf16.bf16.f32", 16, 2),
    "float32": ("m16n8k8", "f32.tf32.tf32.f32", 8, 1),
    "int8": ("m16n8k32", "s32.s8.s8.s32", 32, 4),
    "float8e4nv": ("m16n8k32", "f32.e4m3.e4m3.f32", 32, 4),   # sm_89+
    "float8e5": ("m16n8k32", "f32.e5m2.e5m2.f32", 32, 4),
}


def _coord(lin, r: int) -> tuple[int, int]:
    m = n = 0
    for i, b in enumerate(lin.reg_bases):
        if r >> i & 1:
            m ^= b[0]
            n ^= b[1]
    return m, n


def _groups(lin, tile: tuple[int, int], slots: list[tuple[int, int]], what: str, loc) -> dict:
    """{(tile row, tile col): [register of each slot]} from the layout's register coordinates."""
    by_tile: dict = {}
    for r in range(lin.num_regs):
        m, n = _coord(lin, r)
        by_tile.setdefault((m // tile[0], n // tile[1]), {})[(m % tile[0], n % tile[1])] = r
    out = {}
    for key, regs in by_tile.items():
        if any(s not in regs for s in slots):
            raise CompileError(f"mma_v2: the {what} layout does not hold whole instruction fragments", loc)
        out[key] = [regs[s] for s in slots]
    return out


def _check_threads(op, la, lb, lc) -> None:
    """A's rows and B's columns must sit in the lanes and warps of the accumulator's."""
    ok = len(la.warp_bases) == len(lb.warp_bases) == len(lc.warp_bases)
    if ok:
        for wa, wb, wc in zip(la.warp_bases, lb.warp_bases, lc.warp_bases):
            ok &= tuple(wa) == (wc[0], 0) and tuple(wb) == (0, wc[1])
    if not ok:
        raise CompileError("mma_v2: the operands' warps do not line up with the accumulator's (a tile "
                           "smaller than the warps' coverage?); give M and N at least the "
                           "accumulator layout's tile", op.loc)


def _pack(em, t, regs: list[str]) -> str:
    """One .b32 operand register from ``regs`` (consecutive K elements, lowest first)."""
    key = ("mma_pack", t.name, tuple(regs))
    r = em.memo_get(key)
    if r is not None:
        return r
    if t.name in ("float16", "bfloat16"):
        r = em.pack16x2(regs[0], regs[1], t)  # exact: already rounded
    elif t.name == "float32":
        r = em.ins("b32", f"cvt.rna.tf32.f32 {{d}}, {regs[0]};")
    elif t.is_fp8:  # four bytes, lowest K first
        from . import fp8
        bs = [fp8.encode(em, t, x) for x in regs]
        r = bs[0]
        for j, x in enumerate(bs[1:], 1):
            r = em.ins("b32", f"bfi.b32 {{d}}, {x}, {r}, {8 * j}, 8;")
    else:
        r = regs[0]
        for j, x in enumerate(regs[1:], 1):
            r = em.ins("b32", f"bfi.b32 {{d}}, {x}, {r}, {8 * j}, 8;")
    em.memo_put(key, r)
    return r


@rule("mma_v2")
def _mma_v2(em, op):
    a_v, b_v, c_v = op.operands
    t, acc_t = a_v.type.dtype, c_v.type.dtype
    kind = _KINDS.get(t.name)
    if kind is None:
        raise CompileError(f"mma_v2 on {t} operands is not lowered by the NVIDIA backend yet; use float16, "
                           "bfloat16, float32 (tf32) or int8", op.loc)
    if t.is_fp8:
        ptx.require(em.target, "mma_v2 on fp8 (mma.sync e4m3/e5m2)", 89, op.loc)
        em.flags["ptx_version"] = "8.4"  # mma.sync on fp8 came with PTX ISA 8.4 (wgmma's with 8.0)
    f16_acc = acc_t.name == "float16"
    if f16_acc and t.name != "float16":
        raise CompileError(f"mma_v2 accumulates {t} operands in float32 on NVIDIA, not float16", op.loc)
    if t.name == "float32" and (op.attrs.get("input_precision") or "tf32") != "tf32":
        raise CompileError("mma_v2 multiplies float32 operands as tf32; input_precision="
                           f"{op.attrs.get('input_precision')!r} has no tensor-core instruction", op.loc)
    shape, types, K, kw = kind
    if f16_acc:
        types = "f16.f16.f16.f16"
    la, lb, lc = em.lin(a_v), em.lin(b_v), em.lin(op.results[0])
    _check_threads(op, la, lb, lc)
    h = K // 2
    a_slots = [(dm, dk + j) for dm, dk in ((0, 0), (8, 0), (0, h), (8, h)) for j in range(kw)]
    b_slots = [(dk + j, 0) for dk in (0, h) for j in range(kw)]
    c_slots = [(0, 0), (0, 1), (8, 0), (8, 1)]
    ga = _groups(la, (16, K), a_slots, "A operand", op.loc)
    gb = _groups(lb, (K, 8), b_slots, "B operand", op.loc)
    gc = _groups(lc, (16, 8), c_slots, "accumulator", op.loc)
    av, bv, cv = em.vals[a_v], em.vals[b_v], em.vals[c_v]

    def pick(vals, r):
        return vals[r] if len(vals) > 1 else vals[0]
    cls = "f32" if acc_t.is_floating else "b32"
    # K outermost: consecutive instructions feed different accumulators (independent chains)
    cur = {key: [pick(cv, r) for r in c_regs] for key, c_regs in gc.items()}
    if f16_acc:  # the accumulator travels as two f16x2 words: (c0, c1) and (c2, c3)
        cur = {key: [_pack(em, acc_t, c[0:2]), _pack(em, acc_t, c[2:4])] for key, c in cur.items()}
    for ki in sorted({k for (_, k) in ga}):
        for (mi, ni) in sorted(gc):
            a = [_pack(em, t, [pick(av, r) for r in ga[(mi, ki)][i:i + kw]]) for i in range(0, 4 * kw, kw)]
            b = [_pack(em, t, [pick(bv, r) for r in gb[(ki, ni)][i:i + kw]]) for i in range(0, 2 * kw, kw)]
            d = [em.reg("b32") for _ in range(2)] if f16_acc else [em.reg(cls) for _ in range(4)]
            em.emit(f"mma.sync.aligned.{shape}.row.col.{types} {{{', '.join(d)}}}, {{{', '.join(a)}}}, "
                    f"{{{', '.join(b)}}}, {{{', '.join(cur[(mi, ni)])}}};")
            cur[(mi, ni)] = d
    out = [None] * lc.num_regs
    for key, c_regs in gc.items():
        vals = cur[key]
        if f16_acc:
            vals = [_extract16(em, acc_t, w, j) for w in vals for j in (0, 1)]
        for r, x in zip(c_regs, vals):
            out[r] = x
    return [out]

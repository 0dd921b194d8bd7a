"""AMD rules for the matrix ops: ``mfma`` (CDNA: gfx90a, gfx942), ``wmma`` (RDNA3: gfx1100) and
``dot_fma`` (plain FMAs, every target).

The tiles arrive one element per register index of their linear layouts (16-bit floats widened
to f32, 8-bit integers sign-extended, one dword each). An MMA rule walks the accumulator's
instruction tiles, packs the operand elements each instruction reads into its source dwords
(``lds.packed``: two f16/bf16 or four int8 per dword, reusing the dwords a ds_read loaded),
chains the instructions along K (D of one is srcC of the next), and hands the result back as the
dwords of the last D.

Which register holds which element is read off the layouts at lane 0 of warp 0 (the lane and warp
parts of an operand's layout match the accumulator's along M/N; that is checked): the ISA's
fragment of lane 0 (CDNA3 ISA, section 7.1 "Matrix fused multiply-add (MFMA)" dependent-register
tables; RDNA3 ISA, section 7.9 "Wave Matrix Multiply Accumulate") names the registers an
instruction takes, and a layout that does not hold them is a CompileError, not a wrong kernel.
A ``transposed`` accumulator is computed as C^T = B^T A^T: B goes to srcA and A to srcB.

Accumulators live in VGPRs (gfx90a/gfx942 MFMA may take C/D there).
"""
from __future__ import annotations

from gluon_trace.mma_layouts import mma_instr_shape

from . import arith
from .emitter import elem_key
from .lds_words import packed
from .mir import Imm, Reg, Sub, strip

# (family, operand dtype, M) -> (mnemonic, K, passes). A pass is 4 cycles; the pass count sets
# the wait states of the MFMA hazards (hazards.py). Cycles as AMD's Matrix Instruction Calculator
# lists them (ROCm/amd_matrix_instruction_calculator): CDNA2 64 (32x32) / 32 (16x16) for all of
# these; CDNA3 half that for 16/8-bit inputs, the same for f32. gfx942's fp8 MFMAs (FNUZ "fp8" =
# float8e4b8, "bf8" = float8e5b16) take twice the K of f16 in the cycles of f16, as int8 does.
MFMA = {
    ("cdna2", "float16", 32): ("v_mfma_f32_32x32x8f16", 8, 16),
    ("cdna2", "float16", 16): ("v_mfma_f32_16x16x16f16", 16, 8),
    ("cdna2", "bfloat16", 32): ("v_mfma_f32_32x32x8bf16_1k", 8, 16),
    ("cdna2", "bfloat16", 16): ("v_mfma_f32_16x16x16bf16_1k", 16, 8),
    ("cdna2", "int8", 32): ("v_mfma_i32_32x32x8i8", 8, 16),
    ("cdna2", "int8", 16): ("v_mfma_i32_16x16x16i8", 16, 8),
    ("cdna2", "float32", 32): ("v_mfma_f32_32x32x2f32", 2, 16),
    ("cdna2", "float32", 16): ("v_mfma_f32_16x16x4f32", 4, 8),
    ("cdna3", "float16", 32): ("v_mfma_f32_32x32x8_f16", 8, 8),
    ("cdna3", "float16", 16): ("v_mfma_f32_16x16x16_f16", 16, 4),
    ("cdna3", "bfloat16", 32): ("v_mfma_f32_32x32x8_bf16", 8, 8),
    ("cdna3", "bfloat16", 16): ("v_mfma_f32_16x16x16_bf16", 16, 4),
    ("cdna3", "int8", 32): ("v_mfma_i32_32x32x16_i8", 16, 8),
    ("cdna3", "int8", 16): ("v_mfma_i32_16x16x32_i8", 32, 4),
    ("cdna3", "float32", 32): ("v_mfma_f32_32x32x2_f32", 2, 16),
    ("cdna3", "float32", 16): ("v_mfma_f32_16x16x4_f32", 4, 8),
    ("cdna3", "float8e4b8", 32): ("v_mfma_f32_32x32x16_fp8_fp8", 16, 8),
    ("cdna3", "float8e4b8", 16): ("v_mfma_f32_16x16x32_fp8_fp8", 32, 4),
    ("cdna3", "float8e5b16", 32): ("v_mfma_f32_32x32x16_bf8_bf8", 16, 8),
    ("cdna3", "float8e5b16", 16): ("v_mfma_f32_16x16x32_bf8_bf8", 32, 4),
}
WMMA = {"float16": "v_wmma_f32_16x16x16_f16", "bfloat16": "v_wmma_f32_16x16x16_bf16"}


# gfx942's fp8 MFMAs also mix the two formats (srcA's first), in the same passes
FP8_KIND = {"float8e4b8": "fp8", "float8e5b16": "bf8"}
MIXED_FP8 = {f"v_mfma_f32_{shape}_{x}_{y}": p for shape, p in (("32x32x16", 8), ("16x16x32", 4))
             for x, y in (("fp8", "bf8"), ("bf8", "fp8"))}


def passes(op: str) -> int:
    """Passes of an MFMA mnemonic (0 for anything else)."""
    if op in MIXED_FP8:
        return MIXED_FP8[op]
    for name, _, p in MFMA.values():
        if name == op:
            return p
    return 0


# -- which register holds what -----------------------------------------------------------------

def _by_coord(em, ty) -> tuple[dict, object]:
    """{coordinate at lane 0, warp 0: the first register index holding it}, and the layout."""
    lin = em.linear(ty)
    out: dict = {}
    for r in range(lin.num_regs):
        out.setdefault(tuple(lin.coord(r, 0, 0)), r)
    return out, lin


def _lookup(em, table, coord, what):
    r = table.get(tuple(coord))
    if r is None:
        raise em.error(f"{what}: no register of its layout holds element {tuple(coord)} at lane 0 "
                       "where the instruction reads it (operand layout does not fit the instruction)")
    return r


def _operand_words(em, d, elems, table, coords, what):
    xs = [elems[_lookup(em, table, c, what)] for c in coords]
    if d.name == "float32":
        xs = [_tf32(em, x) for x in xs]
    if d.is_fp8:
        from . import fp8
        return _contiguous(em, fp8.operand_words(em, d, xs, lambda g: packed(em, d, g)))
    return _contiguous(em, packed(em, d, xs))


def _tf32(em, x):
    """The IR's f32 MMA rounds its inputs to tf32 (nearest, ties away: cvt.rna.tf32.f32), as the
    interpreter does; v_mfma_*f32 then multiplies them exactly."""
    key = ("tf32", elem_key(x))
    hit = em.cse_get(key)
    if hit is not None:
        return hit
    t = em.valu("v_add_u32", em.v(), [Imm(0x1000), em.real(x)])
    return em.cse_put(key, em.valu("v_and_b32", em.v(), [Imm(0xFFFFE000), t]))


def _contiguous(em, words):
    """The words as one register (an MFMA source is a run of consecutive VGPRs)."""
    words = [strip(w) for w in words]
    if len(words) == 1 and isinstance(words[0], Reg) and words[0].cls == "v":
        return words[0]
    first = words[0]
    if isinstance(first, Sub) and first.index == 0 and first.reg.size == len(words) and first.reg.cls == "v" \
            and all(isinstance(w, Sub) and w.reg is first.reg and w.index == k for k, w in enumerate(words)):
        return first.reg
    r = em.v(len(words))
    for k, w in enumerate(words):
        em.emit("v_mov_b32", [r[k] if len(words) > 1 else r], [em.real(w)], kind="valu")
    return r


# -- MFMA / WMMA ----------------------------------------------------------------------------------

def _family(em, d, m: int, k: int):
    """The target's MFMA for the layout's instruction (mnemonic, K, passes), or a CompileError."""
    t = em.t.name
    fam = {"gfx90a": "cdna2", "gfx942": "cdna3"}.get(t)
    if fam is None:
        raise em.error("mfma exists on CDNA (gfx90a, gfx942); RDNA3 (gfx1100) has WMMA: use "
                       "gl.amd.AMDWMMALayout and wmma")
    entry = MFMA.get((fam, d.name, m))
    if entry is None:
        why = (f"no {m}x{m} MFMA on {t} takes {d} (gfx942's fp8 MFMAs take float8e4b8 and float8e5b16)"
               if d.is_fp8 else f"no {m}x{m} MFMA on {t} takes {d} operands")
        raise em.error(f"mfma: {why} (run it with backend='interpreter')")
    if entry[1] != k:
        v = {"gfx90a": 2, "gfx942": 3}[t]
        raise em.error(f"mfma: the layout's {m}x{m}x{k} {d} instruction is not {t}'s "
                       f"({entry[0]}, K = {entry[1]}); write gl.amd.AMDMFMALayout(version={v}, "
                       f"instr_shape=[{m}, {m}, {entry[1]}], ...)")
    return entry


def _acc_offsets(m: int, nregs: int, transposed: bool, wmma: bool):
    """Lane 0's D registers per the ISA: MFMA 32x32: row 8*(i//4) + i%4; 16x16: row i (both
    column 0); WMMA: row 2*i. Transposed: the same with rows and columns swapped."""
    out = []
    for i in range(nregs):
        row = 2 * i if wmma else (8 * (i // 4) + i % 4 if m == 32 else i)
        out.append((0, row) if transposed else (row, 0))
    return out


def _mma(em, op, wmma: bool):
    a_v, b_v, c_v = op.operands
    acc_ty = c_v.type
    lay = acc_ty.layout
    d = a_v.type.dtype
    out_d = acc_ty.dtype
    m, n, k = mma_instr_shape(lay, d.bits)
    if wmma:
        if em.t.name != "gfx1100":
            raise em.error("wmma exists on RDNA3 (gfx1100); CDNA (gfx90a, gfx942) has MFMA: use "
                           "gl.amd.AMDMFMALayout and mfma")
        name = WMMA[d.name]
        kpl = 16                      # each lane holds its row's (column's) whole K
        nregs = 8
    else:
        name = _family(em, d, m, k)[0]
        kpl = k // (64 // m)          # K elements per lane per instruction
        nregs = m * n // 64
    db = b_v.type.dtype
    mixed = {}                        # fp8 A with bf8 B or back: the format of srcA first
    if db != d:
        ka, kb = FP8_KIND[d.name], FP8_KIND[db.name]
        stem = name.rsplit("_", 2)[0]
        mixed = {False: f"{stem}_{ka}_{kb}", True: f"{stem}_{kb}_{ka}"}
    kw = a_v.type.layout.k_width
    ktile = kw if wmma else kw * (64 // m)  # K one register group of the operand spans
    per_tile = kw // kpl              # instructions per register group along K (kpack)
    acc_tab, acc_lin = _by_coord(em, acc_ty)
    a_tab, a_lin = _by_coord(em, a_v.type)
    b_tab, b_lin = _by_coord(em, b_v.type)
    _check_warps(em, a_lin, acc_lin, 0, "A")
    _check_warps(em, b_lin, acc_lin, 1, "B")
    A, B, C = em.elems(a_v), em.elems(b_v), em.elems(c_v)
    K = a_v.type.shape[1]
    transposed = bool(lay.transposed)
    offs = _acc_offsets(m, nregs, transposed, wmma)
    bases = sorted({(c[0] - c[0] % m, c[1] - c[1] % n) for c in acc_tab})
    result = {}
    for base in bases:
        regs = [_lookup(em, acc_tab, (base[0] + o[0], base[1] + o[1]), "the accumulator") for o in offs]
        cur = _contiguous(em, [C[r] for r in regs])
        for c in range(K // ktile):
            for h in range(per_tile):
                k0 = c * ktile + h * kpl
                aw = _operand_words(em, d, A, a_tab, [(base[0], k0 + j) for j in range(kpl)], "operand A")
                bw = _operand_words(em, db, B, b_tab, [(k0 + j, base[1]) for j in range(kpl)], "operand B")
                src_a, src_b = (bw, aw) if transposed else (aw, bw)
                dst = em.v(nregs)
                em.emit(mixed.get(transposed, name), [dst], [src_a, src_b, cur], kind="valu")
                cur = dst
        for i, r in enumerate(regs):
            result[r] = Sub(cur, i)
    outs = []
    lin = acc_lin
    for r in range(lin.num_regs):
        x = result.get(r)
        if x is None:  # a register repeating another's element (the layout broadcasts)
            x = result[acc_tab[tuple(lin.coord(r, 0, 0))]]
        outs.append(x)
    if out_d.name in ("float16", "bfloat16"):
        # a 16-bit accumulator: the f32 chain rounded once at the end (the interpreter rounds
        # the whole product once)
        memo: dict = {}
        for j, x in enumerate(outs):
            key = elem_key(x)
            if key not in memo:
                memo[key] = arith.norm(em, out_d, x)
            outs[j] = memo[key]
    em.vals[op.result] = outs


def _check_warps(em, lin, acc_lin, own: int, what: str) -> None:
    for b, ab in zip(lin.warp_bases, acc_lin.warp_bases):
        if b[own] != ab[own]:
            raise em.error(f"operand {what}'s warps do not follow the accumulator's along "
                           f"{'MN'[own]} (its DotOperandLayout parent is not this accumulator's layout)")


def rule_mfma(em, op):
    _mma(em, op, wmma=False)


def rule_wmma(em, op):
    _mma(em, op, wmma=True)


# -- dot_fma --------------------------------------------------------------------------------------

def rule_dot_fma(em, op):
    """acc[m, n] = fma(A[m, k], B[k, n], acc) for k in order, each rounded (as the interpreter);
    the operands hold all of K in each thread for the thread's rows (columns)."""
    a_v, b_v, c_v = op.operands
    d = c_v.type.dtype
    acc_tab, acc_lin = _by_coord(em, c_v.type)
    a_tab, a_lin = _by_coord(em, a_v.type)
    b_tab, b_lin = _by_coord(em, b_v.type)
    for lin, own, what in ((a_lin, 0, "A"), (b_lin, 1, "B")):
        kdim = 1 - own
        for kind in ("lane_bases", "warp_bases"):
            for b, ab in zip(getattr(lin, kind), getattr(acc_lin, kind)):
                if b[kdim] != 0 or b[own] != ab[own]:
                    raise em.error(f"gl.dot_fma: operand {what} must hold all of K in every thread "
                                   "(a DotOperandLayout over a BlockedLayout accumulator); convert "
                                   "the operands and the accumulator to such layouts first")
    A, B, C = em.elems(a_v), em.elems(b_v), em.elems(c_v)
    K = a_v.type.shape[1]
    done: dict = {}
    outs = []
    for r in range(acc_lin.num_regs):
        mm, nn = acc_lin.coord(r, 0, 0)
        if (mm, nn) in done:
            outs.append(done[(mm, nn)])
            continue
        x = C[r]
        for kk in range(K):
            a = em.real(A[_lookup(em, a_tab, (mm, kk), "operand A")])
            b = em.real(B[_lookup(em, b_tab, (kk, nn), "operand B")])
            x = em.real(x)
            if d.is_floating:
                x = arith.fma(em, d, em.to_v(a), b, x)
            else:
                x = arith.binary(em, "add", d, arith.binary(em, "mul", d, a, b), x)
        done[(mm, nn)] = x
        outs.append(x)
    em.vals[op.result] = outs


RULES = {"mfma": rule_mfma, "wmma": rule_wmma, "dot_fma": rule_dot_fma}

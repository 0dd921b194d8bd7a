"""Data to and from LDS words on AMD: 16- and 8-bit elements, kept widened in registers, packed into
dwords (``v_perm_b32``) for the LDS, so a run of 8 f16 is one ``ds_write_b128``, and unpacked from
the loaded ones; MMA operands get the loaded dwords back through :func:`packed`.
"""
from __future__ import annotations

from .emitter import elem_key
from .mir import Imm, Sub, strip


def _sel(em, value: int):
    """A v_perm_b32 selector: a literal where VOP3 takes one (gfx11), else a hoisted SGPR."""
    if em.t.vop3_literal:
        return Imm(value)
    key = ("perm_sel", value)
    if key not in em.memo:
        with em.hoisted():
            r = em.s()
            em.emit("s_mov_b32", [r], [Imm(value)])
            em.memo[key] = r
    return em.memo[key]



_WRITE = {1: "ds_write_b8", 2: "ds_write_b16", 4: "ds_write_b32", 8: "ds_write_b64", 16: "ds_write_b128"}

_READ = {4: "ds_read_b32", 8: "ds_read_b64", 16: "ds_read_b128"}



def _perm(em, hi, lo, sel, dst=None):
    return em.valu("v_perm_b32", dst if dst is not None else em.v(), [hi, lo, _sel(em, sel)], form="vop3")



def _narrow(em, d, x):
    """The element's memory bits in the low bytes of a VGPR (higher bits: don't care)."""
    if d.bits == 8:  # a byte still in the dword it was loaded in: that dword, shifted down
        hit = em.cse_get(("lds_byte", d.name, elem_key(x)))
        if hit is not None:
            word, k = hit
            if not k:
                return word
            key = ("byte_down", elem_key(word), k)
            down = em.cse_get(key)
            return down if down is not None else \
                em.cse_put(key, em.valu("v_lshrrev_b32", em.v(), [Imm(8 * k), word]))
    x = em.real(x)
    if d.name == "float16":
        return em.valu("v_cvt_f16_f32", em.v(), [x], form="vop1")
    if d.name == "bfloat16":
        return em.valu("v_lshrrev_b32", em.v(), [Imm(16), x])
    return em.to_v(x)



def pack(em, d, xs, dsts=None) -> list:
    """Dwords (or one narrow word) holding elements ``xs`` as memory bytes (16-bit elements:
    into ``dsts`` when given, the dwords of one register an instruction reads whole)."""
    es = max(d.bits // 8, 1)
    if es >= 4:
        return [em.to_v(em.real(x)) for x in xs]
    if len(xs) * es < 4:
        if len(xs) == 1:
            return [_narrow(em, d, xs[0])]
        b = [_narrow(em, d, x) for x in xs]  # two bytes
        return [_perm(em, b[1], b[0], 0x0C0C0400)]
    words = []
    if es == 2:
        for i in range(0, len(xs), 2):
            dst = dsts[i // 2] if dsts else None
            if d.name == "bfloat16":  # the f32 register's high half is the bf16
                words.append(_perm(em, em.to_v(em.real(xs[i + 1])), em.to_v(em.real(xs[i])), 0x07060302, dst))
            elif d.name == "float16":  # exact in f16 (widened f16 values): one packing convert
                words.append(em.valu("v_cvt_pkrtz_f16_f32", dst if dst is not None else em.v(),
                                     [em.real(xs[i]), em.real(xs[i + 1])]))
            else:
                a, b = _narrow(em, d, xs[i]), _narrow(em, d, xs[i + 1])
                words.append(_perm(em, b, a, 0x05040100, dst))
        return words
    if d.is_fp8 and dsts is None:  # bytes just rounded from f32: two v_cvt_pk and a v_perm a dword
        from gluon_trace import dtypes as dt
        from .fp8 import operand_words
        return operand_words(em, d, xs, lambda g: pack(em, dt.uint8, g))
    for i in range(0, len(xs), 4):
        b = [em.to_v(em.real(x)) for x in xs[i:i + 4]]
        p01 = _perm(em, b[1], b[0], 0x0C0C0400)
        p23 = _perm(em, b[3], b[2], 0x0C0C0400)
        words.append(_perm(em, p23, p01, 0x05040100))
    return words



def packed(em, d, xs) -> list:
    """Dwords holding 16/8-bit elements ``xs`` (2 or 4 per dword, lowest first): the dword they
    were loaded from LDS in when that load is in scope, else packed here (for MMA operands)."""
    es = max(d.bits // 8, 1)
    if es >= 4:
        return pack(em, d, xs)
    per = 4 // es
    groups = [xs[i:i + per] for i in range(0, len(xs), per)]
    hits = [em.cse_get(("lds_word", d.name) + tuple(elem_key(x) for x in g)) for g in groups]
    if es == 2 and len(groups) > 1 and all(h is None for h in hits) and len(xs) % 2 == 0:
        r = em.v(len(groups))  # packed straight into one register: no copies to gather them
        return pack(em, d, xs, [r[k] for k in range(len(groups))])
    return [h if h is not None else pack(em, d, g)[0] for g, h in zip(groups, hits)]



def unpack(em, d, word, k: int):
    """Element k of a loaded dword (or of a narrow load's result when the word holds one)."""
    es = max(d.bits // 8, 1)
    if es == 2:
        if d.name == "float16":
            src = word if k == 0 else em.valu("v_lshrrev_b32", em.v(), [Imm(16), word])
            return em.valu("v_cvt_f32_f16", em.v(), [src], form="vop1")
        if d.name == "bfloat16":
            if k == 0:
                return em.valu("v_lshlrev_b32", em.v(), [Imm(16), word])
            return em.valu("v_and_b32", em.v(), [Imm(0xFFFF0000), word])
        if d.is_signed:
            if k == 0:
                return em.valu("v_bfe_i32", em.v(), [word, Imm(0), Imm(16)], form="vop3")
            return em.valu("v_ashrrev_i32", em.v(), [Imm(16), word])
        if k == 0:
            return em.valu("v_and_b32", em.v(), [Imm(0xFFFF), word])
        return em.valu("v_lshrrev_b32", em.v(), [Imm(16), word])
    op = "v_bfe_i32" if d.is_signed else "v_bfe_u32"
    r = em.valu(op, em.v(), [word, Imm(8 * k), Imm(8)], form="vop3")
    if d.is_fp8:  # fp8.to_f32 widens it straight from the word (two bytes an instruction)
        em.cse_put(("fp8_in_word", elem_key(r)), (word, k))
    return r



def _gather(em, words):
    """The words as one register (a vector write takes consecutive VGPRs)."""
    if len(words) == 1:
        return words[0]
    first = strip(words[0])
    if isinstance(first, Sub) and first.reg.size == len(words) and all(
            isinstance(strip(w), Sub) and strip(w).reg is first.reg and strip(w).index == k
            for k, w in enumerate(words)):
        return first.reg  # already consecutive: the dwords of one load
    data = em.v(len(words))
    for j, w in enumerate(words):
        em.emit("v_mov_b32", [data[j]], [w], kind="valu")
    return data


"""Lowering of load, store, atomics and print.

Vector width: a thread's registers 0..V-1 hold V consecutive elements along the
layout's fastest dimension (``reg_contiguity``), and the axis analysis proves the
pointers consecutive and the first one aligned to V*size bytes (an argument with
``divisibility=16`` plus an ``arange`` offset), and the mask constant over the group;
then one ``ld.global.v4.b32``-style access moves the group (at most 16 bytes).
Masked loads are predicated: registers start at ``other`` (or 0) and the load
overwrites them where the mask holds. Where a layout replicates elements over lanes or
warps, only one copy stores (and only one copy applies an atomic). Atomics use
``atom.global.acq_rel.gpu``; the combinations the hardware lacks (8/16-bit integers,
float max/min, float16 max/min/xchg/and...) run a compare-and-swap loop on the
enclosing 32-bit word, with the interpreter's semantics (maximum ignores NaN; cas compares
bit patterns, like atom.cas on 32/64-bit words).
"""
from __future__ import annotations

from gluon_trace import dtypes as dt
from gluon_trace.errors import CompileError
from gluon_trace.layouts import first_copy_regs

from . import affine, fp8, ptx
from .emitter import rule, select


def _esize(t: dt.dtype) -> int:
    return 1 if t.is_bool else t.itemsize


def vec_width(em, ptr_v, mask_v) -> int:
    lin = em.lin(ptr_v)
    if lin is None or not lin.reg_bases:
        return 1
    b0 = lin.reg_bases[0]
    nz = [d for d, c in enumerate(b0) if c]
    if len(nz) != 1 or b0[nz[0]] != 1:
        return 1
    d = nz[0]
    es = _esize(ptr_v.type.dtype.element)
    ai = em.ai.get(ptr_v)
    v = min(lin.reg_contiguity(d), ai.contig[d], max(ai.div[d] // es, 1), max(16 // es, 1))
    if mask_v is not None:
        v = min(v, em.ai.get(mask_v).const[d])
    V = 1
    while V * 2 <= v:
        V *= 2
    while V > 1:
        k = V.bit_length() - 1
        if all(b[d] % V == 0 for b in lin.lane_bases + lin.warp_bases + lin.reg_bases[k:]):
            break
        V //= 2
    return V


def _operands(op):
    ptr = op.operands[0]
    i = 1 if op.name == "load" else 2
    mask = other = None
    if op.attrs.get("mask"):
        mask = op.operands[i]
        i += 1
    if op.name == "load" and op.attrs.get("other"):
        other = op.operands[i]
    return ptr, mask, other


def _zero(em, t):
    cls = ptx.rclass(t)
    if cls in ("f32", "f64"):
        return em.ins(cls, f"mov.{cls} {{d}}, {ptx.literal(0.0, t)};")
    if cls == "pred":
        return em.ins("pred", "setp.ne.u32 {d}, 0, 0;")
    return em.ins(cls, f"mov.{'b64' if cls == 'b64' else 'b32'} {{d}}, 0;")


# -- load ---------------------------------------------------------------------------------

def _extract16(em, t, w, j):
    """Element j (0 = low half) of a 32-bit word as t's register form."""
    if t.name in ("float16", "bfloat16"):
        return em.widen16_half(w, j, t)  # (a store, an MMA or a loop carry takes the bits as they are)
    s = "s" if t.is_signed else "u"
    return em.ins("b32", f"bfe.{s}32 {{d}}, {w}, {16 * j}, 16;")


def _extract8(em, t, w, j):
    if t.is_fp8:
        return fp8.decode(em, t, em.ins("b32", f"bfe.u32 {{d}}, {w}, {8 * j}, 8;"))
    if t.is_bool:
        x = em.ins("b32", f"bfe.u32 {{d}}, {w}, {8 * j}, 8;")
        return em.ins("pred", f"setp.ne.u32 {{d}}, {x}, 0;")
    s = "s" if t.is_signed else "u"
    return em.ins("b32", f"bfe.{s}32 {{d}}, {w}, {8 * j}, 8;")


def _load_scalar(em, t, p, pred, other):
    """One element; ``other`` is the register masked-off lanes read (None: zero)."""
    g = f"@{pred} " if pred else ""
    if t.is_fp8:
        x = em.reg("b32")
        if pred:
            em.emit(f"mov.b32 {x}, 0;")
        em.emit(f"{g}ld.global.u8 {x}, [{p}];")
        r = fp8.decode(em, t, x)
        if pred and other is not None:
            r = select(em, t, pred, r, other)
        return r
    if t.is_bool or (t.is_floating and t.bits == 16):
        x = em.reg("b16" if t.bits == 16 else "b32")
        if pred:
            em.emit(f"mov.{'b16' if t.bits == 16 else 'b32'} {x}, 0;")
        em.emit(f"{g}ld.global.{'b16' if t.bits == 16 else 'u8'} {x}, [{p}];")
        if t.is_bool:
            r = em.ins("pred", f"setp.ne.u32 {{d}}, {x}, 0;")
        else:
            r = em.widen16(x, t)
        if pred and other is not None:
            r = select(em, t, pred, r, other)
        return r
    cls = ptx.rclass(t)
    r = em.reg(cls)
    if pred:
        if other is not None:
            em.emit(f"mov.{_movt(cls)} {r}, {other};")
        else:
            em.emit(f"mov.{_movt(cls)} {r}, {ptx.literal(0, t)};")
    em.emit(f"{g}ld.global.{ptx.mem_type(t)} {r}, [{p}];")
    return r


def _movt(cls):
    return {"b32": "b32", "b64": "b64", "f32": "f32", "f64": "f64", "pred": "pred"}[cls]


def _load_group(em, t, p, V, pred, others):
    if V == 1:
        return [_load_scalar(em, t, p, pred, others[0] if others else None)]
    es = _esize(t)
    g = f"@{pred} " if pred else ""
    cls = ptx.rclass(t)
    if es >= 4 and not (t.is_floating and t.bits == 16):
        rs = [em.reg(cls) for _ in range(V)]
        if pred:
            for i, r in enumerate(rs):
                init = others[i] if others else ptx.literal(0, t)
                em.emit(f"mov.{_movt(cls)} {r}, {init};")
        mt = {"f32": "f32", "f64": "f64", "b32": "b32", "b64": "b64"}[cls]
        em.emit(f"{g}ld.global.v{V}.{mt} {{{', '.join(rs)}}}, [{p}];")
        return rs
    nw = V * es // 4
    if nw == 0:  # 2 or 3 bytes: V=2 of int8/bool
        w = em.reg("b32")
        if pred:
            em.emit(f"mov.b32 {w}, 0;")
        em.emit(f"{g}ld.global.u16 {w}, [{p}];")
        words = [w]
    else:
        words = [em.reg("b32") for _ in range(nw)]
        if pred:
            for w in words:
                em.emit(f"mov.b32 {w}, 0;")
        if nw == 1:
            em.emit(f"{g}ld.global.b32 {words[0]}, [{p}];")
        else:
            em.emit(f"{g}ld.global.v{nw}.b32 {{{', '.join(words)}}}, [{p}];")
    out = []
    per = 4 // es
    for i in range(V):
        w = words[i // per]
        j = i % per
        r = _extract16(em, t, w, j) if es == 2 else _extract8(em, t, w, j)
        if pred and others:
            r = select(em, t, pred, r, others[i])
        out.append(r)
    return out


@rule("load")
def _load(em, op):
    ptr_v, mask_v, other_v = _operands(op)
    t = ptr_v.type.dtype.element
    ptrs = em.vals[ptr_v]
    masks = em.vals[mask_v] if mask_v is not None else None
    others = em.vals[other_v] if other_v is not None else None
    n = em.nregs(op.results[0])
    V = vec_width(em, ptr_v, mask_v)
    out = []
    for g in range(0, n, V):
        p = ptrs[g] if len(ptrs) > 1 else ptrs[0]
        m = affine.pred(em, (masks[g] if len(masks) > 1 else masks[0]) if masks else None)
        o = None
        if others:
            o = [others[g + i] if len(others) > 1 else others[0] for i in range(V)]
        out += _load_group(em, t, p, V, m, o)
    return [out]


# -- store --------------------------------------------------------------------------------

def _to16(em, t, r):
    if t.name in ("float16", "bfloat16"):
        return em.to16(r, t)
    return em.ins("b16", f"cvt.u16.u32 {{d}}, {r};")


def _store_group(em, t, p, vals, pred):
    if t.is_fp8:  # stored as its byte: from here on an 8-bit integer
        vals, t = [fp8.encode(em, t, v) for v in vals], dt.uint8
    V = len(vals)
    g = f"@{pred} " if pred else ""
    es = _esize(t)
    cls = ptx.rclass(t)
    if t.is_bool:
        vals = [em.ins("b32", f"selp.u32 {{d}}, 1, 0, {v};") for v in vals]
    if V == 1:
        v = vals[0]
        if t.is_floating and t.bits == 16:
            em.emit(f"{g}st.global.b16 [{p}], {_to16(em, t, v)};")
        else:
            em.emit(f"{g}st.global.{ptx.mem_type(t)} [{p}], {v};")
        return
    if es >= 4 and not (t.is_floating and t.bits == 16):
        mt = {"f32": "f32", "f64": "f64", "b32": "b32", "b64": "b64"}[cls]
        em.emit(f"{g}st.global.v{V}.{mt} [{p}], {{{', '.join(vals)}}};")
        return
    if es == 2:
        hs = [_to16(em, t, v) for v in vals]
        words = [em.ins("b32", f"mov.b32 {{d}}, {{{hs[i]}, {hs[i + 1]}}};") for i in range(0, V, 2)]
    else:
        words = []
        for i in range(0, V, 4):
            w = vals[i]
            for j in range(1, min(4, V - i)):
                w = em.ins("b32", f"bfi.b32 {{d}}, {vals[i + j]}, {w}, {8 * j}, 8;")
            words.append(w)
        if V == 2:
            em.emit(f"{g}st.global.u16 [{p}], {words[0]};")
            return
    if len(words) == 1:
        em.emit(f"{g}st.global.b32 [{p}], {words[0]};")
    else:
        em.emit(f"{g}st.global.v{len(words)}.b32 [{p}], {{{', '.join(words)}}};")


def _and_pred(em, a, b):
    if a is None:
        return b
    if b is None:
        return a
    return em.ins("pred", f"and.pred {{d}}, {a}, {b};")


@rule("store")
def _store(em, op):
    ptr_v, mask_v, _ = _operands(op)
    val_v = op.operands[1]
    t = ptr_v.type.dtype.element
    ptrs, vals = em.vals[ptr_v], em.vals[val_v]
    masks = em.vals[mask_v] if mask_v is not None else None
    # inside a reduce's combine a scalar is each thread's own call's (rules_reduce.combiner)
    owner = None if getattr(em, "per_thread_scalars", False) else em.owner_pred(em.lin(ptr_v))
    n = em.nregs(ptr_v)
    V = vec_width(em, ptr_v, mask_v)
    for g in range(0, n, V):
        p = ptrs[g] if len(ptrs) > 1 else ptrs[0]
        m = affine.pred(em, (masks[g] if len(masks) > 1 else masks[0]) if masks else None, owner)
        vs = [vals[g + i] if len(vals) > 1 else vals[0] for i in range(V)]
        _store_group(em, t, p, vs, m)
    return []


# -- atomics ------------------------------------------------------------------------------

_NATIVE = {"add": "add", "max": "max", "min": "min", "xchg": "exch", "and": "and", "or": "or", "xor": "xor"}


def _atom_type(em, kind, t):
    """The atom instruction type for (kind, t), or None to use the CAS loop."""
    if t.is_bool or (t.is_int and t.bits < 32):
        return None
    if t.is_floating:
        if kind == "add":
            if t.bits == 32:
                return "f32"
            if t.bits == 64:
                return "f64"
            if t.name == "float16":
                return "noftz.f16"
            if t.name == "bfloat16" and em.target.startswith("sm_90"):
                return "noftz.bf16"
            return None
        if kind == "xchg" and t.bits >= 32:
            return f"b{t.bits}"
        return None
    w = 64 if (t.bits == 64 or t.is_ptr) else 32
    if kind in ("xchg", "and", "or", "xor"):
        return f"b{w}"
    if kind == "add":
        return f"u{w}"
    return f"{'s' if t.is_signed else 'u'}{w}"


def _native_atomic(em, kind, t, ty, p, v, pred):
    g = f"@{pred} " if pred else ""
    if ty.endswith("f16") or ty.endswith("bf16"):
        h = _to16(em, t, v)
        o = em.reg("b16")
        em.emit(f"mov.b16 {o}, 0;")
        em.emit(f"{g}atom.global.acq_rel.gpu.{_NATIVE[kind]}.{ty} {o}, [{p}], {h};")
        if t.name == "float16":
            return em.ins("f32", f"cvt.f32.f16 {{d}}, {o};")
        return em.bf16_bits_to_f32(o)
    o = _zero(em, t)
    em.emit(f"{g}atom.global.acq_rel.gpu.{_NATIVE[kind]}.{ty} {o}, [{p}], {v};")
    return o


def cas_loop(em, t, p, pred, combine, with_bits: bool = False) -> str:
    """Atomically replace the element at p by combine(old) with a CAS loop on the
    enclosing aligned word; returns old (0 where pred is false). ``with_bits``: an element
    narrower than the word is passed as ``combine(old, raw)``, raw its memory bits in a b32."""
    cls = ptx.rclass(t)
    es = _esize(t)
    res = _zero(em, t)
    done, loop = em.label("cas_done"), em.label("cas")
    if pred:
        em.emit(f"@!{pred} bra {done};")
    wide = es == 8
    wt = "b64" if wide else "b32"
    wcls = "b64" if wide else "b32"
    if es >= 4:
        a = p
    else:
        a = em.ins("b64", f"and.b64 {{d}}, {p}, -4;")
        lo = em.ins("b32", f"cvt.u32.u64 {{d}}, {p};")
        sh = em.ins("b32", f"and.b32 {{d}}, {lo}, {3 if es == 1 else 2};")
        sh = em.ins("b32", f"shl.b32 {{d}}, {sh}, 3;")
    ow = em.ins(wcls, f"ld.relaxed.gpu.global.{wt} {{d}}, [{a}];")
    em.emit(f"{loop}:")
    with em.scope():
        # the element's value in its register form
        if es >= 4:
            if cls in ("f32", "f64"):
                old = em.ins(cls, f"mov.{wt} {{d}}, {ow};")
            else:
                old = ow
        else:
            bits = es * 8
            s = "s" if t.is_signed else "u"
            raw = em.ins("b32", f"bfe.{'u' if t.is_floating or t.is_bool else s}32 {{d}}, {ow}, {sh}, {bits};")
            if t.is_bool:
                old = em.ins("pred", f"setp.ne.u32 {{d}}, {raw}, 0;")
            elif t.name == "float16":
                h = em.ins("b16", f"cvt.u16.u32 {{d}}, {raw};")
                old = em.ins("f32", f"cvt.f32.f16 {{d}}, {h};")
            elif t.name == "bfloat16":
                h = em.ins("b16", f"cvt.u16.u32 {{d}}, {raw};")
                old = em.bf16_bits_to_f32(h)
            else:
                old = raw
        new = combine(old, raw) if with_bits and es < 4 else combine(old)
        if es >= 4:
            nw = em.ins(wcls, f"mov.{wt} {{d}}, {new};") if cls in ("f32", "f64") else new
        else:
            if t.is_bool:
                nb = em.ins("b32", f"selp.u32 {{d}}, 1, 0, {new};")
            elif t.is_floating:
                nb = em.ins("b32", f"cvt.u32.u16 {{d}}, {_to16(em, t, new)};")
            else:
                nb = new
            nw = em.ins("b32", f"bfi.b32 {{d}}, {nb}, {ow}, {sh}, {es * 8};")
        cur = em.ins(wcls, f"atom.global.acq_rel.gpu.cas.{wt} {{d}}, [{a}], {ow}, {nw};")
        again = em.ins("pred", f"setp.ne.{wt} {{d}}, {cur}, {ow};")
        em.emit(f"mov.{_movt(cls)} {res}, {old};")
        em.emit(f"mov.{wt} {ow}, {cur};")
        em.emit(f"@{again} bra {loop};")
    em.emit(f"{done}:")
    return res


def _combine_fn(em, kind, t):
    cls = ptx.rclass(t)

    def fn(old, v):
        if kind == "xchg":
            return v
        if t.is_bool:
            p = {"add": "or", "max": "or", "min": "and", "and": "and", "or": "or", "xor": "xor"}[kind]
            return em.ins("pred", f"{p}.pred {{d}}, {old}, {v};")
        if t.is_floating:
            f = "f64" if t.bits == 64 else "f32"
            if kind == "add":
                return em.round16(em.ins(cls, f"add.rn.{f} {{d}}, {old}, {v};"), t)
            if kind in ("max", "min"):
                return em.ins(cls, f"{kind}.{f} {{d}}, {old}, {v};")
            raise CompileError(f"atomic_{kind} is not defined on {t}")
        it = ptx.ity(t)
        bt = "b64" if cls == "b64" else "b32"
        if kind == "add":
            r = em.ins(cls, f"add.{it} {{d}}, {old}, {v};")
        elif kind in ("max", "min"):
            r = em.int_minmax(kind, it, old, v)
        else:
            r = em.ins(cls, f"{kind}.{bt} {{d}}, {old}, {v};")
        return em.norm(r, t)
    return fn


@rule("atomic_rmw")
def _atomic_rmw(em, op):
    kind = op.attrs["kind"]
    ptr_v, val_v = op.operands[0], op.operands[1]
    mask_v = op.operands[2] if op.attrs.get("mask") else None
    t = ptr_v.type.dtype.element
    lin = em.lin(ptr_v)
    owner = em.owner_pred(lin)
    ptrs, vals = em.vals[ptr_v], em.vals[val_v]
    masks = em.vals[mask_v] if mask_v is not None else None
    ty = _atom_type(em, kind, t)
    fn = _combine_fn(em, kind, t)
    first = _first_copies(lin, em.nregs(ptr_v))
    out = []
    for i in range(em.nregs(ptr_v)):
        if first[i] != i:  # a copy of an earlier register's element: its atomic ran there
            out.append(out[first[i]])
            continue
        p = ptrs[i] if len(ptrs) > 1 else ptrs[0]
        v = vals[i] if len(vals) > 1 else vals[0]
        m = (masks[i] if len(masks) > 1 else masks[0]) if masks else None
        pred = _and_pred(em, owner, m)
        if ty is not None:
            out.append(_native_atomic(em, kind, t, ty, p, v, pred))
        else:
            out.append(cas_loop(em, t, p, pred, lambda old, v=v: fn(old, v)))
    return [_broadcast_from_owner(em, op, out, lin)]


def _first_copies(lin, n: int) -> list[int]:
    """For each of a thread's n registers, the first holding its element: an atomic runs once
    per element (a layout holding one element in two registers applied it twice)."""
    if lin is None or n <= 1 or len(lin.reg_bases) != (n - 1).bit_length():
        return list(range(n))
    return first_copy_regs(lin)


@rule("atomic_cas")
def _atomic_cas(em, op):
    ptr_v, cmp_v, val_v = op.operands
    t = ptr_v.type.dtype.element
    lin = em.lin(ptr_v)
    owner = em.owner_pred(lin)
    ptrs, cmps, vals = (em.vals[v] for v in op.operands)
    cls = ptx.rclass(t)
    first = _first_copies(lin, em.nregs(ptr_v))
    out = []
    for i in range(em.nregs(ptr_v)):
        if first[i] != i:
            out.append(out[first[i]])
            continue
        p, c, v = (x[i] if len(x) > 1 else x[0] for x in (ptrs, cmps, vals))
        g = f"@{owner} " if owner else ""
        es = _esize(t)
        if es >= 4:
            wt = f"b{es * 8}"
            wcls = "b64" if es == 8 else "b32"
            cb = em.ins(wcls, f"mov.{wt} {{d}}, {c};") if cls[0] == "f" else c
            vb = em.ins(wcls, f"mov.{wt} {{d}}, {v};") if cls[0] == "f" else v
            o = em.ins(wcls, f"mov.{wt} {{d}}, 0;")
            em.emit(f"{g}atom.global.acq_rel.gpu.cas.{wt} {o}, [{p}], {cb}, {vb};")
            out.append(em.ins(cls, f"mov.{wt} {{d}}, {o};") if cls[0] == "f" else o)
        elif t.is_floating:  # bit patterns, as the 32/64-bit cas: -0.0 is not 0.0
            def combine(old, raw, c=c, v=v):
                cb = em.ins("b32", f"cvt.u32.u16 {{d}}, {_to16(em, t, c)};")
                eq = em.ins("pred", f"setp.eq.b32 {{d}}, {raw}, {cb};")
                return select(em, t, eq, v, old)
            out.append(cas_loop(em, t, p, owner, combine, with_bits=True))
        else:
            def combine(old, c=c, v=v):
                eq = _compare_eq(em, t, old, c)
                return select(em, t, eq, v, old)
            out.append(cas_loop(em, t, p, owner, combine))
    return [_broadcast_from_owner(em, op, out, lin)]


def _compare_eq(em, t, a, b):
    if t.is_bool:
        x = em.ins("pred", f"xor.pred {{d}}, {a}, {b};")
        return em.ins("pred", f"not.pred {{d}}, {x};")
    return em.ins("pred", f"setp.eq.{ptx.ity(t)} {{d}}, {a}, {b};")


def _broadcast_from_owner(em, op, regs, lin):
    """Only the owner of each replicated element ran the atomic; the others read its
    result through shared memory (when the result is used)."""
    res = op.results[0]
    owner = em.owner_pred(lin)
    if res not in em.used or owner is None:
        return regs
    t = res.type.dtype
    cls = ptx.rclass(t)
    st = {"pred": "b32", "b32": "b32", "f32": "f32", "b64": "b64", "f64": "f64"}[cls]
    es = 8 if cls in ("b64", "f64") else 4
    if lin is None:
        base = em.scratch(8)
        v = em.to_b32(regs[0], t) if cls == "pred" else regs[0]
        em.emit(f"@{owner} st.shared.{st} [{base}], {v};")
        em.barrier()
        r = em.ins("b32" if cls == "pred" else cls, f"ld.shared.{st} {{d}}, [{base}];")
        return [em.ins("pred", f"setp.ne.u32 {{d}}, {r}, 0;") if cls == "pred" else r]
    from .emitter import _pack
    numel = 1
    for s in lin.shape:
        numel *= s
    base = em.scratch(numel * es)
    key = lambda b: _pack(b, lin.shape)  # noqa: E731
    tp, _ = em.thread_part(lin, key)
    out = []
    addrs = []
    for r, v in enumerate(regs):
        rp = em.reg_part(lin, r, key)
        x = em.ins("b32", f"xor.b32 {{d}}, {tp}, {rp};")
        a = em.ins("b32", f"mad.lo.u32 {{d}}, {x}, {es}, {base};")
        addrs.append(a)
        vv = em.to_b32(v, t) if cls == "pred" else v
        em.emit(f"@{owner} st.shared.{st} [{a}], {vv};")
    em.barrier()
    for a in addrs:
        r = em.ins("b32" if cls == "pred" else cls, f"ld.shared.{st} {{d}}, [{a}];")
        out.append(em.ins("pred", f"setp.ne.u32 {{d}}, {r}, 0;") if cls == "pred" else r)
    return out


@rule("print")
def _print(em, op):
    from .printing import lower_print
    return lower_print(em, op)

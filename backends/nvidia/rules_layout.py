"""Lowering of creation and layout ops: arange, splat, broadcast, expand_dims,
convert_layout, reshape, permute, split, join, program_id.

A layout change is first tried as a renaming: with linear layouts, the destination's
register i holds fn(coordinate) for a coordinate map fn (identity, projection of
broadcast dims, dropping an inserted axis, re-splitting the flat index, permuting), and
when fn maps the destination's lane and warp bases onto the source's, every thread
already holds what it needs: register i is the source register solving a GF(2) system,
and no instruction is emitted. Otherwise the tile goes through the shared-memory
scratch: every thread stores its registers at their row-major offsets (16-byte
vectors where the registers are contiguous), swizzled where that spreads a warp's
accesses over more banks (swizzle.py), one barrier, and every thread loads what its
destination registers hold.
"""
from __future__ import annotations

from gluon_trace.layouts import LinearLayout, join_layout

from . import affine, ptx, swizzle
from .emitter import _pack, _unpack, rule

_SMEM_TYPE = {"b32": "b32", "f32": "f32", "b64": "b64", "f64": "f64", "pred": "b32"}


def _vec(lin: LinearLayout, key, max_vec: int) -> int:
    """Registers 0..V-1 of every group are V consecutive smem slots, V-aligned."""
    vals = [key(b) for b in lin.reg_bases]
    V = 1
    while V < max_vec and len(vals) > V.bit_length() - 1 and vals[V.bit_length() - 1] == V:
        V *= 2
    while V > 1:
        k = V.bit_length() - 1
        others = vals[k:] + [key(b) for b in lin.lane_bases + lin.warp_bases]
        if all(v % V == 0 for v in others):
            break
        V //= 2
    return V


def _addr(em, lin, key, es, r, tp, tmask, base_reg_cache):
    """(address register, immediate byte offset) of register r's slot."""
    rp = em.reg_part(lin, r, key)
    if rp & tmask == 0:
        k = ("taddr", tp, es)
        a = base_reg_cache.get(k)
        if a is None:
            base = em.smem_base()
            x = em.reg("b32")
            em.pro(f"mad.lo.u32 {x}, {tp}, {es}, {base};")
            a = base_reg_cache[k] = x
        return a, rp * es
    x = em.ins("b32", f"xor.b32 {{d}}, {tp}, {rp};")
    a = em.ins("b32", f"mad.lo.u32 {{d}}, {x}, {es}, {em.smem_base()};")
    return a, 0


SWIZZLE = True  # bank-conflict swizzle of the scratch (swizzle.py); a switch for benchmarks


def _swizzle(src, dst, skey, dkey, V, Vd, es, numel):
    """An element-offset map against bank conflicts for this exchange, or None."""
    accesses = [([skey(b) * es for b in src.lane_bases], V * es),
                ([dkey(b) * es for b in dst.lane_bases], Vd * es)]
    f = swizzle.choose(accesses, (max(V, Vd) * es).bit_length() - 1, (numel * es).bit_length() - 1)
    if f is None:
        return None
    return lambda o: f(o * es) // es


def exchange(em, regs, dtype, src: LinearLayout, dst: LinearLayout, fn) -> list[str]:
    """Move a tile between layouts through shared memory (see the module docstring)."""
    cls = ptx.rclass(dtype)
    st = _SMEM_TYPE[cls]
    es = 8 if cls in ("b64", "f64") else 4
    numel = 1
    for s in src.shape:
        numel *= s
    em.scratch(numel * es)
    cache = em.thread_cache
    skey = lambda b: _pack(b, src.shape)  # noqa: E731
    dkey = lambda b: _pack(fn(b), src.shape)  # noqa: E731
    V, Vd = _vec(src, skey, 16 // es), _vec(dst, dkey, 16 // es)
    swz = _swizzle(src, dst, skey, dkey, V, Vd, es, numel) if SWIZZLE else None
    if swz is not None:
        skey = lambda b, k=skey: swz(k(b))  # noqa: E731
        dkey = lambda b, k=dkey: swz(k(b))  # noqa: E731
    tp, tmask = em.thread_part(src, skey)
    vals = [em.to_b32(r, dtype) for r in regs] if cls == "pred" else regs
    # warps holding copies of another warp's elements stay out: two warps writing one byte with
    # nothing ordering them race (a layout whose lane basis repeats a register's put the copies
    # in different registers, so different instructions). Lanes of one warp may repeat a write.
    g_ = f"@{p} " if (p := em.owner_pred(src, lanes=False)) else ""
    for g in range(0, src.num_regs, V):
        a, off = _addr(em, src, skey, es, g, tp, tmask, cache)
        group = vals[g:g + V]
        if V > 1:
            em.emit(f"{g_}st.shared.v{V}.{st} [{a}+{off}], {{{', '.join(group)}}};")
        else:
            em.emit(f"{g_}st.shared.{st} [{a}+{off}], {group[0]};")
    em.barrier()
    tp, tmask = em.thread_part(dst, dkey)
    V = Vd
    out = []
    lcls = "b32" if cls == "pred" else cls
    for g in range(0, dst.num_regs, V):
        a, off = _addr(em, dst, dkey, es, g, tp, tmask, cache)
        rs = [em.reg(lcls) for _ in range(V)]
        if V > 1:
            em.emit(f"ld.shared.v{V}.{st} {{{', '.join(rs)}}}, [{a}+{off}];")
        else:
            em.emit(f"ld.shared.{st} {rs[0]}, [{a}+{off}];")
        out += rs
    if cls == "pred":
        out = [em.ins("pred", f"setp.ne.u32 {{d}}, {r}, 0;") for r in out]
    return out


def move(em, regs, dtype, src: LinearLayout, dst: LinearLayout, fn=None) -> list[str]:
    """Registers of a tile held in ``src`` re-arranged for ``dst`` (dst coord c holds the
    source element at fn(c))."""
    fn = fn or (lambda c: tuple(c))
    ren = em.renaming(dst, src, fn)
    if ren is not None:
        return [regs[i] for i in ren]
    return exchange(em, regs, dtype, src, dst, fn)


# -- ops --------------------------------------------------------------------------------

@rule("program_id", "num_programs")
def _pid(em, op):
    axis = "xyz"[op.attrs["axis"]]
    return [[em.special(("%ctaid." if op.name == "program_id" else "%nctaid.") + axis)]]


@rule("read_timer")
def _timer(em, op):
    # a fresh read each time (em.special would read once in the prologue)
    return [[em.ins("b64", f"mov.u64 {{d}}, %{op.attrs['clock']};")]]


@rule("arange")
def _arange(em, op):
    lin = em.lin(op.results[0])
    start = op.attrs["start"]
    key = lambda b: b[0]  # noqa: E731
    tp, tmask = em.thread_part(lin, key)
    out = []
    em.flags["affine_op"] = {}  # registers shared within this arange, not kept for later ones
    for r in range(lin.num_regs):
        rp = em.reg_part(lin, r, key)
        if rp & tmask == 0:
            v = affine.make(em, tp, rp + start)
        else:
            v = em.ins("b32", f"xor.b32 {{d}}, {tp}, {rp};")
            if start:
                v = em.ins("b32", f"add.s32 {{d}}, {v}, {start};")
        out.append(v)
    em.flags["affine_op"] = {}
    return [out]


@rule("splat")
def _splat(em, op):
    return [em.vals[op.operands[0]] * em.nregs(op.results[0])]


@rule("broadcast")
def _broadcast(em, op):
    src_v, dst_v = op.operands[0], op.results[0]
    src_shape = src_v.type.shape
    fn = lambda c: tuple(x if s != 1 else 0 for x, s in zip(c, src_shape))  # noqa: E731
    return [move(em, em.vals[src_v], src_v.type.dtype, em.lin(src_v), em.lin(dst_v), fn)]


@rule("expand_dims")
def _expand_dims(em, op):
    src_v, dst_v = op.operands[0], op.results[0]
    ax = op.attrs["axis"]
    fn = lambda c: tuple(c[:ax]) + tuple(c[ax + 1:])  # noqa: E731
    return [move(em, em.vals[src_v], src_v.type.dtype, em.lin(src_v), em.lin(dst_v), fn)]


@rule("convert_layout")
def _convert_layout(em, op):
    src_v, dst_v = op.operands[0], op.results[0]
    return [move(em, em.vals[src_v], src_v.type.dtype, em.lin(src_v), em.lin(dst_v))]


@rule("reshape")
def _reshape(em, op):
    src_v, dst_v = op.operands[0], op.results[0]
    ss, ds = src_v.type.shape, dst_v.type.shape
    fn = lambda c: _unpack(_pack(c, ds), ss)  # noqa: E731
    return [move(em, em.vals[src_v], src_v.type.dtype, em.lin(src_v), em.lin(dst_v), fn)]


@rule("permute")
def _permute(em, op):
    src_v, dst_v = op.operands[0], op.results[0]
    dims = op.attrs["dims"]

    def fn(c):
        out = [0] * len(dims)
        for i, d in enumerate(dims):
            out[d] = c[i]
        return tuple(out)
    return [move(em, em.vals[src_v], src_v.type.dtype, em.lin(src_v), em.lin(dst_v), fn)]


@rule("split")
def _split(em, op):
    # move the tile into the layout that holds the last dimension in register bit 0 over the
    # halves' layout (a renaming when a thread already holds both halves); then the halves are
    # its even and odd registers. (A move's coordinate map must be linear, so the half at
    # last coordinate 1 cannot be taken by a map of its own.)
    src_v, half_v = op.operands[0], op.results[0]
    half = half_v.type
    pair = em.lin_of(join_layout(half.layout, half.shape, em.nw, 32),
                     src_v.type.shape)
    regs = move(em, em.vals[src_v], src_v.type.dtype, em.lin(src_v), pair)
    return [regs[0::2], regs[1::2]]


@rule("join")
def _join(em, op):
    # join's layout puts the new dimension in register bit 0 over the operands' layout
    # (layouts.join_layout), so the result interleaves the two register lists
    a, b = (em.vals[v] for v in op.operands)
    return [[r for pair in zip(a, b) for r in pair]]

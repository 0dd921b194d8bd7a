"""Where each element of a tile lives, in instructions.

A tile's linear layout maps (register, lane, warp) bits to coordinates by XOR of
bases, and row-major flattening of power-of-two shapes is XOR-linear too. So any
per-element quantity that is linear in the coordinates (a flat index, an LDS byte
address) is ``thread_part(tid) ^ reg_part(r)``: the thread part is built from the
work-item id's bits once, at the kernel entry (hoisted), and the register part is a
compile-time constant. On that rest ``arange``, the LDS exchanges behind
``convert_layout`` (and reshape/permute when data must move), reductions and scans.
Shape ops where no element changes thread are pure register renamings.
"""
from __future__ import annotations

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace.layouts import free_bits, join_layout

from .emitter import WAVE_LOG, dwords
from .mir import Imm, is_vgpr


def log2(n: int) -> int:
    return n.bit_length() - 1


def row_major(shape):
    """flat(coord) for a power-of-two shape: bits of dim d sit above those of d+1."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]

    def flat(c):
        return sum(int(x) * s for x, s in zip(c, strides))
    return flat


def tid_pairs(em, lin, fn, skip_lanes=0, skip_warps=0):
    """[(bit of the work-item id, value)] so that thread_part = XOR of the values of
    the set bits; ``skip_*`` are masks of lane/warp bases to leave out."""
    wl = WAVE_LOG[em.wave]
    pairs = []
    for j, b in enumerate(lin.lane_bases):
        if not skip_lanes >> j & 1 and fn(b):
            pairs.append((j, fn(b)))
    for j, b in enumerate(lin.warp_bases):
        if not skip_warps >> j & 1 and fn(b):
            pairs.append((wl + j, fn(b)))
    return tuple(pairs)


def reg_part(lin, fn, r: int) -> int:
    v = 0
    for j, b in enumerate(lin.reg_bases):
        if r >> j & 1:
            v ^= fn(b)
    return v


def thread_part(em, pairs):
    """VGPR (hoisted to the kernel entry) holding XOR of values of set tid bits."""
    if not pairs:
        return Imm(0)
    key = ("tp", pairs)
    if key in em.memo:
        return em.memo[key]
    with em.hoisted():
        runs = []
        for bit, val in sorted(pairs):
            if runs and runs[-1][0] + len(runs[-1][2]) == bit and val == runs[-1][1] << len(runs[-1][2]) \
                    and val & (val - 1) == 0:
                runs[-1][2].append(val)
            else:
                runs.append((bit, val, [val]))
        acc = None
        for bit, val, vals in runs:
            t = em.valu("v_bfe_u32", em.v(), [em.tid, Imm(bit), Imm(len(vals))], form="vop3")
            if val & (val - 1) == 0:
                if val > 1:
                    t = em.valu("v_lshlrev_b32", em.v(), [Imm(log2(val)), t])
            else:  # a single bit with a multi-bit value (swizzled layouts)
                t = em.valu("v_mul_u32_u24", em.v(), [Imm(val), t])
            acc = t if acc is None else em.valu("v_xor_b32", em.v(), [acc, t])
    low = min(v & -v for _, v in pairs)
    em.set_mult(acc, low)
    em.memo[key] = acc
    return acc


def possible_bits(pairs) -> int:
    m = 0
    for _, v in pairs:
        m |= v
    return m


def combine(em, tp, pairs, const: int, add: int = 0):
    """tp ^ const (+ add): a single add when the constant's bits cannot collide."""
    if isinstance(tp, Imm):
        return Imm(((tp.bits ^ const) + add) & 0xFFFFFFFF)
    if const & possible_bits(pairs) == 0:
        k = const + add
        return tp if k == 0 else em.valu("v_add_u32", em.v(), [Imm(k), tp])
    x = em.valu("v_xor_b32", em.v(), [Imm(const), tp])
    return x if add == 0 else em.valu("v_add_u32", em.v(), [Imm(add), x])


# -- arange -----------------------------------------------------------------------------------

def rule_arange(em, op):
    from .mir import Aff
    ty = op.result.type
    lin = em.linear(ty)
    fn = lambda b: b[0]  # noqa: E731
    pairs = tid_pairs(em, lin, fn)
    tp = thread_part(em, pairs)
    start = op.attrs["start"]
    out = []
    for r in range(lin.num_regs):
        c = reg_part(lin, fn, r)
        if isinstance(tp, Imm):
            out.append(Imm((c + start) & 0xFFFFFFFF))
        elif c & possible_bits(pairs) == 0:  # tp ^ c == tp + c: keep the constant apart
            out.append(Aff(tp, c + start, 1) if c + start else tp)
        else:
            out.append(combine(em, tp, pairs, c, start))
    em.vals[op.result] = out


def rule_splat(em, op):
    x = em.vals[op.operands[0]]
    n = em.linear(op.result.type).num_regs
    em.vals[op.result] = [x] * n


# -- register renamings -------------------------------------------------------------------------

def remap(src_lin, dst_lin, to_src):
    """For each register of the destination, the source register holding the same
    element in every thread, or None if some element must move between threads.
    ``to_src`` maps destination coordinates (array ..., ndim) to source coordinates."""
    dc = dst_lin.coords()
    sc = src_lin.coords()
    if dc.shape[:2] != sc.shape[:2]:
        return None
    want = to_src(dc)
    key_s = np.zeros(sc.shape[:3], np.int64)
    key_w = np.zeros(want.shape[:3], np.int64)
    for d, stride in enumerate(_strides(src_lin.shape)):
        key_s += sc[..., d] * stride
        key_w += want[..., d] * stride
    # candidates from thread (0, 0), then checked on every thread
    first = {}
    for r, k in enumerate(key_s[0, 0].tolist()):
        first.setdefault(k, r)
    cand = [first.get(k) for k in key_w[0, 0].tolist()]
    if any(c is None for c in cand):
        return None
    if not np.array_equal(key_s[:, :, cand], key_w):
        return None
    return cand


def _strides(shape):
    s = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        s[d] = s[d + 1] * shape[d + 1]
    return s


def _moved(em, x, dst_lin, to_src) -> list:
    """``x``'s registers arranged for ``dst_lin``: renamed when possible, else through LDS."""
    src_lin = em.linear(x.type)
    regs = em.elems(x)
    cand = remap(src_lin, dst_lin, to_src)
    if cand is not None:
        return [regs[c] for c in cand]
    return lds_exchange(em, x.type.dtype, regs, src_lin, dst_lin, to_src)


def _shape_op(em, op, to_src):
    em.vals[op.result] = _moved(em, op.operands[0], em.linear(op.result.type), to_src)


def rule_broadcast(em, op):
    src_shape = op.operands[0].type.shape
    bdims = [d for d, s in enumerate(src_shape) if s == 1 and op.attrs["shape"][d] != 1]

    def to_src(c):
        c = c.copy()
        for d in bdims:
            c[..., d] = 0
        return c
    _shape_op(em, op, to_src)


def rule_expand_dims(em, op):
    axis = op.attrs["axis"]
    _shape_op(em, op, lambda c: np.delete(c, axis, axis=-1))


def rule_reshape(em, op):
    src_shape = op.operands[0].type.shape
    dst_shape = op.result.type.shape

    def to_src(c):
        flat = np.zeros(c.shape[:-1], np.int64)
        for d, s in enumerate(_strides(dst_shape)):
            flat += c[..., d] * s
        out = np.zeros(c.shape[:-1] + (len(src_shape),), np.int64)
        for d, s in enumerate(_strides(src_shape)):
            out[..., d] = (flat // s) % src_shape[d]
        return out
    _shape_op(em, op, to_src)


def rule_permute(em, op):
    dims = op.attrs["dims"]
    inv = [dims.index(k) for k in range(len(dims))]
    _shape_op(em, op, lambda c: c[..., inv])


def rule_split(em, op):
    # into the layout holding the last dimension in register bit 0 over the halves' layout
    # (a renaming when a thread already holds both halves); the halves are its even and odd
    # registers (the exchange's address maps are linear, so no map per half)
    x, half = op.operands[0], op.results[0].type
    pair = join_layout(half.layout, half.shape, em.nw, em.wave).to_linear(tuple(x.type.shape), em.nw, em.wave)
    regs = _moved(em, x, pair, lambda c: c)
    em.vals[op.results[0]], em.vals[op.results[1]] = regs[0::2], regs[1::2]


def rule_join(em, op):
    # join's layout puts the new dimension in register bit 0 over the operands' layout
    # (layouts.join_layout), so the result interleaves the two register lists
    a, b = (em.elems(v) for v in op.operands)
    em.vals[op.result] = [r for pair in zip(a, b) for r in pair]


def rule_convert_layout(em, op):
    _shape_op(em, op, lambda c: c)


# -- LDS --------------------------------------------------------------------------------------

def ds_ops(n: int):
    return ("ds_write_b64", "ds_read_b64") if n == 2 else ("ds_write_b32", "ds_read_b32")


def lds_store(em, addr, off: int, x, n: int) -> None:
    """A scratch store (offsets are relative to the scratch region above the buffers)."""
    off += em.scratch_off
    em.emit(ds_ops(n)[0], [], [addr, em.to_v(x)], suffix=f"offset:{off}" if off else "",
            kind="lds_store")


def lds_store_owned(em, stores, owner) -> None:
    """``stores`` [(addr, off, value, dwords)] as lds_store, run only in the lanes of ``owner``
    (an SGPR lane mask; None: every lane, in the same instructions as plain lds_stores).
    Under a mask the values are moved into VGPRs first: a value made under a partial EXEC
    mask must not be reused (the emitter's caches would hand it to later code)."""
    if owner is None:
        for addr, off, x, n in stores:
            lds_store(em, addr, off, x, n)
        return
    from .memory import ExecMask   # memory imports this module
    stores = [(addr, off, em.to_v(x), n) for addr, off, x, n in stores]
    with ExecMask(em, None, owner):
        for addr, off, x, n in stores:
            lds_store(em, addr, off, x, n)


def wave_owner(em, lin):
    """The lanes of one wave of each set of ``lin``'s wave copies (None: no wave holds copies):
    the waves whose LDS scratch stores of a tile in ``lin`` go to bytes no other wave stores.
    Two waves storing one byte with no barrier between them race even when they store one
    value; lanes of one wave storing one value to one byte do not."""
    from .memory import owner_lanes   # memory imports this module
    return owner_lanes(em, lin, lanes=False)


def lds_load(em, addr, off: int, n: int):
    off += em.scratch_off
    r = em.v(n)
    em.emit(ds_ops(n)[1], [r], [addr], suffix=f"offset:{off}" if off else "", kind="lds_load")
    return r


def byte_addresses(em, lin, fn, esize, regs, skip_lanes=0, skip_warps=0, base=0):
    """(VGPR base, immediate offset) per register for LDS element fn(coord)*esize."""
    pairs = tid_pairs(em, lin, fn, skip_lanes, skip_warps)
    scaled = tuple((b, v * esize) for b, v in pairs)
    tp = thread_part(em, scaled)
    out = []
    for r in regs:
        c = reg_part(lin, fn, r) * esize
        if c & possible_bits(scaled) == 0 and c + base + em.scratch_off < 65536:
            out.append((_as_vgpr_hoisted(em, tp), c + base))
        else:
            out.append((em.to_v(combine(em, tp, scaled, c, base)), 0))
    return out


def _as_vgpr_hoisted(em, tp):
    if is_vgpr(tp):
        return tp
    key = ("zero_v",)
    if key not in em.memo:
        with em.hoisted():
            em.memo[key] = em.to_v(Imm(0))
    return em.memo[key]


def lds_exchange(em, d: dt.dtype, regs, src_lin, dst_lin, to_src):
    """Move a tile between layouts through LDS: each source register is written at its
    element's row-major slot, every destination register read from its element's."""
    n = dwords(d)
    esize = 4 * n
    em.use_lds(int(np.prod(src_lin.shape)) * esize)
    src_fn = row_major(src_lin.shape)

    def dst_fn(b):
        return src_fn(to_src(np.asarray(b, np.int64)))
    em.lds_begin()
    stores = []
    for (addr, off), r in zip(byte_addresses(em, src_lin, src_fn, esize, range(len(regs))),
                              range(len(regs))):
        if r & _free_reg_mask(src_lin):
            continue  # a second copy of an element this thread already wrote
        stores.append((addr, off, regs[r], n))
    lds_store_owned(em, stores, wave_owner(em, src_lin))
    em.barrier()
    out = []
    for addr, off in byte_addresses(em, dst_lin, dst_fn, esize, range(dst_lin.num_regs)):
        out.append(lds_load(em, addr, off, n))
    em.lds_end()
    return out


def _free_reg_mask(lin) -> int:
    return free_bits(lin)["reg"]

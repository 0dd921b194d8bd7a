"""Hopper's asynchronous machinery: mbarriers, the async-proxy fence, TMA copies and wgmma.

Who issues what. The interpreter counts ONE arrival per ``mbarrier.arrive``/``expect`` call
and one TMA copy per ``tma.async_load``, whatever the number of threads; PTX counts per
executing thread. So every op that changes a barrier's or a copy's state (init, invalidate,
arrive, expect_tx, bulk copies and their groups) runs in one elected thread of the partition
(thread 0: ``owner_pred(None)``); waits run in every thread, each spinning on
``mbarrier.try_wait.parity`` itself.

Ordering with the other threads:
- ``init``: ``fence.mbarrier_init`` (sm_90: TMA completes bytes on it through the async
  proxy) and a ``bar.sync`` after it, so no thread arrives on or waits for a barrier that is
  not yet initialised. A run of inits (a ring's full and empty barriers, with only their
  views and indices computed between them) shares one fence and one barrier after its last:
  the fence orders every init the thread made before it. Measured on the H200 (session 14):
  a fence and a barrier after each of a 8-stage ring's 16 inits took ~0.5 us at the start
  of every CTA, before its first load.
- ``arrive`` (a consumer releasing a buffer): a ``bar.sync`` before it, so the one arrival
  stands for every thread's earlier accesses.
- ``invalidate``: a ``bar.sync`` before it (nobody is still waiting).
- ``tma.store_wait``: only the issuing thread's bulk groups are waited for, so a ``bar.sync``
  after it before anyone writes the buffer again.
- Accesses by the other threads before a TMA copy of a buffer: membar's barrier (a TMA load
  writes its buffer, a TMA store reads it), plus the user's ``fence_async_shared`` between
  generic writes and an async-proxy read.

A descriptor argument is a 128-byte CUtensorMap in the kernel's parameter space
(``.param .align 64 .b8 name[128]``), addressed through ``cvta.param``; its global shape
follows as one ``.u32`` parameter per dim (for ``tensordesc_dim``), see :func:`declare_desc`.
No ``prefetch.tensormap`` of the maps (CUTLASS's producers issue one): tried on the H200
(session 13), it moved no kernel measurably, the skinny GEMM's 11 us launches included.

wgmma: each accumulator tile of the NVMMA v3 layout is one ``m64nN`` instruction per K step
(its registers found as in rules_mma: by their coordinates in thread 0), A and B from
shared memory through descriptors fitted to the views (wgmma.py), or A from registers in
the DotOperand layout. A warpgroup past the first adds its rows' (or columns') byte offset
to its descriptors at run time. Every call is ``wgmma.fence``, the instructions, one
``commit_group``; a synchronous call also waits for it; ``warpgroup_mma_wait`` is
``wait_group``. The accumulator is updated in place when it is a chain's own registers.
With pieces (a list of accumulators over a stacked B [P, K, n]) a run of adjacent column tiles
across pieces is one m64n(run) instruction, where the descriptor model places every column of
it as the view's table does (the tile that is no power of two: 5 x 32 = one m64n160).
With K pieces (a list of A operands over B stacked once more) each term a[q] @ b[q] is emitted
as its own K steps, all between the one fence and commit; only the first term's first step
may drop the old accumulator.
"""
from __future__ import annotations

import numpy as np

from gluon_trace import dtypes as dt
from gluon_trace.errors import CompileError
from gluon_trace.ops_mma import wgmma_operands

from . import ptx
from .emitter import rule
from .smem_view import Smem, _barrier_if_needed, _view_of
from .tma import box_of


def declare_desc(em, v, pname: str) -> list[str]:
    """The parameter declarations of descriptor argument ``v``; its value is the generic
    address of the CUtensorMap, its dims go to ``em.flags['tma_dims'][v]``."""
    t = v.type
    decls = [f".param .align 64 .b8 {pname}[128]"]
    p = em.reg("b64")
    em.pro(f"mov.b64 {p}, {pname};")
    a = em.reg("b64")
    em.pro(f"cvta.param.u64 {a}, {p};")  # TMA takes a generic address of the param-space map
    dims = []
    for d in range(t.rank):
        decls.append(f".param .u32 {pname}_dim{d}")
        r = em.reg("b32")
        em.pro(f"ld.param.u32 {r}, [{pname}_dim{d}];")
        dims.append(r)
    em.flags.setdefault("tma_dims", {})[v] = dims
    em.flags["tma"] = True
    em.vals[v] = [a]
    return decls


def _addr(em, s: Smem) -> str:
    """The shared address of a view's first element (barriers, TMA boxes, wgmma tiles)."""
    off = s.const + int(s.rel.flat[0])
    if not off:
        return s.base
    key = ("sview", s.base, off)
    r = em.memo_get(key)
    if r is None:
        r = em.ins("b32", f"add.u32 {{d}}, {s.base}, {off};")
        em.memo_put(key, r)
    return r


def _elected(em, op, pred_index: int | None) -> str:
    """Thread 0 of the partition, and the op's own predicate when it has one."""
    p = em.owner_pred(None)
    if pred_index is None or not op.attrs.get("pred"):
        return p
    user = em.vals[op.operands[pred_index]][0]
    return em.ins("pred", f"and.pred {{d}}, {p}, {user};")


def _b32(em, v) -> str:
    r = em.vals[v][0]
    if v.type.dtype.bits == 64:
        return em.ins("b32", f"cvt.u32.u64 {{d}}, {r};")
    return r


# -- mbarriers ----------------------------------------------------------------------------------

def _sm90(em, op, what: str) -> None:
    ptx.require(em.target, what, 90, op.loc)


@rule("mbarrier_init")
def _mb_init(em, op):
    a = _addr(em, _view_of(em, op.operands[0]))
    g = em.owner_pred(None)
    count = int(op.attrs["count"]) * em.arrivals.get(op.operands[0], 1)  # arrivals.py
    em.emit(f"@{g} mbarrier.init.shared::cta.b64 [{a}], {count};")
    nxt = em.next_effect()
    if nxt is not None and nxt.name == "mbarrier_init":
        return []  # the run's last init fences and meets for all of them
    if em.target.startswith("sm_9"):  # the init visible to the async proxy (TMA's complete_tx) too
        em.emit(f"@{g} fence.mbarrier_init.release.cluster;")
    em.barrier()
    return []


@rule("mbarrier_invalidate")
def _mb_invalidate(em, op):
    a = _addr(em, _view_of(em, op.operands[0]))
    em.barrier()
    em.emit(f"@{_elected(em, op, 1)} mbarrier.inval.shared::cta.b64 [{a}];")
    return []


@rule("mbarrier_expect")
def _mb_expect(em, op):
    _sm90(em, op, "mbarrier.expect (mbarrier.arrive.expect_tx)")
    a = _addr(em, _view_of(em, op.operands[0]))
    em.emit(f"@{_elected(em, op, 1)} mbarrier.arrive.expect_tx.shared::cta.b64 _, [{a}], "
            f"{int(op.attrs['bytes'])};")
    return []


def _arrive(em, g: str, a: str, count: int) -> None:
    """``count`` arrivals on the mbarrier at ``a`` (sm_80/86/89 have no count operand and no
    sink destination: one arrive each, into a scratch state register)."""
    if em.target.startswith("sm_9"):
        em.emit(f"{g}mbarrier.arrive.shared::cta.b64 _, [{a}], {count};")
        return
    state = em.reg("b64")
    for _ in range(count):
        em.emit(f"{g}mbarrier.arrive.shared::cta.b64 {state}, [{a}];")


_ORDERS_MEMORY = ("ld.", "st.", "wgmma", "cp.", "atom", "red.", "bar.", "barrier", "mbarrier.try_wait",
                  "mbarrier.test_wait", "ldmatrix", "stmatrix", "fence", "bra", "ret", "tcgen", "shfl")


def _barrier_once(em) -> None:
    """A partition barrier, unless the straight-line code since the last one only arrived on
    mbarriers and computed registers (a release to several CTAs' barriers needs one barrier,
    not one per arrival)."""
    for text, _ in reversed(em.lines):
        t = text.strip()
        if t == em.bar_text:
            return
        if t.startswith("@"):
            t = t.partition(" ")[2]
        if t.endswith(":") or (t.startswith(_ORDERS_MEMORY) and not t.startswith("mbarrier.arrive")):
            break
    em.barrier()


@rule("mbarrier_arrive")
def _mb_arrive(em, op):
    a = _addr(em, _view_of(em, op.operands[0]))
    if op.attrs.get("remote"):  # the same mbarrier in CTA `cta` of the cluster
        _sm90(em, op, "an arrival on another CTA's mbarrier (mapa, shared::cluster)")
        rank = _b32(em, op.operands[-1])
        if op.operands[0] in em.arrivals:  # lane 0 of each warp, after its own warp's work
            g = em.thread_cache.get("lane0")
            if g is None:
                g = em.thread_cache["lane0"] = em.reg("pred")
                em.pro(f"setp.eq.u32 {g}, {em.tid()[1]}, 0;")
            if op.attrs.get("pred"):
                g = em.ins("pred", f"and.pred {{d}}, {g}, {em.vals[op.operands[1]][0]};")
            remote = em.ins("b32", f"mapa.shared::cluster.u32 {{d}}, {a}, {rank};")
            em.emit(f"@{g} mbarrier.arrive.shared::cluster.b64 _, [{remote}], {int(op.attrs['count'])};")
            return []
        _barrier_once(em)
        remote = em.ins("b32", f"mapa.shared::cluster.u32 {{d}}, {a}, {rank};")
        # the default .release.cta, as CUTLASS's cluster barriers: with .release.cluster every
        # release cost a fixed ~1 us on the H100 (the cluster GEMM at half speed)
        em.emit(f"@{_elected(em, op, 1)} mbarrier.arrive.shared::cluster.b64 _, "
                f"[{remote}], {int(op.attrs['count'])};")
        return []
    if op.operands[0] in em.arrivals:  # every thread arrives for itself: no partition barrier
        g = f"@{em.vals[op.operands[1]][0]} " if op.attrs.get("pred") else ""
        _arrive(em, g, a, int(op.attrs["count"]))
        return []
    em.barrier()
    _arrive(em, f"@{_elected(em, op, 1)} ", a, int(op.attrs["count"]))
    return []


@rule("mbarrier_wait")
def _mb_wait(em, op):
    a = _addr(em, _view_of(em, op.operands[0]))
    # sm_90's try_wait may suspend the thread until the phase completes; sm_80's test_wait
    # only looks (the loop spins)
    kind = "try_wait" if em.target.startswith("sm_9") else "test_wait"
    phase = em.ins("b32", f"and.b32 {{d}}, {_b32(em, op.operands[1])}, 1;")
    top, done = em.label("MBW"), em.label("MBD")
    if op.attrs.get("pred"):
        em.emit(f"@!{em.vals[op.operands[2]][0]} bra {done};")
    ok = em.reg("pred")
    em.emit(f"{top}:")
    em.emit(f"mbarrier.{kind}.parity.shared::cta.b64 {ok}, [{a}], {phase};")
    em.emit(f"@!{ok} bra {top};")
    em.emit(f"{done}:")
    return []


@rule("fence_async_shared")
def _fence(em, op):
    _sm90(em, op, "fence_async_shared (fence.proxy.async)")
    em.emit("fence.proxy.async.shared::cta;")
    return []


# -- TMA ----------------------------------------------------------------------------------------

def _boxes(em, op, desc_v, coords, s: Smem):
    """(shared address, coordinate list innermost first) of each box of the block."""
    t = desc_v.type
    box = box_of(_Block(t))
    base = _addr(em, s)
    cs = [_b32(em, c) for c in coords][::-1]
    out = []
    lead = (0,) * (s.rel.ndim - 1)
    for b in range(box.copies):
        c0 = cs[0] if b == 0 else em.ins("b32", f"add.s32 {{d}}, {cs[0]}, {b * box.dims[0]};")
        # box b lands where the view's column b * inner starts: a view of a taller buffer
        # (a slice of its rows) has its column blocks that buffer's block apart, not the box's
        off = int(s.rel[lead + (b * box.dims[0],)]) - int(s.rel.flat[0])
        dst = base if b == 0 else em.ins("b32", f"add.u32 {{d}}, {base}, {off};")
        out.append((dst, [c0] + cs[1:]))
    return out


class _Block:
    """What tma.box_of reads of a TensorDescriptor, from its traced type."""

    def __init__(self, t):
        self.dtype, self.layout, self.block_shape = t.dtype, t.layout, list(t.shape)


@rule("tma_load")
def _tma_load(em, op):
    _sm90(em, op, "TMA (cp.async.bulk.tensor)")
    desc_v = op.operands[0]
    t = desc_v.type
    n = t.rank
    coords = op.operands[1:1 + n]
    bar = _addr(em, _view_of(em, op.operands[1 + n]))
    s = _view_of(em, op.operands[2 + n])
    _barrier_if_needed(em, op)
    g = _elected(em, op, 3 + n)
    tmap = em.vals[desc_v][0]
    mask = int(op.attrs.get("multicast", 0))
    if mask:  # the box lands at the same offset in each CTA of the mask, on each one's barrier
        m = em.ins("b16", f"mov.b16 {{d}}, {mask};")
        mc, tail = ".multicast::cluster", f", {m}"
    else:
        mc = tail = ""
    ev = op.attrs.get("eviction_policy")
    if ev:  # an L2 policy for every line of the box (fraction 1.0), operand after the ctaMask
        pol = em.ins("b64", f"createpolicy.fractional.L2::{ev}.b64 {{d}}, 1.0;")
        mc, tail = mc + ".L2::cache_hint", f"{tail}, {pol}"
    for dst, cs in _boxes(em, op, desc_v, coords, s):
        em.emit(f"@{g} cp.async.bulk.tensor.{n}d.shared::cluster.global.mbarrier::complete_tx::bytes{mc} "
                f"[{dst}], [{tmap}, {{{', '.join(cs)}}}], [{bar}]{tail};")
    return []


@rule("cluster_cta_id")
def _cluster_cta_id(em, op):
    _sm90(em, op, "cluster.cta_rank() (%cluster_ctarank)")
    return [[em.special("%cluster_ctarank")]]


@rule("cluster_barrier")
def _cluster_barrier(em, op):
    _sm90(em, op, "cluster.barrier() (barrier.cluster)")
    if em.g.num_ctas == 1:
        # a cluster of one is the CTA: the running threads' barrier says it. barrier.cluster
        # there (workers parked at the start meeting it at their own instruction) was reported
        # by compute-sanitizer's synccheck as divergent threads on the H200 (session 12)
        em.barrier()
        return []
    # arrive has release and wait acquire semantics at cluster scope by default
    em.emit("barrier.cluster.arrive.aligned;")
    em.emit("barrier.cluster.wait.aligned;")
    return []


@rule("tma_store")
def _tma_store(em, op):
    _sm90(em, op, "TMA (cp.async.bulk.tensor)")
    desc_v = op.operands[0]
    t = desc_v.type
    n = t.rank
    s = _view_of(em, op.operands[1 + n])
    _barrier_if_needed(em, op)
    g = em.owner_pred(None)
    tmap = em.vals[desc_v][0]
    for src, cs in _boxes(em, op, desc_v, op.operands[1:1 + n], s):
        em.emit(f"@{g} cp.async.bulk.tensor.{n}d.global.shared::cta.bulk_group "
                f"[{tmap}, {{{', '.join(cs)}}}], [{src}];")
    em.emit(f"@{g} cp.async.bulk.commit_group;")
    return []


@rule("tma_store_wait")
def _store_wait(em, op):
    _sm90(em, op, "tma.store_wait (cp.async.bulk.wait_group)")
    em.emit(f"@{em.owner_pred(None)} cp.async.bulk.wait_group.read {int(op.attrs['pendings'])};")
    em.barrier()
    return []


@rule("tensordesc_dim")
def _dim(em, op):
    # descriptors are kernel arguments only (the IR has no other way to make one)
    return [[em.flags["tma_dims"][op.operands[0]][op.attrs["dim"]]]]



# -- wgmma --------------------------------------------------------------------------------------

# operand dtype -> (instruction K, type suffix, elements per A register, trans flags allowed)
_WGMMA = {"float16": (16, "f32.f16.f16", 2, True), "bfloat16": (16, "f32.bf16.bf16", 2, True),
          "float32": (8, "f32.tf32.tf32", 1, False), "int8": (32, "s32.s8.s8", 4, False),
          "uint8": (32, "s32.u8.u8", 4, False),
          "float8e4nv": (32, "f32.e4m3.e4m3", 4, False), "float8e5": (32, "f32.e5m2.e5m2", 4, False)}


def _table(s: Smem, mn_first: bool) -> np.ndarray:
    """The view's [MN, K] byte offsets from its base register (A is [M, K], B is [K, N])."""
    t = s.rel + s.const
    return t if mn_first else t.T


def _desc_plan(em, op, s: Smem, mn_first: bool, r0: int, k0: int, rows: int, kc: int, what: str):
    from .wgmma import plan
    es = max(s.dtype.bits // 8, 1)
    p = plan(_table(s, mn_first), es, r0, k0, rows, kc)
    if p is None:
        raise CompileError(f"warpgroup_mma: operand {what} is not in a layout wgmma reads from shared memory "
                           "(a swizzled NVMMA tile, K- or MN-major, sliced at whole 8-row atoms)", op.loc,
                           notes=("allocate it with gl.NVMMASharedLayout.get_default_for(shape, dtype)",))
    return p


def _wg_offset(em, lc, s: Smem, mn_first: bool, dim: int) -> str | None:
    """Bytes between warpgroups' tiles of this operand (warps past the first four own further
    rows or columns of the accumulator), as a register, or None with one warpgroup."""
    deltas = []
    for j, b in enumerate(lc.warp_bases[2:]):
        d = int(b[dim])
        if not d:
            continue
        t = _table(s, mn_first)
        if d >= t.shape[0]:
            return None
        deltas.append((j, int(t[d, 0] - t[0, 0])))
    if not deltas:
        return None
    key = ("wg_off", s.base, tuple(deltas))
    r = em.thread_cache.get(key)
    if r is None:
        _, _, warp = em.tid()
        r = em.reg("b32")
        em.pro(f"mov.u32 {r}, 0;")
        for j, d in deltas:
            bit = em.reg("b32")
            em.pro(f"bfe.u32 {bit}, {warp}, {j + 2}, 1;")
            em.pro(f"mad.lo.u32 {r}, {bit}, {d}, {r};")
        # lane 0's value broadcast: ptxas then knows it is the same in every lane and keeps the
        # descriptors built on it in uniform registers, instead of moving each one there before
        # every wgmma (R2UR; ~10 instructions a K step of the 128x256 GEMM's two warpgroups)
        u = em.thread_cache[key] = em.reg("b32")
        em.pro(f"shfl.sync.idx.b32 {u}, {r}, 0, 31, -1;")
        r = u
    return r


def _descriptor(em, s: Smem, p, wg_off: str | None) -> str:
    from .wgmma import hi_word, lo_fields
    key = ("wg_base16", s.base, wg_off)
    b16 = em.memo_get(key)
    if b16 is None:
        a = s.base if wg_off is None else em.ins("b32", f"add.u32 {{d}}, {s.base}, {wg_off};")
        # bits 4-17 of the address: in a cluster, a CTA past the first sees its shared memory
        # at addresses above 2**24 (the cluster window), whose high bits would land in LBO
        b16 = em.ins("b32", f"bfe.u32 {{d}}, {a}, 4, 14;")
        em.memo_put(key, b16)
    lo = em.ins("b32", f"add.u32 {{d}}, {b16}, {lo_fields(p)};")
    hi = em.ins("b32", f"mov.b32 {{d}}, {hi_word(p)};")
    return em.ins("b64", f"mov.b64 {{d}}, {{{lo}, {hi}}};")


def _uses(em) -> dict:
    u = em.flags.get("uses")
    if u is None:
        u = em.flags["uses"] = {}
        for o in em.g.body.walk():
            for v in o.operands:
                u[v] = u.get(v, 0) + 1
    return u


def _in_place(em, v) -> bool:
    """Whether the accumulator's registers are this op's alone to overwrite: a loop-carried
    value or a wgmma chain's result (registers nobody else names), read by this op only
    (through the warpgroup_mma_wait that passed it on, too)."""
    regs = em.vals[v]
    if len(regs) < 2 or len(set(regs)) != len(regs):
        return False
    uses = _uses(em)
    while True:
        if uses.get(v, 0) != 1:
            return False
        if v.owner is None:
            return not any(v is a for a in em.g.args)  # (not v.block: hoist_stores copies blocks)
        if v.owner.name == "wgmma":
            return True
        if v.owner.name != "wgmma_wait":
            return False
        v = v.owner.operands[v.owner.results.index(v)]


def _pieces_view(b: Smem) -> Smem:
    """A stacked B view [P, K, n] as one [K, P * n] operand: piece p's columns follow piece
    p - 1's. Whether an instruction may span pieces is :func:`plan`'s check of the table."""
    p, k, n = b.rel.shape
    return Smem(b.base, b.const, b.rel.transpose(1, 0, 2).reshape(k, p * n), b.dtype, b.align)


def _wgmma_n_ok(n: int, t) -> bool:
    """wgmma's N: a multiple of 8 up to 256; the 8-bit integer forms take 8-32, then multiples of 16."""
    if n % 8 or not 8 <= n <= 256:
        return False
    return not (t.name in ("int8", "uint8") and n > 32 and n % 16)


def _runs(em, b: Smem, starts: list[int], N: int, ki: int, K: int, fuse: bool, t) -> list[tuple[int, int]]:
    """(first tile, tile count) of each instruction over column tiles of N starting at
    ``starts`` (columns of B): with ``fuse``, each run of adjacent tiles as long as one
    descriptor places all its columns as the table does."""
    if not fuse:
        return [(j, 1) for j in range(len(starts))]
    from .wgmma import plan
    es = max(b.dtype.bits // 8, 1)
    table = _table(b, False)
    out, j = [], 0
    while j < len(starts):
        n = 1
        for m in range(len(starts) - j, 1, -1):
            if (starts[j + m - 1] == starts[j] + (m - 1) * N and _wgmma_n_ok(m * N, t)
                    and plan(table, es, starts[j], ki * K, m * N, K) is not None):
                n = m
                break
        out.append((j, n))
        j += n
    return out


@rule("wgmma")
def _wgmma(em, op):
    from .rules_mma import _groups
    ptx.require(em.target, "warpgroup_mma (wgmma)", 90, op.loc, suffix_a=True)
    a_terms, b_v, c_vs, use_v = wgmma_operands(op.operands, op.attrs)
    a_v, c_v = a_terms[0], c_vs[0]
    pieces = op.attrs.get("pieces") is not None
    t, acc_t = b_v.type.dtype, c_v.type.dtype
    kind = _WGMMA.get(t.name)
    if kind is None:
        raise CompileError(f"warpgroup_mma on {t} operands is not lowered by the NVIDIA backend yet; use "
                           "float16, bfloat16, float32 (tf32), int8, uint8 or fp8", op.loc)
    if a_v.type.dtype != t:
        raise CompileError(f"warpgroup_mma on NVIDIA takes A and B of one type, got {a_v.type.dtype} and {t}",
                           op.loc)
    if acc_t.name not in ("float32", "int32", "float16"):
        raise CompileError(f"warpgroup_mma accumulates in float32, float16 (int32 for 8-bit integers) on NVIDIA, "
                           f"not {acc_t}; accumulate in float32 and convert the result with .to()", op.loc)
    # a float16 accumulator (held widened in f32 registers, as every float16 tile here) runs the
    # f32-accumulating form and is rounded to float16 once the group retires: at a wait that
    # passes it on, or here for a synchronous one (one rounding an op, as the interpreter does;
    # an async chain rounds once at its wait, closer to the exact sum)
    round16 = acc_t.name == "float16"
    K, _, kw, _ = kind   # (the instruction's types and transposability: _term_calls)
    em.flags["wgmma"] = True
    lc = em.lin(op.results[0])
    N = int(c_v.type.layout.instr_shape[1])
    c_slots = [(8 * ((i >> 1) & 1), 8 * (i >> 2) + (i & 1)) for i in range(N // 2)]
    gc = _groups(lc, (64, N), c_slots, "accumulator", op.loc)
    a_smem = isinstance(em.vals[a_v][0], Smem)
    b_all = _view_of(em, b_v)
    # K pieces: term q multiplies A's piece q by B's slot q, all in the one group
    bs = [_slot(b_all, q) for q in range(len(a_terms))] if op.attrs.get("k_pieces") is not None else [b_all]
    if pieces:
        bs = [_pieces_view(b) for b in bs]
    preps = [_term_operands(em, op, lc, at_v, b, a_smem, K, kw) for at_v, b in zip(a_terms, bs)]
    _barrier_if_needed(em, op)
    cls = "f32" if acc_t.is_floating else "b32"
    # wgmma reads and writes its accumulator in place: fresh registers, unless the input is a
    # chain's own (see _in_place); copying an in-flight accumulator would serialize the chain
    curs = []
    for cv_op in c_vs:
        cur = {}
        own = _in_place(em, cv_op)
        cv = em.vals[cv_op]
        for key, regs in gc.items():
            cur[key] = []
            for r in regs:
                if own:
                    cur[key].append(cv[r])
                    continue
                d = em.reg(cls)
                em.emit(f"mov.{'f32' if cls == 'f32' else 'b32'} {d}, {cv[r] if len(cv) > 1 else cv[0]};")
                cur[key].append(d)
        curs.append(cur)
    use = em.vals[use_v][0]
    true = em.thread_cache.get("wg_true")
    if true is None:
        true = em.thread_cache["wg_true"] = em.reg("pred")
        em.pro(f"setp.eq.u32 {true}, 0, 0;")
    # pieces: a run of column tiles across pieces is one instruction (its accumulator registers
    # are the pieces' in order: the m64nN fragment walks N in 8-column blocks); a second
    # warpgroup along N would interleave the pieces' columns, so then each tile is its own
    width = int(c_v.type.shape[1])   # a piece's columns: piece p's start at p * width in B
    cols = [(p, ni) for p in range(len(c_vs)) for ni in sorted({ni for _, ni in gc})]
    starts = [p * width + ni * N for p, ni in cols]
    fuse = pieces and not any(int(bb[1]) for bb in lc.warp_bases[2:])
    # every operand (the packed A registers, the descriptors) is made before the fence: an A
    # register written between the fence and its wgmma makes ptxas fence and wait before each
    calls = []
    for term, prep in enumerate(preps):
        calls += _term_calls(em, op, gc, prep, a_smem, kind, t, N, starts, cols, curs, fuse,
                             use if term == 0 else true, true)
    em.emit("wgmma.fence.sync.aligned;")
    for c in calls:
        em.emit(c)
    em.emit("wgmma.commit_group.sync.aligned;")
    if not op.attrs.get("is_async"):
        em.emit("wgmma.wait_group.sync.aligned 0;")
    outs = []
    for cur in curs:
        out = [None] * lc.num_regs
        for key, regs in gc.items():
            for r, x in zip(regs, cur[key]):
                out[r] = x
        for x in out:  # overwritten in place: a 16-bit pattern remembered for the old value is stale
            em.bits16.pop((x, "float16"), None)
            em.bits16.pop((x, "bfloat16"), None)
        outs.append(out)
    group = set().union(*outs)
    if op.attrs.get("is_async"):  # written by the tensor cores until a wait retires the group
        em.flags.setdefault("wgmma_inflight", []).append(group)
        if round16:
            em.flags.setdefault("wgmma_round16", set()).update(group)
    elif round16:
        outs = [[_round16(em, x) for x in out] for out in outs]
    return outs


def _slot(s: Smem, q: int) -> Smem:
    """Slot q of a stacked view (its leading dim)."""
    return Smem(s.base, s.const, s.rel[q], s.dtype, s.align)


def _term_operands(em, op, lc, a_v, b: Smem, a_smem: bool, K: int, kw: int):
    """(B's view, its warpgroup offset, A's view and offset or its register groups and values) of
    one term a @ b of a wgmma."""
    from .rules_mma import _groups
    b_off = _wg_offset(em, lc, b, False, 1)
    if a_smem:
        a = _view_of(em, a_v)
        return b, b_off, a, _wg_offset(em, lc, a, True, 0), None, None
    la = em.lin(a_v)
    h = K // 2
    a_slots = [(dm, dk + j) for dm, dk in ((0, 0), (8, 0), (0, h), (8, h)) for j in range(kw)]
    return b, b_off, None, None, _groups(la, (64, K), a_slots, "A operand", op.loc), em.vals[a_v]


def _term_calls(em, op, gc, prep, a_smem, kind, t, N, starts, cols, curs, fuse, use, true) -> list[str]:
    """The wgmma instructions of one term, K step by K step; ``use`` scales its first step's
    accumulator (later steps and terms add to it)."""
    from .rules_mma import _pack
    b, b_off, a, a_off, ga, av = prep
    K, types, kw, transposable = kind
    calls = []
    for ki in range(b.rel.shape[0] // K):
        runs = _runs(em, b, starts, N, ki, K, fuse, t)
        for mi in sorted({mi for mi, _ in gc}):
            for j0, n in runs:
                bp = _desc_plan(em, op, b, False, starts[j0], ki * K, n * N, K, "B")
                if not transposable and not bp.k_major:
                    raise CompileError(f"warpgroup_mma: {t} B must be K-major in shared memory", op.loc)
                bd = _descriptor(em, b, bp, b_off)
                if a_smem:
                    ap = _desc_plan(em, op, a, True, mi * 64, ki * K, 64, K, "A")
                    if not transposable and not ap.k_major:
                        raise CompileError(f"warpgroup_mma: {t} A must be K-major in shared memory", op.loc)
                    asrc = _descriptor(em, a, ap, a_off)
                else:
                    regs = ga[(mi, ki)]
                    asrc = "{" + ", ".join(_pack(em, t, [av[r] if len(av) > 1 else av[0]
                                                         for r in regs[i:i + kw]])
                                           for i in range(0, 4 * kw, kw)) + "}"
                scale = use if ki == 0 else true
                if t.name in ("int8", "uint8"):   # the integer forms take scale-d only
                    tail = ""
                elif t.is_fp8:  # 8-bit floats: K-major operands only, no transpose flags
                    tail = ", 1, 1"
                elif transposable:
                    tail = (", 1, 1" + (f", {0 if ap.k_major else 1}" if a_smem else "")
                            + f", {0 if bp.k_major else 1}")
                else:
                    tail = ", 1, 1"
                d = [x for p, ni in cols[j0:j0 + n] for x in curs[p][(mi, ni)]]
                calls.append(f"wgmma.mma_async.sync.aligned.m64n{n * N}k{K}.{types} {{{', '.join(d)}}}, "
                             f"{asrc}, {bd}, {scale}{tail};")
    return calls


def _round16(em, r: str) -> str:
    """An f32 register's value rounded to float16, widened again (the tile's representation)."""
    return em.widen16(em.ins("b16", f"cvt.rn.f16.f32 {{d}}, {r};"), dt.float16)


def settle_inflight(em, regs) -> None:
    """Before an instruction of ours reads ``regs`` (a loop's or branch's parallel copy of a
    carried accumulator): reading a wgmma's destination before its group retires is undefined,
    so wait for every group if any of them may still be in flight. (Chains that carry their
    accumulator in place never copy it and never wait here.)"""
    live = em.flags.get("wgmma_inflight")  # the groups in commit order, oldest first
    if live and any(not group.isdisjoint(regs) for group in live):
        em.emit("wgmma.wait_group.sync.aligned 0;")
        live.clear()


@rule("wgmma_wait")
def _wgmma_wait(em, op):
    ptx.require(em.target, "warpgroup_mma_wait (wgmma.wait_group)", 90, op.loc, suffix_a=True)
    n = int(op.attrs["num_outstanding"])
    em.emit(f"wgmma.wait_group.sync.aligned {n};")
    live = em.flags.get("wgmma_inflight")
    if live:  # all but the newest n groups have retired: their registers may be read
        del live[:max(len(live) - n, 0)]
    pending16 = em.flags.get("wgmma_round16")
    outs = []
    for v in op.operands:
        regs = em.vals[v]
        if pending16 and v.type.dtype.name == "float16":
            # a float16 accumulator whose group has retired (one still in flight stays f32: a
            # chain's next wgmma adds to it, a later wait rounds it)
            busy = set().union(*live) if live else set()
            done = [r in pending16 and r not in busy for r in regs]
            if any(done):
                pending16.difference_update(r for r, d in zip(regs, done) if d)
                regs = [_round16(em, r) if d else r for r, d in zip(regs, done)]
        outs.append(regs)
    return outs

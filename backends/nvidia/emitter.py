"""The PTX emitter: walks a traced graph and writes one PTX kernel.

A tile value becomes a Python list of PTX register names, one per register index of
its linear layout (scalars: one register, the same in every thread). Elementwise
ops map over the lists; ``splat``/``broadcast``/``expand_dims`` are renamings when
the layouts let each thread find the element in a register it already holds.
Everything that depends only on the thread index (lane/warp parts of coordinates)
is computed once in the prologue. Identical instructions on identical registers
are emitted once per region (a scoped CSE table), so uniform values stay cheap.

Shared memory is one dynamic region. The kernel's own buffers (``smem_alloc``) sit at the
offsets :mod:`gluon_trace.smem_plan` gives them; backend scratch starts above them: every
reduce, scan and layout conversion that needs it uses it for the duration of the op, the
scratch is sized by the largest user, and a ``bar.sync`` is placed before a reuse could
overwrite data another warp has not read yet. (Scratch above the buffers, rather than
planned into their gaps, never shares bytes with a buffer, so the two need no barriers
between them.)
"""
from __future__ import annotations

import re
from contextlib import contextmanager

from gluon_trace import dtypes as dt
from gluon_trace.backend import Unsupported, rule_table
from gluon_trace.errors import CompileError
from gluon_trace.ir import Block, Graph, TensorDescType, Value
from gluon_trace.layouts import LinearLayout, copy_bits

from . import ptx
from .axisinfo import Analysis
from .dce import live_lines
from .ptx import PTX_VERSION, TARGETS, param_type
from .sink import sink_shared_loads
from .spill import spill_registers

RULES, rule = rule_table()


def _pack(coord, shape) -> int:
    v = 0
    for c, s in zip(coord, shape):
        v = (v << (int(s).bit_length() - 1)) | int(c)
    return v


def _unpack(v: int, shape) -> tuple:
    out = []
    for s in reversed(shape):
        b = int(s).bit_length() - 1
        out.append(v & ((1 << b) - 1))
        v >>= b
    return tuple(reversed(out))



def copy_masks(lin) -> tuple[int, int]:
    """(lane mask, warp mask) of layouts.copy_bits: the threads with none of these bits hold
    each element once (a basis repeating an XOR of earlier ones, not only a zero one: an
    atomic through a layout whose warp basis repeated a lane's applied twice, fuzz seed
    15100172)."""
    c = copy_bits(lin)
    return c["lane"], c["warp"]

class Lin:
    """The parts of a LinearLayout the emitter reads, for layouts it derives itself
    (LinearLayout's constructor validates and records a source location: too slow here)."""
    __slots__ = ("shape", "reg_bases", "lane_bases", "warp_bases")

    def __init__(self, shape, reg_bases, lane_bases, warp_bases):
        self.shape = tuple(shape)
        self.reg_bases, self.lane_bases, self.warp_bases = tuple(reg_bases), tuple(lane_bases), tuple(warp_bases)

    @property
    def num_regs(self) -> int:
        return 1 << len(self.reg_bases)


def solve_gf2(vec: int, basis: list[int]) -> int | None:
    """A bitmask m with XOR of basis[i] for set bits i == vec, or None (not in the span)."""
    rows: dict[int, tuple[int, int]] = {}  # leading bit -> (vector, combination)
    for i, b in enumerate(basis):
        comb = 1 << i
        while b:
            top = b.bit_length() - 1
            if top not in rows:
                rows[top] = (b, comb)
                break
            rb, rc = rows[top]
            b ^= rb
            comb ^= rc
    m = 0
    while vec:
        top = vec.bit_length() - 1
        if top not in rows:
            return None
        rb, rc = rows[top]
        vec ^= rb
        m ^= rc
    return m


class Emitter:
    def __init__(self, graph: Graph, target: str):
        if target not in TARGETS:
            raise CompileError(f"unknown NVIDIA target {target!r}; choose one of {', '.join(TARGETS)}")
        if graph.threads_per_warp != 32:
            raise CompileError(f"the graph was traced for {graph.threads_per_warp} threads per warp; "
                               "NVIDIA warps have 32 (trace it for an sm_* target)")
        self.g = graph
        self.target = target
        self.nw = graph.num_warps
        self.nthreads = 32 * graph.num_warps
        self.lines: list[tuple[str, object]] = []
        self.prologue: list[str] = []
        self.counts = {c: 0 for c in ptx.PREFIX}
        self.vals: dict[Value, list[str]] = {}
        self.memo: list[dict] = [{}]
        # f32 register -> (the 16-bit register it was widened from, the f32 it was rounded from or
        # None): a later narrowing of it (an MMA operand, a store, a loop-carried copy) reuses those
        # bits; both registers are written once, together
        self.bits16: dict[tuple[str, str], tuple] = {}
        # (low, high) 16-bit registers unpacked from one paired cvt -> that .b32
        self.pair16: dict[tuple[str, str], str] = {}
        self.loc = None
        self.ai = Analysis(graph)
        self.used: set[Value] = set()
        for op in graph.body.walk():
            self.used.update(op.operands)
        # the kernel's buffers, and where membar says a partition must meet before an access
        self.smem_plan, self.membar = None, set()
        if any(op.name == "smem_alloc" for op in graph.body.walk()):
            from gluon_trace.membar import barriers
            from gluon_trace.smem_plan import plan
            self.smem_plan = plan(graph, target=target)
            self.membar = barriers(graph, self.smem_plan)
        from .arrivals import per_thread_arrivals
        self.arrivals = per_thread_arrivals(graph) if self.smem_plan else {}
        self.scratch_off = -(-(self.smem_plan.total if self.smem_plan else 0) // 16) * 16
        # warp specialization: the default partition's barriers leave the workers out, and the
        # scalars the workers read cross over in a few bytes above the buffers (warpspec.py)
        from .warpspec import capture_bytes, plan
        self.ws = plan(graph, target)
        self.bar_text = "bar.sync 0;"
        self.part, self.tid_base = 0, 0
        self.part_scratch: dict[int, int] = {}
        self.ws_tail: list[tuple[str, object]] = []
        self.ws_ops_tail: list = []  # the general form's per-op worker blocks (warpspec.py)
        if self.ws is not None:
            self.nthreads = 32 * self.ws.total_warps
            self.bar_text = f"bar.sync 1, {32 * self.nw};"
            self.ws_capture_off = self.scratch_off
            self.ws_capture_bytes = capture_bytes(graph, self.ws)
            self.scratch_off += -(-self.ws_capture_bytes // 16) * 16
        self.smem_bytes = self.scratch_off
        self.smem_dirty = False
        self.smem_reg = None
        self.nlabels = 0
        self.thread_cache: dict = {}
        self.lin_cache: dict = {}
        self.key_ids: dict = {}
        self.module_decls: list[str] = []  # module scope: strings, extern functions
        self.local_decls: list[str] = []   # kernel scope: local buffers
        self.flags: dict = {}

    # -- registers and text ---------------------------------------------------------------
    def reg(self, cls: str) -> str:
        self.counts[cls] += 1
        return f"{ptx.PREFIX[cls]}{self.counts[cls]}"

    def reg_for(self, t: dt.dtype) -> str:
        return self.reg(ptx.rclass(t))

    def emit(self, text: str) -> None:
        self.lines.append((text, self.loc))

    def pro(self, text: str) -> None:
        self.prologue.append(text)

    def label(self, hint: str = "L") -> str:
        self.nlabels += 1
        return f"$L_{hint}_{self.nlabels}"

    def ins(self, cls: str, text: str) -> str:
        """Emit ``text`` with ``{d}`` replaced by a fresh register of ``cls``; return it."""
        d = self.reg(cls)
        self.emit(text.replace("{d}", d))
        return d

    def int_minmax(self, kind: str, it: str, a: str, b: str) -> str:
        """``kind`` ("min" or "max") of two integers of PTX type ``it`` (s32, u32, s64, u64).
        Where ptxas would fold two of them into a VIMNMX3 it miscompiles (ptxas.minmax3_affected),
        max(a, b) is written ~min(~a, ~b) (and min the other way round): the NOTs between them
        keep it from folding (checked in the SASS of 12.6 to 13.3, and on an H200 with 13.0.88).
        where(x > y, x, y) and its kin come here too (rules_elementwise._select_min_max)."""
        cls = "b64" if it.endswith("64") else "b32"
        if cls == "b64" or not self.minmax_guarded():
            return self.ins(cls, f"{kind}.{it} {{d}}, {a}, {b};")
        na, nb = (self.ins("b32", f"not.b32 {{d}}, {x};") if x.startswith("%")
                  else str(~int(x, 0) & (0xFFFFFFFF if it[0] == "u" else -1)) for x in (a, b))
        r = self.ins("b32", f"{'min' if kind == 'max' else 'max'}.{it} {{d}}, {na}, {nb};")
        return self.ins("b32", f"not.b32 {{d}}, {r};")

    def minmax_guarded(self) -> bool:
        if "minmax3" not in self.flags:
            from .ptxas import minmax3_affected
            self.flags["minmax3"] = minmax3_affected(self.target)
        return self.flags["minmax3"]

    # -- the CSE table, scoped per region ---------------------------------------------------
    def memo_get(self, key):
        for m in reversed(self.memo):
            r = m.get(key)
            if r is not None:
                return r
        return None

    def memo_put(self, key, value) -> None:
        self.memo[-1][key] = value

    @contextmanager
    def scope(self):
        self.memo.append({})
        try:
            yield
        finally:
            self.memo.pop()

    # -- layouts ------------------------------------------------------------------------------
    def lin(self, v: Value) -> LinearLayout | None:
        t = v.type
        if t.is_scalar:
            return None
        return self.lin_of(t.layout, t.shape)

    def lin_of(self, layout, shape) -> LinearLayout:
        # to_linear checks the layout each call (walking the stack for a location): once is enough
        key = (layout, shape)
        lin = self.lin_cache.get(key)
        if lin is None:
            lin = self.lin_cache[key] = layout.to_linear(tuple(shape), self.nw, 32)
        return lin

    def nregs(self, v: Value) -> int:
        lin = self.lin(v)
        return 1 if lin is None else lin.num_regs

    # -- thread-index values, computed once in the prologue ----------------------------------
    def tid(self) -> tuple[str, str, str]:
        c = self.thread_cache.get("tid")
        if c is None:
            t, lane, warp = self.reg("b32"), self.reg("b32"), self.reg("b32")
            if self.tid_base:  # a worker partition: its threads count from its first warp
                self.pro(f"mov.u32 {t}, %tid.x;")
                self.pro(f"sub.u32 {t}, {t}, {self.tid_base};")
            else:
                self.pro(f"mov.u32 {t}, %tid.x;")
            self.pro(f"and.b32 {lane}, {t}, 31;")
            self.pro(f"shr.u32 {warp}, {t}, 5;")
            c = self.thread_cache["tid"] = (t, lane, warp)
        return c

    def special(self, sreg: str) -> str:
        """A special register (%ctaid.x, ...) read once in the prologue."""
        key = ("special", sreg)
        r = self.thread_cache.get(key)
        if r is None:
            r = self.thread_cache[key] = self.reg("b32")
            self.pro(f"mov.u32 {r}, {sreg};")
        return r

    def _bit_terms(self, src: str, vals: tuple[int, ...]) -> list[str]:
        """Registers whose XOR is XOR_i(bit i of src ? vals[i] : 0), runs of doubling
        powers of two moved as one bit field."""
        terms, i = [], 0
        while i < len(vals):
            v = vals[i]
            if v == 0:
                i += 1
                continue
            if v & (v - 1) == 0:
                j = i
                while j + 1 < len(vals) and vals[j + 1] == vals[j] * 2:
                    j += 1
                n, k = j - i + 1, v.bit_length() - 1
                t = self.reg("b32")
                if k >= i:
                    self.pro(f"and.b32 {t}, {src}, {((1 << n) - 1) << i};")
                    if k > i:
                        self.pro(f"shl.b32 {t}, {t}, {k - i};")
                else:
                    self.pro(f"bfe.u32 {t}, {src}, {i}, {n};")
                    if k:
                        self.pro(f"shl.b32 {t}, {t}, {k};")
                terms.append(t)
                i = j + 1
            else:
                t = self.reg("b32")
                self.pro(f"bfe.u32 {t}, {src}, {i}, 1;")
                self.pro(f"neg.s32 {t}, {t};")
                self.pro(f"and.b32 {t}, {t}, {v};")
                terms.append(t)
                i += 1
        return terms

    def thread_xor(self, lane_vals: tuple, warp_vals: tuple) -> tuple[str, int]:
        """(register, mask of bits it can have): XOR over the lane's and warp's set bits of
        ``lane_vals``/``warp_vals``. Zero entries are replicated bits."""
        return self._thread_fold("xor.b32", lane_vals, warp_vals)  # XORs stay inside their OR

    def thread_sum(self, lane_vals: tuple, warp_vals: tuple) -> tuple[str, int]:
        """(register, OR of the values): the SUM over the lane's and warp's set bits of
        ``lane_vals``/``warp_vals`` (a padded shared layout's offsets add)."""
        return self._thread_fold("add.u32", lane_vals, warp_vals)

    def _thread_fold(self, op: str, lane_vals: tuple, warp_vals: tuple) -> tuple[str, int]:
        """(register, OR of the values): ``op`` folded over the values of the lane's and warp's
        set bits, made once in the prologue per (op, values)."""
        key = (op, lane_vals, warp_vals)
        c = self.thread_cache.get(key)
        if c is not None:
            return c
        _, lane, warp = self.tid()
        terms = self._bit_terms(lane, lane_vals) + self._bit_terms(warp, warp_vals)
        mask = 0
        for v in lane_vals + warp_vals:
            mask |= v
        c = self.thread_cache[key] = (self.fold_terms(op, terms), mask)
        return c

    def fold_terms(self, op: str, terms: list[str]) -> str:
        """``op`` folded over the b32 registers ``terms`` in the prologue (0 for none)."""
        if not terms:
            r = self.reg("b32")
            self.pro(f"mov.u32 {r}, 0;")
            return r
        r = terms[0]
        for t in terms[1:]:
            x = self.reg("b32")
            self.pro(f"{op} {x}, {r}, {t};")
            r = x
        return r

    def thread_part(self, lin: LinearLayout, fn) -> tuple[str, int]:
        """Register with fn(lane part ^ warp part of the coordinate), fn linear over XOR."""
        return self.thread_xor(tuple(fn(b) for b in lin.lane_bases), tuple(fn(b) for b in lin.warp_bases))

    @staticmethod
    def reg_part(lin: LinearLayout, r: int, fn) -> int:
        v = 0
        for i, b in enumerate(lin.reg_bases):
            if r >> i & 1:
                v ^= fn(b)
        return v

    def owner_pred(self, lin: LinearLayout | None, lanes: bool = True) -> str | None:
        """Predicate true in the one thread of each set of copies (replicated lanes/warps),
        or None when every thread owns its elements. ``lanes=False``: in the one warp of each
        set of warp copies (every lane of it)."""
        if lin is None:
            lm, wm = 31, self.nw - 1
        else:
            lm, wm = copy_masks(lin)
        lm = lm if lanes else 0
        if not lm and not wm:
            return None
        key = ("owner", lm, wm)
        c = self.thread_cache.get(key)
        if c is None:
            t, lane, warp = self.tid()
            x = self.reg("b32")
            m = lm | (wm << 5)
            self.pro(f"and.b32 {x}, {t}, {m};")
            c = self.reg("pred")
            self.pro(f"setp.eq.u32 {c}, {x}, 0;")
            self.thread_cache[key] = c
        return c

    # -- renaming: a destination register read from a source register of the same thread -----
    def renaming(self, dst: LinearLayout, src: LinearLayout, fn=None) -> list[int] | None:
        """For each destination register, the source register of the same thread that holds
        fn(its coordinate); None if that is not the same for every thread (data must move).
        ``fn`` maps a destination coordinate to a source coordinate and is XOR-linear."""
        fn = fn or (lambda c: c)
        if len(dst.lane_bases) != len(src.lane_bases) or len(dst.warp_bases) != len(src.warp_bases):
            return None
        for db, sb in zip(dst.lane_bases + dst.warp_bases, src.lane_bases + src.warp_bases):
            if tuple(fn(db)) != tuple(sb):
                return None
        basis = [_pack(b, src.shape) for b in src.reg_bases]
        comb = []
        for b in dst.reg_bases:
            m = solve_gf2(_pack(fn(b), src.shape), basis)
            if m is None:
                return None
            comb.append(m)
        out = []
        for r in range(dst.num_regs):
            m = 0
            for i, c in enumerate(comb):
                if r >> i & 1:
                    m ^= c
            out.append(m)
        return out

    # -- shared-memory scratch ----------------------------------------------------------------
    def smem_start(self) -> str:
        """The shared address of the dynamic region (the kernel's buffers are planned from it)."""
        if self.smem_reg is None:
            self.smem_reg = self.reg("b32")
            self.pro(f"mov.u32 {self.smem_reg}, gt_smem;")
        return self.smem_reg

    def smem_base(self) -> str:
        """The shared address of the scratch region, above the kernel's buffers."""
        if not self.scratch_off:
            return self.smem_start()
        r = self.thread_cache.get("scratch")
        if r is None:
            r = self.thread_cache["scratch"] = self.reg("b32")
            # a worker's scratch sits above the default partition's (they run at once); its
            # offset is known once every partition is emitted
            off = f"__GT_SCRATCH_{self.part}__" if self.part else self.scratch_off
            self.pro(f"add.u32 {r}, {self.smem_start()}, {off};")
        return r

    def scratch(self, nbytes: int) -> str:
        """Start using the scratch region (``nbytes`` from its start); returns its base register."""
        if self.part:
            self.part_scratch[self.part] = max(self.part_scratch.get(self.part, 0), (nbytes + 15) // 16 * 16)
        else:
            self.smem_bytes = max(self.smem_bytes, self.scratch_off + (nbytes + 15) // 16 * 16)
        self.flags["scratch_uses"] = self.flags.get("scratch_uses", 0) + 1
        if self.smem_dirty:
            self.emit(self.bar_text)
        self.smem_dirty = True
        return self.smem_base()

    def barrier(self) -> None:
        """The partition's thread barrier; not a second one straight after one (a TMA store wait
        ends with a barrier, and membar may ask for one before the next access): nothing between
        them, the first already orders it."""
        if not (self.lines and self.lines[-1][0] == self.bar_text):
            self.emit(self.bar_text)

    def partition(self, index: int, first_warp: int, warps: int, block: Block):
        """Emit a worker partition's code apart: its own warps, thread index, barrier, CSE
        table and thread-index cache (nothing computed for other warps is valid in it).
        Returns (its prologue lines, its (text, loc) lines)."""
        saved = (self.lines, self.prologue, self.thread_cache, self.memo, self.nw, self.bar_text,
                 self.smem_dirty, self.lin_cache, self.part, self.tid_base, self.loc)
        self.lines, self.prologue, self.thread_cache, self.memo = [], [], {}, [{}]
        self.nw, self.bar_text, self.smem_dirty, self.lin_cache = warps, f"bar.sync {1 + index}, {32 * warps};", False, {}
        self.part, self.tid_base = index, 32 * first_warp
        try:
            self.run_block(block, [])
            return self.prologue, self.lines
        finally:
            (self.lines, self.prologue, self.thread_cache, self.memo, self.nw, self.bar_text,
             self.smem_dirty, self.lin_cache, self.part, self.tid_base, self.loc) = saved

    # -- values ---------------------------------------------------------------------------------
    def const_reg(self, value, t: dt.dtype) -> str:
        key = ("const", ptx.literal(value, t), ptx.rclass(t))
        r = self.memo_get(key)
        if r is None:
            cls = ptx.rclass(t)
            r = self.reg(cls)
            if cls == "pred":
                self.emit(f"setp.ne.u32 {r}, {ptx.literal(value, dt.int32)}, 0;")
            else:
                self.emit(f"mov.{ptx.bty(t) if cls[0] == 'b' else cls} {r}, {ptx.literal(value, t)};")
            self.memo_put(key, r)
        return r

    def round16(self, r: str, t: dt.dtype) -> str:
        """Round an f32 register to ``t`` when ``t`` is a 16-bit float (kept in f32)."""
        if t.name not in ("float16", "bfloat16"):
            return r
        if (r, t.name) in self.bits16:  # already a value of t: rounding changes nothing
            return r
        h = self.reg("b16")
        self.emit(f"cvt.rn.{'f16' if t.name == 'float16' else 'bf16'}.f32 {h}, {r};")
        w = self.ins("f32", f"cvt.f32.f16 {{d}}, {h};") if t.name == "float16" else self.bf16_bits_to_f32(h)
        self.bits16[(w, t.name)] = (h, r)
        return w

    def round16_all(self, regs: list[str], t: dt.dtype) -> list[str]:
        """``round16`` of a whole tile, two values per paired cvt (the conversion pipe does half
        the work). The halves stay packed for an MMA operand or a store that takes them so."""
        out = {r: r for r in regs if (r, t.name) in self.bits16}
        todo = list(dict.fromkeys(r for r in regs if r not in out))
        if len(todo) % 2:
            last = todo.pop()
            out[last] = self.round16(last, t)
        cvt = "f16x2" if t.name == "float16" else "bf16x2"
        for a, b in zip(todo[::2], todo[1::2]):
            p = self.ins("b32", f"cvt.rn.{cvt}.f32 {{d}}, {b}, {a};")
            ha, hb = self.reg("b16"), self.reg("b16")
            self.emit(f"mov.b32 {{{ha}, {hb}}}, {p};")
            if t.name == "float16":
                wa = self.ins("f32", f"cvt.f32.f16 {{d}}, {ha};")
                wb = self.ins("f32", f"cvt.f32.f16 {{d}}, {hb};")
            else:
                # (a .b32 instruction may write an .f32 register: no mov between the classes)
                wa = self.ins("f32", f"shl.b32 {{d}}, {p}, 16;")
                wb = self.ins("f32", f"and.b32 {{d}}, {p}, -65536;")
            self.bits16[(wa, t.name)] = (ha, None)  # (re-rounding its source would add work)
            self.bits16[(wb, t.name)] = (hb, None)
            self.pair16[(ha, hb)] = p
            out[a], out[b] = wa, wb
        return [out[r] for r in regs]

    def halves16(self, w: str, t: dt.dtype) -> tuple[str, str]:
        """The (low, high) 16-bit registers of a .b32 holding two float16/bfloat16 values."""
        hit = self.memo_get(("halves16", w))
        if hit is None:
            hit = self.reg("b16"), self.reg("b16")
            self.emit(f"mov.b32 {{{hit[0]}, {hit[1]}}}, {w};")
            self.pair16[hit] = w
            self.memo_put(("halves16", w), hit)
        return hit

    def widen16_half(self, w: str, j: int, t: dt.dtype) -> str:
        """Half ``j`` (0: the low one) of a .b32 holding two float16/bfloat16 values, widened to
        f32. A bfloat16 is its half shifted into place, one instruction from the word; the
        16-bit halves are split off too, for a store or a carry that takes the bits (dead and
        dropped where none does)."""
        h = self.halves16(w, t)[j]
        if t.name == "float16":
            return self.widen16(h, t)
        r = self.ins("f32", f"shl.b32 {{d}}, {w}, 16;" if j == 0 else f"and.b32 {{d}}, {w}, -65536;")
        self.bits16[(r, t.name)] = (h, None)
        return r

    def widen16(self, h: str, t: dt.dtype) -> str:
        """The f32 register holding the float16/bfloat16 value whose bits are ``h``."""
        w = self.ins("f32", f"cvt.f32.f16 {{d}}, {h};") if t.name == "float16" else self.bf16_bits_to_f32(h)
        self.bits16[(w, t.name)] = (h, None)
        return w

    def to16(self, r: str, t: dt.dtype) -> str:
        """The 16-bit pattern of a float16/bfloat16 value held (widened) in f32 register ``r``."""
        hit = self.bits16.get((r, t.name))
        if hit is not None:
            return hit[0]
        cvt = "f16" if t.name == "float16" else "bf16"
        return self.ins("b16", f"cvt.rn.{cvt}.f32 {{d}}, {r};")

    def pack16x2(self, lo: str, hi: str, t: dt.dtype) -> str:
        """Two float16/bfloat16 values (widened in f32 registers) as one .b32, ``lo`` in the low
        half. Values rounded one at a time from f32 are rounded again from their sources in one
        paired cvt (the same rounding of the same value): the conversion pipe does half the work."""
        a, b = self.bits16.get((lo, t.name)), self.bits16.get((hi, t.name))
        if a is not None and b is not None:
            p = self.pair16.get((a[0], b[0]))
            if p is not None:
                return p
            if a[1] is not None and b[1] is not None:
                cvt = "f16x2" if t.name == "float16" else "bf16x2"  # (every target has it: sm_80+)
                return self.ins("b32", f"cvt.rn.{cvt}.f32 {{d}}, {b[1]}, {a[1]};")
        return self.ins("b32", f"mov.b32 {{d}}, {{{self.to16(lo, t)}, {self.to16(hi, t)}}};")

    def bf16_bits_to_f32(self, h: str) -> str:
        # exact either way (bf16 is the high half of an f32): on sm_90 one cvt (PTX 7.8) in
        # place of three instructions; sm_80's PTX keeps the shift
        if self.target.startswith("sm_90"):
            return self.ins("f32", f"cvt.f32.bf16 {{d}}, {h};")
        x = self.ins("b32", f"cvt.u32.u16 {{d}}, {h};")
        self.emit(f"shl.b32 {x}, {x}, 16;")
        return self.ins("f32", f"mov.b32 {{d}}, {x};")

    def norm(self, r: str, t: dt.dtype) -> str:
        """Re-extend a narrow integer after an op that may have left its range."""
        if not ptx.needs_norm(t):
            return r
        s = "s" if t.is_signed else "u"
        return self.ins("b32", f"cvt.{s}32.{s}{t.bits} {{d}}, {r};")

    def to_b32(self, r: str, t: dt.dtype) -> str:
        """A 32-bit integer register holding the value of a pred (0/1)."""
        if t.is_bool:
            return self.ins("b32", f"selp.u32 {{d}}, 1, 0, {r};")
        return r

    def map(self, op, fn, *, cse: bool = True) -> list[list[str]]:
        """Apply ``fn(*operand registers) -> register`` per register index."""
        ins = [self.vals[v] for v in op.operands]
        n = max(len(x) for x in ins) if ins else 1
        key0 = (op.name, _attr_key(op.attrs), tuple(v.type.dtype.name for v in op.operands))
        key0 = self.key_ids.setdefault(key0, len(self.key_ids))  # a small int hashes fast
        cols = [x if len(x) == n else x * n for x in ins]
        out = []
        memo = self.memo
        top = memo[-1]
        for regs in zip(*cols) if cols else [()]:
            key = (key0, regs)
            r = None
            if cse:
                r = top.get(key)
                if r is None and len(memo) > 1:
                    r = self.memo_get(key)
            if r is None:
                r = fn(*regs)
                if cse:
                    top[key] = r
            out.append(r)
        return [out]

    # -- blocks and regions ---------------------------------------------------------------------
    def run_block(self, block: Block, args: list[list[str]]) -> list[list[str]]:
        for a, regs in zip(block.args, args):
            self.vals[a] = regs
        for i, op in enumerate(block.ops):
            if op.name == "yield":
                return [self.vals[v] for v in op.operands]
            self.following = (block.ops, i + 1)  # what a rule may look ahead at (rules_hopper's init)
            self.op(op)
        return []

    def next_effect(self):
        """The next op of the current op's block that is not a pure computation (a constant, a
        scalar's arithmetic, a view of a buffer): what a rule may defer its ordering to."""
        ops, i = getattr(self, "following", ((), 0))
        from gluon_trace.ops import OPS
        for op in ops[i:]:
            d = OPS.get(op.name)
            if op.regions or d is None or d.has_side_effects:
                return op
        return None

    def op(self, op) -> None:
        if op.loc is not None:
            self.loc = op.loc
        fn = RULES.get(op.name)
        if fn is None or isinstance(fn, Unsupported):
            why = fn.why if fn is not None else "no lowering rule"
            raise CompileError(f"`{op.name}` is not supported by the NVIDIA backend: {why}", op.loc)
        outs = fn(self, op)
        for r, regs in zip(op.results, outs or ()):
            self.vals[r] = regs

    def call_region(self, block: Block, args: list[str]) -> list[str]:
        """Inline a scalar region (a combine function) on scalar registers."""
        saved = self.loc
        with self.scope():
            outs = self.run_block(block, [[a] for a in args])
        self.loc = saved
        return [o[0] for o in outs]

    # -- the kernel -------------------------------------------------------------------------
    def params(self) -> list[str]:
        decls = []
        for i, (v, name) in enumerate(zip(self.g.args, self.g.arg_names)):
            t = v.type.dtype
            pname = f"{kernel_name(self.g)}_param_{i}"
            if isinstance(v.type, TensorDescType):  # a CUtensorMap and the global shape
                from .rules_hopper import declare_desc
                decls.extend(declare_desc(self, v, pname))
                continue
            pt = param_type(t)
            decls.append(f".param .{pt} {pname}")
            r = self.reg_for(t)
            if t.is_bool:
                x = self.reg("b32")
                self.pro(f"ld.param.u8 {x}, [{pname}];")
                self.pro(f"setp.ne.u32 {r}, {x}, 0;")
            else:
                self.pro(f"ld.param.{pt} {r}, [{pname}];")
            self.vals[v] = [r]
        return decls

    def render(self) -> tuple[str, dict[int, object]]:
        """Emit the whole kernel: (PTX text, {PTX line number: SourceLoc})."""
        decls = self.params()
        self.loc = None
        if self.ws is not None and self.ws.ops:
            self.ws_labels = (self.label("ws_loop"), self.label("ws_leave"))
        elif self.ws is not None:
            self.ws_labels = (self.label("ws_workers"), self.label("ws_join"), self.label("ws_meet"))
        self.run_block(self.g.body, [])
        if self.ws is not None:
            from .warpspec import general_tail, worker_branch
            self.lines[:0] = worker_branch(self)
            if self.ws.ops:
                self.lines.extend(general_tail(self))
            else:
                self.lines.append(("ret;", None))
                self.lines.extend(self.ws_tail)
            for part, n in sorted(self.part_scratch.items()):  # each worker's scratch above the last
                self.prologue = [x.replace(f"__GT_SCRATCH_{part}__", str(self.smem_bytes)) for x in self.prologue]
                self.lines = [(x.replace(f"__GT_SCRATCH_{part}__", str(self.smem_bytes)), loc)
                              for x, loc in self.lines]
                self.smem_bytes += n
        # unread registers' instructions out; huge shared-memory read-backs next to their readers
        keep = live_lines([x for x, _ in self.lines] + self.prologue)
        self.lines = [x for x, k in zip(self.lines, keep) if k]
        self.prologue = [x for x, k in zip(self.prologue, keep[len(keep) - len(self.prologue):]) if k]
        self.lines = sink_shared_loads(self.lines)
        self.lines = spill_registers(self)  # above a register budget: some kept in .local
        out = [f"//\n// gluon_trace: kernel {self.g.name}, {self.nw} warps, {self.target}",
               "//", f".version {self.flags.get('ptx_version', PTX_VERSION)}", f".target {self.target}",
               ".address_size 64", ""]
        if self.flags.get("minmax3"):
            out[1:1] = ["// integer min/max through complements, max(a, b) = ~min(~a, ~b): this ptxas "
                        "miscompiles the VIMNMX3 it would fold them into"]
        files = {}
        for _, loc in self.lines:
            if loc is not None and loc.file not in files:
                files[loc.file] = len(files) + 1
        for f, i in files.items():
            out.append(f'.file {i} "{_escape(f)}"')
        if self.smem_bytes:
            # TMA boxes and wgmma tiles with a 128-byte swizzle sit at 1024-byte multiples of it
            align = 1024 if self.flags.get("tma") or self.flags.get("wgmma") else 16
            out.append(f".extern .shared .align {align} .b8 gt_smem[];")
        out.extend(self.module_decls)
        out.append("")
        out.append(f".visible .entry {kernel_name(self.g)}(")
        out.append(",\n".join("\t" + d for d in decls))
        out.append(")")
        out.append(f".maxntid {self.nthreads}, 1, 1")
        if self.g.num_ctas > 1:  # the cluster shape is the kernel's: a plain launch honours it
            out.append(f".reqnctapercluster {self.g.num_ctas}, 1, 1")
        if self.ws is not None and self.ws.start_regs:
            out.append(f".maxnreg {self.ws.start_regs}")
        elif self.g.maxnreg:
            out.append(f".maxnreg {self.g.maxnreg}")
        out.append("{")
        for cls, n in self.counts.items():
            if n:
                out.append(f"\t.reg .{cls} {ptx.PREFIX[cls]}<{n + 1}>;")
        out.extend("\t" + d for d in self.local_decls)
        out.extend("\t" + p for p in self.prologue)
        line_locs: dict[int, object] = {}
        cur = None
        for text, loc in self.lines:
            if loc is not None and loc is not cur and (cur is None or (loc.file, loc.line) != (cur.file, cur.line)):
                out.append(f"\t.loc {files[loc.file]} {loc.line} 0")
                cur = loc
            line_locs[len(out) + 1] = loc
            out.append(text if text.endswith(":") else "\t" + text)
        out.append("\tret;")
        out.append("}")
        return "\n".join(out) + "\n", line_locs


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def _attr_key(attrs: dict):
    items = []
    for k, v in sorted(attrs.items()):
        try:
            hash(v)
        except TypeError:
            v = repr(v)
        items.append((k, v))
    return tuple(items)


def kernel_name(g: Graph) -> str:
    return re.sub(r"\W", "_", g.name) or "kernel"


def emit(graph: Graph, target: str) -> tuple[str, dict, int]:
    """(PTX text, {PTX line: SourceLoc}, scratch shared-memory bytes)."""
    from gluon_trace.decompose import F64_MATH, expand_math
    from gluon_trace.schedule import hoist_stores
    from . import _rules
    _rules()  # the rule modules register themselves in RULES
    from gluon_trace.backend import refuse_types
    from .rules_tensorcore import refuse_unlowered
    refuse_unlowered(graph)
    from .fp8 import MIN_SM
    if int("".join(ch for ch in target[3:] if ch.isdigit())) < MIN_SM:
        refuse_types(graph, "nvidia", lambda d: d.is_fp8, f"fp8 needs sm_{MIN_SM} or newer (its conversions "
                     f"and MMAs); this kernel is compiled for {target}")
    refuse_types(graph, "nvidia", lambda d: d.is_fp8 and d.name in ("float8e4b8", "float8e5b16"),
                 "AMD gfx942's FNUZ fp8 format; no NVIDIA instruction takes it: use gl.float8e4nv "
                 "(for float8e4b8) or gl.float8e5 (for float8e5b16)")
    graph = expand_math(graph, F64_MATH)  # float64 exp/log/sin/...: core ops, shared with AMD
    graph = hoist_stores(graph)  # each tile stored (and dead) as early as memory order allows
    em = Emitter(graph, target)
    text, locs = em.render()
    _check_smem(em, graph, target)
    return text, locs, em.smem_bytes


def _check_smem(em, graph, target: str) -> None:
    """The buffers fit (smem_plan checked them); with the scratch above them they must still."""
    from gluon_trace.smem_plan import LIMITS
    limit = LIMITS.get(target)
    if em.smem_plan is None or limit is None or em.smem_bytes <= limit:
        return
    first = next(op for op in graph.body.walk() if op.name == "smem_alloc")
    raise CompileError(f"the kernel needs {em.smem_bytes} bytes of shared memory ({em.scratch_off} for its "
                       f"buffers, the rest for reductions and layout conversions); {target} has {limit} "
                       "per block", first.loc,
                       notes=("use fewer pipeline stages or smaller tiles",))


def select(em, t, p, a, b) -> str:
    """p ? a : b"""
    if a == b:
        return a
    cls = ptx.rclass(t)
    if cls == "pred":
        x = em.ins("b32", f"selp.u32 {{d}}, 1, 0, {a};")
        y = em.ins("b32", f"selp.u32 {{d}}, 1, 0, {b};")
        s = em.ins("b32", f"selp.b32 {{d}}, {x}, {y}, {p};")
        return em.ins("pred", f"setp.ne.u32 {{d}}, {s}, 0;")
    return em.ins(cls, f"selp.{cls} {{d}}, {a}, {b}, {p};")

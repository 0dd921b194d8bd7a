"""Lowering a traced graph to AMDGCN machine IR (instruction selection).

Values: a scalar IR value becomes one *element*; a tile becomes a list of elements,
one per register index of its linear layout (like Mosaic GPU's FragmentedArray). An
element is an operand: an ``Imm``, an SGPR (a value uniform over the workgroup: kernel
arguments, program ids, loop counters and integer arithmetic on them), or a VGPR
(per-lane values, and uniform floats: the GPU has no scalar float ALU). 64-bit types
take a 2-dword register; everything narrower lives widened in one dword: 8/16-bit
integers sign- or zero-extended, float16/bfloat16 as the float32 of their value (so
each op computes in f32 and rounds back, which is what the interpreter does).

The emitter only picks instructions over virtual registers; ``regalloc`` assigns
registers, ``waitcnt`` places ``s_waitcnt`` and ``hazards`` the ``s_nop``s after it.
"""
from __future__ import annotations

from contextlib import contextmanager

from gluon_trace import dtypes as dt
from gluon_trace.errors import CompileError

from .mir import Aff, Fixed, Imm, Inst, Label, Neg, Reg, Sub, hi, is_vgpr, lo, strip
from .target import get_target

WAVE_LOG = {32: 5, 64: 6}


def dwords(d: dt.dtype) -> int:
    return 2 if d.bits == 64 else 1


def elem_key(x):
    x = strip(x)
    if isinstance(x, Aff):
        return ("a", elem_key(x.var), x.c)
    if isinstance(x, Reg):
        return ("r", x.id)
    if isinstance(x, Sub):
        return ("r", x.reg.id, x.index)
    if isinstance(x, Imm):
        return ("i", x.bits, x.size)
    return ("f", getattr(x, "name", id(x)))


class Emitter:
    def __init__(self, graph, target_name: str):
        self.g = graph
        self.t = get_target(target_name)
        self.nw = graph.num_warps
        self.wave = self.t.wave
        self.code: list = []        # the kernel body
        self.pre: list = []         # thread-index values hoisted to the kernel entry
        self.loops: list = []       # (header Label, back-edge Inst)
        self.vals: dict = {}
        self.memo: dict = {}        # hoisted computations, valid everywhere
        self.loc = None
        # the kernel's shared buffers (smem_plan offsets) and the barriers membar places; the
        # backend's own LDS scratch (reductions, conversions) lives above the buffers
        self.smem_plan, self.membar = None, set()
        if any(op.name == "smem_alloc" for op in graph.body.walk()):
            from gluon_trace.membar import barriers
            from gluon_trace.smem_plan import plan
            self.smem_plan = plan(graph, target=self.t.name)
            self.membar = barriers(graph, self.smem_plan)
        self.scratch_off = -(-(self.smem_plan.total if self.smem_plan else 0) // 16) * 16
        self.lds_size = self.scratch_off
        self.lds_dirty = False
        self.loop_depth = 0
        self._labels = 0
        # ABI registers: s[0:1] kernarg segment pointer, s2..s4 workgroup ids, v0 work-item id
        self.kernarg = Reg("s", 2, fixed=0)
        self.wgid = [Reg("s", 1, fixed=2 + k) for k in range(3)]
        self.v0 = Reg("v", 1, fixed=0)
        self.tid = Reg("v")
        self.arg_loads: list = []   # (Reg, offset, dtype) for the prologue
        self.hidden: dict = {}      # hidden kernarg name -> Reg
        self.used = {v for op in graph.body.walk() for v in op.operands}
        self.cse: list = [{}]        # scoped: entries made inside a loop/branch die with it
        self.mults: dict = {}        # elem_key -> a power of two the value is a multiple of
        self.homes: set = set()      # ids of loop/branch registers (they hold several values)
        self.vcc_holds = None        # elem_key of the 0/1 element whose mask vcc holds
        self.start_demand: set = set()   # branch results a later join needs at a run-time start
        self.start_ahead: set = set()    # branches whose later ones were predicted (lds_join_predict)
        self.start_blocks: dict = {}     # id(op) -> the emitted block holding it (start_rescue)

    # -- common subexpressions and known multiples ------------------------------------------
    def cse_get(self, key):
        for scope in reversed(self.cse):
            if key in scope:
                return scope[key]
        return None

    def cse_put(self, key, value):
        self.cse[-1][key] = value
        return value

    @contextmanager
    def scope(self):
        self.cse.append({})
        try:
            yield
        finally:
            self.cse.pop()

    def mult(self, x) -> int:
        """A power of two known to divide the value (1 when nothing is known)."""
        if isinstance(x, Imm):
            v = x.bits
            return (v & -v) if v else 1 << 32
        if isinstance(x, Aff):
            return min(self.mult(x.var), self.mult(Imm(x.c & 0xFFFFFFFF)))
        return self.mults.get(elem_key(x), 1)

    def set_mult(self, x, m: int):
        if not isinstance(x, Imm) and m > 1:
            self.mults[elem_key(x)] = m
        return x

    def real(self, x):
        """The value of an element as an operand (materializes ``var + c``)."""
        if not isinstance(x, Aff):
            return x
        key = ("real",) + elem_key(x)
        hit = self.cse_get(key)
        if hit is not None:
            return hit
        from .arith import add_const
        return self.cse_put(key, add_const(self, x.var, x.c, x.size))

    # -- registers and instructions ------------------------------------------------------
    def v(self, size: int = 1) -> Reg:
        return Reg("v", size)

    def s(self, size: int = 1) -> Reg:
        return Reg("s", size)

    def mask_reg(self) -> Reg:
        return Reg("s", self.t.mask_size)

    @property
    def vcc(self) -> Fixed:
        return Fixed(self.t.vcc, "special", self.t.mask_size)

    @property
    def exec(self) -> Fixed:
        return Fixed(self.t.exec, "special", self.t.mask_size)

    def emit(self, op, defs=(), uses=(), suffix="", kind="salu", target=None, imp=()) -> Inst:
        i = Inst(op, defs, uses, suffix, kind, self.loc, target, imp)
        self.code.append(i)
        if self.code is not self.pre and (target is not None or any(
                isinstance(d, Fixed) and d.name.startswith("vcc") for d in defs)):
            self.vcc_holds = None
        return i

    def note_vcc(self, b) -> None:
        """vcc now holds the lane mask of the 0/1 element b (so `b != 0` needs no v_cmp)."""
        if self.code is not self.pre:
            self.vcc_holds = elem_key(b)

    def label(self, prefix="L") -> Label:
        self._labels += 1
        return Label(f".L{prefix}_{self.g.name}_{self._labels}")

    def place(self, lab: Label) -> None:
        self.code.append(lab)
        self.vcc_holds = None

    def error(self, msg: str) -> CompileError:
        return CompileError(f"AMD backend ({self.t.name}): {msg}", self.loc)

    @contextmanager
    def hoisted(self):
        """Emit into the kernel entry (for values that depend only on the thread id)."""
        saved, saved_loc = self.code, self.loc
        self.code, self.loc = self.pre, None
        try:
            yield
        finally:
            self.code, self.loc = saved, saved_loc

    # -- operand legalization -------------------------------------------------------------
    def _scalar_key(self, x):
        x = strip(x)
        if isinstance(x, Fixed) and x.cls == "special":
            return None  # vcc/exec reads are counted through `implicit`
        if isinstance(x, Imm):
            return None if x.is_inline else ("lit", x.bits)
        if is_vgpr(x):
            return None
        return elem_key(x)

    def valu(self, op, dst, srcs, *, form="vop2", comm=False, implicit=0, suffix="",
             extra_defs=(), kind="valu", rev=None, imp=()) -> Reg:
        """Emit a VALU instruction, moving operands into VGPRs as the encoding requires:
        at most ``const_bus`` distinct SGPRs/literals (``implicit`` of them already taken
        by vcc), literals only where the encoding has room for one, 64-bit literals never.
        ``comm``/``rev`` let the scalar operand move to src0 (VOP2/VOPC want a VGPR in src1)."""
        srcs = [self.real(x) for x in srcs]
        if len(srcs) >= 2 and not is_vgpr(strip(srcs[1])) and is_vgpr(strip(srcs[0])) \
                and form in ("vop2", "vopc") and (comm or rev):
            srcs[0], srcs[1] = srcs[1], srcs[0]
            if rev:
                op = rev
        vop3 = form == "vop3" or (form in ("vop2", "vopc") and len(srcs) >= 2
                                   and not is_vgpr(strip(srcs[1])))
        budget = self.t.const_bus - implicit
        seen: list = []
        lit_seen = None
        for k, x in enumerate(srcs):
            base = strip(x)
            key = self._scalar_key(base)
            if key is None:
                continue
            if isinstance(base, Imm):
                ok = base.size == 1 and ((vop3 and self.t.vop3_literal) or (not vop3 and k == 0))
                ok = ok and (lit_seen is None or lit_seen == key)
                if ok and (key in seen or len(seen) < budget):
                    lit_seen = key
                    if key not in seen:
                        seen.append(key)
                    continue
            elif key in seen or len(seen) < budget:
                if key not in seen:
                    seen.append(key)
                continue
            moved = self.to_v(base)
            srcs[k] = Neg(moved) if isinstance(x, Neg) else moved
        self.emit(op, [dst, *extra_defs], srcs, suffix, kind, imp=imp)
        return dst

    def salu(self, op, dst, srcs, suffix="") -> Reg:
        """Emit a SALU instruction; at most one 32-bit literal, no 64-bit literals."""
        srcs = [self.real(x) for x in srcs]
        lit = None
        for k, x in enumerate(srcs):
            if isinstance(x, Imm) and not x.is_inline:
                if x.size == 2 or (lit is not None and lit != x.bits):
                    srcs[k] = self.to_s(x, keep_imm=False)
                else:
                    lit = x.bits
            elif is_vgpr(x):
                raise AssertionError(f"{op}: VGPR operand {x!r} on the scalar unit")
        self.emit(op, [dst] if dst is not None else [], srcs, suffix, "salu")
        return dst

    # -- moving values between register files ------------------------------------------------
    def to_v(self, x):
        """x in VGPRs (a copy when it is an SGPR or a constant)."""
        x = self.real(strip(x))
        if is_vgpr(x):
            return x
        r = self.v(x.size)
        if x.size == 1:
            self.emit("v_mov_b32", [r], [x], kind="valu")
        else:
            self.emit("v_mov_b32", [r[0]], [lo(x)], kind="valu")
            self.emit("v_mov_b32", [r[1]], [hi(x)], kind="valu")
        return r

    def to_s(self, x, keep_imm=True):
        """x in SGPRs. A VGPR value must be uniform (a scalar of the IR): its first
        active lane is read. Constants stay constants unless ``keep_imm`` is False."""
        x = self.real(x)
        if isinstance(x, Imm):
            if keep_imm and (x.size == 1 or x.is_inline):
                return x
            r = self.s(x.size)
            if x.size == 1:
                self.emit("s_mov_b32", [r], [x])
            elif x.is_inline:
                self.emit("s_mov_b64", [r], [x])
            else:
                self.emit("s_mov_b32", [r[0]], [x.half(0)])
                self.emit("s_mov_b32", [r[1]], [x.half(1)])
            return r
        if not is_vgpr(x):
            return x
        r = self.s(x.size)
        if x.size == 1:
            self.emit("v_readfirstlane_b32", [r], [x], kind="valu")
        else:
            for k in range(x.size):
                self.emit("v_readfirstlane_b32", [r[k]], [Sub(x, k)], kind="valu")
        return r

    def uniform(self, *xs) -> bool:
        """All operands on the scalar side (constants or SGPRs): a SALU op can combine them."""
        return all(not is_vgpr(strip(x.var if isinstance(x, Aff) else x)) for x in xs)

    def copy_into(self, home: Reg, x) -> None:
        x = self.real(x)
        if home.cls == "v":
            for k in range(home.size):
                src = x if home.size == 1 else (lo(x) if k == 0 else hi(x))
                self.emit("v_mov_b32", [home if home.size == 1 else home[k]], [src], kind="valu")
        elif is_vgpr(x):
            for k in range(home.size):
                self.emit("v_readfirstlane_b32", [home if home.size == 1 else home[k]],
                          [x if x.size == 1 else Sub(x, k)], kind="valu")
        elif home.size == 2 and not (isinstance(x, Imm) and not x.is_inline):
            self.emit("s_mov_b64", [home], [x])
        else:
            for k in range(home.size):
                src = x if home.size == 1 else (lo(x) if k == 0 else hi(x))
                self.emit("s_mov_b32", [home if home.size == 1 else home[k]], [src])

    def parallel_copy(self, pairs) -> None:
        """home_i = x_i for all i at once: sources that are also destinations go
        through temporaries first (a loop body may yield its arguments swapped)."""
        pairs = list(pairs)
        homes = {h.id for h, _ in pairs}

        def reads_home(x):
            x = strip(x)
            if isinstance(x, Aff):
                x = x.var
            return (isinstance(x, Reg) and x.id in homes) or (isinstance(x, Sub) and x.reg.id in homes)
        staged = []
        for h, x in pairs:
            if reads_home(x) and not (isinstance(x, Reg) and x is h):
                t = Reg(h.cls, h.size)
                self.copy_into(t, x)
                x = t
            staged.append((h, x))
        for h, x in staged:
            if isinstance(x, Reg) and x is h:
                continue
            self.copy_into(h, x)

    def new_home(self, ty):
        """Registers a loop-carried or branch-joined value lives in."""
        from gluon_trace.ir import MemDescType
        if isinstance(ty, MemDescType):  # its LDS address (control.py: carried views)
            r = Reg("s", 1)
            self.homes.add(r.id)
            return r
        n = dwords(ty.dtype)
        if ty.is_scalar:
            regs = [Reg("v" if ty.dtype.is_floating else "s", n)]
        else:
            regs = [Reg("v", n) for _ in range(self.linear(ty).num_regs)]
        self.homes.update(r.id for r in regs)
        return regs[0] if ty.is_scalar else regs

    # -- values --------------------------------------------------------------------------------
    def linear(self, ty):
        return ty.layout.to_linear(tuple(ty.shape), self.nw, self.wave)

    def elems(self, v) -> list:
        x = self.vals[v]
        return x if isinstance(x, list) else [x]

    def emit_block(self, block) -> list:
        from .rules import RULES
        from .lds_async import async_copies
        from gluon_trace.backend import Unsupported
        copies = async_copies(self)  # async copies' LDS writes complete within their block
        copies.enter()
        for op in block.ops:
            if op.name == "yield":
                copies.leave()
                return [self.vals[v] for v in op.operands]
            self.loc = op.loc
            if op.name in ("for", "if"):
                copies.flush()
            rule = RULES.get(op.name)
            if rule is None or isinstance(rule, Unsupported):
                why = rule.why if rule is not None else "no lowering rule"
                raise self.error(f"`{op.name}` is not supported: {why}")
            rule(self, op)
        copies.leave()
        return []

    def run_region(self, block, args: list) -> list:
        """Emit a combine region (reduce/scan) on the given elements; returns its yields."""
        for a, x in zip(block.args, args):
            self.vals[a] = x
        saved = self.loc
        out = self.emit_block(block)
        self.loc = saved
        return out

    # -- the thread id -------------------------------------------------------------------------
    def arg_elem(self, index: int, offset: int, dtype: dt.dtype):
        """The register a kernel argument is loaded into in the prologue."""
        r = Reg("v" if dtype.name == "float16" else "s", dwords(dtype))
        self.arg_loads.append((r, offset, dtype))
        return r

    def hidden_arg(self, name: str) -> Reg:
        if name not in self.hidden:
            self.hidden[name] = Reg("s")
        return self.hidden[name]

    def use_lds(self, nbytes: int) -> None:
        """Scratch of ``nbytes`` for this op, above the kernel's shared buffers."""
        need = self.scratch_off + nbytes
        if need > 65536:
            bufs = f" above the kernel's {self.scratch_off} bytes of shared buffers" if self.scratch_off else ""
            raise self.error(f"this op needs {nbytes} bytes of LDS scratch{bufs}; a workgroup has 65536")
        self.lds_size = max(self.lds_size, need)

    def barrier(self) -> None:
        self.emit("s_barrier", kind="barrier")

    def lds_begin(self) -> None:
        """Before writing LDS: wait until every wave has finished reading what the
        previous LDS exchange left there (all exchanges share offset 0)."""
        if self.lds_dirty or self.loop_depth:
            self.barrier()

    def lds_end(self) -> None:
        self.lds_dirty = True


def prologue(em: Emitter, kernarg_size_explicit: int, hidden_offsets: dict) -> list:
    """The kernel entry: work-item id, kernel-argument loads, hoisted thread math."""
    code = [Inst("v_and_b32", [em.tid], [Imm(0x3FF), em.v0], kind="valu")]
    used = _used_regs(em)
    for r, off, d in em.arg_loads:
        if r.id not in used:
            continue
        code += _load_arg(em, r, off, d)
    for name, r in em.hidden.items():
        off = hidden_offsets[name]
        code.append(Inst("s_load_dword", [r], [em.kernarg, Imm(off)], kind="smem"))
        # block counts are 32-bit; group sizes are 16-bit and would need a mask
    return code + em.pre


def _used_regs(em) -> set:
    used = set()
    for i in em.code + em.pre:
        if isinstance(i, Inst):
            for r in i.regs("uses"):
                used.add(r.id)
    return used


def _load_arg(em, r: Reg, off: int, d: dt.dtype) -> list:
    """s_load the argument; narrow types come widened the way the emitter keeps them."""
    if d.bits == 64:
        return [Inst("s_load_dwordx2", [r], [em.kernarg, Imm(off)], kind="smem")]
    if d.bits == 32:
        return [Inst("s_load_dword", [r], [em.kernarg, Imm(off)], kind="smem")]
    raw = Reg("s")
    out = [Inst("s_load_dword", [raw], [em.kernarg, Imm(off)], kind="smem")]
    if d.name == "float16":
        out.append(Inst("v_cvt_f32_f16", [r], [raw], kind="valu"))
    elif d.name == "bfloat16":
        out.append(Inst("s_lshl_b32", [r], [raw, Imm(16)]))
    elif d.is_bool:
        out.append(Inst("s_and_b32", [r], [raw, Imm(1)]))
    elif d.is_signed:
        out.append(Inst(f"s_sext_i32_i{d.bits}", [r], [raw]))
    else:
        out.append(Inst("s_and_b32", [r], [raw, Imm((1 << d.bits) - 1)]))
    return out

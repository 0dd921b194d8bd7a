"""The machine IR the emitter writes: AMDGCN instructions over virtual registers.

A :class:`Reg` is a virtual register of one class (``v`` VGPR or ``s`` SGPR) and a
size in dwords; the register allocator later sets ``phys``. :class:`Sub` names one
dword of a wider register. :class:`Imm` is a constant (inline or literal),
:class:`Fixed` a register the hardware or the ABI owns (vcc, exec, the kernarg
pointer). An :class:`Inst` lists what it writes (``defs``) and reads (``uses``) so the
allocator, the ``s_waitcnt`` pass and the hazard pass see its dataflow; rendering
prints ``op defs, uses suffix``, the operand order of every AMDGCN instruction.
"""
from __future__ import annotations

import itertools
import struct

_ids = itertools.count()


class Reg:
    __slots__ = ("cls", "size", "id", "phys", "fixed")

    def __init__(self, cls: str, size: int = 1, fixed: int | None = None):
        self.cls = cls
        self.size = size
        self.id = next(_ids)
        self.phys: int | None = fixed
        self.fixed = fixed  # precoloured (the work-item id in v0)

    def __getitem__(self, i: int) -> "Sub":
        assert 0 <= i < self.size
        return Sub(self, i)

    def __repr__(self) -> str:
        return f"%{self.cls}{self.id}" + (f"x{self.size}" if self.size > 1 else "")


class Sub:
    """Dword ``index`` of register ``reg``."""
    __slots__ = ("reg", "index")
    size = 1

    def __init__(self, reg: Reg, index: int):
        self.reg, self.index = reg, index

    @property
    def cls(self) -> str:
        return self.reg.cls

    def __eq__(self, o):
        return isinstance(o, Sub) and o.reg is self.reg and o.index == self.index

    def __hash__(self):
        return hash((id(self.reg), self.index))

    def __repr__(self):
        return f"{self.reg!r}[{self.index}]"


class Fixed:
    """A register the program does not allocate: vcc, exec, scc, the ABI's SGPRs."""
    __slots__ = ("name", "cls", "size")

    def __init__(self, name: str, cls: str = "special", size: int = 1):
        self.name, self.cls, self.size = name, cls, size

    def __eq__(self, o):
        return isinstance(o, Fixed) and o.name == self.name

    def __hash__(self):
        return hash(self.name)

    def __repr__(self):
        return self.name


F32_INLINE = {0x3F000000: "0.5", 0xBF000000: "-0.5", 0x3F800000: "1.0", 0xBF800000: "-1.0",
              0x40000000: "2.0", 0xC0000000: "-2.0", 0x40800000: "4.0", 0xC0800000: "-4.0"}
F64_INLINE = {struct.unpack("<Q", struct.pack("<d", v))[0]: repr(v)
              for v in (0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 4.0, -4.0)}


class Imm:
    """A constant: ``bits`` is its bit pattern (32 or 64 bits); ``fkind`` says whether
    a float inline constant may stand for it ("f32"/"f64") or it is an integer."""
    __slots__ = ("bits", "size", "fkind")
    cls = "imm"

    def __init__(self, bits: int, size: int = 1, fkind: str | None = None):
        self.bits = bits & ((1 << (32 * size)) - 1)
        self.size, self.fkind = size, fkind

    @staticmethod
    def f32(x: float) -> "Imm":
        return Imm(struct.unpack("<I", struct.pack("<f", x))[0], 1, "f32")

    @staticmethod
    def f64(x: float) -> "Imm":
        return Imm(struct.unpack("<Q", struct.pack("<d", x))[0], 2, "f64")

    @property
    def signed(self) -> int:
        w = 32 * self.size
        return self.bits - (1 << w) if self.bits >> (w - 1) else self.bits

    def inline_text(self) -> str | None:
        """How the hardware's inline constants spell this value, or None for a literal."""
        if -16 <= self.signed <= 64:
            return str(self.signed)
        if self.fkind == "f32" and self.size == 1:
            return F32_INLINE.get(self.bits)
        if self.fkind == "f64" and self.size == 2:
            return F64_INLINE.get(self.bits)
        return None

    @property
    def is_inline(self) -> bool:
        return self.inline_text() is not None

    def half(self, i: int) -> "Imm":
        return Imm(self.bits >> (32 * i), 1, None)

    def text(self) -> str:
        t = self.inline_text()
        if t is not None:
            return t
        if self.size != 1:
            raise ValueError(f"a 64-bit literal {self.bits:#x} cannot be encoded")
        return f"{self.bits:#x}"

    def __eq__(self, o):
        return isinstance(o, Imm) and (o.bits, o.size) == (self.bits, self.size)

    def __hash__(self):
        return hash((self.bits, self.size))

    def __repr__(self):
        return self.text() if (self.size == 1 or self.is_inline) else f"imm64:{self.bits:#x}"


class Neg:
    """The negate source modifier of a VOP3 float operand: ``-v3``."""
    __slots__ = ("x",)

    def __init__(self, x):
        self.x = x

    @property
    def cls(self):
        return self.x.cls

    @property
    def size(self):
        return self.x.size

    def __repr__(self):
        return f"-{self.x!r}"


class Aff:
    """``var + c``: an integer or pointer element with its constant part kept apart, so
    the registers of a tile (arange + k) share one ``var`` and differ only in ``c``,
    which ends up in an instruction's immediate offset. Materialized (``Emitter.real``)
    wherever an instruction needs the value itself."""
    __slots__ = ("var", "c", "size")
    cls = "aff"

    def __init__(self, var, c: int, size: int):
        self.var, self.c, self.size = var, c, size

    def __repr__(self):
        return f"({self.var!r}{self.c:+d})"


def strip(x):
    return x.x if isinstance(x, Neg) else x


def is_vgpr(x) -> bool:
    return getattr(x, "cls", None) == "v"


def is_sgpr(x) -> bool:
    return getattr(x, "cls", None) == "s"


def lo(x):
    """Dword 0 of a 64-bit operand."""
    if isinstance(x, Reg):
        return x[0] if x.size > 1 else x
    if isinstance(x, Imm):
        return x.half(0) if x.size > 1 else x
    raise TypeError(x)


def hi(x):
    if isinstance(x, Reg):
        return x[1]
    if isinstance(x, Imm):
        return x.half(1)
    raise TypeError(x)


class Label:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"{self.name}:"


class Inst:
    """One instruction. ``kind`` tells the later passes what it is:
    valu, salu, vmem_load, vmem_store, vmem_atomic (returns), smem, lds_load,
    lds_store, barrier, branch, cbranch, waitcnt, nop, end."""
    __slots__ = ("op", "defs", "uses", "suffix", "kind", "loc", "target", "imp")

    def __init__(self, op, defs=(), uses=(), suffix="", kind="salu", loc=None, target=None, imp=()):
        self.op = op
        self.defs = list(defs)
        self.uses = list(uses)
        self.suffix = suffix
        self.kind = kind
        self.loc = loc
        self.target = target  # label name of a branch
        self.imp = list(imp)  # implicit reads the syntax does not name (vcc of v_div_fmas)

    def regs(self, which) -> list:
        # a list built with exact type tests: the allocator, the spiller and s_waitcnt ask
        # every instruction of a program of hundreds of thousands several times
        return _regs_of(getattr(self, which), [])

    def mentioned(self) -> list:
        """Every register the instruction defines or uses."""
        return _regs_of(self.uses, _regs_of(self.defs, []))

    def __repr__(self):
        return render_inst(self)


def mention_lists(code: list) -> dict:
    """{Reg: the indices of the instructions of ``code`` that define or use it, ascending}:
    the live intervals and the spiller's next mentions both read it (one walk a round)."""
    out: dict = {}
    get = out.get
    for k, inst in enumerate(code):
        if not isinstance(inst, Inst):
            continue
        for xs in (inst.defs, inst.uses):  # (Inst.mentioned, inlined)
            for x in xs:
                t = type(x)
                if t is Neg:
                    x = x.x
                    t = type(x)
                if t is Reg:
                    r = x
                elif t is Sub:
                    r = x.reg
                else:
                    continue
                ks = get(r)
                if ks is None:
                    out[r] = [k]
                elif ks[-1] != k:
                    ks.append(k)
    return out


def _regs_of(xs, out: list) -> list:
    """Append to ``out`` the registers operands ``xs`` name (a Sub names its register)."""
    for x in xs:
        t = type(x)
        if t is Neg:
            x = x.x
            t = type(x)
        if t is Reg:
            out.append(x)
        elif t is Sub:
            out.append(x.reg)
    return out


def phys_name(x) -> str:
    t = type(x)  # the common operands first, by exact type (a kernel renders ~10^6)
    if t is Reg and x.phys is not None:
        return f"{x.cls}{x.phys}" if x.size == 1 else f"{x.cls}[{x.phys}:{x.phys + x.size - 1}]"
    if t is Sub and x.reg.phys is not None:
        return f"{x.reg.cls}{x.reg.phys + x.index}"
    if t is str:
        return x
    if isinstance(x, Neg):
        return "-" + phys_name(x.x)
    if isinstance(x, Reg):
        if x.phys is None:
            return repr(x)
        if x.size == 1:
            return f"{x.cls}{x.phys}"
        return f"{x.cls}[{x.phys}:{x.phys + x.size - 1}]"
    if isinstance(x, Sub):
        if x.reg.phys is None:
            return repr(x)
        return f"{x.reg.cls}{x.reg.phys + x.index}"
    if isinstance(x, Imm):
        return x.text()
    if isinstance(x, (Fixed,)):
        return x.name
    if isinstance(x, str):
        return x
    raise TypeError(f"cannot render operand {x!r}")


def render_inst(i: Inst) -> str:
    if i.target is not None:  # branches read only scc/exec/vcc, implicitly
        return f"{i.op} {i.target}"
    ops = ", ".join([phys_name(x) for x in i.defs] + [phys_name(x) for x in i.uses])
    text = i.op + (" " + ops if ops else "")
    if i.suffix:
        text += " " + i.suffix
    return text


def phys_units_of(xs, out: list) -> list:
    """Append to ``out`` the physical dwords of the allocated operands ``xs`` (what
    ``phys_units`` gives each; exact type tests: s_waitcnt asks this of every operand)."""
    for x in xs:
        t = type(x)
        if t is Neg:
            x = x.x
            t = type(x)
        if t is Reg:
            p = x.phys
            if p is not None:
                if x.size == 1:
                    out.append((x.cls, p))
                else:
                    c = x.cls
                    out += [(c, p + k) for k in range(x.size)]
        elif t is Sub:
            r = x.reg
            if r.phys is not None:
                out.append((r.cls, r.phys + x.index))
    return out


def phys_units(x) -> list[tuple[str, int]]:
    """The physical dwords an allocated operand covers: [("v", 5), ("v", 6)]."""
    x = strip(x)
    if isinstance(x, Reg) and x.phys is not None:
        return [(x.cls, x.phys + k) for k in range(x.size)]
    if isinstance(x, Sub) and x.reg.phys is not None:
        return [(x.reg.cls, x.reg.phys + x.index)]
    return []

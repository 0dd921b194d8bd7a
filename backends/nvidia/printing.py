"""``gl.device_print`` through the CUDA runtime's ``vprintf``.

Each element is printed once (by the thread that owns it; scalars by thread 0) as
``pid (x, y, z) <prefix>[i, j]: value`` -- one line per element, in no fixed order, as
any GPU printf. The interpreter prints whole arrays per program instead.
"""
from __future__ import annotations

from . import ptx


def _fmt(t) -> tuple[str, str, int]:
    """(printf conversion, PTX store type, bytes) of a value in the argument buffer."""
    if t.is_floating:
        return "%f", "f64", 8
    if t.is_ptr:
        return "0x%llx", "b64", 8
    if t.bits == 64:
        return ("%lld" if t.is_signed else "%llu"), "b64", 8
    return ("%d" if t.is_signed or t.is_bool else "%u"), "b32", 4


def _cstring(em, text: str) -> str:
    data = text.encode() + b"\0"
    n = len(em.module_decls)
    name = f"gt_fmt_{n}"
    em.module_decls.append(f".global .align 1 .b8 {name}[{len(data)}] = {{{', '.join(str(b) for b in data)}}};")
    return name


def _ensure_vprintf(em) -> None:
    if not em.flags.get("vprintf"):
        em.flags["vprintf"] = True
        em.module_decls.insert(0, ".extern .func (.param .b32 func_retval0) vprintf\n"
                                  "(\n\t.param .b64 vprintf_param_0,\n\t.param .b64 vprintf_param_1\n);")


def _call(em, fmt_name: str, args: list[tuple[str, str, int]], pred: str | None) -> None:
    """vprintf(fmt, buffer) with ``args`` = [(register, store type, size)] packed in a local
    buffer, each at its natural alignment."""
    size, offs = 0, []
    for _, _, n in args:
        size = (size + n - 1) // n * n
        offs.append(size)
        size += n
    size = max(size, 8)
    buf = f"gt_pbuf_{len(em.module_decls)}_{em.nlabels}"
    em.local_decls.append(f".local .align 8 .b8 {buf}[{size}];")
    skip = em.label("print")
    if pred:
        em.emit(f"@!{pred} bra {skip};")
    for (r, st, _), off in zip(args, offs):
        em.emit(f"st.local.{st} [{buf}+{off}], {r};")
    f = em.ins("b64", f"cvta.global.u64 {{d}}, {fmt_name};")
    b = em.ins("b64", f"cvta.local.u64 {{d}}, {buf};")
    em.emit("{")
    em.emit(".param .b64 gt_p0;")
    em.emit(f"st.param.b64 [gt_p0], {f};")
    em.emit(".param .b64 gt_p1;")
    em.emit(f"st.param.b64 [gt_p1], {b};")
    em.emit(".param .b32 gt_ret;")
    em.emit("call.uni (gt_ret), vprintf, (gt_p0, gt_p1);")
    em.emit("}")
    em.emit(f"{skip}:")


def _value_arg(em, t, r):
    conv, st, n = _fmt(t)
    if t.is_bool:
        r = em.ins("b32", f"selp.u32 {{d}}, 1, 0, {r};")
    elif t.is_floating and t.bits != 64:
        r = em.ins("f64", f"cvt.f64.f32 {{d}}, {r};")
    elif t.is_floating:
        pass
    return conv, (r, st, n)


def lower_print(em, op):
    _ensure_vprintf(em)
    pids = [em.special(f"%ctaid.{a}") for a in "xyz"]
    head = [(p, "b32", 4) for p in pids]
    prefix = op.attrs.get("prefix", "").replace("%", "%%")
    for v in op.operands:
        t = v.type.dtype
        regs = em.vals[v]
        lin = em.lin(v)
        if lin is None:
            conv, arg = _value_arg(em, t, regs[0])
            fmt = _cstring(em, f"pid (%d, %d, %d) {prefix}{conv}\n")
            _call(em, fmt, head + [arg], em.owner_pred(None))
            continue
        nd = len(lin.shape)
        idx = ", ".join(["%d"] * nd)
        owner = em.owner_pred(lin)
        parts = [em.thread_part(lin, lambda b, d=d: b[d]) for d in range(nd)]
        for r, reg in enumerate(regs):
            coords = []
            for d in range(nd):
                tp, _ = parts[d]
                rp = em.reg_part(lin, r, lambda b, d=d: b[d])
                coords.append((em.ins("b32", f"xor.b32 {{d}}, {tp}, {rp};"), "b32", 4))
            conv, arg = _value_arg(em, t, reg)
            fmt = _cstring(em, f"pid (%d, %d, %d) {prefix}[{idx}]: {conv}\n")
            _call(em, fmt, head + coords + [arg], owner)
    return []


__all__ = ["lower_print", "ptx"]

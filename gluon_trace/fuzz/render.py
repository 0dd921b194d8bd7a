"""A :class:`~.program.Program` as the Python source of a ``@gt.jit`` kernel, written with the
public API only, so a failing program can be saved and read as an ordinary kernel."""
from __future__ import annotations

from ..layouts import BlockedLayout, DistributedLinearLayout, SliceLayout
from .program import Program

_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
              "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>", "lt": "<", "le": "<=",
              "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}

HELPERS = '''
def _offsets(shape, layout):
    """Row-major offsets of a tile's elements, in ``layout`` (runs at trace time)."""
    rank, offs, stride = len(shape), None, 1
    for d in reversed(range(rank)):
        lay = layout
        for e in reversed(range(rank)):
            if e != d:
                lay = gl.SliceLayout(e, lay)
        idx = gl.arange(0, shape[d], layout=lay)
        for e in range(rank):
            if e != d:
                idx = gl.expand_dims(idx, e)
        offs = idx * stride if offs is None else offs + idx * stride
        stride *= shape[d]
    return offs


def _xor(a, b):
    return a ^ b


def _max(a, b):
    return gl.maximum(a, b)
'''


def layout_source(layout, names: dict) -> str:
    if layout in names:
        return names[layout]
    if isinstance(layout, SliceLayout):
        return f"gl.SliceLayout({layout.dim}, {layout_source(layout.parent, names)})"
    if isinstance(layout, BlockedLayout):
        return (f"gl.BlockedLayout(size_per_thread={list(layout.size_per_thread)}, "
                f"threads_per_warp={list(layout.threads_per_warp)}, "
                f"warps_per_cta={list(layout.warps_per_cta)}, order={list(layout.order)})")
    if type(layout).__name__ == "DotOperandLayout":  # (mma_layouts imports the language)
        return (f"gl.DotOperandLayout({layout.operand_index}, {layout_source(layout.parent, names)}, "
                f"k_width={layout.k_width})")
    if isinstance(layout, DistributedLinearLayout):
        def bases(bs):
            return "[" + ", ".join(str(list(b)) for b in bs) + "]"
        return (f"gl.DistributedLinearLayout(reg_bases={bases(layout.reg_bases)}, "
                f"lane_bases={bases(layout.lane_bases)}, warp_bases={bases(layout.warp_bases)}, "
                f"block_bases=[], shape={list(layout.shape)})")
    raise TypeError(f"no source form for layout {layout!r}")


def _lit(v) -> str:
    return repr(v) if not isinstance(v, float) else repr(float(v))


def _step_source(acc: str, step, dtype: str) -> str:
    fn, kind, x = step
    rhs = {"lit": _lit(x), "i": "i", "node": x}[kind]
    expr = f"gl.maximum({acc}, {rhs})" if fn == "maximum" else f"{acc} {_OPERATORS[fn]} {rhs}"
    return f"{acc} = ({expr}).to(gl.{dtype})"


def kernel_source(prog: Program, name: str = "fuzz_kernel") -> str:
    """The module text: layouts, helpers and the kernel ``name``."""
    names: dict = {}
    lines: list[str] = []
    for n in prog.nodes:
        if n.layout is not None and n.layout not in names and not isinstance(n.layout, SliceLayout):
            names[n.layout] = f"L{len(names)}"
    for lay, nm in names.items():
        lines.append(f"{nm} = {layout_source(lay, {})}")
    params = [f"in{n.attrs['input']}" for n in prog.inputs] + [f"out{i}" for i in range(len(prog.outputs))]
    body = []
    for n in prog.nodes:
        if n.op == "atomic":  # the buffer is the output parameter itself
            body += _atomic_source(n, f"out{prog.outputs.index(n.args[0])}", lambda lay: layout_source(lay, names))
        elif n.op != "atomic_buf":
            body += _node_source(n, lambda lay: layout_source(lay, names))
    for i, out in enumerate(prog.outputs):
        n = prog.node(out)
        if n.op == "atomic_buf":
            continue
        if not n.shape:
            body.append(f"gl.store(out{i}, {n.name})")
            continue
        body.append(f"o = _offsets({list(n.shape)}, {layout_source(n.layout, names)})")
        mask = ", mask=o < n_valid" if i % 2 else ""
        body.append(f"gl.store(out{i} + o, {n.name}{mask})")
    head = ["import numpy as np", "", "import gluon_trace as gt", "from gluon_trace import language as gl",
            "", *lines, HELPERS, "", "@gt.jit",
            f"def {name}({', '.join(params + ['n_valid', 'n_iter', 'flag'])}):"]
    return "\n".join(head + ["    " + ln for ln in body]) + "\n"


def _node_source(n, lay) -> list[str]:
    a = n.args
    at = n.attrs
    v = n.name
    if n.op == "load":
        src = f"in{at['input']}"
        if not at["masked"]:
            return [f"{v} = gl.load({src} + _offsets({list(n.shape)}, {lay(n.layout)}))"]
        other = f", other={_lit(at['other'])}" if at["other"] is not None else ""
        return [f"o = _offsets({list(n.shape)}, {lay(n.layout)})",
                f"{v} = gl.load({src} + o, mask=o < n_valid{other})"]
    if n.op == "binary":
        rhs = a[1] if len(a) > 1 else _lit(at["literal"])
        if at["fn"] in ("maximum", "minimum"):
            return [f"{v} = gl.{at['fn']}({a[0]}, {rhs})"]
        return [f"{v} = {a[0]} {_OPERATORS[at['fn']]} {rhs}"]
    if n.op == "unary":
        fn = at["fn"]
        expr = {"neg": f"-{a[0]}", "not": f"~{a[0]}"}.get(fn, f"gl.{fn}({a[0]})")
        return [f"{v} = {expr}"]
    if n.op == "cast":
        return [f"{v} = {a[0]}.to(gl.{at['to']})"]
    if n.op == "nonzero":
        return [f"{v} = gl.where({a[0]} == 0, 1, {a[0]})"]
    if n.op == "where":
        return [f"{v} = gl.where({a[0]}, {a[1]}, {a[2]})"]
    if n.op == "fma":
        return [f"{v} = gl.fma({a[0]}, {a[1]}, {a[2]})"]
    if n.op == "dot_fma":
        return [f"{v} = gl.dot_fma({a[0]}, {a[1]}, {a[2]})"]
    if n.op == "reduce":
        kind, axis, keep = at["kind"], at["axis"], at["keep"]
        if kind == "xor_sum":
            return [f"{v} = gl.reduce({a[0]}, {axis}, _xor, keep_dims={keep})"]
        return [f"{v} = gl.{kind}({a[0]}, axis={axis}, keep_dims={keep})"]
    if n.op == "scan":
        if at["kind"] == "cumsum":
            return [f"{v} = gl.cumsum({a[0]}, axis={at['axis']}, reverse={at['reverse']})"]
        return [f"{v} = gl.associative_scan({a[0]}, {at['axis']}, _max, reverse={at['reverse']})"]
    if n.op == "convert":
        return [f"{v} = gl.convert_layout({a[0]}, {lay(n.layout)})"]
    if n.op == "expand":
        return [f"{v} = gl.broadcast_to(gl.expand_dims({a[0]}, {at['axis']}), {list(n.shape)})"]
    if n.op == "reshape":
        return [f"{v} = gl.reshape({a[0]}, {list(at['new_shape'])})"]
    if n.op == "permute":
        return [f"{v} = gl.permute({a[0]}, {list(at['dims'])})"]
    if n.op == "split":
        return [f"{v} = gl.split({a[0]})[{at['half']}]"]
    if n.op == "join":
        return [f"{v} = gl.join({a[0]}, {a[1]})"]
    if n.op == "shared":
        return _shared_source(n, lay)
    if n.op == "loop":
        return [f"{v} = {a[0]}", "for i in gl.range(0, n_iter):",
                *["    " + _step_source(v, s, n.dtype) for s in at["steps"]]]
    if n.op == "branch":
        out = [f"{v} = {a[0]}", "with gl.if_(flag > 0):", "    " + _step_source(v, at["then"], n.dtype)]
        if at["other"]:
            out += ["with gl.else_():", "    " + _step_source(v, at["other"], n.dtype)]
        return out
    raise ValueError(f"unknown fuzz op {n.op!r}")


def _smem_layout_source(spec, shape) -> str:
    kind = spec[0]
    if kind == "swizzled":
        _, vec, per_phase, max_phase, order = spec
        return f"gl.SwizzledSharedLayout({vec}, {per_phase}, {max_phase}, {list(order)})"
    if kind == "nvmma":
        return f"gl.NVMMASharedLayout.get_default_for({list(shape)}, {{dt}}, transposed={spec[1]})"
    _, pairs, order = spec
    return f"gl.PaddedSharedLayout.with_identity_for({[list(p) for p in pairs]}, {list(shape)}, {list(order)})"


def _view_source(steps) -> str:
    out = ""
    for s in steps:
        if s[0] == "slice":
            out += f".slice({s[1]}, {s[2]}, {s[3]})"
        elif s[0] == "permute":
            out += f".permute({list(s[1])})"
        elif s[0] == "index":
            out += f".index({s[1]})"
        else:
            out += f".reshape({list(s[1])})"
    return out


def _access_source(var: str, base: str, acc) -> list[str]:
    form = acc.get("form", "arm")   # (stacked_views: "else", "outside", see fuzz/smem_stacked.py)
    if form == "outside":   # both views made before the branch, which picks one
        return [f"{var}0 = {base}{_view_source(acc['a'])}", f"{var}1 = {base}{_view_source(acc['b'])}",
                f"{var} = {var}0", "with gl.if_(flag > 0):", f"    {var} = {var}1"] + \
            ([f"{var} = {var}{_view_source(acc['after'])}"] if acc["after"] else [])
    lines = [f"{var} = {base}{_view_source(acc['a'])}"]
    if acc["b"] is not None:
        lines += ["with gl.if_(flag > 0):", f"    {var} = {base}{_view_source(acc['b'])}"]
        if form == "else":   # the else-arm's view made in its arm too
            lines += ["with gl.else_():", f"    {var} = {base}{_view_source(acc['a'])}"]
    if acc["after"]:
        lines.append(f"{var} = {var}{_view_source(acc['after'])}")
    return lines


def _shared_source(n, lay) -> list[str]:
    """The tile through a shared buffer (see fuzz/smem.py for the attributes)."""
    at, v, a = n.attrs, n.name, n.args
    src = n.args[0]
    dtype = f"gl.{n.dtype}"
    shape = list(at["buf"])
    sl = _smem_layout_source(at["smem"], shape[len(shape) - at["lrank"]:]).replace("{dt}", dtype)
    buf = f"{v}_s"
    if at["init"] == "value":
        out = [f"{buf} = gl.allocate_shared_memory({dtype}, {shape}, {sl}, {src})"]
    else:
        out = [f"{buf} = gl.allocate_shared_memory({dtype}, {shape}, {sl})", f"{buf}.store({src})"]
    base = buf
    if at["views"]:
        out.append(f"{v}_p = {buf}{_view_source(at['views'])}")
        base = f"{v}_p"
    if at["write"] is not None:
        out += _access_source(f"{v}_w", base, at["write"])
        out.append(f"{v}_w.store({a[1]})")
    if at.get("loop") is not None:
        out += _loop_source(n, base)
        if at["loop"]["out"] != "buf":
            return out
    out += _access_source(f"{v}_r", base, at["read"])
    out.append(f"{v} = {v}_r.load({lay(n.layout)})")
    return out


def _loop_source(n, base: str) -> list[str]:
    """The views a loop carries (see fuzz/smem.py's ``_loop``): ``{v}_c`` (and ``{v}_d``, swapped
    each step) move among ``pos``, each use seen through ``after``; ``{v}_a`` the tile read."""
    lp, v, a = n.attrs["loop"], n.name, n.args
    pos, after, lay, k = lp["pos"], _view_source(lp["after"]), f"{v}_L", len(lp["pos"])
    cv = [f"{v}_c", f"{v}_d"]
    out = [f"{lay} = {lp['lay']}", f"{cv[0]} = {base}{_view_source(pos[0])}"]
    if lp["move"] == "swap":
        out.append(f"{cv[1]} = {base}{_view_source(pos[1])}")
    loads = [op for op in lp["body"] if op[0] == "load"]
    if loads:
        out.append(f"{v}_a = {cv[loads[0][1]]}{after}.load({lay})")
    body = []
    for op in lp["body"]:
        if op[0] == "load":
            x = f"{cv[op[1]]}{after}.load({lay})"
            body.append(f"{v}_a = gl.maximum({v}_a, {x})" if lp["combine"] == "max" else f"{v}_a = {x}")
        elif op[0] == "store":
            body.append(f"{cv[op[1]]}{after}.store({a[op[2]]})")
        else:
            body.append(f"{cv[op[2]]}{after}.store({cv[op[1]]}{after}.load({lay}))")
    if lp["move"] == "swap":
        body.append(f"{cv[0]}, {cv[1]} = {cv[1]}, {cv[0]}")
    elif lp["move"] == "ring":
        pre, (first, second) = _view_source(pos[0][:-1]), (pos[0][-1][1], pos[1][-1][1])
        step = second - first
        slot = "(i + 1) % " + str(k) + (f" * {step}" if step != 1 else "") + (f" + {first}" if first else "")
        body.append(f"{cv[0]} = {base}{pre}.index({slot})")
    else:
        body.append(f"{v}_n = {base}{_view_source(pos[0])}")
        for j in range(1, k):
            body += [f"with gl.if_((i + 1) % {k} == {j}):", f"    {v}_n = {base}{_view_source(pos[j])}"]
        body.append(f"{cv[0]} = {v}_n")
    out += ["for i in gl.range(0, n_iter):"] + ["    " + ln for ln in body]
    if lp["out"] == "acc":
        out.append(f"{v} = {v}_a")
    elif lp["out"] == "final":
        out.append(f"{v} = {cv[0]}{after}.load({lay})")
    return out


def _atomic_source(n, buf: str, lay) -> list[str]:
    """One atomic over the tile (see fuzz/atomics.py for the attributes)."""
    at, v, a = n.attrs, n.name, n.args
    spec = at["index"]
    if spec[0] == "affine":
        idx = f"(o * {spec[1]} + {spec[2]}) % {n.numel}"
    else:
        idx = f"o {dict(xor='^', mod='%', div='//')[spec[0]]} {spec[1]}"
    out = [f"o = _offsets({list(n.shape)}, {lay(n.layout)})"]
    if at["kind"] == "cas":
        return out + [f"{v} = gl.atomic_cas({buf} + ({idx}), {a[2]}, {a[1]})"]
    mask = {"none": "", "n_valid": ", mask=o < n_valid", "node": f", mask={a[-1]}"}[at["mask"]]
    return out + [f"{v} = gl.atomic_{at['kind']}({buf} + ({idx}), {a[1]}{mask})"]

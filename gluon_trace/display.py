"""How kernels show themselves: HTML in Jupyter, plain text in a terminal.

Three things render themselves: a traced graph (``Graph._repr_html_`` -> :func:`ir_html`),
a compiled kernel (``CompiledKernel._repr_html_`` -> :func:`compiled_html`) and a layout
(``layouts.py`` draws its own pictures). The HTML is built from the same text ``str()``
prints, tokenized line by line, so the two views never disagree. Styles are inline
(``style=``) rather than a ``<style>`` block: notebook viewers that sanitize output keep
inline styles more often than style sheets. Colors are mid-tones readable on light and
dark themes.
"""
from __future__ import annotations

import html
import os
import re

__all__ = ["ir_html", "compiled_html", "compiled_text", "highlight_ptx", "highlight_amdgcn",
           "highlight_ir", "table_html", "table_text", "show"]

_C = {
    "op": "#1f6fd1", "value": "#a0522d", "layout": "#8a3ab9", "type": "#2e8b57",
    "key": "#7a7a7a", "loc": "#9a9a9a", "kw": "#c0392b", "num": "#b8860b", "reg": "#a0522d",
    "directive": "#8a3ab9", "label": "#c0392b", "comment": "#9a9a9a", "pred": "#c0392b",
}
_PRE = ("font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px;"
        "line-height:1.35;white-space:pre;overflow-x:auto;margin:0;padding:6px")


def _span(text: str, kind: str, bold: bool = False, title: str | None = None) -> str:
    style = f"color:{_C[kind]}" + (";font-weight:bold" if bold else "")
    t = f' title="{html.escape(title)}"' if title else ""
    return f'<span style="{style}"{t}>{html.escape(text)}</span>'


def _tokenize(text: str, pattern: re.Pattern, render) -> str:
    """Escape ``text`` and wrap each match of ``pattern`` with ``render(match)``."""
    out, pos = [], 0
    for m in pattern.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        out.append(render(m))
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


# ------------------------------------------------------------------------------ the IR
_IR_TOKENS = re.compile(
    r"(?P<value>%[A-Za-z0-9_]+)|(?P<layout>#L\d+)"
    r"|(?P<type>\btensor<[^<>]*>|\bptr<\w+>|\b(?:u?int(?:1|8|16|32|64)|b?float(?:16|32|64))\b)"
    r"|(?P<key>\b[A-Za-z_]\w*(?==))|(?P<num>(?<![\w.])-?(?:\d+\.?\d*(?:e[-+]?\d+)?|inf|nan)\b)")
_IR_OP = re.compile(r"^(?P<indent>\s*)(?:(?P<res>%\w+(?:, %\w+)*) = )?(?P<op>[a-z_][a-z_0-9]*)(?P<rest>.*)$")
_IR_LOC = re.compile(r"^(?P<code>.*?)(?P<loc>\s+# (?P<file>[^#]+):(?P<line>\d+))$")


def _ir_token(m: re.Match) -> str:
    kind = m.lastgroup
    if kind == "type" and m.group().startswith("tensor<"):
        inner = _tokenize(m.group(), re.compile(r"(?P<layout>#L\d+)"), _ir_token)
        return f'<span style="color:{_C["type"]}">{inner}</span>'
    return _span(m.group(), kind)


def highlight_ir(text: str, locs: dict | None = None) -> str:
    """HTML for IR text: op names bold, values, layouts and types colored, source
    locations as dim comments (hovering one shows the source line when ``locs`` maps
    ``file:line`` labels to it)."""
    lines = []
    for raw in text.rstrip("\n").split("\n"):
        loc_html = ""
        m = _IR_LOC.match(raw)
        if m:
            raw = m.group("code")
            label = f"{m.group('file')}:{m.group('line')}"
            loc_html = _span(m.group("loc"), "loc", title=(locs or {}).get(label))
        if raw.startswith("#L"):
            name, _, rest = raw.partition(" = ")
            lines.append(_span(name, "layout", bold=True) + " = " + html.escape(rest) + loc_html)
            continue
        if raw.startswith("kernel @"):
            head = _span("kernel", "kw", bold=True) + " "
            rest = raw[len("kernel "):]
            name, paren, tail = rest.partition("(")
            lines.append(head + _span(name, "op", bold=True) + paren
                         + _tokenize(tail, _IR_TOKENS, _ir_token) + loc_html)
            continue
        m = _IR_OP.match(raw)
        if m and not raw.lstrip().startswith(("^", "}")):
            res = m.group("res")
            lhs = (_tokenize(res, _IR_TOKENS, _ir_token) + " = ") if res else ""
            lines.append(m.group("indent") + lhs + _span(m.group("op"), "op", bold=True)
                         + _tokenize(m.group("rest"), _IR_TOKENS, _ir_token) + loc_html)
        else:
            lines.append(_tokenize(raw, _IR_TOKENS, _ir_token) + loc_html)
    return "\n".join(lines)


def _graph_locs(graph) -> dict:
    """``file:line`` label (as the printer writes it) -> the source text of that line."""
    out = {}
    for op in graph.body.walk():
        if op.loc is not None:
            label = f"{os.path.basename(op.loc.file)}:{op.loc.line}"
            if label not in out:
                src = op.loc.source_line()
                if src:
                    out[label] = src
    return out


def _layout_shapes(graph) -> dict:
    """Each layout of the graph -> the first tile shape it is used with."""
    shapes: dict = {}
    for op in graph.body.walk():
        for r in op.results:
            if r.type.layout is not None:
                shapes.setdefault(r.type.layout, r.type.shape)
    return shapes


def ir_html(graph, max_layout_cells: int = 1024) -> str:
    """A traced graph as HTML: the highlighted IR, then each layout's picture (folded)."""
    body = highlight_ir(graph.text, _graph_locs(graph))
    parts = [f'<div><pre style="{_PRE}">{body}</pre>']
    shapes = _layout_shapes(graph)
    pics = []
    for i, lay in enumerate(graph.layouts()):
        shape = shapes.get(lay)
        if shape is None:
            continue
        n = 1
        for s in shape:
            n *= s
        try:
            if n > max_layout_cells:
                raise ValueError(f"{n} elements: too many to draw (print layout.describe(shape))")
            lin = lay.to_linear(shape, graph.num_warps, graph.threads_per_warp)
            pic = lin._repr_html_()
        except Exception as e:  # a picture is a convenience: never let it hide the IR
            pic = f"<i>{html.escape(str(e))}</i>"
        pics.append(f"<div style='margin:4px 0'><b>#L{i}</b> on shape {list(shape)}</div>{pic}")
    if pics:
        parts.append(f"<details><summary>layouts ({len(pics)}): which thread and register holds each "
                     f"element</summary>{''.join(pics)}</details>")
    parts.append("</div>")
    return "\n".join(parts)


# ----------------------------------------------------------------------- assembly text
_PTX_HEAD = re.compile(r"^(?P<indent>\s*)(?:(?P<label>[$\w]+:)|(?P<pred>@!?%\w+\s+)?(?P<op>[a-z][\w.]*))")
_PTX = re.compile(
    r"(?P<comment>//.*$)|(?P<directive>(?<![\w%])\.[a-z_]\w*)|(?P<pred>@!?%p\d+)"
    r"|(?P<reg>%[a-z]+[\w.]*)|(?P<num>(?<![\w.%$])-?(?:0[xXfFdD][0-9a-fA-F]+|\d+)\b)")
_GCN_HEAD = re.compile(r"^(?P<indent>\s*)(?:(?P<label>[.$\w]+:)(?!\S)|(?P<op>[a-z][a-z0-9_]*)(?![\w:]))")
_GCN = re.compile(
    r"(?P<comment>(?:;|//).*$)|(?P<directive>(?<![\w])\.[a-z_]\w*)"
    r"|(?P<reg>\b[sva]\[\d+:\d+\]|\b[sva]\d+\b|\b(?:vcc|exec|m0|scc|vccz|execz)(?:_lo|_hi)?\b)"
    r"|(?P<num>(?<![\w.$])-?(?:0x[0-9a-fA-F]+|\d+)\b)")


def _asm_token(m: re.Match) -> str:
    return _span(m.group(), m.lastgroup)


def _highlight_asm(text: str, head: re.Pattern, pattern: re.Pattern) -> str:
    """Per line: the label or mnemonic at its start (after a PTX predicate), then
    registers, directives, numbers and comments in the rest."""
    out = []
    for line in text.rstrip("\n").split("\n"):
        m = head.match(line)
        if m and m.end() > len(m.group("indent")) and not line.lstrip().startswith(("//", ";")):
            pre = html.escape(m.group("indent"))
            if m.group("label"):
                pre += _span(m.group("label"), "label", bold=True)
            else:
                if m.groupdict().get("pred"):
                    pre += _span(m.group("pred"), "pred")
                pre += _span(m.group("op"), "op", bold=True)
            out.append(pre + _tokenize(line[m.end():], pattern, _asm_token))
        else:
            out.append(_tokenize(line, pattern, _asm_token))
    return "\n".join(out)


def highlight_ptx(text: str) -> str:
    """PTX as HTML: mnemonics bold, registers, directives, predicates, comments dim."""
    return _highlight_asm(text, _PTX_HEAD, _PTX)


def highlight_amdgcn(text: str) -> str:
    """AMDGCN assembly as HTML: mnemonics bold, s/v registers, directives, comments dim."""
    return _highlight_asm(text, _GCN_HEAD, _GCN)


# ------------------------------------------------------------------------------ tables
def table_html(headers, rows, highlight_row: int | None = None) -> str:
    th = "padding:2px 8px;border-bottom:1px solid #999;text-align:left"
    td = "padding:2px 8px;text-align:right;font-family:monospace"
    out = ['<table style="border-collapse:collapse">',
           "<tr>" + "".join(f'<th style="{th}">{html.escape(str(h))}</th>' for h in headers) + "</tr>"]
    for i, row in enumerate(rows):
        bg = ";background:rgba(46,139,87,0.18);font-weight:bold" if i == highlight_row else ""
        out.append(f'<tr style="{bg[1:]}">' + "".join(f'<td style="{td}">{html.escape(str(c))}</td>'
                                                    for c in row) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def table_text(headers, rows, mark_row: int | None = None) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    fmt = lambda r: "  ".join(c.rjust(w) for c, w in zip(r, widths))  # noqa: E731
    lines = ["  " + fmt(cells[0]), "  " + "  ".join("-" * w for w in widths)]
    for i, r in enumerate(cells[1:]):
        lines.append(("* " if i == mark_row else "  ") + fmt(r))
    return "\n".join(lines)


# ------------------------------------------------------------------------ compiled code
def _resources(ck) -> list[tuple[str, str]]:
    rows = [("target", ck.target),
            ("registers / thread", str(ck.registers)),
            ("shared memory", f"{ck.shared_bytes} B"),
            ("spills", f"{ck.spill_bytes} B"),
            ("threads", f"{ck.num_warps} warps x {ck.threads_per_warp} = {ck.num_warps * ck.threads_per_warp}"),
            ("code size", f"{len(ck.binary)} B")]
    rows += [(str(k), str(v)) for k, v in sorted(ck.extra.items())]
    return rows


def _is_amd(ck) -> bool:
    return ck.target.startswith("gfx")


def compiled_html(ck, fold_after: int = 300) -> str:
    """A compiled kernel: its resource table, then its assembly, highlighted (folded
    when longer than ``fold_after`` lines)."""
    spill = ck.spill_bytes > 0
    rows = "".join(
        f'<tr><th style="text-align:left;padding:1px 10px 1px 0">{html.escape(k)}</th>'
        f'<td style="font-family:monospace{";color:#c0392b;font-weight:bold" if k == "spills" and spill else ""}">'
        f"{html.escape(v)}</td></tr>" for k, v in _resources(ck))
    asm = highlight_amdgcn(ck.asm) if _is_amd(ck) else highlight_ptx(ck.asm)
    n = ck.asm.count("\n") + 1
    kind = "AMDGCN" if _is_amd(ck) else "PTX"
    open_ = "" if n > fold_after else " open"
    return (f"<div><div><b>{html.escape(ck.name)}</b> compiled for <b>{html.escape(ck.target)}</b></div>"
            f'<table style="border-collapse:collapse;margin:4px 0">{rows}</table>'
            f"<details{open_}><summary>{kind} ({n} lines)</summary>"
            f'<pre style="{_PRE}">{asm}</pre></details></div>')


def compiled_text(ck, asm_lines: int = 40) -> str:
    """The terminal view of :func:`compiled_html`: resources, then the assembly's head."""
    rows = _resources(ck)
    w = max(len(k) for k, _ in rows)
    out = [f"{ck.name} compiled for {ck.target}"] + [f"  {k.ljust(w)}  {v}" for k, v in rows]
    lines = ck.asm.rstrip("\n").split("\n")
    out.append(f"--- {'AMDGCN' if _is_amd(ck) else 'PTX'} ({len(lines)} lines) ---")
    out += lines[:asm_lines]
    if len(lines) > asm_lines:
        out.append(f"... {len(lines) - asm_lines} more lines (.asm has them all)")
    return "\n".join(out)


def show(obj) -> None:
    """Display ``obj`` richly in Jupyter, as text elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import display
        if get_ipython() is not None and hasattr(obj, "_repr_html_"):
            display(obj)
            return
    except ImportError:
        pass
    print(obj)

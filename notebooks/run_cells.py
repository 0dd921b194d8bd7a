"""Run each notebook's code cells as plain Python, in order, in one namespace per notebook.

For machines without Jupyter (the lent GPU):

    python notebooks/run_cells.py notebooks/05_matmul.ipynb            # print what each cell prints
    python notebooks/run_cells.py --store notebooks/05_matmul.ipynb    # and store it in the notebook

A cell's last expression is printed with repr(), as a terminal would show it. With
``--store`` each code cell's outputs are replaced by what it printed (stdout and stderr as
streams) and the matplotlib figures it showed (PNG), with execution counts, as Jupyter
would store them; a cell that raises stores the traceback and stops that notebook.
"""
import ast
import base64
import contextlib
import io
import json
import sys
import traceback


class _Tee(io.StringIO):
    """Collects a cell's output and still shows it on the terminal."""

    def __init__(self, echo):
        super().__init__()
        self.echo = echo

    def write(self, s):
        self.echo.write(s)
        return super().write(s)


def _figures() -> list:
    """PNGs of the open matplotlib figures (then closed), if matplotlib is loaded."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    out = []
    for num in plt.get_fignums():
        buf = io.BytesIO()
        plt.figure(num).savefig(buf, format="png", dpi=80, bbox_inches="tight")
        out.append(base64.b64encode(buf.getvalue()).decode())
    plt.close("all")
    return out


def _stream(name: str, text: str) -> dict:
    return {"output_type": "stream", "name": name, "text": text.splitlines(keepends=True)}


def run(path: str, store: bool = False) -> bool:
    nb = json.load(open(path))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    if store:
        try:
            import matplotlib
            matplotlib.use("Agg")  # figures are saved into the notebook, not shown
        except ImportError:
            pass  # a cell that plots says so itself
    ns = {"__name__": "__main__", "display": lambda *objs: [print(o) for o in objs]}
    ok = True
    for i, cell in enumerate(code):
        src = "".join(cell["source"])
        name = f"{path}[cell {i}]"
        out, err = _Tee(sys.stdout), _Tee(sys.stderr)
        failure = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                tree = ast.parse(src, filename=name)
                last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
                exec(compile(tree, name, "exec"), ns)
                if last is not None:
                    value = eval(compile(ast.Expression(last.value), name, "eval"), ns)
                    if value is not None:
                        print(repr(value)[:2000])
            except Exception as e:  # stored like Jupyter's error output, then this notebook stops
                failure = e
                traceback.print_exc()
        if store:
            outputs = []
            if out.getvalue():
                outputs.append(_stream("stdout", out.getvalue()))
            if err.getvalue() and failure is None:
                outputs.append(_stream("stderr", err.getvalue()))
            for png in _figures():
                outputs.append({"output_type": "display_data", "metadata": {},
                                "data": {"image/png": png, "text/plain": ["<Figure>"]}})
            if failure is not None:
                outputs.append({"output_type": "error", "ename": type(failure).__name__,
                                "evalue": str(failure),
                                "traceback": traceback.format_exception(failure)})
            cell["outputs"], cell["execution_count"] = outputs, i + 1
        if failure is not None:
            ok = False
            break
    if store:
        with open(path, "w") as f:
            json.dump(nb, f, indent=1, ensure_ascii=False)
            f.write("\n")
    return ok


if __name__ == "__main__":
    args = sys.argv[1:]
    store = "--store" in args
    failed = []
    for p in [a for a in args if a != "--store"]:
        print(f"=== {p}")
        if run(p, store):
            print(f"=== {p}: all cells ran" + (" (outputs stored)" if store else ""))
        else:
            print(f"=== {p}: a cell failed" + (" (its traceback is stored)" if store else ""))
            failed.append(p)
    sys.exit(1 if failed else 0)

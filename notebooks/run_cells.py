"""Run each notebook's code cells as plain Python, in order, in one namespace per notebook.

For machines without Jupyter (the lent GPU): `python notebooks/run_cells.py notebooks/*.ipynb`.
A cell's last expression is printed with repr(), as a terminal would show it.
"""
import ast
import json
import sys


def run(path: str) -> None:
    cells = [c for c in json.load(open(path))["cells"] if c["cell_type"] == "code"]
    ns = {"__name__": "__main__", "display": lambda *objs: [print(o) for o in objs]}
    for i, cell in enumerate(cells):
        src = "".join(cell["source"])
        tree = ast.parse(src, filename=f"{path}[cell {i}]")
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, f"{path}[cell {i}]", "exec"), ns)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), f"{path}[cell {i}]", "eval"), ns)
            if value is not None:
                print(repr(value)[:2000])


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(f"=== {p}")
        run(p)
        print(f"=== {p}: all cells ran")

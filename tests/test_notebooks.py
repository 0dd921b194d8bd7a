"""Every notebook under notebooks/ executes top to bottom on this machine (the interpreter;
GPU cells say why they skip), and is stored with its outputs."""
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="notebook tests need nbformat (the [dev] extra)")
nbclient = pytest.importorskip("nbclient", reason="notebook tests need nbclient (the [dev] extra)")
pytest.importorskip("ipykernel", reason="notebook tests need ipykernel (the [dev] extra)")

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 120
_executed: dict = {}  # stem -> executed notebook, shared with the checks below


def _execute(path: Path, cwd: Path):
    nb = nbformat.read(path, as_version=4)
    # run in a scratch folder: hypothesis and matplotlib leave files where they run
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd)}})
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    _executed[path.stem] = nb
    return nb


def _stdout(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_the_stories_are_there():
    assert [p.name for p in NOTEBOOKS] == ["01_first_kernel.ipynb", "02_layouts.ipynb",
                                           "03_variants.ipynb", "04_property_testing.ipynb",
                                           "05_matmul.ipynb", "06_attention.ipynb",
                                           "07_synchronisation.ipynb"]


@pytest.mark.parametrize("stem, words", [
    ("05_matmul", ("dot_fma: C[96x80] matches numpy", "mma_v2 + cp.async: C[96x80] matches numpy",
                   "TMA + wgmma, 2 persistent programs: C[96x80] matches numpy",
                   "warp-specialized: C[96x80] matches numpy", "ops new in this step")),
    ("06_attention", ("attention_fwd, causal=False: matches numpy", "attention_fwd, causal=True: matches numpy",
                      "attention_fwd_pipelined, causal=True: matches numpy", "needs STAGES >= 3",
                      "attention_fwd_ws, KV_PIECES=5, S=160, K box [1, 1, 5, 16, 64], causal=True: matches numpy",
                      "'m64n80k16': 16")),
])
def test_gemm_and_attention_notebooks_check_each_step_and_say_where_gpu_cells_ran(stem, words, tmp_path):
    path = next(p for p in NOTEBOOKS if p.stem == stem)
    stored = _stdout(nbformat.read(path, as_version=4))
    for text in (stored, _stdout(_executed.get(stem) or _execute(path, tmp_path))):
        for w in words:
            assert w in text, w
        # a GPU cell either ran (and names the device and the date) or says why it skipped
        assert "skipped: no NVIDIA GPU here:" in text or (" UTC]" in text and "TFLOP/s" in text)


def test_run_cells_stores_outputs_figures_and_errors_as_jupyter_would(tmp_path):
    import importlib.util
    import json
    spec = importlib.util.spec_from_file_location("run_cells", NOTEBOOKS[0].parent / "run_cells.py")
    run_cells = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_cells)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 6 * 7\nprint('x is', x)"),
                nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\nx + 1"),
                nbformat.v4.new_code_cell("1 / 0"), nbformat.v4.new_code_cell("print('never')")]
    path = tmp_path / "t.ipynb"
    nbformat.write(nb, path)
    assert run_cells.run(str(path), store=True) is False
    cells = json.loads(path.read_text())["cells"]
    assert "".join(cells[0]["outputs"][0]["text"]) == "x is 42\n" and cells[0]["execution_count"] == 1
    assert "".join(cells[1]["outputs"][0]["text"]) == "43\n" and "image/png" in cells[1]["outputs"][1]["data"]
    assert cells[2]["outputs"][-1]["output_type"] == "error" and cells[2]["outputs"][-1]["ename"] == "ZeroDivisionError"
    assert cells[3]["outputs"] == []
    nbformat.validate(nbformat.read(path, as_version=4))


def test_synchronisation_notebook_shows_each_bug_then_its_fix(tmp_path):
    nb = _executed.get("07_synchronisation") or _execute(NOTEBOOKS[-1], tmp_path)
    out = _stdout(nb)
    for words in ("race: smem.store()", "before waiting for it", "deadlock", "reused too early",
                  "stages=1", "k_tiles=2", "30 configurations, no race",
                  # section 6: the MMA strategies of gluon_trace.testing find and shrink the early refill
                  "early_refill_is_caught(\n    stages=2,\n    k_tiles=3,", "swizzle_byte_width=0",
                  "25 drawn pipelines"):
        assert words in out, words


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_with_outputs_and_no_errors(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.get("execution_count") for c in code), "store it executed"
    assert sum(bool(c.outputs) for c in code) >= len(code) // 2
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, tmp_path, monkeypatch):
    # a fresh cache: the autotuning notebook must tune, not find an old choice on disk
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path))
    nb = _execute(path, tmp_path)
    assert "Traceback" not in _stdout(nb)


@pytest.mark.parametrize("target,marker", [("sm_90", ".target sm_90"), ("gfx942", "amdgcn-amd-amdhsa--gfx942")])
def test_first_kernel_shows_real_assembly_once_the_backend_loads(target, marker, tmp_path, monkeypatch):
    from gluon_trace.testing import compile_status
    ok, why = compile_status(target)
    if not ok:
        pytest.skip(f"no {target} backend yet: {why}")
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path))
    path = next(p for p in NOTEBOOKS if p.stem == "01_first_kernel")
    text = _stdout(_executed.get(path.stem) or _execute(path, tmp_path))
    if marker not in text:
        # the backend loads but could not emit this kernel: the notebook says why, and so do we
        said = [line for line in text.splitlines() if line.startswith(("PTX for", "AMDGCN for"))]
        pytest.skip(f"the {target} backend loads but the notebook shows no assembly: {said}")
    assert f"{target}: cannot assemble here" not in text

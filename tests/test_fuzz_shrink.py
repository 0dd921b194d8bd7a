"""perf/fuzz_campaign.py's shrinker: ``prune`` keeps the nodes the kept outputs need, those a
loop's or a branch's steps name too (``(fn, "node", name)``: a reference held in attrs, not in
``args``). Before, such a node was dropped when no kept output needed it through args, and the
pruned program's kernel read an undefined name (NameError), so ``shrink`` never got past it.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "perf"))
import fuzz_campaign  # noqa: E402

from gluon_trace import fuzz  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.fuzz.program import Node, Program  # noqa: E402

LAY = gl.BlockedLayout([1], [32], [1], [0])


def _load(name, i):
    return Node(name, "load", (), {"input": i, "masked": False, "other": None}, "float32", (32,), LAY)


def _program(op, **attrs):
    """v0, v1, v2 loaded; v3 = ``op`` on v0 whose steps name v1 (and v2); v4 = v0 * 3. Outputs
    v1, v2 (the generator makes a node only a step names an output), v3, v4."""
    nodes = [_load("v0", 0), _load("v1", 1), _load("v2", 2),
             Node("v3", op, ("v0",), attrs, "float32", (32,), LAY),
             Node("v4", "binary", ("v0",), {"fn": "mul", "literal": 3.0}, "float32", (32,), LAY)]
    return Program(nodes, ["v1", "v2", "v3", "v4"], num_warps=1, warp_size=32, n_iter=2, flag=1, seed=5)


CASES = {
    "loop": (_program("loop", steps=[("add", "node", "v1"), ("mul", "lit", 0.5), ("sub", "node", "v2")]),
             {"v0", "v1", "v2", "v3"}),
    "branch, both arms": (_program("branch", then=("add", "node", "v1"), other=("sub", "node", "v2")),
                          {"v0", "v1", "v2", "v3"}),
    "branch, no else": (_program("branch", then=("add", "node", "v2"), other=None), {"v0", "v2", "v3"}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_prune_keeps_the_nodes_steps_name(name):
    prog, need = CASES[name]
    assert fuzz.check_program(prog).ok   # the whole program runs, so a failure below is prune's
    pruned = fuzz_campaign.prune(prog, ["v3"])
    assert {n.name for n in pruned.nodes} == need and pruned.outputs == ["v3"]
    out = fuzz.check_program(pruned)
    assert out.ok, out.failures   # it renders (no undefined name) and agrees with the reference


def test_prune_still_drops_what_no_kept_output_needs():
    prog, _ = CASES["loop"]
    pruned = fuzz_campaign.prune(prog, ["v4"])
    assert [n.name for n in pruned.nodes] == ["v0", "v4"]
    assert fuzz.check_program(pruned).ok


def test_shrink_drops_outputs_past_a_loop(tmp_path, monkeypatch, capsys):
    """The whole shrink on a saved reproducer, with a stand-in target that fails while the
    loop's output is kept: it ends with that output alone. Before, dropping v1 or v2 left a
    program that did not run (NameError), so both outputs stayed."""
    prog, _ = CASES["loop"]
    path = fuzz.save_reproducer(prog, [("sm_90", "stand-in")], directory=str(tmp_path), name="repro")

    def failure(p, target):
        out = fuzz.check_program(p)   # a program that does not run is no reproducer of this failure
        return f"broken: {out.failures}" if not out.ok else "still failing" if "v3" in p.outputs else ""

    def fails(p, target):
        return failure(p, target) == "still failing"

    monkeypatch.setattr(fuzz_campaign, "failure", failure)
    monkeypatch.setattr(fuzz_campaign, "fails", fails)
    fuzz_campaign.shrink(path, "sm_90")
    scope: dict = {}
    small = os.path.join(str(tmp_path), "repro_min.py")
    exec(compile(open(small).read(), small, "exec"), scope)
    shrunk = fuzz.program_from_dict(scope["PROGRAM"])
    assert shrunk.outputs == ["v3"]
    assert {n.name for n in shrunk.nodes} == {"v0", "v1", "v2", "v3"}
    assert fuzz.check_program(shrunk).ok

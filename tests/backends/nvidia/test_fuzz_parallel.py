"""The parallel fuzz driver (gluon_trace.fuzz.parallel) that runs the GPU fuzzer, proven on the
CPU: worker processes compile (ptxas), the main process runs each program's PTX from the disk
cache they filled on the PTX simulator and compares with the reference; a compile past its
budget is killed and reported; a failing program is saved and shrunk."""
import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

from gluon_trace import fuzz  # noqa: E402
from gluon_trace.fuzz import parallel  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")

# the simulator steps every thread in Python: small tiles, few ops
CONFIG = fuzz.FuzzConfig(max_numel=128, max_ops=4, loops=False)
TARGET = "sm_90"


def _ptxas_missing():
    try:
        from gluon_trace.backends.nvidia.ptxas import find_path
        find_path()
    except Exception as e:  # noqa: BLE001
        return str(e)
    return None


def on_ptxsim(prog, inputs, kernel, compiled):
    args, poison = fuzz.kernel_args(prog, inputs)
    with np.errstate(all="ignore"):
        ptxsim.run(compiled.asm, (1, 1, 1), args, compiled.extra["scratch_bytes"])
    return fuzz.outputs_of(prog, args), poison


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    why = _ptxas_missing()
    if why:
        pytest.skip(why)
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path / "cache"))  # the spawned workers inherit it
    return tmp_path


def test_programs_compiled_by_workers_run_in_the_main_process(fresh_cache):
    lines = []
    rep = parallel.check_many(range(5), on_ptxsim, target=TARGET, cfg=CONFIG, workers=2, budget_s=120,
                              progress_every=2, directory=str(fresh_cache / "fail"), log=lines.append)
    assert rep.checked == 5 and not rep.over_budget and not rep.not_run
    assert sorted(rep.passed) == list(range(5)), rep.messages
    # every program's binary came from the workers through the disk cache: none compiled twice
    assert rep.recompiled == 0
    assert sum("programs:" in ln for ln in lines) >= 2, lines  # progress lines as it goes
    assert "5/5 programs: 5 passed, 0 disagreed, 0 refused, 0 over the compile budget" in lines[-1]


def test_a_compile_past_its_budget_is_killed_and_reported(fresh_cache, monkeypatch):
    # an assembler that never returns (as ptxas did for minutes on some programs): the
    # worker is killed with it, the seeds are reported, the run goes on with a new worker
    pids = fresh_cache / "pids"
    fake = fresh_cache / "ptxas"
    fake.write_text("#!/bin/sh\n"
                    'if [ "$1" = --version ]; then echo "Cuda compilation tools, release 12.9, V12.9.86"; exit 0; fi\n'
                    f"echo $$ >> {pids}\nexec sleep 600\n")
    fake.chmod(0o755)
    monkeypatch.setenv("GLUON_TRACE_PTXAS", str(fake))
    lines = []
    t0 = time.monotonic()
    rep = parallel.check_many([7, 8], on_ptxsim, target=TARGET, cfg=CONFIG, workers=1, budget_s=2,
                              directory=str(fresh_cache / "fail"), log=lines.append)
    assert time.monotonic() - t0 < 30
    assert sorted(rep.over_budget) == [7, 8] and rep.checked == 0
    assert any("over the compile budget" in ln and "[7, 8]" in ln for ln in lines), lines
    assert "0 passed, 0 disagreed, 0 refused, 2 over the compile budget" in lines[-1]
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 2
    for pid in started:  # each hung assembler went with its worker
        for _ in range(50):
            if not os.path.exists(f"/proc/{pid}") or "Z" in _state(pid):
                break
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{pid}") or "Z" in _state(pid), f"ptxas {pid} still runs"


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


def test_a_disagreement_is_saved_and_shrunk(fresh_cache):
    def off_by_one(prog, inputs, kernel, compiled):  # a backend bug: the first output's first value
        got, poison = on_ptxsim(prog, inputs, kernel, compiled)
        g = got[0].reshape(-1)
        g[0] = 1 if g.dtype == bool and not g[0] else 0 if g.dtype == bool else g[0] + 1
        return got, poison

    lines = []
    rep = parallel.check_many([3], off_by_one, target=TARGET, cfg=CONFIG, workers=2, shrink_s=60,
                              directory=str(fresh_cache / "fail"), log=lines.append)
    assert rep.disagreed == [3], rep.line()
    assert "differ" in rep.messages[3][0][1]
    path = rep.reproducers[3]
    assert path.endswith("seed_3_shrunk.py"), lines
    assert os.path.exists(str(fresh_cache / "fail" / "seed_3.py"))
    original, _ = parallel.recorded_program(3, CONFIG)
    shrunk = open(path).read()
    scope: dict = {}
    exec(compile(shrunk.split('\nif __name__ == "__main__":')[0], path, "exec"), scope)
    small = fuzz.program_from_dict(scope["PROGRAM"])
    size = (lambda p: (len(p.nodes), max(n.numel for n in p.nodes)))
    assert size(small) < size(original) or len(small.outputs) < len(original.outputs)
    # the shrunk program still shows the bug, and passes without it
    k = fuzz.kernel_of(small)
    compiled = parallel.trace_as_launched(small, TARGET, k).compile(TARGET)
    inputs = fuzz.make_inputs(small)
    ref = fuzz.evaluate(small, inputs, "bounded")
    assert fuzz.mismatches(small, *_swap(off_by_one(small, inputs, k, compiled), ref))
    assert not fuzz.mismatches(small, *_swap(on_ptxsim(small, inputs, k, compiled), ref))


def _swap(got_poison, ref):
    got, poison = got_poison
    return got, ref, poison


def test_a_launch_with_arrays_traces_the_graph_the_workers_compiled():
    # the GPU run relies on it: the launch finds the workers' binary under the same IR text
    for seed in range(40):
        prog = fuzz.random_program(seed)
        k = fuzz.kernel_of(prog, fname=parallel.source_name(seed))
        compiled_graph = parallel.trace_as_launched(prog, "sm_90a", k).graph.text
        args, _ = fuzz.kernel_args(prog, fuzz.make_inputs(prog))
        assert k.trace(*args, num_warps=prog.num_warps, target="sm_90a").graph.text == compiled_graph
    # and a kernel defined again from the same program (in another process) gives it too
    again = fuzz.kernel_of(prog, fname=parallel.source_name(seed))
    assert parallel.trace_as_launched(prog, "sm_90a", again).graph.text == compiled_graph

"""The fuzzer's atomics family (gluon_trace/fuzz/atomics.py, FuzzConfig.atomics): its programs in
the interpreter against the numpy reference, what it generates (kinds, layouts holding copies,
repeated addresses, masks), the reference's orders and bounds, and that leaving it off keeps
every seed's program. The simulators run its programs in tests/backends/*/test*_fuzz_sim.py."""
import os
import subprocess
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings

from gluon_trace import fuzz
from gluon_trace.fuzz.atomics_ref import index_of
from gluon_trace.fuzz.presets import PRESETS, preset_config
from gluon_trace.layouts import copy_bits

ATOMICS = preset_config("atomics")
N_ATOMICS = int(os.environ.get("GLUON_TRACE_FUZZ_ATOMICS_EXAMPLES", "40"))


@settings(max_examples=N_ATOMICS, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fuzz.programs(ATOMICS))
def test_atomics_programs_match_reference(prog):
    """Atomics into buffers with random contents, old values and final contents compared (the
    interpreter's order, exactly)."""
    outcome = fuzz.check_program(prog)
    if not outcome.ok:
        path = fuzz.save_reproducer(prog, outcome.failures, name="atomics_vs_reference")
        raise AssertionError(f"reproducer: {path}\n" + "\n".join(f"  {w}: {m}" for w, m in outcome.failures))


def _copies(node, prog) -> set:
    """Which kinds of copies the node's layout holds: '<reg|lane|warp> zero' for a zero basis,
    '<...> repeat' for a non-zero one reaching nothing new."""
    lin = node.layout.to_linear(node.shape, prog.num_warps, prog.warp_size)
    out = set()
    for name, mask in copy_bits(lin).items():
        bases = {"reg": lin.reg_bases, "lane": lin.lane_bases, "warp": lin.warp_bases}[name]
        for i, b in enumerate(bases):
            if mask >> i & 1:
                out.add(f"{name} {'zero' if not any(b) else 'repeat'}")
    return out


def test_atomics_generator_covers_kinds_copies_addresses_and_masks():
    seen = set()
    for seed in range(200):
        prog = fuzz.random_program(seed, ATOMICS)
        for n in prog.nodes:
            if n.op != "atomic":
                continue
            at = n.attrs
            float_ = n.dtype.startswith("float") or n.dtype == "bfloat16"
            seen.add(f"{at['kind']} {'float' if float_ else 'int'}")
            seen.add("index " + at["index"][0])
            seen.add("mask " + at["mask"])
            seen |= _copies(n, prog)
            idx = index_of(at["index"], n.numel)
            if len(set(idx.tolist())) < idx.size:
                seen.add(f"repeated addresses {'float' if float_ else 'int'}")
            assert n.args[0] in prog.outputs  # the buffer is always compared
            assert idx.max() < prog.node(n.args[0]).numel
    kinds = {f"{k} {t}" for k in ("add", "max", "min", "xchg", "cas") for t in ("int", "float")}
    kinds |= {f"{k} int" for k in ("and", "or", "xor")}
    copies = {f"{w} {c}" for w in ("reg", "lane", "warp") for c in ("zero", "repeat")}
    want = kinds | copies | {"index affine", "index xor", "index mod", "index div", "mask none",
                             "mask n_valid", "mask node", "repeated addresses int",
                             "repeated addresses float"}
    assert seen >= want, want - seen


def test_atomics_flag_off_keeps_every_preset_program():
    """Enabling an op family changes which program a seed gives; leaving it off must not."""
    for name in ("default", "shared", "small"):
        for seed in range(15):
            cfg = preset_config(name)
            prog = fuzz.random_program(seed, cfg)
            assert not any(n.op.startswith("atomic") for n in prog.nodes)
    assert "atomics" in PRESETS and not fuzz.FuzzConfig().atomics


def _program(kind, dtype, index, values, mask="none", n_valid=0, size=None, cmp=None):
    """One atomic of ``values`` (a 1-D tile) into buffer v0; ``cmp`` for cas."""
    n = len(values)
    size = size or int(index_of(index, n).max()) + 1
    nodes = [fuzz.Node("v0", "atomic_buf", (), {"pool": False}, dtype, (size,), None),
             fuzz.Node("v1", "load", (), {"input": 0, "masked": False, "other": None}, dtype, (n,), None)]
    args = ("v0", "v1")
    if cmp is not None:
        nodes.append(fuzz.Node("v2", "load", (), {"input": 1, "masked": False, "other": None}, dtype, (n,), None))
        args += ("v2",)
    nodes.append(fuzz.Node("v9", "atomic", args, {"kind": kind, "index": index, "mask": mask}, dtype, (n,), None))
    return fuzz.Program(nodes, ["v9", "v0"], 1, 32, n_valid=n_valid)


def test_reference_orders_and_bounds():
    init = np.array([5, 7, 9], np.int32)
    prog = _program("add", "int32", ("mod", 3), [1, 2, 3, 4, 5])
    inputs = {0: np.array([1, 2, 3, 4, 5], np.int32), "v0": init}
    exact = fuzz.evaluate(prog, inputs, "exact")
    np.testing.assert_array_equal(exact["v9"].v, [5, 7, 9, 6, 9])   # row-major order, as the interpreter
    np.testing.assert_array_equal(exact["v0"].v, [10, 14, 12])
    assert not exact["v9"].e.any()
    bounded = fuzz.evaluate(prog, inputs, "bounded")                  # any order on a GPU
    assert np.isinf(bounded["v9"].e).tolist() == [True, True, False, True, True]
    assert not bounded["v0"].e.any()                                 # the sum is order-free
    # float add: the rounding depends on the order, so repeated addresses get a bound
    fprog = _program("add", "float32", ("div", 2), [1e8, 1.0, 3.0, -1e8])
    f = fuzz.evaluate(fprog, {0: np.array([1e8, 1.0, 3.0, -1e8], np.float32),
                              "v0": np.array([0.5, 0.25], np.float32)}, "bounded")
    assert (f["v0"].e > 0).all() and np.isinf(f["v9"].e).all()
    # masked off: the old value is 0 and memory is kept; elements no index reaches are kept
    mprog = _program("xchg", "int32", ("xor", 1), [1, 2, 3, 4], mask="n_valid", n_valid=2, size=6)
    m = fuzz.evaluate(mprog, {0: np.array([1, 2, 3, 4], np.int32), "v0": np.arange(10, 16, dtype=np.int32)})
    np.testing.assert_array_equal(m["v9"].v, [11, 10, 0, 0])
    np.testing.assert_array_equal(m["v0"].v, [2, 1, 12, 13, 14, 15])


def test_reference_allows_a_gpu_flushing_float32_atomic_add_subnormals():
    """atom.add.f32 flushes subnormal inputs and results to zero (the H200 gave 0 for 0 + 1e-45,
    GPU fuzz seed 324310951): a GPU's float32 add may land within 2^-125 an add of the exact
    sum; the interpreter's order stays exact, and anything further off still fails."""
    prog = _program("add", "float32", ("affine", 1, 0), [1e-45, 1.0])
    inputs = {0: np.array([1e-45, 1.0], np.float32), "v0": np.array([0.0, 2.0], np.float32)}
    exact = fuzz.evaluate(prog, inputs, "exact")
    assert exact["v0"].v[0] == np.float32(1e-45) and not exact["v0"].e.any()
    b = fuzz.evaluate(prog, inputs, "bounded")
    within = lambda got: np.abs(got - b["v0"].v.astype(np.float64)) <= b["v0"].e  # noqa: E731
    assert within(np.array([0.0, 3.0])).all()                    # flushed: accepted
    assert not within(np.array([1e-30, 3.0])).all()              # a wrong sum: still refused
    assert not within(np.array([0.0, 3.0000002])).all()          # one ulp off a normal sum too


def test_reference_cas_compares_bits():
    prog = _program("cas", "float32", ("affine", 1, 0), [10.0, 11.0, 12.0], cmp=True)
    inputs = {0: np.array([10, 11, 12], np.float32), 1: np.array([-0.0, 0.0, 2.0], np.float32),
              "v0": np.array([0.0, 0.0, 2.0], np.float32)}
    out = fuzz.evaluate(prog, inputs)
    np.testing.assert_array_equal(out["v0"].v, [0.0, 11.0, 12.0])


def test_buffer_contents_are_compared_and_reproducers_run(tmp_path):
    prog = next(p for p in (fuzz.random_program(s, ATOMICS) for s in range(50))
                if any(n.op == "atomic" and n.attrs["kind"] == "add" for n in p.nodes))
    inputs = fuzz.make_inputs(prog)
    buf = next(n.args[0] for n in prog.nodes if n.op == "atomic" and n.attrs["kind"] == "add")
    assert np.any(np.asarray(inputs[buf]) != 0)  # starts random, not zeroed or poisoned
    got, start = fuzz.run_interpreter(prog, inputs)
    ref = fuzz.evaluate(prog, inputs)
    assert fuzz.mismatches(prog, got, ref, start) == []
    i = prog.outputs.index(buf)
    got[i] = np.array(got[i], copy=True)
    got[i].reshape(-1)[-1] = start[i].reshape(-1)[-1] + 1  # even the last, maybe untouched, element
    (msg,) = fuzz.mismatches(prog, got, ref, start)
    assert msg.startswith(f"out{i} = {buf}")
    path = fuzz.save_reproducer(prog, [("sm_90", "example")], directory=str(tmp_path))
    run = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().splitlines()[-1] == "ok", run.stdout + run.stderr

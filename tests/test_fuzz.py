"""The differential fuzzer (gluon_trace.fuzz): random programs in the interpreter against the
numpy reference, and assembled for every NVIDIA and AMD target; plus the fuzzer's own parts
(reference semantics, bounds, reproducers, coverage of what it generates).

Counts scale with GLUON_TRACE_FUZZ_EXAMPLES (interpreter) and GLUON_TRACE_FUZZ_COMPILE_EXAMPLES
(per target). A failure saves a standalone reproducer under .fuzz_failures/ (or
GLUON_TRACE_FUZZ_DIR) and names it in the assertion."""
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from gluon_trace import fuzz
from gluon_trace.fuzz import reference as R
from gluon_trace.fuzz.evaluate import Val

N_INTERP = int(os.environ.get("GLUON_TRACE_FUZZ_EXAMPLES", "300"))
N_COMPILE = int(os.environ.get("GLUON_TRACE_FUZZ_COMPILE_EXAMPLES", "12"))
NVIDIA = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
AMD = ("gfx90a", "gfx942", "gfx1100")
_SETTINGS = dict(deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                        HealthCheck.filter_too_much])


def _fail(test: str, outcome) -> None:
    path = fuzz.save_reproducer(outcome.program, outcome.failures, name=test)
    lines = "\n".join(f"  {where}: {msg}" for where, msg in outcome.failures)
    raise AssertionError(f"{len(outcome.failures)} failure(s); reproducer: {path}\n{lines}")


# ------------------------------------------------------------------------------ the fuzzer run
@settings(max_examples=N_INTERP, **_SETTINGS)
@given(fuzz.programs())
def test_interpreter_matches_reference(prog):
    outcome = fuzz.check_program(prog)
    if not outcome.ok:
        _fail("interpreter_vs_reference", outcome)


def _toolchain_missing(target: str) -> str | None:
    try:
        if target.startswith("sm_"):
            from gluon_trace.backends.nvidia.ptxas import find_path
            find_path()
        else:
            from gluon_trace.backends.amd.assembler import find_toolchain
            find_toolchain()
    except Exception as e:  # noqa: BLE001 - any reason the assembler is absent skips
        return f"no assembler for {target}: {e}"
    return None


@pytest.mark.parametrize("target", NVIDIA + AMD)
@settings(max_examples=N_COMPILE, **_SETTINGS)
@given(data=__import__("hypothesis").strategies.data())
def test_programs_assemble(target, data):
    why = _toolchain_missing(target)
    if why:
        pytest.skip(why)
    warp = 64 if target in ("gfx90a", "gfx942") else 32
    # at most 128 values per thread and tile keeps each compile well under a second here;
    # perf/bench_compile_fuzz.py measures the unbounded programs (minutes beyond ~1024)
    prog = data.draw(fuzz.programs(fuzz.FuzzConfig(warp_size=warp, max_values_per_thread=128)))
    outcome = fuzz.check_program(prog, targets=[target], interpreter=False)
    if not outcome.ok:
        _fail(f"assemble_{target}", outcome)


# ------------------------------------------------------------------------------ the fuzzer itself
def test_generator_covers_every_op_layout_and_dtype():
    ops, layouts, dtypes, xor_bases, zero_bases = set(), set(), set(), 0, 0
    for seed in range(300):
        prog = fuzz.random_program(seed)
        for n in prog.nodes:
            ops.add(n.op)
            dtypes.add(n.dtype)
            lay = n.layout
            while lay is not None:
                layouts.add(type(lay).__name__)
                if type(lay).__name__ == "DistributedLinearLayout":
                    bases = lay.reg_bases + lay.lane_bases + lay.warp_bases
                    xor_bases += any(sum(bin(c).count("1") for c in b) > 1 for b in bases)
                    zero_bases += any(not any(b) for b in lay.lane_bases + lay.warp_bases)
                lay = getattr(lay, "parent", None)
    assert ops >= {"load", "binary", "unary", "cast", "nonzero", "where", "fma", "reduce", "scan",
                   "convert", "expand", "reshape", "permute", "loop", "branch"}
    assert layouts == {"BlockedLayout", "SliceLayout", "DistributedLinearLayout"}
    assert dtypes >= set(fuzz.program.ALL_DTYPES)
    assert xor_bases > 10 and zero_bases > 10


def _load_values(cfg, seeds):
    """(values one thread holds, the fewest any layout could give) for every loaded tile."""
    out = []
    for seed in seeds:
        prog = fuzz.random_program(seed, cfg)
        for n in prog.nodes:
            if n.op == "load":
                least = max(1, n.numel // (prog.num_warps * prog.warp_size))
                out.append((1 << len(n.layout.to_linear(n.shape).reg_bases), least))
    return out


def test_values_per_thread_bound_is_kept():
    bounded = _load_values(fuzz.FuzzConfig(max_values_per_thread=16, max_numel=4096), range(80))
    free = _load_values(fuzz.FuzzConfig(max_numel=4096), range(80))
    kept = sum(v <= max(16, least) for v, least in bounded) / len(bounded)
    assert kept > 0.9, kept  # best of four draws: a tile may still go over, rarely
    assert max(v for v, _ in free) > max(v for v, _ in bounded)


def test_same_seed_same_program_and_dict_round_trip():
    a, b = fuzz.random_program(7), fuzz.random_program(7)
    assert fuzz.kernel_source(a) == fuzz.kernel_source(b)
    back = fuzz.program_from_dict(fuzz.program_to_dict(a))
    assert fuzz.kernel_source(back) == fuzz.kernel_source(a)
    assert fuzz.kernel_source(fuzz.random_program(8)) != fuzz.kernel_source(a)


def test_wrong_outputs_are_reported_and_unknown_elements_skipped():
    prog = next(p for p in map(fuzz.random_program, range(100))
                if any(p.node(o).dtype == "int32" and p.node(o).shape for o in p.outputs))
    inputs = fuzz.make_inputs(prog)
    got, poison = fuzz.run_interpreter(prog, inputs)
    ref = fuzz.evaluate(prog, inputs)
    assert fuzz.mismatches(prog, got, ref, poison) == []
    i = next(i for i, o in enumerate(prog.outputs) if prog.node(o).dtype == "int32" and prog.node(o).shape)
    name = prog.outputs[i]
    bad = [np.array(g, copy=True) for g in got]
    bad[i].reshape(-1)[0] += 1
    (msg,) = fuzz.mismatches(prog, bad, ref, poison)
    assert msg.startswith(f"out{i} = {name}") and "[0] got" in msg
    e = np.array(ref[name].e, copy=True)
    e.reshape(-1)[0] = np.inf  # an element the bounds could not decide is not compared
    ref[name] = Val(ref[name].v, e)
    assert fuzz.mismatches(prog, bad, ref, poison) == []


def test_a_difference_past_float64s_range_is_a_mismatch_without_a_warning():
    """got -1.5e308 where 1.5e308 is expected: the difference overflows to inf, which no finite
    bound admits (numpy's overflow warning on the subtraction is expected and silenced)."""
    import warnings
    prog = next(p for p in map(fuzz.random_program, range(300))
                if any(p.node(o).dtype == "float64" and p.node(o).shape for o in p.outputs))
    inputs = fuzz.make_inputs(prog)
    got, poison = fuzz.run_interpreter(prog, inputs)
    ref = fuzz.evaluate(prog, inputs)
    i = next(i for i, o in enumerate(prog.outputs) if prog.node(o).dtype == "float64" and prog.node(o).shape)
    name = prog.outputs[i]
    v, e = np.array(ref[name].v, np.float64, copy=True), np.array(ref[name].e, copy=True)
    v.reshape(-1)[0], e.reshape(-1)[0] = 1.5e308, 1.0
    ref[name] = Val(v, e)
    bad = [np.array(g, copy=True) for g in got]
    bad[i].reshape(-1)[0] = -1.5e308
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (msg,) = fuzz.mismatches(prog, bad, ref, poison)
    assert msg.startswith(f"out{i} = {name}") and "[0] got" in msg, msg


def test_reproducer_runs_standalone(tmp_path):
    prog = fuzz.random_program(3)
    path = fuzz.save_reproducer(prog, [("sm_90", "CompileError: example")], directory=str(tmp_path))
    text = open(path).read()
    assert "# sm_90: CompileError: example" in text and "@gt.jit" in text
    run = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "ok"


# ------------------------------------------------------------------------------ reference semantics
def test_bfloat16_rounding_matches_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 1e3, 2000), rng.normal(0, 1e-38, 200),
                        [0.0, -0.0, np.inf, -np.inf, 3.3961e38, -3.3961e38, 1.00390625, 1.01171875]])
    x32 = x.astype(np.float32)
    want = x32.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(R.round_bf16(x32), want)


def test_fma_rounds_once():
    # a*b+c where rounding the product (or the float64 sum) first gives a different answer
    a, b, c = 1.0 + 2.0 ** -30, 1.0 + 2.0 ** -30, -(1.0 + 2.0 ** -29)
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    assert float(R.fma(np.array(a), np.array(b), np.array(c), "float64")) == float(exact) == 2.0 ** -60
    a32 = np.float32(1 + 2 ** -12)
    got = R.fma(a32, a32, np.float32(-(1 + 2 ** -11)), "float32")
    assert float(got) == 2.0 ** -24
    # float32: the float64 sum is itself rounded; the nearest float32 of the exact value wins
    x, y, z = np.float32(1 + 2 ** -23), np.float32(2 ** -1), np.float32(2 ** -54)
    exact = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
    ref = R.fma(x, y, z, "float32")
    lo, hi = np.float32(0.5 + 2 ** -24), np.nextafter(np.float32(0.5 + 2 ** -24), np.float32(1))
    assert float(ref) == min((lo, hi), key=lambda v: abs(Fraction(float(v)) - exact))


def test_casts_saturate_and_wrap():
    f = np.array([np.nan, np.inf, -np.inf, 1e10, -1e10, -3.7, 3.7, 255.9, -0.5])
    assert R.cast(f, "float64", "int8").tolist() == [0, 127, -128, 127, -128, -3, 3, 127, 0]
    assert R.cast(f, "float64", "uint8").tolist() == [0, 255, 0, 255, 0, 0, 3, 255, 0]
    assert R.cast(np.array([2.0 ** 70]), "float64", "int64").tolist() == [2 ** 63 - 1]
    assert R.cast(np.array([300, -1], np.int32), "int32", "uint8").tolist() == [44, 255]
    assert R.cast(np.array([0.0, np.nan, -2.0]), "float64", "int1").tolist() == [False, True, True]


def test_shifts_and_division_semantics():
    a = np.array([-8, 8, -7, 7], np.int32)
    assert R.binary("shl", a, np.array([1, 32, -1, 31], np.int32), "int32").tolist() == [-16, 0, 0, -2 ** 31]
    assert R.binary("shr", a, np.array([1, 40, 32, -3], np.int32), "int32").tolist() == [-4, 0, -1, 0]
    assert R.binary("shr", np.array([200], np.uint8), np.array([9], np.uint8), "uint8").tolist() == [0]
    assert R.binary("floordiv", a, np.array([3, -3, 2, -2], np.int32), "int32").tolist() == [-2, -2, -3, -3]
    assert R.binary("mod", a, np.array([3, -3, 2, -2], np.int32), "int32").tolist() == [-2, 2, -1, 1]
    assert R.binary("maximum", np.array([np.nan, 1.0]), np.array([2.0, np.nan]), "float64").tolist() == [2.0, 1.0]


def test_bounded_sum_covers_other_orders():
    rng = np.random.default_rng(1)
    prog = fuzz.Program([fuzz.Node("v0", "load", (), {"input": 0, "masked": False, "other": None},
                                   "float16", (256,), None),
                         fuzz.Node("v1", "reduce", ("v0",), {"kind": "sum", "axis": 0, "keep": False},
                                   "float16", (), None)], ["v1"], 4, 32)
    for _ in range(20):
        x = rng.normal(0, 10, 256).astype(np.float16)
        val = fuzz.evaluate(prog, {0: x}, "bounded")["v1"]
        seq = np.float16(0)
        for v in x[rng.permutation(256)]:  # another order, rounding every step
            seq = np.float16(seq + v)
        assert abs(float(seq) - float(val.v)) <= float(val.e)
        # the documented bound, 2 (n - 1) u sum|x|, and no looser
        assert 0 < float(val.e) <= 1.001 * 2 * 255 * 2.0 ** -11 * float(np.abs(x.astype(np.float64)).sum())


def test_fma_special_values():
    big = np.finfo(np.float64).max
    # the exact product is finite: an infinite addend wins, a huge result stays finite
    assert float(R.fma(np.array(-1.98), np.array(-big), np.array(-np.inf), "float64")) == -np.inf
    assert float(R.fma(np.array(-1.98), np.array(-big), np.array(-big), "float64")) == 0.98 * big
    assert np.isnan(R.fma(np.array(np.inf), np.array(1.0), np.array(-np.inf), "float64"))
    assert float(R.fma(np.array(2.0), np.array(big), np.array(0.0), "float64")) == np.inf


# ------------------------------------------------------------------------------ shared memory
SHARED = fuzz.FuzzConfig(max_numel=256, max_ops=6, shared=True)
N_SHARED = int(os.environ.get("GLUON_TRACE_FUZZ_SHARED_EXAMPLES", "40"))


@settings(max_examples=N_SHARED, **_SETTINGS)
@given(fuzz.programs(SHARED))
def test_shared_memory_programs_match_reference(prog):
    """Tiles through shared buffers (random shared layouts, views, branch-picked views, loads
    in random layouts) in the interpreter, which also checks the barriers membar placed."""
    outcome = fuzz.check_program(prog)
    if not outcome.ok:
        _fail("shared_vs_reference", outcome)


def test_shared_generator_covers_layouts_views_and_branches():
    seen = set()
    for seed in range(150):
        for n in fuzz.random_program(seed, SHARED).nodes:
            if n.op != "shared":
                continue
            at = n.attrs
            seen.add(at["smem"][0])
            seen.add("init " + at["init"])
            seen.add("stacked" if at["lrank"] < len(at["buf"]) else "unstacked")
            for acc in (at["read"], at["write"]):
                if acc is None:
                    continue
                seen.add("write" if acc is at["write"] else "read")
                seen.update(("branch " + acc["b"][0][0],) if acc["b"] else ())
                seen.update(s[0] for s in acc["a"] + acc["after"])
            seen.update(s[0] + ("(flag)" if s[0] == "index" and s[1] == "flag" else "") for s in at["views"])
    assert seen >= {"swizzled", "nvmma", "padded", "init value", "init store", "stacked", "unstacked",
                    "read", "write", "branch slice", "branch index", "slice", "permute", "index",
                    "index(flag)", "reshape"}, seen


def test_shared_flag_off_keeps_the_default_programs():
    """Enabling an op changes which program a seed gives; leaving it off must not."""
    for seed in range(20):
        prog = fuzz.random_program(seed)
        assert not any(n.op == "shared" for n in prog.nodes)
        again = fuzz.random_program(seed, fuzz.FuzzConfig(shared=False))
        assert fuzz.kernel_source(again) == fuzz.kernel_source(prog)


VIEWS = fuzz.FuzzConfig(max_numel=256, max_ops=6, shared=True, shared_weight=5, unaligned_views=True)
N_VIEWS = int(os.environ.get("GLUON_TRACE_FUZZ_VIEWS_EXAMPLES", "25"))


@settings(max_examples=N_VIEWS, **_SETTINGS)
@given(fuzz.programs(VIEWS))
def test_unaligned_view_programs_match_reference(prog):
    """The views preset: slices from inside swizzle and padding periods, padded views picked by
    a branch at different such starts, in the interpreter (which checks membar's barriers)."""
    outcome = fuzz.check_program(prog)
    if not outcome.ok:
        _fail("views_vs_reference", outcome)


def test_views_generator_draws_unaligned_slices_and_branches():
    """Unaligned slices of every layout kind, and padded branch arms at unaligned different starts;
    swizzled/NVMMA arms never change start inside a period; no reshape after a slice."""
    from gluon_trace.fuzz.presets import preset_config
    assert preset_config("views").unaligned_views
    seen = set()
    for seed in range(200):
        for n in fuzz.random_program(seed, VIEWS).nodes:
            if n.op != "shared":
                continue
            at, kind = n.attrs, n.attrs["smem"][0]
            steps = list(at["views"])
            for acc in (at["read"], at["write"]):
                if acc is None:
                    continue
                steps += acc["a"] + acc["after"]
                arms = [acc["a"], acc["b"]] if acc["b"] else []
                if arms and arms[0][0][0] == "slice":
                    sa, sb = arms[0][0][1], arms[1][0][1]
                    if (sa - sb) % arms[0][0][2]:
                        assert kind == "padded", (seed, n.attrs)
                        seen.add("padded branch unaligned")
            for i, s in enumerate(at["views"]):
                assert s[0] != "reshape" or i == 0
            seen.update(kind + " unaligned" for s in steps if s[0] == "slice" and s[1] % s[2])
    assert seen >= {"swizzled unaligned", "nvmma unaligned", "padded unaligned", "padded branch unaligned"}, seen


def test_views_flag_off_is_the_shared_preset():
    """unaligned_views off draws exactly the shared preset's programs (no extra choices)."""
    from gluon_trace.fuzz.presets import preset_config
    for seed in range(30):
        off = fuzz.FuzzConfig(max_numel=256, max_ops=6, shared=True, shared_weight=5)
        assert fuzz.kernel_source(fuzz.random_program(seed, off)) == \
            fuzz.kernel_source(fuzz.random_program(seed, preset_config("shared")))
    # (nor loops carrying views: those are drawn with unaligned_views only)
    assert not list(_loop_nodes(range(100), preset_config("shared")))
    assert list(_loop_nodes(range(100), preset_config("views")))


def _loop_nodes(seeds, config=VIEWS):
    for seed in seeds:
        prog = fuzz.random_program(seed, config)
        for n in prog.nodes:
            if n.op == "shared" and n.attrs.get("loop") is not None:
                yield seed, prog, n


def test_views_generator_draws_loop_carried_views():
    """Views carried by a loop, of every layout kind, moved every way (a slice's start stepped by
    an aligned or unaligned amount, a slot, two views swapped), read, written and copied in the
    body, the node read every way; the starts a loop visits differ in one dim only and no view
    of them is reshaped (both refused by the backends for a run-time start)."""
    seen = set()
    for seed, _, n in _loop_nodes(range(300)):
        lp, kind = n.attrs["loop"], n.attrs["smem"][0]
        pos = lp["pos"]
        assert len(pos) >= 2 and all(p[:-1] == pos[0][:-1] for p in pos), (seed, lp)
        moved = [p[-1] for p in pos]
        assert len({m[0] for m in moved}) == 1 and len(set(moved)) == len(moved), (seed, lp)
        if moved[0][0] == "slice":   # (one dim, one length: only the start moves, by one step)
            assert len({(m[2], m[3]) for m in moved}) == 1, (seed, lp)
            steps = {b[1] - a[1] for a, b in zip(moved, moved[1:])}
            assert len(steps) == 1, (seed, lp)
            step, length = abs(steps.pop()), moved[0][2]
            seen.add(f"{lp['move']} {kind} {'aligned' if step % length == 0 else 'unaligned'}")
        else:
            seen.add(f"ring {kind}")
        assert all(s[0] != "reshape" for p in pos for s in p) and all(s[0] != "reshape" for s in lp["after"])
        seen.update(op[0] for op in lp["body"])
        seen.add("out " + lp["out"])
        seen.add("combine " + lp["combine"])
        if lp["after"]:
            seen.add("after")
    want = {f"{m} {k} {a}" for m in ("step", "swap") for k in ("swizzled", "padded") for a in ("aligned", "unaligned")}
    want |= {"step nvmma unaligned", "ring swizzled", "ring padded", "load", "store", "copy", "out acc",
             "out final", "out buf", "combine max", "combine last", "after"}
    assert seen >= want, want - seen


def test_loop_carried_views_run_in_the_interpreter_and_repeat_per_seed():
    """Programs with loop-carried views (some running several steps) against the reference, in the
    interpreter (which checks membar's barriers between the steps' accesses); a seed gives one
    program."""
    ran = 0
    seeds = sorted({seed for seed, prog, _ in _loop_nodes(range(120)) if prog.n_iter >= 2})[:12]
    assert len(seeds) >= 8
    for seed in seeds:
        prog = fuzz.random_program(seed, VIEWS)
        assert fuzz.kernel_source(prog) == fuzz.kernel_source(fuzz.random_program(seed, VIEWS))
        assert "for i in gl.range(0, n_iter):" in fuzz.kernel_source(prog)
        outcome = fuzz.check_program(prog)
        if not outcome.ok:
            _fail(f"views_loop_{seed}", outcome)
        ran += 1
    assert ran == len(seeds)


def _loop_prog(loop, n_iter, read=None):
    nodes = [fuzz.Node("v0", "load", (), {"input": 0, "masked": False, "other": None}, "int32", (8, 4), None),
             fuzz.Node("v1", "load", (), {"input": 1, "masked": False, "other": None}, "int32", (2, 4), None),
             fuzz.Node("v2", "shared", ("v0", "v1"),
                       {"buf": [8, 4], "smem": ("padded", [[4, 1]], [1, 0]), "lrank": 2, "init": "store",
                        "views": [], "write": None, "read": read, "loop": loop}, "int32", (2, 4), None)]
    return fuzz.Program(nodes, ["v2"], 4, 32, n_iter=n_iter)


def test_shared_reference_loop_carried_views():
    """The reference's loops: rows 1.., 3.. and 5.. visited in turn (step i sees i % 3), read
    into the tile and kept by maximum or replaced; two views swapped each step, one copied into
    the other, the buffer read after the loop."""
    x = np.arange(32, dtype=np.int32).reshape(8, 4) * np.where(np.arange(8) % 2, -1, 1)[:, None]
    y = -np.ones((2, 4), np.int32)
    pos = [[("slice", s, 2, 0)] for s in (1, 3, 5)]
    for combine in ("max", "last"):
        loop = {"move": "step", "pos": pos, "after": [], "body": [("load", 0)], "out": "acc", "combine": combine,
                "lay": ""}
        for n_iter in range(5):
            got = fuzz.evaluate(_loop_prog(loop, n_iter), {0: x, 1: y})["v2"].v
            seen = [x[1 + 2 * (i % 3):3 + 2 * (i % 3)] for i in range(n_iter)]
            if combine == "max":
                want = np.maximum.reduce([x[1:3]] + seen)
            else:
                want = seen[-1] if seen else x[1:3]
            np.testing.assert_array_equal(got, want, err_msg=f"{combine} {n_iter}")
        final = dict(loop, out="final")
        np.testing.assert_array_equal(fuzz.evaluate(_loop_prog(final, 4), {0: x, 1: y})["v2"].v, x[3:5])
    swap = {"move": "swap", "pos": [[("slice", 0, 2, 0)], [("slice", 3, 2, 0)]], "after": [],
            "body": [("copy", 0, 1), ("store", 0, 1)], "out": "buf", "combine": "last", "lay": ""}
    read = {"a": [], "b": None, "after": []}
    for n_iter in range(4):
        want = x.copy()
        c, d = 0, 3
        for _ in range(n_iter):
            want[d:d + 2] = want[c:c + 2]
            want[c:c + 2] = y
            c, d = d, c
        prog = _loop_prog(swap, n_iter, read)
        prog.nodes[-1].shape = (8, 4)
        np.testing.assert_array_equal(fuzz.evaluate(prog, {0: x, 1: y})["v2"].v, want, err_msg=str(n_iter))


def test_shared_reference_views_and_write():
    """The reference's views: a branch-picked column half overwritten, then a permuted slice read."""
    x = np.arange(32, dtype=np.int32).reshape(4, 8)
    y = -np.arange(16, dtype=np.int32).reshape(4, 4)
    nodes = [fuzz.Node("v0", "load", (), {"input": 0, "masked": False, "other": None}, "int32", (4, 8), None),
             fuzz.Node("v1", "load", (), {"input": 1, "masked": False, "other": None}, "int32", (4, 4), None),
             fuzz.Node("v2", "shared", ("v0", "v1"),
                       {"buf": [4, 8], "smem": ("swizzled", 4, 1, 2, [1, 0]), "lrank": 2, "init": "store",
                        "views": [],
                        "write": {"a": [("slice", 0, 4, 1)], "b": [("slice", 4, 4, 1)], "after": []},
                        "read": {"a": [("slice", 2, 2, 0)], "b": None, "after": [("permute", [1, 0])]}},
                       "int32", (8, 2), None)]
    for flag in (0, 1):
        prog = fuzz.Program(nodes, ["v2"], 4, 32, flag=flag)
        want = x.copy()
        want[:, 4 * flag:4 * flag + 4] = y
        got = fuzz.evaluate(prog, {0: x, 1: y})["v2"].v
        np.testing.assert_array_equal(got, want[2:4].T)


def test_an_unknown_preset_names_the_presets():
    """GLUON_TRACE_FUZZ_GPU_PRESET / the campaign's --preset: a typo is an error listing them."""
    from gluon_trace.fuzz.presets import PRESETS, preset_config
    assert preset_config("shared", 64).shared and preset_config("shared", 64).warp_size == 64
    with pytest.raises(ValueError, match="unknown fuzz preset 'sharde'.*atomics.*shared"):
        preset_config("sharde")
    assert "shared" in PRESETS


# ------------------------------------------------------------------------------ stacked slot views
def _slot_seeds(n: int, warp: int = 32) -> list:
    """The first ``n`` seeds whose stacked-preset program picks among slot views (a branch or
    a loop's body, fuzz/smem_stacked.py)."""
    from gluon_trace.fuzz.presets import preset_config
    from gluon_trace.fuzz.smem_stacked import draws_slots
    cfg, out, seed = preset_config("stacked", warp), [], 0
    while len(out) < n:
        if draws_slots(fuzz.random_program(seed, cfg)):
            out.append(seed)
        seed += 1
    return out


def test_stacked_generator_draws_slot_views_in_arms_and_loops():
    """The stacked preset draws the family the views preset never did: .index() of a slot (a
    constant and the run-time flag) inside branch arms, each arm's view made in its arm
    (gl.else_), before the branch or as the views preset does, at different stacked starts and
    different starts inside a period of one laid-out dim, viewed further after the join (a
    slice, an .index); slot views picked in a loop's body; every layout kind."""
    from gluon_trace.fuzz.presets import preset_config
    seen, arm_index_lines = set(), 0
    for seed in range(300):
        prog = fuzz.random_program(seed, preset_config("stacked"))
        for n in prog.nodes:
            if n.op != "shared":
                continue
            kind, lead = n.attrs["smem"][0], len(n.attrs["buf"]) - n.attrs["lrank"]
            for acc in (n.attrs["read"], n.attrs["write"]):
                if not acc or "form" not in acc:
                    continue
                a, b = acc["a"], acc["b"]
                assert len(a) == len(b) and [s[0] for s in a] == [s[0] for s in b], (seed, acc)
                seen |= {"form " + acc["form"], kind + " arms"}
                seen |= {"index " + ("flag" if s[1] == "flag" else "const") for s in a if s[0] == "index"}
                moving = 0
                for i, (sa, sb) in enumerate(zip(a, b)):   # (step 0: the slice of the stacked dim)
                    if sa[0] == "slice" and sa[1] != sb[1]:
                        seen.add("stacked starts differ" if i == 0 else "inner starts differ")
                        moving += i > 0
                        if i > 0 and (sa[1] % sa[2] or sb[1] % sb[2]):
                            seen.add(kind + " in-period starts differ")
                # a swizzled start moves in one laid-out dim at most (both backends refuse two)
                assert moving <= 1 or kind == "padded", (seed, acc)
                seen |= {"after " + s[0] for s in acc["after"]}
            lp = n.attrs.get("loop")
            if lp and lp.get("slots"):
                seen.add("loop slots")
                seen |= {"loop index " + ("flag" if s[1] == "flag" else "const") for p in lp["pos"] for s in p
                         if s[0] == "index"}
                assert lead >= 1
        src = fuzz.kernel_source(prog).splitlines()
        arm_index_lines += sum(1 for i, ln in enumerate(src[1:]) if ".index(" in ln and
                               src[i].strip() in ("with gl.if_(flag > 0):", "with gl.else_():"))
    assert arm_index_lines >= 20, arm_index_lines
    assert seen >= {"form arm", "form else", "form outside", "swizzled arms", "nvmma arms", "padded arms",
                    "index flag", "index const", "stacked starts differ", "inner starts differ",
                    "swizzled in-period starts differ", "nvmma in-period starts differ", "after slice",
                    "after index", "loop slots", "loop index const", "loop index flag"}, seen


def test_stacked_flag_only_changes_its_preset():
    """The views and shared presets never draw the stacked family (no extra choices: their
    seeds give the programs they gave before it existed, checked by hashing their sources)."""
    from gluon_trace.fuzz.presets import preset_config
    for name in ("views", "shared"):
        for seed in range(100):
            for n in fuzz.random_program(seed, preset_config(name)).nodes:
                if n.op == "shared":
                    assert all(acc is None or "form" not in acc for acc in (n.attrs["read"], n.attrs["write"]))
                    assert not (n.attrs.get("loop") or {}).get("slots")


@pytest.mark.parametrize("seed", _slot_seeds(12))
def test_stacked_view_programs_match_reference(seed):
    """The interpreter (which checks membar's barriers) against the reference on them."""
    from gluon_trace.fuzz.presets import preset_config
    outcome = fuzz.check_program(fuzz.random_program(seed, preset_config("stacked")))
    if not outcome.ok:
        _fail(f"stacked_vs_reference_{seed}", outcome)

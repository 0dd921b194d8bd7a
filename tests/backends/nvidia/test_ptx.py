"""The NVIDIA emitter without a GPU: every corpus kernel emitted for every target and
assembled by ptxas, golden checks on the code-quality decisions, ptxas errors mapped to
the user's line, the op table covered, the disk cache."""
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import nv_corpus as corpus  # noqa: E402

import gluon_trace as gt  # noqa: E402
from gluon_trace import language as gl  # noqa: E402
from gluon_trace.backend import Unsupported  # noqa: E402
from gluon_trace.errors import CompileError  # noqa: E402
from gluon_trace.ops import OPS  # noqa: E402

nvidia = pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia import ptxas  # noqa: E402

try:
    ptxas.locate()
    HAVE_PTXAS = True
except CompileError as e:  # pragma: no cover
    HAVE_PTXAS, WHY = False, str(e)

needs_ptxas = pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not found (pip install gluon-trace[cuda])")
TARGETS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
CASES = corpus.cases()


@pytest.fixture(autouse=True, scope="module")
def _fresh_cache(tmp_path_factory):
    """Assemble for real: a cache folder of this test run's own."""
    old = os.environ.get("GLUON_TRACE_CACHE_DIR")
    os.environ["GLUON_TRACE_CACHE_DIR"] = str(tmp_path_factory.mktemp("gtcache"))
    yield
    if old is None:
        os.environ.pop("GLUON_TRACE_CACHE_DIR", None)
    else:
        os.environ["GLUON_TRACE_CACHE_DIR"] = old


def spec_args(case, rng=None):
    import numpy as np
    args = case.make(rng or np.random.default_rng(0))
    return [a.spec() if isinstance(a, corpus.Arr) else a for a in args]


def traced(case, target="sm_90"):
    return case.kernel.trace(*spec_args(case), target=target, **case.kw)


def test_every_op_has_a_rule():
    rules = nvidia.BACKEND.RULES
    missing = [n for n in OPS if n not in rules]
    assert not missing, f"ops without an NVIDIA rule: {missing}"
    for n, r in rules.items():
        assert callable(r) or (isinstance(r, Unsupported) and r.why), n


@needs_ptxas
@pytest.mark.parametrize("target", TARGETS)
def test_corpus_assembles(target):
    """Every corpus kernel emitted for ``target`` and assembled by ptxas, without spills."""
    from batch import assemble_many
    ptxs = [traced(c, target).ptx(target) for c in CASES]
    errors, spilled = assemble_many(ptxs, target)
    bad = [f"{CASES[i].name}: {e}" for i, e in errors.items()]
    bad += [f"{CASES[i].name}: {n} bytes of spill stores" for i, n in spilled.items() if n]
    assert not bad, "\n".join(bad)
    assert len(spilled) == len(CASES)


@needs_ptxas
def test_compile_gives_a_cubin():
    ck = traced(CASES[0]).compile("sm_90")
    assert ck.binary[:4] == b"\x7fELF" and ck.registers > 0 and ck.spill_bytes == 0


# -- golden checks: decisions that make the code fast -----------------------------------------

def ptx_of(case_name, target="sm_90"):
    case = next(c for c in CASES if c.name == case_name)
    return traced(case, target).ptx(target)


def test_aligned_contiguous_load_is_128_bit():
    p = ptx_of("add_f32")
    assert "ld.global.v4.f32" in p and "st.global.v4.f32" in p
    assert not re.search(r"ld\.global\.f32", p)


def test_fp16_and_int8_vectors():
    p = ptx_of("copy_float16_L1_8")  # 8 halves in 16 bytes
    assert "ld.global.v4.b32" in p and "st.global.v4.b32" in p
    assert "cvt.f32.f16" not in p  # a copy keeps the bits: its dead widenings are dropped
    p = ptx_of("copy_int8_L16w4")  # 16 bytes
    assert "ld.global.v4.b32" in p and "st.global.v4.b32" in p


def test_masked_vector_load_needs_divisible_n():
    """cols < n is constant over groups of 4 only when n is known to be a multiple of 4: the
    jit specializes ints on divisibility by 16, as Triton does (1024 is, 1000 is not)."""
    p = ptx_of("softmax_L1_1024")
    assert re.search(r"@%p\d+ ld\.global\.v4\.f32", p) and re.search(r"@%p\d+ st\.global\.v4\.f32", p)
    p = ptx_of("softmax_L1_1000")
    assert "ld.global.v4" not in p and "@%p" in p


def test_unaligned_pointer_is_not_vectorized():
    @gt.jit
    def k(out, x, off, BLOCK: gl.constexpr):
        offs = gl.arange(0, BLOCK, layout=corpus.L1)
        gl.store(out + offs, gl.load(x + off + offs))
    p = k.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), 3, BLOCK=512).ptx("sm_90")
    assert "ld.global.v4" not in p and "st.global.v4.f32" in p
    p = k.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), 16, BLOCK=512).ptx("sm_90")
    assert "ld.global.v4.f32" in p


def test_hints_enable_vectors():
    @gt.jit
    def k(out, x, off, BLOCK: gl.constexpr):
        offs = gl.multiple_of(off, 16) + gl.arange(0, BLOCK, layout=corpus.L1)
        gl.store(out + offs, gl.load(x + offs))
    p = k.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), 3, BLOCK=512).ptx("sm_90")
    assert "ld.global.v4.f32" in p


def test_reduction_uses_butterfly_shuffles_and_one_barrier_pair():
    p = ptx_of("reduce1d_sum_L1")
    assert p.count("shfl.sync.bfly.b32") == 5
    assert p.count("bar.sync") == 1
    p = ptx_of("reduce2d_sum_ax1_L2_WARPS_M_float32")  # warps do not split axis 1: no shared memory
    assert "shfl.sync.bfly" in p and "bar.sync" not in p and "st.shared" not in p


def test_fast_math_choices():
    exp = ptx_of("unary_exp_float32")  # not .ftz: subnormal results, as the interpreter's
    assert "ex2.approx.f32" in exp and "ex2.approx.ftz" not in exp
    assert "lg2.approx.f32" in ptx_of("unary_log_float32")
    assert "div.rn.f32" in ptx_of("binop_div_float32")
    assert "div.full.f32" in ptx_of("binop_fdiv_float32")
    assert "cvt.rn.bf16.f32" in ptx_of("binop_add_bfloat16")
    assert "cvt.rn.f16.f32" in ptx_of("binop_add_float16")


def test_layout_renamings_emit_nothing():
    case = next(c for c in CASES if c.name == "convert_L2_ROW_L2_COL")
    same = case.kernel.trace(*spec_args(case), target="sm_90", **{**case.kw, "B": corpus.L2_ROW}).ptx("sm_90")
    assert "st.shared" not in same and "bar.sync" not in same
    p = ptx_of("convert_L2_ROW_L2_COL")
    assert "st.shared" in p and p.count("bar.sync") == 1
    p = ptx_of("bias2d_L2_ROW")  # expand_dims + broadcast: renamings only
    assert "shared" not in p.split(".maxntid")[1]


def test_control_flow_is_real_branches():
    p = ptx_of("loop")
    assert re.search(r"@%p\d+ bra \$L_loop_end", p) and "bra.uni $L_loop" in p
    p = ptx_of("ifelse")
    assert re.search(r"@!%p\d+ bra \$L_else", p)


def test_atomics():
    p = ptx_of("atomics")
    assert "atom.global.acq_rel.gpu.add.u32" in p
    assert "atom.global.acq_rel.gpu.cas.b32" in p  # float max: compare-and-swap loop
    assert "atom.global.acq_rel.gpu.min.s32" in p


def test_loc_directives_name_the_user_line():
    p = ptx_of("softmax_L1_1000")
    assert f'.file 1 "{corpus.__file__}"' in p
    line = corpus.softmax_k.fn.__code__.co_firstlineno
    assert f".loc 1 {line + 5} 0" in p  # the gl.load line


def test_versions_and_targets():
    p = ptx_of("add_f32", "sm_90a")
    assert ".version 8.0" in p and ".target sm_90a" in p and ".address_size 64" in p
    with pytest.raises(CompileError, match="unknown NVIDIA target"):
        ptx_of("add_f32", "sm_70")


@needs_ptxas
def test_ptxas_error_names_the_user_line(monkeypatch):
    from gluon_trace.backends.nvidia import rules_elementwise
    case = next(c for c in CASES if c.name == "binop_add_float32")
    orig = rules_elementwise.arith

    def broken(em, op, name, a, b):
        if name == "add":
            return em.ins("f32", f"add.rn.f32 {{d}}, {a}, %rd1;")  # f32 op on a 64-bit register
        return orig(em, op, name, a, b)
    monkeypatch.setattr(rules_elementwise, "arith", broken)
    with pytest.raises(CompileError) as e:
        case.kernel.trace(*spec_args(case), target="sm_80", **case.kw).compile("sm_80")
    msg = str(e.value)
    assert "ptxas" in msg and "nv_corpus.py" in msg
    # the first add that reaches ``arith``: the float one (int32 offsets go through affine.py)
    assert e.value.loc.line == corpus._BIN["add"].__code__.co_firstlineno


def test_missing_ptxas_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("GLUON_TRACE_PTXAS", str(tmp_path / "nope"))
    monkeypatch.setattr(ptxas, "_found", None)
    with pytest.raises(CompileError, match=r"gluon-trace\[cuda\]"):
        ptxas.locate()


def test_scan_layout_once_refused_now_compiles():
    """A register base above the warps (once "an order the NVIDIA backend does not scan"): legal,
    so compiled; its results are checked in the simulator by test_reduce_layouts.py."""
    L = gl.DistributedLinearLayout(reg_bases=[[32]], lane_bases=[[1], [2], [4], [8], [16]],
                                   warp_bases=[[64], [0]], shape=[128])

    @gt.jit
    def k(out, x):
        offs = gl.arange(0, 128, layout=L)
        gl.store(out + offs, gl.cumsum(gl.load(x + offs), axis=0))
    text = k.trace(gl.pointer(gl.int32), gl.pointer(gl.int32), num_warps=4).ptx("sm_90")
    assert ".entry k" in text


@needs_ptxas
def test_compile_reports_resources_and_caches():
    case = next(c for c in CASES if c.name == "reduce2d_sum_ax0_L2_WARPS_M_float32")
    ck = traced(case).compile("sm_90")
    assert ck.shared_bytes > 0 and ck.registers > 0 and "ptxas_version" in ck.extra
    assert traced(case).compile("sm_90") is ck  # in-process cache
    from gluon_trace.backends.nvidia import compiler
    compiler._memory.clear()
    again = traced(case).compile("sm_90")
    assert again.extra["disk_cache_hit"] and again.binary == ck.binary


@needs_ptxas
def test_print_assembles():
    case = corpus.print_case()
    p = traced(case).compile("sm_90").asm
    assert "call.uni (gt_ret), vprintf" in p


@needs_ptxas
def test_disk_cache_hit_in_fresh_process_is_fast(tmp_path):
    """Compile once, then time kernel.compile() in a fresh process (trace excluded)."""
    code = f"""
import os, sys, time
os.environ["GLUON_TRACE_CACHE_DIR"] = {str(tmp_path)!r}
sys.path.insert(0, {os.path.dirname(__file__)!r})
import nv_corpus as corpus
from gluon_trace import language as gl
case = next(c for c in corpus.cases() if c.name == "softmax_L1_8_1024")
import numpy as np
args = [a.spec() if isinstance(a, corpus.Arr) else a for a in case.make(np.random.default_rng(0))]
k = case.kernel.trace(*args, target="sm_90", **case.kw)
k.graph.text
t = time.perf_counter(); ck = k.compile("sm_90"); dt = time.perf_counter() - t
print(ck.extra["disk_cache_hit"], dt)
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    run = lambda: subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,  # noqa: E731
                                 text=True, env=env).stdout.split()
    assert run()[0] == "False"  # the first process builds (and writes bytecode)
    times = []
    for _ in range(3):
        hit, dt = run()
        assert hit == "True"
        times.append(float(dt))
    assert min(times) < 0.002, f"disk-cache hit took {min(times) * 1e3:.2f} ms"


def test_clock_reads_are_fresh_movs_in_program_order():
    """Each gl.globaltimer() / gl.clock64() is its own mov from the special register, where the
    call is (not hoisted into the prologue, as %ctaid is): the second pair after the loop; on
    the simulator the readings grow, and ptxas takes them for every target."""
    import numpy as np
    import ptxsim
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    from test_language_ops import timed_loop
    from gluon_trace.backends.nvidia.emitter import emit
    g = timed_loop.trace(gl.pointer(gl.int64), gl.int32, num_warps=2, target="sm_80").graph
    text, _, smem = emit(g, "sm_80")
    lines = text.splitlines()
    reads = [i for i, ln in enumerate(lines) if re.search(r"mov\.u64 %rd\d+, %(globaltimer|clock64);", ln)]
    assert len(reads) == 4
    back_edge = max(i for i, ln in enumerate(lines) if re.search(r"\bbra(\.uni)? ", ln))
    assert reads[1] < back_edge < reads[2]
    out = np.full((2, 5), -1, np.int64)
    ptxsim.run(text, (2, 1, 1), [out, 50], smem)
    assert (out[:, 4] == 50).all() and (out[:, 1] > out[:, 0]).all() and (out[:, 3] > out[:, 2]).all()
    if HAVE_PTXAS:
        for target in TARGETS:
            assert timed_loop.trace(gl.pointer(gl.int64), gl.int32, target=target).compile(target).registers > 0

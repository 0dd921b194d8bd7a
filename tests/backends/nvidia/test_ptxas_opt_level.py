"""ptxas -O1 for kernels whose threads hold >= 1024 registers of one tile (compiler.ptxas_options):
ptxas -O3's time grows with the square of the values live at once, and on such kernels it
spills more than -O1 does. The count, the option reaching ptxas, the compile summary saying
so, and the large kernel's PTX computing the right values (on the PTX simulator)."""
import os
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backends.nvidia import compiler, ptxas, spill
from gluon_trace.errors import CompileError

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402


@gt.jit
def scale_shift(y, x, N: gl.constexpr, L: gl.constexpr, WIDE: gl.constexpr):
    offs = gl.arange(0, N, layout=L)
    v = gl.load(x + offs)
    if WIDE:
        v = v.to(gl.float64)
    gl.store(y + offs, (v * 3.0 + 1.0).to(gl.float32))


def _trace(n, per_thread, wide=False):
    lay = gl.BlockedLayout([per_thread], [32], [n // (32 * per_thread)], [0])
    return scale_shift.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), N=n, L=lay, WIDE=wide,
                             num_warps=n // (32 * per_thread), target="sm_90a")


def test_values_per_thread_counts_registers_of_the_largest_tile():
    assert compiler.values_per_thread(_trace(4096, 32).graph) == 32
    assert compiler.values_per_thread(_trace(4096, 32, wide=True).graph) == 64  # float64: 2 each
    assert compiler.values_per_thread(_trace(32768, 1024).graph) == 1024
    assert compiler.ptxas_options(_trace(4096, 32).graph) == ((), None)
    assert compiler.ptxas_options(_trace(16384, 512).graph)[0] == ()
    opts, why = compiler.ptxas_options(_trace(16384, 512, wide=True).graph)
    assert opts == ("-O1",) and "1024" in why


@pytest.fixture
def logged_ptxas(tmp_path, monkeypatch):
    """The real ptxas behind a script that logs its arguments; a fresh cache."""
    try:
        real, _ = ptxas.locate()
    except CompileError as e:
        pytest.skip(str(e))
    log = tmp_path / "args.log"
    wrapper = tmp_path / "ptxas"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {log}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("GLUON_TRACE_PTXAS", str(wrapper))
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(ptxas, "_found", None)
    monkeypatch.setattr(compiler, "_memory", {})
    return log


def _assembles(log) -> list:
    return [ln.split() for ln in log.read_text().splitlines() if "--version" not in ln]


def test_a_large_tile_is_assembled_at_O1_and_the_summary_says_so(logged_ptxas):
    traced = _trace(32768, 1024)
    ck = traced.compile("sm_90a")
    runs = _assembles(logged_ptxas)
    assert runs and all("-O1" in args for args in runs)
    # it holds more than a thread's registers (the premise): the emitter keeps the excess in
    # .local itself (spill.py), which ptxas reports as stack, not as its own spills; a register
    # cap would only spill more, so ptxas ran once (a second run under .maxnreg doubled these
    # compiles)
    assert spill.ARRAY in ck.asm and ck.extra["stack_bytes"] >= 4 * 512 and ck.registers > 128
    assert len(runs) == 1
    assert ck.extra["ptxas_opt_level"].startswith("-O1 (1024 registers")
    assert "ptxas_opt_level: -O1" in ck.summary()
    # the PTX is what the emitter wrote (the option changes only how ptxas assembles it):
    x = np.random.default_rng(5).normal(0, 8, 32768).astype(np.float32)
    y = np.full(32768, np.nan, np.float32)
    ptxsim.run(ck.asm, (1, 1, 1), [y, x], ck.extra["scratch_bytes"])
    np.testing.assert_array_equal(y, x * np.float32(3) + np.float32(1))


def test_a_small_tile_keeps_ptxas_default_level(logged_ptxas):
    ck = _trace(4096, 32).compile("sm_90a")
    runs = _assembles(logged_ptxas)
    assert runs and not any(a.startswith("-O") for args in runs for a in args)
    assert "ptxas_opt_level" not in ck.extra

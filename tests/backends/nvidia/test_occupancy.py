"""The register cap at an occupancy cliff (compiler.register_cap): the arithmetic, and a
kernel just past a cliff assembled again under .maxnreg without spilling."""
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backends.nvidia import compiler, ptxas
from gluon_trace.errors import CompileError


def test_ctas_per_sm_and_the_cap():
    assert compiler.ctas_per_sm(128, 8, 0, "sm_90a") == 2     # 128 regs x 256 threads x 2 = 64K
    assert compiler.ctas_per_sm(136, 8, 0, "sm_90a") == 1     # past the cliff
    assert compiler.ctas_per_sm(32, 8, 0, "sm_90a") == 8      # then warps decide (64 per SM)
    assert compiler.ctas_per_sm(32, 4, 100 << 10, "sm_90a") == 2  # then shared memory
    assert compiler.register_cap(136, 8, 0, "sm_90a") == 128
    assert compiler.register_cap(160, 8, 0, "sm_90a") is None  # more than 1/8 over: leave it
    assert compiler.register_cap(128, 8, 0, "sm_90a") is None  # already at the cliff
    assert compiler.register_cap(40, 8, 0, "sm_90a") is None   # 8 CTAs: warps stop the next
    assert compiler.register_cap(136, 8, 120 << 10, "sm_90a") is None  # shared memory stops it
    # what compile()'s summary reports as the occupancy
    assert compiler.occupancy(168, 12, 213136, "sm_90a") == (1, "registers and shared memory")
    assert compiler.occupancy(24, 8, 0, "sm_90a") == (8, "warps")
    assert compiler.occupancy(32, 4, 100 << 10, "sm_90a") == (2, "shared memory")


@gt.jit
def rows_softmax(out, x, stride, n_cols, BLOCK: gl.constexpr, L: gl.constexpr, MASKED: gl.constexpr):
    row = gl.program_id(0)
    cols = gl.arange(0, BLOCK, layout=L)
    if MASKED:
        v = gl.load(x + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
    else:
        v = gl.load(x + row * stride + cols)
    e = gl.exp(v - gl.max(v, axis=0))
    gl.store(out + row * stride + cols, e / gl.sum(e, axis=0), mask=cols < n_cols)


def _compile(masked, tmp_path, monkeypatch):
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(str(e))
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path))
    k = rows_softmax.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), 16384, 16384, BLOCK=16384,
                           L=gl.BlockedLayout([4], [32], [8], [0]), MASKED=masked, num_warps=8, target="sm_90a")
    return k.compile("sm_90a")


def test_a_kernel_past_a_cliff_is_capped_without_spills(tmp_path, monkeypatch):
    ck = _compile(True, tmp_path, monkeypatch)  # 136 registers as ptxas first assembles it
    assert ck.extra.get("registers_uncapped", 0) > 128, ck
    assert ck.registers <= 128 and ck.spill_bytes == 0 and ck.extra["spill_loads"] == 0
    assert ".maxnreg 128" in ck.asm


def test_a_cap_that_would_spill_is_not_taken(tmp_path, monkeypatch):
    ck = _compile(False, tmp_path, monkeypatch)  # 142 registers; under 128 ptxas spills
    assert "registers_uncapped" not in ck.extra and ".maxnreg" not in ck.asm
    assert ck.registers > 128 and ck.spill_bytes == 0

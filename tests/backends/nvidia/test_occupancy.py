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


WARPS = 4


def _compile(masked, tmp_path, monkeypatch):
    """A 4096-column softmax row per 4-warp program (32 values per thread): the masked form lands
    a few registers past the 4 -> 5 CTA cliff (64 registers), the unmasked one a few past 56 (the
    counts follow ptxas and our emitter; the tests below check the premise they rely on)."""
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(str(e))
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path))
    k = rows_softmax.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), 4096, 4096, BLOCK=4096,
                           L=gl.BlockedLayout([4], [32], [WARPS], [0]), MASKED=masked, num_warps=WARPS,
                           target="sm_90a")
    return k.compile("sm_90a")


def test_a_kernel_past_a_cliff_is_capped_without_spills(tmp_path, monkeypatch):
    ck = _compile(True, tmp_path, monkeypatch)
    uncapped = ck.extra.get("registers_uncapped", 0)
    cap = compiler.register_cap(uncapped, WARPS, ck.shared_bytes, "sm_90a")
    assert uncapped and cap is not None, ck          # as ptxas first assembled it: past a cliff
    assert ck.registers <= cap and ck.spill_bytes == 0 and ck.extra["spill_loads"] == 0
    assert f".maxnreg {cap}" in ck.asm
    assert compiler.ctas_per_sm(ck.registers, WARPS, ck.shared_bytes, "sm_90a") > \
        compiler.ctas_per_sm(uncapped, WARPS, ck.shared_bytes, "sm_90a")   # one more CTA per SM


def test_a_cap_that_would_spill_is_not_taken(tmp_path, monkeypatch):
    ck = _compile(False, tmp_path, monkeypatch)
    cap = compiler.register_cap(ck.registers, WARPS, ck.shared_bytes, "sm_90a")
    assert cap is not None, ck                        # a cap was tried...
    assert "registers_uncapped" not in ck.extra and ".maxnreg" not in ck.asm and ck.spill_bytes == 0
    maxntid = f".maxntid {32 * WARPS}, 1, 1"         # ...and under it ptxas does not fit the kernel
    _, info = ptxas.assemble(ck.asm.replace(maxntid, f"{maxntid}\n.maxnreg {cap}", 1), "sm_90a", {},
                             "rows_softmax")
    assert info["spill_stores"] or info["spill_loads"] or info["stack"] or info["registers"] > cap

"""Every error the AMD backend raises names the kernel author's line."""
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backend import Unsupported
from gluon_trace.backends.amd import BACKEND, assembler
from gluon_trace.ops import OPS


def _lay():
    return gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0])


def test_every_op_has_a_rule_or_says_why_not():
    assert set(BACKEND.RULES) == set(OPS)
    unsupported = {k: r for k, r in BACKEND.RULES.items() if isinstance(r, Unsupported)}
    assert "print" not in unsupported  # a launcher-owned buffer (test_amd_print.py)
    assert all(r.why for r in unsupported.values())


def _emit_error(kernel, *args, **kw):
    with pytest.raises(gt.CompileError) as e:
        kernel.trace(*args, num_warps=1, target="gfx942", **kw).amdgcn("gfx942")
    return str(e.value)


def test_unknown_target():
    @gt.jit
    def k(p):
        gl.store(p, 1.0)

    with pytest.raises(gt.CompileError, match="gfx90a, gfx942, gfx1100"):
        k.trace(gl.pointer(gl.float32), target="gfx803")
    with pytest.raises(gt.CompileError) as e:
        BACKEND.threads_per_warp("gfx803")  # OLD GPU
    assert "OLD GPU" in str(e.value)  # the caller's line (tracing is wrapped by conftests)


def test_assembler_errors_point_at_the_users_line():
    text = "\n".join([".text", "k:", "  ; loc /src/model.py:41", "  v_mov_b32 v0, 0",
                      "  ; loc /src/model.py:42", "  v_bogus v1, v2", "  s_endpgm"])
    stderr = "/tmp/x/k.s:6:3: error: invalid instruction\n  v_bogus v1, v2\n  ^\n"
    msg, loc = assembler._map_error(stderr, "k.s", text)
    assert "invalid instruction" in msg and "v_bogus v1, v2" in msg
    assert (loc.file, loc.line) == ("/src/model.py", 42)


def test_missing_assembler_says_how_to_install(monkeypatch):
    assembler.find_toolchain.cache_clear()
    monkeypatch.delenv("GLUON_TRACE_AMD_CLANG", raising=False)
    monkeypatch.setenv("ROCM_PATH", "/nonexistent")
    monkeypatch.setattr(assembler.shutil, "which", lambda name: None)
    monkeypatch.setattr(assembler.os.path, "exists",
                        lambda p: False if "rocm" in p else __import__("os").path.isfile(p))
    monkeypatch.setattr(assembler.importlib.util, "find_spec", lambda name: None)
    try:
        with pytest.raises(gt.CompileError, match=r"pip install gluon-trace\[amd\]"):
            assembler.find_toolchain()
    finally:
        assembler.find_toolchain.cache_clear()


def test_env_override_that_does_not_run(monkeypatch):
    assembler.find_toolchain.cache_clear()
    monkeypatch.setenv("GLUON_TRACE_AMD_CLANG", "/nonexistent/clang")
    try:
        with pytest.raises(gt.CompileError, match="GLUON_TRACE_AMD_CLANG"):
            assembler.find_toolchain()
    finally:
        assembler.find_toolchain.cache_clear()


def test_old_llvm_is_skipped(monkeypatch):
    monkeypatch.setattr(assembler, "_version", lambda argv: (14, "LLVM version 14.0.6"))
    assert assembler._candidate(["/usr/bin/llvm-mc"], ["ld.lld"], "system") is None
    monkeypatch.setattr(assembler, "_version", lambda argv: (19, "LLVM version 19.1.0"))
    tc = assembler._candidate(["/usr/bin/llvm-mc-19"], ["ld.lld-19"], "system")
    assert tc.kind == "llvm-mc" and "-triple=amdgcn-amd-amdhsa" in tc.assemble_argv("gfx942", "a", "b")

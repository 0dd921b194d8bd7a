"""Every corpus kernel: emitted, assembled and linked for every AMD target, and the
code object read back: metadata against the kernel's arguments, the kernel
descriptor against what the emitter used."""
import re

import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backends.amd import BACKEND
from gluon_trace.backends.amd import metadata as md
from gluon_trace.backends.amd.assembler import find_toolchain
from gluon_trace.backends.amd.compiler import lower
from gluon_trace.backends.amd.target import TARGETS

from amd_corpus import CORPUS

TARGET_NAMES = list(TARGETS)


def _toolchain_or_skip():
    try:
        return find_toolchain()
    except gt.CompileError as e:
        pytest.skip(str(e))


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "amd-cache"))


def test_threads_per_warp():
    assert [BACKEND.threads_per_warp(t) for t in ("gfx90a", "gfx942", "gfx1100")] == [64, 64, 32]
    with pytest.raises(gt.CompileError, match="gfx90a, gfx942, gfx1100"):
        BACKEND.threads_per_warp("gfx908")


def test_threads_per_warp_is_a_python_int_at_trace_time():
    seen = []

    @gt.jit
    def k(out_ptr):
        seen.append(gl.threads_per_warp())
        lay = gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0])
        gl.store(out_ptr + gl.arange(0, gl.threads_per_warp(), layout=lay), 1.0)

    for t, w in (("gfx942", 64), ("gfx1100", 32)):
        k.trace(gl.pointer(gl.float32), num_warps=1, target=t)
        assert seen[-1] == w and type(seen[-1]) is int


def test_wave_size_mismatch_is_a_clear_error_naming_the_line():
    @gt.jit
    def k(out_ptr):
        lay = gl.BlockedLayout([1], [32], [4], [0])
        gl.store(out_ptr + gl.arange(0, 128, layout=lay), 1.0)  # THE LINE

    k.trace(gl.pointer(gl.float32), target="gfx1100")  # wave32: fine
    with pytest.raises(gt.LayoutError) as e:
        k.trace(gl.pointer(gl.float32), target="gfx942")
    assert "64 threads" in str(e.value) and "THE LINE" in str(e.value)


@pytest.mark.parametrize("target", TARGET_NAMES)
@pytest.mark.parametrize("name,kernel,args,cx,nw", CORPUS, ids=[c[0] for c in CORPUS])
def test_corpus_assembles_links_and_reads_back(target, name, kernel, args, cx, nw):
    _toolchain_or_skip()
    tk = kernel.trace(*args, **cx, num_warps=nw, target=target)
    g = tk.graph
    e = lower(g, target)
    ck = tk.compile(target)
    assert ck.binary[:4] == b"\x7fELF"
    meta = md.read_metadata(ck.binary)
    assert meta["amdhsa.version"] == [1, 2]
    (km,) = meta["amdhsa.kernels"]
    assert km[".name"] == g.name and km[".symbol"] == g.name + ".kd"
    wave = TARGETS[target].wave
    assert km[".wavefront_size"] == wave
    assert km[".max_flat_workgroup_size"] == nw * wave
    # explicit arguments: names, kinds and sizes from the graph, offsets increasing and aligned
    explicit = [a for a in km[".args"] if not a[".value_kind"].startswith("hidden")]
    assert [a[".name"] for a in explicit] == g.arg_names
    end = 0
    for a, v in zip(explicit, g.args):
        d = v.type.dtype
        assert a[".value_kind"] == ("global_buffer" if d.is_ptr else "by_value")
        assert a[".size"] == d.itemsize
        assert a[".offset"] >= end and a[".offset"] % min(a[".size"], 8) == 0
        end = a[".offset"] + a[".size"]
    hidden = {a[".value_kind"]: a for a in km[".args"] if a[".value_kind"].startswith("hidden")}
    assert hidden["hidden_block_count_x"][".offset"] >= end
    assert km[".kernarg_segment_size"] >= max(a[".offset"] + a[".size"] for a in km[".args"])
    # resources: what the allocator used, what the descriptor says, what CompiledKernel reports
    assert km[".vgpr_count"] == max(e.vgprs, 1) == ck.registers
    assert km[".group_segment_fixed_size"] == e.lds == ck.shared_bytes
    assert km[".private_segment_fixed_size"] == 0 == ck.spill_bytes
    kd = md.read_descriptor(ck.binary, g.name)
    assert kd["group_segment_fixed_size"] == e.lds
    assert kd["kernarg_size"] == km[".kernarg_segment_size"]
    assert kd["float_denorm_mode_32"] == 3 and kd["float_denorm_mode_16_64"] == 3
    assert kd["kernarg_segment_ptr"] == 1 and kd["user_sgpr_count"] == 2
    assert kd["workgroup_id"] == (1, 1, 1)
    assert kd["wavefront_size32"] == (1 if wave == 32 else 0)
    assert kd["vgpr_granules"] * 8 >= e.vgprs  # granule 8 on all three targets
    # every register the text names lies below the counts in the descriptor
    body = ck.asm[:ck.asm.index(".rodata")]
    for m in re.finditer(r"\bv\[(\d+):(\d+)\]|\bv(\d+)\b", body):
        top = int(m.group(2) or m.group(3))
        assert top < e.vgprs, m.group(0)
    for m in re.finditer(r"\bs\[(\d+):(\d+)\]|\bs(\d+)\b", body):
        top = int(m.group(2) or m.group(3))
        assert top < max(e.sgprs, 5), m.group(0)


def test_compile_uses_the_disk_cache(tmp_path, monkeypatch):
    _toolchain_or_skip()
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path))
    name, kernel, args, cx, nw = CORPUS[0]
    tk = kernel.trace(*args, **cx, num_warps=nw, target="gfx942")
    a = tk.compile("gfx942")
    b = tk.compile("gfx942")
    assert not a.extra["cached"] and b.extra["cached"]
    assert a.binary == b.binary and a.asm == b.asm
    assert any(tmp_path.rglob("*.bin"))


def test_amdgcn_text_needs_no_assembler():
    name, kernel, args, cx, nw = CORPUS[0]
    text = kernel.trace(*args, **cx, num_warps=nw, target="gfx1100").amdgcn("gfx1100")
    assert ".amdhsa_wavefront_size32 1" in text and "vcc_lo" in text
    assert ".amdhsa_code_object_version 5" in text


def test_yaml_names_that_read_as_booleans_stay_strings():
    _toolchain_or_skip()

    @gt.jit
    def k(y, n, on, no):
        lay = gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0])
        offs = gl.arange(0, gl.threads_per_warp(), layout=lay)
        gl.store(y + offs, (offs < n) & on.to(gl.int1) & no)

    ck = k.trace(gl.pointer(gl.int1), gl.int32, gl.int32, gl.int1, num_warps=1,
                 target="gfx942").compile("gfx942")
    (km,) = md.read_metadata(ck.binary)["amdhsa.kernels"]
    names = [a.get(".name") for a in km[".args"] if not a[".value_kind"].startswith("hidden")]
    assert names == ["y", "n", "on", "no"]


def test_own_msgpack_decoder_matches_msgpack():
    msgpack = pytest.importorskip("msgpack")
    doc = {"a": [1, -3, 300, -70000, 2**40, 1.5, True, None, "x" * 40, b"\x00\x01"],
           "nested": {"k": list(range(20)), "s": "y" * 300}}
    raw = msgpack.packb(doc, use_bin_type=True)
    obj, end = md._mp(raw, 0)
    assert obj == doc and end == len(raw)

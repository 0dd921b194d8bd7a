"""gl.device_print on AMD: records in a launcher-owned print buffer (printing.py).

The machine code runs on the simulator, which hands back the buffer the kernel wrote;
decoded by the host decoder it must give exactly the lines the NVIDIA backend's format
defines for the values the interpreter computes (as multisets: GPU order is not fixed,
but each element is printed once). Also: emit + assemble + link on every target, the
extra argument in the code-object metadata, the launcher's packing and its whole
printing launch (against a stand-in HIP whose kernel launch is the simulator), overflow,
and the disk-cache round trip of the print-site table."""
import collections
import ctypes
import struct

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backends.amd import launcher, metadata as md, printing
from gluon_trace.backends.interpreter import interpreter as interp

import amdsim

TARGETS = ["gfx90a", "gfx942", "gfx1100"]


pytestmark = pytest.mark.usefixtures("amd_toolchain")


# -- kernels ----------------------------------------------------------------------------------------

def _l1(spt=2, warps=2):
    return gl.BlockedLayout([spt], [gl.threads_per_warp()], [warps], [0])


def _l2():
    tpw = gl.threads_per_warp()
    return gl.BlockedLayout([1, 2], [tpw // 8, 8], [2, 1], [1, 0])


@gt.jit
def dtypes_1d(x_ptr, h_ptr, n, big, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=_l1())
    m = offs < n
    x = gl.load(x_ptr + offs, mask=m, other=-1.0)
    h = gl.load(h_ptr + offs, mask=m, other=0.0)
    pid = gl.program_id(0)
    gl.device_print("x=", x)                          # float32 tile
    gl.device_print("h=", h * 2.0)                     # float16 tile
    gl.device_print("i=", offs * 7 - 20 + pid)         # int32 tile
    gl.device_print("w=", offs.to(gl.int64) * big - 3)  # int64 tile, beyond 32 bits
    gl.device_print("pos ", x > 0.0)                   # bool tile
    gl.device_print("scalars ", pid, n, big, pid > 0)  # scalars of several types
    gl.device_print("s=", gl.sum(x, axis=0))          # a float scalar from a reduction


@gt.jit
def tiles_2d(x_ptr, M, N, BM: gl.constexpr, BN: gl.constexpr):
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, _l2()))
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, _l2()))
    r2 = gl.expand_dims(rows, 1)
    c2 = gl.expand_dims(cols, 0)
    m = (r2 < M) & (c2 < N)
    x = gl.load(x_ptr + r2 * N + c2, mask=m, other=0)
    gl.device_print("x", x)                            # 2-D int32
    gl.device_print("neg", x < 0)                      # 2-D bool
    gl.device_print("rowsum", gl.sum(x, axis=1))       # a slice layout: copies in many lanes
    gl.device_print("col", cols)                       # 1-D slice of a 2-D layout


@gt.jit
def loop_and_branch(x_ptr, n, k, BLOCK: gl.constexpr):
    offs = gl.arange(0, BLOCK, layout=_l1(1, 1))
    acc = gl.load(x_ptr + offs, mask=offs < n, other=0.0)
    for i in gl.range(0, k):
        acc = acc * 0.5 + i.to(gl.float32)
        gl.device_print("it ", i)
        gl.device_print("acc", acc)
    with gl.if_(gl.program_id(0) == 1):
        gl.device_print("then", acc + 1.0)
    with gl.else_():
        gl.device_print("else", offs)


# -- the interpreter's values, in the NVIDIA backend's line format -------------------------------------

def _c(x) -> str:
    x = np.asarray(x)
    if x.dtype.kind == "f":
        return "%f" % float(x)
    return "%d" % int(x)


def nvidia_lines(prints) -> list:
    """One line per element, as backends/nvidia/printing.py formats them."""
    out = []
    for pid, prefix, vals in prints:
        head = f"pid ({pid[0]}, {pid[1]}, {pid[2]}) {prefix}"
        for v in vals:
            v = np.asarray(v)
            if v.ndim == 0:
                out.append(head + _c(v))
                continue
            for idx in np.ndindex(v.shape):
                out.append(f"{head}[{', '.join(map(str, idx))}]: {_c(v[idx])}")
    return out


def interpreter_prints(kernel, args, grid, cx, nw, monkeypatch) -> list:
    seen = []

    def record(p, op, *vals):
        seen.append((p.pid, op.attrs["prefix"], [np.array(v) for v in vals]))
    monkeypatch.setitem(interp.RULES, "print", record)
    kernel[grid](*args, **cx, num_warps=nw, backend="interpreter")
    monkeypatch.undo()
    return seen


def amd_lines(kernel, args, grid, cx, nw, target, records=4096):
    tk = kernel.trace(*args, **cx, num_warps=nw, target=target)
    sim = amdsim.simulate(tk, target, grid, args, print_records=records)
    ck = tk.compile(target)
    return printing.decode(sim.print_bytes, ck.extra["print_sites"]), ck


def check(kernel, make_args, grid, cx, nw, target, monkeypatch):
    want = nvidia_lines(interpreter_prints(kernel, make_args(), grid, cx, nw, monkeypatch))
    (got, lost), _ = amd_lines(kernel, make_args(), grid, cx, nw, target)
    assert lost == 0
    c_got, c_want = collections.Counter(got), collections.Counter(want)
    assert c_got == c_want, (f"missing {sorted(c_want - c_got)[:5]}, "
                             f"unexpected {sorted(c_got - c_want)[:5]}")
    return got


def _dtypes_args():
    r = np.random.default_rng(21)
    n = 13
    return [r.standard_normal(n).astype(np.float32), r.standard_normal(n).astype(np.float16), n,
            -(2**37) - 5]


@pytest.mark.parametrize("target", TARGETS)
def test_scalars_and_1d_tiles_of_each_dtype(target, monkeypatch):
    got = check(dtypes_1d, _dtypes_args, (2,), dict(BLOCK=16), 2, target, monkeypatch)
    assert sum(ln.startswith("pid (1, 0, 0) w=[") for ln in got) == 16
    assert "pid (0, 0, 0) scalars 13" in got


@pytest.mark.parametrize("target", TARGETS)
def test_2d_tiles_and_replicated_layouts(target, monkeypatch):
    M, N = 5, 7

    def args():
        return [np.random.default_rng(22).integers(-100, 100, M * N).astype(np.int32), M, N]
    got = check(tiles_2d, args, (1,), dict(BM=8, BN=8), 2, target, monkeypatch)
    assert sum(ln.startswith("pid (0, 0, 0) rowsum[") for ln in got) == 8  # once per element


@pytest.mark.parametrize("target", TARGETS)
def test_prints_in_a_loop_and_under_if(target, monkeypatch):
    def args():
        return [np.random.default_rng(23).standard_normal(20).astype(np.float32), 20, 3]
    got = check(loop_and_branch, args, (2,), dict(BLOCK=32), 1, target, monkeypatch)
    assert {f"pid (0, 0, 0) it {i}" for i in range(3)} <= set(got)
    assert any(ln.startswith("pid (1, 0, 0) then[") for ln in got)
    assert not any(ln.startswith("pid (1, 0, 0) else[") for ln in got)


def test_overflow_drops_and_counts_records(monkeypatch, capsys):
    want = nvidia_lines(interpreter_prints(dtypes_1d, _dtypes_args(), (2,), dict(BLOCK=16), 2,
                                           monkeypatch))
    (got, lost), ck = amd_lines(dtypes_1d, _dtypes_args(), (2,), dict(BLOCK=16), 2, "gfx942",
                                records=25)
    assert len(got) == 25 and lost == len(want) - 25
    assert not collections.Counter(got) - collections.Counter(want)  # the kept ones are right
    printing.report(got, lost, "dtypes_1d")
    cap = capsys.readouterr()
    assert cap.out.count("\n") == 25
    assert f"{lost} device_print records lost in dtypes_1d, print buffer full" in cap.err


@gt.jit
def narrow_and_pointers(p_ptr, c_ptr, u_ptr):
    offs = gl.arange(0, 8, layout=_l1(4, 1))  # 8 elements over a whole wave: many copies
    gl.device_print("c", gl.load(c_ptr + offs))
    gl.device_print("u", gl.load(u_ptr + offs))
    gl.device_print("p", p_ptr + offs)


def test_narrow_integers_and_pointers(monkeypatch):
    def args():
        return [np.zeros(8, np.float32), np.arange(-4, 4, dtype=np.int8),
                np.arange(250, 258).astype(np.uint8)]
    prints = interpreter_prints(narrow_and_pointers, args(), (1,), {}, 1, monkeypatch)
    want = nvidia_lines([(pid, pre, vals) for pid, pre, vals in prints if pre != "p"])
    (got, lost), _ = amd_lines(narrow_and_pointers, args(), (1,), {}, 1, "gfx942")
    assert lost == 0 and sorted(ln for ln in got if " p[" not in ln) == sorted(want)
    base = 1 << 36  # the simulator's first buffer (p_ptr)
    assert sorted(ln for ln in got if " p[" in ln) == sorted(
        f"pid (0, 0, 0) p[{i}]: 0x{base + 4 * i:x}" for i in range(8))


# -- assembly, metadata, packing --------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_emit_assemble_link_and_metadata(target):
    specs = [gl.pointer(gl.float32), gl.pointer(gl.float16), gl.int32, gl.int64]
    tk = dtypes_1d.trace(*specs, BLOCK=16, num_warps=2, target=target)
    ck = tk.compile(target)
    km = launcher.kernel_meta(ck.binary, tk.graph.name)
    pa = launcher.print_arg(km)
    names = [a.get(".name") for a in km[".args"] if not a[".value_kind"].startswith("hidden")]
    assert names == ["x_ptr", "h_ptr", "n", "big", md.PRINT_ARG]  # after the user's arguments
    assert (pa[".offset"], pa[".size"], pa[".value_kind"]) == (32, 8, "global_buffer")
    assert min(a[".offset"] for a in km[".args"] if a[".value_kind"].startswith("hidden")) == 40
    assert [a[0] for a in ck.arg_layout] == ["x_ptr", "h_ptr", "n", "big"]
    assert len(ck.extra["print_sites"]) == 10  # one site per printed value
    assert ck.extra["print_sites"][0] == ("x=", "float32", (16,))
    assert ck.extra["print_sites"][5] == ("scalars ", "int32", ())


def test_kernels_without_print_have_no_print_argument():
    from amd_corpus import add_kernel
    tk = add_kernel.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), gl.pointer(gl.float32),
                          gl.int32, BLOCK=256, target="gfx942")
    ck = tk.compile("gfx942")
    assert launcher.print_arg(launcher.kernel_meta(ck.binary, tk.graph.name)) is None
    assert "print_sites" not in ck.extra and "__gt_print_buffer" not in ck.asm


def test_print_sites_survive_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path))
    specs = [gl.pointer(gl.int32), gl.int32, gl.int32]
    first = tiles_2d.trace(*specs, BM=8, BN=8, num_warps=2, target="gfx942").compile("gfx942")
    again = tiles_2d.trace(*specs, BM=8, BN=8, num_warps=2, target="gfx942").compile("gfx942")
    assert not first.extra["cached"] and again.extra["cached"]
    assert again.extra["print_sites"] == first.extra["print_sites"] == [
        ("x", "int32", (8, 8)), ("neg", "int1", (8, 8)), ("rowsum", "int32", (8,)),
        ("col", "int32", (8,))]
    assert again.extra["print_buffer_bytes"] == printing.buffer_bytes(printing.DEFAULT_RECORDS)


def test_packing_puts_the_print_buffer_where_the_metadata_says():
    specs = [gl.pointer(gl.float32), gl.pointer(gl.float16), gl.int32, gl.int64]
    tk = dtypes_1d.trace(*specs, BLOCK=16, num_warps=2, target="gfx942")
    km = launcher.kernel_meta(tk.compile("gfx942").binary, tk.graph.name)
    values = [0x7000_0000, 0x7100_0000, 13, 2**40]
    buf = launcher.pack_args(km, tk.graph, values, print_buffer=0x7F12_3456_7800)
    assert struct.unpack_from("<Q", buf, launcher.print_arg(km)[".offset"])[0] == 0x7F12_3456_7800
    assert struct.unpack_from("<q", buf, 24)[0] == 2**40
    moved = dict(km, **{".args": [dict(a) for a in km[".args"]]})
    launcher.print_arg(moved)[".offset"] = 120  # a layout only the metadata knows
    buf = launcher.pack_args(moved, tk.graph, values, print_buffer=0xABC0)
    assert struct.unpack_from("<Q", buf, 120)[0] == 0xABC0
    loc = gt.errors.user_location()  # THE LAUNCH LINE
    with pytest.raises(gt.LaunchError) as e:
        launcher.pack_args(km, tk.graph, values, loc)
    assert "gl.device_print" in str(e.value) and "THE LAUNCH LINE" in str(e.value)


# -- the launcher's printing launch, with the simulator standing in for the GPU -------------------

class SimHip:
    """The few hip-python calls a printing launch makes, over the simulator's memory."""

    def __init__(self, target, graph, code):
        self.mem = amdsim.Memory()
        self.t, self.g, self.e = target, graph, code
        self.syncs = self.mallocs = 0

    def hipMalloc(self, n):
        self.mallocs += 1
        return 0, self.mem.add(np.zeros(n, np.uint8))

    def hipFree(self, p):
        return (0,)

    def hipMemcpyHtoD(self, dst, src, n):
        b, o = self.mem._loc(dst, n)
        b[o:o + n] = np.frombuffer(ctypes.string_at(src, n), np.uint8)
        return (0,)

    def hipMemcpyDtoH(self, dst, src, n):
        b, o = self.mem._loc(src, n)
        ctypes.memmove(dst, b[o:o + n].tobytes(), n)
        return (0,)

    def hipStreamSynchronize(self, s):
        self.syncs += 1
        return (0,)

    def hipModuleLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shm, stream, params, extra):
        from gluon_trace.backends.amd.target import TARGETS
        words = (ctypes.c_void_p * 5).from_address(extra)
        size = ctypes.c_size_t.from_address(words[3]).value
        kernarg = bytearray(ctypes.string_at(words[1], size))
        km = launcher.kernel_meta(self.ck.binary, self.g.name)
        kernarg += bytes(km[".kernarg_segment_size"] - len(kernarg))
        for h in km[".args"]:
            if h[".value_kind"].startswith("hidden_block_count_"):
                struct.pack_into("<I", kernarg, h[".offset"], (gx, gy, gz)["xyz".index(h[".value_kind"][-1])])
        t = TARGETS[self.t]
        sim = amdsim.Sim(self.e.code, t, t.wave, self.e.lds, bytes(kernarg), self.mem,
                         self.g.num_warps, self.e.vgprs)
        sim.run((gx, gy, gz))
        return (0,)


def test_the_launcher_prints_after_a_synchronous_launch(monkeypatch, capsys):
    from gluon_trace.backends.amd.compiler import lower
    target = "gfx1100"
    args = _dtypes_args()
    want = nvidia_lines(interpreter_prints(dtypes_1d, args, (2,), dict(BLOCK=16), 2, monkeypatch))
    monkeypatch.setenv("GLUON_TRACE_PRINT_RECORDS", "40")
    tk = dtypes_1d.trace(*args, BLOCK=16, num_warps=2, target=target)
    ck = tk.compile(target)
    assert ck.extra["print_buffer_bytes"] == printing.buffer_bytes(40)
    hip = SimHip(target, tk.graph, lower(tk.graph, target))
    hip.ck = ck
    rt = object.__new__(launcher.HipRuntime)
    rt.hip, rt.modules = hip, {}
    rt.print_buf = (0, 0)
    rt.print_lock = __import__("threading").Lock()
    monkeypatch.setattr(rt, "function", lambda binary, name: "fn")
    x = hip.mem.add(args[0])
    h = hip.mem.add(args[1])
    capsys.readouterr()
    for _ in range(2):  # the buffer is reused and reset between launches
        rt.launch(ck, tk.graph, (2, 1, 1), [x, h, args[2], args[3]])
        out = capsys.readouterr()
        lines = out.out.splitlines()
        assert len(lines) == 40 and not collections.Counter(lines) - collections.Counter(want)
        assert f"{len(want) - 40} device_print records lost in dtypes_1d" in out.err
    assert hip.syncs == 2 and hip.mallocs == 1


# -- the host decoder ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,lo,hi,text", [
    ("float32", 0x3FC00000, 0, "1.500000"), ("float16", 0xC0200000, 0, "-2.500000"),
    ("bfloat16", 0x7F800000, 0, "inf"), ("float64", 0, 0xBFF00000, "-1.000000"),
    ("float32", 0xFFC00000, 0, "-nan"), ("int32", 0xFFFFFFFB, 0, "-5"),
    ("uint32", 0xFFFFFFFB, 0, "4294967291"), ("int8", 0xFFFFFF80, 0, "-128"),
    ("uint8", 0xFF, 0, "255"), ("int16", 0x8000, 0, "-32768"),
    ("int64", 0xFFFFFFFE, 0xFFFFFFFF, "-2"), ("uint64", 0xFFFFFFFE, 0xFFFFFFFF, str(2**64 - 2)),
    ("int1", 1, 0, "1"), ("int1", 0, 0, "0"), ("ptr_float32", 0x5000, 0x7F, "0x7f00005000"),
])
def test_values_format_as_printf_does(dtype, lo, hi, text):
    assert printing.format_value(dtype, lo, hi) == text


def test_decode_layout_and_bad_headers():
    sites = [("v=", "int32", (2, 4)), ("n=", "int64", ())]
    recs = struct.pack("<8I", 0, 6, 0xFFFFFFFF, 0, 3, 1, 0, printing.MAGIC)
    recs += struct.pack("<8I", 1, 0, 7, 1, 0, 0, 2, printing.MAGIC)
    raw = struct.pack("<IIII", 2, 10, printing.RECORD_BYTES, printing.MAGIC) + recs
    assert printing.decode(raw, sites) == (["pid (3, 1, 0) v=[1, 2]: -1", "pid (0, 0, 2) n=4294967303"], 0)
    with pytest.raises(ValueError, match="not ours"):
        printing.decode(b"\0" * 16, sites)
    with pytest.raises(ValueError, match="holds fewer"):
        printing.decode(raw[:-4], sites)


@pytest.mark.gpu
def test_device_print_on_an_amd_gpu(capfd):
    try:
        launcher.runtime()
    except gt.LaunchError as e:
        pytest.skip(f"no ROCm runtime or AMD GPU: {e}")
    torch = pytest.importorskip("torch")
    if not getattr(torch.version, "hip", None):
        pytest.skip("torch is not a ROCm build")
    x = torch.arange(16, dtype=torch.float32, device="cuda") * 0.5
    h = x.to(torch.float16)
    dtypes_1d[(2,)](x, h, 16, 3, BLOCK=16, num_warps=2)
    out = capfd.readouterr().out
    assert "pid (1, 0, 0) x=[3]: 1.500000" in out and "pid (0, 0, 0) scalars 16" in out
    assert out.count(" x=[") == 32 and out.count("scalars 16") == 2

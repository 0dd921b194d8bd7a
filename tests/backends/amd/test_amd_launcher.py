"""The launcher packs kernel arguments from the code object's metadata; checked here
byte by byte without a GPU. Launching itself needs ROCm (skipped with the reason)."""
import struct

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import dtypes as dt
from gluon_trace import language as gl
from gluon_trace.backends.amd import launcher
from gluon_trace.backends.amd.assembler import find_toolchain


class DeviceArray:
    """Stands in for a device tensor: only __cuda_array_interface__."""

    def __init__(self, addr, typestr="<f4", n=1024, strides=None):
        self.__cuda_array_interface__ = {"data": (addr, False), "shape": (n,), "strides": strides,
                                         "typestr": typestr, "version": 3}


@gt.jit
def many_args(out, n, alpha, big, h, flag, u8, idx, bf, d):
    lay = gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0])
    offs = gl.arange(0, gl.threads_per_warp(), layout=lay)
    v = alpha * n.to(gl.float32) + big.to(gl.float32) + h.to(gl.float32) + u8.to(gl.float32)
    v = v + bf.to(gl.float32) + d.to(gl.float32) + flag.to(gl.float32)
    gl.store(out + offs, v + gl.load(idx + offs).to(gl.float32))


SPECS = [gl.pointer(gl.float32), gl.int32, gl.float32, gl.int64, gl.float16, gl.int1, gl.uint8,
         gl.pointer(gl.int32), gl.bfloat16, gl.float64]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    try:
        find_toolchain()
    except gt.CompileError as e:
        pytest.skip(str(e))
    import os
    os.environ.setdefault("GLUON_TRACE_CACHE_DIR", str(tmp_path_factory.mktemp("amdcache")))
    tk = many_args.trace(*SPECS, num_warps=1, target="gfx942")
    return tk.graph, tk.compile("gfx942")


def test_packing_follows_the_code_object_metadata(compiled):
    g, ck = compiled
    km = launcher.kernel_meta(ck.binary, g.name)
    values = [DeviceArray(0x7F00_0000_1000), -5, 1.5, 2**40 + 3, 0.25, True, 200,
              0x1234_5000, 3.0, -2.5]
    buf = launcher.pack_args(km, g, values)
    args = {a[".name"]: a for a in km[".args"] if ".name" in a}
    assert len(buf) == max(a[".offset"] + a[".size"] for a in args.values())

    def at(name, fmt):
        a = args[name]
        assert struct.calcsize(fmt) == a[".size"], name
        return struct.unpack_from(fmt, buf, a[".offset"])[0]
    assert at("out", "<Q") == 0x7F00_0000_1000
    assert at("n", "<i") == -5
    assert at("alpha", "<f") == 1.5
    assert at("big", "<q") == 2**40 + 3
    assert at("h", "<e") == 0.25
    assert at("flag", "<B") == 1
    assert at("u8", "<B") == 200
    assert at("idx", "<Q") == 0x1234_5000
    assert at("bf", "<H") == int(dt.f32_to_bf16_bits(np.float32(3.0)))
    assert at("d", "<d") == -2.5
    # the hidden arguments are not ours to pack: the runtime fills them from the metadata
    assert all(a[".offset"] >= len(buf) for a in km[".args"]
               if a[".value_kind"].startswith("hidden"))


def test_packing_uses_metadata_offsets_not_the_emitters(compiled):
    g, ck = compiled
    km = launcher.kernel_meta(ck.binary, g.name)
    moved = dict(km, **{".args": [dict(a) for a in km[".args"]]})
    for a in moved[".args"]:
        if a.get(".name") == "n":
            a[".offset"] = 200  # a layout only the metadata knows
    values = [DeviceArray(16), 7, 1.0, 1, 1.0, False, 1, 32, 1.0, 1.0]
    buf = launcher.pack_args(moved, g, values)
    assert struct.unpack_from("<i", buf, 200)[0] == 7


def test_packing_errors_name_the_argument():
    g = many_args.trace(*SPECS, num_warps=1, target="gfx942").graph
    km = {".args": [{".name": n, ".offset": 8 * k, ".size": v.type.dtype.itemsize,
                     ".value_kind": "global_buffer" if v.type.dtype.is_ptr else "by_value"}
                    for k, (n, v) in enumerate(zip(g.arg_names, g.args))]}
    ok = [DeviceArray(16), 7, 1.0, 1, 1.0, False, 1, 32, 1.0, 1.0]
    launcher.pack_args(km, g, ok)
    bad = list(ok)
    bad[0] = np.zeros(4, np.float32)
    with pytest.raises(gt.ArgumentError, match="`out` is a host numpy array"):
        launcher.pack_args(km, g, bad)
    bad = list(ok)
    bad[6] = 300
    with pytest.raises(gt.ArgumentError, match="`u8` = 300 does not fit in uint8"):
        launcher.pack_args(km, g, bad)
    with pytest.raises(gt.LaunchError, match="takes 10 arguments, got 9"):
        launcher.pack_args(km, g, ok[:9])
    from gluon_trace.errors import SourceLoc
    here = SourceLoc(__file__, 1, "caller")
    bad = list(ok)
    bad[0] = DeviceArray(16, typestr="<i4")
    with pytest.raises(gt.ArgumentError, match="`out` holds <i4 elements, but the kernel was traced with a "
                                               "pointer to float32") as e:
        launcher.pack_args(km, g, bad, loc=here)
    assert e.value.loc is here
    bad[0] = DeviceArray(16, strides=(8,))  # every other float: `out + offs` assumes dense
    with pytest.raises(gt.ArgumentError, match="`out` is not contiguous .shape .1024,., byte strides .8,.") as e:
        launcher.pack_args(km, g, bad, loc=here)
    assert e.value.loc is here
    bad[0] = DeviceArray(16, strides=(4,))  # explicit C-order strides are fine
    launcher.pack_args(km, g, bad)


def _rocm_available():
    try:
        launcher.runtime()
        return True
    except gt.LaunchError:
        return False


def test_launch_without_rocm_is_a_clear_error_at_the_call_line():
    if _rocm_available():
        pytest.skip("a ROCm runtime is present")
    out = DeviceArray(0x1000)
    x = DeviceArray(0x2000)
    from amd_corpus import add_kernel
    with pytest.raises(gt.LaunchError) as e:
        add_kernel[(1,)](out, x, x, 10, BLOCK=1024, target="gfx942")  # THE CALL
    msg = str(e.value)
    assert "ROCm" in msg and "THE CALL" in msg


@pytest.mark.gpu
def test_add_on_an_amd_gpu():
    if not _rocm_available():
        pytest.skip("no ROCm runtime (libamdhip64.so) or no AMD GPU here")
    torch = pytest.importorskip("torch")
    if not getattr(torch.version, "hip", None):
        pytest.skip("torch is not a ROCm build")
    from amd_corpus import add_kernel
    a = torch.randn(5000, device="cuda")
    b = torch.randn(5000, device="cuda")
    out = torch.empty_like(a)
    add_kernel[(5,)](out, a, b, 5000, BLOCK=1024)
    torch.testing.assert_close(out, a + b * 2)

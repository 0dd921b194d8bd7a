"""gfx942's fp8 formats (FNUZ: float8e4b8 = E4M3 bias 8, float8e5b16 = E5M2 bias 16) in the
language and the interpreter: every bit pattern decoded as ml_dtypes does, conversions from
f32/f16/bf16 rounded once to nearest even with overflow to NaN (the hardware cvt without
clamp; ml_dtypes' casts do the same), no negative zero, through memory both ways; and the MMA
type rules that keep the FNUZ and OCP formats apart on each vendor."""
import ml_dtypes
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import dtypes as dt
from gluon_trace import fp8
from gluon_trace import language as gl

FNUZ = [("float8e4b8", ml_dtypes.float8_e4m3fnuz, 240.0), ("float8e5b16", ml_dtypes.float8_e5m2fnuz, 57344.0)]


def edge_values(rng, top):
    """Random magnitudes over every binade a format has (subnormals and overflow included),
    the round-off boundaries at the top, and the specials."""
    n = 4096
    x = rng.standard_normal(n) * np.exp2(rng.integers(-24, 20, n))
    ties = np.array([top, top * 1.03, top * (1 + 1 / 32), top * (1 + 1 / 16), top * 2])
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1e-30, 1e-30, 1e30, -1e30])
    return np.concatenate([x, ties, -ties, special]).astype(np.float32)


@pytest.mark.parametrize("name, ml, top", FNUZ)
def test_every_code_decodes_as_ml_dtypes(name, ml, top):
    codes = np.arange(256, dtype=np.uint8)
    ref = codes.view(ml).astype(np.float32)
    got = fp8.decode(codes, name)
    assert np.array_equal(got, ref, equal_nan=True)
    assert np.isnan(got[0x80]) and np.isnan(got).sum() == 1      # 0x80: the only NaN
    assert not np.isinf(got).any() and np.nanmax(got) == top and not np.signbit(got[got == 0]).any()


@pytest.mark.parametrize("name, ml, top", FNUZ)
def test_encoding_matches_ml_dtypes(rng, name, ml, top):
    x = edge_values(rng, top)
    assert np.array_equal(fp8.encode(x, name), x.astype(ml).view(np.uint8))
    assert np.array_equal(fp8.round_to(x, name), x.astype(ml).astype(np.float32), equal_nan=True)
    over = np.abs(x) > top * (1 + 2.0 ** -(fp8.FORMATS[name][0] + 1))
    assert (fp8.encode(x[over], name) == 0x80).all()           # overflow is NaN, not the max
    assert not np.signbit(fp8.round_to(np.float32([-0.0, -1e-30]), name)).any()


def test_dtypes_map_both_ways():
    assert dt.from_numpy(ml_dtypes.float8_e4m3fnuz) is gl.float8e4b8
    assert dt.from_numpy(ml_dtypes.float8_e5m2fnuz) is gl.float8e5b16
    assert dt.from_torch("torch.float8_e4m3fnuz") is gl.float8e4b8
    assert dt.from_torch("torch.float8_e5m2fnuz") is gl.float8e5b16
    assert gl.float8e4b8.is_fp8 and gl.float8e4b8.np_storage == np.uint8 and gl.float8e5b16.itemsize == 1


@gt.jit
def convert_kernel(out_ptr, bits_ptr, in_ptr, F8: gl.constexpr, SRC: gl.constexpr, N: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([4], [gl.threads_per_warp()], [gl.num_warps()], [0])
    offs = gl.arange(0, N, layout=L)
    x = gl.load(in_ptr + offs).to(SRC)
    q = x.to(F8)
    gl.store(bits_ptr + offs, q)                 # the fp8 bytes in memory
    gl.store(out_ptr + offs, q.to(gl.float32))   # and the value they hold


@pytest.mark.parametrize("src", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name, ml, top", FNUZ)
def test_conversion_through_memory_on_the_interpreter(rng, name, ml, top, src):
    n = 4096
    x = edge_values(rng, top)[:n]
    x[:16] = edge_values(rng, top)[-16:]
    wide = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[src]
    with np.errstate(over="ignore"):
        xs = x.astype(wide).astype(np.float32)          # the value .to(SRC) holds: one rounding later
    out = np.full(n, 7.0, np.float32)
    bits = np.full(n, 0x5A, np.uint8).view(ml)
    convert_kernel[(1,)](out, bits, x, F8=getattr(gl, name), SRC=getattr(gl, src), N=n,
                         backend="interpreter")
    assert np.array_equal(bits.view(np.uint8), xs.astype(ml).view(np.uint8))
    assert np.array_equal(out, xs.astype(ml).astype(np.float32), equal_nan=True)
    assert np.isnan(out).any() and (out == 0).any()     # the inputs reached overflow and underflow


@gt.jit
def widen_kernel(out16_ptr, out32_ptr, in_ptr, N: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([2], [gl.threads_per_warp()], [gl.num_warps()], [0])
    offs = gl.arange(0, N, layout=L)
    q = gl.load(in_ptr + offs)
    gl.store(out16_ptr + offs, q.to(gl.float16))
    gl.store(out32_ptr + offs, q.to(gl.float32))


@pytest.mark.parametrize("name, ml, top", FNUZ)
def test_loaded_codes_widen_exactly(rng, name, ml, top):
    codes = rng.permutation(np.arange(256, dtype=np.uint8)).view(ml)
    o16 = np.full(256, 3.0, np.float16)
    o32 = np.full(256, 3.0, np.float32)
    widen_kernel[(1,)](o16, o32, codes, N=256, backend="interpreter")
    ref = codes.astype(np.float32)
    assert np.array_equal(o32, ref, equal_nan=True)
    assert np.array_equal(o16.astype(np.float32), ref, equal_nan=True)   # every FNUZ value is an f16


# -- the MMA type rules: which vendor takes which fp8 -------------------------------------------------

def _mma_error(target, f8):
    from gluon_trace.language.amd.cdna3 import mfma
    from gluon_trace.language.nvidia.ampere import mma_v2

    @gt.jit
    def k(p, F8: gl.constexpr, NV: gl.constexpr):
        if NV:
            acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, 8])
        else:
            acc_l: gl.constexpr = gl.AMDMFMALayout(version=3, instr_shape=[32, 32, 16], transposed=False,
                                                   warps_per_cta=[2, 2])
        kw: gl.constexpr = 4 if NV else 8
        a = gl.zeros([64, 32], F8, gl.DotOperandLayout(0, acc_l, k_width=kw))
        b = gl.zeros([32, 64], F8, gl.DotOperandLayout(1, acc_l, k_width=kw))
        acc = gl.zeros([64, 64], gl.float32, acc_l)
        if NV:
            acc = mma_v2(a, b, acc)
        else:
            acc = mfma(a, b, acc)
    nv = target.startswith("sm_")
    with pytest.raises(gt.TraceError) as e:
        k.trace(gl.pointer(gl.float32), F8=getattr(gl, f8), NV=nv, target=target)
    k.trace(gl.pointer(gl.float32), F8=getattr(gl, fp8.NVIDIA_NAME.get(f8, f8) if nv else fp8.AMD_NAME.get(f8, f8)),
            NV=nv, target=target)       # the right format traces
    return str(e.value)


@pytest.mark.parametrize("f8", ["float8e4b8", "float8e5b16"])
def test_nvidia_mma_refuses_fnuz(f8):
    msg = _mma_error("sm_90a", f8)
    want = fp8.NVIDIA_NAME[f8]
    assert f"use gl.{want}" in msg and "no NVIDIA instruction" in msg and "test_fp8_fnuz.py" in msg


@pytest.mark.parametrize("f8", ["float8e4nv", "float8e5"])
def test_gfx942_mfma_refuses_ocp(f8):
    msg = _mma_error("gfx942", f8)
    assert f"use gl.{fp8.AMD_NAME[f8]}" in msg and "FNUZ" in msg and "test_fp8_fnuz.py" in msg

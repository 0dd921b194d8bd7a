import numpy as np
import pytest

from gluon_trace import dtypes as dt


@pytest.mark.parametrize("a,b,want", [
    (dt.int32, dt.int32, dt.int32),
    (dt.int1, dt.int8, dt.int8),
    (dt.int8, dt.int1, dt.int8),
    (dt.int32, dt.float16, dt.float16),
    (dt.float16, dt.bfloat16, dt.float32),
    (dt.float16, dt.float32, dt.float32),
    (dt.float64, dt.float32, dt.float64),
    (dt.int8, dt.int32, dt.int32),
    (dt.uint32, dt.int32, dt.uint32),
    (dt.int32, dt.uint32, dt.uint32),
    (dt.int64, dt.uint32, dt.int64),
])
def test_promotion(a, b, want):
    assert dt.promote(a, b) == want
    assert dt.promote(b, a) == want


def test_literals_are_weak():
    assert dt.literal_type(3, dt.int8) == dt.int8
    assert dt.literal_type(3, dt.float16) == dt.float16
    assert dt.literal_type(3.0, dt.int32) == dt.float32
    assert dt.literal_type(3.0, dt.bfloat16) == dt.bfloat16
    assert dt.literal_type(1 << 40, None) == dt.int64


def test_bf16_rounding_is_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -3.14159, np.inf, np.nan], np.float32)
    r = dt.round_bf16(x)
    # bf16 keeps 8 significand bits: 1 + 2^-8 is a tie that rounds to even (1.0)
    assert r[0] == 1.0 and r[1] == 1.0 and r[2] == np.float32(1.015625)
    assert abs(r[3] - -3.140625) < 1e-6
    assert np.isinf(r[4]) and np.isnan(r[5])
    bits = dt.f32_to_bf16_bits(x[:4])
    assert np.array_equal(dt.bf16_bits_to_f32(bits), r[:4])


def test_pointer_type():
    p = dt.pointer(dt.float16)
    assert p.is_ptr and p.element == dt.float16 and str(p) == "ptr<float16>"
    with pytest.raises(TypeError):
        dt.pointer(p)

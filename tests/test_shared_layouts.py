"""Tests for gluon_trace.shared_layouts: every layout's offsets against a plain loop that
applies the layout's definition element by element, the linear forms against the
offsets, the NVMMA swizzles against the PTX ISA's swizzle modes, the bank-conflict model
against counts worked out by hand, and every invalid layout against a clear LayoutError
naming this file."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gluon_trace import dtypes as dt
from gluon_trace.errors import LayoutError
from gluon_trace.layouts import BlockedLayout
from gluon_trace.shared_layouts import (
    MBarrierLayout, NVMMASharedLayout, PaddedSharedLayout, SharedLinearLayout, SwizzledSharedLayout, bit_fields,
)

SETTINGS = settings(max_examples=80, deadline=None)
pow2 = st.sampled_from([1, 2, 4, 8, 16])


def _raises(fn, *words):
    with pytest.raises(LayoutError) as info:
        fn()
    text = str(info.value)
    assert __file__ in text, text  # names the user's line: this test file
    for w in words:
        assert w in text, (w, text)
    return text


def _ref_swizzled(vec, per_phase, max_phase, order, shape):
    """Row r of the 2-D view (order[0] fastest, order[1] rows) stores column c at
    ((c // vec) ^ phase) * vec + c % vec, phase = (r // per_phase) % max_phase, the XOR
    taken modulo the row length; other dims stack whole tiles in order."""
    out = np.full(shape, -1, dtype=np.int64)
    col = order[0]
    row = order[1] if len(order) > 1 else None
    ncols = shape[col]
    nrows = shape[row] if row is not None else 1
    for idx in np.ndindex(*shape):
        c = idx[col]
        r = idx[row] if row is not None else 0
        phase = (r // per_phase) % max_phase
        groups = max(ncols // vec, 1)
        if vec >= ncols:
            sc = c  # the whole row is one group: nothing to swap
        else:
            sc = (((c // vec) ^ phase) % groups) * vec + c % vec
        stack, stride = 0, 1
        for d in order[2:]:
            stack += idx[d] * stride
            stride *= shape[d]
        out[idx] = stack * ncols * nrows + r * ncols + sc
    return out


@st.composite
def swizzled_cases(draw):
    rank = draw(st.integers(1, 3))
    order = draw(st.permutations(range(rank)))
    shape = tuple(draw(st.sampled_from([1, 2, 4, 8, 16, 32])) for _ in range(rank))
    return draw(pow2), draw(pow2), draw(pow2), list(order), shape, draw(st.sampled_from([8, 16, 32, 64]))


@SETTINGS
@given(swizzled_cases())
def test_swizzled_offsets_match_reference(case):
    vec, per_phase, max_phase, order, shape, bits = case
    lay = SwizzledSharedLayout(vec, per_phase, max_phase, order)
    offs = lay.offsets(shape, bits)
    assert offs.dtype == np.int64 and offs.shape == shape and not offs.flags.writeable
    np.testing.assert_array_equal(offs, _ref_swizzled(vec, per_phase, max_phase, order, shape))
    assert sorted(offs.reshape(-1).tolist()) == list(range(math.prod(shape)))  # a bijection
    assert lay.alloc_elements(shape, bits) == math.prod(shape)
    _check_linear_inverts(lay, shape, bits)


def _check_linear_inverts(lay, shape, bits):
    lin = lay.to_linear(shape, bits)
    assert isinstance(lin, SharedLinearLayout) and lin.shape == tuple(shape)
    coords = lin.coords()  # row i: the coordinate at offset i
    offs = lay.offsets(shape, bits)
    np.testing.assert_array_equal(offs[tuple(coords.T)], np.arange(math.prod(shape)))
    np.testing.assert_array_equal(lin.offsets(shape, bits), offs)  # the same map as a layout


def test_swizzled_small_example_by_hand():
    # vec=2, max_phase=4: row 1 swaps pairs (0,1)<->(2,3) and (4,5)<->(6,7); row 2 XORs groups with 2
    offs = SwizzledSharedLayout(2, 1, 4, [1, 0]).offsets((4, 8), 16)
    assert offs[1].tolist() == [10, 11, 8, 9, 14, 15, 12, 13]
    assert offs[2].tolist() == [20, 21, 22, 23, 16, 17, 18, 19]
    # order [0, 1]: dim 0 is contiguous, so the swizzle moves along dim 0
    t = SwizzledSharedLayout(2, 1, 4, [0, 1]).offsets((8, 4), 16)
    np.testing.assert_array_equal(t, offs.T)


def test_offsets_are_cached_and_read_only():
    lay = SwizzledSharedLayout(8, 1, 8, [1, 0])
    a = lay.offsets((64, 64), 16)
    assert a is lay.offsets([64, 64], 16)
    with pytest.raises(ValueError):
        a[0, 0] = 5


def test_mbarrier_layout_is_trivial():
    lay = MBarrierLayout()
    assert isinstance(lay, SwizzledSharedLayout)
    assert (lay.vec, lay.per_phase, lay.max_phase, lay.order) == (1, 1, 1, (0,))
    assert lay.offsets((4,), 64).tolist() == [0, 1, 2, 3]
    assert repr(lay) == "MBarrierLayout()" and lay == MBarrierLayout() and hash(lay) == hash(MBarrierLayout())


# --------------------------------------------------------------------------- NVMMA
def _ref_nvmma(swizzle, bits, shape, transposed):
    """The PTX ISA swizzle modes, written per element: the contiguous dim is cut into
    column blocks of `swizzle` bytes (16, or the whole row if narrower, if 0), each block holds every row; inside a block,
    the 16-byte chunk c of row r is stored at chunk c ^ ((r // (128 // swizzle)) % (swizzle // 16))
    -- 128B: c ^ (r % 8); 64B: c ^ ((r // 2) % 4); 32B: c ^ ((r // 4) % 2). Holds for a
    buffer of >= 8 rows (the pattern's repeat) aligned to it."""
    ebytes = bits // 8
    rank = len(shape)
    col, row = (rank - 2, rank - 1) if transposed else (rank - 1, rank - 2)
    rows, cols = shape[row], shape[col]
    width = swizzle or min(16, cols * ebytes)  # unswizzled rows narrower than 16 bytes are packed
    per_block = width // ebytes
    lead_dims = [d for d in range(rank) if d not in (col, row)]
    out = np.empty(shape, dtype=np.int64)
    for idx in np.ndindex(*shape):
        r, c = idx[row], idx[col]
        block, within = divmod(c, per_block)
        chunk, byte_in_chunk = divmod(within * ebytes, 16)
        if swizzle:
            chunk ^= (r // (128 // swizzle)) % (swizzle // 16)
        byte = block * rows * width + r * width + chunk * 16 + byte_in_chunk
        stack = 0
        for d in lead_dims:  # leading dims row-major
            stack = stack * shape[d] + idx[d]
        out[idx] = stack * rows * cols + byte // ebytes
    return out


@st.composite
def nvmma_cases(draw):
    swizzle = draw(st.sampled_from([0, 32, 64, 128]))
    bits = draw(st.sampled_from([8, 16, 32, 64]))
    transposed = draw(st.booleans())
    rank = draw(st.integers(2, 3))
    min_cols = max(swizzle * 8 // bits, 1)
    cols = draw(st.sampled_from([c for c in (1, 2, 4, 8, 16, 32, 64, 128, 256) if c >= min_cols]))
    rows = draw(st.sampled_from([8, 16, 32, 64]))
    inner = (rows, cols) if not transposed else (cols, rows)
    shape = tuple(draw(st.sampled_from([1, 2, 4])) for _ in range(rank - 2)) + inner
    return swizzle, bits, transposed, shape


@SETTINGS
@given(nvmma_cases())
def test_nvmma_matches_ptx_swizzle_modes(case):
    swizzle, bits, transposed, shape = case
    lay = NVMMASharedLayout(swizzle, bits, rank=len(shape), transposed=transposed)
    offs = lay.offsets(shape, bits)
    np.testing.assert_array_equal(offs, _ref_nvmma(swizzle, bits, shape, transposed))
    assert sorted(offs.reshape(-1).tolist()) == list(range(math.prod(shape)))
    _check_linear_inverts(lay, shape, bits)


def test_nvmma_128b_fp16_rows_by_hand():
    offs = NVMMASharedLayout(128, 16).offsets((16, 64), 16)
    # row 1 (byte 128..255): chunk 0 (elements 0..7) goes to chunk 1, chunk 1 to chunk 0
    assert offs[1, :16].tolist() == list(range(72, 80)) + list(range(64, 72))
    # row 7: chunk c -> c ^ 7, so element 0 sits in the last chunk of the row
    assert offs[7, 0] == 7 * 64 + 56
    # row 8 starts the pattern again
    assert offs[8, :8].tolist() == list(range(512, 520))


def test_nvmma_wide_rows_use_column_blocks():
    # fp16 [8, 128]: 256 bytes per row = two 128-byte column blocks, each holding all 8 rows
    offs = NVMMASharedLayout(128, 16).offsets((8, 128), 16)
    assert offs[0, 64] == 8 * 64 and offs[1, 64] == 8 * 64 + 64 + 8


def test_nvmma_transposed_is_the_transpose():
    a = NVMMASharedLayout(64, 16).offsets((32, 64), 16)
    b = NVMMASharedLayout(64, 16, transposed=True).offsets((64, 32), 16)
    np.testing.assert_array_equal(a, b.T)


@pytest.mark.parametrize("shape,dtype,transposed,want", [
    ([128, 64], dt.float16, False, 128),   # 128 bytes per row
    ([64, 32], dt.float16, False, 64),
    ([64, 16], dt.float16, False, 32),
    ([64, 8], dt.float16, False, 0),       # 16 bytes: no swizzle
    ([64, 32], dt.float32, False, 128),
    ([128, 128], dt.int8, False, 128),
    ([64, 16], dt.float32, True, 128),     # transposed: dim 0 (64 x 4 bytes) is contiguous
    ([4, 64], dt.float16, False, 0),       # fewer than 8 rows
    ([64], dt.float16, False, 0),          # rank 1
])
def test_get_default_for(shape, dtype, transposed, want):
    lay = NVMMASharedLayout.get_default_for(shape, dtype, transposed=transposed)
    assert lay == NVMMASharedLayout(want, dtype.bits, len(shape), transposed)
    lay.verify(shape, dtype.bits)  # what it picks always fits


def test_get_default_for_accepts_constexpr():
    from gluon_trace.language.core import constexpr
    lay = NVMMASharedLayout.get_default_for([constexpr(128), constexpr(64)], dt.float16)
    assert lay.swizzle_byte_width == 128
    assert NVMMASharedLayout(constexpr(64), constexpr(16)).swizzle_byte_width == 64


def test_reprs_are_short_and_stable():
    assert repr(NVMMASharedLayout(128, 16)) == \
        "NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)"
    assert repr(NVMMASharedLayout(32, 8, 3, transposed=True)) == \
        "NVMMASharedLayout(swizzle_byte_width=32, element_bitwidth=8, rank=3, transposed=True)"
    assert repr(SwizzledSharedLayout(8, 1, 8, [1, 0])) == \
        "SwizzledSharedLayout(vec=8, per_phase=1, max_phase=8, order=[1, 0])"
    assert repr(PaddedSharedLayout.with_identity_for([[32, 4]], [8, 32], [1, 0])).startswith(
        "PaddedSharedLayout([32:+4], ")


# --------------------------------------------------------------------------- padded
def test_padded_matches_gluon_example():
    # [[2, 1], [4, 2]] over an identity order: e0 e1 p e2 e3 p p p e4 e5 p e6 e7 ...
    lay = PaddedSharedLayout.with_identity_for([[2, 1], [4, 2]], [8], [0])
    assert lay.offsets((8,), 32).tolist() == [0, 1, 3, 4, 8, 9, 11, 12]
    assert lay.alloc_elements((8,), 32) == 13


def test_padded_with_row_permutation():
    # shape [8, 4], [[8, 1]], bases: columns, then rows 2, 4, 1 (Gluon's documented example)
    lay = PaddedSharedLayout([[8, 1]], [[0, 1], [0, 2], [2, 0], [4, 0], [1, 0]], [], [8, 4])
    offs = lay.offsets((8, 4), 16)
    assert offs[0].tolist() == [0, 1, 2, 3] and offs[2].tolist() == [4, 5, 6, 7]
    assert offs[4, 0] == 9 and offs[1, 0] == 18 and offs[7, 3] == 34
    assert lay.alloc_elements((8, 4), 16) == 35


@SETTINGS
@given(st.sampled_from([(16, 32), (64, 64), (8, 128), (32,)]), st.data())
def test_padded_offsets_match_reference(shape, data):
    order = list(data.draw(st.permutations(range(len(shape)))))
    pairs = data.draw(st.lists(st.tuples(st.sampled_from([4, 8, 16, 32, 64, 128]), pow2), min_size=1,
                               max_size=3, unique_by=lambda p: p[0]))
    lay = PaddedSharedLayout.with_identity_for([list(p) for p in pairs], shape, order)
    offs = lay.offsets(shape, 16)
    for idx in np.ndindex(*shape):
        linear, stride = 0, 1
        for d in order:
            linear += idx[d] * stride
            stride *= shape[d]
        assert offs[idx] == linear + sum((linear // i) * p for i, p in pairs)
    n = math.prod(shape)
    assert lay.alloc_elements(shape, 16) == n + sum(((n - 1) // i) * p for i, p in pairs)
    assert lay.to_linear(shape, 16).offsets(shape, 16).max() == n - 1  # the linear part: no padding


# --------------------------------------------------------------------------- banks
def test_banks_of_fp16_rows():
    # unswizzled fp16 [4, 64]: two elements per 4-byte bank, a row of 64 halves covers all 32 banks
    banks = SwizzledSharedLayout(1, 1, 1, [1, 0]).banks((4, 64), 16)
    assert banks[0, :4].tolist() == [0, 0, 1, 1] and banks[1, 0] == 0 and banks[0, 63] == 31
    # 128B NVMMA: row 1's first 8 halves sit in the second 16-byte chunk, banks 4..7
    assert NVMMASharedLayout(128, 16).banks((8, 64), 16)[1, :8].tolist() == [4, 4, 5, 5, 6, 6, 7, 7]


# --------------------------------------------------------------------------- errors
def test_swizzled_errors():
    _raises(lambda: SwizzledSharedLayout(3, 1, 1, [1, 0]), "vec=3", "power of two")
    _raises(lambda: SwizzledSharedLayout(1, 0, 1, [1, 0]), "per_phase=0")
    _raises(lambda: SwizzledSharedLayout(1, 1, 6, [1, 0]), "max_phase=6")
    _raises(lambda: SwizzledSharedLayout(1, 1, 1, [1, 1]), "not a permutation")
    _raises(lambda: SwizzledSharedLayout(1, 1, 1, []), "not a permutation")
    _raises(lambda: SwizzledSharedLayout(1, 1, 1, [0, "a"]), "list of ints")
    _raises(lambda: SwizzledSharedLayout(1, 1, 1, [1, 0], cga_layout=[[1, 0]]), "cga_layout=[]")
    lay = SwizzledSharedLayout(8, 1, 8, [1, 0])
    _raises(lambda: lay.verify((64,), 16), "rank 2", "[64]")
    _raises(lambda: lay.verify((64, 48), 16), "power of two")
    _raises(lambda: lay.offsets((64, 48), 16), "power of two")
    _raises(lambda: lay.verify((64, 64), 0), "element_bits")


def test_nvmma_errors():
    _raises(lambda: NVMMASharedLayout(96, 16), "swizzle_byte_width=96", "0, 32, 64, 128")
    _raises(lambda: NVMMASharedLayout(128, 12), "element_bitwidth=12")
    _raises(lambda: NVMMASharedLayout(128, 16, rank=0), "rank=0")
    _raises(lambda: NVMMASharedLayout(64, 8, fp4_padded=True), "fp4_padded", "128")
    _raises(lambda: NVMMASharedLayout(128, 16, rank=1, transposed=True), "transposed")
    _raises(lambda: NVMMASharedLayout(128, 16, cga_layout=[[0, 1]]), "cga_layout=[]")
    lay = NVMMASharedLayout(128, 16)
    _raises(lambda: lay.verify((64, 32), 16), "64 bytes", "swizzle_byte_width=64")
    _raises(lambda: lay.verify((64, 64), 32), "16-bit", "element_bitwidth=32")
    _raises(lambda: lay.verify((2, 64, 64), 16), "rank 2")
    _raises(lambda: NVMMASharedLayout(128, 8, fp4_padded=True).verify((64, 128), 8), "not supported")
    _raises(lambda: NVMMASharedLayout.get_default_for([64, 64], "float16"), "gl dtype")


def test_padded_errors():
    _raises(lambda: PaddedSharedLayout([], [[1]], [], [2]), "non-empty")
    _raises(lambda: PaddedSharedLayout([[3, 1]], [[1]], [], [2]), "interval=3")
    _raises(lambda: PaddedSharedLayout([[4, 3]], [[1]], [], [2]), "padding=3")
    _raises(lambda: PaddedSharedLayout([[4, 1], [4, 2]], [[1]], [], [2]), "repeats an interval")
    _raises(lambda: PaddedSharedLayout([[4, 1]], [[1]], []), "shape=")
    _raises(lambda: PaddedSharedLayout([[4, 1]], [[2]], [], [2]), "not a coordinate inside")
    _raises(lambda: PaddedSharedLayout([[4, 1]], [[1], [1]], [], [4]), "exactly once")
    _raises(lambda: PaddedSharedLayout.with_identity_for([[4, 1]], [8, 6], [1, 0]), "power-of-two")
    lay = PaddedSharedLayout.with_identity_for([[4, 1]], [8, 8], [1, 0])
    _raises(lambda: lay.verify((8, 16), 16), "written for shape [8, 8]")


def test_shared_linear_layout_errors_and_shape():
    assert SharedLinearLayout([[0, 1], [1, 0], [0, 2]]).shape == (2, 4)
    _raises(lambda: SharedLinearLayout([[0, 1], [0, 1]]), "exactly once")
    _raises(lambda: SharedLinearLayout([]), "offset_bases")


# --------------------------------------------------------------------------- wavefronts
PLAIN = SwizzledSharedLayout(1, 1, 1, [1, 0])  # row-major, no swizzle
NV128 = NVMMASharedLayout(128, 16)


def test_row_per_lane_fp16_conflicts_without_swizzle_and_not_with_128b():
    # 128x64 fp16, row-major: a row is 128 bytes, so element (r, c) is in bank (c // 2) % 32.
    # size_per_thread [1, 8] with lanes down dim 0: each lane reads 16 bytes (chunk 0 of its
    # row) -- the ldmatrix-like operand read. 16-byte accesses go 8 lanes per phase; the 8
    # lanes read rows r..r+7, chunk 0 => all in banks 0..3 => 8 words per bank => 8
    # wavefronts per phase, 4 phases => 32 per access; ideal: 8 lanes x 16 B = 128 B = 1 per
    # phase => 4. Tile 128x8 per CTA, 8 repeats along dim 1 => 8 accesses x 4 warps.
    reg = BlockedLayout([1, 8], [32, 1], [4, 1], [1, 0])
    plain = PLAIN.wavefronts(reg, (128, 64), 16, num_warps=4)
    assert plain.vector == 8 and plain.counts.shape == (8, 4)
    assert (plain.counts == 32).all() and (plain.ideal == 4).all()
    assert plain.total == 1024 and plain.ideal_total == 128 and not plain.conflict_free
    assert (plain.ways == 8).all()
    # 128B swizzle: chunk 0 of row r sits at chunk r % 8 => the 8 lanes hit 8 different chunks
    nv = NV128.wavefronts(reg, (128, 64), 16, num_warps=4)
    assert nv.vector == 8 and nv.total == nv.ideal_total == 128 and nv.conflict_free
    assert (nv.ways == 1).all()


def test_full_row_per_phase_is_conflict_free_and_two_rows_per_phase_conflict_both_ways():
    # threads_per_warp [4, 8]: a phase (8 lanes x 16 B) reads one whole 128-byte row => 1 wavefront
    wide = BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    for lay in (PLAIN, NV128):
        r = lay.wavefronts(wide, (128, 64), 16, 4)
        assert r.conflict_free and (r.counts == 4).all()
    # threads_per_warp [8, 4]: a phase reads chunks 0..3 of rows 2i and 2i+1. Unswizzled both
    # halves are banks 0..15 => 2 wavefronts per phase. The 128B swizzle maps row 2i+1's chunks
    # 0..3 to 1,0,3,2 (c ^ 1) -- the same banks -- so it conflicts too: 8 per access, ideal 4.
    narrow = BlockedLayout([1, 8], [8, 4], [4, 1], [1, 0])
    for lay in (PLAIN, NV128):
        r = lay.wavefronts(narrow, (128, 64), 16, 4)
        assert (r.counts == 8).all() and (r.ideal == 4).all()


def test_column_access_conflicts():
    # fp32 [32, 32] row-major: column 0 of every row is bank 0. Lanes down dim 0, one element
    # per access (vector_bytes=4): 32 lanes, 32 distinct words in bank 0 => 32 wavefronts
    # vs the ideal 1 (128 bytes); 32 accesses (one per column).
    col = BlockedLayout([1, 1], [32, 1], [1, 1], [0, 1])
    r = PLAIN.wavefronts(col, (32, 32), 32, num_warps=1, vector_bytes=4)
    assert r.vector == 1 and r.counts.shape == (32, 1)
    assert (r.counts == 32).all() and (r.ideal == 1).all() and (r.ways == 32).all()
    # With vectors: each lane reads 4 floats (16 B) of its row; a phase (lanes 0..7) reads
    # chunk j of rows 0..7, all in banks 4j..4j+3 => 8-way, 4 phases => 32 vs ideal 4.
    r = PLAIN.wavefronts(col, (32, 32), 32, num_warps=1)
    assert r.vector == 4 and (r.counts == 32).all() and (r.ideal == 4).all()
    # A swizzle with vec=4, max_phase=8 spreads rows 0..7 over 8 chunks: conflict-free
    r = SwizzledSharedLayout(4, 1, 8, [1, 0]).wavefronts(col, (32, 32), 32, num_warps=1)
    assert r.vector == 4 and r.conflict_free


def test_64_lane_waves_go_32_lanes_per_phase():
    # a 64-lane wave reading column 0 of fp32 [64, 64] one float at a time: two phases of 32
    # lanes, each 32 words in bank 0 => 64 wavefronts per access, ideal 2
    col = BlockedLayout([1, 1], [64, 1], [1, 1], [0, 1])
    r = PLAIN.wavefronts(col, (64, 64), 32, num_warps=1, threads_per_warp=64, vector_bytes=4)
    assert (r.counts == 64).all() and (r.ideal == 2).all()


def test_vector_width_is_what_both_layouts_allow():
    reg = BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    # the swizzle moves groups of 4 halves apart: 8-byte accesses at most
    assert SwizzledSharedLayout(4, 1, 8, [1, 0]).wavefronts(reg, (64, 64), 16, 4).vector == 4
    assert PLAIN.wavefronts(reg, (64, 64), 16, 4).vector == 8
    assert PLAIN.wavefronts(reg, (64, 64), 16, 4, vector_bytes=4).vector == 2
    # dim 0 contiguous in shared memory, registers along dim 1: no vectors
    assert SwizzledSharedLayout(1, 1, 1, [0, 1]).wavefronts(reg, (64, 64), 16, 4).vector == 1


def test_lanes_reading_one_word_share_it():
    from gluon_trace.layouts import LinearLayout
    # 32 lanes over 8 floats: lanes l and l + 8, l + 16, l + 24 read the same word => 1 wavefront
    bcast = LinearLayout((8,), (), ((1,), (2,), (4,), (0,), (0,)), ())
    r = SwizzledSharedLayout(1, 1, 1, [0]).wavefronts(bcast, (8,), 32, num_warps=1)
    assert r.total == 1 and r.ideal_total == 1 and r.conflict_free


def test_padding_removes_column_conflicts():
    # fp32 [32, 32] rows padded by one word: row r starts at bank r % 32 => column reads are free
    col = BlockedLayout([1, 1], [32, 1], [1, 1], [0, 1])
    pad = PaddedSharedLayout.with_identity_for([[32, 1]], [32, 32], [1, 0])
    r = pad.wavefronts(col, (32, 32), 32, num_warps=1, vector_bytes=4)
    assert r.conflict_free and (r.counts == 1).all()


def test_wavefront_report_pictures():
    col = BlockedLayout([1, 1], [32, 1], [1, 1], [0, 1])
    text = PLAIN.wavefronts(col, (32, 32), 32, num_warps=1, vector_bytes=4).describe()
    assert "wavefronts: 1024 (ideal 32, 32.00x)" in text and "1 element(s) (4 bytes)" in text
    assert "\n 0  #  #" in text  # 32-way shown as '#'
    free = NV128.wavefronts(BlockedLayout([1, 8], [32, 1], [4, 1], [1, 0]), (128, 64), 16, 4)
    text = free.describe()
    assert "ideal 128, 1.00x" in text
    grid = text.splitlines()[5:]  # after the summary and the column labels
    assert len(grid) == 128 and all(set(row.split()[1:]) == {"."} for row in grid)
    assert "<table" in free._repr_html_()


def test_layout_pictures():
    lay = SwizzledSharedLayout(2, 1, 4, [1, 0])
    text = lay.describe((4, 8), 32)
    lines = text.splitlines()
    i = lines.index("bank (0..31) of each element:")
    assert lines[i + 2].split() == ["0", "0", "1", "2", "3", "4", "5", "6", "7"]
    assert lines[i + 3].split() == ["1", "10", "11", "8", "9", "14", "15", "12", "13"]
    j = lines.index("element offset of each element:")
    assert lines[j + 5].split()[1:] == [str(x) for x in lay.offsets((4, 8), 32)[3]]
    assert "[1, :, :]" in SwizzledSharedLayout(1, 1, 1, [2, 1, 0]).describe((2, 2, 4), 16)
    html = NV128.html((8, 64), 16)
    assert html.count("<td") == 8 * 64 and "offset 72, bytes 144..145" in html


def test_wavefront_errors():
    reg = BlockedLayout([1, 8], [4, 8], [4, 1], [1, 0])
    _raises(lambda: PLAIN.wavefronts(reg, (64, 64), 16, num_warps=8), "num_warps=8")
    _raises(lambda: PLAIN.wavefronts(reg, (64, 64), 16, 4, vector_bytes=3), "vector_bytes=3")
    _raises(lambda: NV128.wavefronts(reg, (64, 32), 16, 4), "swizzle_byte_width=64")


def test_bit_fields_group_a_swizzled_rows_bits_into_runs():
    """f32 rows of 128 bytes in a 128-byte swizzle: row bit j lands at offset bit 7 + j (row *
    128) and, for j < 3, at 4 + j too (the 16-byte chunk it XORs): two fields (the whole row at
    bit 7, its low three bits at bit 4), not seven bits."""
    images = [(1 << (7 + j)) | ((1 << (4 + j)) if j < 3 else 0) for j in range(4)]
    assert bit_fields(images) == {(0, 4): [7], (0, 3): [4]}
    # a column: bits 0..4 at offset bits 2..6 (4-byte elements), one field
    assert bit_fields([1 << (2 + j) for j in range(5)]) == {(0, 5): [2]}
    assert bit_fields([]) == {}

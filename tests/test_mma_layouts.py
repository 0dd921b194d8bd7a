"""MMA register layouts against their instructions' documented fragment maps.

The reference maps below are transcribed from the ISA documents' fragment tables (PTX ISA
"Matrix Fragments for mma.m16n8k*" and "wgmma .m64nNk*" figures; AMD CDNA3 ISA MFMA
input/output layouts; AMD RDNA3 ISA WMMA layouts), written per (lane, register) and
independently of the base-vector construction the module uses. The multi-warp tests pin the
register and warp numbering Triton's linear-layout conversion gives (register repeats along N
before M, mma.sync warps N-fastest, wgmma warps M-fastest).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gluon_trace.errors import LayoutError
from gluon_trace.layouts import BlockedLayout
from gluon_trace.mma_layouts import (AMDMFMALayout, AMDWMMALayout, DotOperandLayout, NVMMADistributedLayout,
                                     expected_k_width, mma_instr_shape, warp_tile)


def _table(ll, ref, warps=(0,)):
    """Compare every (warp, lane, reg) of ``ll`` with ``ref(warp, lane, reg) -> (row, col)``."""
    for w, l, r in itertools.product(warps, range(ll.num_lanes), range(ll.num_regs)):
        assert ll.coord(r, l, w) == ref(w, l, r), (w, l, r)


def _gt(lane):  # PTX: groupID = laneid >> 2, threadID_in_group = laneid % 4
    return lane >> 2, lane & 3


# ------------------------------------------------------------------ PTX fragment tables
def c_m16n8(lane, i):  # accumulator c0..c3 of mma.m16n8k{8,16,32}
    g, t = _gt(lane)
    return (g + 8 * (i >= 2), 2 * t + (i & 1))


def a_m16n8k16(lane, i):  # a0..a7, 16-bit
    g, t = _gt(lane)
    return (g + 8 * (i in (2, 3, 6, 7)), 2 * t + (i & 1) + 8 * (i >= 4))


def b_m16n8k16(lane, i):  # b0..b3
    g, t = _gt(lane)
    return (2 * t + (i & 1) + 8 * (i >= 2), g)


def a_m16n8k8_tf32(lane, i):  # a0..a3
    g, t = _gt(lane)
    return (g + 8 * (i in (1, 3)), t + 4 * (i >= 2))


def b_m16n8k8_tf32(lane, i):  # b0, b1
    g, t = _gt(lane)
    return (t + 4 * i, g)


def a_m16n8k32_i8(lane, i):  # a0..a15
    g, t = _gt(lane)
    return (g + 8 * (4 <= i < 8 or i >= 12), 4 * t + (i & 3) + 16 * (i >= 8))


def b_m16n8k32_i8(lane, i):  # b0..b7
    g, t = _gt(lane)
    return (4 * t + (i & 3) + 16 * (i >= 4), g)


def d_wgmma(warp, lane, i):  # d_i of wgmma .m64nNk*, warp = warp index in the warpgroup
    g, t = _gt(lane)
    return (16 * warp + g + 8 * (i % 4 >= 2), 8 * (i // 4) + 2 * t + (i & 1))


V2 = NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])


def test_mma_sync_accumulator_matches_ptx():
    ll = V2.to_linear((16, 8), num_warps=1, threads_per_warp=32)
    assert ll.num_regs == 4
    _table(ll, lambda w, l, r: c_m16n8(l, r))


@pytest.mark.parametrize("k_width, k, a_ref, b_ref", [
    (2, 16, a_m16n8k16, b_m16n8k16),
    (1, 8, a_m16n8k8_tf32, b_m16n8k8_tf32),
    (4, 32, a_m16n8k32_i8, b_m16n8k32_i8),
])
def test_mma_sync_operands_match_ptx(k_width, k, a_ref, b_ref):
    a = DotOperandLayout(0, V2, k_width).to_linear((16, k), num_warps=1, threads_per_warp=32)
    b = DotOperandLayout(1, V2, k_width).to_linear((k, 8), num_warps=1, threads_per_warp=32)
    assert a.num_regs == 16 * k // 32 and b.num_regs == 8 * k // 32
    _table(a, lambda w, l, r: a_ref(l, r))
    _table(b, lambda w, l, r: b_ref(l, r))


@pytest.mark.parametrize("n", [8, 64, 256])
def test_wgmma_accumulator_matches_ptx(n):
    layout = NVMMADistributedLayout([3, 0], [4, 1], [16, n, 16])
    ll = layout.to_linear((64, n), num_warps=4, threads_per_warp=32)
    assert ll.num_regs == n // 2
    _table(ll, lambda w, l, r: d_wgmma(w, l, r), warps=range(4))


@pytest.mark.parametrize("k_width, k, ref", [(2, 16, a_m16n8k16), (1, 8, a_m16n8k8_tf32), (4, 32, a_m16n8k32_i8)])
def test_wgmma_register_a_matches_ptx(k_width, k, ref):
    # wgmma's A register fragment is mma.m16n8k*'s A, warp w of the warpgroup on rows 16w..
    parent = NVMMADistributedLayout([3, 0], [4, 1], [16, 64, k])
    ll = DotOperandLayout(0, parent, k_width).to_linear((64, k), num_warps=4, threads_per_warp=32)
    _table(ll, lambda w, l, r: (16 * w + ref(l, r)[0], ref(l, r)[1]), warps=range(4))


def test_mma_sync_multi_warp_register_and_warp_order():
    ll = NVMMADistributedLayout([2, 0], [2, 2], [16, 8]).to_linear((64, 32))

    def ref(w, l, r):
        row, col = c_m16n8(l, r % 4)
        rep = r // 4
        wm, wn = divmod(w, 2)  # warps N-fastest
        nrep, mrep = rep % 2, rep // 2  # register repeats: N first, then M
        return (row + 16 * wm + 32 * mrep, col + 8 * wn + 16 * nrep)
    _table(ll, ref, warps=range(4))


def test_mma_sync_operand_a_multi_warp_broadcasts_over_n_warps():
    parent = NVMMADistributedLayout([2, 0], [2, 2], [16, 8])
    ll = DotOperandLayout(0, parent, 2).to_linear((64, 32))

    def ref(w, l, r):
        row, col = a_m16n8k16(l, r % 8)
        rep = r // 8
        krep, mrep = rep % 2, rep // 2  # K repeats first, then M
        return (row + 16 * (w // 2) + 32 * mrep, col + 16 * krep)
    _table(ll, ref, warps=range(4))


def test_mma_sync_operand_b_multi_warp_broadcasts_over_m_warps():
    parent = NVMMADistributedLayout([2, 0], [2, 2], [16, 8])
    ll = DotOperandLayout(1, parent, 2).to_linear((32, 32))

    def ref(w, l, r):
        row, col = b_m16n8k16(l, r % 4)
        rep = r // 4
        krep, nrep = rep % 2, rep // 2
        return (row + 16 * krep, col + 8 * (w % 2) + 16 * nrep)
    _table(ll, ref, warps=range(4))


def test_wgmma_two_warpgroups_and_repeats():
    ll = NVMMADistributedLayout([3, 0], [8, 1], [16, 64, 16]).to_linear((256, 128))

    def ref(w, l, r):
        row, col = d_wgmma(w, l, r % 32)  # warps M-fastest: warp w owns rows 16w.. of the 128-row tile
        nrep, mrep = (r // 32) % 2, r // 64
        return (row + 128 * mrep, col + 64 * nrep)
    _table(ll, ref, warps=range(8))


def test_wgmma_warpgroups_along_n_number_m_first():
    ll = NVMMADistributedLayout([3, 0], [4, 2], [16, 32, 16]).to_linear((64, 64))

    def ref(w, l, r):
        row, col = d_wgmma(w % 4, l, r)  # warps 0..3 are warpgroup 0 (columns 0..31), 4..7 the next
        return (row, col + 32 * (w // 4))
    _table(ll, ref, warps=range(8))


# -------------------------------------------------------------- CDNA3 MFMA tables
def d_mfma32(lane, r):  # v_mfma_*_32x32x*: 16 accumulator VGPRs
    return (8 * (r // 4) + 4 * (lane // 32) + r % 4, lane % 32)


def d_mfma16(lane, r):  # v_mfma_*_16x16x*: 4 accumulator VGPRs
    return (4 * (lane // 16) + r, lane % 16)


@pytest.mark.parametrize("m, ref", [(32, d_mfma32), (16, d_mfma16)])
@pytest.mark.parametrize("transposed", [False, True])
def test_mfma_accumulator_matches_cdna3_tables(m, ref, transposed):
    layout = AMDMFMALayout(3, [m, m, 8 if m == 32 else 16], transposed, [1, 1])
    ll = layout.to_linear((m, m), num_warps=1, threads_per_warp=64)
    assert ll.num_regs == m * m // 64
    if transposed:
        _table(ll, lambda w, l, r: ref(l, r)[::-1])
    else:
        _table(ll, lambda w, l, r: ref(l, r))


@pytest.mark.parametrize("version, m, bits, k", [
    (3, 32, 16, 8), (3, 16, 16, 16),  # v_mfma_f32_32x32x8_f16, 16x16x16_f16
    (3, 32, 8, 16), (3, 16, 8, 32),   # v_mfma_i32_32x32x16_i8, 16x16x32_i8 (fp8 alike)
    (2, 32, 8, 8), (2, 16, 8, 16),    # CDNA2 v_mfma_i32_32x32x8i8, 16x16x16i8
    (3, 32, 32, 2), (3, 16, 32, 4),   # v_mfma_f32_32x32x2f32, 16x16x4f32
])
def test_mfma_operands_match_tables(version, m, bits, k):
    parent = AMDMFMALayout(version, [m, m, k], False, [1, 1])
    assert mma_instr_shape(parent, bits) == (m, m, k)
    kw = expected_k_width(parent, bits)
    groups = 64 // m  # lane groups along K
    assert kw == k // groups
    a = DotOperandLayout(0, parent, kw).to_linear((m, k), num_warps=1, threads_per_warp=64)
    b = DotOperandLayout(1, parent, kw).to_linear((k, m), num_warps=1, threads_per_warp=64)
    # A: lane % M is the row, lane group g holds K elements kw*g .. kw*g + kw - 1 (B mirrored)
    _table(a, lambda w, l, r: (l % m, kw * (l // m) + r))
    _table(b, lambda w, l, r: (kw * (l // m) + r, l % m))


def test_mfma_multi_warp_register_and_warp_order():
    ll = AMDMFMALayout(3, [32, 32, 8], False, [2, 2]).to_linear((128, 128))

    def ref(w, l, r):
        row, col = d_mfma32(l, r % 16)
        nrep, mrep = (r // 16) % 2, r // 32
        wm, wn = divmod(w, 2)
        return (row + 32 * wm + 64 * mrep, col + 32 * wn + 64 * nrep)
    _table(ll, ref, warps=range(4))


def test_mfma_tiles_per_warp():
    # a warp owns 2x2 neighbouring 16x16 tiles; registers walk its N tiles, then the N repeats
    # over the tensor, then its M tiles (Triton's order); warps step over whole tile groups
    ll = AMDMFMALayout(3, [16, 16, 16], False, [2, 2], tiles_per_warp=[2, 2]).to_linear((64, 128))
    assert ll.num_regs == 64 * 128 // (64 * 4)

    def ref(w, l, r):
        row, col = d_mfma16(l, r % 4)
        tn, nrep, tm = (r >> 2) & 1, (r >> 3) & 1, (r >> 4) & 1
        wm, wn = divmod(w, 2)
        return (row + 16 * tm + 32 * wm, col + 16 * tn + 32 * wn + 64 * nrep)
    _table(ll, ref, warps=range(4))
    a = DotOperandLayout(0, AMDMFMALayout(3, [16, 16, 16], False, [2, 2], tiles_per_warp=[2, 2]), 4)
    a_ll = a.to_linear((64, 16))
    # A follows the accumulator: warp w's rows are the rows of w's accumulator tiles
    assert _rows_of_warps(a_ll, 0) == _rows_of_warps(ll, 0)


# ---------------------------------------------------------------- RDNA3 WMMA tables
def test_wmma_accumulator_matches_rdna3_table():
    ll = AMDWMMALayout(1, False, [1, 1]).to_linear((16, 16), num_warps=1, threads_per_warp=32)
    assert ll.num_regs == 8
    _table(ll, lambda w, l, r: (2 * r + l // 16, l % 16))
    llt = AMDWMMALayout(1, True, [1, 1]).to_linear((16, 16))
    _table(llt, lambda w, l, r: (l % 16, 2 * r + l // 16))


def test_wmma_operands_replicated_in_upper_half_wave():
    parent = AMDWMMALayout(1, False, [1, 1])
    assert expected_k_width(parent, 16) == 16 and mma_instr_shape(parent, 16) == (16, 16, 16)
    a = DotOperandLayout(0, parent, 16).to_linear((16, 16), num_warps=1, threads_per_warp=32)
    b = DotOperandLayout(1, parent, 16).to_linear((16, 16), num_warps=1, threads_per_warp=32)
    _table(a, lambda w, l, r: (l % 16, r))  # lane l and l + 16 both hold row l % 16, all of K
    _table(b, lambda w, l, r: (r, l % 16))


# ------------------------------------------------------------------- dot_fma parent
def test_fma_operands_hold_all_of_k_over_the_parents_threads():
    parent = BlockedLayout([2, 2], [4, 8], [2, 2], [1, 0])
    m, n, k = 32, 64, 8
    acc = parent.to_linear((m, n)).coords()
    a = DotOperandLayout(0, parent, 1).to_linear((m, k), num_warps=4, threads_per_warp=32).coords()
    b = DotOperandLayout(1, parent, 8).to_linear((k, n)).coords()  # k_width plays no role here
    for w, l in itertools.product(range(4), range(32)):
        rows, cols = set(acc[w, l, :, 0].tolist()), set(acc[w, l, :, 1].tolist())
        assert {tuple(c) for c in a[w, l].tolist()} == set(itertools.product(sorted(rows), range(k)))
        assert {tuple(c) for c in b[w, l].tolist()} == set(itertools.product(range(k), sorted(cols)))


def test_fma_operand_register_order_follows_the_parents_order():
    # registers walk the parent's order with K's block being the whole K, then the blocks
    # repeat along the other dim (Triton's numbering); lanes/warps along K are copies
    parent = BlockedLayout([2, 2], [4, 8], [2, 2], [1, 0])
    a = DotOperandLayout(0, parent, 1).to_linear((32, 8))
    assert a.reg_bases == ((0, 1), (0, 2), (0, 4), (1, 0), (16, 0))
    assert a.lane_bases == ((0, 0),) * 3 + ((2, 0), (4, 0)) and a.warp_bases == ((0, 0), (8, 0))
    b = DotOperandLayout(1, parent, 1).to_linear((8, 64))
    assert b.reg_bases == ((0, 1), (1, 0), (2, 0), (4, 0), (0, 32))
    assert b.lane_bases == ((0, 2), (0, 4), (0, 8), (0, 0), (0, 0)) and b.warp_bases == ((0, 16), (0, 0))


# --------------------------------------------------------------------- properties
def _rows_of_warps(ll, dim):
    c = ll.coords()
    return [set(c[w, :, :, dim].ravel().tolist()) for w in range(ll.num_warps)]


def _pow2s(lo, hi):
    return st.integers(lo, hi).map(lambda e: 1 << e)


@st.composite
def accumulators(draw):
    kind = draw(st.sampled_from(["v2", "v3", "mfma", "wmma"]))
    if kind == "v2":
        return NVMMADistributedLayout([2, 0], [draw(_pow2s(0, 2)), draw(_pow2s(0, 2))], [16, 8])
    if kind == "v3":
        n = draw(_pow2s(3, 8))
        return NVMMADistributedLayout((3, 0), [draw(_pow2s(2, 3)), draw(_pow2s(0, 1))],
                                      [16, n, draw(st.sampled_from([8, 16, 32]))])
    wpc = [draw(_pow2s(0, 2)), draw(_pow2s(0, 2))]
    tpw = draw(st.none() | st.tuples(_pow2s(0, 1), _pow2s(0, 1)))
    if kind == "mfma":
        m = draw(st.sampled_from([16, 32]))
        return AMDMFMALayout(draw(st.sampled_from([2, 3, 4])), [m, m], draw(st.booleans()), wpc,
                             tiles_per_warp=tpw)
    return AMDWMMALayout(1, draw(st.booleans()), wpc, tiles_per_warp=tpw)


def _check_layout(layout, shape):
    ll = layout.to_linear(shape, num_warps=layout.num_warps, threads_per_warp=layout.num_lanes)
    c = ll.coords().reshape(-1, 2)
    assert len({tuple(x) for x in c.tolist()}) == shape[0] * shape[1]  # surjective
    own = ll.coords()[0, 0]
    assert len({tuple(x) for x in own.tolist()}) == ll.num_regs  # registers independent
    assert (ll.num_lanes, ll.num_warps) == (layout.num_lanes, layout.num_warps)
    with pytest.raises(LayoutError):
        layout.to_linear(shape, num_warps=layout.num_warps * 2)
    return ll


@settings(max_examples=60, deadline=None)
@given(accumulators(), st.integers(0, 2), st.integers(0, 2), st.integers(0, 3), st.integers(0, 3))
def test_accumulators_fit_any_shape(layout, up_m, up_n, down_m, down_n):
    tm, tn = warp_tile(layout)
    for shape in [(tm << up_m, tn << up_n), (max(tm >> down_m, 1), max(tn >> down_n, 1))]:
        ll = _check_layout(layout, shape)
        if shape[0] >= tm and shape[1] >= tn:  # no copies: each element held exactly once
            assert ll.num_regs * ll.num_lanes * ll.num_warps == shape[0] * shape[1]


@settings(max_examples=60, deadline=None)
@given(accumulators(), st.sampled_from([8, 16, 32]), st.integers(0, 2), st.integers(0, 1))
def test_operands_fit_and_follow_the_accumulator(parent, bits, up_k, up_mn):
    try:
        kw = expected_k_width(parent, bits)
        _, _, k = mma_instr_shape(parent, bits)
    except LayoutError:
        assert isinstance(parent, AMDWMMALayout) and bits != 16
        return
    tm, tn = warp_tile(parent)
    m, n, k = tm << up_mn, tn << up_mn, k << up_k
    acc = parent.to_linear((m, n))
    for op in (0, 1):
        if op == 1 and isinstance(parent, NVMMADistributedLayout) and parent.is_wgmma:
            continue
        layout = DotOperandLayout(op, parent, kw)
        shape = (m, k) if op == 0 else (k, n)
        ll = _check_layout(layout, shape)
        # each warp holds the A rows (B columns) of its own accumulator block
        dim = 0 if op == 0 else 1
        assert _rows_of_warps(ll, dim) == _rows_of_warps(acc, dim)


@st.composite
def blocked_parents(draw):
    lane_bits = draw(st.integers(0, 5))
    warp_bits = draw(st.integers(0, 2))
    return BlockedLayout([draw(_pow2s(0, 2)), draw(_pow2s(0, 2))], [1 << lane_bits, 32 >> lane_bits],
                         [1 << warp_bits, 4 >> warp_bits], draw(st.sampled_from([[1, 0], [0, 1]])))


@settings(max_examples=40, deadline=None)
@given(blocked_parents(), _pow2s(0, 7), _pow2s(0, 7), _pow2s(0, 5), _pow2s(0, 3))
def test_fma_operands_fit_any_shape(parent, m, n, k, k_width):
    acc = parent.to_linear((m, n)).coords()
    for op, shape in ((0, (m, k)), (1, (k, n))):
        ll = _check_layout(DotOperandLayout(op, parent, k_width), shape)
        dim = 0 if op == 0 else 1
        c = ll.coords()
        for w, l in itertools.product(range(ll.num_warps), range(32)):  # same rows/cols as acc, all K
            assert set(c[w, l, :, dim].tolist()) == set(acc[w, l, :, dim].tolist())
            assert set(c[w, l, :, 1 - dim].tolist()) == set(range(k))


def test_wgmma_b_operand_is_not_a_register_layout():
    text = _raises(lambda: DotOperandLayout(1, NVMMADistributedLayout([3, 0], [4, 1], [16, 64, 16]), 2),
                   "wgmma reads B from shared memory", "NVMMASharedLayout")
    assert "allocate_shared_memory" in text


# -------------------------------------------------------------- helpers for op rules
def test_instr_shapes_k_widths_and_warp_tiles():
    v3 = NVMMADistributedLayout([3, 0], [8, 1], [16, 128, 16])
    assert [mma_instr_shape(V2, b) for b in (16, 32, 8)] == [(16, 8, 16), (16, 8, 8), (16, 8, 32)]
    assert [expected_k_width(V2, b) for b in (16, 32, 8)] == [2, 1, 4]
    assert mma_instr_shape(v3, 8) == (64, 128, 32) and expected_k_width(v3, 16) == 2
    assert warp_tile(v3) == (128, 128) and warp_tile(NVMMADistributedLayout([2, 0], [2, 4], [16, 8])) == (32, 32)
    mfma = AMDMFMALayout(3, [16, 16, 16], True, [4, 1], tiles_per_warp=[1, 2])
    assert warp_tile(mfma) == (64, 32) and expected_k_width(mfma, 16) == 4
    assert mma_instr_shape(BlockedLayout([1, 1], [4, 8], [4, 1], [1, 0]), 32) == (1, 1, 1)


def test_layouts_hash_and_compare_by_value():
    a = NVMMADistributedLayout([3, 0], [4, 1], [16, 64, 16], ctas_per_cga=[1, 1])
    b = NVMMADistributedLayout((3, 0), (4, 1), (16, 64, 16), ctas_per_cga=(1, 1))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    m1 = AMDMFMALayout(3, [32, 32, 8], 1, [2, 2])
    m2 = AMDMFMALayout(3, (32, 32, 8), True, (2, 2), tiles_per_warp=[1, 1])
    assert m1 == m2 and hash(DotOperandLayout(0, m1, 4)) == hash(DotOperandLayout(0, m2, 4))
    assert AMDWMMALayout(1, False, [2, 2]) == AMDWMMALayout(1, False, [2, 2], instr_shape=[16, 16, 16])


@pytest.mark.parametrize("layout, first_row", [
    (V2, ["T0:R0", "T0:R1", "T1:R0", "T1:R1"]),
    (AMDMFMALayout(3, [16, 16, 16], False, [1, 1]), ["T0:R0", "T1:R0", "T2:R0"]),
    (AMDWMMALayout(1, False, [1, 1]), ["T0:R0", "T1:R0", "T2:R0"]),
    (DotOperandLayout(0, V2, 2), ["T0:R0", "T0:R1", "T1:R0"]),
    (DotOperandLayout(0, AMDWMMALayout(1, False, [1, 1]), 16), ["T0:R0+1", "T0:R1+1"]),
])
def test_describe_shows_owners(layout, first_row):
    text = layout.describe()
    assert text.startswith(type(layout).__name__)
    row0 = text.splitlines()[3].split()
    assert row0[0] == "0" and row0[1:1 + len(first_row)] == first_row, text
    assert "<table" in layout._repr_html_()


# ----------------------------------------------------------------- wrong arguments
def _raises(fn, *words):
    with pytest.raises(LayoutError) as err:
        fn()
    text = str(err.value)
    assert "test_mma_layouts.py" in text, text
    for w in words:
        assert w in text, text
    return text


@pytest.mark.parametrize("kwargs, words", [
    (dict(version=[1, 0]), ["version=[1, 0]", "[2, 0]", "[3, 0]"]),
    (dict(version="v2"), ["version must be a list of ints"]),
    (dict(warps_per_cta=[3, 1]), ["warps_per_cta=[3, 1]", "powers of two"]),
    (dict(warps_per_cta=[4, 1, 1]), ["needs 2 entries"]),
    (dict(instr_shape=[16, 16]), ["instr_shape=[16, 8]"]),
    (dict(version=[3, 0], instr_shape=[16, 64]), ["[16, N, K]"]),
    (dict(version=[3, 0], instr_shape=[16, 64, 12]), ["[16, N, K]", "K = 16"]),
    (dict(version=[3, 0], instr_shape=[16, 260, 16]), ["multiple of 8 in [8, 256]"]),
    (dict(version=[3, 0], instr_shape=[16, 24, 16]), ["N = 24", "use N = 8, 16, 32"]),
    (dict(version=[3, 0], warps_per_cta=[2, 1], instr_shape=[16, 64, 16]), ["not a multiple of 4"]),
    (dict(version=[3, 0], warps_per_cta=[2, 2], instr_shape=[16, 64, 16]), ["along M", "write [4, 1]"]),
    (dict(cga_layout=[[1, 0]]), ["multi-CTA", "cga_layout=[]"]),
    (dict(ctas_per_cga=[2, 1]), ["ctas_per_cga=[2, 1]", "multi-CTA"]),
])
def test_nvmma_errors(kwargs, words):
    args = dict(version=[2, 0], warps_per_cta=[4, 1], instr_shape=[16, 8]) | kwargs
    _raises(lambda: NVMMADistributedLayout(**args), *words)


@pytest.mark.parametrize("kwargs, words", [
    (dict(version=1), ["version=1", "3 (CDNA3, gfx942)"]),
    (dict(instr_shape=[8, 8, 4]), ["[32, 32, K] or [16, 16, K]"]),
    (dict(instr_shape=[32, 32, 6]), ["instr_shape=[32, 32, 6]"]),
    (dict(element_bitwidth=64), ["f64 MFMA is not supported"]),
    (dict(element_bitwidth=16), ["element_bitwidth=16", "use 32"]),
    (dict(warps_per_cta=[2, 2, 1]), ["needs 2 entries"]),
    (dict(tiles_per_warp=[3, 1]), ["tiles_per_warp=[3, 1]", "powers of two"]),
    (dict(cga_layout=[[0, 1]]), ["multi-CTA"]),
])
def test_mfma_errors(kwargs, words):
    args = dict(version=3, instr_shape=[32, 32, 8], transposed=False, warps_per_cta=[2, 2]) | kwargs
    _raises(lambda: AMDMFMALayout(**args), *words)


@pytest.mark.parametrize("kwargs, words", [
    (dict(version=2), ["only 1 (RDNA3, gfx1100)"]),
    (dict(instr_shape=[16, 16, 32]), ["instr_shape=[16, 16, 16]"]),
    (dict(warps_per_cta=[3, 1]), ["powers of two"]),
])
def test_wmma_errors(kwargs, words):
    args = dict(version=1, transposed=False, warps_per_cta=[2, 2]) | kwargs
    _raises(lambda: AMDWMMALayout(**args), *words)


@pytest.mark.parametrize("args, words", [
    ((2, V2, 2), ["operand_index=2", "0 (A, [M, K])"]),
    ((0, None, 2), ["parent must be the accumulator's 2-D distributed layout"]),
    ((0, BlockedLayout([1], [32], [4], [0]), 1), ["parent must be the accumulator's 2-D"]),
    ((0, V2, 3), ["k_width=3", "power of two"]),
    ((0, V2, True), ["k_width=True"]),
])
def test_dot_operand_errors(args, words):
    _raises(lambda: DotOperandLayout(*args), *words)


def test_mfma_instr_shape_k_picks_the_instruction():
    cdna4 = AMDMFMALayout(4, [32, 32, 16], False, [1, 1])  # v_mfma_f32_32x32x16_f16 (gfx950)
    assert mma_instr_shape(cdna4, 16) == (32, 32, 16) and expected_k_width(cdna4, 16) == 8
    assert mma_instr_shape(AMDMFMALayout(4, [16, 16], False, [1, 1]), 16) == (16, 16, 16)
    text = _raises(lambda: mma_instr_shape(AMDMFMALayout(3, [32, 32, 8], False, [1, 1]), 8),
                   "version 3 has no 32x32x8 MFMA for 8-bit operands", "instr_shape=[32, 32, 16]")
    assert "layout written at" in text


def test_helper_errors_name_the_caller():
    _raises(lambda: mma_instr_shape(V2, 64), "64-bit", "16-bit (f16, bf16)")
    _raises(lambda: expected_k_width(AMDMFMALayout(3, [16, 16, 16], False, [1, 1]), 64), "16x16 MFMA", "64-bit")
    _raises(lambda: expected_k_width(AMDWMMALayout(1, False, [1, 1]), 8), "RDNA3 WMMA takes 16-bit")


def test_verify_names_the_warp_size():
    mfma = AMDMFMALayout(3, [32, 32, 8], False, [2, 2])
    _raises(lambda: mfma.to_linear((64, 64), num_warps=4, threads_per_warp=32), "64 threads per warp")
    _raises(lambda: DotOperandLayout(0, mfma, 4).to_linear((64, 8), num_warps=8),
            "DotOperandLayout of AMDMFMALayout warps_per_cta=[2, 2] has 4 warps")


def test_larger_shape_reuses_the_tile_numbering():
    # repeats only append register bases: the first tile's registers keep their numbers
    layout = NVMMADistributedLayout([2, 0], [2, 2], [16, 8])
    small, big = layout.to_linear((32, 16)), layout.to_linear((64, 64))
    assert big.reg_bases[:len(small.reg_bases)] == small.reg_bases
    assert np.array_equal(big.coords()[:, :, :small.num_regs], small.coords())

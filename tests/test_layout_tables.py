"""MMA and shared layouts against the documented tables, written here from the ISA texts
(PTX ISA "Matrix Fragments for mma.m16n8k*" and "wgmma .m64nNk*"; the CDNA3 and RDNA3 ISA
guides' MFMA/WMMA register tables; PTX "Tensor copy swizzling modes"), and properties over
random parameters with hypothesis."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gluon_trace import language as gl
from gluon_trace.errors import LayoutError
from gluon_trace.shared_layouts import NVMMASharedLayout, PaddedSharedLayout, SwizzledSharedLayout


def coords_of(layout, shape, warps, lanes):
    lin = layout.to_linear(shape, warps, lanes)
    return lin.coords()  # [warp, lane, reg, dim]


# -- NVIDIA -------------------------------------------------------------------------------------

def test_mma_m16n8k16_accumulator():
    lay = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])
    c = coords_of(lay, (16, 8), 1, 32)
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        for i in range(4):
            assert tuple(c[0, lane, i]) == (g + 8 * (i >= 2), 2 * t + (i & 1))


@pytest.mark.parametrize("bits, k", [(16, 16), (8, 32), (32, 8)])
def test_mma_operand_fragments(bits, k):
    acc = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])
    kw = 32 // bits
    a = coords_of(gl.DotOperandLayout(0, acc, k_width=kw), (16, k), 1, 32)
    b = coords_of(gl.DotOperandLayout(1, acc, k_width=kw), (k, 8), 1, 32)
    per = 32 // bits   # elements per 32-bit register
    for lane in range(32):
        g, t = lane >> 2, lane % 4
        for i in range(a.shape[2]):
            reg, e = i // per, i % per
            if bits == 32:   # m16n8k8 tf32: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)
                want = (g + 8 * (reg % 2), t + 4 * (reg // 2))
            else:            # a0/a1: row g, a2/a3: row g+8; a4.. repeat at k + k/2
                want = (g + 8 * (reg % 2), t * per + e + (k // 2) * (reg // 2))
            assert tuple(a[0, lane, i]) == want, (lane, i)
        for i in range(b.shape[2]):
            reg, e = i // per, i % per
            want_k = t * per + e + (k // 2) * reg if bits != 32 else t + 4 * reg
            assert tuple(b[0, lane, i]) == (want_k, g), (lane, i)


@pytest.mark.parametrize("n", [8, 64, 128, 256])
def test_wgmma_accumulator(n):
    lay = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])
    c = coords_of(lay, (64, n), 4, 32)
    for w in range(4):
        for lane in range(32):
            g, t = lane >> 2, lane % 4
            for i in range(n // 2):
                want = (16 * w + g + 8 * ((i >> 1) & 1), (i >> 2) * 8 + 2 * t + (i & 1))
                assert tuple(c[w, lane, i]) == want


def test_mma_v2_warps_are_numbered_along_n_first():
    lay = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[2, 2], instr_shape=[16, 8])
    c = coords_of(lay, (32, 16), 4, 32)
    assert [tuple(c[w, 0, 0]) for w in range(4)] == [(0, 0), (0, 8), (16, 0), (16, 8)]


# -- AMD ------------------------------------------------------------------------------------------

def test_mfma_32x32_accumulator_and_operands():
    acc = gl.amd.AMDMFMALayout(version=3, instr_shape=[32, 32, 8], transposed=False, warps_per_cta=[1, 1])
    d = coords_of(acc, (32, 32), 1, 64)
    a = coords_of(gl.DotOperandLayout(0, acc, k_width=4), (32, 8), 1, 64)
    b = coords_of(gl.DotOperandLayout(1, acc, k_width=4), (8, 32), 1, 64)
    for lane in range(64):
        for r in range(16):   # v_mfma_f32_32x32x8f16: D[8*(r//4) + 4*(lane//32) + r%4][lane%32]
            assert tuple(d[0, lane, r]) == (8 * (r // 4) + 4 * (lane // 32) + r % 4, lane % 32)
        for r in range(4):    # A[lane%32][4*(lane//32) + r], B[4*(lane//32) + r][lane%32]
            assert tuple(a[0, lane, r]) == (lane % 32, 4 * (lane // 32) + r)
            assert tuple(b[0, lane, r]) == (4 * (lane // 32) + r, lane % 32)
    t = coords_of(gl.amd.AMDMFMALayout(version=3, instr_shape=[32, 32, 8], transposed=True,
                                       warps_per_cta=[1, 1]), (32, 32), 1, 64)
    assert (t[..., ::-1] == d).all()


def test_mfma_16x16_accumulator():
    acc = gl.amd.AMDMFMALayout(version=3, instr_shape=[16, 16, 16], transposed=False, warps_per_cta=[1, 1])
    d = coords_of(acc, (16, 16), 1, 64)
    for lane in range(64):
        for r in range(4):
            assert tuple(d[0, lane, r]) == (4 * (lane // 16) + r, lane % 16)


def test_wmma_rdna3_accumulator_and_replicated_operands():
    acc = gl.amd.AMDWMMALayout(version=1, transposed=False, warps_per_cta=[1, 1])
    d = coords_of(acc, (16, 16), 1, 32)
    a = coords_of(gl.DotOperandLayout(0, acc, k_width=16), (16, 16), 1, 32)
    for lane in range(32):
        for r in range(8):
            assert tuple(d[0, lane, r]) == (2 * r + lane // 16, lane % 16)
        for k in range(16):   # lanes 16..31 hold the same A rows as lanes 0..15
            assert tuple(a[0, lane, k]) == (lane % 16, k)


# -- properties ----------------------------------------------------------------------------------

@given(st.sampled_from([(2, 0), (3, 0)]), st.sampled_from([(1, 1), (2, 2), (4, 1), (1, 4), (4, 2), (8, 1)]),
       st.sampled_from([8, 16, 32, 64]), st.integers(0, 3), st.integers(0, 3))
def test_nvidia_layouts_are_surjective_and_independent(version, warps, n, mi, ni):
    if version == (3, 0) and warps[0] % 4:
        return
    lay = gl.NVMMADistributedLayout(version=list(version), warps_per_cta=list(warps),
                                    instr_shape=[16, 8] if version == (2, 0) else [16, n, 16])
    shape = (16 << mi, 8 << ni)
    w = warps[0] * warps[1]
    for layout in (lay, gl.DotOperandLayout(0, lay, 2)) + ((gl.DotOperandLayout(1, lay, 2),)
                                                            if version == (2, 0) else ()):
        s = shape if layout is lay else ((shape[0], 32) if layout.operand_index == 0 else (32, shape[1]))
        lin = layout.to_linear(s, w, 32)
        assert lin.is_surjective()
        c = lin.coords().reshape(w * 32, -1, 2)
        for thread in c:   # no thread holds an element twice
            assert len({tuple(x) for x in thread}) == len(thread)


def test_mma_layout_errors_name_the_line():
    with pytest.raises(LayoutError) as e:
        gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[2, 1], instr_shape=[16, 64, 16])
    assert "test_layout_tables.py" in str(e.value) and "warpgroups" in str(e.value)
    with pytest.raises(LayoutError):
        gl.NVMMADistributedLayout(version=[1, 0], warps_per_cta=[4, 1], instr_shape=[16, 8])
    with pytest.raises(LayoutError):
        v3 = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 64, 16])
        gl.DotOperandLayout(1, v3, 2)
    with pytest.raises(LayoutError):
        gl.amd.AMDMFMALayout(version=3, instr_shape=[8, 8, 4], transposed=False, warps_per_cta=[1, 1])


# -- shared layouts against their definitions --------------------------------------------------------

def swizzled_reference(shape, vec, per_phase, max_phase, order):
    rows, cols = shape[order[1]], shape[order[0]]
    out = np.zeros(shape, np.int64)
    for r in range(rows):
        for c in range(cols):
            phase = (r // per_phase) % max_phase
            c_swz = ((c // vec) ^ phase) % (cols // vec) * vec + c % vec if vec <= cols else c
            coord = [0, 0]
            coord[order[1]], coord[order[0]] = r, c
            out[tuple(coord)] = r * cols + c_swz
    return out


@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([[1, 0], [0, 1]]), st.sampled_from([8, 16, 32]), st.sampled_from([8, 16, 64]))
def test_swizzled_matches_its_definition(vec, per_phase, max_phase, order, rows, cols):
    lay = SwizzledSharedLayout(vec, per_phase, max_phase, order)
    shape = (rows, cols) if order == [1, 0] else (cols, rows)
    offs = lay.offsets(shape, 16)
    assert np.array_equal(np.sort(offs.ravel()), np.arange(rows * cols))
    if vec * max_phase <= cols:
        assert np.array_equal(offs, swizzled_reference(shape, vec, per_phase, max_phase, order))


@given(st.sampled_from([0, 32, 64, 128]), st.sampled_from([8, 16, 32]), st.sampled_from([8, 16, 64, 128]),
       st.sampled_from([16, 32, 64, 128, 256]), st.booleans())
def test_nvmma_swizzle_matches_the_ptx_pattern(swizzle, bits, rows, cols, transposed):
    e = bits // 8
    if swizzle and cols * e < swizzle:
        return
    lay = NVMMASharedLayout(swizzle, bits, 2, transposed)
    shape = (cols, rows) if transposed else (rows, cols)
    offs = lay.offsets(shape, bits)
    width = swizzle or 16
    for r in range(rows):
        for c in range(cols):
            byte = c * e
            block, inner = byte // width, byte % width
            chunk = inner // 16
            if swizzle:   # 16-byte chunk c of row r of a W-byte row lands at c ^ ((r // (128 / W)) % (W / 16))
                chunk ^= (r // (128 // swizzle)) % (swizzle // 16)
            want = (block * rows * width + r * width + chunk * 16 + inner % 16) // e
            got = offs[(c, r) if transposed else (r, c)]
            assert got == want, (r, c)


def test_nvmma_default_picks_the_widest_swizzle_that_fits():
    assert NVMMASharedLayout.get_default_for([128, 64], gl.float16).swizzle_byte_width == 128
    assert NVMMASharedLayout.get_default_for([128, 16], gl.float16).swizzle_byte_width == 32
    assert NVMMASharedLayout.get_default_for([64, 8], gl.float32).swizzle_byte_width == 32
    assert NVMMASharedLayout.get_default_for([64, 4], gl.float16).swizzle_byte_width == 0
    t = NVMMASharedLayout.get_default_for([64, 128], gl.float16, transposed=True)
    assert t.transposed and t.swizzle_byte_width == 128


def test_padded_layout_inserts_padding():
    lay = PaddedSharedLayout.with_identity_for([[32, 4]], [16, 32], [1, 0])
    offs = lay.offsets((16, 32), 16)
    assert offs[1, 0] == 36 and offs[0, 31] == 31 and lay.alloc_elements((16, 32), 16) == 16 * 36 - 4


def test_bank_picture_shows_conflict_free_swizzle():
    plain = SwizzledSharedLayout(1, 1, 1, [1, 0])
    swz = NVMMASharedLayout(128, 16)
    col0_plain = plain.banks((8, 64), 16)[:, 0]
    col0_swz = swz.banks((8, 64), 16)[:, 0]
    assert len(set(col0_plain.tolist())) == 1       # a column of a 128-byte-row tile: one bank
    assert len(set(col0_swz.tolist())) == 8         # the swizzle spreads it over 8
    assert "bank" in swz.describe((8, 64), 16)


def test_shared_layout_errors():
    with pytest.raises(LayoutError):
        SwizzledSharedLayout(3, 1, 1, [1, 0])
    with pytest.raises(LayoutError):
        SwizzledSharedLayout(1, 1, 1, [1, 1])
    with pytest.raises(LayoutError):
        NVMMASharedLayout(96, 16)
    with pytest.raises(LayoutError):
        NVMMASharedLayout(128, 16).verify((64, 32), 16)   # 64 bytes: narrower than the swizzle
    with pytest.raises(LayoutError):
        NVMMASharedLayout(128, 16).verify((64, 64), 32)   # written for 16-bit elements


def test_layouts_plot_as_matplotlib_figures():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    acc = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 1], instr_shape=[16, 8])
    ax = acc.plot((16, 8))
    labels = {t.get_text() for t in ax.texts}
    assert "T0:R0" in labels and "T0:R2" in labels and len(ax.texts) == 128   # the PTX C-fragment figure
    ax = NVMMASharedLayout(128, 16).plot((8, 64), 16)
    assert len(ax.texts) == 512 and {t.get_text() for t in ax.texts} <= {str(b) for b in range(32)}
    rep = NVMMASharedLayout(128, 16).wavefronts(gl.BlockedLayout([1, 8], [8, 4], [4, 1], [1, 0]), (64, 64), 16, 4)
    assert rep.plot().get_title().startswith(f"{rep.total} wavefronts")
    plt.close("all")

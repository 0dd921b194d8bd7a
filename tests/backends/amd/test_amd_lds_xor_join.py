"""LDS views chosen by a branch or carried by a loop whose offset tables differ by a constant XOR
(the column halves of a swizzled tile: lds_join.py), run on the simulator for gfx1100 (wave32)
and gfx942 (wave64) against the interpreter and numpy, on fresh random inputs with NaN-poisoned
outputs. The join carries the XOR in an SGPR beside the address; loads and stores fold it into
each address VGPR with one v_xor_b32. Uses that need the view's placement at compile time are
refused at the user's line (was: every such join refused, 'placed differently')."""
import re

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.language.nvidia.ampere import async_copy

import amdsim

TARGETS = ["gfx1100", "gfx942"]


pytestmark = pytest.mark.usefixtures("amd_toolchain")  # conftest: a fresh cache; skip without an assembler


def both(kernel, target, make, grid=(1,), **kw):
    """(interpreter's args, simulator's args, the traced kernel): each run on fresh args."""
    tk = kernel.trace(*make(), target=target, **kw)
    ref, sim = make(), make()
    kernel[grid](*ref, backend="interpreter", **kw)
    amdsim.simulate(tk, target, grid, sim)
    return ref, sim, tk


def lowered(tk, target):
    from gluon_trace.backends.amd.compiler import lower
    return lower(tk.for_target(target).graph, target)


def _tile_layout(W):
    """32 x 32 over 4 waves of W lanes, 4 consecutive columns a register run."""
    return gl.BlockedLayout([1, 4], [W // 8, 8], [4, 1], [1, 0])


@gt.jit
def half_rw(x_ptr, y_ptr, out, c, STORE: gl.constexpr, DT: gl.constexpr, SHARED: gl.constexpr):
    """A column half of a 32x32 swizzled buffer picked at run time: read back (STORE=0), or y
    written into it and the whole buffer read back (STORE=1)."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [4, 1], [1, 0])
    H: gl.constexpr = gl.BlockedLayout([1, 2], [W // 8, 8], [4, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 32, gl.SliceLayout(1, H))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, H))[None, :]
    buf = gl.allocate_shared_memory(DT, [32, 32], SHARED)
    buf.store(gl.load(x_ptr + r))
    v = buf.slice(0, 16, dim=1)
    with gl.if_(c > 0):
        v = buf.slice(16, 16, dim=1)
    if STORE:
        v.store(gl.load(y_ptr + rh))
        gl.store(out + r, buf.load(L))
    else:
        gl.store(out + rh, v.load(H))


def _shared(kind, dtype):
    if kind == "nvmma":
        return gl.NVMMASharedLayout.get_default_for([32, 32], dtype)
    vec = 16 // (dtype.bits // 8)   # 16-byte chunks, swizzled across the whole 64- or 128-byte row
    return gl.SwizzledSharedLayout(vec, 1, 32 // vec, [1, 0])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("c", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("store", [0, 1])
@pytest.mark.parametrize("kind", ["sw", "nvmma"])
def test_column_halves_read_and_written_through_a_branch(target, c, dtype, store, kind):
    rng = np.random.default_rng()
    x = rng.standard_normal((32, 32)).astype(dtype)
    y = rng.standard_normal((32, 16)).astype(dtype)
    exp = x.copy()
    exp[:, 16 * c:16 * c + 16] = y
    if not store:
        exp = x[:, 16 * c:16 * c + 16]
    DT = gl.float16 if dtype == np.float16 else gl.float32
    ref, sim, tk = both(half_rw, target, lambda: [x.copy(), y.copy(), np.full(exp.shape, np.nan, dtype), c],
                        STORE=store, DT=DT, SHARED=_shared(kind, DT))
    assert np.array_equal(sim[2], exp) and np.array_equal(ref[2], exp)
    assert _run_time_xors(lowered(tk, target).text)   # (not a view the emitter knew statically)


def _run_time_xors(text):
    """The v_xor_b32 that fold a joined SGPR into an address VGPR (the swizzle's own, hoisted
    to the entry, take constants and VGPRs)."""
    return re.findall(r"v_xor_b32 v\d+, s\d+, v\d+", text)


def test_a_run_time_xor_costs_one_xor_per_address_register():
    """The chosen half's XOR goes into the thread's address VGPR once (not once per element):
    the right half's arm sets the joined SGPR to 64 (bytes: 16 f32 columns), the other arm to
    0; one v_xor_b32 reads it, and every ds_read addresses that VGPR (plus the base)."""
    x, out = np.zeros((32, 32), np.float32), np.zeros((32, 16), np.float32)
    for target in TARGETS:
        tk = half_rw.trace(x, x, out, 1, STORE=0, DT=gl.float32, SHARED=_shared("sw", gl.float32),
                           target=target)
        body = lowered(tk, target).text.split("s_cbranch_scc0")[1].split("s_endpgm")[0].splitlines()
        sets = [re.fullmatch(r"\s*s_mov_b32 (s\d+), (\d+)", ln) for ln in body]
        xs = {m.group(1) for m in sets if m and m.group(2) == "64"}
        assert len(xs) == 1, body
        xreg = xs.pop()
        assert sum(re.fullmatch(rf"\s*s_mov_b32 {xreg}, (0|64)", ln) is not None for ln in body) == 2, body
        xors = [ln for ln in body if "v_xor_b32" in ln]
        assert len(xors) == 1 and re.fullmatch(rf"\s*v_xor_b32 v\d+, {xreg}, v\d+", xors[0]), xors
        addr = xors[0].split()[1].rstrip(",")
        reads = [ln for ln in body if ln.strip().startswith("ds_read")]
        assert reads, body
        # each read's address: the base SGPR added to the xored VGPR (one v_add a thread register)
        adds = [ln for ln in body if re.fullmatch(rf"\s*v_add_(nc_)?u32 v\d+, s\d+, {addr}", ln)]
        assert len(adds) == 1, body
        a = adds[0].split()[1].rstrip(",")
        assert all(re.search(rf"\b{a}\b", ln) for ln in reads), reads


@gt.jit
def quarter_by_branch(x_ptr, out, k):
    """Quarter k (row half k // 2, column half k % 2) of a 128-byte-swizzled 32x32 buffer, picked
    by a run of branches each yielding a fresh slice or the view so far: the row halves' tables
    only move the start (the swizzle repeats every 8 rows), the column halves' differ by an XOR."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [4, 1], [1, 0])
    H: gl.constexpr = gl.BlockedLayout([1, 2], [W // 8, 8], [4, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rq = gl.arange(0, 16, gl.SliceLayout(1, H))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, H))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [32, 32], gl.SwizzledSharedLayout(4, 1, 8, [1, 0]))
    buf.store(gl.load(x_ptr + r))
    v = buf.slice(0, 16, dim=0).slice(0, 16, dim=1)
    with gl.if_(k == 1):
        v = buf.slice(0, 16, dim=0).slice(16, 16, dim=1)
    with gl.if_(k == 2):
        v = buf.slice(16, 16, dim=0).slice(0, 16, dim=1)
    with gl.if_(k == 3):
        v = buf.slice(16, 16, dim=0).slice(16, 16, dim=1)
    gl.store(out + rq, v.load(H))


@gt.jit
def right_quarter_by_branch(x_ptr, out, k):
    """Rows 0..15 or 16..31 of the right column half: tables that differ by a constant XOR in
    the swizzle's bits and a moved start: the start is all the join carries (no XOR register)."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [4, 1], [1, 0])
    H: gl.constexpr = gl.BlockedLayout([1, 2], [W // 8, 8], [4, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rq = gl.arange(0, 16, gl.SliceLayout(1, H))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, H))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [32, 32], gl.SwizzledSharedLayout(4, 1, 8, [1, 0]))
    buf.store(gl.load(x_ptr + r))
    v = buf.slice(0, 16, dim=0).slice(16, 16, dim=1)
    with gl.if_(k > 0):
        v = buf.slice(16, 16, dim=0).slice(16, 16, dim=1)
    gl.store(out + rq, v.load(H))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_quarters_picked_by_branches(target, k):
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    ref, sim, tk = both(quarter_by_branch, target, lambda: [x.copy(), np.full((16, 16), np.nan, np.float32), k])
    exp = x[16 * (k // 2):16 * (k // 2) + 16, 16 * (k % 2):16 * (k % 2) + 16]
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)
    assert len(_run_time_xors(lowered(tk, target).text)) == 1
    ref, sim, tk = both(right_quarter_by_branch, target,
                        lambda: [x.copy(), np.full((16, 16), np.nan, np.float32), k % 2])
    exp = x[16 * (k % 2):16 * (k % 2) + 16, 16:]
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)
    assert not _run_time_xors(lowered(tk, target).text)


@gt.jit
def alternating_halves(x_ptr, out_ptr, n, SWAP: gl.constexpr):
    """Step i writes the column half of a 128-byte-swizzled buffer it was handed: the left one,
    then the right, and so on. The carried view's XOR changes every iteration, by swapping the
    two halves (SWAP) or by a branch in the body picking the next."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [4, 1], [1, 0])
    H: gl.constexpr = gl.BlockedLayout([1, 2], [W // 8, 8], [4, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 32, gl.SliceLayout(1, H))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, H))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [32, 32], gl.SwizzledSharedLayout(4, 1, 8, [1, 0]))
    buf.store(gl.load(x_ptr + r))
    half = buf.slice(0, 16, dim=1)
    other = buf.slice(16, 16, dim=1)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 512 + rh, half.load(H))
        if SWAP:
            half, other = other, half
        else:
            nxt = buf.slice(0, 16, dim=1)
            with gl.if_(i % 2 == 0):
                nxt = buf.slice(16, 16, dim=1)
            half = nxt


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("swap", [0, 1])
def test_a_carried_view_alternating_between_column_halves(target, swap):
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    n = 5
    ref, sim, _ = both(alternating_halves, target, lambda: [x.copy(), np.full((n, 32, 16), np.nan, np.float32), n],
                       SWAP=swap)
    exp = np.stack([x[:, 16 * (i % 2):16 * (i % 2) + 16] for i in range(n)])
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@gt.jit
def picked_half_carried(x_ptr, out_ptr, c, n):
    """A column half picked by a branch, then carried unchanged through a loop (its run-time XOR
    with it) and read transposed each step."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [4, 1], [1, 0])
    T: gl.constexpr = gl.BlockedLayout([1, 1], [8, W // 8], [4, 1], [0, 1])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rt = gl.arange(0, 16, gl.SliceLayout(1, T))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, T))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [32, 32], gl.SwizzledSharedLayout(4, 1, 8, [1, 0]))
    buf.store(gl.load(x_ptr + r))
    v = buf.slice(0, 16, dim=1)
    with gl.if_(c > 0):
        v = buf.slice(16, 16, dim=1)
    acc = gl.zeros([16, 32], gl.float32, T)
    for i in gl.range(0, n):
        acc += v.permute((1, 0)).load(T)
        v = v
    gl.store(out_ptr + rt, acc)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("c", [0, 1])
def test_a_picked_half_carried_through_a_loop_and_permuted(target, c):
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    ref, sim, _ = both(picked_half_carried, target, lambda: [x.copy(), np.full((16, 32), np.nan, np.float32), c, 3])
    exp = np.zeros((16, 32), np.float32)
    for _ in range(3):
        exp += x[:, 16 * c:16 * c + 16].T
    assert np.array_equal(sim[1], exp) and np.array_equal(ref[1], exp)


@gt.jit
def half_by_branch_misused(x_ptr, out, c, USE: gl.constexpr):
    """The column half of a swizzled buffer picked by a branch, then used where the backend does
    not take a run-time XOR: an async copy's destination (USE=0), a slice of it (USE=1), a
    reinterpret of it (USE=2)."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [4, 1], [1, 0])
    H: gl.constexpr = gl.BlockedLayout([1, 2], [W // 8, 8], [4, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 32, gl.SliceLayout(1, H))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, H))[None, :]
    buf = gl.allocate_shared_memory(gl.float32, [32, 32], gl.SwizzledSharedLayout(4, 1, 8, [1, 0]))
    buf.store(gl.load(x_ptr + r))
    v = buf.slice(0, 16, dim=1)
    with gl.if_(c > 0):
        v = buf.slice(16, 16, dim=1)
    if USE == 0:
        async_copy.async_load(v, x_ptr + rh)
        async_copy.commit_group()
        async_copy.wait_group(0)
        gl.store(out + r, buf.load(L))
    elif USE == 1:
        gl.store(out + rh, v.slice(0, 32, dim=0).load(H))
    else:
        gl.store(out + rh, v.reinterpret(gl.int32, [32, 16], v.layout).load(H).to(gl.float32))


@pytest.mark.parametrize("use, line", [(0, "async_copy.async_load(v, x_ptr + rh)")])
def test_a_view_with_a_run_time_xor_is_refused_where_its_placement_must_be_static(use, line):
    """Uses other than .load()/.store() (and views of it) do not take a run-time XOR: the user's
    line is named, with what to do instead (never wrong code). (USE=1, a slice, and USE=2, a
    reinterpret, were refused too; they keep or resolve the XOR now: test_amd_lds_view_refusals.)"""
    g = half_by_branch_misused.trace(np.zeros((32, 32), np.float32), np.zeros((32, 32), np.float32), 1,
                                     USE=use, target="gfx942").graph
    from gluon_trace.backends.amd.compiler import lower
    with pytest.raises(gt.CompileError, match="slice or index the buffer inside the branch") as e:
        lower(g, "gfx942")
    msg = str(e.value)
    assert "test_amd_lds_xor_join.py" in msg and "only .load() and .store()" in msg, msg
    at = int(re.search(r"test_amd_lds_xor_join\.py:(\d+)", msg).group(1))
    assert line in open(__file__).read().splitlines()[at - 1], msg


@gt.jit
def padded_half_by_branch(x_ptr, out, c):
    """Column halves of a padded buffer, swapped in odd rows: their unpadded tables differ by an XOR,
    which padding does not keep."""
    W: gl.constexpr = gl.threads_per_warp()
    L: gl.constexpr = gl.BlockedLayout([1, 4], [W // 8, 8], [4, 1], [1, 0])
    H: gl.constexpr = gl.BlockedLayout([1, 2], [W // 8, 8], [4, 1], [1, 0])
    r = gl.arange(0, 32, gl.SliceLayout(1, L))[:, None] * 32 + gl.arange(0, 32, gl.SliceLayout(0, L))[None, :]
    rh = gl.arange(0, 32, gl.SliceLayout(1, H))[:, None] * 16 + gl.arange(0, 16, gl.SliceLayout(0, H))[None, :]
    P: gl.constexpr = gl.PaddedSharedLayout([[32, 4]], [[0, 1], [0, 2], [0, 4], [0, 8], [0, 16], [1, 16],
                                                    [2, 0], [4, 0], [8, 0], [16, 0]], shape=[32, 32])
    buf = gl.allocate_shared_memory(gl.float32, [32, 32], P)   # (odd rows' halves swapped)
    buf.store(gl.load(x_ptr + r))
    v = buf.slice(0, 16, dim=1)
    with gl.if_(c > 0):
        v = buf.slice(16, 16, dim=1)
    gl.store(out + rh, v.load(H))


def test_other_table_differences_keep_the_refusal():
    """A padded layout's halves (and any other layout or permutation) still name the branch."""
    g = padded_half_by_branch.trace(np.zeros((32, 32), np.float32), np.zeros((32, 16), np.float32), 1,
                                    target="gfx942").graph
    from gluon_trace.backends.amd.compiler import lower
    with pytest.raises(gt.CompileError, match="placed differently") as e:
        lower(g, "gfx942")
    assert "test_amd_lds_xor_join.py" in str(e.value)

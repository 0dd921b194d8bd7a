"""Unaligned row slices of one slot of a stacked NVMMA buffer, read or written in a layout that
keeps the slice's rows in registers and gives the threads column bits (the stacked fuzz preset's
seeds 504240, u64 [2, 8, 4] rows 1..4 of slot 0 on gfx942, and 504543, u32 [2, 8, 16] on gfx1100).
The AMD backend refused them ("not addressable as thread part + register part"): rows 1..4 are
start 1 plus register rows 0..3, and the sum 1 + 3 = 4 reaches row bit 2, whose swizzle image
XORs a column bit a register holds too, so lin is not XOR-linear over the register bits and no
split built from the registers' bases held. The thread holds no row bit, so lin is still its
thread part XOR a per-register table: lds_address.Access now tries that split last. Each kernel
runs on amdsim against the interpreter and numpy, on fresh random inputs, with poisoned outputs.
"""
import re

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl

TARGETS = ["gfx942", "gfx1100", "gfx90a"]
pytestmark = pytest.mark.usefixtures("amd_toolchain")  # conftest: a fresh cache; skip without an assembler

_DT = {1: (gl.uint8, np.uint8), 2: (gl.uint16, np.uint16), 4: (gl.uint32, np.uint32), 8: (gl.uint64, np.uint64)}
_POISON = 0xA5


@gt.jit
def slot_rows(x_ptr, y_ptr, out_ptr, DT: gl.constexpr, ROWS: gl.constexpr, COLS: gl.constexpr,
              SLOT: gl.constexpr, START: gl.constexpr, N: gl.constexpr, L: gl.constexpr, STORE: gl.constexpr):
    """A [2, ROWS, COLS] NVMMA buffer holding x; rows START..START+N-1 of slot SLOT read in L into
    out [1, N, COLS] or (STORE) written from y in L, then the whole buffer read into out."""
    W: gl.constexpr = gl.threads_per_warp()
    F: gl.constexpr = gl.BlockedLayout([1, 1, 1], [1, 1, W], [1, 1, gl.num_warps()], [2, 1, 0])
    a = gl.arange(0, 2, gl.SliceLayout(1, gl.SliceLayout(2, F)))[:, None, None] * (ROWS * COLS) + \
        gl.arange(0, ROWS, gl.SliceLayout(0, gl.SliceLayout(2, F)))[None, :, None] * COLS + \
        gl.arange(0, COLS, gl.SliceLayout(0, gl.SliceLayout(1, F)))[None, None, :]
    buf = gl.allocate_shared_memory(DT, [2, ROWS, COLS], gl.NVMMASharedLayout.get_default_for([ROWS, COLS], DT),
                                    gl.load(x_ptr + a))
    v = buf.slice(SLOT, 1, 0).slice(START, N, 1)
    b = gl.arange(0, 1, gl.SliceLayout(1, gl.SliceLayout(2, L)))[:, None, None] * (N * COLS) + \
        gl.arange(0, N, gl.SliceLayout(0, gl.SliceLayout(2, L)))[None, :, None] * COLS + \
        gl.arange(0, COLS, gl.SliceLayout(0, gl.SliceLayout(1, L)))[None, None, :]
    if STORE:
        v.store(gl.load(y_ptr + b))
        gl.store(out_ptr + a, buf.load(F))
    else:
        gl.store(out_ptr + b, v.load(L))


def _check(target, es, cols, start, n, lay, store, slot=1, num_warps=1):
    import amdsim
    gdt, ndt = _DT[es]
    rng = np.random.default_rng()
    x = rng.integers(0, np.iinfo(ndt).max, 2 * 8 * cols, dtype=ndt, endpoint=True)
    y = rng.integers(0, np.iinfo(ndt).max, n * cols, dtype=ndt, endpoint=True)
    exp = x.reshape(2, 8, cols).copy()
    if store:
        exp[slot, start:start + n] = y.reshape(n, cols)
    else:
        exp = exp[slot:slot + 1, start:start + n]

    def make():
        out = np.frombuffer(bytes([_POISON]) * (exp.size * es), ndt).copy()
        return [x.copy(), y.copy(), out]
    kw = dict(DT=gdt, ROWS=8, COLS=cols, SLOT=slot, START=start, N=n, L=lay, STORE=store)
    tk = slot_rows.trace(*make(), target=target, num_warps=num_warps, **kw)
    ref, sim = make(), make()
    slot_rows[(1,)](*ref, backend="interpreter", num_warps=num_warps, target=target, **kw)
    amdsim.simulate(tk, target, (1,), sim)
    assert np.array_equal(ref[2], exp.ravel())
    assert np.array_equal(sim[2], exp.ravel())
    from gluon_trace.backends.amd.compiler import lower
    return lower(tk.for_target(target).graph, target).text


def _wave(target):
    return 32 if target == "gfx1100" else 64


# (bytes an element, columns, columns a thread): rows 1..4 in registers, the threads along the
# columns; each was refused on gfx942 and gfx90a or on gfx1100 (or both)
SHAPES = [(8, 4, 4), (1, 128, 1), (1, 64, 1), (2, 64, 1), (1, 128, 2)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("store", [False, True], ids=["load", "store"])
@pytest.mark.parametrize("es, cols, cpt", SHAPES, ids=[f"{8 * e}bit-{c}cols-{t}a_thread" for e, c, t in SHAPES])
def test_rows_1_to_4_in_registers(target, store, es, cols, cpt):
    W = _wave(target)
    tc = min(cols // cpt, W)
    lay = gl.BlockedLayout([1, 4, cpt], [W // tc, 1, tc], [1, 1, 1], [2, 1, 0])
    _check(target, es, cols, 1, 4, lay, store)


@pytest.mark.parametrize("target", ["gfx942", "gfx90a"])
def test_seed_504240_u64_rows_1_to_4_of_slot_0(target):
    """The fuzz-found read: u64 [2, 8, 4], slot 0 rows 1..4, in a layout with a broadcast lane.
    The thread's column bit is one the swizzle leaves alone: one address VGPR for all 8 reads,
    each register's place an immediate offset."""
    lay = gl.BlockedLayout([1, 4, 1], [2, 16, 2], [1, 1, 1], [2, 1, 0])
    text = _check(target, 8, 4, 1, 4, lay, False, slot=0)
    reads = re.findall(r"ds_read_b64 v\[\d+:\d+\], (v\d+)", text)
    assert len(reads) == 8 and len(set(reads)) == 1, text


def test_seed_504543_u32_rows_1_to_4_of_slot_0_stored_by_4_waves():
    """The fuzz-found write: u32 [2, 8, 16], slot 0 rows 1..4, from 4 waves, 2 of them along the columns."""
    lay = gl.BlockedLayout([1, 4, 2], [16, 2, 1], [1, 2, 2], [2, 1, 0])
    _check("gfx1100", 4, 16, 1, 4, lay, True, slot=0, num_warps=4)

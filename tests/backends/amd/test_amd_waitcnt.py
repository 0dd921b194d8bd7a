"""Golden tests of s_waitcnt placement: on hand-written machine code over physical
registers, and on small kernels."""

import numpy as np
import pytest

from gluon_trace import language as gl
import gluon_trace as gt
from gluon_trace.backends.amd.mir import Imm, Inst, Label, render_inst
from gluon_trace.backends.amd.target import TARGETS
from physregs import s, v
from gluon_trace.backends.amd.waitcnt import insert_waits

G942, G1100 = TARGETS["gfx942"], TARGETS["gfx1100"]


def load(dst, addr):
    return Inst("global_load_dword", [dst], [addr, "off"], kind="vmem_load")


def store(addr, x):
    return Inst("global_store_dword", [], [addr, x, "off"], kind="vmem_store")


def add(d, a, b):
    return Inst("v_add_f32", [d], [a, b], kind="valu")


def text(code, target=G942):
    return [render_inst(i) if isinstance(i, Inst) else i.name + ":"
            for i in insert_waits(code, target)]


def test_two_independent_loads_wait_exactly_before_each_first_use():
    a, b = v(0), v(1)
    out = text([load(a, v(2, 2)), load(b, v(4, 2)), add(v(6), a, a), add(v(7), b, b)])
    assert out == ["global_load_dword v0, v[2:3], off", "global_load_dword v1, v[4:5], off",
                   "s_waitcnt vmcnt(1)", "v_add_f32 v6, v0, v0",
                   "s_waitcnt vmcnt(0)", "v_add_f32 v7, v1, v1"]


def test_use_of_the_second_load_first_waits_for_both():
    a, b = v(0), v(1)
    out = text([load(a, v(2, 2)), load(b, v(4, 2)), add(v(6), b, b), add(v(7), a, a)])
    assert out.count("s_waitcnt vmcnt(0)") == 1 and len([x for x in out if "waitcnt" in x]) == 1
    assert out.index("s_waitcnt vmcnt(0)") == 2


def test_unrelated_instructions_do_not_wait():
    a = v(0)
    out = text([load(a, v(2, 2)), add(v(6), v(7), v(8)), add(v(9), v(6), v(6)), add(v(1), a, a)])
    assert out[1:4] == ["v_add_f32 v6, v7, v8", "v_add_f32 v9, v6, v6", "s_waitcnt vmcnt(0)"]


def test_stores_count_on_vmcnt_on_gfx9_but_not_on_gfx11():
    a = v(0)
    code = [load(a, v(2, 2)), store(v(4, 2), v(6)), add(v(7), a, a)]
    assert "s_waitcnt vmcnt(1)" in text(code, G942)
    assert "s_waitcnt vmcnt(0)" in text(code, G1100)


def test_overwriting_a_pending_load_destination_waits():
    a = v(0)
    out = text([load(a, v(2, 2)), Inst("v_mov_b32", [a], [Imm(1)], kind="valu")])
    assert out[1] == "s_waitcnt vmcnt(0)"


def test_smem_results_arrive_out_of_order_so_lgkm_waits_are_zero():
    kp = s(0, 2)
    code = [Inst("s_load_dword", [s(4)], [kp, Imm(0)], kind="smem"),
            Inst("s_load_dword", [s(5)], [kp, Imm(4)], kind="smem"),
            Inst("s_add_u32", [s(6)], [s(4), Imm(1)])]
    assert text(code)[2] == "s_waitcnt lgkmcnt(0)"


def test_lds_reads_are_in_order():
    code = [Inst("ds_read_b32", [v(k)], [v(9)], suffix=f"offset:{4 * k}", kind="lds_load")
            for k in range(3)] + [add(v(5), v(0), v(0)), add(v(6), v(2), v(2))]
    out = text(code)
    assert out[3:] == ["s_waitcnt lgkmcnt(2)", "v_add_f32 v5, v0, v0",
                       "s_waitcnt lgkmcnt(0)", "v_add_f32 v6, v2, v2"]


def test_barrier_drains_lds_writes():
    code = [Inst("ds_write_b32", [], [v(1), v(2)], kind="lds_store"),
            Inst("s_barrier", kind="barrier"),
            Inst("ds_read_b32", [v(3)], [v(1)], kind="lds_load")]
    assert text(code)[1:3] == ["s_waitcnt lgkmcnt(0)", "s_barrier"]


def test_saturated_counter_needs_no_wait():
    # lgkmcnt counts to 15 on gfx9: a read with 15 LDS ops issued after it has completed
    code = [Inst("ds_read_b32", [v(k)], [v(40)], kind="lds_load") for k in range(17)]
    code.append(add(v(30), v(0), v(0)))
    assert not any("waitcnt" in x for x in text(code))
    code[-1] = add(v(30), v(2), v(2))
    assert "s_waitcnt lgkmcnt(14)" in text(code)


def test_loop_back_edge_merges_pending_loads():
    """r is loaded before the loop and again at the end of each iteration (a prefetch):
    its use at the top of the body waits on both paths; the independent load issued
    after it in the body is not waited for."""
    r, t, head = v(0), v(1), Label(".Lhead")
    code = [load(r, v(2, 2)), head, add(v(4), r, r), load(t, v(6, 2)),
            load(r, v(2, 2)), Inst("s_cbranch_scc1", kind="cbranch", target=".Lhead"),
            add(v(5), t, t)]
    out = text(code)
    assert out[2:4] == ["s_waitcnt vmcnt(0)", "v_add_f32 v4, v0, v0"]
    # after the loop: t was issued before the second r load: one may still be pending
    assert out[-2:] == ["s_waitcnt vmcnt(1)", "v_add_f32 v5, v1, v1"]


def _asm(kernel, *args, target="gfx942", **kw):
    s = kernel.trace(*args, target=target, **kw).amdgcn(target)
    return [ln.strip() for ln in s[:s.index(".rodata")].splitlines()]


def test_kernel_with_two_independent_loads():
    @gt.jit
    def k(o, p, q):
        lay = gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0])
        offs = gl.arange(0, gl.threads_per_warp(), layout=lay)
        a = gl.load(p + offs)
        b = gl.load(q + offs)
        gl.store(o + offs, a * 3.0)
        gl.store(o + offs + 64, b * 5.0)

    for t in ("gfx90a", "gfx942", "gfx1100"):
        lines = _asm(k, *[gl.pointer(gl.float32)] * 3, target=t, num_warps=1)
        loads = [i for i, ln in enumerate(lines) if ln.startswith("global_load")]
        waits = [(i, ln) for i, ln in enumerate(lines) if ln.startswith("s_waitcnt vmcnt")]
        assert len(loads) == 2
        assert not any(ln.startswith("s_waitcnt") for ln in lines[loads[0]:loads[1]])
        # vmcnt(1) right before the use of a; before the use of b vmcnt(0) -- or vmcnt(1)
        # on gfx9, where the store of a*3 issued after b's load counts on vmcnt too
        last = "s_waitcnt vmcnt(1)" if t != "gfx1100" else "s_waitcnt vmcnt(0)"
        assert [w for _, w in waits] == ["s_waitcnt vmcnt(1)", last]
        assert "3.0" in lines[waits[0][0] + 1] or "0x40400000" in lines[waits[0][0] + 1]
        assert "0x40a00000" in lines[waits[1][0] + 1] or "5.0" in lines[waits[1][0] + 1]


def test_waits_in_real_kernels_are_not_blanket_zero():
    """The elementwise kernel issues 8 loads before the first use: the waits count down."""
    from amd_corpus import add_kernel
    P = gl.pointer(gl.float32)
    lines = _asm(add_kernel, P, P, P, gl.int32, BLOCK=1024, num_warps=4)
    waits = [ln for ln in lines if ln.startswith("s_waitcnt vmcnt")]
    assert waits == [f"s_waitcnt vmcnt({k})" for k in (3, 2, 1, 0)]


@gt.jit
def _view_picked_by_branches(x_ptr, out_ptr, n, NIF: gl.constexpr):
    """A loop reading a shared-memory view it carries, the next one picked by NIF branches in a
    row: 15 blocks whose waits settle only after ~760 rounds of the dataflow."""
    L: gl.constexpr = gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0])
    buf = gl.allocate_shared_memory(gl.float32, [16], gl.SwizzledSharedLayout(1, 1, 1, [0]),
                                    gl.load(x_ptr + gl.arange(0, 16, L)))
    c = buf.slice(0, 4, 0)
    for i in gl.range(0, n):
        gl.store(out_ptr + i * 4 + gl.arange(0, 4, L), c.load(L))
        w = buf.slice(0, 4, 0)
        for j in range(1, NIF + 1):
            with gl.if_((i + 1) % 4 == j):
                w = buf.slice(4 * j, 4, 0)
        c = w


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
@pytest.mark.parametrize("nif", [1, 3])
def test_a_slowly_settling_loop_gets_its_waits(target, nif):
    """Was 's_waitcnt dataflow did not converge' (a fixed 50 rounds a block; the views fuzz
    preset's loop programs): the bound is now the state lattice's height. Against the
    interpreter and numpy on the simulator."""
    from lds_runner import both
    x, n = np.random.default_rng().standard_normal(16).astype(np.float32), 6
    ref, sim, _ = both(_view_picked_by_branches, lambda: [x.copy(), np.full(24, np.nan, np.float32), n], target,
                       num_warps=1, NIF=nif)
    want = np.concatenate([x[4 * (i % 4 if i % 4 <= nif else 0):][:4] for i in range(n)])
    assert np.array_equal(ref[1], want) and np.array_equal(sim[1], want)

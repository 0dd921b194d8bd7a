"""Register allocation: liveness across loops, alignment, no two live values in one
register anywhere in the corpus, and a clear error when registers run out."""
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backends.amd.compiler import lower
from gluon_trace.backends.amd.mir import Imm, Inst, Label, Reg
from gluon_trace.backends.amd.regalloc import allocate, live_intervals

from amd_corpus import CORPUS

LIMITS = dict(vgpr_limit=256, sgpr_limit=96, target="gfx942", num_warps=4, name="k")


def valu(op, d, *srcs):
    return Inst(op, [d], list(srcs), kind="valu")


def test_value_live_into_a_loop_keeps_its_register_through_the_back_edge():
    x, t, u = Reg("v"), Reg("v"), Reg("v")
    head = Label(".Lh")
    back = Inst("s_cbranch_scc1", kind="cbranch", target=".Lh")
    code = [valu("v_mov_b32", x, Imm(1)), head, valu("v_add_f32", t, x, x),
            valu("v_mul_f32", u, t, t), valu("v_mov_b32", Reg("v"), u), back]
    allocate(code, [(head, back)], **LIMITS)
    # x is read at the top of every iteration: t and u, defined later in the body, must
    # not take its register (linear scan without the loop extension would give t x's)
    assert x.phys not in (t.phys, u.phys)
    iv = live_intervals(code, [(head, back)])
    assert iv[x] == [0, 5]
    # without the loop, x dies at its last use and its register is reused (not by t,
    # which is written by the instruction that last reads x: those never share)
    for r in (x, t, u):
        r.phys = None
    allocate(code[:1] + code[2:5], [], **LIMITS)
    assert t.phys != x.phys and u.phys == x.phys


def test_pairs_are_even_and_sgpr_quads_four_aligned():
    a, p, q = Reg("v"), Reg("v", 2), Reg("s", 4)
    s1 = Reg("s")
    code = [valu("v_mov_b32", a, Imm(0)), Inst("s_mov_b32", [s1], [Imm(0)]),
            Inst("s_load_dwordx4", [q], [s1, Imm(0)], kind="smem"),
            Inst("global_load_dwordx2", [p], [a, "off"], kind="vmem_load"),
            valu("v_add_u32", Reg("v"), p[0], a), Inst("s_add_u32", [Reg("s")], [q[3], s1])]
    allocate(code, [], **LIMITS)
    assert p.phys % 2 == 0 and q.phys % 4 == 0


def test_precoloured_registers_keep_their_place():
    v0, k = Reg("v", 1, fixed=0), Reg("s", 2, fixed=0)
    x, y = Reg("v"), Reg("s", 2)
    code = [valu("v_and_b32", x, Imm(0x3FF), v0), Inst("s_load_dwordx2", [y], [k, Imm(0)], kind="smem"),
            valu("v_add_u32", Reg("v"), x, y[0])]
    allocate(code, [], **LIMITS)
    assert (v0.phys, k.phys) == (0, 0)
    assert x.phys != 0 and y.phys not in (0, 1)


def _overlaps(e):
    iv = live_intervals(e.code, e.loops)
    regs = sorted(iv, key=lambda r: iv[r][0])
    for i, a in enumerate(regs):
        for b in regs[i + 1:]:
            if iv[b][0] > iv[a][1]:
                break
            if a.cls == b.cls and a.phys < b.phys + b.size and b.phys < a.phys + a.size:
                return a, b, iv[a], iv[b]
    return None


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
@pytest.mark.parametrize("name,kernel,args,cx,nw", CORPUS, ids=[c[0] for c in CORPUS])
def test_no_two_live_values_share_a_register(target, name, kernel, args, cx, nw):
    e = lower(kernel.trace(*args, **cx, num_warps=nw, target=target).graph, target)
    assert _overlaps(e) is None


def test_running_out_of_vgprs_spills_instead_of_refusing():
    """More live values than VGPRs: the kernel still builds, within the limit, and says
    how much it spilled (the spill code itself is tested in test_amd_spill.py)."""
    @gt.jit
    def too_big(out_ptr, x_ptr, BLOCK: gl.constexpr):
        lay = gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0])
        offs = gl.arange(0, BLOCK, layout=lay)
        x = gl.load(x_ptr + offs)
        y = gl.load(x_ptr + offs + BLOCK)
        gl.store(out_ptr + offs, x * y + y)

    tk = too_big.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), BLOCK=64 * 256,
                       num_warps=1, target="gfx942")
    e = lower(tk.graph, "gfx942")
    assert e.vgprs <= 256
    assert ".amdhsa_enable_private_segment 1" in e.text
    assert e.text.count("scratch_store_dword") > 200


def test_vgpr_budget_shrinks_with_more_warps():
    from gluon_trace.backends.amd.target import TARGETS
    t = TARGETS["gfx942"]
    assert t.vgpr_limit(4) == 256 and t.vgpr_limit(8) == 256 and t.vgpr_limit(16) == 128


def test_golden_axpy_gfx942():
    """The whole kernel body of a small kernel: registers reused as soon as values die
    (v0 holds the work-item id, then the lane index, then two loaded values), one
    address computation shared by the load and the store of y, and exact waits."""
    @gt.jit
    def axpy(y_ptr, x_ptr, a):
        lay = gl.BlockedLayout([1], [64], [1], [0])
        offs = gl.arange(0, 64, layout=lay)
        gl.store(y_ptr + offs, a * gl.load(x_ptr + offs) + gl.load(y_ptr + offs))

    P = gl.pointer(gl.float32)
    s = axpy.trace(P, P, gl.float32, num_warps=1, target="gfx942").amdgcn("gfx942")
    body = [ln.strip() for ln in s[s.index("axpy:") + 5:s.index(".Lfunc")].splitlines()
            if ln.strip() and not ln.strip().startswith(";")]
    assert body == [
        "v_and_b32 v1, 0x3ff, v0",
        "s_load_dwordx2 s[2:3], s[0:1], 0",
        "s_load_dwordx2 s[4:5], s[0:1], 8",
        "s_load_dword s6, s[0:1], 16",
        "v_bfe_u32 v0, v1, 0, 6",
        "s_waitcnt lgkmcnt(0)",
        "v_mad_i64_i32 v[2:3], vcc, v0, 4, s[2:3]",
        "v_mad_i64_i32 v[4:5], vcc, v0, 4, s[4:5]",
        "global_load_dword v0, v[4:5], off",
        "s_waitcnt vmcnt(0)",
        "v_mul_f32 v1, s6, v0",
        "global_load_dword v0, v[2:3], off",
        "s_waitcnt vmcnt(0)",
        "v_add_f32 v4, v1, v0",
        "global_store_dword v[2:3], v4, off",
        "s_endpgm",
    ]
    assert ".amdhsa_next_free_vgpr 6" in s and ".amdhsa_next_free_sgpr 7" in s

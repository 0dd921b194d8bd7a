"""Wait states the hardware does not interlock (s_nop / s_waitcnt_depctr)."""
from gluon_trace.backends.amd.compiler import _shift64_bump
from gluon_trace.backends.amd.hazards import fix_hazards
from gluon_trace.backends.amd.mir import Fixed, Imm, Inst, Label, render_inst
from gluon_trace.backends.amd.target import TARGETS
from physregs import s, v


VCC = Fixed("vcc", "special", 2)


def lines(code, target):
    return [render_inst(i) if isinstance(i, Inst) else i.name + ":"
            for i in fix_hazards(code, TARGETS[target])]


def cmp_then_select():
    return [Inst("v_cmp_gt_i32", [VCC], [s(3), v(1)], kind="valu"),
            Inst("v_cndmask_b32", [v(2)], [Imm(0), Imm(1), VCC], kind="valu")]


def test_gfx942_valu_sgpr_write_then_valu_read_needs_two_wait_states():
    assert lines(cmp_then_select(), "gfx942")[1] == "s_nop 1"
    assert "s_nop" not in " ".join(lines(cmp_then_select(), "gfx90a"))
    assert "s_nop" not in " ".join(lines(cmp_then_select(), "gfx1100"))


def test_an_independent_instruction_counts_as_a_wait_state():
    code = cmp_then_select()
    code.insert(1, Inst("v_add_u32", [v(5)], [v(6), v(7)], kind="valu"))
    assert lines(code, "gfx942")[2] == "s_nop 0"


def test_readfirstlane_then_vmem_saddr_needs_five_on_gfx9():
    code = [Inst("v_readfirstlane_b32", [s(8)], [v(1)], kind="valu"),
            Inst("s_mov_b32", [s(9)], [Imm(0)]),
            Inst("global_load_dword", [v(2)], [v(3), s(8, 2)], kind="vmem_load")]
    out = lines(code, "gfx90a")
    assert out[2] == "s_nop 3"  # 1 wait state from the s_mov, 4 more
    assert "s_nop" not in " ".join(lines(code, "gfx1100"))


def test_dpp_after_a_vgpr_write():
    code = [Inst("v_add_f32", [v(4)], [v(1), v(2)], kind="valu"),
            Inst("v_mov_b32_dpp", [v(5)], [v(4)], suffix="quad_perm:[1,0,3,2]", kind="valu")]
    assert lines(code, "gfx90a")[1] == "s_nop 1"


def test_div_fmas_after_vcc_write():
    code = [Inst("v_div_scale_f32", [v(1), VCC], [v(2), v(3), v(2)], kind="valu"),
            Inst("v_mul_f32", [v(4)], [v(1), v(1)], kind="valu"),
            Inst("v_div_fmas_f32", [v(5)], [v(1), v(2), v(3)], kind="valu", imp=[VCC])]
    assert lines(code, "gfx90a")[2] == "s_nop 2"


def test_transcendental_result_forwarding():
    code = [Inst("v_exp_f32", [v(1)], [v(2)], kind="valu"),
            Inst("v_add_f32", [v(3)], [v(1), v(1)], kind="valu")]
    assert lines(code, "gfx942")[1] == "s_nop 0"
    assert lines(code, "gfx1100")[1] == "s_waitcnt_depctr 0xfff"
    assert "s_nop" not in " ".join(lines(code, "gfx90a"))
    # an LDS or VMEM op in between drains the gfx11 forwarding hazard
    code.insert(1, Inst("ds_read_b32", [v(9)], [v(8)], kind="lds_load"))
    assert "depctr" not in " ".join(lines(code, "gfx1100"))


def test_history_is_not_trusted_across_labels():
    code = [Inst("v_mov_b32", [v(3)], [Imm(0)], kind="valu"), Label(".Lx"),
            Inst("v_mov_b32_dpp", [v(5)], [v(4)], suffix="quad_perm:[1,0,3,2]", kind="valu")]
    assert lines(code, "gfx90a")[2] == "s_nop 1"


def test_gfx90a_shift64_amount_in_the_last_vgpr_of_a_block():
    amt = v(7)
    code = [Inst("v_lshlrev_b64", [v(2, 2)], [amt, v(4, 2)], kind="valu")]
    assert _shift64_bump(code, 8) == 9
    assert _shift64_bump(code, 12) == 12
    code[0].uses[0] = Imm(3)
    assert _shift64_bump(code, 8) == 8

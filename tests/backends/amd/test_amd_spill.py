"""Spilling on AMD: kernels that need more registers than fit build for every target, run
in the simulator with the interpreter's results, declare their private segment, report
what they spilled -- and kernels that fit carry no spill code at all."""
import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import language as gl
from gluon_trace.backends.amd import metadata as md
from gluon_trace.backends.amd import regalloc
from gluon_trace.backends.amd.compiler import lower
from gluon_trace.backends.amd.mir import Imm, Inst, Reg
from gluon_trace.backends.amd.spill import Scratch, choose_victims
from gluon_trace.backends.amd.target import TARGETS, Target
from gluon_trace.errors import user_location

import amd_corpus as C
import amdsim
import test_amd_sim as sim_cases

ALL = ["gfx90a", "gfx942", "gfx1100"]
SPILL_OPS = ("scratch_", "buffer_", "v_writelane", "v_readlane")

pytestmark = pytest.mark.usefixtures("amd_toolchain")


def run_against_interpreter(kernel, make_args, grid, target, outs, cx, nw=1, rtol=0.0):
    ref = make_args()
    kernel[grid](*ref, **cx, num_warps=nw, backend="interpreter")
    got = make_args()
    tk = kernel.trace(*got, **cx, num_warps=nw, target=target)
    amdsim.simulate(tk, target, grid, got)
    for k in outs:
        np.testing.assert_allclose(got[k], ref[k], rtol=rtol, atol=0,
                                   err_msg=f"output {k} on {target}")
    return tk


def wave(target):
    return TARGETS[target].wave


def rand(seed, n, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


# -- kernels that fit are unchanged ----------------------------------------------------------------

@pytest.mark.parametrize("target", ALL)
@pytest.mark.parametrize("name,kernel,args,cx,nw", C.CORPUS, ids=[c[0] for c in C.CORPUS])
def test_a_kernel_that_fits_has_no_spill_code(target, name, kernel, args, cx, nw):
    e = lower(kernel.trace(*args, **cx, num_warps=nw, target=target).graph, target)
    body = e.text[:e.text.index(".rodata")]
    assert not any(op in body for op in SPILL_OPS)
    assert ".amdhsa_private_segment_fixed_size 0" in e.text
    assert ".amdhsa_user_sgpr_count 2" in e.text
    assert "private_segment_wavefront_offset" not in e.text
    assert "enable_private_segment" not in e.text


# -- kernels past the real register budget ---------------------------------------------------------

@gt.jit
def four_wide_tiles(out_ptr, a_ptr, b_ptr, c_ptr, d_ptr, BLOCK: gl.constexpr):
    """Four tiles of BLOCK / wave registers per lane, all live at once."""
    lay = gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0])
    offs = gl.arange(0, BLOCK, layout=lay)
    a = gl.load(a_ptr + offs)
    b = gl.load(b_ptr + offs)
    c = gl.load(c_ptr + offs)
    d = gl.load(d_ptr + offs)
    gl.store(out_ptr + offs, (a * b + c * d) - a * d + (b - c))


@pytest.mark.parametrize("target", ALL)
def test_wide_elementwise_chain_spills_and_matches_the_interpreter(target):
    n = wave(target) * 128  # 4 x 128 live values per lane, 256 VGPRs
    tk = run_against_interpreter(
        four_wide_tiles, lambda: [np.zeros(n, np.float32)] + [rand(s, n) for s in range(4)],
        (1,), target, [0], dict(BLOCK=n), rtol=1e-6)
    ck = tk.compile(target)
    assert ck.registers <= TARGETS[target].vgpr_limit(1)
    assert ck.extra["spilled_vgprs"] > 0 and ck.spill_bytes >= 4 * ck.extra["spilled_vgprs"]
    assert ck.extra["scratch_bytes"] == ck.spill_bytes
    d = md.read_descriptor(ck.binary, tk.graph.name)
    assert d["private_segment_fixed_size"] == ck.spill_bytes
    assert d["rsrc2"] & 1  # the private segment (wave scratch offset / flat scratch) enabled
    if target == "gfx90a":
        assert d["private_segment_buffer"] == 1 and d["user_sgpr_count"] == 6
        assert "buffer_store_dword" in ck.asm and "scratch_" not in ck.asm
    else:
        assert d["private_segment_buffer"] == 0 and d["user_sgpr_count"] == 2
        assert "scratch_store_dword" in ck.asm and "buffer_" not in ck.asm
    text = ck.summary()
    assert f"spilled_vgprs: {ck.extra['spilled_vgprs']}" in text
    assert f"spills {ck.spill_bytes} B" in text


@gt.jit
def wide_rows(out_ptr, sum_ptr, x_ptr, y_ptr, BM: gl.constexpr, BN: gl.constexpr):
    """A 2-D tile with whole rows of BN registers per lane, twice, plus a row sum."""
    lay = gl.BlockedLayout([1, BN], [gl.threads_per_warp(), 1], [1, 1], [1, 0])
    rows = gl.arange(0, BM, layout=gl.SliceLayout(1, lay))
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, lay))
    offs = gl.expand_dims(rows, 1) * BN + gl.expand_dims(cols, 0)
    x = gl.load(x_ptr + offs)
    y = gl.load(y_ptr + offs)
    p = x * y
    gl.store(sum_ptr + rows, gl.sum(p, axis=1))
    gl.store(out_ptr + offs, p - x + y)


@pytest.mark.parametrize("target", ALL)
def test_big_2d_tile_with_a_reduction_spills_and_matches(target):
    bm, bn = 64, 128  # 128 (wave64) or 256 (wave32) registers per lane and tile
    run_against_interpreter(
        wide_rows, lambda: [np.zeros(bm * bn, np.float32), np.zeros(bm, np.float32),
                            rand(5, bm * bn), rand(6, bm * bn)],
        (1,), target, [0, 1], dict(BM=bm, BN=bn), rtol=1e-5)


@gt.jit
def accumulate_in_a_loop(out_ptr, x_ptr, n_iter, n, BLOCK: gl.constexpr):
    """A loop-carried accumulator wider than the register file: spilled across the back edge;
    the masked loads leave the tail lanes' slots as `other` set them."""
    lay = gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0])
    offs = gl.arange(0, BLOCK, layout=lay)
    acc = gl.zeros([BLOCK], gl.float32, layout=lay)
    big = gl.zeros([BLOCK], gl.float32, layout=lay)
    for i in gl.range(0, n_iter):
        x = gl.load(x_ptr + i * BLOCK + offs, mask=offs < n, other=1.0)
        acc = acc + x
        big = gl.maximum(big, x * 2.0)
    gl.store(out_ptr + offs, acc - big)


@pytest.mark.parametrize("target", ALL)
def test_loop_carried_values_spill_across_the_back_edge(target):
    block = wave(target) * 256
    n = block - 37
    tk = run_against_interpreter(
        accumulate_in_a_loop, lambda: [np.zeros(block, np.float32), rand(7, 3 * block), 3, n],
        (1,), target, [0], dict(BLOCK=block), rtol=1e-6)
    assert tk.compile(target).extra["spilled_vgprs"] > 0


@gt.jit
def many_tiles_from_the_lane_index(out_ptr, BLOCK: gl.constexpr):
    """Seven tiles of BLOCK / wave registers per lane, computed (no loads), reduced to one value."""
    lay = gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0])
    x = gl.arange(0, BLOCK, layout=lay).to(gl.float32)
    a = x * 0.5
    b = x * 0.25 + 1.0
    c = x - 3.0
    d = x * x
    e = x * 3.0
    f = x + 7.0
    gl.store(out_ptr + gl.arange(0, 2, layout=lay) * 0,
             gl.sum((a * b + c * d) - a * d + (b - c) + x + e * f, axis=0))


@pytest.mark.parametrize("target", ALL)
def test_spill_frames_past_the_immediate_offset_reach(target):
    """More than 4 KiB of spill slots per lane: the far slots are addressed through a VGPR."""
    n = 64 * 256
    tk = run_against_interpreter(many_tiles_from_the_lane_index, lambda: [np.zeros(2, np.float32)],
                                 (1,), target, [0], dict(BLOCK=n), rtol=1e-5)
    ck = tk.compile(target)
    assert ck.spill_bytes > 4096
    assert ("offen" in ck.asm) if target == "gfx90a" else ("scratch_load_dword v" in ck.asm)


def many_scalars_kernel(n_args):
    """A kernel summing n_args scalar arguments, each weighted: every argument's SGPR is
    loaded at entry and lives until its term, so SGPRs run out first."""
    names = [f"a{k}" for k in range(n_args)]
    terms = " + ".join(f"{n} * {k + 1}" for k, n in enumerate(reversed(names)))
    src = (f"def many_scalars(out_ptr, {', '.join(names)}):\n"
           f"    lay = gl.BlockedLayout([1], [gl.threads_per_warp()], [1], [0])\n"
           f"    offs = gl.arange(0, 64, layout=lay)\n"
           f"    gl.store(out_ptr + offs, offs + ({terms}))\n")
    scope = {"gl": gl}
    exec(src, scope)
    return gt.jit(scope["many_scalars"])


@pytest.mark.parametrize("target", ALL)
def test_sgpr_pressure_spills_to_vgpr_lanes(target):
    k = many_scalars_kernel(130)
    vals = [int(v) for v in np.random.default_rng(8).integers(-1000, 1000, 130)]
    tk = run_against_interpreter(k, lambda: [np.zeros(64, np.int32)] + vals, (1,), target, [0], {})
    ck = tk.compile(target)
    assert ck.extra["spilled_sgprs"] > 0 and "v_writelane_b32" in ck.asm
    assert ck.extra["sgprs"] <= TARGETS[target].sgpr_limit + 2


# -- every construct under a squeezed budget -----------------------------------------------------

@pytest.fixture
def squeezed(monkeypatch, tmp_path):
    """Shrink the register budgets so the ordinary simulator tests spill everywhere (loops,
    branches, EXEC masks, LDS, 64-bit pairs, vector loads); count what spilled."""
    monkeypatch.setenv("GLUON_TRACE_CACHE_DIR", str(tmp_path))  # the limits are not in the key
    counts = {"v": 0, "s": 0}
    real_v, real_s = regalloc.spill_vgprs, regalloc.spill_sgprs

    def count_v(code, victims, sc, sites=None):
        counts["v"] += len(victims)
        return real_v(code, victims, sc, sites)

    def count_s(code, victims, sc, sites=None):
        counts["s"] += len(victims)
        return real_s(code, victims, sc, sites)
    monkeypatch.setattr(regalloc, "spill_vgprs", count_v)
    monkeypatch.setattr(regalloc, "spill_sgprs", count_s)

    def squeeze(vgprs, sgprs):
        monkeypatch.setattr(Target, "vgpr_limit", lambda self, nw: vgprs)
        monkeypatch.setattr(Target, "sgpr_limit", property(lambda self: sgprs))
        return counts
    return squeeze


SQUEEZED_CASES = ["test_loops_branches_and_lds_inside_loops",
                  "test_reductions_on_each_axis", "test_convert_layout", "test_softmax",
                  "test_dtypes", "test_elementwise_masked", "test_argmax_with_ties", "test_casts",
                  "test_layernorm", "test_scalar_arguments_and_uniform_code"]


@pytest.mark.parametrize("target", ALL)
@pytest.mark.parametrize("case", SQUEEZED_CASES)
def test_simulator_cases_with_few_registers(squeezed, case, target):
    counts = squeezed(12, 12)
    getattr(sim_cases, case)(target)  # runs the kernel in the simulator against the interpreter
    assert counts["v"] + counts["s"] > 0


@pytest.mark.parametrize("target", ["gfx90a", "gfx1100"])  # as test_amd_sim runs it
def test_int64_division_with_few_registers(squeezed, target):
    counts = squeezed(16, 16)
    sim_cases.test_int64_arithmetic_including_division(target)
    assert counts["v"] > 0


# -- the allocator's choices and its one remaining error --------------------------------------------

def valu(op, d, *srcs, loc=None):
    return Inst(op, [d], list(srcs), kind="valu", loc=loc)


def test_the_victim_is_the_value_used_furthest_away():
    a, b, c, t = Reg("v"), Reg("v"), Reg("v"), Reg("v")
    code = [valu("v_mov_b32", a, Imm(1)), valu("v_mov_b32", b, Imm(2)),
            valu("v_mov_b32", c, Imm(3)),
            valu("v_add_f32", t, c, b),          # 3 live before, b used now: a or c must go
            valu("v_add_f32", Reg("v"), t, c),
            valu("v_add_f32", Reg("v"), t, a)]   # a's next use is the furthest
    victims = choose_victims(code, regalloc.live_intervals(code, []), [], "v", 3, set())
    assert victims == [a]


def test_a_pair_the_instruction_names_one_dword_of_can_still_go():
    a, b, t = Reg("v"), Reg("v", 2), Reg("v")
    code = [valu("v_mov_b32", a, Imm(1)), valu("v_mov_b32", b[0], Imm(2)),
            valu("v_mov_b32", b[1], Imm(3)),
            valu("v_add_f32", t, b[1], a),     # a, t and b[1] are needed; b[0] can wait
            valu("v_add_f32", Reg("v"), t, b[0])]
    victims = choose_victims(code, regalloc.live_intervals(code, []), [], "v", 3, set())
    assert victims == [b]
    sc = Scratch(TARGETS["gfx942"], Reg("s", 2, fixed=0), [Reg("s", 1, fixed=2 + k) for k in range(3)])
    res = regalloc.allocate(code, [], name="k", vgpr_limit=3, sgpr_limit=96, target="gfx942",
                            num_warps=1, scratch=sc)
    assert res.vgprs <= 3


def test_spilled_values_round_trip_through_one_slot_each():
    sc = Scratch(TARGETS["gfx942"], Reg("s", 2, fixed=0), [Reg("s", 1, fixed=2 + k) for k in range(3)])
    a, b, c, d, e, f = Reg("v"), Reg("v", 2), Reg("v"), Reg("v"), Reg("v"), Reg("v")
    code = [valu("v_mov_b32", a, Imm(1)), valu("v_mov_b32", b[0], Imm(2)),
            valu("v_mov_b32", b[1], Imm(3)), valu("v_mov_b32", c, Imm(4)),
            valu("v_add_f32", d, c, c),       # a, b (a pair) and c, d live: 5 > 4
            valu("v_add_f32", e, d, b[1]), valu("v_add_f32", f, e, a),
            valu("v_add_f32", Reg("v"), f, b[0])]
    res = regalloc.allocate(code, [], name="k", vgpr_limit=4, sgpr_limit=96, target="gfx942",
                            num_warps=1, scratch=sc)
    assert res.vgprs <= 4 and sc.spilled_v > 0

    def slot(i):
        return int(i.suffix.split("offset:")[1]) if "offset:" in i.suffix else 0
    stores = [i for i in res.code if i.op.startswith("scratch_store")]
    loads = [i for i in res.code if i.op.startswith("scratch_load")]
    # b's dwords are defined one at a time: each def stores only its own dword
    assert stores and all(i.op == "scratch_store_dword" for i in stores)
    assert loads and {slot(i) for i in loads} <= {slot(i) for i in stores}
    assert max(slot(i) for i in stores) + 4 <= sc.bytes


def test_an_instruction_that_alone_needs_more_registers_than_fit_is_an_error():
    loc = user_location()
    xs = [Reg("v") for _ in range(4)]
    code = [valu("v_mov_b32", x, Imm(k)) for k, x in enumerate(xs)]
    # one instruction reading four values and writing a pair: six VGPRs at once
    code.append(Inst("v_madak_wide", [Reg("v", 2)], xs, kind="valu", loc=loc))
    sc = Scratch(TARGETS["gfx942"], Reg("s", 2, fixed=0), [Reg("s", 1, fixed=2 + k) for k in range(3)])
    with pytest.raises(gt.CompileError) as e:
        regalloc.allocate(code, [], name="crowded", vgpr_limit=4, sgpr_limit=96,
                          target="gfx942", num_warps=1, scratch=sc)
    msg = str(e.value)
    assert "crowded" in msg and "VGPRs" in msg and "at most 4" in msg
    assert "test_amd_spill.py" in msg


def _phys_v(p, size=1):
    r = Reg("v", size)
    r.phys = p
    return r


def test_a_reload_of_what_a_register_still_holds_is_dropped_and_only_then():
    from gluon_trace.backends.amd.mir import Fixed, Label
    from gluon_trace.backends.amd.spill import drop_redundant_reloads

    def load(p, off):
        return Inst("scratch_load_dword", [_phys_v(p)], ["off", "off"], f"offset:{off}", "vmem_load")

    def store(p, off):
        return Inst("scratch_store_dword", [], ["off", _phys_v(p), "off"], f"offset:{off}", "vmem_store")

    def use(p):
        return valu("v_add_f32", _phys_v(9), _phys_v(p), _phys_v(p))
    exec_, save = Fixed("exec", "special", 2), Reg("s", 2, fixed=20)

    def kept(code):
        return [i for i in drop_redundant_reloads(code) if isinstance(i, Inst) and i.op.startswith("scratch_load")]
    assert len(kept([load(0, 8), use(0), load(0, 8), use(0)])) == 1
    assert len(kept([store(1, 8), load(1, 8), use(1)])) == 0            # stored from v1 itself
    assert len(kept([load(0, 8), valu("v_mov_b32", _phys_v(0), Imm(0)), load(0, 8)])) == 2
    assert len(kept([load(0, 8), store(1, 8), load(0, 8)])) == 2        # the slot changed
    assert len(kept([load(0, 8), load(0, 12)])) == 2                    # another slot
    assert len(kept([load(0, 8), Label(".L"), load(0, 8)])) == 2        # another block
    narrow = Inst("s_and_saveexec_b64", [save], [Fixed("vcc", "special", 2)])
    widen = Inst("s_mov_b64", [exec_], [save])
    assert len(kept([load(0, 8), narrow, load(0, 8)])) == 1             # fewer lanes: still held
    assert len(kept([narrow, load(0, 8), widen, load(0, 8)])) == 2      # more lanes: reload

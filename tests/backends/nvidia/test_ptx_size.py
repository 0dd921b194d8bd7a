"""Fewer PTX instructions per element for the same results (ptxas's time on the fuzzer's huge
programs grows with them, issue 13): a bfloat16 widened by one ``cvt.f32.bf16`` on sm_90
(the shift sequence on sm_80), a store mask and the owner predicate in one ``setp.lt.and``,
and no instruction whose result nothing reads. Each is pinned on the PTX text and run on the
PTX simulator against the interpreter, bit for bit, on fresh random inputs with the outputs
poisoned."""
import os
import re
import sys

import numpy as np
import pytest

import gluon_trace as gt
from gluon_trace import dtypes as dt
from gluon_trace import language as gl
from gluon_trace.backend import get

sys.path.insert(0, os.path.dirname(__file__))
import ptxsim  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from gluon_trace.backends.nvidia import dce, ptxas  # noqa: E402
from gluon_trace.backends.nvidia.emitter import emit  # noqa: E402
from gluon_trace.errors import CompileError  # noqa: E402


def _run_both(g, target, args):
    """(PTX text, interpreter's args after the run, simulator's args after the run)."""
    ref = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    with np.errstate(all="ignore"):
        get("interpreter").run(g, (1, 1, 1), ref)
    text, _, smem = emit(g, target)
    sim = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    with np.errstate(all="ignore"):
        ptxsim.run(text, (1, 1, 1), sim, smem)
    return text, ref, sim


def _assembles(text, target):
    try:
        ptxas.locate()
    except CompileError as e:
        pytest.skip(f"ptxas not found: {e}")
    ptxas.assemble(text, target)


def _bf16_bits(rng, n, special):
    """Random bfloat16 bit patterns of all magnitudes, ``special`` patterns among them."""
    bits = dt.f32_to_bf16_bits(rng.standard_normal(n).astype(np.float32) * 10.0 ** rng.integers(-3, 4, n))
    bits[rng.choice(n, len(special), replace=False)] = special
    return bits


# zeros and infinities in one operand, subnormals in the other: every bit of each is widened,
# and no product is a NaN (whose rounded payload the interpreter and the simulator disagree on)
SPECIAL_A = np.array([0x0000, 0x8000, 0x7F80, 0xFF80], np.uint16)
SPECIAL_B = np.array([0x0001, 0x807F, 0x0040], np.uint16)


L1 = gl.BlockedLayout([2], [32], [2], [0])


@gt.jit
def widen_bf16(a_ptr, b_ptr, out_ptr, f_ptr, n):
    o = gl.arange(0, 256, layout=L1)
    a = gl.load(a_ptr + o)                                 # two to a word: the paired widening
    b = gl.load(b_ptr + o, mask=o < n, other=1.5)          # masked: one at a time
    s = (a.to(gl.float32) * b.to(gl.float32)).to(gl.bfloat16)   # a tile rounded in pairs
    gl.store(f_ptr + o, s.to(gl.float32) + a.to(gl.float32))    # the widened values read as f32
    gl.store(out_ptr + o, s)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_bf16_widening_matches_the_interpreter(rng, target):
    g = widen_bf16.trace(gl.pointer(gl.bfloat16), gl.pointer(gl.bfloat16), gl.pointer(gl.bfloat16),
                         gl.pointer(gl.float32), gl.int32, num_warps=2, target=target).graph
    a, b = _bf16_bits(rng, 256, SPECIAL_A), _bf16_bits(rng, 256, SPECIAL_B)
    n = int(rng.integers(100, 200))
    text, ref, sim = _run_both(g, target, [a, b, np.full(256, 0x7E7E, np.uint16),
                                           np.full(256, np.nan, np.float32), n])
    if target == "sm_90a":
        assert "cvt.f32.bf16" in text and "cvt.u32.u16" not in text
    else:
        assert "cvt.f32.bf16" not in text and re.search(r"cvt\.u32\.u16 (%r\d+), %h\d+;\n\tshl\.b32 \1, \1, 16;", text)
    # a paired cvt's halves go straight to f32 registers: no mov from an integer register
    assert re.search(r"(shl|and)\.b32 %f\d+, %r\d+, (16|-65536);", text)
    np.testing.assert_array_equal(sim[2], ref[2])
    np.testing.assert_array_equal(sim[3].view(np.uint32), ref[3].view(np.uint32))
    assert not (ref[2] == 0x7E7E).all()
    _assembles(text, target)


L16 = gl.BlockedLayout([1], [32], [1], [0])  # 16 elements over 32 lanes: lanes 16-31 are copies


@gt.jit
def masked_copies(x_ptr, out_ptr, n):
    o = gl.arange(0, 16, layout=L16)
    gl.store(out_ptr + o, gl.load(x_ptr + o) * 3.0, mask=o < n)


@pytest.mark.parametrize("n", [0, 5, 16])
def test_a_store_mask_and_the_owner_in_one_setp(rng, n):
    g = masked_copies.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), gl.int32,
                            num_warps=1, target="sm_90").graph
    x = rng.standard_normal(16).astype(np.float32)
    text, ref, sim = _run_both(g, "sm_90", [x, np.full(16, np.nan, np.float32), n])
    assert re.search(r"setp\.lt\.and\.s32 %p\d+, %r\d+, %r\d+, %p\d+;", text)
    assert "and.pred" not in text
    want = np.full(16, np.nan, np.float32)
    want[:n] = x[:n] * np.float32(3.0)
    np.testing.assert_array_equal(ref[1], want)
    np.testing.assert_array_equal(sim[1], want)
    _assembles(text, "sm_90a")


def test_dead_instructions_are_dropped():
    lines = ["mov.u32 %r1, %tid.x;",
             "add.s32 %r2, %r1, 4;",            # read only by the dead %r3: dead too
             "shl.b32 %r3, %r2, 2;",            # read by nothing
             "shl.b32 %r4, %r4, 16;",           # reads only itself
             "mov.b32 {%h1, %h2}, %r1;",        # %h2 read: stays
             "cvt.f32.bf16 %f1, %h1;",          # dead
             "@%p1 add.s32 %r5, %r1, 1;",       # guarded, read: stays
             "setp.lt.s32 %p1, %r1, 9;",
             "ld.global.b32 %r6, [%rd1];",      # a load stays though unread
             "st.global.b16 [%rd1], %h2;",
             "st.global.b32 [%rd1+4], %r5;",
             "$L_1:",
             "mov.b32 %r7, %r8;",               # a value carried around the loop, read by
             "add.s32 %r8, %r7, %r5;",          # nothing else: dead both
             "@%p1 bra $L_1;"]
    keep = dce.live_lines(lines)
    dropped = [ln for ln, k in zip(lines, keep) if not k]
    assert dropped == ["add.s32 %r2, %r1, 4;", "shl.b32 %r3, %r2, 2;", "shl.b32 %r4, %r4, 16;",
                       "cvt.f32.bf16 %f1, %h1;", "mov.b32 %r7, %r8;", "add.s32 %r8, %r7, %r5;"]


def test_the_emitted_ptx_has_no_dead_instructions(rng):
    g = widen_bf16.trace(gl.pointer(gl.bfloat16), gl.pointer(gl.bfloat16), gl.pointer(gl.bfloat16),
                         gl.pointer(gl.float32), gl.int32, num_warps=2, target="sm_90a").graph
    text, _, _ = emit(g, "sm_90a")
    body = [ln.strip() for ln in text.splitlines()]
    assert all(dce.live_lines(body))
    assert len(re.findall(r"^\tadd\.s32 ", text, re.M)) < 64  # not one per element of a tile


LA = gl.BlockedLayout([1, 4], [8, 4], [1, 1], [1, 0])
LB = gl.BlockedLayout([4, 1], [4, 8], [1, 1], [0, 1])


@gt.jit
def convert_big(x_ptr, out_ptr, R: gl.constexpr, C: gl.constexpr):
    oa = gl.arange(0, R, layout=gl.SliceLayout(1, LA))[:, None] * C + gl.arange(0, C, layout=gl.SliceLayout(0, LA))[None, :]
    v = gl.load(x_ptr + oa) * 2.0
    w = gl.convert_layout(v, LB)  # through shared memory: the tile is read back in LB
    ob = gl.arange(0, R, layout=gl.SliceLayout(1, LB))[:, None] * C + gl.arange(0, C, layout=gl.SliceLayout(0, LB))[None, :]
    gl.store(out_ptr + ob, w + 1.0)


def _first_reader_gap(text):
    """For each ld.shared, how many lines after it the first line reading its results comes."""
    lines = [ln.strip() for ln in text.splitlines()]
    gaps = []
    for i, ln in enumerate(lines):
        m = re.match(r"ld\.shared(?:\.v\d)?\.\w+ (\{[^}]*\}|%\w+),", ln)
        if m:
            regs = re.findall(r"%[a-z]+\d+", m.group(1))
            gaps.append(next(j - i for j in range(i + 1, len(lines))
                             if any(re.search(re.escape(r) + r"\b", lines[j]) for r in regs)))
    return gaps


@pytest.mark.parametrize("R, C, sunk", [(32, 32, False), (64, 256, True)])
def test_shared_loads_of_an_oversized_tile_meet_their_readers(rng, R, C, sunk):
    """A conversion read back in more registers than a thread has (64x256 in one warp: 512 a
    thread) loads each value next to the line that uses it; a small one (32 a thread) keeps the
    loads together, as the rule emitted them. Both compute the interpreter's results."""
    g = convert_big.trace(gl.pointer(gl.float32), gl.pointer(gl.float32), R=R, C=C,
                          num_warps=1, target="sm_90").graph
    x = rng.standard_normal(R * C).astype(np.float32)
    text, ref, sim = _run_both(g, "sm_90", [x, np.full(R * C, np.nan, np.float32)])
    np.testing.assert_array_equal(ref[1], x * np.float32(2.0) + np.float32(1.0))
    np.testing.assert_array_equal(sim[1], ref[1])
    gaps = _first_reader_gap(text)
    assert gaps
    if sunk:
        assert max(gaps) <= 2
    else:
        assert max(gaps) > 2
    _assembles(text, "sm_90a")


def test_a_sunk_shared_load_stops_where_it_must(monkeypatch):
    """On hand-written lines (the limit lowered so the stretch counts as oversized): each load
    moves down to its first reader, and no further than a line that overwrites its address,
    its guard or its result, nor past a barrier or a shared-memory store."""
    from gluon_trace.backends.nvidia import sink
    monkeypatch.setattr(sink, "LIMIT", 1)
    lines = ["ld.shared.b32 %r1, [%r10];",       # read at the end
             "ld.shared.b32 %r2, [%r9+4];",      # its address register changes below
             "@%p1 ld.shared.b32 %r3, [%r11];",  # its guard changes below
             "ld.shared.b32 %r4, [%r12];",       # its result is overwritten below
             "ld.shared.v2.f32 {%f1, %f2}, [%r12+16];",  # read by the store
             "add.s32 %r7, %r7, 1;",
             "st.global.f32 [%rd1], %f2;",
             "setp.ne.s32 %p1, %r7, 0;",
             "add.s32 %r9, %r9, 64;",
             "mov.b32 %r4, 0;",
             "add.s32 %r8, %r1, %r3;",
             "ld.shared.b32 %r5, [%r13];",       # stopped by the barrier
             "bar.sync 0;",
             "ld.shared.b32 %r6, [%r13+4];",     # stopped by the shared store
             "st.shared.b32 [%r9], %r8;",
             "st.global.b32 [%rd1+4], %r5;",
             "st.global.b32 [%rd1+8], %r6;",
             "st.global.b32 [%rd1+12], %r2;",
             "st.global.b32 [%rd1+16], %r4;"]
    got = [x for x, _ in sink.sink_shared_loads([(x, None) for x in lines])]
    assert sorted(got) == sorted(lines)
    assert got[:12] == ["add.s32 %r7, %r7, 1;",
                        "ld.shared.v2.f32 {%f1, %f2}, [%r12+16];", "st.global.f32 [%rd1], %f2;",
                        "@%p1 ld.shared.b32 %r3, [%r11];", "setp.ne.s32 %p1, %r7, 0;",
                        "ld.shared.b32 %r2, [%r9+4];", "add.s32 %r9, %r9, 64;",
                        "ld.shared.b32 %r4, [%r12];", "mov.b32 %r4, 0;",
                        "ld.shared.b32 %r1, [%r10];", "add.s32 %r8, %r1, %r3;",
                        "ld.shared.b32 %r5, [%r13];"]
    assert got[12:] == lines[12:]

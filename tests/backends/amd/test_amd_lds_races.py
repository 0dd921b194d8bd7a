"""The strict LDS race detector (amdsim_races) on small hand-written programs: two waves of 32
(or 64) lanes writing and reading LDS with and without an s_barrier between the accesses. It must
report the unordered pairs -- naming both instructions and the byte -- and accept the same
accesses once a barrier orders them. amdsim's built-in check accepts two waves storing one value
to one byte; the strict one does not (the warp-copy scratch writes of reduce/scan/convert_layout:
test_amd_scratch_warp_copies.py)."""
import re

import numpy as np
import pytest

from gluon_trace.backends.amd.mir import Imm, Inst, Reg
from gluon_trace.backends.amd.target import TARGETS

import amdsim
import amdsim_races

V = [Reg("v", fixed=k) for k in range(4)]   # v0: the work-item id


def _lane_addr(wave: int, other_wave: bool = False) -> list:
    """v1 = lane index, v2 = its dword's LDS address (4 * lane), or the same lane's of the other
    wave's half when ``other_wave`` (4 * (tid ^ wave))."""
    idx = V[0] if other_wave else V[1]
    code = [Inst("v_and_b32", [V[1]], [Imm(wave - 1), V[0]], kind="valu")]
    if other_wave:
        code.append(Inst("v_xor_b32", [V[3]], [Imm(wave), V[0]], kind="valu"))
        idx = V[3]
    return code + [Inst("v_lshlrev_b32", [V[2]], [Imm(2), idx], kind="valu")]


def _own_addr() -> list:
    """v2 = 4 * tid: each lane of each wave its own dword."""
    return [Inst("v_lshlrev_b32", [V[2]], [Imm(2), V[0]], kind="valu")]


def write(val=None):
    return [Inst("ds_write_b32", [], [V[2], val or V[0]], kind="lds_store"),
            Inst("s_waitcnt", suffix="lgkmcnt(0)", kind="waitcnt")]


def read():
    return [Inst("ds_read_b32", [V[3]], [V[2]], kind="lds_load"),
            Inst("s_waitcnt", suffix="lgkmcnt(0)", kind="waitcnt")]


BARRIER = [Inst("s_barrier", kind="barrier")]


def run(code, target, sim_class=amdsim_races.RaceSim):
    t = TARGETS[target]
    sim = sim_class(code + [Inst("s_endpgm", kind="end")], t, t.wave, 8 * t.wave, b"\0" * 16,
                    amdsim.Memory(), 2, 8)
    sim.run((1, 1, 1))
    return sim


TARGETS_ = ["gfx1100", "gfx942"]


@pytest.mark.parametrize("target", TARGETS_)
def test_two_waves_storing_one_value_to_one_byte_race(target):
    """Both waves store their lane index at the lane's dword: the same bytes, the same values,
    nothing ordering the stores. The built-in check lets it pass; the strict one names the
    store (twice: the same pc in two waves) and the first byte."""
    w = TARGETS[target].wave
    code = [Inst("v_and_b32", [V[1]], [Imm(w - 1), V[0]], kind="valu"),
            Inst("v_lshlrev_b32", [V[2]], [Imm(2), V[1]], kind="valu")] + write(V[1])
    sim = run(code, target, amdsim.Sim)                    # lenient: same value, no report
    assert sim.lds[:4 * w].view(np.uint32).tolist() == list(range(w))
    with pytest.raises(amdsim.SimError) as e:
        run(code, target)
    msg = str(e.value)
    assert re.search(r"wave 1 writes LDS byte 0 at pc 2 \(`ds_write_b32 [^`]*`\), which wave 0 wrote at pc 2 "
                     r"\(`ds_write_b32", msg), msg
    assert "no s_barrier" in msg


@pytest.mark.parametrize("target", TARGETS_)
def test_a_barrier_orders_writes_of_one_byte_by_two_waves(target):
    """Each wave writes its own dwords, then (after a barrier) the other wave's: accepted; the same
    program without the barrier is a write/write race, whatever the order amdsim ran them in."""
    w = TARGETS[target].wave
    first, second = _own_addr() + write(), _lane_addr(w, other_wave=True) + write(V[1])
    sim = run(first + BARRIER + second, target)
    assert sim.lds[:8 * w].view(np.uint32).tolist() == list(range(w)) * 2   # the second stores won
    # wave 0 ran first, into wave 1's dwords (pc 6); wave 1's first store (pc 1) finds its write
    with pytest.raises(amdsim.SimError, match=rf"wave 1 writes LDS byte {4 * w} at pc 1 .*which wave 0 wrote at pc 6 "):
        run(first + second, target)


@pytest.mark.parametrize("target", TARGETS_)
def test_a_read_of_another_waves_write_needs_a_barrier(target):
    """Each wave writes its own dwords, then every wave reads wave 0's: wave 1's read needs a
    barrier after wave 0's store (accepted with one, a read/write race without)."""
    w = TARGETS[target].wave
    prog = lambda sync: _own_addr() + write() + sync + _lane_addr(w) + read()  # noqa: E731
    sim = run(prog(BARRIER), target)
    assert sim.lds[:8 * w].view(np.uint32).tolist() == list(range(2 * w))
    with pytest.raises(amdsim.SimError, match=r"wave 1 reads LDS byte 0 at pc 5 \(`ds_read_b32.*which wave 0 "
                                              r"wrote at pc 1 \(`ds_write_b32"):
        run(prog([]), target)


@pytest.mark.parametrize("target", TARGETS_)
def test_a_write_of_what_another_wave_read_needs_a_barrier(target):
    """Each wave writes its own dwords; after a barrier both read wave 1's, then overwrite their
    own: wave 1's overwrite needs a second barrier (wave 0 may not have read yet)."""
    w = TARGETS[target].wave
    wave1s = [Inst("v_and_b32", [V[1]], [Imm(w - 1), V[0]], kind="valu"),
              Inst("v_or_b32", [V[3]], [Imm(w), V[1]], kind="valu"),
              Inst("v_lshlrev_b32", [V[2]], [Imm(2), V[3]], kind="valu")]
    prog = lambda sync: _own_addr() + write() + BARRIER + wave1s + read() + sync + _own_addr() + write(V[1])  # noqa: E731
    sim = run(prog(BARRIER), target)
    assert sim.lds[:8 * w].view(np.uint32).tolist() == list(range(w)) * 2
    with pytest.raises(amdsim.SimError, match=rf"LDS race: wave 1 writes LDS byte {4 * w} at pc \d+ \(`ds_write_b32"
                                              rf".*which wave 0 read at pc \d+ \(`ds_read_b32"):
        run(prog([]), target)


@pytest.mark.parametrize("target", TARGETS_)
def test_lanes_of_one_wave_storing_one_byte(target):
    """Every lane stores to dword 0 of its wave's own region: one value (the wave's base) is
    accepted, each lane's own index (different values) is reported with the byte and the store."""
    w = TARGETS[target].wave
    base = [Inst("v_and_b32", [V[1]], [Imm(w), V[0]], kind="valu"),        # w for wave 1, 0 for wave 0
            Inst("v_lshlrev_b32", [V[2]], [Imm(2), V[1]], kind="valu")]
    sim = run(base + write(V[1]), target)
    assert sim.lds[4 * w:4 * w + 4].view(np.uint32).tolist() == [w]
    with pytest.raises(amdsim.SimError, match=r"LDS conflict: lanes of wave 0 write different values .* to LDS "
                                              r"byte 0 in one instruction at pc 2 \(`ds_write_b32"):
        run(base + write(V[0]), target)

"""ptxsim_races: the shared-memory race detector (happens-before by per-warp vector clocks over
named barriers, mbarriers and barrier.cluster) finds a dropped barrier in whatever order the
simulator runs, where a schedule alone would have to make the race happen. Every kernel of
test_ws_sim runs under it too (no race reported in our PTX); here, our kernels' PTX with one
synchronisation dropped is reported, naming the warps and the byte, and runs silently on
ptxsim_ws without the detector.
"""
import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import ptxsim_races  # noqa: E402
import ptxsim_ws  # noqa: E402

pytest.importorskip("gluon_trace.backends.nvidia")
from test_kernels import BF16, check, operands, padded  # noqa: E402
from test_warpspec import handoff  # noqa: E402
from test_ws_sim import _bf16_descs, _fresh, streamk_case, trace  # noqa: E402

RACE = r"shared-memory race: warp (\d+) of CTA (\d+) {} shared byte (\d+), which warp (\d+) {} with no barrier"


def _drop(text, *at):
    """The PTX without its lines ``at`` (indices into text.split('\\n'))."""
    lines = text.split("\n")
    return "\n".join(line for i, line in enumerate(lines) if i not in at)


def _both(text, grid, args, smem, why):
    """The PTX runs silently on ptxsim_ws and raises ``why`` on ptxsim_races (lowest pc first)."""
    ptxsim_ws.run(text, grid, args(), smem)
    with pytest.raises(RuntimeError, match=why) as e:
        ptxsim_races.run(text, grid, args(), smem)
    return re.search(why, str(e.value))


def _ws_gemm():
    from gluon_trace.kernels.matmul_hopper_ws import matmul_hopper_ws
    m, n, k = 192, 128, 96
    a, b = (padded(x) for x in operands(np.random.default_rng(), m, n, k, BF16))

    def args():
        c = padded(np.full((m, n), np.nan, np.float32).astype(BF16))
        return [*_bf16_descs(_fresh(a), _fresh(b), c, 64, 64, 32), m, n, k]
    _, text, smem = trace(matmul_hopper_ws, args(), (2,), STAGES=3, GROUP_M=2, num_warps=4)
    s = args()
    ptxsim_races.run(text, (2,), s, smem)
    check(s[2].base[:, :n].astype(np.float32), a, b, 1e-2)
    return text, smem, args


def test_tma_store_before_the_other_warps_wrote_its_source():
    """The C tile's epilogue: every consumer warp stmatrix'es its part, fence.proxy.async, then
    bar.sync before thread 0 issues the TMA store. Without the bar.sync, warp 0 stores bytes the
    other warps wrote unordered."""
    text, smem, args = _ws_gemm()
    lines = text.split("\n")
    fence = next(i for i, line in enumerate(lines) if "fence.proxy.async.shared::cta" in line)
    bar = next(i for i in range(fence, fence + 4) if lines[i].strip() == "bar.sync 1, 128;")
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in lines[bar + 1]
    found = _both(_drop(text, bar), (2,), args, smem, RACE.format("stores by TMA", "wrote"))
    assert found.group(1) == "0" and found.group(4) != "0"


def test_smem_refilled_while_a_tma_store_still_reads_it():
    """The next tile's stmatrix into the C buffer must wait for the previous tile's TMA store to
    be retired (thread 0's cp.async.bulk.wait_group.read) and for a barrier after it. The kernel
    has two barriers there (one after the wait, one before the buffer's store); without both,
    a warp overwrites bytes warp 0's store was still reading."""
    text, smem, args = _ws_gemm()
    lines = text.split("\n")
    wait = next(i for i, line in enumerate(lines) if "cp.async.bulk.wait_group.read 0;" in line)
    stm = next(i for i in range(wait, len(lines)) if "stmatrix" in lines[i])
    bars = [i for i in range(wait, stm) if lines[i].strip() == "bar.sync 1, 128;"]
    assert len(bars) == 2
    ptxsim_races.run(_drop(text, bars[0]), (2,), args(), smem)   # either one is enough
    ptxsim_races.run(_drop(text, bars[1]), (2,), args(), smem)
    found = _both(_drop(text, *bars), (2,), args, smem, RACE.format(r"writes \(stmatrix\)", "read"))
    assert found.group(4) == "0" and found.group(1) != "0"


def test_streamk_broadcast_without_its_barrier():
    """The stream-K fix-up's counter value crosses from thread 0 to the other warps through shared
    memory; without the bar.sync between the st.shared and the ld.shared, they read it unordered
    (test_ws_sim needs warps drifting apart and luck to see it; here any order shows it)."""
    text, smem, args, programs, *_ = streamk_case()
    lines = text.split("\n")
    st = next(i for i, line in enumerate(lines) if re.fullmatch(r"\t@%p\d+ st\.shared\.b32 \[%r\d+\], %r\d+;", line)
              and "atom.global" in lines[i - 2])
    assert lines[st + 1] == "\tbar.sync 1, 128;" and "ld.shared" in lines[st + 2]
    found = _both(_drop(text, st + 1), (programs,), args, smem, RACE.format("reads", "wrote"))
    assert found.group(4) == "0" and found.group(1) != "0"


@pytest.mark.parametrize("target", ["sm_90", "sm_90a"])
def test_partitions_without_their_handoff(target):
    """handoff's default partition reading the worker's buffer without waiting on the mbarrier:
    lowest pc first it reads before the worker writes, and the worker's writes come unordered
    after those reads."""
    x = np.random.default_rng().standard_normal(256).astype(np.float32)

    def args():
        return [x.copy(), np.full(258, np.nan, np.float32), 3]
    # one CTA: every CTA of handoff stores the same outputs, a race between CTAs (test_ws_sim's
    # test_handoff) that the detector reports first, in one instruction, when CTAs run together
    _, text, smem = trace(handoff, args(), (1,), target, N=256, WORKER_WARPS=2, num_warps=4)
    wait = re.search(r"(\tmbarrier\.try_wait\.parity\.shared::cta\.b64 (%p\d+), [^\n]*)\n", text)
    no_wait = text.replace(wait.group(1), f"\tmov.pred {wait.group(2)}, 1;")
    found = _both(no_wait, (1,), args, smem, RACE.format("writes", "read"))
    assert int(found.group(1)) >= 4 and int(found.group(4)) < 4   # a worker warp, a default one


def test_reduction_scratch_read_before_every_warp_wrote_it():
    """A cross-warp reduction (handoff's max in the default partition) writes each warp's partial
    to scratch, meets at bar.sync, then reads them all; without the bar.sync the reads race."""
    x = np.random.default_rng().standard_normal(256).astype(np.float32)

    def args():
        return [x.copy(), np.full(258, np.nan, np.float32), 3]
    _, text, smem = trace(handoff, args(), (1,), "sm_90", N=256, WORKER_WARPS=2, num_warps=4)
    scratch = re.search(r"\t@%p\d+ st\.shared\.f32 \[%r\d+\+0\], %f\d+;\n(\tbar\.sync 1, 128;\n)\tld\.shared\.f32", text)
    bad = text.replace(scratch.group(0), scratch.group(0).replace(scratch.group(1), ""))
    found = _both(bad, (1,), args, smem, RACE.format("reads", "wrote"))
    assert found.group(1) != found.group(4)


def test_streamk_parts_published_before_every_warp_stored_its_share():
    """Each CTA's warps store their share of a partial tile, meet at bar.sync, and thread 0
    counts the part with atom.acq_rel.gpu (a release that carries the other warps' stores,
    ordered before it by the barrier); the last CTA's acquire makes them all visible to its
    warps. Without that bar.sync, the last CTA reads shares that nothing orders before it."""
    text, smem, args, programs, *_ = streamk_case()
    lines = text.split("\n")
    atom = next(i for i, line in enumerate(lines) if "atom.global.acq_rel.gpu.add" in line)
    bar = max(i for i in range(atom) if lines[i].strip() == "bar.sync 1, 128;")
    assert any("st.global.v2.f32" in line for line in lines[bar - 12:bar])   # the shares' stores
    found = _both(_drop(text, bar), (programs,), args, smem,
                  r"global-memory race: warp (\d+) of CTA (\d+) reads byte \d+ of buffer 3, which "
                  r"warp (\d+) of CTA (\d+) wrote with nothing ordering them")
    assert found.group(2) != found.group(4) and found.group(3) != "0"   # another CTA's warp but thread 0's


@pytest.mark.parametrize("sem", ["relaxed", "release", "acquire"])
def test_streamk_counter_needs_acquire_and_release(sem):
    """The count is both: a release publishes this CTA's part, an acquire sees the others'. A
    relaxed, release-only or acquire-only atomic leaves the last CTA's reads of the parts
    unordered."""
    text, smem, args, programs, *_ = streamk_case()
    assert text.count("atom.global.acq_rel.gpu.add.u32") == 1
    bad = text.replace("atom.global.acq_rel.gpu.add.u32", f"atom.global.{sem}.gpu.add.u32")
    _both(bad, (programs,), args, smem, r"global-memory race: warp \d+ of CTA \d+ reads byte \d+ of buffer 3")

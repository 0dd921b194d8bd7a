"""The stream-K GEMM (gluon_trace.kernels.matmul_hopper_streamk) on the interpreter: the
schedule's arithmetic checked against a brute-force split of the K steps, and the kernel
against numpy for tile counts that do and do not divide the grid, tails cut into 2..SPLIT
parts, a K of one step, and back-to-back launches on one workspace (the counters reset)."""
import numpy as np
import pytest

from gluon_trace.kernels.matmul_hopper_streamk import matmul_hopper_streamk, streamk_workspace

from test_cluster import cluster_descs
from test_kernels import BF16, check, operands, padded


def ranges(S, P):
    return [(c * S // P, (c + 1) * S // P) for c in range(P)]


@pytest.mark.parametrize("S, P", [(7424, 132), (2048, 128), (5, 8), (64, 3), (1, 4), (130, 132)])
def test_owner_is_the_cta_whose_range_holds_the_step(S, P):
    """_owner's closed form ((i+1)*P - 1) // S names, for every step, the CTA whose range
    [c*S//P, (c+1)*S//P) holds it (empty ranges are skipped)."""
    for c, (lo, hi) in enumerate(ranges(S, P)):
        for i in range(lo, hi):
            assert ((i + 1) * P - 1) // S == c


def run(rng, m, n, k, programs, parts, bm=64, bn=64, bk=32, epi_n=None, launches=1, **constexprs):
    """The kernel against numpy; ``parts``: how many partial tiles the schedule must have
    published (0: no tile cut), counted from the workspace."""
    a, b = operands(rng, m, n, k, BF16)
    a, b = padded(a), padded(b)
    size, count = streamk_workspace(programs, bm, bn)
    partials = np.full(size, np.nan, np.float32)   # never read before it is written
    counters = np.zeros(count, np.int32)
    for _ in range(launches):
        c = padded(np.full((m, n), np.nan, np.float32))
        matmul_hopper_streamk[(programs,)](*cluster_descs(a, b, c, bm, bn, bk, 1, epi_n), partials, counters,
                                           m, n, k, backend="interpreter", target="sm_90a",
                                           **{"STAGES": 3, "GROUP_M": 2, **constexprs})
        check(c, a, b)
        assert not counters.any(), "the last part of each tile sets its counter back to zero"
        written = ~np.isnan(partials.reshape(2 * programs, bm * bn)).all(axis=1)
        assert written.sum() == parts


@pytest.mark.parametrize("m, n, k, programs, parts", [
    (192, 128, 160, 4, 4),   # 6 tiles on 4 CTAs: 4 whole, 2 of 5 steps cut over 4 CTAs (2 parts each)
    (128, 128, 320, 3, 3),   # 4 tiles on 3: 3 whole, 1 of 10 steps cut in ranges of 3, 3, 4
    (64, 128, 96, 5, 5),     # 2 tiles on 5 CTAs, all stream-K: 6 steps in ranges of 1 or 2
    (320, 64, 160, 3, 4),    # 2 tail tiles of 5 steps in ranges [0,3) [3,6) [6,10): CTA 1 ends tile 0, starts tile 1
    (130, 70, 100, 4, 4),    # edge tiles along M and N, a K that is not a step multiple
    (128, 128, 64, 4, 0),    # tiles = CTAs: no stream-K at all
])
def test_streamk_gemm_on_the_interpreter(rng, m, n, k, programs, parts):
    run(rng, m, n, k, programs, parts)


def test_streamk_parts_capped_by_split(rng):
    """One tile of 8 steps on 6 CTAs with SPLIT=2: two CTAs share it, four take nothing."""
    run(rng, 64, 64, 256, 6, 2, SPLIT=2)


def test_streamk_column_block_epilogue_and_repeated_launches(rng):
    run(rng, 192, 128, 224, 4, 4, epi_n=32, launches=2)


def test_streamk_k_of_one_step(rng):
    """2 tail tiles of one step on 4 CTAs: 2 CTAs take a whole tile each (through the
    workspace, as every stream-K unit), 2 take nothing."""
    run(rng, 192, 128, 32, 4, 2)

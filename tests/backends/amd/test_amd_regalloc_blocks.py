"""The register file's search for the lowest free aligned block (regalloc._File.lowest):
bit arithmetic over the file instead of a linear search from unit 0 (which made a kernel
with thousands of live values spend most of its compile there). Checked against the linear
search on random allocation sequences, and the scan stays fast on a big one."""
import random
import time

import pytest

from gluon_trace.backends.amd.regalloc import _File


def linear_lowest(f: _File, size: int, align: int) -> int:
    p = 0
    while any(f.is_busy(q) for q in range(p, p + size)):
        p += align
    return p


@pytest.mark.parametrize("seed", range(6))
def test_heap_search_finds_the_linear_searchs_block(seed):
    rnd = random.Random(seed)
    f = _File()
    t = 0
    for _ in range(3000):
        t += 1
        f.expire(t)
        size, align = rnd.choice([(1, 1), (2, 2), (2, 1), (4, 4), (4, 2), (8, 4)])
        if rnd.random() < 0.05:  # a fixed register, placed where it must be
            p = rnd.randrange(0, 64)
            if any(f.is_busy(q) for q in range(p, p + size)):
                continue
        else:
            want = linear_lowest(f, size, align)
            p = f.lowest(size, align)
            assert p == want, (seed, size, align)
        f.take(p, size, t + rnd.randrange(1, 200))


def test_many_live_pairs_allocate_quickly():
    f = _File()
    t0 = time.perf_counter()
    for t in range(20000):
        f.expire(t)
        f.take(f.lowest(2, 2), 2, t + 4000)  # 4000 pairs live at once
    assert time.perf_counter() - t0 < 5.0
    assert f.top <= 2 * 4001

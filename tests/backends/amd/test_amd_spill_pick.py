"""The spiller's candidate order (spill._Furthest) against scoring every live register, as the
sweep did before it kept one heap per (dwords, cost) group."""
import random

import pytest

from gluon_trace.backends.amd.mir import Reg
from gluon_trace.backends.amd.spill import _Furthest


def brute(live, k, n, mentions, cost, iv, here):
    def score(r):
        nxt = [m for m in mentions[r] if m > k]
        dist = (nxt[0] - k) if nxt else (iv[r][1] - k + n)
        return (dist * r.size / cost[r], r.id)
    cands = [r for r in live if here.get(r, 0) < r.size]
    return sorted(cands, key=lambda r: (-score(r)[0], r.id))


@pytest.mark.parametrize("seed", range(12))
def test_furthest_matches_scoring_every_register(seed):
    rng = random.Random(seed)
    n = 300
    regs = [Reg("v", rng.choice([1, 1, 2, 4])) for _ in range(60)]
    mentions, iv, cost = {}, {}, {}
    for r in regs:
        s = rng.randrange(n - 20)
        ks = sorted(rng.sample(range(s, min(n, s + rng.randrange(5, 150))), rng.randrange(1, 5)))
        mentions[r] = ks
        iv[r] = [ks[0], ks[-1] + rng.choice([0, 0, 30])]
        cost[r] = rng.choice([1, 2, 3, 8, 9]) * len(ks)   # few groups, ties inside them
    pick = _Furthest(n, mentions, cost, iv)
    live: set = set()
    checked = 0
    for k in range(n):
        for r in regs:
            if iv[r][0] == k:
                live.add(r)
                pick.add(r, k)
            if iv[r][1] == k - 1 and r in live:
                live.discard(r)
                pick.drop(r)
        here = {r: rng.choice([1, r.size]) for r in regs if k in mentions[r] and r in live}
        for r in here:
            pick.moved(r, k)
        if k % 7 == 3 and live:
            want = brute(live, k, n, mentions, cost, iv, here)
            take = rng.randrange(1, 4)
            got = []
            for r in pick.furthest(k, here):
                got.append(r)
                live.discard(r)   # what furthest() yields is spilled
                if len(got) == take:
                    break
            pick.restore()
            assert got == want[:take]
            checked += 1
    assert checked > 20

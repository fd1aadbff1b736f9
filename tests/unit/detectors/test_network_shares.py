"""`NetworkDetector._shares_healthy` judges a quiet sample's shares as a sort per port would (issue 23).

It decides whether any port carries less than `degraded_ratio` of its busy
siblings' median. A healthy sample is answered from the sorted rates'
extremes alone (the slowest port against the largest median any port can
have); anything closer goes port by port. The reference below takes each
port's siblings apart and sorts them, the definition `_degraded` uses.
Random rate sets straddle both bounds (idle and busy links, a port near
half its siblings' rate, equal rates, zeros); a NaN is never healthy here.
"""

from __future__ import annotations

import math
import random

import pytest

from trainguard.detectors.network import NetworkDetector


def _reference(d: NetworkDetector, rates: list[float]) -> bool:
    n = len(rates)
    for i, rate in enumerate(rates):
        siblings = sorted(rates[:i] + rates[i + 1:])
        mid = siblings[(n - 1) // 2]
        if mid >= d.busy_bps and rate < d.degraded_ratio * mid:
            return False
    return True


def _rates(rng: random.Random) -> list[float]:
    n = rng.choice([2, 3, 4, 8, 16])
    level = rng.choice([0.0, 5e8, 1e9, 2e10])
    rates = [level * rng.uniform(0.9, 1.1) for _ in range(n)]
    for _ in range(rng.choice([0, 0, 1, 2])):
        rates[rng.randrange(n)] = rng.choice([0.0, level * 0.49, level * 0.5, level * 0.51, level * 3])
    return rates


@pytest.mark.parametrize("seed", range(4))
def test_the_shortcut_judges_as_a_sort_per_port(seed: int) -> None:
    rng = random.Random(seed)
    d = NetworkDetector()
    verdicts = set()
    for _ in range(3000):
        rates = _rates(rng)
        verdict = d._shares_healthy(rates)
        assert verdict == _reference(d, rates), rates
        verdicts.add(verdict)
    assert verdicts == {True, False}  # both answers were reached


def test_a_nan_rate_is_never_healthy_here() -> None:
    d = NetworkDetector()
    assert not d._shares_healthy([2e10, math.nan, 2e10])
    assert not d._shares_healthy([math.inf, -math.inf, 2e10])  # inf - inf: the port-by-port path decides

"""The ETTR interval sweep gives what the obvious per-segment test gives, on random overlaps."""

from __future__ import annotations

import random

import pytest

from trainguard.actions.ettr import _measure_by_priority


def brute_force(intervals: list[tuple[float, float, int]], *, lo: float, hi: float) -> dict[int, float]:
    points = sorted({lo, hi, *(max(lo, min(hi, p)) for a, b, _ in intervals for p in (a, b))})
    out: dict[int, float] = {}
    for left, right in zip(points, points[1:]):
        labels = [lab for a, b, lab in intervals if a <= (left + right) / 2 < b]
        if labels:
            out[min(labels)] = out.get(min(labels), 0.0) + (right - left)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_sweep_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    intervals = []
    for _ in range(rng.randint(0, 40)):
        a = rng.uniform(-10, 110)
        intervals.append((a, a + rng.choice([0.0, rng.uniform(0, 30)]), rng.randint(0, 3)))
    got = _measure_by_priority(intervals, lo=0.0, hi=100.0)
    want = brute_force(intervals, lo=0.0, hi=100.0)
    assert got.keys() == want.keys()
    for label, length in want.items():
        assert got[label] == pytest.approx(length)


def test_empty_account() -> None:
    assert _measure_by_priority([], lo=float("inf"), hi=float("-inf")) == {}

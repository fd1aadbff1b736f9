"""Rolling keeps its window sorted as it moves: its median and MAD must be bit for bit those of sorting.

The reference is the plain definition (`median` of the window, `median` of the absolute deviations),
computed afresh at every step of random walks over windows with ties, signed zeros, and non-finite values
that enter and leave. Equality is on the float's bits (`float.hex`), not `==`: a -0.0 or the last
rounding step would slip past `==`.
"""

from __future__ import annotations

import math
import pickle
import random

import pytest

from trainguard.detectors.common import Rolling, _median_deviation, median


def _reference(values: list[float]) -> tuple[float, float]:
    m = median(values)
    return m, median([abs(v - m) for v in values])


def _bits(x: float) -> str:
    return "nan" if math.isnan(x) else x.hex()


def _walk(rng: random.Random, size: int, steps: int, draw: list[float]) -> None:
    r = Rolling(size)
    for step in range(steps):
        r.add(rng.choice(draw) if rng.random() < 0.3 else rng.choice(draw) * rng.uniform(0.5, 2.0))
        if rng.random() < 0.2:
            r = pickle.loads(pickle.dumps(r))  # a snapshot restores the window, and the sorted copy with it
        if rng.random() < 0.7:  # not every step asks: the sorted copy must follow unasked steps too
            want_m, want_mad = _reference(list(r.values))
            assert (_bits(r.median()), _bits(r.mad())) == (_bits(want_m), _bits(want_mad)), (size, step)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 8, 64, 120])
def test_median_and_mad_match_sorting_bit_for_bit(size: int) -> None:
    rng = random.Random(size)
    _walk(rng, size, 600, [1.0, 1.0, 2.0, 0.1, 1e-9, 3.3, 7.0, 0.30000000000000004])


def test_ties_and_signed_zeros_match_sorting() -> None:
    rng = random.Random(7)
    r = Rolling(9)
    for _ in range(2_000):
        r.add(rng.choice([0.0, -0.0, 1.0, -1.0, 2.0]))
        want_m, want_mad = _reference(list(r.values))
        assert (_bits(r.median()), _bits(r.mad())) == (_bits(want_m), _bits(want_mad))


@pytest.mark.parametrize("odd", [math.inf, -math.inf, math.nan])
def test_a_non_finite_value_is_sorted_as_before_until_it_leaves(odd: float) -> None:
    r = Rolling(5)
    for v in (1.0, 2.0, 3.0, 4.0, 5.0):
        r.add(v)
    r.median()
    r.add(odd)
    for step in range(12):  # in the window for five adds, then gone: the fast path comes back
        want_m, want_mad = _reference(list(r.values))
        assert (_bits(r.median()), _bits(r.mad())) == (_bits(want_m), _bits(want_mad)), step
        r.add(float(step))
    assert r._sorted == sorted(r.values)


def test_the_sorted_copy_is_not_pickled() -> None:
    r = Rolling(4)
    for v in (3.0, 1.0, 2.0):
        r.add(v)
    r.median()
    assert r._sorted == [1.0, 2.0, 3.0]
    assert "[1.0, 2.0, 3.0]" not in repr(r.__getstate__())
    back = pickle.loads(pickle.dumps(r))
    assert back._sorted is None and back.median() == 2.0 and back._sorted == [1.0, 2.0, 3.0]


def test_median_deviation_of_random_sorted_values() -> None:
    rng = random.Random(3)
    for n in range(0, 40):
        for _ in range(25):
            values = sorted(rng.choice([1.0, 2.0, rng.random(), rng.random() * 100]) for _ in range(n))
            m = rng.choice([median(values), rng.uniform(-1.0, 101.0)])  # any centre, not only the median
            assert _bits(_median_deviation(values, m)) == _bits(median([abs(v - m) for v in values]))

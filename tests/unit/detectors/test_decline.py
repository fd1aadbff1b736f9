"""Gradual whole-job decline: caught against the job's demonstrated speed, not a trailing baseline."""

from __future__ import annotations

import math
import random

from trainguard.detectors.slowdown import SlowdownDetector
from trainguard.detectors.trend import DeclineTracker
from trainguard.schemas.records import Anomaly, TrainingStep

STEP_S = 6.0


def run(detector: SlowdownDetector, hours: float, factor: object, *, seed: int = 1,
        stalls: bool = False) -> list[Anomaly]:
    """One rank's step records for `hours`; `factor(t)` scales the step time at elapsed time t."""
    rng, out, t, step = random.Random(seed), [], 0.0, 0
    while t < hours * 3600:
        dt = STEP_S * factor(t) * rng.lognormvariate(0.0, 0.03)  # type: ignore[operator]
        if stalls and rng.random() < 0.01:
            dt += rng.uniform(5.0, 15.0)  # a data-loader stall
        t += dt
        step += 1
        out += detector.observe(TrainingStep(ts=t, job="j", rank=0, node="n0", step=step, loss=2.0, step_time_s=dt))
    return out


def test_a_ten_percent_an_hour_decline_is_caught_within_15_minutes_of_reaching_ten_percent() -> None:
    start = 2 * 3600.0
    found = run(SlowdownDetector(), 3.6, lambda t: 1.0 + 0.1 * max(0.0, t - start) / 3600)
    declines = [a for a in found if a.evidence.get("cause") == "gradual_decline"]
    assert len(declines) == 1 and found == declines
    reached_10 = start + 3600.0
    assert declines[0].ts <= reached_10 + 900.0
    assert declines[0].nodes == [] and declines[0].onset >= start


def test_diurnal_drift_noise_and_data_loader_stalls_raise_nothing() -> None:
    drift = 0.03  # +-3 % over the day, a little more than the simulator's default
    assert run(SlowdownDetector(), 24, lambda t: 1.0 + drift * math.sin(2 * math.pi * t / 86_400), stalls=True) == []


def test_restart_warm_up_block_is_skipped_and_the_reference_survives_the_restart() -> None:
    t = DeclineTracker(block_s=60.0, rel=0.08, confirm=2)
    ts, hits = 0.0, []
    for attempt, level in ((0, 1.0), (1, 1.3)):  # the new attempt's first block is slow (compiling)...
        for i in range(60):
            ts += 6.0
            value = level if (attempt == 1 and i < 10) else 1.0
            hits.append(t.add("j", attempt, ts, value))
    assert [h for h in hits if h is not None] == []  # ...and is not a decline


def test_a_step_change_already_reported_as_a_straggler_is_not_reported_twice() -> None:
    found = run(SlowdownDetector(), 4, lambda t: 1.25 if t > 3600 else 1.0)
    assert len(found) == 1 and found[0].evidence.get("cause") != "gradual_decline"

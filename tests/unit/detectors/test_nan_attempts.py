"""A NaN of a run that was already restarted is not a new fault."""

from __future__ import annotations

from trainguard.detectors.nan import NanDetector
from trainguard.schemas.records import TrainingStep


def step(ts: float, rank: int, step: int, attempt: int, loss: float | str = 1.0) -> TrainingStep:
    return TrainingStep(ts=ts, job="j", rank=rank, node=f"n{rank}", step=step, loss=loss, attempt=attempt)


def test_late_nan_records_of_the_abandoned_attempt_raise_nothing() -> None:
    d = NanDetector()
    found = []
    for t in range(5):  # attempt 0 poisoned at step 3 and restarted at step 2 as attempt 1
        found += d.observe(step(float(t), 0, t, 0, "nan" if t >= 3 else 1.0))
        found += d.observe(step(float(t), 1, t, 0, "nan" if t >= 3 else 1.0))
    found += d.tick(20.0)
    assert [a.step for a in found] == [3]
    for t in range(3, 40):  # the new attempt trains; the old run's NaN steps arrive late, out of order
        found += d.observe(step(20.0 + t, 0, t, 1))
        found += d.observe(step(20.0 + t, 1, t, 1))
        found += d.observe(step(20.0 + t, 1, 60 + t, 0, "nan"))
    found += d.tick(200.0)
    assert [a.step for a in found] == [3]


def test_a_nan_in_the_new_attempt_is_still_found() -> None:
    d = NanDetector()
    found = []
    for t in range(5):
        found += d.observe(step(float(t), 0, t, 1, "nan" if t == 4 else 1.0))
        found += d.observe(step(float(t), 1, t, 1))
    found += d.tick(30.0)
    assert [(a.step, a.ranks) for a in found] == [(4, [0])]

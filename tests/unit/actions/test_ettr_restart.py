"""An episode ends at the first step of the restarted job, even when it resumes past the bad step."""

from __future__ import annotations

from actions.ettr import EttrAccount
from schemas.records import Incident, TrainingStep


def step(ts: float, n: int, attempt: int = 0) -> TrainingStep:
    return TrainingStep(ts=ts, job="j", rank=0, node="n", step=n, loss=1.0, step_time_s=1.0, attempt=attempt)


def test_restart_that_resumes_beyond_the_incident_step_still_ends_the_episode() -> None:
    acc = EttrAccount()
    for n in range(1, 11):
        acc.observe(step(float(n), n))
    acc.observe(Incident(ts=12.0, id="i", kind="slowdown", job="j", onset=11.0, detected_at=12.0))
    for n in range(11, 20):  # a checkpoint written after detection: the restart resumes at step 11
        acc.observe(step(10.0 + 5 + n - 10, n, attempt=1))
    report = acc.report("j")
    assert report.unproductive_s["failover"] == 3.0  # from detection (12) to the first new step's start (15)
    assert report.productive_s > 10.0

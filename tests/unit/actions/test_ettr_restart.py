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


def test_a_restored_account_reports_and_continues_exactly_like_the_original() -> None:
    """ETTR is durable: what `snapshot` journaled, `restore` takes back (a restarted act, another machine)."""
    acc = EttrAccount()
    for n in range(1, 11):
        acc.observe(step(float(n), n))
    acc.observe(Incident(ts=12.0, id="i", kind="nan", job="j", onset=11.0, detected_at=12.0))
    assert set(acc.take_dirty()) == {"j"} and not acc.take_dirty()  # journaled once per change
    again = EttrAccount()
    again.restore("j", acc.snapshot("j"))
    assert again.report("j") == acc.report("j") and again.attempt("j") == acc.attempt("j")
    for account in (acc, again):  # the restore and the recompute after it are counted the same way
        for n in range(5, 12):
            account.observe(step(15.0 + n, n, attempt=1))
    assert again.report("j") == acc.report("j")
    assert again.report("j").unproductive_s["recompute"] > 0

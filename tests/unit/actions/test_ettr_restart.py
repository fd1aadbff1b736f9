"""An episode ends at the first step of the restarted job, even when it resumes past the bad step."""

from __future__ import annotations

from pathlib import Path

from actions.checkpoints import CheckpointRegistry
from actions.engine import DecisionEngine
from actions.ettr import EttrAccount
from actions.journal import Journal
from actions.knowledge import STEP_CHUNK, JobKnowledge
from actions.state_items import Item
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
    assert acc.take_dirty() == ["j"] and not acc.take_dirty()  # journaled once per change
    again = EttrAccount()
    again.restore("j", acc.snapshot("j"))
    assert again.report("j") == acc.report("j") and again.attempt("j") == acc.attempt("j")
    for account in (acc, again):  # the restore and the recompute after it are counted the same way
        for n in range(5, 12):
            account.observe(step(15.0 + n, n, attempt=1))
    assert again.report("j") == acc.report("j")
    assert again.report("j").unproductive_s["recompute"] > 0


def test_ettr_is_journaled_in_chunks_and_rebuilt_exactly_after_trimming(tmp_path: Path) -> None:
    """Thousands of steps, trimmed at the bound: each batch writes O(batch), and a new act rebuilds the same account."""
    checkpoints = CheckpointRegistry()
    journal = Journal(tmp_path / "journal.sqlite")
    written: list[Item] = []
    journal.listen(written.extend)
    knowledge = JobKnowledge(journal, DecisionEngine(checkpoints), checkpoints, EttrAccount(max_steps=3000))
    for n in range(1, 10_001):
        knowledge.ettr.observe(step(float(n), n))
        if n == 6000:
            knowledge.ettr.observe(Incident(ts=6000.5, id="i", kind="nan", job="j", onset=6000.0, detected_at=6000.5))
        if n % 500 == 0:  # one consumed batch
            written.clear()
            knowledge.save_ettr()
            assert sum(len(i.value.get("steps", [])) for i in written if i.value) <= 500 + 2 * STEP_CHUNK
    again = JobKnowledge(journal, DecisionEngine(checkpoints), checkpoints, EttrAccount(max_steps=3000))
    again.load()
    assert again.ettr.snapshot("j") == knowledge.ettr.snapshot("j")
    assert again.ettr.report("j") == knowledge.ettr.report("j")
    assert len(journal.states("ettr-steps:")) <= 3000 // STEP_CHUNK + 2  # trimmed chunks were deleted

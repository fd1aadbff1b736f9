"""An episode ends at the first step of the restarted job, even when it resumes past the bad step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.ettr import EttrAccount
from trainguard.actions.journal import Journal
from trainguard.actions.knowledge import STEP_CHUNK, JobKnowledge
from trainguard.actions.state_items import Item
from trainguard.schemas.records import Incident, TrainingStep

StepFactory = Callable[..., TrainingStep]
IncidentFactory = Callable[..., Incident]


def test_restart_that_resumes_beyond_the_incident_step_still_ends_the_episode(step_factory: StepFactory,
        incident_factory: IncidentFactory) -> None:
    acc = EttrAccount()
    for n in range(1, 11):
        acc.observe(step_factory(n))
    acc.observe(incident_factory("slowdown", ts=12.0, onset=11.0))
    for n in range(11, 20):  # a checkpoint written after detection: the restart resumes at step 11
        acc.observe(step_factory(n, ts=10.0 + 5 + n - 10, attempt=1))
    report = acc.report("j")
    assert report.unproductive_s["failover"] == 3.0  # from detection (12) to the first new step's start (15)
    assert report.productive_s > 10.0


def test_a_restored_account_reports_and_continues_exactly_like_the_original(step_factory: StepFactory,
        incident_factory: IncidentFactory) -> None:
    """ETTR is durable: what `snapshot` journaled, `restore` takes back (a restarted act, another machine)."""
    acc = EttrAccount()
    for n in range(1, 11):
        acc.observe(step_factory(n))
    acc.observe(incident_factory("nan", ts=12.0, onset=11.0))
    assert acc.take_dirty() == ["j"] and not acc.take_dirty()  # journaled once per change
    again = EttrAccount()
    again.restore("j", acc.snapshot("j"))
    assert again.report("j") == acc.report("j") and again.attempt("j") == acc.attempt("j")
    for account in (acc, again):  # the restore and the recompute after it are counted the same way
        for n in range(5, 12):
            account.observe(step_factory(n, ts=15.0 + n, attempt=1))
    assert again.report("j") == acc.report("j")
    assert again.report("j").unproductive_s["recompute"] > 0


def test_ettr_is_journaled_in_chunks_and_rebuilt_exactly_after_trimming(tmp_path: Path,
                                                                         step_factory: StepFactory,
        incident_factory: IncidentFactory) -> None:
    """Thousands of steps, trimmed at the bound: each batch writes O(batch), and a new act rebuilds the same account."""
    checkpoints = CheckpointRegistry()
    journal = Journal(tmp_path / "journal.sqlite")
    written: list[Item] = []
    journal.listen(written.extend)
    knowledge = JobKnowledge(journal, DecisionEngine(checkpoints), checkpoints, EttrAccount(max_steps=3000))
    for n in range(1, 10_001):
        knowledge.ettr.observe(step_factory(n))
        if n == 6000:
            knowledge.ettr.observe(incident_factory("nan", ts=6000.5, onset=6000.0))
        if n % 500 == 0:  # one consumed batch
            written.clear()
            knowledge.save_ettr()
            assert sum(len(i.value.get("steps", [])) for i in written if i.value) <= 500 + 2 * STEP_CHUNK
    again = JobKnowledge(journal, DecisionEngine(checkpoints), checkpoints, EttrAccount(max_steps=3000))
    again.load()
    assert again.ettr.snapshot("j") == knowledge.ettr.snapshot("j")
    assert again.ettr.report("j") == knowledge.ettr.report("j")
    assert len(journal.states("ettr-steps:")) <= 3000 // STEP_CHUNK + 2  # trimmed chunks were deleted

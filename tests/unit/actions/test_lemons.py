"""Lemon nodes (issue 25 item 4): the pure history and verdict, the operator verbs, and act's core around them."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError

from trainguard.actions import lemons
from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.core import ActCore
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.journal import Journal
from trainguard.actions.knowledge import JobKnowledge
from trainguard.actions.lemons import LemonPolicy
from trainguard.actions.operator import apply_operator_command, record_selfcheck
from trainguard.actions.runner import PlanRunner, Rails
from trainguard.actions.safety import CircuitBreaker, Cooldown
from trainguard.actions.settings import ActionSettings
from trainguard.actions.standby import StandbyPool
from trainguard.schemas.actions import ACTIONS
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import (
    ActionCommand,
    ActionResult,
    AuditEntry,
    CheckpointEvent,
    Incident,
    JobTopology,
    OperatorCommand,
    Record,
)
from trainguard.schemas.signing import KeyRing, Signer
from trainguard.streams.act.metrics import ActionMetrics

DAY = 86400.0
P = LemonPolicy()  # 3 incidents or 2 failed self-checks in 7 days


def note(state: dict[str, Any], inc: str, job: str, now: float, node: str = "bad", kind: str = "hw_fault",
         nodes: list[str] | None = None) -> lemons.Change:
    return lemons.note_incident(state, P, incident_id=inc, kind=kind, job=job, attempt=0,
                                nodes=nodes or [node], now=now)


def test_three_incidents_in_different_jobs_within_the_window_quarantine() -> None:
    a = note({}, "i1", "j1", 0.0)
    b = note(a.state, "i2", "j2", 1 * DAY)
    assert not a.quarantined and not b.quarantined and not lemons.is_quarantined(b.state, "bad")
    c = note(b.state, "i3", "j3", 2 * DAY)
    assert c.quarantined == "bad" and lemons.is_quarantined(c.state, "bad")
    assert "3 hw_fault incidents" in c.reason and "j1, j2, j3" in c.reason
    history = lemons.quarantined(c.state)["bad"]["incidents"]
    assert [(i["id"], i["job"]) for i in history] == [("i1", "j1"), ("i2", "j2"), ("i3", "j3")]
    assert not lemons.is_quarantined(b.state, "bad")  # pure: the input is unchanged


def test_incidents_spread_wider_than_the_window_do_not() -> None:
    state = note({}, "i1", "j1", 0.0).state
    state = note(state, "i2", "j2", 4 * DAY).state
    last = note(state, "i3", "j3", 8 * DAY)  # i1 fell out of the 7-day window
    assert not last.quarantined and not lemons.is_quarantined(last.state, "bad")
    assert note(last.state, "i4", "j4", 9 * DAY).quarantined == "bad"  # i2, i3, i4 are within 7 days


def test_the_same_incident_replayed_counts_once() -> None:
    state: dict[str, Any] = {}
    for _ in range(5):  # a redelivered, or re-read, incident
        change = note(state, "i1", "j1", 10.0)
        state = change.state
    assert not change.quarantined and len(lemons.node_entry(state, "bad")["incidents"]) == 1
    assert change.counted == []  # nothing new: the caller does not even write the journal


def test_which_kinds_implicate_which_nodes() -> None:
    state = note({}, "n1", "j1", 0.0, kind="nan").state  # a training-side kind implicates nobody
    assert lemons.node_entry(state, "bad")["incidents"] == []
    wide = note({}, "w1", "j1", 0.0, kind="network", nodes=["a", "b", "c"])  # a fabric-wide slowdown
    assert wide.counted == []
    narrow = note({}, "w2", "j1", 0.0, kind="slowdown", nodes=["a"])  # localised to one node
    assert narrow.counted == ["a"]
    both = note({}, "h1", "j1", 0.0, kind="hw_fault", nodes=["a", "b"])
    assert both.counted == ["a", "b"]
    off = lemons.note_incident({}, LemonPolicy(enabled=False), incident_id="x", kind="hw_fault", job="j",
                               attempt=0, nodes=["a"], now=0.0)
    assert off.counted == []


def test_failed_selfchecks_quarantine_and_a_pass_or_a_replay_does_not_count() -> None:
    one = lemons.note_selfcheck({}, P, node="bad", passed=False, source="d1-2-x", now=0.0)
    again = lemons.note_selfcheck(one.state, P, node="bad", passed=False, source="d1-2-x", now=1.0)  # replayed
    passed = lemons.note_selfcheck(again.state, P, node="bad", passed=True, source="d2-2-x", now=2.0)
    assert not again.quarantined and not passed.quarantined and len(lemons.node_entry(passed.state, "bad")[
        "selfchecks"]) == 1
    two = lemons.note_selfcheck(passed.state, P, node="bad", passed=False, source="d3-2-x", now=3.0)
    assert two.quarantined == "bad" and "2 failed self-checks" in two.reason


def test_release_lifts_the_quarantine_keeps_the_history_and_counts_afresh() -> None:
    state = note(note(note({}, "i1", "j1", 0.0).state, "i2", "j2", 1.0).state, "i3", "j3", 2.0).state
    released, why = lemons.release(state, "bad", operator="alice", reason="PSU replaced", now=3.0)
    assert why == "" and not lemons.is_quarantined(released, "bad")
    entry = lemons.node_entry(released, "bad")
    assert len(entry["incidents"]) == 3 and entry["released"][0]["operator"] == "alice"
    assert not note(released, "i4", "j4", 4.0).quarantined  # the old incidents do not re-quarantine it
    assert lemons.release(released, "bad", operator="bob", reason="", now=5.0)[1] == \
        "bad is not quarantined: nothing to release"
    assert "no lemon history" in lemons.release({}, "ghost", operator="bob", reason="", now=5.0)[1]


def test_settings_defaults_and_a_misspelt_kind_is_refused_in_one_line() -> None:
    cfg = ActionSettings().lemons.policy()
    assert (cfg.incidents, cfg.window_s, cfg.failed_selfchecks) == (3, 604800.0, 2)
    assert cfg.kinds == ("hw_fault", "sdc") and cfg.localised_kinds == ("network", "slowdown")
    with pytest.raises(ValidationError, match="unknown incident kind.*hw-fault"):
        ActionSettings(lemons={"kinds": ["hw-fault"]})  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        ActionSettings(lemons={"incidents": 0})  # type: ignore[arg-type]


# ----------------------------------------------------------------- operator verbs (pure)

RAILS = {"pool": {"spares": [], "swaps": {}}, "evicted": {"j3": ["bad"]}}
LEMON = note(note(note({}, "i1", "j1", 0.0).state, "i2", "j2", 1.0).state, "i3", "j3", 2.0).state


def cmd(verb: str, subject: str) -> OperatorCommand:
    return OperatorCommand(ts=100.0, id=f"op-{verb}", verb=verb, operator="alice", subject_id=subject,  # type: ignore[arg-type]
                           reason="fixed")


def test_a_passing_selfcheck_does_not_return_a_lemon_and_a_release_is_audited() -> None:
    held = record_selfcheck({}, ["bad"], passed=True, source="d9-1-x", now=99.0)
    out = apply_operator_command(cmd("return_node", "bad"), rails=RAILS, decision=None, now=101.0, checks=held,
                                 lemons=LEMON)
    assert not out.applied and "quarantined as a lemon" in out.message and out.rails["pool"]["spares"] == []
    rel = apply_operator_command(cmd("release_node", "bad"), rails=RAILS, decision=None, now=101.0, lemons=LEMON)
    assert rel.applied and rel.lemons is not None and not lemons.is_quarantined(rel.lemons, "bad")
    assert rel.audit.event == "operator_release_node" and rel.audit.actor == "alice"
    assert rel.rails["pool"]["spares"] == []  # a release is not a return: the pass comes next
    back = apply_operator_command(cmd("return_node", "bad"), rails=RAILS, decision=None, now=101.0, checks=held,
                                  lemons=rel.lemons)
    assert back.applied and back.rails["pool"]["spares"] == ["bad"]


def test_a_release_returns_the_node_at_once_when_act_holds_its_passing_selfcheck() -> None:
    held = record_selfcheck({}, ["bad"], passed=True, source="d9-1-x", now=99.0)
    out = apply_operator_command(cmd("release_node", "bad"), rails=RAILS, decision=None, now=101.0, checks=held,
                                 lemons=LEMON)
    assert out.applied and out.rails["pool"]["spares"] == ["bad"] and out.rails["evicted"]["j3"] == []
    assert "returned to the standby pool" in out.message
    failed = record_selfcheck(held, ["bad"], passed=False, source="d9-2-x", now=100.0)
    kept = apply_operator_command(cmd("release_node", "bad"), rails=RAILS, decision=None, now=101.0, checks=failed,
                                  lemons=LEMON)
    assert kept.applied and kept.rails["pool"]["spares"] == [] and "next passing self-check" in kept.message


def test_releasing_a_node_that_is_not_quarantined_is_refused_with_the_reason() -> None:
    out = apply_operator_command(cmd("release_node", "good"), rails=RAILS, decision=None, now=101.0, lemons=LEMON)
    assert not out.applied and out.lemons is None and "good has no lemon history" in out.message


# ----------------------------------------------------------------- act's core

NOW = 1_000_000.0


class Recording:
    """Answers every command ok, and records the lemon marks asked of it."""

    name = "recording"
    handles = frozenset(ACTIONS)

    def __init__(self) -> None:
        self.marks: list[tuple[str, bool, str]] = []
        self._lock = threading.Lock()

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        return ActionResult(ts=NOW, command_id=command.id, action=command.action, status="ok", job=command.job)

    def mark_lemon(self, node: str, *, quarantined: bool, reason: str) -> dict[str, Any]:
        with self._lock:
            self.marks.append((node, quarantined, reason))
        return {"recorded": True}


def core_at(path: Path, executor: Recording, console: Signer, audit: list[Record],
            metrics: ActionMetrics | None = None) -> ActCore:
    reg = CheckpointRegistry()
    eng = DecisionEngine(reg)
    for j in ("j1", "j2", "j3"):
        reg.observe(CheckpointEvent(ts=1.0, job=j, step=100, path=f"/ck/{j}/100"))
        eng.observe_topology(JobTopology(ts=0.0, job=j, world_size=4,
                                         rank_nodes={0: "bad", 1: f"{j}b", 2: f"{j}c", 3: f"{j}d"}))
    rails = Rails(CircuitBreaker(max_fraction=1.0, window_s=3600, fleet_max_evictions=100), Cooldown(cooldown_s=0),
                  StandbyPool(spares=["s0", "s1", "s2", "s3"]))
    runner = PlanRunner(journal=Journal(path / "journal.sqlite"), rails=rails, executors=[executor],
                        sink=audit.append, clock=lambda: NOW, topologies=eng.topologies)
    return ActCore(engine=eng, runner=runner, knowledge=JobKnowledge(runner.journal, eng, eng.checkpoints),
                   publish=audit.append, clock=lambda: NOW, metrics=metrics,
                   console_keys=KeyRing({"console": console.private_key.public_key()}))


def hw(job: str, n: int) -> Incident:
    return Incident(ts=NOW, id=f"hw-{job}-{n}", kind="hw_fault", job=job, onset=NOW - 1, detected_at=NOW,
                    nodes=["bad"])


def test_act_quarantines_marks_refuses_the_pool_and_only_a_signed_release_lifts_it(tmp_path: Path) -> None:
    console = Signer("console", Ed25519PrivateKey.generate())
    forger = Signer("console", Ed25519PrivateKey.generate())
    executor, audit, metrics = Recording(), [], ActionMetrics()
    core = core_at(tmp_path, executor, console, audit, metrics)
    try:
        for job in ("j1", "j2"):
            core.decide(hw(job, 0))
        assert core.decide(hw("j1", 0)) is None  # redelivered: no second decision, no second count
        core.decide(hw("j3", 0))
        core.close(wait=True)
        assert executor.marks and executor.marks[0][:2] == ("bad", True)
        assert metrics.value("trainguard_lemon_nodes") == 1.0
        core.runner.journal.request_node_return("bad")  # `trainguard actions return` after a passing check
        core.runner.poll_operator()
        assert "bad" not in core.runner.rails.pool.spares
    finally:
        core.runner.journal.close()
    (q,) = [e for e in audit if isinstance(e, AuditEntry) and e.event == "lemon_quarantined"]
    assert [i["job"] for i in q.detail["incidents"]] == ["j1", "j2", "j3"]
    assert [e for e in audit if isinstance(e, AuditEntry) and e.event == "standby_return_refused"]

    audit2: list[Record] = []
    again = core_at(tmp_path, Recording(), console, audit2, ActionMetrics())  # a restarted act, same journal
    try:
        assert lemons.is_quarantined(again.runner.journal.get_state("lemons"), "bad")
        release = OperatorCommand(ts=NOW, id="op-r1", verb="release_node", operator="alice", subject_id="bad",
                                  reason="board swapped", expires=NOW + 60)
        value = Codec().encode(release)
        assert not again.trusts(release, value, forger.headers(value))  # forged: refused, audited
        assert not again.trusts(release, value, None)  # unsigned
        assert lemons.is_quarantined(again.runner.journal.get_state("lemons"), "bad")
        assert again.trusts(release, value, console.headers(value))
        again.observe(release)
        assert not again.trusts(release, value, console.headers(value))  # a replay of the same id
        nobody = OperatorCommand(ts=NOW, id="op-r2", verb="release_node", operator="bob", subject_id="j1b",
                                 expires=NOW + 60)
        again.observe(nobody)
        again.close(wait=True)
        assert not lemons.is_quarantined(again.runner.journal.get_state("lemons"), "bad")
        again.runner.journal.request_node_return("bad")
        again.runner.poll_operator()
        assert "bad" in again.runner.rails.pool.spares  # now a pass returns it
    finally:
        again.runner.journal.close()
    ops = [e for e in audit2 if isinstance(e, AuditEntry) and e.event == "operator_release_node"]
    assert [(e.actor, e.detail["applied"]) for e in ops] == [("alice", True), ("bob", False)]
    assert "not quarantined" in ops[1].detail["message"] or "no lemon history" in ops[1].detail["message"]
    assert len([e for e in audit2 if isinstance(e, AuditEntry) and e.event == "operator_rejected"]) == 3
    lifted = [e for e in audit2 if isinstance(e, AuditEntry) and e.event == "lemon_marked"]
    assert [e.detail["quarantined"] for e in lifted] == [False]


def test_a_failed_selfcheck_counts_against_its_culprits_only(tmp_path: Path) -> None:
    """Through act's own accounting of a plan's self_check steps: the culprits it names, never the whole check."""
    console = Signer("console", Ed25519PrivateKey.generate())
    core = core_at(tmp_path, Recording(), console, [])
    journal = core.runner.journal
    try:
        for n in range(2):
            decision = core.engine.decide(hw("j1", n))
            journal.record_decision(decision)
            check = ActionResult(ts=NOW, command_id=f"{decision.id}-0-abc", action="self_check", status="failed",
                                 job="j1", details={"machines": ["bad", "j1b", "j1c"], "culprits": ["bad"]})
            journal.record_step(decision.id, 0, check)
            core._account(decision, decision)
            again = lemons.node_entry(journal.get_state("lemons"), "bad")["selfchecks"]
            core._account(decision, decision)  # accounted twice (a resumed plan): the same check, counted once
            assert lemons.node_entry(journal.get_state("lemons"), "bad")["selfchecks"] == again
        assert lemons.is_quarantined(journal.get_state("lemons"), "bad")
        for innocent in ("j1b", "j1c"):
            assert lemons.node_entry(journal.get_state("lemons"), innocent)["selfchecks"] == []
    finally:
        core.close(wait=True)
        journal.close()

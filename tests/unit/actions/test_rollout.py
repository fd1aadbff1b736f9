"""Rollout modes (issue 25 item 1): observe, approve, auto per kind and per rule, changed by signed commands.

The runner and the core are the real ones over a real journal; the executor is
an in-memory stand-in that records every command it is handed, so "nothing
sent" is asserted on what reached it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError

from tests.unit.actions.rollout_kit import NOW, Recording, build, hw
from trainguard.actions.core import ActCore
from trainguard.actions.knowledge import JobKnowledge
from trainguard.actions.operator import apply_operator_command
from trainguard.actions.rollout import RolloutPolicy, overridden, parse_subject
from trainguard.actions.settings import ActionSettings
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import (
    AuditEntry,
    OperatorCommand,
    Record,
)
from trainguard.schemas.signing import KeyRing, Signer
from trainguard.streams.act.metrics import ActionMetrics


def test_the_most_specific_mode_wins_and_approval_kinds_cap_auto() -> None:
    policy = RolloutPolicy(default="observe", kinds={"hw_fault": "auto", "network": "approve"},
                           rules={"hw_fault.cordon_idle_node": "observe"})
    assert policy.mode_for("hw_fault", "hw_fault.evict_swap_restart") == "auto"
    assert policy.mode_for("hw_fault", "hw_fault.cordon_idle_node") == "observe"  # rule beats kind
    assert policy.mode_for("network", "network.confirmed_evict") == "approve"
    assert policy.mode_for("hang", "hang.selfcheck_then_evict") == "observe"  # the default
    assert policy.mode_for("hw_fault", "hw_fault.evict_swap_restart", ["hw_fault"]) == "approve"
    assert policy.mode_for("hw_fault", "hw_fault.evict_swap_restart", ["*"]) == "approve"


def test_a_new_install_observes_everything_and_a_misspelt_setting_is_refused() -> None:
    policy = ActionSettings().rollout.policy()
    assert policy.default == "observe" and not policy.kinds and not policy.rules
    with pytest.raises(ValidationError, match="unknown incident kind"):
        ActionSettings(rollout={"kinds": {"hw_faults": "auto"}})
    with pytest.raises(ValidationError):
        ActionSettings(rollout={"default": "yes"})
    with pytest.raises(ValidationError):
        ActionSettings(rollout={"rules": {"hw_fault.evict_swap_restart": "act"}})


def test_observe_journals_the_decision_and_sends_nothing(tmp_path: Path) -> None:
    executor = Recording()
    eng, runner = build(tmp_path, RolloutPolicy(default="observe"), executor)
    decision = runner.admit(eng.decide(hw("a", "a1")))
    assert decision is not None and decision.status == "observed" and decision.rollout == "observe"
    assert decision.would_block == ""
    assert [s.action for s in decision.plan][:1] == ["evict_node"]  # what it would have done is journaled
    assert runner.run(decision).status == "observed" and executor.sent == []
    assert runner.journal.unfinished() == []  # nothing left to resume after a restart either
    assert runner.rails.breaker.counted(NOW) == set()  # the real breaker counted nothing


def test_observed_evictions_say_when_the_breaker_would_have_blocked_them(tmp_path: Path) -> None:
    executor = Recording()
    eng, runner = build(tmp_path, RolloutPolicy(default="observe"), executor, fleet_max=2)
    got = [runner.admit(eng.decide(hw(job, f"{job}1"))) for job in ("a", "b", "c")]
    assert [d.would_block for d in got if d][:2] == ["", ""]
    third = got[2]
    assert third is not None and "circuit breaker" in third.would_block and "limit 2" in third.would_block
    assert not runner.rails.breaker.tripped and executor.sent == []  # the real one holds no one
    # the shadow count is journaled with the decisions: a restarted act judges the next one alike
    _, again = build(tmp_path, RolloutPolicy(default="observe"), executor, fleet_max=2)
    fourth = again.admit(eng.decide(hw("a", "a2")))
    assert fourth is not None and "circuit breaker" in fourth.would_block


def test_a_tripped_real_breaker_is_what_would_block_an_observed_plan(tmp_path: Path) -> None:
    eng, runner = build(tmp_path, RolloutPolicy(default="observe"), Recording())
    runner.rails.breaker.tripped, runner.rails.breaker.trip_reason = True, "5 fleet nodes"
    decision = runner.admit(eng.decide(hw("a", "a1")))
    assert decision is not None and decision.would_block == "circuit breaker tripped: 5 fleet nodes"


def test_approve_holds_and_auto_acts(tmp_path: Path) -> None:
    executor = Recording()
    eng, runner = build(tmp_path, RolloutPolicy(default="observe", kinds={"hw_fault": "approve"}), executor)
    held = runner.admit(eng.decide(hw("a", "a1")))
    assert held is not None and held.status == "awaiting_approval" and held.rollout == "approve"
    runner.rails.rollout = RolloutPolicy(default="auto")
    acted = runner.admit(eng.decide(hw("b", "b1")))
    assert acted is not None and acted.status == "planned" and acted.rollout == "auto"
    assert runner.run(acted).status == "executed"
    assert [c.action for c in executor.sent][0] == "evict_node" and executor.sent[0].nodes == ["b1"]


def test_set_rollout_is_checked_pure_and_audited_under_the_operator() -> None:
    cmd = OperatorCommand(ts=NOW, id="op-1", verb="set_rollout", operator="alice", subject_id="kind:hw_fault",
                          mode="auto", expires=NOW + 60)
    out = apply_operator_command(cmd, rails={}, decision=None, now=NOW, rollout=RolloutPolicy(), overrides={})
    assert out.applied and out.rollout == {"kinds": {"hw_fault": "auto"}, "rules": {}}
    assert out.audit.actor == "alice" and out.audit.event == "operator_set_rollout"
    assert "kind hw_fault: observe (the default) -> auto by alice" in out.message  # it had no mode of its own
    for subject, mode in [("kind:hw_fault", "yolo"), ("hw_fault", "auto"), ("kind:", "auto"), ("default:x", "auto")]:
        bad = apply_operator_command(OperatorCommand(ts=NOW, id="op-2", verb="set_rollout", operator="mallory",
                                                     subject_id=subject, mode=mode, expires=NOW + 60),
                                     rails={}, decision=None, now=NOW, rollout=RolloutPolicy(), overrides={})
        assert not bad.applied and bad.rollout is None and bad.message.startswith("refused")
    stale = apply_operator_command(OperatorCommand(ts=NOW - 1000, id="op-3", verb="set_rollout", operator="bob",
                                                   subject_id="default", mode="auto", expires=NOW + 60),
                                   rails={}, decision=None, now=NOW, max_age_s=300, rollout=RolloutPolicy())
    assert not stale.applied and stale.rollout is None


def test_overrides_and_subjects() -> None:
    assert parse_subject("default") == ("default", "") and parse_subject("rule:x.y") == ("rule", "x.y")
    once = overridden({}, "rule:network.confirmed_evict", "observe")
    twice = overridden(once, "default", "approve")
    assert twice == {"default": "approve", "kinds": {}, "rules": {"network.confirmed_evict": "observe"}}
    base = RolloutPolicy(default="observe", kinds={"hang": "auto"})
    restored = RolloutPolicy.restore(twice, base)
    assert restored.default == "approve" and restored.kinds == {"hang": "auto"}
    assert restored.rules == {"network.confirmed_evict": "observe"}


def _core(tmp_path: Path, executor: Recording, console: Signer, audit: list[Record],
          metrics: ActionMetrics | None = None) -> ActCore:
    eng, runner = build(tmp_path, RolloutPolicy(default="observe"), executor)
    return ActCore(engine=eng, runner=runner, knowledge=JobKnowledge(runner.journal, eng, eng.checkpoints),
                   publish=audit.append, clock=lambda: NOW, metrics=metrics,
                   console_keys=KeyRing({"console": console.private_key.public_key()}))


def _command(cid: str, subject: str, mode: str) -> OperatorCommand:
    return OperatorCommand(ts=NOW, id=cid, verb="set_rollout", operator="alice", subject_id=subject, mode=mode,
                           expires=NOW + 60)


def test_a_signed_promotion_acts_on_the_next_incident_survives_a_restart_and_a_forged_one_is_refused(
        tmp_path: Path) -> None:
    console = Signer("console", Ed25519PrivateKey.generate())
    forger = Signer("console", Ed25519PrivateKey.generate())  # right key id, wrong key
    executor, audit, metrics = Recording(), [], ActionMetrics()
    core = _core(tmp_path, executor, console, audit, metrics)
    try:
        first = core.decide(hw("a", "a1"))
        assert first is not None and first.status == "observed"
        promote = _command("op-1", "kind:hw_fault", "auto")
        value = Codec().encode(promote)
        forged = _command("op-0", "default", "auto")
        assert not core.trusts(forged, Codec().encode(forged), forger.headers(Codec().encode(forged)))
        assert not core.trusts(forged, Codec().encode(forged), None)  # unsigned
        assert core.trusts(promote, value, console.headers(value))
        core.observe(promote)
        second = core.decide(hw("b", "b1"))
        assert second is not None and second.status == "planned" and second.rollout == "auto"
        core.close(wait=True)
        assert [c.nodes for c in executor.sent if c.action == "evict_node"] == [["b1"]]
        core.show_rails()
        assert metrics.value("trainguard_rollout_mode", kind="hw_fault", rule="", mode="auto") == 1.0
        assert metrics.value("trainguard_rollout_mode", kind="hw_fault", rule="", mode="observe") == 0.0
        assert metrics.value("trainguard_rollout_mode", kind="hang", rule="", mode="observe") == 1.0
    finally:
        core.runner.journal.close()
    entries = [e for e in audit if isinstance(e, AuditEntry)]
    rejected = [e for e in entries if e.event == "operator_rejected"]
    assert len(rejected) == 2 and all(e.detail["verb"] == "set_rollout" for e in rejected)
    (applied,) = [e for e in entries if e.event == "operator_set_rollout"]
    assert applied.actor == "alice" and applied.detail["applied"] and applied.detail["mode"] == "auto"
    (shown,) = [e for e in entries if e.event == "rails_state"]
    assert shown.detail["rollout"]["kinds"] == {"hw_fault": "auto"}

    restarted = _core(tmp_path, Recording(), console, [])  # a new act over the same journal
    try:
        assert restarted.runner.rails.rollout.mode_for("hw_fault", "hw_fault.evict_swap_restart") == "auto"
        demote = _command("op-2", "kind:hw_fault", "observe")
        restarted.observe(demote)
        third = restarted.decide(hw("c", "c1"))
        assert third is not None and third.status == "observed"
    finally:
        restarted.close(wait=True)
        restarted.runner.journal.close()


def test_an_observed_decision_cannot_be_approved_into_running(tmp_path: Path) -> None:
    executor = Recording()
    eng, runner = build(tmp_path, RolloutPolicy(default="observe"), executor)
    observed = runner.admit(eng.decide(hw("a", "a1")))
    assert observed is not None
    approve = OperatorCommand(ts=NOW, id="op-9", verb="approve", operator="alice", subject_id=observed.id,
                              expires=NOW + 60)
    out = apply_operator_command(approve, rails={}, decision=observed, now=NOW)
    assert not out.applied and "not awaiting approval (observed)" in out.message
    assert runner.approve(observed.id) is None  # nor through `trainguard actions approve`
    assert runner.run(observed).status == "observed" and executor.sent == []

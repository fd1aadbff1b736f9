"""Verdicts from the people on call (issue 25 item 3): precision per rule and detector, and the operator verb.

The pure logic first (actions/verdicts.py), then the real `ActCore` over a real
journal: a verdict is applied only when the console signed it, only on an
incident act decided on, a replay changes nothing, a restart keeps every
verdict, and the exported precision moves as the verdicts say.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.unit.actions.rollout_kit import NOW, Recording, build, hw
from trainguard.actions.core import ActCore
from trainguard.actions.journal import Journal
from trainguard.actions.knowledge import JobKnowledge
from trainguard.actions.operator import apply_operator_command
from trainguard.actions.rollout import RolloutPolicy
from trainguard.actions.settings import ActionSettings
from trainguard.actions.shadow import shadow_report
from trainguard.actions.verdicts import VerdictPolicy, apply_verdict, counts_by_rule, low_rules, precision
from trainguard.cli import main
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import AuditEntry, Decision, OperatorCommand, PlannedAction, Record
from trainguard.schemas.signing import KeyRing, Signer
from trainguard.streams.act.metrics import ActionMetrics

RULE = "hw_fault.evict_swap_restart"


def decision(n: int, rule: str = RULE, detector: str = "xid") -> Decision:
    return Decision(ts=NOW, id=f"d{n}", incident_id=f"i{n}", job="j", kind="hw_fault", rule=rule,
                    plan=[PlannedAction(action="evict_node", nodes=["n1"])], reason="r", inputs={"detector": detector})


def verdict(incident: str, value: str, *, cid: str = "op-1", who: str = "alice", note: str = "",
            ts: float = NOW) -> OperatorCommand:
    return OperatorCommand(ts=ts, id=cid, verb="verdict", operator=who, subject_id=incident, verdict=value,
                           reason=note, expires=ts + 60)


def given(*marks: tuple[int, str, float], rule: str = RULE, detector: str = "xid") -> dict[str, object]:
    """A journaled verdicts blob: (incident n, value, ts) each."""
    out: dict[str, object] = {}
    for n, value, ts in marks:
        changed, _ = apply_verdict(verdict(f"i{n}", value), out, decision(n, rule, detector), now=ts)
        assert changed is not None
        out = changed
    return out


def test_precision_is_true_over_true_plus_false_unsure_aside_per_rule_and_detector_in_the_window() -> None:
    marks = given((1, "true", NOW), (2, "true", NOW), (3, "false", NOW), (4, "unsure", NOW))
    marks.update(given((5, "false", NOW), rule="nan.restore_checkpoint", detector="nan"))
    shown = precision(marks, now=NOW, window_s=3600)
    assert shown["rules"][RULE] == {"true": 2, "false": 1, "unsure": 1, "precision": round(2 / 3, 4)}
    assert shown["rules"]["nan.restore_checkpoint"]["precision"] == 0.0
    assert shown["detectors"] == {"xid": {"true": 2, "false": 1, "unsure": 1, "precision": round(2 / 3, 4)},
                                  "nan": {"true": 0, "false": 1, "unsure": 0, "precision": 0.0}}
    only_unsure = precision(given((9, "unsure", NOW)), now=NOW, window_s=3600)
    assert only_unsure["rules"][RULE]["precision"] is None  # nothing judged: no figure, not 0
    old = given((1, "false", NOW - 7200), (2, "true", NOW))
    assert precision(old, now=NOW, window_s=3600)["rules"][RULE] == {"true": 1, "false": 0, "unsure": 0,
                                                                       "precision": 1.0}


def test_the_newest_verdict_of_an_incident_counts_and_a_repeat_changes_nothing() -> None:
    marks = given((1, "true", NOW))
    changed, message = apply_verdict(verdict("i1", "false", who="bob"), marks, decision(1), now=NOW + 1)
    assert changed is not None and "marked false (was true) by bob" in message
    assert precision(changed, now=NOW + 1, window_s=60)["rules"][RULE]["false"] == 1
    assert precision(changed, now=NOW + 1, window_s=60)["rules"][RULE]["true"] == 0
    again, message = apply_verdict(verdict("i1", "false", who="bob"), changed, decision(1), now=NOW + 2)
    assert again is None and "already marked false" in message


def test_a_bad_value_or_an_unknown_incident_is_refused() -> None:
    for value in ("yes", "", "TRUE"):
        out, message = apply_verdict(verdict("i1", value), {}, decision(1), now=NOW)
        assert out is None and message.startswith("refused: unknown verdict")
    out, message = apply_verdict(verdict("nope", "true"), {}, None, now=NOW)
    assert out is None and "no decision for incident 'nope'" in message
    outcome = apply_operator_command(verdict("nope", "true"), rails={}, decision=None, now=NOW)
    assert not outcome.applied and outcome.verdicts is None and outcome.audit.event == "operator_verdict"
    assert outcome.audit.actor == "alice" and outcome.audit.detail["applied"] is False


def test_the_oldest_verdicts_go_first_past_the_bound() -> None:
    marks: dict[str, object] = {}
    for n in range(5):
        changed, _ = apply_verdict(verdict(f"i{n}", "true"), marks, decision(n), now=NOW + n, max_verdicts=3)
        assert changed is not None
        marks = changed
    assert sorted(marks) == ["i2", "i3", "i4"]


def test_a_rule_in_auto_is_low_only_below_the_floor_on_enough_verdicts() -> None:
    policy = VerdictPolicy(window_s=3600, floor=0.8, min_verdicts=3)
    rows = {"a": {"true": 1, "false": 2, "unsure": 0, "precision": 1 / 3},
            "b": {"true": 0, "false": 2, "unsure": 5, "precision": 0.0},  # too few judged
            "c": {"true": 9, "false": 1, "unsure": 0, "precision": 0.9},  # above the floor
            "d": {"true": 0, "false": 3, "unsure": 0, "precision": 0.0}}  # observe: nothing to alert on
    assert low_rules(rows, {"a": "auto", "b": "auto", "c": "auto", "d": "observe"}, policy) == ["a"]
    assert counts_by_rule(rows)["a"] == {"true": 1, "false": 2, "unsure": 0}
    (row,) = shadow_report([decision(1, rule="a")], verdicts=counts_by_rule(rows))
    assert row.verdicts == {"true": 1, "false": 2, "unsure": 0}  # the report's seam, fed
    cfg = ActionSettings(rollout={"precision_floor": 0.5, "precision_min_verdicts": 2}).rollout.verdict_policy()
    assert (cfg.floor, cfg.min_verdicts, cfg.window_s) == (0.5, 2, 30 * 86400.0)


def _core(path: Path, console: Signer, audit: list[Record], metrics: ActionMetrics | None = None,
          policy: RolloutPolicy | None = None) -> ActCore:
    eng, runner = build(path, policy or RolloutPolicy(default="observe"), Recording())
    return ActCore(engine=eng, runner=runner, knowledge=JobKnowledge(runner.journal, eng, eng.checkpoints),
                   publish=audit.append, clock=lambda: NOW, metrics=metrics,
                   console_keys=KeyRing({"console": console.private_key.public_key()}),
                   verdict_policy=VerdictPolicy(window_s=3600, floor=0.8, min_verdicts=2))


def _send(core: ActCore, command: OperatorCommand, signer: Signer | None) -> bool:
    value = Codec().encode(command)
    trusted = core.trusts(command, value, signer.headers(value) if signer else None)
    if trusted:
        core.observe(command)
    return trusted


def test_signed_verdicts_move_the_exported_precision_forgeries_and_replays_do_not_and_a_restart_keeps_them(
        tmp_path: Path) -> None:
    console, forger = Signer("console", Ed25519PrivateKey.generate()), Signer("console", Ed25519PrivateKey.generate())
    audit: list[Record] = []
    metrics = ActionMetrics()
    core = _core(tmp_path, console, audit, metrics, RolloutPolicy(default="auto"))
    try:
        first, second = core.decide(hw("a", "a1")), core.decide(hw("b", "b1"))
        assert first is not None and second is not None
        core.close(wait=True)
        assert _send(core, verdict(first.incident_id, "true", cid="op-1"), console)
        core.show_rails()
        assert metrics.value("trainguard_rule_precision", rule=RULE) == 1.0
        assert not _send(core, verdict(second.incident_id, "false", cid="op-2"), forger)  # forged
        assert not _send(core, verdict(second.incident_id, "false", cid="op-3"), None)  # unsigned
        core.show_rails()
        assert metrics.value("trainguard_rule_precision", rule=RULE) == 1.0  # neither counted
        assert _send(core, verdict("inc-never-seen", "false", cid="op-4"), console)  # trusted, but refused
        assert _send(core, verdict(second.incident_id, "false", cid="op-5", who="bob", note="the GPU was fine"),
                     console)
        assert not _send(core, verdict(second.incident_id, "false", cid="op-5", who="bob"), console)  # replay
        core.show_rails()
        assert metrics.value("trainguard_rule_precision", rule=RULE) == 0.5
        assert metrics.value("trainguard_detector_precision", detector="") is None  # hw() names no detector
        assert metrics.value("trainguard_rule_verdicts", rule=RULE, verdict="false") == 1.0
        assert metrics.value("trainguard_rule_precision_low", rule=RULE) == 1.0  # auto, 0.5 < 0.8 on 2 verdicts
    finally:
        core.runner.journal.close()
    entries = [e for e in audit if isinstance(e, AuditEntry)]
    applied = [(e.actor, e.detail["verdict"], e.detail["applied"]) for e in entries if e.event == "operator_verdict"]
    assert applied == [("alice", "true", True), ("alice", "false", False), ("bob", "false", True)]
    refused = [e for e in entries if e.event == "operator_verdict" and not e.detail["applied"]]
    assert "no decision for incident 'inc-never-seen'" in refused[0].detail["message"]
    assert len([e for e in entries if e.event == "operator_rejected" and e.detail["verb"] == "verdict"]) == 3
    (low,) = [e for e in entries if e.event == "rule_precision_low"]  # once, as it fell
    assert low.subject_id == RULE and low.detail["precision"] == 0.5 and low.detail["floor"] == 0.8
    shown = [e for e in entries if e.event == "rails_state"][-1].detail["precision"]
    assert shown["rules"][RULE]["precision"] == 0.5 and shown["low"] == [RULE]
    bob = Journal(tmp_path / "journal.sqlite").get_state("verdicts")[second.incident_id]
    assert bob["note"] == "the GPU was fine" and bob["operator"] == "bob"

    again, metrics2 = [], ActionMetrics()
    restarted = _core(tmp_path, console, again, metrics2, RolloutPolicy(default="auto"))  # a new act, same journal
    try:
        restarted.show_rails()
        assert metrics2.value("trainguard_rule_precision", rule=RULE) == 0.5
    finally:
        restarted.runner.journal.close()


def test_the_cli_verdict_is_applied_by_act_under_the_user_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    console = Signer("console", Ed25519PrivateKey.generate())
    audit: list[Record] = []
    metrics = ActionMetrics()
    core = _core(tmp_path, console, audit, metrics)
    monkeypatch.setenv("TRAINGUARD_ACTIONS__STATE_DIR", str(tmp_path))
    monkeypatch.setenv("USER", "carol")
    try:
        made = core.decide(hw("a", "a1"))
        assert made is not None
        assert main(["actions", "verdict", made.incident_id, "false", "--note", "flaky xid"]) == 0
        assert "marked false" in capsys.readouterr().out
        assert main(["actions", "verdict", "inc-nope", "true"]) == 2  # an incident act never decided on
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no decision for incident inc-nope" in err
        with pytest.raises(SystemExit) as exit_:
            main(["actions", "verdict", made.incident_id, "maybe"])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1 and "invalid choice: 'maybe'" in err
        core.resume()  # act's poll
        core.show_rails()
        assert metrics.value("trainguard_rule_precision", rule=RULE) == 0.0
        assert core.runner.journal.states("verdict_request/") == {}  # taken once
    finally:
        core.close(wait=True)
        core.runner.journal.close()
    (entry,) = [e for e in audit if isinstance(e, AuditEntry) and e.event == "operator_verdict"]
    assert entry.actor == "carol (cli)" and entry.detail["applied"] and entry.detail["note"] == "flaky xid"
    assert json.dumps(entry.detail)  # plain data for the audit topic

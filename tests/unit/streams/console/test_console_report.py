"""The console's verdict and shadow-report views from records (streams/console/report.py), no broker."""

from __future__ import annotations

from trainguard.schemas.records import AuditEntry, Decision, Incident, PlannedAction
from trainguard.streams.console import report
from trainguard.streams.console.state import ConsoleState

RULE = "hw_fault.evict_swap_restart"


def fed(*, rollout: dict[str, object] | None = None, approval: list[str] | None = None) -> ConsoleState:
    state = ConsoleState()
    for n, ts in ((1, 100.0), (2, 5000.0)):
        state.observe(Incident(ts=ts, id=f"i{n}", kind="hw_fault", job="j", onset=ts, detected_at=ts, nodes=["a"]))
        state.observe(Decision(ts=ts, id=f"d{n}", incident_id=f"i{n}", job="j", kind="hw_fault", rule=RULE,
                               plan=[PlannedAction(action="evict_node", nodes=["a"])], reason="r", status="observed"))
    state.observe(AuditEntry(ts=5000.0, event="rails_state", subject_id="rails", actor="trainguard-act", detail={
        "rollout": rollout or {"default": "observe", "kinds": {"hw_fault": "auto"}, "rules": {}},
        "approval_kinds": approval or [],
        "precision": {"rules": {RULE: {"true": 3, "false": 1, "unsure": 2, "precision": 0.75}}, "detectors": {},
                      "low": [RULE], "floor": 0.8, "min_verdicts": 2, "window_s": 60.0}}))
    return state


def test_each_rule_shows_its_mode_now_beside_acts_precision() -> None:
    (row,) = report.precision_rows(fed())["rules"]
    assert row == {"rule": RULE, "kind": "hw_fault", "mode": "auto", "low": True, "true": 3, "false": 1,
                   "unsure": 2, "precision": 0.75}
    (capped,) = report.precision_rows(fed(approval=["hw_fault"]))["rules"]
    assert capped["mode"] == "approve"  # an approval kind never goes past approve
    broken = fed(rollout={"default": "yolo"})
    assert report.policy_of(broken.rails).default == "observe"  # a mode it cannot read: the safe one shown


def test_the_report_covers_the_window_before_the_newest_event_and_carries_the_verdicts() -> None:
    state = fed()
    whole = report.report(state, since_s=10_000)
    (row,) = whole["rules"]
    assert whole["decisions"] == 2 and row["verdicts"] == {"true": 3, "false": 1, "unsure": 2}
    assert row["mode"] == "auto" and whole["precision"][RULE] == 0.75
    assert report.report(state, since_s=60)["decisions"] == 1  # only d2 is within a minute of the newest event


def test_an_incidents_verdict_is_the_newest_applied_one() -> None:
    state = fed()
    assert report.verdict_of(state, "i1") is None
    for ts, value, applied in ((10.0, "true", True), (11.0, "false", True), (12.0, "unsure", False)):
        state.observe(AuditEntry(ts=ts, event="operator_verdict", subject_id="i1", actor="bob",
                                 detail={"applied": applied, "verdict": value, "note": "n"}))
    assert report.verdict_of(state, "i1") == {"verdict": "false", "note": "n", "operator": "bob", "ts": 11.0}

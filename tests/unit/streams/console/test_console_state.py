"""streams.console.state/views: records in, the console's views out (pure, no broker)."""

from __future__ import annotations

from trainguard.schemas.records import (
    ActionCommand,
    ActionResult,
    Anomaly,
    AuditEntry,
    CheckpointEvent,
    Decision,
    Incident,
    JobTopology,
    PlannedAction,
    TrainingStep,
)
from trainguard.streams.console import views
from trainguard.streams.console.state import ConsoleState


def fleet_state() -> ConsoleState:
    s = ConsoleState(standby_nodes=["s1"])
    s.observe(JobTopology(ts=1.0, job="llm", world_size=4, rank_nodes={i: f"n{i}" for i in range(4)}))
    for step in range(1, 6):
        s.observe(TrainingStep(ts=float(step), job="llm", rank=0, node="n0", step=step, loss=2.0 / step,
                               step_time_s=1.0, mfu=0.4))
        s.observe(TrainingStep(ts=float(step), job="llm", rank=1, node="n1", step=step, loss=9.0, step_time_s=1.0))
    s.observe(CheckpointEvent(ts=3.0, job="llm", step=3, path="/c/3"))
    return s


def decided(s: ConsoleState, *, status: str = "awaiting_approval") -> Decision:
    s.observe(Anomaly(ts=9.0, id="a1", kind="hw_fault", detector="hw", onset=8.0, job="llm", nodes=["n2"],
                      evidence={"xid": 79}))
    events = s.observe(Incident(ts=10.0, id="i1", kind="hw_fault", job="llm", onset=8.0, detected_at=10.0,
                                nodes=["n2"], anomaly_ids=["a1", "gone"], evidence={"xid": 79}))
    assert events[0]["type"] == "incident" and events[0]["data"]["id"] == "i1"
    dec = Decision(ts=10.0, id="d1", incident_id="i1", job="llm", kind="hw_fault", rule="hw.evict", reason="why",
                   plan=[PlannedAction(action="evict_node", nodes=["n2"]), PlannedAction(action="swap_standby")],
                   inputs={"nodes": ["n2"]}, alternatives=["retry: no"], status=status)  # type: ignore[arg-type]
    s.observe(dec)
    return dec


def test_fleet_states_come_from_incidents_and_acts_rails() -> None:
    s = fleet_state()
    assert views.fleet(s)["counts"] == {"healthy": 4, "suspect": 0, "evicted": 0, "in_repair": 0, "standby": 1}
    decided(s)
    assert views.fleet(s)["counts"]["suspect"] == 1
    s.observe(AuditEntry(ts=11.0, event="rails_state", subject_id="rails", actor="trainguard-act",
                         detail={"breaker": {"tripped": False, "reason": ""}, "pool": {"spares": [], "swaps": {"s1": "n2"}},
                                 "evicted": {"llm": ["n2", "n3"]}}))
    s.observe(ActionResult(ts=12.0, command_id="c", action="self_check", status="ok", job="llm", node="n3",
                           details={"passed": True, "machines": ["n3"]}))
    nodes = {n["node"]: n for n in views.fleet(s)["nodes"]}
    assert nodes["n2"]["state"] == "evicted" and nodes["n3"]["state"] == "in_repair"
    assert nodes["s1"]["state"] == "healthy" and nodes["s1"]["replaces"] == "n2" and nodes["s1"]["job"] == "llm"


def test_a_node_stops_being_suspect_when_the_incident_is_old() -> None:
    s = fleet_state()
    decided(s)
    s.observe(TrainingStep(ts=5000.0, job="llm", rank=0, node="n0", step=6, loss=0.1))
    assert views.fleet(s, suspect_s=900)["counts"]["suspect"] == 0


def test_job_view_has_one_ranks_curve_ettr_and_checkpoints() -> None:
    s = fleet_state()
    job = views.job(s, "llm")
    assert job is not None and job["series"]["step"] == [1, 2, 3, 4, 5]
    assert job["series"]["loss"][0] == 2.0 and job["checkpoints"][0]["step"] == 3
    assert job["ettr"]["ettr"] == 1.0 and views.job(s, "nope") is None
    decided(s)
    assert views.job(s, "llm")["timeline"][0]["cause"] == "detection"  # type: ignore[index]


def test_incident_detail_joins_decision_steps_results_and_audit() -> None:
    s = fleet_state()
    dec = decided(s)
    s.observe(ActionCommand(ts=11.0, id="d1-0", action="stop", nodes=["n2"], decision_id="d1", incident_id="i1"))
    s.observe(ActionResult(ts=12.0, command_id="d1-0", action="stop", status="ok", node="n2"))
    s.observe(AuditEntry(ts=12.5, event="result", subject_id="d1-1", actor="trainguard-act",
                         detail={"status": "skipped", "message": "pool empty"}))
    s.observe(AuditEntry(ts=13.0, event="decision_executed", subject_id="d1", actor="trainguard-act"))
    out = views.incident(s, "i1")
    assert out is not None
    assert out["anomalies"][0]["id"] == "a1" and out["missing_anomalies"] == ["gone"]
    assert out["decision"]["status"] == "executed" and out["decision"]["rule"] == dec.rule
    assert [st["result"]["status"] for st in out["steps"]] == ["ok", "skipped"]
    assert [a["event"] for a in out["audit"]] == ["result", "decision_executed"]
    assert views.incident(s, "nope") is None


def test_controls_list_pending_until_an_operator_decides() -> None:
    s = fleet_state()
    decided(s)
    assert [p["decision"]["id"] for p in views.controls(s)["pending"]] == ["d1"]
    assert views.controls(s)["known"] is False
    s.observe(AuditEntry(ts=12.0, event="operator_reject", subject_id="d1", actor="alice",
                         detail={"applied": False}))
    assert views.controls(s)["pending"]  # not applied: still waiting
    s.observe(AuditEntry(ts=12.0, event="operator_approve", subject_id="d1", actor="alice", detail={"applied": True}))
    assert views.controls(s)["pending"] == [] and s.status["d1"] == "planned"


def test_incident_pages_are_newest_first_and_filterable() -> None:
    s = ConsoleState()
    for i in range(30):
        s.observe(Incident(ts=float(i), id=f"i{i}", kind="nan" if i % 2 else "hang", job="j", onset=float(i),
                           detected_at=float(i)))
    page = views.incidents(s, limit=5, offset=5, kind="nan")
    assert page["total"] == 15 and [r["id"] for r in page["items"]] == ["i19", "i17", "i15", "i13", "i11"]


def test_step_history_is_bounded() -> None:
    s = ConsoleState(max_points=3)
    for step in range(10):
        s.observe(TrainingStep(ts=float(step), job="j", rank=0, node="n", step=step, loss=1.0))
    assert [p[1] for p in s.jobs["j"].steps] == [7, 8, 9]


def test_an_older_rails_state_arriving_late_is_ignored() -> None:
    s = ConsoleState()
    new = {"breaker": {"tripped": True, "reason": "x"}, "pool": {"spares": [], "swaps": {}}, "evicted": {}}
    old = {"breaker": {"tripped": False, "reason": ""}, "pool": {"spares": ["s1"], "swaps": {}}, "evicted": {}}
    s.observe(AuditEntry(ts=20.0, event="rails_state", subject_id="rails", detail=new))
    assert s.observe(AuditEntry(ts=10.0, event="rails_state", subject_id="rails", detail=old)) == []
    assert views.controls(s)["breaker"]["tripped"] is True


def test_a_late_approval_does_not_undo_an_outcome() -> None:
    s = fleet_state()
    decided(s)
    s.observe(AuditEntry(ts=13.0, event="decision_executed", subject_id="d1", actor="trainguard-act"))
    s.observe(AuditEntry(ts=12.0, event="operator_approve", subject_id="d1", actor="alice", detail={"applied": True}))
    assert s.status["d1"] == "executed"

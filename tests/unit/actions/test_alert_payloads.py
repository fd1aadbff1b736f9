"""Alert payloads and the rate limit (pure)."""

from __future__ import annotations

from trainguard.actions.alerts import TokenBucket, alertmanager_alert, plan_text, slack_message
from trainguard.schemas.records import Decision, Incident, PlannedAction

INC = Incident(ts=10.0, id="inc-1", kind="hw_fault", job="llm", onset=5.0, detected_at=10.0, nodes=["gpu-3"])
DEC = Decision(ts=11.0, id="d-1", incident_id="inc-1", job="llm", kind="hw_fault", rule="hw_fault.evict",
               plan=[PlannedAction(action="evict_node", nodes=["gpu-3"]),
                     PlannedAction(action="restart_from_checkpoint")],
               reason="XID 79 on gpu-3: evict and restore step 1200")


def test_alertmanager_alert_has_identity_labels_and_the_reason() -> None:
    a = alertmanager_alert(DEC, generator_url="http://grafana/d/tg")
    assert a["labels"] == {"alertname": "TrainguardDecision", "training_job": "llm", "kind": "hw_fault",
                           "severity": "critical", "incident_id": "inc-1", "rule": "hw_fault.evict",
                           "status": "planned"}
    assert a["annotations"]["description"] == DEC.reason
    assert a["annotations"]["plan"] == "evict_node[gpu-3] -> restart_from_checkpoint"
    assert a["startsAt"] == "1970-01-01T00:00:11.000000Z" and a["generatorURL"] == "http://grafana/d/tg"
    inc = alertmanager_alert(INC)
    assert inc["labels"]["alertname"] == "TrainguardIncident" and inc["startsAt"].startswith("1970-01-01T00:00:05")
    assert all(isinstance(v, str) for v in {**inc["labels"], **inc["annotations"]}.values())


def test_slack_message_says_why_and_what_was_suppressed() -> None:
    text = slack_message(DEC, suppressed=4)["text"]
    assert DEC.reason in text and "evict_node[gpu-3]" in text and "4 earlier alert(s) suppressed" in text
    blocked = slack_message(Decision(**{**{f: getattr(DEC, f) for f in DEC.__struct_fields__}, "status": "blocked"}))
    assert blocked["text"].startswith(":no_entry:")
    assert "gpu-3" in slack_message(INC)["text"]


def test_plan_text_of_an_empty_plan() -> None:
    assert plan_text(Decision(ts=0, id="d", incident_id="i", job="j", kind="hang", rule="r", plan=[], reason="")) == "none"


def test_bucket_refills_at_the_configured_rate() -> None:
    now = [0.0]
    bucket = TokenBucket(per_minute=6, burst=1, clock=lambda: now[0])
    assert bucket.allow() and not bucket.allow()
    now[0] = 9.0
    assert not bucket.allow()  # 6/min = one per 10 s
    now[0] = 10.5
    assert bucket.allow()
    assert bucket.take_suppressed() == 2

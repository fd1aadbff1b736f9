"""The console's verdict control, precision by rule and shadow report over the real broker (issue 25 item 3)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from kafka import KafkaProducer

from tests.integration.streams.console.console_kit import OP, VIEW, read, with_console
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import AuditEntry, Decision, Incident, OperatorCommand, PlannedAction, Record
from trainguard.schemas.topics import Topics, key_for

pytestmark = pytest.mark.broker
RULE = "hw_fault.evict_swap_restart"


def records(now: float) -> list[Record]:
    inc = Incident(ts=now, id="inc-v1", kind="hw_fault", job="j", onset=now, detected_at=now, nodes=["n1"])
    dec = Decision(ts=now, id="dec-v1", incident_id="inc-v1", job="j", kind="hw_fault", rule=RULE,
                   plan=[PlannedAction(action="evict_node", nodes=["n1"])], reason="xid 79", status="observed")
    rails = AuditEntry(ts=now, event="rails_state", subject_id="rails", actor="trainguard-act",
                       detail={"rollout": {"default": "observe", "kinds": {"hw_fault": "auto"}, "rules": {}},
                               "approval_kinds": [], "breaker": {"tripped": False, "reason": ""},
                               "pool": {"spares": [], "swaps": {}}, "evicted": {},
                               "precision": {"rules": {RULE: {"true": 1, "false": 1, "unsure": 0, "precision": 0.5}},
                                             "detectors": {}, "low": [RULE], "floor": 0.8, "min_verdicts": 2,
                                             "window_s": 86400.0}})
    applied = AuditEntry(ts=now + 1, event="operator_verdict", subject_id="inc-v1", actor="alice",
                         detail={"applied": True, "verdict": "false", "note": "the GPU was fine"})
    return [inc, dec, rails, applied]


def test_verdicts_are_sent_signed_only_by_an_operator_on_a_known_incident_and_precision_is_shown(
        kafka: str, topic_prefix: str) -> None:
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    topics = Topics(topic_prefix)

    async def body(c: TestClient[Any, Any]) -> None:
        for record in records(time.time()):
            producer.send(topics.for_record(record), key=key_for(record) or None, value=Codec().encode(record))
        producer.flush()
        precision: dict[str, Any] = {}
        async with asyncio.timeout(15):
            while not precision.get("known") or not (await c.get("/api/incidents/inc-v1", headers=VIEW)).ok:
                precision = (await (await c.get("/api/controls", headers=VIEW)).json())["precision"]
                await asyncio.sleep(0.1)
        (row,) = precision["rules"]
        assert row == {"rule": RULE, "kind": "hw_fault", "mode": "auto", "low": True, "true": 1, "false": 1,
                       "unsure": 0, "precision": 0.5}  # the mode next to act's figure
        shown = await (await c.get("/api/incidents/inc-v1", headers=VIEW)).json()
        assert shown["verdict"]["verdict"] == "false" and shown["verdict"]["operator"] == "alice"
        report = await (await c.get("/api/report?since=1h", headers=VIEW)).json()
        (line,) = report["rules"]
        assert line["rule"] == RULE and line["mode"] == "auto" and line["observed"] == 1 and line["evictions"] == 1
        assert line["verdicts"] == {"true": 1, "false": 1, "unsure": 0} and report["precision"][RULE] == 0.5
        bad_window = await c.get("/api/report?since=soon", headers=VIEW)
        assert bad_window.status == 400 and "Traceback" not in await bad_window.text()

        url = "/api/incidents/inc-v1/verdict"
        assert (await c.post(url, headers=VIEW, json={"verdict": "false"})).status == 403
        for bad in ({"verdict": "maybe"}, {}):
            refused = await c.post(url, headers=OP, json=bad)
            assert refused.status == 400 and "unknown verdict" in (await refused.json())["error"]
        unknown = await c.post("/api/incidents/inc-nope/verdict", headers=OP, json={"verdict": "true"})
        assert unknown.status == 404
        ok = await c.post(url, headers=OP, json={"verdict": "true", "note": "xid 79 is real"})
        assert ok.status == 202

    with_console(kafka, topic_prefix, body)
    producer.close()
    commands = [r for r in read(kafka, topic_prefix + "operator", 1) if isinstance(r, OperatorCommand)]
    assert [(c.verb, c.subject_id, c.verdict, c.reason, c.operator) for c in commands] == [
        ("verdict", "inc-v1", "true", "xid 79 is real", "alice")]

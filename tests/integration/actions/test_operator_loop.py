"""Operator commands from the console, applied by the real `trainguard act` process over the real broker.

A held hw_fault decision is rejected (never executed), a stale breaker reset
is refused, and a node with a passing self-check returns to the standby pool;
each outcome is audited under the operator's name, and the new pool is
published as a `rails_state` entry for the console.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer

from actions.journal import Journal
from schemas.codec import Codec
from schemas.records import AuditEntry, Incident, JobTopology, OperatorCommand, Record
from schemas.topics import Topics, key_for
from streams.admin import ensure_topics


def send(kafka: str, topics: Topics, *records: Record) -> None:
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for record in records:
        producer.send(topics.for_record(record), key=key_for(record) or None, value=Codec().encode(record))
    producer.flush()
    producer.close()


def audit_of(kafka: str, topics: Topics) -> list[AuditEntry]:
    consumer = KafkaConsumer(topics.name("audit"), bootstrap_servers=kafka, auto_offset_reset="earliest",
                             group_id=None, consumer_timeout_ms=3000)
    out = [Codec().decode(m.value) for m in consumer]
    consumer.close()
    return [r for r in out if isinstance(r, AuditEntry)]


def act(env: dict[str, str], *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "trainguard.cli", "act", "--executor", "local", *args],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_reject_stale_reset_and_node_return(topic_prefix: str, kafka: str, tmp_path: Path, keys: Any) -> None:
    keys.node(*(f"n{i}" for i in range(4)))
    env = {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": topic_prefix,
           "TRAINGUARD_TOPICS__PARTITIONS": "2", "TRAINGUARD_ACTIONS__GROUP_ID": f"a-{topic_prefix}",
           "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp_path / "act"), "TRAINGUARD_ACTIONS__APPROVAL_KINDS": '["hw_fault"]',
           "TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S": "1", "TRAINGUARD_ACTIONS__STANDBY_NODES": '["spare-0"]',
           **keys.env()}
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1)
    now = time.time()
    send(kafka, topics, JobTopology(ts=now, job="llm", world_size=4, rank_nodes={i: f"n{i}" for i in range(4)}),
         Incident(ts=now, id="hw-1", kind="hw_fault", job="llm", onset=now, detected_at=now, nodes=["n1"]))
    log = tmp_path / "decisions.jsonl"
    act(env, "--max-incidents", "1", "--timeout", "60", "--log", str(log))
    decided = [json.loads(line) for line in log.read_text().splitlines()]
    assert [d["status"] for d in decided] == ["awaiting_approval"]
    decision_id = decided[0]["id"]

    now = time.time()
    send(kafka, topics,
         OperatorCommand(ts=now, id="op-1", verb="reject", operator="alice", subject_id=decision_id,
                         reason="known flaky switch"),
         OperatorCommand(ts=now - 3600, id="op-2", verb="reset_breaker", operator="mallory"),
         OperatorCommand(ts=now, id="op-3", verb="return_node", operator="alice", subject_id="n7",
                         report={"passed": True, "machines": ["n7"]}))
    act(env, "--timeout", "10", "--log", str(log))

    journal = Journal(tmp_path / "act" / "journal.sqlite")
    final = journal.get(decision_id)
    assert final is not None and final.status == "blocked"
    assert not journal.steps(decision_id)  # a rejected plan never runs
    assert journal.get_state("rails")["pool"]["spares"] == ["spare-0", "n7"]
    journal.close()
    audit = audit_of(kafka, topics)
    by_command = {a.detail.get("command"): a for a in audit if a.event.startswith("operator_")}
    assert by_command["op-1"].actor == "alice" and by_command["op-1"].detail["applied"] is True
    assert by_command["op-2"].actor == "mallory" and by_command["op-2"].detail["applied"] is False
    assert by_command["op-3"].detail["applied"] is True
    newest = max((a for a in audit if a.event == "rails_state"), key=lambda a: a.ts)  # partitions interleave
    assert newest.detail["pool"]["spares"] == ["spare-0", "n7"]

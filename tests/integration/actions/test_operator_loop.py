"""Operator commands from the console, applied by the real action loop over the real broker.

A held hw_fault decision is rejected (never executed), a stale breaker reset
is refused, and a node with a passing self-check returns to the standby pool;
each outcome is audited under the operator's name, and the new pool is
published as a `rails_state` entry for the console.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer

from schemas.codec import Codec
from schemas.records import AuditEntry, Incident, JobTopology, OperatorCommand, Record
from schemas.topics import Topics, key_for
from streams.admin import ensure_topics
from streams.act_app import ActLoop
from trainguard.commands.act import build_core


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


def run_loop(settings: Any, topics: Topics, core: Any, seconds: float, until: Any = None) -> None:
    """The real act consume loop (as `trainguard act` runs it) for `seconds`, or until `until()` holds."""

    async def main() -> None:
        loop = ActLoop(broker=settings.broker, topics=topics, core=core, group_id=settings.actions.group_id)
        loop.subscribe(topics.name("operator"), core.observe)
        task = asyncio.create_task(loop.run())
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until and until()):
            await asyncio.sleep(0.1)
        loop.stop()
        await task

    asyncio.run(main())


def test_reject_stale_reset_and_node_return(settings_factory: Any, topic_prefix: str, kafka: str,
                                            tmp_path: Path) -> None:
    settings = settings_factory(actions={"group_id": f"a-{topic_prefix}", "state_dir": str(tmp_path / "act"),
                                         "approval_kinds": ["hw_fault"], "command_timeout_s": 1.0,
                                         "standby_nodes": ["spare-0"]})
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1)
    now = time.time()
    send(kafka, topics, JobTopology(ts=now, job="llm", world_size=4, rank_nodes={i: f"n{i}" for i in range(4)}),
         Incident(ts=now, id="hw-1", kind="hw_fault", job="llm", onset=now, detected_at=now, nodes=["n1"]))
    core, close = build_core(settings, topics, executor="local", dry_run=False)
    run_loop(settings, topics, core, 60, until=lambda: core.decided >= 1)
    decision = core.runner.journal.decision_for("hw-1")
    assert decision is not None and decision.status == "awaiting_approval"

    now = time.time()
    send(kafka, topics,
         OperatorCommand(ts=now, id="op-1", verb="reject", operator="alice", subject_id=decision.id,
                         reason="known flaky switch"),
         OperatorCommand(ts=now - 3600, id="op-2", verb="reset_breaker", operator="mallory"),
         OperatorCommand(ts=now, id="op-3", verb="return_node", operator="alice", subject_id="n7",
                         report={"passed": True, "machines": ["n7"]}))
    run_loop(settings, topics, core, 6)
    core.show_rails()  # what the act app's timer does every second

    final = core.runner.journal.get(decision.id)
    assert final is not None and final.status == "blocked"
    assert not core.runner.journal.steps(decision.id)  # a rejected plan never runs
    assert core.runner.rails.pool.spares == ["spare-0", "n7"]
    close()  # flushes what act published
    audit = audit_of(kafka, topics)
    by_command = {a.detail.get("command"): a for a in audit if a.event.startswith("operator_")}
    assert by_command["op-1"].actor == "alice" and by_command["op-1"].detail["applied"] is True
    assert by_command["op-2"].actor == "mallory" and by_command["op-2"].detail["applied"] is False
    assert by_command["op-3"].detail["applied"] is True
    newest = max((a for a in audit if a.event == "rails_state"), key=lambda a: a.ts)  # partitions interleave
    assert newest.detail["pool"]["spares"] == ["spare-0", "n7"]

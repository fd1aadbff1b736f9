"""Operator commands from the console, applied by the real `trainguard act` process over the real broker.

Every command here is signed with the console's key, as the console signs it.
A held hw_fault decision is rejected (never executed), a stale breaker reset
is refused, and a node with a passing self-check its own agent signed returns
to the standby pool; each outcome is audited under the operator's name, and
the new pool is published as a `rails_state` entry for the console.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from kafka import KafkaConsumer, KafkaProducer

from trainguard.actions.journal import Journal
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import (
    ActionCommand,
    ActionResult,
    AuditEntry,
    Incident,
    JobTopology,
    OperatorCommand,
    Record,
)
from trainguard.schemas.signing import Signer, load_signer
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams.admin import ensure_topics


def send(kafka: str, topics: Topics, *records: Record, signer: Signer | None = None) -> None:
    """Publish `records`, each signed by `signer` when one is given (as the console and the agents sign)."""
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    for record in records:
        value = Codec().encode(record)
        headers = signer.headers(value) if signer is not None else None
        producer.send(topics.for_record(record), key=key_for(record) or None, value=value, headers=headers)
    producer.flush()
    producer.close()


def op(now: float, cid: str, verb: str, operator: str = "alice", ttl: float = 120.0, **kw: Any) -> OperatorCommand:
    return OperatorCommand(ts=now, id=cid, verb=verb, operator=operator, expires=now + ttl, **kw)


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


def held_decision(kafka: str, topics: Topics, env: dict[str, str], log: Path, keys: Any) -> str:
    """A real act holds a hw_fault eviction of n1 (job llm, 4 nodes) for approval; its decision id."""
    now = time.time()
    send(kafka, topics, JobTopology(ts=now, job="llm", world_size=4, rank_nodes={i: f"n{i}" for i in range(4)}))
    send(kafka, topics, Incident(ts=now, id="hw-1", kind="hw_fault", job="llm", onset=now, detected_at=now,
                                 nodes=["n1"]), signer=load_signer(keys.root / "worker.key"))  # as the worker signs
    act(env, "--max-incidents", "1", "--timeout", "60", "--log", str(log))
    decided = [json.loads(line) for line in log.read_text().splitlines()]
    assert [d["status"] for d in decided] == ["awaiting_approval"]
    return str(decided[0]["id"])


def act_env(kafka: str, topic_prefix: str, tmp_path: Path, keys: Any) -> dict[str, str]:
    return {**os.environ, "TRAINGUARD_BROKER__BOOTSTRAP": kafka, "TRAINGUARD_TOPICS__PREFIX": topic_prefix,
            "TRAINGUARD_TOPICS__PARTITIONS": "2", "TRAINGUARD_ACTIONS__GROUP_ID": f"a-{topic_prefix}",
            "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp_path / "act"),
            "TRAINGUARD_ACTIONS__APPROVAL_KINDS": '["hw_fault"]', "TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S": "1",
            "TRAINGUARD_ACTIONS__STANDBY_NODES": '["spare-0"]', **keys.env()}


def test_reject_stale_reset_and_node_return(topic_prefix: str, kafka: str, tmp_path: Path, keys: Any) -> None:
    keys.node(*(f"n{i}" for i in range(4)), "n6", "n7")
    env = act_env(kafka, topic_prefix, tmp_path, keys)
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1)
    n6 = load_signer(keys.root / "nodes" / "n6.key", key_id="n6")
    n7 = load_signer(keys.root / "nodes" / "n7.key", key_id="n7")
    now = time.time()
    # The self-check act sent n7 (journaled as act journals a command before sending it), and n7's own
    # agent's passing answer to it (act reads results before it decides: a state topic).
    check = ActionCommand(ts=now, id="dsc-0-" + "c" * 32, action="self_check", job="", nodes=["n7"])
    (tmp_path / "act").mkdir()
    sent = Journal(tmp_path / "act" / "journal.sqlite")
    sent.record_intent("dsc", 0, check)
    sent.close()
    send(kafka, topics, ActionResult(ts=now, command_id=check.id, action="self_check", status="ok", node="n7"),
         signer=n7)
    # n6 vouches for itself with a command nobody sent it: its good signature counts for nothing
    send(kafka, topics, ActionResult(ts=now, command_id="sc-n6", action="self_check", status="ok", node="n6"),
         signer=n6)
    log = tmp_path / "decisions.jsonl"
    decision_id = held_decision(kafka, topics, env, log, keys)

    now = time.time()
    console = load_signer(keys.root / "console.key")
    send(kafka, topics, op(now, "op-0", "return_node", subject_id="n6", report={"passed": True, "machines": ["n6"]}),
         signer=console)  # signed, but act holds no self-check of n6: the report in it counts for nothing
    send(kafka, topics,
         op(now, "op-1", "reject", subject_id=decision_id, reason="known flaky switch"),
         op(now - 3600, "op-2", "reset_breaker", operator="mallory", ttl=7200),
         op(now, "op-3", "return_node", subject_id="n7"), signer=console)
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
    assert by_command["op-0"].detail["applied"] is False and "no self-check" in by_command["op-0"].detail["message"]
    stray = [a for a in audit if a.event == "result_rejected" and a.subject_id == "sc-n6"]
    assert stray and stray[0].detail["reason"].startswith("not a target")
    newest = max((a for a in audit if a.event == "rails_state"), key=lambda a: a.ts)  # partitions interleave
    assert newest.detail["pool"]["spares"] == ["spare-0", "n7"]


def test_forged_operator_commands_change_nothing_and_are_audited(topic_prefix: str, kafka: str, tmp_path: Path,
                                                                  keys: Any) -> None:
    """Unsigned, signed with a key the console does not hold, expired, replayed (even after act restarted):
    each is audited as operator_rejected and moves nothing; then the console's signed approval works."""
    keys.node(*(f"n{i}" for i in range(4)))
    env = act_env(kafka, topic_prefix, tmp_path, keys)
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1)
    log = tmp_path / "decisions.jsonl"
    decision_id = held_decision(kafka, topics, env, log, keys)

    console = load_signer(keys.root / "console.key")
    impostor = Signer("console", Ed25519PrivateKey.generate())  # the console's key id, not its key
    now = time.time()
    reset = op(now, "op-reset", "reset_breaker", reason="first, a real one")
    send(kafka, topics, op(now, "op-unsigned", "approve", operator="mallory", subject_id=decision_id))
    send(kafka, topics, op(now, "op-impostor", "approve", operator="mallory", subject_id=decision_id),
         signer=impostor)
    send(kafka, topics, op(now, "op-act-key", "approve", operator="mallory", subject_id=decision_id),
         signer=load_signer(keys.root / "act.key"))  # a real key of the fleet, but not the console's
    send(kafka, topics, op(now - 200, "op-expired", "approve", subject_id=decision_id, ttl=60), signer=console)
    send(kafka, topics, reset, signer=console)
    act(env, "--timeout", "10", "--log", str(log))
    journal = Journal(tmp_path / "act" / "journal.sqlite")
    final = journal.get(decision_id)
    assert final is not None and final.status == "awaiting_approval" and not journal.steps(decision_id)
    journal.close()

    send(kafka, topics, reset, signer=console)  # the captured bytes and signature again, to a restarted act
    send(kafka, topics, op(time.time(), "op-approve", "approve", subject_id=decision_id), signer=console)
    act(env, "--timeout", "15", "--log", str(log))
    journal = Journal(tmp_path / "act" / "journal.sqlite")
    final = journal.get(decision_id)
    assert final is not None and final.status != "awaiting_approval"  # the console's approval was applied
    journal.close()

    audit = audit_of(kafka, topics)
    rejected = {a.subject_id: a for a in audit if a.event == "operator_rejected"}
    assert set(rejected) == {"op-unsigned", "op-impostor", "op-act-key", "op-expired", "op-reset"}
    assert "unsigned" in rejected["op-unsigned"].detail["reason"]
    assert "does not verify" in rejected["op-impostor"].detail["reason"]
    assert "unknown key id 'act'" in rejected["op-act-key"].detail["reason"]
    assert "expired" in rejected["op-expired"].detail["reason"]
    assert "replayed" in rejected["op-reset"].detail["reason"]
    assert rejected["op-unsigned"].detail["claimed_operator"] == "mallory"
    applied = [a for a in audit if a.event.startswith("operator_") and a.event != "operator_rejected"]
    assert sorted((a.detail["command"], a.actor) for a in applied) == [("op-approve", "alice"), ("op-reset", "alice")]

"""Rollout modes end to end (issue 25 acceptance): observe, promote, demote, through real processes.

One real `trainguard act --executor local`, started in `observe` for every kind
(a new install's default, set here explicitly since the test session runs act
in `auto`), reads incidents from the real broker; four real `trainguard run`
agents supervise stand-in trainers. Operator commands are signed with the
console's key, exactly as the console signs them; one signed with another key
is refused and audited, and changes nothing.

* an hw_fault in observe: a decision journaled as "observed" (with its plan),
  and no command at all for it;
* promoting hw_fault to auto (signed set_rollout): the next hw_fault is acted on
  (a stop reaches the faulty node's real agent, which answers);
* demoting it back to observe: the one after is observed again, no command;
* each change is audited under the operator's name;
* `trainguard actions report` over that act's journal counts it all per rule.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from processes import stop_all

from tests.e2e.act_kit import Tap, agent, base_env, hw, job_records, trainguard
from trainguard.actions.journal import Journal
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import ActionCommand, ActionResult, AuditEntry, OperatorCommand, Record
from trainguard.schemas.signing import Signer, load_signer
from trainguard.schemas.topics import Topics, key_for

pytestmark = [pytest.mark.broker, pytest.mark.e2e]
NODES = ["ro0", "ro1", "ro2", "ro3"]
JOB = "roll-job"


def operator(tap: Tap, signer: Signer, who: str, subject: str, mode: str) -> OperatorCommand:
    """Publish a set_rollout command signed by `signer` (the console's key, or a forger's)."""
    now = time.time()
    cmd = OperatorCommand(ts=now, id=f"op-{uuid.uuid4().hex}", verb="set_rollout", operator=who,
                          subject_id=subject, mode=mode, reason="e2e", expires=now + 120)
    value = Codec().encode(cmd)
    tap.producer.send(tap.topics.for_record(cmd), key=key_for(cmd) or None, value=value,
                      headers=signer.headers(value))
    tap.producer.flush()
    return cmd


def audited(tap: Tap, event: str, subject: str = "", timeout_s: float = 60.0) -> AuditEntry:
    found = tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == event and
                     (not subject or r.subject_id == subject), timeout_s)
    assert isinstance(found, AuditEntry)
    return found


def decision_of(tap: Tap, incident_id: str) -> AuditEntry:
    """The audited decision on `incident_id` (its status, rollout mode and plan)."""
    found = tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == "decision" and
                     r.detail.get("incident") == incident_id, 60.0)
    assert isinstance(found, AuditEntry)
    return found


def commands_for(seen: list[Record], decision_id: str) -> list[ActionCommand]:
    return [r for r in seen if isinstance(r, ActionCommand) and r.decision_id == decision_id]


def test_observe_then_promote_then_demote_with_real_act_and_agents(
        kafka: str, topic_prefix: str, tmp_path: Path, keys: Any) -> None:
    keys.node(*NODES)
    env = base_env(kafka, topic_prefix, tmp_path, keys, TRAINGUARD_ACTIONS__ROLLOUT__DEFAULT="observe",
                   TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S="30", TRAINGUARD_ACTIONS__COOLDOWN_S="0",
                   TRAINGUARD_ACTIONS__BREAKER_MAX_FRACTION="1.0")
    console = load_signer(keys.root / "console.key")
    forger = Signer("console", Ed25519PrivateKey.generate())
    tap = Tap(kafka, Topics(topic_prefix), keys)
    agents = [agent(env, tmp_path, JOB, n) for n in NODES]
    act = trainguard(env, "act", "--executor", "local", "--timeout", "240")
    try:
        now = time.time()
        for record in job_records(JOB, NODES, now):
            tap.publish(record)
        audited(tap, "rails_state")  # act is up and has shown its rails (rollout included)

        forged = operator(tap, forger, "mallory", "kind:hw_fault", "auto")
        refused = audited(tap, "operator_rejected", forged.id)
        assert refused.detail["verb"] == "set_rollout" and refused.detail["claimed_operator"] == "mallory"

        tap.publish(hw(JOB, "ro1", time.time()))
        observed = decision_of(tap, "hw-ro1")
        assert observed.detail["status"] == "observed" and observed.detail["rollout"] == "observe"
        assert observed.detail["plan"][0] == "evict_node"  # what it would have done

        promote = operator(tap, console, "alice", "kind:hw_fault", "auto")
        promoted = audited(tap, "operator_set_rollout", "kind:hw_fault")
        assert promoted.actor == "alice" and promoted.detail["applied"] and promoted.detail["command"] == promote.id
        tap.publish(hw(JOB, "ro2", time.time()))
        acted = decision_of(tap, "hw-ro2")
        assert acted.detail["status"] == "planned" and acted.detail["rollout"] == "auto"
        stop = tap.wait(lambda r: isinstance(r, ActionCommand) and r.action == "stop" and r.nodes == ["ro2"])
        tap.wait(lambda r: isinstance(r, ActionResult) and isinstance(stop, ActionCommand) and
                 r.command_id == stop.id and r.node == "ro2" and r.status == "ok")  # the real agent stopped
        audited(tap, "decision_executed", acted.subject_id, timeout_s=120.0)

        demote = operator(tap, console, "bob", "kind:hw_fault", "observe")
        tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == "operator_set_rollout" and
                 r.detail.get("command") == demote.id)
        tap.publish(hw(JOB, "ro3", time.time()))
        again = decision_of(tap, "hw-ro3")
        assert again.detail["status"] == "observed" and again.detail["rollout"] == "observe"
        tap.drain(3.0)  # a command act might still send for an observed decision would be here by now
    finally:
        stop_all([act, *agents], timeout_s=30)
        tap.drain(1.0)
        tap.close()
    assert commands_for(tap.seen, observed.subject_id) == [] and commands_for(tap.seen, again.subject_id) == []
    assert commands_for(tap.seen, acted.subject_id)  # the promoted one, and only it, sent commands
    sent = {c.decision_id for c in tap.seen if isinstance(c, ActionCommand)}
    assert sent == {acted.subject_id}
    changes = [a for a in tap.seen if isinstance(a, AuditEntry) and a.event == "operator_set_rollout"]
    assert [(a.actor, a.detail["mode"], a.detail["applied"]) for a in changes] == [
        ("alice", "auto", True), ("bob", "observe", True)]
    journal = Journal(tmp_path / "act" / "journal.sqlite")
    try:
        statuses = {d.incident_id: d.status for d in journal.recent(10)}
        assert statuses["hw-ro1"] == statuses["hw-ro3"] == "observed" and statuses["hw-ro2"] == "executed"
        assert journal.get_state("rollout")["kinds"] == {"hw_fault": "observe"}  # durable (act-state mirrors it)
    finally:
        journal.close()
    # The shadow report over the real act's journal: what the rule decided and would have done.
    report = subprocess.run([sys.executable, "-m", "trainguard.cli", "actions", "report", "--json", "--since", "1h"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    (row,) = json.loads(report.stdout)["rules"]
    assert row["rule"] == "hw_fault.evict_swap_restart" and row["mode"] == "observe"
    assert (row["decisions"], row["observed"], row["acted"], row["would_block"]) == (3, 2, 1, 0)
    assert row["nodes"] == ["ro1", "ro2", "ro3"] and row["restarts"] == 3

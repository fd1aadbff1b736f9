"""Lemon nodes end to end (issue 25 item 4 acceptance), through real processes and the real broker.

One node, lemon-1, runs in three jobs in turn (a real `trainguard run` agent
for it in each job, and one for each job's other node); a hardware incident
on lemon-1 in each job makes the real `trainguard act --executor local` evict
it three times. The third quarantines it (lemon_quarantined, with the three
jobs in its history, and the local executor's mark). Then:

* a passing self-check (`trainguard actions return-node --report`) does not
  return it to the standby pool (standby_return_refused);
* act is SIGKILLed and started again over the same journal: still quarantined;
* act is SIGKILLed again and its state directory deleted; a fresh act
  rebuilds from the act-state topic: still quarantined, the same history,
  shown in its rails_state (the console's view) and again refused a return;
* a forged release (another key under the console's id) is refused and
  audited; releasing a node that is no lemon is refused with its reason;
* the console-signed release by alice lifts the quarantine, audited under
  her name, and the next passing self-check returns lemon-1 to the pool.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from processes import stop_all

from tests.e2e.act_kit import Tap, agent, base_env, job_records, trainguard
from trainguard.actions.journal import Journal
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import AuditEntry, Incident, OperatorCommand, Record
from trainguard.schemas.signing import Signer, load_signer
from trainguard.schemas.topics import Topics, key_for

pytestmark = [pytest.mark.broker, pytest.mark.e2e]
LEMON = "lemon-1"
JOBS = {"lj1": "lok-1", "lj2": "lok-2", "lj3": "lok-3"}  # job -> its other node


def release(tap: Tap, signer: Signer, who: str, node: str) -> OperatorCommand:
    """Publish a release_node command signed by `signer` (the console's key, or a forger's)."""
    now = time.time()
    cmd = OperatorCommand(ts=now, id=f"op-{uuid.uuid4().hex}", verb="release_node", operator=who, subject_id=node,
                          reason="PSU and board replaced", expires=now + 120)
    value = Codec().encode(cmd)
    tap.producer.send(tap.topics.for_record(cmd), key=key_for(cmd) or None, value=value,
                      headers=signer.headers(value))
    tap.producer.flush()
    return cmd


def audited(tap: Tap, event: str, subject: str = "", after: int = 0, timeout_s: float = 90.0) -> AuditEntry:
    """The first `event` audit entry (about `subject`) among what the tap saw from index `after` on."""
    def hit(r: Record) -> bool:
        return isinstance(r, AuditEntry) and r.event == event and (not subject or r.subject_id == subject)

    deadline = time.monotonic() + timeout_s
    while True:
        found = [r for r in tap.seen[after:] if hit(r)]
        if found:
            assert isinstance(found[0], AuditEntry)
            return found[0]
        assert time.monotonic() < deadline, f"no {event} audit entry in time"
        tap.drain(0.5)


def return_node(env: dict[str, str], report: Path) -> None:
    """What an operator runs after a passing `trainguard selfcheck`: queue the node for the pool."""
    out = subprocess.run([sys.executable, "-m", "trainguard.cli", "actions", "return-node", LEMON, "--report",
                          str(report)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def lemon_state(path: Path) -> dict[str, Any]:
    journal = Journal(path)
    try:
        return journal.get_state("lemons").get("nodes", {}).get(LEMON, {})
    finally:
        journal.close()


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def test_a_lemon_is_quarantined_survives_sigkill_and_a_rebuild_and_only_a_signed_release_frees_it(
        kafka: str, topic_prefix: str, tmp_path: Path, keys: Any) -> None:
    keys.node(LEMON, *JOBS.values())
    env = base_env(kafka, topic_prefix, tmp_path, keys, TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S="30",
                   TRAINGUARD_ACTIONS__COOLDOWN_S="0", TRAINGUARD_ACTIONS__BREAKER_MAX_FRACTION="1.0",
                   TRAINGUARD_ACTIONS__FLEET_MAX_EVICTIONS="20")
    state_dir, journal = tmp_path / "act", tmp_path / "act" / "journal.sqlite"
    report = tmp_path / "selfcheck.json"
    report.write_text(json.dumps({"passed": True, "machines": [LEMON]}))  # a passing `trainguard selfcheck`
    console = load_signer(keys.root / "console.key")
    forger = Signer("console", Ed25519PrivateKey.generate())
    tap = Tap(kafka, Topics(topic_prefix), keys)
    for job in JOBS:
        (tmp_path / job).mkdir()
    agents = [agent(env, tmp_path / job, job, node) for job, other in JOBS.items() for node in (LEMON, other)]
    acts = [trainguard(env, "act", "--executor", "local", "--timeout", "400")]
    try:
        now = time.time()
        for job, other in JOBS.items():
            for record in job_records(job, [LEMON, other], now):
                tap.publish(record)
        audited(tap, "rails_state")
        for i, job in enumerate(JOBS):
            ts = time.time()
            tap.publish(Incident(ts=ts, id=f"hw-{job}", kind="hw_fault", job=job, onset=ts, detected_at=ts,
                                 nodes=[LEMON]))
            decided = tap.wait(lambda r, j=job: isinstance(r, AuditEntry) and r.event == "decision"  # type: ignore[misc]
                               and r.detail.get("incident") == f"hw-{j}", 90.0)
            assert isinstance(decided, AuditEntry) and decided.detail["plan"][0] == "evict_node"
            audited(tap, "decision_executed", decided.subject_id, timeout_s=120.0)
            if i < 2:  # two incidents are bad luck, not a lemon
                assert not [r for r in tap.seen if isinstance(r, AuditEntry) and r.event == "lemon_quarantined"]
        quarantined = audited(tap, "lemon_quarantined", LEMON)
        assert sorted(i["job"] for i in quarantined.detail["incidents"]) == sorted(JOBS)
        assert "3 hw_fault incidents" in quarantined.detail["reason"]
        marked = audited(tap, "lemon_marked", LEMON)
        assert marked.detail["quarantined"] is True and marked.detail["executor"] == "local"
        assert marked.detail["status"] == "ok"

        mark = len(tap.seen)
        return_node(env, report)  # a passing self-check, alone
        refused = audited(tap, "standby_return_refused", LEMON, after=mark)
        assert "lemon" in refused.detail["reason"]

        time.sleep(2.0)  # the quarantine reaches act-state (mirrored asynchronously)
        kill(acts[0])
        assert lemon_state(journal)["quarantined"]
        acts.append(trainguard(env, "act", "--executor", "local", "--timeout", "300"))  # same journal
        mark = len(tap.seen)
        shown = audited(tap, "rails_state", after=mark)
        assert LEMON in shown.detail["lemons"]
        return_node(env, report)
        audited(tap, "standby_return_refused", LEMON, after=mark)
        time.sleep(2.0)
        before = lemon_state(journal)
        kill(acts[1])
        shutil.rmtree(state_dir)  # a new machine: act rebuilds from the act-state topic alone

        acts.append(trainguard(env, "act", "--executor", "local", "--timeout", "300"))
        mark = len(tap.seen)
        shown = audited(tap, "rails_state", after=mark)
        assert shown.detail["lemons"][LEMON]["quarantined"] == before["quarantined"]
        assert lemon_state(journal)["incidents"] == before["incidents"]  # the same history, not a new one
        return_node(env, report)
        audited(tap, "standby_return_refused", LEMON, after=mark)

        forged = release(tap, forger, "mallory", LEMON)
        rejected = audited(tap, "operator_rejected", forged.id, after=mark)
        assert rejected.detail["verb"] == "release_node" and rejected.detail["claimed_operator"] == "mallory"
        wrong = release(tap, console, "alice", "lok-1")
        no_lemon = audited(tap, "operator_release_node", "lok-1", after=mark)
        assert not no_lemon.detail["applied"] and "nothing to release" in no_lemon.detail["message"]
        assert wrong.id == no_lemon.detail["command"]
        freed = release(tap, console, "alice", LEMON)
        applied = audited(tap, "operator_release_node", LEMON, after=mark)
        assert applied.actor == "alice" and applied.detail["applied"] and applied.detail["command"] == freed.id
        lifted = audited(tap, "lemon_marked", LEMON, after=mark)
        assert lifted.detail["quarantined"] is False

        return_node(env, report)  # now the passing self-check returns it
        audited(tap, "standby_returned", LEMON, after=mark)
        acts[2].send_signal(signal.SIGTERM)
        acts[2].communicate(timeout=60)
    finally:
        stop_all([*acts, *agents], timeout_s=30)
        tap.drain(1.0)
        tap.close()
    final = lemon_state(journal)
    assert not final["quarantined"] and len(final["incidents"]) == 3
    assert final["released"][0]["operator"] == "alice"
    rails = Journal(journal)
    try:
        assert LEMON in rails.get_state("rails")["pool"]["spares"]
    finally:
        rails.close()
    # Only the console-signed command counted: the forged one never reached the rails.
    releases = [a for a in tap.seen if isinstance(a, AuditEntry) and a.event == "operator_release_node"]
    assert [(a.actor, a.subject_id, a.detail["applied"]) for a in releases] == [
        ("alice", "lok-1", False), ("alice", LEMON, True)]

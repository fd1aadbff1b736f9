"""Incidents to recovery, end to end: real broker, real agent, real torch job.

An incident on the real `<prefix>incidents` topic is decided by a real
`trainguard act --executor local` process, which sends a signed
`restart_from_checkpoint` to the real `trainguard run` agent supervising a
small CPU torch job (the collectors' own e2e training script); the job
resumes from the checkpoint before the onset, and the result lands on the
audit topic. Then the safety properties: the same incident redelivered to a
fresh consumer group (offsets lost) causes no second action, and a forged
command is rejected by the agent and audited.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.e2e.act_kit import JOB, SCRIPT, Tap, env_for, trainguard
from trainguard.schemas.action_params import Restart
from trainguard.schemas.records import ActionCommand, ActionResult, AuditEntry, CheckpointEvent, Incident, TrainingStep
from trainguard.schemas.signing import Signer
from trainguard.schemas.topics import Topics

pytestmark = [pytest.mark.broker, pytest.mark.e2e]


@pytest.fixture
def tap(kafka: str, topic_prefix: str, keys: Any) -> Iterator[Tap]:
    t = Tap(kafka, Topics(topic_prefix), keys)
    yield t
    t.close()


def test_incident_to_restart_from_checkpoint_with_idempotency_and_forgery(
        kafka: str, topic_prefix: str, tmp_path: Path, tap: Tap, keys: Any) -> None:
    (tmp_path / "ckpt").mkdir()
    keys.node("node-1")
    env = env_for(kafka, topic_prefix, tmp_path, keys.security(), TRAINGUARD_ACTIONS__GROUP_ID=f"a1-{topic_prefix}")
    agent = trainguard(env, "run", "--job", JOB, "--node", "node-1", "--linger", "60", "--", sys.executable,
                       str(SCRIPT))
    try:
        tap.wait(lambda r: isinstance(r, CheckpointEvent) and r.job == JOB and r.step >= 10)
        now = time.time()
        latest = max(r.step for r in tap.seen if isinstance(r, TrainingStep) and r.job == JOB)
        incident = Incident(ts=now, id="inc-nan-1", kind="nan", job=JOB, onset=now, detected_at=now,
                            ranks=[0], nodes=["node-1"], step=latest, anomaly_ids=["a1"])
        tap.publish(incident)
        act = trainguard(env, "act", "--executor", "local", "--max-incidents", "1", "--timeout", "150")
        out, _ = act.communicate(timeout=200)
        assert act.returncode == 0, out
        assert "restore the latest checkpoint before step" in " ".join(out.split())

        restart = tap.wait(lambda r: isinstance(r, ActionCommand) and r.action == "restart_from_checkpoint")
        assert isinstance(restart, ActionCommand) and restart.incident_id == "inc-nan-1"
        ckpt_step = restart.params.step
        assert isinstance(ckpt_step, int) and ckpt_step < latest and ckpt_step % 5 == 0
        resumed = tap.wait(lambda r: isinstance(r, TrainingStep) and r.job == JOB and r.attempt == 1)
        assert isinstance(resumed, TrainingStep) and resumed.step == ckpt_step + 1  # resumed from the checkpoint
        result = tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == "result"
                          and r.detail.get("action") == "restart_from_checkpoint")
        assert isinstance(result, AuditEntry) and result.detail["status"] == "ok"
        summary = tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == "incident_summary")
        assert isinstance(summary, AuditEntry) and summary.detail["status"] == "executed"
        assert 0.0 <= summary.detail["ettr"]["ettr"] <= 1.0 and summary.detail["ettr"]["wall_s"] > 0
        events = {r.event for r in tap.seen if isinstance(r, AuditEntry)}
        assert {"decision", "command", "result", "decision_executed"} <= events

        # Redelivery after lost offsets (fresh group, same journal) + a forged command meanwhile.
        tap.publish(incident)
        env2 = {**env, "TRAINGUARD_ACTIONS__GROUP_ID": f"a2-{topic_prefix}"}
        act2 = trainguard(env2, "act", "--executor", "local", "--timeout", "30")
        tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == "duplicate_incident")
        forged = ActionCommand(ts=time.time(), expires=time.time() + 60, id="forged-1",
                               action="restart_from_checkpoint", job=JOB,
                               params=Restart(step=5, path=str(tmp_path / "ckpt" / "step5.pt")))
        value = tap.codec.encode(forged)  # signed, but not with act's key
        tap.producer.send(tap.topics.name("actions"), key=JOB.encode(), value=value,
                          headers=Signer("act", Ed25519PrivateKey.generate()).headers(value))
        tap.producer.flush()
        rejected = tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == "command_rejected"
                            and r.subject_id == "forged-1")
        assert isinstance(rejected, AuditEntry) and "does not verify" in rejected.detail["reason"]
        out2, _ = act2.communicate(timeout=90)
        assert act2.returncode == 0, out2
        tap.drain(2.0)
        restarts = [r for r in tap.seen if isinstance(r, ActionCommand) and r.action == "restart_from_checkpoint"
                    and r.id == restart.id]
        assert len(restarts) == 1 and len(restart.id.rsplit("-", 1)[1]) == 32  # no second action; random id
        assert not any(isinstance(r, TrainingStep) and r.attempt >= 2 for r in tap.seen)  # forgery did nothing
        assert any(isinstance(r, ActionResult) and r.command_id == "forged-1" and r.status == "rejected"
                   for r in tap.seen)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.communicate(timeout=60)

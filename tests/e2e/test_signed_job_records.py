"""A job's checkpoints and topology count only when its current attempt signed them (issue 20's last hole).

Real broker, real `trainguard run` agent supervising the real CPU torch job (its hook signs with the
attempt key the agent minted), real `trainguard act --executor local`, with the product default
(`security.job_records_trusted_by_acl` unset). A writer with collector credentials announces a
checkpoint and a 1,000-node topology for the job; act refuses and audits both and restarts the job
from a genuine checkpoint, on its genuine node. After the restart (attempt 1) a genuine attempt-0
checkpoint record, replayed byte for byte with its signature, is refused as an old attempt's.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer

from tests.e2e.act_kit import JOB, SCRIPT, Tap, env_for, trainguard
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import ActionCommand, AuditEntry, CheckpointEvent, Incident, JobTopology, TrainingStep
from trainguard.schemas.topics import Topics, key_for

pytestmark = [pytest.mark.broker, pytest.mark.e2e]


@pytest.fixture
def tap(kafka: str, topic_prefix: str, keys: Any) -> Iterator[Tap]:
    t = Tap(kafka, Topics(topic_prefix), keys)
    yield t
    t.close()


def _genuine_checkpoint(kafka: str, topics: Topics) -> tuple[bytes, list[tuple[str, bytes]], CheckpointEvent]:
    """One checkpoint message exactly as the hook sent it (value and signature headers)."""
    consumer = KafkaConsumer(topics.name("checkpoints"), bootstrap_servers=kafka, auto_offset_reset="earliest",
                             group_id=None, consumer_timeout_ms=30000)
    try:
        for message in consumer:
            headers = [(k, bytes(v)) for k, v in message.headers]
            if dict(headers).get("tg-kid"):
                record = Codec().decode(message.value)
                assert isinstance(record, CheckpointEvent)
                return message.value, headers, record
    finally:
        consumer.close()
    raise AssertionError("no signed checkpoint on the checkpoints topic")


def test_forged_checkpoint_and_topology_are_refused_genuine_ones_restart_the_job(
        kafka: str, topic_prefix: str, tmp_path: Path, tap: Tap, keys: Any) -> None:
    (tmp_path / "ckpt").mkdir()
    keys.node("node-1")
    env = env_for(kafka, topic_prefix, tmp_path, keys.security(job_records="signed"),
                  TRAINGUARD_ACTIONS__GROUP_ID=f"a1-{topic_prefix}")
    assert not any(k.endswith("JOB_RECORDS_TRUSTED_BY_ACL") for k in env)  # the product default
    agent = trainguard(env, "run", "--job", JOB, "--node", "node-1", "--linger", "60", "--", sys.executable,
                       str(SCRIPT))
    act = None
    try:
        tap.wait(lambda r: isinstance(r, CheckpointEvent) and r.job == JOB and r.step >= 10)
        latest = max(r.step for r in tap.seen if isinstance(r, TrainingStep) and r.job == JOB)
        forged_path = str(tmp_path / "forged.pt")
        forged = CheckpointEvent(ts=time.time(), job=JOB, step=latest - 1, path=forged_path)  # newest before onset
        inflated = JobTopology(ts=time.time(), job=JOB, world_size=1000,
                               rank_nodes={r: "node-1" if r == 0 else f"evil-{r}" for r in range(1000)})
        for record in (forged, inflated):  # as a collector writes them: no attempt's signature
            tap.producer.send(tap.topics.for_record(record), key=key_for(record), value=tap.codec.encode(record))
        tap.producer.flush()
        now = time.time()
        tap.publish(Incident(ts=now, id="inc-nan-signed", kind="nan", job=JOB, onset=now, detected_at=now,
                             ranks=[0], nodes=["node-1"], step=latest, anomaly_ids=["a1"]))
        act = trainguard(env, "act", "--executor", "local", "--timeout", "150")

        restart = tap.wait(lambda r: isinstance(r, ActionCommand) and r.action == "restart_from_checkpoint", 120)
        assert isinstance(restart, ActionCommand)
        assert restart.nodes == ["node-1"]  # the genuine topology's node, not the 1,000 forged ones
        assert restart.params.path != forged_path and restart.params.step % 5 == 0  # a genuine checkpoint
        ckpt_refused = tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == "checkpoint_rejected")
        assert isinstance(ckpt_refused, AuditEntry) and ckpt_refused.detail["path"] == forged_path
        assert "unsigned" in ckpt_refused.detail["reason"]
        topo_refused = tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == "topology_rejected")
        assert isinstance(topo_refused, AuditEntry) and topo_refused.detail["world_size"] == 1000
        accepted = [r for r in tap.seen if isinstance(r, AuditEntry) and r.event == "attempt_key_accepted"]
        assert accepted and accepted[0].detail["node"] == "node-1" and accepted[0].detail["attempt"] == 0

        resumed = tap.wait(lambda r: isinstance(r, TrainingStep) and r.job == JOB and r.attempt == 1)
        assert isinstance(resumed, TrainingStep) and resumed.step == restart.params.step + 1
        tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == "attempt_key_accepted"
                 and r.detail.get("attempt") == 1 and r.detail.get("trust") == "restart act sent")

        value, headers, old = _genuine_checkpoint(kafka, tap.topics)  # signed by attempt 0's key
        assert "/0/" in dict(headers)["tg-kid"].decode()
        tap.producer.send(tap.topics.name("checkpoints"), key=JOB.encode(), value=value, headers=headers)
        tap.producer.flush()
        replayed = tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == "checkpoint_rejected"
                            and r.detail.get("path") == old.path)
        assert isinstance(replayed, AuditEntry) and "attempt 0; the job is at attempt 1" in replayed.detail["reason"]
    finally:
        for proc in (p for p in (act, agent) if p is not None):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()

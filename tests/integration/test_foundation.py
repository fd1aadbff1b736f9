"""Against the real broker: topics, the dead-letter topic, and the NaN slice.

1. a training step with a NaN loss is published on the training topic;
2. the worker flags a `nan` anomaly scoped to the job and rank;
3. an incident appears on the incidents topic;
4. `trainguard act --dry-run` prints and records "restore the latest
   checkpoint before step N".
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

from kafka import KafkaAdminClient

from trainguard.schemas import Anomaly, CheckpointEvent, DeadLetter, Decision, Incident, TrainingStep
from trainguard.schemas.topics import Topics


def test_broker_lists_topics_through_kafka_python(kafka: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        assert isinstance(admin.list_topics(), list)
    finally:
        admin.close()


def test_nan_slice_end_to_end(
    kafka: str,
    topic_prefix: str,
    tmp_path: Path,
    trainguard_proc: Callable[..., object],
    publish: Callable[..., None],
    read_topic: Callable[..., list[object]],
    process_output: Callable[..., str],
) -> None:
    worker = trainguard_proc("worker")
    publish(
        CheckpointEvent(ts=1000.0, job="llm", step=100, path="/ckpt/100"),
        CheckpointEvent(ts=1100.0, job="llm", step=200, path="/ckpt/200"),
        TrainingStep(ts=1150.0, job="llm", rank=0, node="node-0", step=249, loss=2.1),
        TrainingStep(ts=1151.0, job="llm", rank=3, node="node-1", step=250, loss="nan"),
        TrainingStep(ts=1151.1, job="llm", rank=1, node="node-0", step=250, loss="nan"),
        ("training", b'{"type":"step","ts":'),
    )

    anomalies = read_topic("anomalies", 1, timeout_s=120)
    assert len(anomalies) == 1, process_output(worker)  # type: ignore[arg-type]
    [anomaly] = anomalies
    assert isinstance(anomaly, Anomaly)
    assert (anomaly.kind, anomaly.job, anomaly.ranks, anomaly.step) == ("nan", "llm", [3], 250)

    # the worker created every topic before consuming
    admin = KafkaAdminClient(bootstrap_servers=kafka)
    try:
        assert set(Topics(topic_prefix).all()) <= set(admin.list_topics())
    finally:
        admin.close()

    [incident] = read_topic("incidents", 1)
    assert isinstance(incident, Incident) and incident.kind == "nan" and incident.job == "llm"

    [letter] = read_topic("dead-letter", 1)
    assert isinstance(letter, DeadLetter)
    assert "malformed JSON" in letter.reason
    assert base64.b64decode(letter.original_b64) == b'{"type":"step","ts":'

    log = tmp_path / "decisions.jsonl"
    act = trainguard_proc("act", "--dry-run", "--max-incidents", "1", "--timeout", "120", "--log", str(log))
    out, _ = act.communicate(timeout=150)  # type: ignore[attr-defined]
    assert act.returncode == 0, out  # type: ignore[attr-defined]
    assert "restore the latest checkpoint before step 250" in " ".join(out.split())
    recorded = [json.loads(line) for line in log.read_text().splitlines()]
    assert recorded[0]["plan"][0]["action"] == "restart_from_checkpoint"
    assert recorded[0]["plan"][0]["params"]["step"] == 200

    [decision] = read_topic("decisions", 1)
    assert isinstance(decision, Decision) and decision.dry_run and decision.incident_id == incident.id
    assert worker.poll() is None  # type: ignore[attr-defined]  # the bad message did not crash it

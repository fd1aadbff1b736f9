"""Records keyed to the wrong job's partition, live against the real broker (issue 21).

Job "a" lives in one task, job "b" in the other. For a stretch longer than
the hang threshold a producer keys job a's records with b's key. Before,
b's task learned job a and raised a stale hang for it once the stretch
ended, and a's own task saw a silent gap and raised another. Now the
records are re-keyed to a's task: no incident at all, nothing dead-lettered.
The hang detector runs alone with a 10 s floor so the stretch takes 25 s,
not the minute of the issue (the rule is the same; only the threshold is shorter).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable

import pytest

from trainguard.schemas import Codec
from trainguard.schemas.records import Heartbeat, PhaseChange, TrainingStep
from trainguard.schemas.topics import Topics
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics
from trainguard.streams.worker.tasks import partition_of

Start = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def short_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = [{"type": "hang", "params": {"floor_s": 10.0, "warmup_floor_s": 10.0, "warmup_steps": 3}}]
    monkeypatch.setenv("TRAINGUARD_DETECTORS__INSTANCES", json.dumps(spec))


def _count(kafka: str, topics: Topics, logical: str) -> list[object]:
    consumer = kafka_io.consumer(kafka_io.as_broker(kafka))
    try:
        parts = kafka_io.partitions_for(consumer, topics.name(logical))
        return [Codec().decode(m.value) for m in kafka_io.read_to_end(consumer, parts)]
    finally:
        consumer.close()


def test_a_stretch_of_miskeyed_records_raises_no_hang_in_either_task(
        kafka: str, topic_prefix: str, short_hang: None, trainguard_proc: Start,
        process_output: Callable[..., str]) -> None:
    a, b = "job-a", next(j for j in (f"job-b{i}" for i in range(50)) if partition_of(j, 2) != partition_of("job-a", 2))
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1, configs=topics.configs())
    worker = trainguard_proc("worker")
    producer = kafka_io.producer(kafka_io.as_broker(kafka))
    codec = Codec()
    start, step = time.time(), 0
    while (now := time.time()) < start + 50:
        wrong = start + 12 <= now < start + 37  # 25 s of job a's records keyed with b's key
        for job in (a, b):
            records = [TrainingStep(ts=now, job=job, rank=0, node=f"n-{job}", step=step, loss=2.0),
                       Heartbeat(ts=now, job=job, rank=0, node=f"n-{job}", step=step)]
            key = (b if wrong and job == a else job).encode()
            for r in records:
                producer.send(topics.for_record(r), key=key, value=codec.encode(r))
        producer.flush()
        step += 1
        time.sleep(0.5)
    for job in (a, b):  # both jobs end: their silence from here on is no hang
        end = PhaseChange(ts=time.time(), job=job, phase="stopped", node=f"n-{job}", step=step)
        producer.send(topics.for_record(end), key=job.encode(), value=codec.encode(end))
    producer.flush()
    time.sleep(15)  # past the threshold after the stretch: a stale hang would be out by now
    incidents, letters = _count(kafka, topics, "incidents"), _count(kafka, topics, "dead-letter")
    rerouted = _count(kafka, topics, "node-events")
    assert worker.poll() is None, process_output(worker)
    assert incidents == [] and letters == [], ([(i.job, i.onset - start, i.detected_at - start)  # type: ignore[attr-defined]
                                                for i in incidents], letters, process_output(worker))
    assert len(rerouted) >= 40 and {r.job for r in rerouted} == {a}  # type: ignore[attr-defined]
    producer.close()

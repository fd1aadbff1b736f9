"""The stream core against the real broker: backlog, guards, oversized input, exactly-once across SIGKILL.

Each test runs real `trainguard worker` processes on this test's topics and
reads outputs with read_committed consumers, as the action consumer does.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

from kafka.errors import MessageSizeTooLargeError
from kafka_reads import read_until

from trainguard.schemas import Codec
from trainguard.schemas.records import (
    DeadLetter,
    GpuStats,
    Heartbeat,
    Incident,
    JobTopology,
    NodeGpuSample,
    TrainingStep,
    XidEvent,
)
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics

Start = Callable[..., subprocess.Popen[str]]


def _producer(kafka: str):  # type: ignore[no-untyped-def]
    return kafka_io.producer(kafka_io.as_broker(kafka), max_request_size=32 << 20)


def _send(producer, topics: Topics, *records: object) -> None:  # type: ignore[no-untyped-def]
    codec = Codec()
    for r in records:
        producer.send(topics.for_record(r), key=key_for(r), value=codec.encode(r))  # type: ignore[arg-type]
    producer.flush()


def _caught_up(kafka: str, group: str, topic: str, timeout_s: float = 30.0) -> bool:
    """The group's committed offsets reached the topic's end (the restarted worker did its work)."""
    broker = kafka_io.as_broker(kafka)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        consumer = kafka_io.consumer(broker, group_id=group)  # reads the group's offsets, never joins it
        try:
            parts = kafka_io.partitions_for(consumer, topic)
            ends = consumer.end_offsets(parts)
            committed = {tp: consumer.committed(tp) or 0 for tp in parts}
        finally:
            consumer.close()
        if all(committed[tp] >= ends[tp] for tp in parts):
            return True
        time.sleep(1.0)
    return False


def _steps(job: str, t0: float, n: int, *, nan_at: int | None = None) -> list[TrainingStep]:
    return [TrainingStep(ts=t0 + i, job=job, rank=0, node="n0", step=i, loss="nan" if i == nan_at else 2.0)  # type: ignore[arg-type]
            for i in range(n)]


def test_backlog_oversized_and_future_dated_input_then_sigkill_keeps_one_incident(
        kafka: str, topic_prefix: str, trainguard_proc: Start, process_output: Callable[..., str]) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1, configs=topics.configs())
    producer = _producer(kafka)
    now = time.time()
    # A backlog published before any worker runs: oversized garbage, one record dated a day ahead, a NaN.
    for size in (700_000, (1 << 20) + 1, 5_000_000):
        producer.send(topics.name("gpu"), key=b"n0", value=b"{" + b"x" * (size - 1))
    big = _producer(kafka)  # its own producer: a refused batch is fatal to the producer that sent it
    try:
        big.send(topics.name("gpu"), key=b"n0", value=b"x" * 20_000_000).get(timeout=30)
        raise AssertionError("the broker took a 20 MB message")
    except MessageSizeTooLargeError:
        pass  # the broker's own limit (16 MB) refuses it; nothing for the worker to survive
    finally:
        big.close()
    _send(producer, topics, Heartbeat(ts=now - 100, job="j", rank=0, node="n0"),
          Heartbeat(ts=now + 86400, job="j", rank=0, node="n0"), *_steps("j", now - 99, 30, nan_at=5))
    worker = trainguard_proc("worker")
    letters = read_until(kafka, topics.name("dead-letter"), until=lambda got: len(got) >= 4)
    incidents = read_until(kafka, topics.name("incidents"), until=lambda got: len(got) >= 1)
    assert incidents and [i.kind for i in incidents] == ["nan"], process_output(worker)
    sizes = sorted(d.original_size for d in letters if isinstance(d, DeadLetter) and d.truncated)
    assert sizes == [700_000, (1 << 20) + 1, 5_000_000]
    assert any("future-dated" in d.reason for d in letters)

    # SIGKILL, more of the same NaN episode, restart: the restored state knows the incident is open.
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    _send(producer, topics, *_steps("j", now - 69, 30, nan_at=3))
    again = trainguard_proc("worker")
    read_until(kafka, topics.name("incidents"), until=lambda got: len(got) > 1, timeout_s=15)
    final = read_until(kafka, topics.name("incidents"), until=lambda got: True)
    assert _caught_up(kafka, f"w-{topic_prefix}.detect", topics.name("training")), process_output(again)
    assert [i.id for i in final] == [incidents[0].id], process_output(again)
    producer.close()


def test_a_jobless_daemonset_sample_becomes_an_incident_of_the_nodes_job(
        kafka: str, topic_prefix: str, trainguard_proc: Start, process_output: Callable[..., str]) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1, configs=topics.configs())
    producer = _producer(kafka)
    now = time.time()
    worker = trainguard_proc("worker")
    _send(producer, topics, JobTopology(ts=now, job="llm", world_size=2, rank_nodes={0: "gpu-a", 1: "gpu-b"}))
    time.sleep(2)  # the topology on its own partition first, as a job's launch precedes its faults
    _send(producer, topics, NodeGpuSample(ts=now + 1, node="gpu-b", gpus=[GpuStats(index=0)]),
          NodeGpuSample(ts=now + 2, node="gpu-b", gpus=[GpuStats(index=0)], xids=[XidEvent(gpu=0, code=79, ts=now + 2)]))
    incidents = read_until(kafka, topics.name("incidents"), until=lambda got: len(got) >= 1)
    assert [(i.kind, i.job, i.nodes) for i in incidents if isinstance(i, Incident)] == [("hw_fault", "llm", ["gpu-b"])], \
        process_output(worker)
    producer.close()

"""A burst of 50,000 new jobs against the real broker (issue 21): the worker lives, commits in time, restores.

Before, the commit interval stretched with the snapshot cost until a
transaction outlived its 15 s timeout, the producer was fenced and shutdown
failed with an invalid transaction state transition. Here 50,000 jobs with
long (but valid) names each send a heartbeat; the worker must catch up,
stop cleanly printing the largest snapshot and the longest transaction it
saw (both bounded: the transaction under its budget, the snapshot split
under the message limit), and a second worker must restore that state.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Callable

from trainguard.schemas import Codec
from trainguard.schemas.records import Heartbeat
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics
from trainguard.streams.worker.batch_loop import TXN_BUDGET_S

Start = Callable[..., subprocess.Popen[str]]
JOBS = 50_000


def _caught_up(kafka: str, group: str, topic: str, timeout_s: float) -> bool:
    broker = kafka_io.as_broker(kafka)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        consumer = kafka_io.consumer(broker, group_id=group)
        try:
            parts = kafka_io.partitions_for(consumer, topic)
            ends = consumer.end_offsets(parts)
            done = all((consumer.committed(tp) or 0) >= ends[tp] for tp in parts)
        finally:
            consumer.close()
        if done:
            return True
        time.sleep(2.0)
    return False


def _read(kafka: str, topics: Topics, logical: str) -> list[object]:
    consumer = kafka_io.consumer(kafka_io.as_broker(kafka))
    try:
        parts = kafka_io.partitions_for(consumer, topics.name(logical))
        return [m.value for m in kafka_io.read_to_end(consumer, parts)]
    finally:
        consumer.close()


def test_a_burst_of_new_jobs_commits_in_time_stops_cleanly_and_restores(
        kafka: str, topic_prefix: str, trainguard_proc: Start, process_output: Callable[..., str]) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1, configs=topics.configs())
    producer = kafka_io.producer(kafka_io.as_broker(kafka), linger_ms=50, batch_size=1 << 20)
    codec, now = Codec(), time.time()
    for i in range(JOBS):
        beat = Heartbeat(ts=now - 60 + i * 1e-3, job=f"burst-{i:05d}-" + "j" * 200, rank=0,
                         node=f"node-{i:05d}-" + "n" * 200)
        producer.send(topics.for_record(beat), key=key_for(beat), value=codec.encode(beat))
    producer.flush()
    first = trainguard_proc("worker", "--loglevel", "info")
    group = f"w-{topic_prefix}.detect"
    assert _caught_up(kafka, group, topics.name("training"), timeout_s=300), process_output(first)
    first.send_signal(signal.SIGTERM)
    out = process_output(first)
    figures = re.search(r"snapshots \(([\d.]+) s of CPU\), the largest task snapshot (\d+) bytes, "
                        r"the longest transaction ([\d.]+) s", out)
    assert figures is not None, out
    snapshot_cpu, largest, longest = float(figures.group(1)), int(figures.group(2)), float(figures.group(3))
    assert snapshot_cpu > 0  # the stop line sums every commit's snapshots (bench_pipeline reads it)
    print(f"burst of {JOBS} jobs: largest task snapshot {largest} bytes, longest transaction {longest:.3f} s")
    assert "Traceback" not in out and "InvalidState" not in out and "IllegalState" not in out, out
    assert longest < 15.0, longest  # the transaction timeout; the loop aims at TXN_BUDGET_S
    assert largest > 0 and TXN_BUDGET_S < 15.0
    # a new worker restores that state (split across changelog keys if big) and follows on
    more = Heartbeat(ts=time.time(), job="burst-00001-" + "j" * 200, rank=0, node="node-00001-" + "n" * 200)
    producer.send(topics.for_record(more), key=key_for(more), value=codec.encode(more))
    producer.flush()
    second = trainguard_proc("worker", "--loglevel", "info")
    assert _caught_up(kafka, group, topics.name("training"), timeout_s=120), process_output(second)
    assert second.poll() is None
    second.send_signal(signal.SIGTERM)
    out2 = process_output(second)
    assert "restored from the changelog" in out2 and "started fresh" not in out2, out2
    assert _read(kafka, topics, "incidents") == [] and _read(kafka, topics, "dead-letter") == []
    producer.close()

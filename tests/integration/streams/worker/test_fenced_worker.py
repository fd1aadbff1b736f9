"""A fenced worker, against the real broker: it stops cleanly, and nothing is lost or duplicated (issue 21, item 4).

The transactional id is `<app_id>.detect/<worker.instance>` (batch_loop.py),
so a second worker started with the same instance name is a zombie's
successor: its startup transaction bumps the producer epoch and fences the
first. The first worker's next transaction then fails as fenced; it must
abandon it (never commit, never an invalid state transition on shutdown)
and exit non-zero with the fencing as its crash reason (a supervisor
restarts it), while the second carries on from the last commit. The fence
may first be met in the rebalance listener (the successor's join revokes
partitions): then the loop stops at its next turn (ProducerFatal) instead of
going on as a zombie that holds a task it can never commit. Which of the two
paths a run takes is a race (the loop's in two runs of three here); the
listener path is pinned by tests/unit/streams/worker/test_fenced_producer.py. A third path: aiokafka's
sender dies on the fenced produce response and the await that meets it raises a bare KafkaError;
the worker names it ProducerFatal (chained), pinned there too. Every output is counted by
its identity: each poison message is dead-lettered exactly once (by source
partition and offset), and the hang that follows is raised once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from processes import stop_all

from trainguard.schemas import Codec
from trainguard.schemas.records import DeadLetter, Heartbeat, Incident, TrainingStep
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics

Start = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def workers(kafka: str, topic_prefix: str, tmp_path: Path) -> Iterator[Start]:
    procs: list[subprocess.Popen[bytes]] = []
    spec = [{"type": "hang", "params": {"floor_s": 10.0, "warmup_floor_s": 10.0, "warmup_steps": 3}}]
    env = {**os.environ, "TRAINGUARD_TOPICS__PREFIX": topic_prefix, "TRAINGUARD_TOPICS__PARTITIONS": "2",
           "TRAINGUARD_WORKER__APP_ID": f"w-{topic_prefix}", "TRAINGUARD_WORKER__STATE_DIR": str(tmp_path / "w"),
           "TRAINGUARD_WORKER__INSTANCE": "same", "TRAINGUARD_DETECTORS__INSTANCES": json.dumps(spec),
           "PYTHONUNBUFFERED": "1"}

    def start(name: str, **extra: str) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"{name}.log").open("ab")
        proc = subprocess.Popen([sys.executable, "-m", "trainguard.cli", "worker", "--loglevel", "info"],
                                env={**env, **extra}, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        procs.append(proc)
        return proc

    yield start
    stop_all(procs, timeout_s=20)


def _wait_for(path: Path, text: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in (path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"{text!r} not in {path}:\n{path.read_text() if path.exists() else ''}"
        time.sleep(0.5)


def _read(kafka: str, topics: Topics, logical: str) -> list[object]:
    consumer = kafka_io.consumer(kafka_io.as_broker(kafka))
    try:
        parts = kafka_io.partitions_for(consumer, topics.name(logical))
        return [Codec().decode(m.value) for m in kafka_io.read_to_end(consumer, parts)]
    finally:
        consumer.close()


def test_a_fenced_worker_abandons_its_transaction_and_its_successor_loses_and_duplicates_nothing(
        kafka: str, topic_prefix: str, tmp_path: Path, workers: Start) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1, configs=topics.configs())
    producer, codec = kafka_io.producer(kafka_io.as_broker(kafka)), Codec()
    step, poison, last_step_ts = 0, 0, 0.0

    def feed(seconds: float, *, stepping: bool = True) -> None:
        nonlocal step, poison, last_step_ts
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            now = time.time()
            for rank in (0, 1):
                records = [Heartbeat(ts=now, job="j", rank=rank, node=f"n{rank}", step=step)]
                if stepping:
                    records.append(TrainingStep(ts=now, job="j", rank=rank, node=f"n{rank}", step=step, loss=2.0))
                for r in records:
                    producer.send(topics.for_record(r), key=key_for(r), value=codec.encode(r))
            producer.send(topics.name("training"), key=b"j", value=b"{not a record %d" % poison)
            poison += 1
            producer.flush()
            if stepping:
                step, last_step_ts = step + 1, now
            time.sleep(0.5)

    first = workers("first")
    _wait_for(tmp_path / "first.log", "task 1 started fresh")
    feed(8)
    second = workers("second")  # the same transactional id: its startup fences the first
    feed(12)
    _wait_for(tmp_path / "second.log", "restored from the changelog", timeout_s=60)
    feed(5)
    feed(22, stepping=False)  # the job hangs: steps stop, heartbeats (and poison) go on
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (len(_read(kafka, topics, "dead-letter")) < poison
                                           or not _read(kafka, topics, "incidents")):
        time.sleep(1)
    time.sleep(3)  # a duplicate would be out by now
    producer.close()
    first_log, second_log = (tmp_path / "first.log").read_text(), (tmp_path / "second.log").read_text()
    letters = [d for d in _read(kafka, topics, "dead-letter") if isinstance(d, DeadLetter)]
    where = [(d.partition, d.offset) for d in letters]
    assert len(where) == len(set(where)) == poison, (len(where), len(set(where)), poison, second_log)
    incidents = [i for i in _read(kafka, topics, "incidents") if isinstance(i, Incident)]
    assert [(i.kind, i.job) for i in incidents] == [("hang", "j")], (incidents, second_log)
    assert abs(incidents[0].onset - last_step_ts) <= 1.0, (incidents[0].onset, last_step_ts)
    assert second.poll() is None, second_log
    # The fenced one stops as designed: its loop abandons the transaction, finishes its shutdown
    # ("stopped: ..."), and the crash is the fencing itself (a supervisor restarts it), never an
    # invalid state transition from committing or aborting with a fenced producer.
    assert first.poll() is not None and first.returncode != 0, first_log
    crash = first_log.partition("Crashed reason=")[2][:60]
    assert crash.startswith(("ProducerFenced", "ProducerFatal")) and "stopped: " in first_log, first_log
    assert "invalid state transition" not in first_log.lower(), first_log

"""A takeover with backlogs, two real workers and the real broker (issue 21, item 1).

Two `trainguard worker` processes share four partitions. A healthy job's
steps, heartbeats, GPU and RDMA samples flow live into one task; its owner
is SIGKILLed and records go on being published while it is dead, so the
task's partitions hold backlogs of different sizes (training: 8 records a
tick, gpu: one every 2 ticks, rdma: one every 4). The survivor restores the
task from the changelog and must read the backlogs as backlogs: no hang is
raised for the healthy job (before issue 21 a restored partition carried the
dead process's "caught up" and its last-record wall time, so a partition
with a backlog was set aside as idle and the task's time ran past it). Then
the job really hangs (steps stop, heartbeats go on) and that hang is raised
once, at its last step. The hang detector runs alone with a 10 s floor so
the test takes about a minute.

Both workers run on one host, so the dead process's monotonic readings are
still meaningful here, and one broker answers all of a task's partitions in
one fetch response, so no partition is fetched after another has moved the
time. This test therefore also passes with the restore fix disabled (checked:
watermark.py without PartitionTime.__getstate__/__setstate__ and the reset in
EventClock.assign, 2 runs; also with the job's training records starting only
while the owner was dead, so the restored partition had never had a record).
It is the real-broker regression test of the acceptance criterion (no false
incident, the real hang found once, the survivor alive); the clock-level
difference is shown by tests/unit/streams/worker/test_takeover.py (every order
of first fetches, a new host's clock ahead or behind), which fails on the old
watermark.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from processes import stop_all

from trainguard.schemas import Codec
from trainguard.schemas.records import Heartbeat, Incident, NodeGpuSample, RdmaSample, Record, TrainingStep
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics
from trainguard.streams.worker.tasks import partition_of

Start = Callable[[str], subprocess.Popen[bytes]]
PARTITIONS, RANKS, TICK_S = 4, 4, 0.5


@pytest.fixture
def workers(kafka: str, topic_prefix: str, tmp_path: Path) -> Iterator[Start]:
    procs: list[subprocess.Popen[bytes]] = []
    spec = [{"type": "hang", "params": {"floor_s": 10.0, "warmup_floor_s": 10.0, "warmup_steps": 3}}]
    env = {**os.environ, "TRAINGUARD_TOPICS__PREFIX": topic_prefix, "TRAINGUARD_TOPICS__PARTITIONS": str(PARTITIONS),
           "TRAINGUARD_WORKER__APP_ID": f"w-{topic_prefix}", "TRAINGUARD_WORKER__STATE_DIR": str(tmp_path / "w"),
           "TRAINGUARD_DETECTORS__INSTANCES": json.dumps(spec), "PYTHONUNBUFFERED": "1"}

    def start(name: str) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"{name}.log").open("ab")
        proc = subprocess.Popen([sys.executable, "-m", "trainguard.cli", "worker", "--loglevel", "info"],
                                env={**env, "TRAINGUARD_WORKER__INSTANCE": name}, stdout=log,
                                stderr=subprocess.STDOUT, cwd=tmp_path)
        procs.append(proc)
        return proc

    yield start
    stop_all(procs, timeout_s=20)


def _wait_for(path: Path, text: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in (path.read_text() if path.exists() else ""):
        assert time.monotonic() < deadline, f"{text!r} not in {path}:\n{path.read_text() if path.exists() else ''}"
        time.sleep(0.5)


def _incidents(kafka: str, topics: Topics) -> list[Incident]:
    consumer = kafka_io.consumer(kafka_io.as_broker(kafka))
    try:
        parts = kafka_io.partitions_for(consumer, topics.name("incidents"))
        return [Codec().decode(m.value, Incident) for m in kafka_io.read_to_end(consumer, parts)]
    finally:
        consumer.close()


class _Job:
    """A live job on RANKS hosts: every tick its steps and heartbeats, now and then GPU and RDMA samples."""

    def __init__(self, kafka: str, topics: Topics, name: str) -> None:
        self.producer, self.topics, self.name = kafka_io.producer(kafka_io.as_broker(kafka)), topics, name
        self.codec, self.tick, self.step, self.last_step_ts = Codec(), 0, 0, 0.0

    def run(self, seconds: float, *, stepping: bool = True) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            now, records = time.time(), list[Record]()
            for rank in range(RANKS):
                node = f"{self.name}-n{rank}"
                if stepping:
                    records.append(TrainingStep(ts=now, job=self.name, rank=rank, node=node, step=self.step, loss=2.0))
                records.append(Heartbeat(ts=now, job=self.name, rank=rank, node=node, step=self.step))
                if self.tick % 2 == rank % 2:
                    records.append(NodeGpuSample(ts=now, node=node, job=self.name))
                if self.tick % 4 == rank:
                    records.append(RdmaSample(ts=now, node=node, job=self.name))
            for r in records:
                self.producer.send(self.topics.for_record(r), key=key_for(r), value=self.codec.encode(r))
            self.producer.flush()
            if stepping:
                self.step, self.last_step_ts = self.step + 1, now
            self.tick += 1
            time.sleep(TICK_S)

    def close(self) -> None:
        self.producer.close()


def test_the_survivor_of_a_takeover_with_backlogs_raises_no_false_hang_and_finds_the_real_one(
        kafka: str, topic_prefix: str, tmp_path: Path, workers: Start) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=PARTITIONS, replication=1, configs=topics.configs())
    name, task = "job-h", partition_of("job-h", PARTITIONS)
    first = workers("w1")
    _wait_for(tmp_path / "w1.log", f"task {PARTITIONS - 1} started fresh")
    second = workers("w2")
    _wait_for(tmp_path / "w2.log", "started fresh")  # the group has settled: w2 holds its share
    time.sleep(2)
    owner, survivor = (second, "w1") if f"task {task} " in (tmp_path / "w2.log").read_text() else (first, "w2")
    job = _Job(kafka, topics, name)
    try:
        job.run(15)  # healthy, live, processed by the owner (snapshots committed to the changelog)
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        job.run(15)  # the owner is dead: backlogs build on the task's partitions until its session ends
        _wait_for(tmp_path / f"{survivor}.log", f"task {task} restored from the changelog")
        job.run(10)  # the survivor reads the backlogs and goes on live
        assert _incidents(kafka, topics) == [], "a false incident during the takeover"
        job.run(25, stepping=False)  # the real hang: steps stop, heartbeats go on
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _incidents(kafka, topics):
            time.sleep(1)
        time.sleep(3)  # a duplicate would be out by now
    finally:
        job.close()
    incidents = _incidents(kafka, topics)
    assert [(i.kind, i.job) for i in incidents] == [("hang", name)], (
        [(i.kind, i.job, i.onset - job.last_step_ts) for i in incidents], (tmp_path / f"{survivor}.log").read_text())
    assert abs(incidents[0].onset - job.last_step_ts) <= 1.0, (incidents[0].onset, job.last_step_ts)
    survivor_proc = first if survivor == "w1" else second
    assert survivor_proc.poll() is None, (tmp_path / f"{survivor}.log").read_text()

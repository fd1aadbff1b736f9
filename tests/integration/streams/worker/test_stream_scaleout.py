"""Scale-out and restarts against the real broker: the incidents never depend on how many workers ran.

Recordings come from the simulator (tests/fixtures/scenarios/stream-core.yaml)
and the expected incidents from the backtest of the same recording.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from processes import stop_all

from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.lab.backtest.runner import run_backtest
from trainguard.schemas import Codec
from trainguard.schemas.records import Incident, Record
from trainguard.schemas.topics import Topics
from trainguard.settings import load_settings
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics
from trainguard.streams.recording import read_recording, replay, write_recording

SCENARIO = Path(__file__).parents[3] / "fixtures" / "scenarios" / "stream-core.yaml"
Start = Callable[..., subprocess.Popen[bytes]]


def _simulate(tmp_path: Path, name: str, seed: int) -> list[Record]:
    spec = yaml.safe_load(SCENARIO.read_text())
    spec["job"]["name"], spec["job"]["node_prefix"], spec["seed"] = name, f"{name}-node-", seed  # own machines
    path, out = tmp_path / f"{name}.yaml", tmp_path / f"{name}.jsonl"
    path.write_text(yaml.safe_dump(spec))
    subprocess.run([sys.executable, "-m", "trainguard.cli", "simulate", "--scenario", str(path), "--out", str(out)],
                   check=True, capture_output=True)
    return [e.value for e in read_recording(out)]


def _expected(tmp_path: Path, events: list[Record]) -> list[tuple[str, tuple[str, ...], str, float]]:
    path = tmp_path / "all.jsonl"
    write_recording(path, events)
    rows = run_backtest(path, DetectionPipeline.from_settings(load_settings().detectors)).incidents
    return sorted((r["kind"], tuple(sorted(r["nodes"])), r["job"], r["onset"]) for r in rows)


def _live(kafka: str, topics: Topics, group: str, last_ts: float, want_n: int = 0) -> list[Incident]:
    """The incidents raised for the replay, once its input is committed and its held tail released.

    Committed input is not the end: the tail of the replay can still be held in the event-time
    buffer (snapshotted, so its offsets commit) until its partitions are released as idle, and a
    fault found late in event time (a slowdown must persist 120 s first) comes out only then.
    """
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _caught_up(kafka, group, topics):
        time.sleep(2)
    time.sleep(3)  # the last commit interval
    settle = time.monotonic() + 60
    live = _incidents(kafka, topics, last_ts)
    while len(live) < want_n and time.monotonic() < settle:
        time.sleep(2)
        live = _incidents(kafka, topics, last_ts)
    return live


def _incidents(kafka: str, topics: Topics, last_ts: float) -> list[Incident]:
    consumer = kafka_io.consumer(kafka_io.as_broker(kafka))
    try:
        parts = kafka_io.partitions_for(consumer, topics.name("incidents"))
        found = [Codec().decode(m.value, Incident) for m in kafka_io.read_to_end(consumer, parts)]
    finally:
        consumer.close()
    return [i for i in found if i.onset <= last_ts]


def _caught_up(kafka: str, group: str, topics: Topics) -> bool:
    consumer = kafka_io.consumer(kafka_io.as_broker(kafka), group_id=group)
    try:
        parts = [tp for n in ("training", "gpu", "node-events") for tp in kafka_io.partitions_for(consumer, topics.name(n))]
        ends = consumer.end_offsets(parts)
        return all((consumer.committed(tp) or 0) >= ends[tp] for tp in parts)
    finally:
        consumer.close()


def _same(live: list[Incident], want: list[tuple[str, tuple[str, ...], str, float]], tol_s: float) -> None:
    assert len({i.id for i in live}) == len(live), f"duplicate incidents: {live}"
    got = sorted((i.kind, tuple(sorted(i.nodes)), i.job, i.onset) for i in live)
    assert [g[:3] for g in got] == [w[:3] for w in want], f"{got}\n!=\n{want}"
    assert all(abs(g[3] - w[3]) <= tol_s for g, w in zip(got, want, strict=True)), (got, want)


@pytest.fixture
def workers(kafka: str, topic_prefix: str, tmp_path: Path) -> Iterator[Start]:
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, "TRAINGUARD_TOPICS__PREFIX": topic_prefix, "TRAINGUARD_TOPICS__PARTITIONS": "4",
           "TRAINGUARD_WORKER__APP_ID": f"w-{topic_prefix}", "TRAINGUARD_WORKER__STATE_DIR": str(tmp_path / "w"),
           "PYTHONUNBUFFERED": "1"}

    def start(name: str, **extra: str) -> subprocess.Popen[bytes]:
        log = (tmp_path / f"{name}.log").open("ab")
        proc = subprocess.Popen([sys.executable, "-m", "trainguard.cli", "worker", "--loglevel", "info"],
                                env={**env, "TRAINGUARD_WORKER__INSTANCE": name, **extra}, stdout=log,
                                stderr=subprocess.STDOUT, cwd=tmp_path)
        procs.append(proc)
        return proc

    yield start
    stop_all(procs, timeout_s=20)


def test_a_third_worker_joining_mid_replay_changes_no_incident(
        kafka: str, topic_prefix: str, tmp_path: Path, workers: Start) -> None:
    events = sorted(_simulate(tmp_path, "job-a", 7) + _simulate(tmp_path, "job-b", 8), key=lambda r: r.ts)
    want = _expected(tmp_path, events)
    assert {w[2] for w in want} == {"job-a", "job-b"}, want
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=4, replication=1, configs=topics.configs())
    first, rest = tmp_path / "first.jsonl", tmp_path / "rest.jsonl"
    write_recording(first, events[: len(events) // 3])
    write_recording(rest, events[len(events) // 3:])
    workers("w1")
    workers("w2")
    replay(first, broker=kafka, topics=topics)
    time.sleep(8)
    workers("w3")  # joins: the group rebalances, tasks move with their changelog state
    replay(rest, broker=kafka, topics=topics)
    _same(_live(kafka, topics, f"w-{topic_prefix}.detect", events[-1].ts, len(want)), want, tol_s=30.0)


def test_a_hang_open_when_the_worker_is_killed_is_found_after_the_restart(
        kafka: str, topic_prefix: str, tmp_path: Path, workers: Start) -> None:
    events = _simulate(tmp_path, "job-h", 7)
    hang = next(w for w in _expected(tmp_path, events) if w[0] == "hang")
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=4, replication=1, configs=topics.configs())
    split = next(i for i, e in enumerate(events) if e.ts > hang[3] + 20)  # in the silence, before it is a hang
    before, after = tmp_path / "before.jsonl", tmp_path / "after.jsonl"
    write_recording(before, events[:split])
    write_recording(after, events[split:])
    quiet = {"TRAINGUARD_WORKER__IDLE_AFTER_S": "600"}  # no silence-driven time: only records move it
    worker = workers("w1", **quiet)
    replay(before, broker=kafka, topics=topics)
    group = f"w-{topic_prefix}.detect"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _caught_up(kafka, group, topics):
        time.sleep(1)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    workers("w1", **quiet)
    replay(after, broker=kafka, topics=topics)
    live = _live(kafka, topics, group, events[-1].ts)
    hangs = [i for i in live if i.kind == "hang"]
    assert len(hangs) == 1 and abs(hangs[0].onset - hang[3]) <= 1.0, (hangs, hang)
    assert "restored from the changelog" in (tmp_path / "w1.log").read_text()

"""Replay a recording into the real local Kafka broker, record it back, compare.

Uses the real broker (fixture `kafka`) and this test's own topic prefix. The
recording comes from the simulator, so it mixes topics and keys (jobs on the
training topic, nodes on gpu/rdma) the way a real fleet does.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.lab.telemetry_sim import run_scenario
from trainguard.lab.telemetry_sim.scenario import parse_scenario
from trainguard.schemas.topics import Topics
from trainguard.streams.admin import ensure_topics
from trainguard.streams.recording import DeliveryError, Event, read_recording, record, replay, write_recording

pytestmark = pytest.mark.broker


def small_recording(path: Path) -> list[Event]:
    scenario = parse_scenario({"name": "rr", "seed": 3, "duration_s": 240,
                               "job": {"nodes": 3, "gpus_per_node": 2, "tp": 2, "step_time_s": 4.0},
                               "rates": {"heartbeat_s": 20, "gpu_sample_s": 10, "rdma_sample_s": 10},
                               "background": {"log_lines_per_node_h": 60},
                               "faults": [{"kind": "hang", "at_s": 60, "duration_s": 90}]})
    events, _ = run_scenario(scenario)
    write_recording(path, events)
    return list(read_recording(path))


def per_key(events: list[Event]) -> dict[tuple[str, str], list[object]]:
    out: dict[tuple[str, str], list[object]] = defaultdict(list)
    for e in events:
        out[(e.topic, e.key)].append(e.value)
    return out


def test_replay_then_record_gives_back_every_event_in_per_key_order(kafka: str, topic_prefix: str,
                                                                    tmp_path: Path) -> None:
    original = small_recording(tmp_path / "in.jsonl")
    # several ordered streams: node records that name their job share its key (co-partitioning)
    assert len({e.topic for e in original}) >= 4 and len({(e.topic, e.key) for e in original}) >= 4
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1)
    stats = replay(tmp_path / "in.jsonl", broker=kafka, topics=topics, speed=None)
    assert stats.sent == len(original)
    got = record(tmp_path / "out.jsonl", broker=kafka, topics=topics, timeout_s=90, max_events=len(original))
    assert (got.written, got.rejected) == (len(original), 0)
    back = list(read_recording(tmp_path / "out.jsonl"))
    assert per_key(back) == per_key(original)


def test_replay_fails_loudly_when_the_broker_refuses_records(kafka: str, topic_prefix: str, tmp_path: Path) -> None:
    """A record the broker refuses is not counted as sent: the producer's flush() returns either way."""
    original = small_recording(tmp_path / "in.jsonl")
    topics = Topics(topic_prefix)
    tiny = {topics.name("gpu"): {"max.message.bytes": "64"}}  # every GPU sample is larger: MESSAGE_TOO_LARGE
    ensure_topics(kafka, topics.all(), partitions=1, replication=1, configs=tiny)
    gpu = sum(1 for e in original if e.topic == "gpu")
    assert gpu > 0
    with pytest.raises(DeliveryError, match=rf"of {len(original)} records were not acknowledged") as err:
        replay(tmp_path / "in.jsonl", broker=kafka, topics=topics, speed=None)
    assert err.value.failed >= gpu  # an idempotent producer aborts what it still held after a fatal error


def test_replay_paces_by_event_time(kafka: str, topic_prefix: str, tmp_path: Path) -> None:
    """With --speed X, the replay waits (event-time gap / X) between events (clock injected)."""
    original = small_recording(tmp_path / "in.jsonl")
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1)
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    replay(tmp_path / "in.jsonl", broker=kafka, topics=topics, speed=50.0, sleep=sleep, clock=lambda: now[0])
    assert now[0] == pytest.approx((original[-1].ts - original[0].ts) / 50.0, rel=1e-6)


def test_replay_and_record_commands(kafka: str, topic_prefix: str, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    original = small_recording(tmp_path / "in.jsonl")
    monkeypatch.setenv("TRAINGUARD_TOPICS__PREFIX", topic_prefix)
    monkeypatch.setenv("TRAINGUARD_TOPICS__PARTITIONS", "2")
    bad = tmp_path / "bad.jsonl"
    bad.write_text((tmp_path / "in.jsonl").read_text() + "{oops\n")
    assert main(["replay", str(bad)]) == 1
    assert f"bad.jsonl:{len(original) + 1}: malformed JSON" in capsys.readouterr().err
    assert main(["replay", str(bad), "--skip-bad", "--speed", "max"]) == 0
    assert "skipped 1 bad lines" in capsys.readouterr().out
    out = tmp_path / "out.jsonl"
    assert main(["record", "--out", str(out), "--max-events", str(len(original)), "--timeout", "90"]) == 0
    assert per_key(list(read_recording(out))) == per_key(original)
    with pytest.raises(SystemExit):
        main(["replay", str(bad), "--speed", "-3"])


def test_record_refuses_topics_that_do_not_exist(kafka: str, topic_prefix: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRAINGUARD_TOPICS__PREFIX", f"{topic_prefix}missing.")
    assert main(["record", "--out", str(tmp_path / "r.jsonl"), "--timeout", "5"]) == 2
    assert "none of the topics" in capsys.readouterr().err
    assert not (tmp_path / "r.jsonl").exists()
    assert main(["record", "--out", str(tmp_path / "r.jsonl")]) == 2  # neither --timeout nor --max-events

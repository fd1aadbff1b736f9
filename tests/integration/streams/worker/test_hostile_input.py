"""Hostile input against the real broker and a real worker (issue 21).

The absurd values a fleet was seen to send (negative and huge steps and
ranks, timestamps of 0 and -1e308, NUL / right-to-left override / ESC in
names, an empty job on `training`, thirty heartbeats with million-character
node names) are all dead-lettered with their reason, the worker stays up,
and a real hang sent around them (with a negative and a stale step inside
it) is raised once, at its true onset.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable

from kafka_reads import read_until

from trainguard.schemas import Codec
from trainguard.schemas.records import DeadLetter, Heartbeat, Incident, TrainingStep
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics

Start = Callable[..., subprocess.Popen[str]]


def _absurd(now: float) -> list[dict[str, object]]:
    """The list of issue 21, all about job "j" (so a wrong acceptance would reach its hang detector)."""
    step = {"type": "step", "job": "j", "rank": 0, "node": "n0", "loss": 2.0}
    beat = {"type": "heartbeat", "job": "j", "rank": 0}
    out: list[dict[str, object]] = [
        {**step, "ts": now - 230, "step": -1},
        {**step, "ts": now - 229, "step": 10**18},
        {**step, "ts": now - 228, "step": 31, "rank": -2},
        {**step, "ts": now - 227, "step": 31, "rank": 10**15},
        {**step, "ts": 0, "step": 32},
        {**step, "ts": -1e308, "step": 33},
        {**step, "ts": now - 226, "step": 34, "job": "j\x00"},
        {**step, "ts": now - 225, "step": 35, "job": "j\u202e"},
        {**step, "ts": now - 224, "step": 36, "job": "\x1b[31mj"},
        {**step, "ts": now - 223, "step": 37, "job": ""},
    ]
    out += [{**beat, "ts": now - 222 + i * 0.01, "node": f"{i:02d}" + "n" * 1_000_000} for i in range(30)]
    return out


def test_absurd_values_are_dead_lettered_and_a_hang_around_them_is_raised_at_its_onset(
        kafka: str, topic_prefix: str, trainguard_proc: Start, process_output: Callable[..., str]) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1, configs=topics.configs())
    producer = kafka_io.producer(kafka_io.as_broker(kafka), max_request_size=32 << 20)
    codec, now = Codec(), time.time()
    steps = [TrainingStep(ts=now - 300 + i, job="j", rank=0, node="n0", step=i, loss=2.0) for i in range(31)]
    stale = TrainingStep(ts=now - 240, job="j", rank=0, node="n0", step=10, loss=2.0)  # below the rank's last
    beats = [Heartbeat(ts=now - 268 + 5 * i, job="j", rank=0, node="n0", step=30) for i in range(25)]
    for record in [*steps, stale, *beats[:8]]:
        producer.send(topics.for_record(record), key=key_for(record), value=codec.encode(record))
    absurd = _absurd(now)
    for payload in absurd:  # keyed by the job, so each lands in the hung job's own partition
        producer.send(topics.name("training"), key=b"j", value=json.dumps(payload).encode())
    for record in beats[8:]:
        producer.send(topics.for_record(record), key=key_for(record), value=codec.encode(record))
    producer.flush()
    worker = trainguard_proc("worker")
    letters = read_until(kafka, topics.name("dead-letter"), until=lambda got: len(got) >= len(absurd))
    incidents = read_until(kafka, topics.name("incidents"), until=lambda got: len(got) >= 1)
    time.sleep(3)  # anything wrongly raised after the first incident has had time to arrive
    incidents = read_until(kafka, topics.name("incidents"), until=lambda got: True)
    assert worker.poll() is None, process_output(worker)
    reasons = [d.reason for d in letters if isinstance(d, DeadLetter)]
    assert len(reasons) == len(absurd), (reasons, process_output(worker))
    for field in ("step", "rank", "ts", "job", "node"):
        assert any(f"$.{field}`" in r for r in reasons), (field, reasons)
    assert sum("length <= 256" in r for r in reasons) == 30
    assert sum("control or bidirectional" in r for r in reasons) == 3
    hangs = [i for i in incidents if isinstance(i, Incident)]
    assert [(i.kind, i.job) for i in hangs] == [("hang", "j")], process_output(worker)
    assert abs(hangs[0].onset - (now - 270)) < 1.0, hangs[0]  # the last real step, not a stale or absurd one
    producer.close()

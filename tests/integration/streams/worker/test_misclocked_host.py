"""A host whose clock is far ahead (50 minutes), against the real broker and a real worker (issue 21).

The host stamps its messages with its own clock (Kafka's CreateTime comes
from the producer), so the broker timestamp does not give it away. It
sends a step, a heartbeat and a log line far ahead, several times, into
the partitions of a healthy job that then really hangs. Before, two of
its records confirmed each other and the task's time jumped (a day, in the issue) (a real
hang missed, false ones raised). Now its records are dead-lettered as
held and dead-lettered as future-dated, and the real hang is raised once, at
its onset, when the good hosts' time says so.

In this backlog form the test also passes on the clock before issue 21's
change (its good records contradicted the bad ones in time); the clock-level
difference is shown by tests/unit/streams/worker/test_event_clock_hosts.py.
It stays as the real-broker regression test of the acceptance criterion.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from kafka_reads import read_until

from trainguard.schemas import Codec
from trainguard.schemas.records import DeadLetter, Heartbeat, Incident, LogEvent, Record, TrainingStep
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics

Start = Callable[..., subprocess.Popen[str]]
AHEAD = 3000.0  # 50 minutes: Kafka >= 3.6 refuses a CreateTime over an hour ahead itself


def test_a_host_far_ahead_moves_no_time_and_the_real_hang_is_raised(
        kafka: str, topic_prefix: str, trainguard_proc: Start, process_output: Callable[..., str]) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1, configs=topics.configs())
    producer = kafka_io.producer(kafka_io.as_broker(kafka))
    codec, base = Codec(), time.time() - 300
    timeline: list[tuple[float, Record]] = []
    for i in range(30):  # a healthy job on two good hosts, a step every 2 s, then it hangs
        for rank in (0, 1):
            timeline.append((base + 2 * i, TrainingStep(ts=base + 2 * i + rank * 1e-3, job="j", rank=rank,
                                                        node=f"n{rank}", step=i, loss=2.0)))
    for i in range(40):  # heartbeats go on: the job is alive
        for rank in (0, 1):
            timeline.append((base + 5 * i, Heartbeat(ts=base + 5 * i, job="j", rank=rank, node=f"n{rank}")))
    bad = 0
    for i in range(5):  # the bad host, far ahead, several kinds of record, stamped by its own clock
        t = base + 20 + 2 * i + AHEAD
        for record in (TrainingStep(ts=t, job="j", rank=2, node="nbad", step=10 + i, loss=2.0),
                       Heartbeat(ts=t + 0.1, job="j", rank=2, node="nbad"),
                       LogEvent(ts=t + 0.2, node="nbad", level="INFO", source="python", message="ok", job="j")):
            timeline.append((t - AHEAD, record))
            bad += 1
    for _, record in sorted(timeline, key=lambda item: item[0]):
        producer.send(topics.for_record(record), key=key_for(record), value=codec.encode(record),
                      timestamp_ms=int(record.ts * 1000))
    producer.flush()
    worker = trainguard_proc("worker")
    incidents = read_until(kafka, topics.name("incidents"), until=lambda got: len(got) >= 1)
    letters = read_until(kafka, topics.name("dead-letter"), until=lambda got: len(got) >= bad, timeout_s=30)
    time.sleep(3)
    incidents = read_until(kafka, topics.name("incidents"), until=lambda got: True)
    assert worker.poll() is None, process_output(worker)
    hangs = [(i.kind, i.job, round(i.onset - base, 1)) for i in incidents if isinstance(i, Incident)]
    assert hangs == [("hang", "j", 58.0)], (hangs, process_output(worker))  # the last real step, once
    # ... and detected when the good hosts' time says so (about base + 102 s), not when the bad
    # host's clock would have moved the task's time (base + 3020 s and later).
    assert all(i.detected_at - base < 200 for i in incidents), [i.detected_at - base for i in incidents]
    # The bad host's records are held, and dead-lettered as future-dated once enough present records
    # of other hosts follow them; none is ever processed. (Its log lines, alone on their partition at
    # the end of the backlog, may still be held when the test reads.)
    reasons = [d.reason for d in letters if isinstance(d, DeadLetter)]
    assert len(reasons) <= bad and all("future-dated" in r for r in reasons), reasons
    producer.close()

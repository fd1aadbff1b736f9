"""A host whose clock runs an hour behind gets one `clock_skew` finding, against the real broker and worker.

Issue 21 item 2: each host's clock offset is estimated online from its
records against the message timestamps and the other hosts. Here the
records are published by one producer on a machine with a good clock (a
central scraper; CreateTime is then a fair clock), three good hosts and one
whose own clock is an hour behind. "Behind", because Kafka itself refuses a
CreateTime more than an hour ahead. The worker must name the bad host, with
its offset, once; say nothing of the good ones; and open no incident.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

from kafka_reads import read_until

from trainguard.schemas import Codec
from trainguard.schemas.records import Anomaly, Heartbeat, Incident, LogEvent, Record
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics

Start = Callable[..., subprocess.Popen[str]]
HOUR = 3600.0


def _skews(got: list[Record]) -> list[Anomaly]:
    return [a for a in got if isinstance(a, Anomaly) and a.kind == "clock_skew"]


def test_a_host_an_hour_behind_is_named_once_with_its_offset_and_no_incident(
        kafka: str, topic_prefix: str, trainguard_proc: Start, process_output: Callable[..., str]) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=2, replication=1, configs=topics.configs())
    producer = kafka_io.producer(kafka_io.as_broker(kafka))
    codec, base = Codec(), time.time() - 90
    skews = {"n0": 0.0, "n1": 0.4, "n2": -0.3, "nlate": -HOUR}
    for s in range(90):  # a beat and a log line of every host each second, stamped with the true time
        t = base + s
        for rank, (node, skew) in enumerate(skews.items()):
            for record in (Heartbeat(ts=t + skew, job="j", rank=rank, node=node, step=s),
                           LogEvent(ts=t + skew + 0.1, node=node, level="INFO", source="python", message="ok",
                                    job="j")):
                producer.send(topics.for_record(record), key=key_for(record), value=codec.encode(record),
                              timestamp_ms=int((t + 0.2) * 1000))
    producer.flush()
    worker = trainguard_proc("worker")
    found = _skews(read_until(kafka, topics.name("anomalies"), until=lambda got: len(_skews(got)) >= 1))
    time.sleep(5)  # nothing more may follow: one finding, not a flood
    found = _skews(read_until(kafka, topics.name("anomalies"), until=lambda got: True))
    incidents = [i for i in read_until(kafka, topics.name("incidents"), until=lambda got: True) if isinstance(i, Incident)]
    assert worker.poll() is None, process_output(worker)
    assert [(a.nodes, a.evidence["state"]) for a in found] == [(["nlate"], "skewed")], (found, process_output(worker))
    assert abs(found[0].evidence["offset_s"] + HOUR) < 10.0, found[0].evidence
    assert base <= found[0].ts <= base + 91  # dated by the message timestamps, not by the late clock
    assert incidents == [], incidents
    producer.close()

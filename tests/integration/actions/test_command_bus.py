"""The local executor's transport reads results from every partition, even right after topic creation."""

from __future__ import annotations

from kafka import KafkaProducer

from schemas import ActionResult, Codec
from schemas.topics import Topics
from streams.admin import ensure_topics
from streams.command_bus import KafkaCommandBus


def test_results_keyed_to_any_partition_are_collected(kafka: str, topic_prefix: str) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=4, replication=1)
    bus = KafkaCommandBus(broker=kafka, topics=topics)  # built at once, as `trainguard act` does
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    jobs = [f"job-{i}" for i in range(12)]  # keys that spread over all four partitions
    for job in jobs:
        result = ActionResult(ts=1.0, command_id=f"c-{job}", action="stop", status="ok", job=job, node="n0")
        producer.send(topics.name("action-results"), key=job.encode(), value=Codec().encode(result))
    producer.flush()
    try:
        for job in jobs:
            got = bus.collect(f"c-{job}", nodes=["n0"], timeout_s=30)
            assert [r.command_id for r in got] == [f"c-{job}"]
    finally:
        producer.close()
        bus.close()

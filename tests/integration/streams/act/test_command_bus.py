"""The local executor's transport: reads results from every partition, signs what it sends, trusts only
results signed by the node they name (real broker)."""

from __future__ import annotations

import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from kafka import KafkaConsumer, KafkaProducer

from trainguard.schemas import ActionCommand, ActionResult, Codec
from trainguard.schemas.signing import KeyRing, Signer
from trainguard.schemas.topics import Topics
from trainguard.streams.act.command_bus import KafkaCommandBus
from trainguard.streams.admin import ensure_topics

ACT = Signer("act", Ed25519PrivateKey.generate())
N0 = Signer("n0", Ed25519PrivateKey.generate())
NODES = KeyRing({"n0": N0.private_key.public_key()})


def _send_result(producer: KafkaProducer, topics: Topics, result: ActionResult, signer: Signer | None) -> None:
    value = Codec().encode(result)
    producer.send(topics.name("action-results"), key=result.job.encode(), value=value,
                  headers=signer.headers(value) if signer else None)


def test_results_keyed_to_any_partition_are_collected(kafka: str, topic_prefix: str) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=4, replication=1)
    bus = KafkaCommandBus(broker=kafka, topics=topics, signer=ACT, node_keys=NODES, ttl_s=60)  # as `act` does
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    jobs = [f"job-{i}" for i in range(12)]  # keys that spread over all four partitions
    for job in jobs:
        _send_result(producer, topics, ActionResult(ts=1.0, command_id=f"c-{job}", action="stop", status="ok",
                                                    job=job, node="n0"), N0)
    producer.flush()
    try:
        for job in jobs:
            got = bus.collect(f"c-{job}", nodes=["n0"], timeout_s=30)
            assert [r.command_id for r in got] == [f"c-{job}"]
    finally:
        producer.close()
        bus.close()


def test_commands_are_signed_with_expiry_and_forged_results_are_rejected(kafka: str, topic_prefix: str) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=1, replication=1)
    rejected: list[tuple[str, str]] = []
    bus = KafkaCommandBus(broker=kafka, topics=topics, signer=ACT, node_keys=NODES, ttl_s=60,
                          on_reject=lambda r, why: rejected.append((r.node if r else "", why)))
    consumer = KafkaConsumer(topics.name("actions"), bootstrap_servers=kafka, auto_offset_reset="earliest",
                             consumer_timeout_ms=20000)
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    try:
        sent = bus.send(ActionCommand(ts=0.0, id="c-1", action="stop", job="j", nodes=["n0"]))
        assert sent.ts > time.time() - 30 and sent.expires == sent.ts + 60
        message = next(iter(consumer))
        ring = KeyRing({"act": ACT.private_key.public_key()})
        assert ring.check(message.value, message.headers) == ("act", "")  # over the exact bytes on the wire
        assert Codec().decode(message.value, ActionCommand) == sent
        forged = ActionResult(ts=1.0, command_id="c-1", action="stop", status="failed", job="j", node="n0")
        _send_result(producer, topics, forged, None)  # unsigned
        _send_result(producer, topics, forged, Signer("n0", Ed25519PrivateKey.generate()))  # not n0's key
        _send_result(producer, topics, ActionResult(ts=1.0, command_id="c-1", action="stop", status="ok", job="j",
                                                    node="n0"), N0)
        producer.flush()
        got = bus.collect("c-1", nodes=["n0"], timeout_s=30)
        assert [r.status for r in got] == ["ok"]
        assert [n for n, _ in rejected] == ["n0", "n0"] and "unsigned" in rejected[0][1]
    finally:
        consumer.close()
        producer.close()
        bus.close()


def test_a_non_targets_signed_result_is_dropped_and_reported(kafka: str, topic_prefix: str) -> None:
    """Issue 20: n1, correctly signed by n1, answers a command addressed only to n0; it never counts."""
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=1, replication=1)
    n1 = Signer("n1", Ed25519PrivateKey.generate())
    keys = KeyRing({"n0": N0.private_key.public_key(), "n1": n1.private_key.public_key()})
    rejected: list[tuple[str, str]] = []
    bus = KafkaCommandBus(broker=kafka, topics=topics, signer=ACT, node_keys=keys, ttl_s=60,
                          on_reject=lambda r, why: rejected.append((r.node if r else "", why)))
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    try:
        bus.send(ActionCommand(ts=0.0, id="c-2", action="stop", job="j", nodes=["n0"]))
        _send_result(producer, topics, ActionResult(ts=1.0, command_id="c-2", action="stop", status="failed",
                                                    job="j", node="n1", details={"culprits": ["n0"]}), n1)
        _send_result(producer, topics, ActionResult(ts=1.0, command_id="c-2", action="stop", status="ok", job="j",
                                                    node="n0"), N0)
        producer.flush()
        got = bus.collect("c-2", nodes=["n0"], timeout_s=30)
        assert [(r.node, r.status) for r in got] == [("n0", "ok")]
        assert [n for n, _ in rejected] == ["n1"] and "not a target" in rejected[0][1]
    finally:
        producer.close()
        bus.close()

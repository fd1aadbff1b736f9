"""Every flavour of Kafka client trainguard uses, over TLS and SASL, against a real secured broker.

The settings are written as a user writes the `broker:` section (a dict
here, YAML in a file); secrets only as files or environment variables.
Each variant publishes through trainguard's own `Publisher`, reads back with
a kafka-python consumer, and runs an aiokafka producer/consumer and the
admin client, all built by `schemas.kafka_config.client_options`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from kafka import KafkaConsumer
from kafka.errors import KafkaError
from secure_broker import Authority, SecureBroker, unsecured_jwt

from trainguard.collectors.publisher import Publisher
from trainguard.schemas.codec import Codec
from trainguard.schemas.kafka_config import BrokerSettings, client_options
from trainguard.schemas.records import Heartbeat
from trainguard.schemas.topics import Topics
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics

pytestmark = pytest.mark.broker


def _variants(b: SecureBroker, authority: Authority, tmp: Path) -> dict[str, dict[str, Any]]:
    cert, key = b.client_cert("collector-mtls", authority)
    token = tmp / "token"
    token.write_text(unsecured_jwt("admin"))
    return {
        "scram-sha-512": {"bootstrap": b.sasl_ssl, "security_protocol": "SASL_SSL", "tls": {"ca_file": b.ca_file},
                          "sasl": {"mechanism": "SCRAM-SHA-512", "username": "admin",
                                   "password": {"file": b.password_file("admin")}}},
        "scram-sha-256": {"bootstrap": b.sasl_ssl, "security_protocol": "SASL_SSL", "tls": {"ca_file": b.ca_file},
                          "sasl": {"mechanism": "SCRAM-SHA-256", "username": "scram256",
                                   "password": {"env": "TG_TEST_SCRAM256_PASSWORD"}}},
        "plain": {"bootstrap": b.sasl_ssl, "security_protocol": "SASL_SSL", "tls": {"ca_file": b.ca_file},
                  "sasl": {"mechanism": "PLAIN", "username": "plainuser",
                           "password": {"file": b.password_file("plainuser")}}},
        "oauthbearer": {"bootstrap": b.sasl_ssl, "security_protocol": "SASL_SSL", "tls": {"ca_file": b.ca_file},
                        "sasl": {"mechanism": "OAUTHBEARER", "oauth": {"token": {"file": token}}}},
        "mutual-tls": {"bootstrap": b.ssl, "security_protocol": "SSL",
                       "tls": {"ca_file": b.ca_file, "cert_file": cert, "key_file": key}},
    }


@pytest.mark.parametrize("variant", ["scram-sha-512", "scram-sha-256", "plain", "oauthbearer", "mutual-tls"])
def test_every_client_flavour_works_over_tls_and_sasl(secure_broker: SecureBroker, authority: Authority,
                                                      tmp_path: Path, variant: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_TEST_SCRAM256_PASSWORD", "scram256-secret")
    broker = BrokerSettings.model_validate(_variants(secure_broker, authority, tmp_path)[variant])
    topics = Topics(f"s{uuid.uuid4().hex[:8]}.")
    # Topics are created by a super user here; the ACL test shows what each principal may do.
    ensure_topics(secure_broker.internal, topics.all(), partitions=1, replication=1)
    kafka = client_options(broker, "kafka-python")
    assert not any(secret in repr(broker) + str(broker.model_dump()) for secret in ("-secret", "eyJ"))  # never held

    publisher = Publisher(servers=broker.servers, topics=topics, spool_dir=tmp_path / "spool", client_options=kafka)
    for i in range(5):
        publisher.publish(Heartbeat(ts=1.0 + i, job="j", rank=i, node="n0"))
    assert publisher.close(timeout_s=60) and len(publisher.spool) == 0

    consumer = KafkaConsumer(topics.name("training"), bootstrap_servers=broker.servers, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=20000, **kafka)
    got = []
    for message in consumer:
        got.append(Codec().decode(message.value))
        if len(got) == 5:
            break
    consumer.close()
    assert sorted(r.rank for r in got) == [0, 1, 2, 3, 4]

    assert asyncio.run(_aiokafka_round_trip(broker, topics.name("logs"))) == b"over aiokafka"


async def _aiokafka_round_trip(broker: BrokerSettings, topic: str) -> bytes:
    opts = client_options(broker, "aiokafka")
    producer = AIOKafkaProducer(bootstrap_servers=broker.servers, **opts)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"over aiokafka")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.servers, auto_offset_reset="earliest", **opts)
    await consumer.start()
    try:
        message = await asyncio.wait_for(consumer.getone(), timeout=30)
        return bytes(message.value)
    finally:
        await consumer.stop()


def test_the_server_certificate_is_verified(secure_broker: SecureBroker, tmp_path: Path) -> None:
    """A broker whose certificate was not signed by the configured CA is refused, SASL or not."""
    stranger = tmp_path / "other-ca.pem"
    stranger.write_bytes(Authority("someone-else").pem())
    broker = BrokerSettings.model_validate({
        "bootstrap": secure_broker.sasl_ssl, "security_protocol": "SASL_SSL", "tls": {"ca_file": stranger},
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "admin",
                 "password": {"file": secure_broker.password_file("admin")}}})
    with pytest.raises(KafkaError):
        KafkaConsumer(bootstrap_servers=broker.servers, request_timeout_ms=5000, api_version_auto_timeout_ms=5000,
                      **client_options(broker, "kafka-python")).topics()


def test_a_wrong_password_is_refused(secure_broker: SecureBroker, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password")
    broker = BrokerSettings.model_validate({
        "bootstrap": secure_broker.sasl_ssl, "security_protocol": "SASL_SSL", "tls": {"ca_file": secure_broker.ca_file},
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "admin", "password": {"file": wrong}}})
    with pytest.raises(KafkaError):
        KafkaConsumer(bootstrap_servers=broker.servers, request_timeout_ms=5000,
                      **client_options(broker, "kafka-python")).topics()


def test_record_and_replay_over_sasl_ssl(secure_broker: SecureBroker, tmp_path: Path) -> None:
    """`trainguard replay` and `trainguard record` use the same secured clients."""
    from trainguard.streams.recording import RecordingWriter, read_recording, record, replay

    broker = BrokerSettings.model_validate({
        "bootstrap": secure_broker.sasl_ssl, "security_protocol": "SASL_SSL", "tls": {"ca_file": secure_broker.ca_file},
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "admin",
                 "password": {"file": secure_broker.password_file("admin")}}})
    topics = Topics(f"r{uuid.uuid4().hex[:8]}.")
    ensure_topics(broker, topics.all(), partitions=1, replication=1)
    source = tmp_path / "in.jsonl"
    with open(source, "wb") as f:
        writer = RecordingWriter(f)
        for i in range(3):
            writer.write(Heartbeat(ts=time.time() + i, job="j", rank=i, node="n0"), key="j")
    assert replay(source, broker=broker, topics=topics).sent == 3  # raises DeliveryError unless acknowledged
    consumer = kafka_io.consumer(broker)
    try:  # the records are on the broker: if `record` misses them, the fault is on its side
        parts = kafka_io.partitions_for(consumer, topics.name("training"))
        assert sum(consumer.end_offsets(parts).values()) == 3
    finally:
        consumer.close()
    out = tmp_path / "out.jsonl"
    stats = record(out, broker=broker, topics=topics, logical=["training"], max_events=3, timeout_s=60)
    assert stats.written == 3
    assert sorted(e.value.rank for e in read_recording(out)) == [0, 1, 2]

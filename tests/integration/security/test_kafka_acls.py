"""The recommended ACLs (`trainguard.cli.kafka_acls`) on a real broker with KRaft's StandardAuthorizer.

The ACLs are created exactly as recommended, through the admin client over
SASL_SSL; then each role's SCRAM principal tries what it should and should
not be able to do, with trainguard's own clients where one exists:
a collector writes telemetry but not commands; an agent reads only the
actions topic and writes results; the worker writes incidents but not
commands; act (the positive control) writes commands, and alone writes its
state topic (act-state) through its transactional id; only the console
writes the operator topic, and act reads it.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, TopicAuthorizationFailedError
from secure_broker import SecureBroker

from trainguard.actions.journal import Journal
from trainguard.collectors.agent.command_feed import KafkaCommandFeed
from trainguard.schemas.codec import Codec
from trainguard.schemas.kafka_config import BrokerSettings, client_options
from trainguard.schemas.records import ActionCommand, ActionResult, Heartbeat, Incident, OperatorCommand
from trainguard.schemas.topics import Topics
from trainguard.streams.act.state_mirror import StateMirror
from trainguard.streams.admin import ensure_topics

pytestmark = pytest.mark.broker
PRINCIPALS = {"collector": "collector", "agent": "agent-n1", "worker": "worker", "act": "act", "console": "console",
              "alerts": "alerts"}


def _broker(b: SecureBroker, user: str) -> BrokerSettings:
    return BrokerSettings.model_validate({
        "bootstrap": b.sasl_ssl, "security_protocol": "SASL_SSL", "tls": {"ca_file": b.ca_file},
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": user, "password": {"file": b.password_file(user)}}})


def _options(b: SecureBroker, user: str) -> dict[str, Any]:
    return client_options(_broker(b, user), "kafka-python")


def _write(b: SecureBroker, user: str, topic: str, value: bytes) -> str:
    """'ok', or the name of the error a write by `user` to `topic` ends in."""
    producer = KafkaProducer(bootstrap_servers=b.sasl_ssl, max_block_ms=10000, request_timeout_ms=10000,
                             retries=0, **_options(b, user))
    try:
        producer.send(topic, value).get(timeout=15)
        return "ok"
    except KafkaError as exc:
        return type(exc).__name__
    finally:
        producer.close(timeout=5)


def test_each_principal_may_do_only_its_job(secure_broker: SecureBroker, tmp_path: Path) -> None:
    topics = Topics(f"a{uuid.uuid4().hex[:8]}.")
    ensure_topics(secure_broker.internal, topics.all(), partitions=1, replication=1)
    secure_broker.grant_recommended(topics.prefix, PRINCIPALS)
    codec, now = Codec(), time.time()
    command = codec.encode(ActionCommand(ts=now, expires=now + 60, id="c-1", action="stop", job="j"))
    denied = TopicAuthorizationFailedError.__name__

    beat = codec.encode(Heartbeat(ts=now, job="j", rank=0, node="n1"))
    assert _write(secure_broker, "collector", topics.name("training"), beat) == "ok"
    assert _write(secure_broker, "collector", topics.name("actions"), command) == denied
    assert _write(secure_broker, "collector", topics.name("incidents"), beat) == denied

    incident = codec.encode(Incident(ts=now, id="i", kind="hang", job="j", onset=now, detected_at=now))
    assert _write(secure_broker, "worker", topics.name("incidents"), incident) == "ok"
    assert _write(secure_broker, "worker", topics.name("actions"), command) == denied

    assert _write(secure_broker, "act", topics.name("actions"), command) == "ok"  # the one who may
    assert _write(secure_broker, "worker", topics.name("act-state"), b"{}") == denied  # act's state: act's alone
    state = StateMirror(broker=_broker(secure_broker, "act"), topic=topics.name("act-state"),
                        journal=Journal(tmp_path / "journal.sqlite"), transactional_id="trainguard-actions.state")
    state.start()  # init_transactions and the claim: the transactional id and the topic are granted
    state.journal.put_state("rails", {"evicted": {"j": ["n1"]}})
    assert state.wait_durable(timeout_s=30) and state.read().items["state/rails"].value == {"evicted": {"j": ["n1"]}}
    state.close()

    operator = codec.encode(OperatorCommand(ts=now, id="op-1", verb="reset_breaker", operator="alice",
                                            expires=now + 60))
    assert _write(secure_broker, "console", topics.name("operator"), operator) == "ok"  # the one who may
    for other in ("collector", "agent-n1", "worker", "act"):
        assert _write(secure_broker, other, topics.name("operator"), operator) == denied, other
    assert _write(secure_broker, "console", topics.name("actions"), command) == denied
    reader = KafkaConsumer(bootstrap_servers=secure_broker.sasl_ssl, group_id=None, **_options(secure_broker, "act"))
    try:  # act reads the operator topic (with no group, as a check; act's own group is granted too)
        reader.assign([TopicPartition(topics.name("operator"), 0)])
        reader.seek_to_beginning()
        got_ops: list[Any] = []
        deadline = time.monotonic() + 30
        while not got_ops and time.monotonic() < deadline:
            got_ops = [m for batch in reader.poll(timeout_ms=500).values() for m in batch]
        assert [m.value for m in got_ops] == [operator]
    finally:
        reader.close()

    result = codec.encode(ActionResult(ts=now, command_id="c-1", action="stop", status="ok", node="n1"))
    assert _write(secure_broker, "agent-n1", topics.name("action-results"), result) == "ok"
    assert _write(secure_broker, "agent-n1", topics.name("actions"), command) == denied
    feed = KafkaCommandFeed(servers=secure_broker.sasl_ssl, topic=topics.name("actions"),
                            group_id="trainguard-agent-j-n1", client_options=_options(secure_broker, "agent-n1"))
    try:
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:
            got = feed.poll(1.0)
        assert [r.command.id for r in got] == ["c-1"]  # the agent reads the actions topic with its own group
    finally:
        feed.close()
    # Telemetry is there (the collector wrote a heartbeat to training), yet the agent may not read it.
    spy = KafkaConsumer(bootstrap_servers=secure_broker.sasl_ssl, group_id=None, **_options(secure_broker, "agent-n1"))
    try:
        spy.assign([TopicPartition(topics.name("training"), 0)])
        spy.seek_to_beginning()
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in range(20):
                assert not spy.poll(timeout_ms=500)
    finally:
        spy.close()

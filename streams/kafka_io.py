"""The one module in streams/ that builds Kafka clients and does shared Kafka I/O.

Every client is built from the `BrokerSettings` object, never from a bare
"host:port" string, so connection options that every client must carry
(TLS, mutual TLS, SASL PLAIN/SCRAM/OAUTHBEARER, pass-through properties:
`schemas.kafka_config.client_options`) are added in one function here,
`client_options`, and reach the aiokafka consumer and producer
(transactional or not), the kafka-python consumer/producer and the admin
client alike.

Shared helpers live here too: the partitions of a topic (waiting for
metadata instead of guessing), reading partitions up to the end offsets
they had when reading began (`read_to_end`, sync and async), and sending a
batch of messages and waiting for every acknowledgement (`send_all`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as SyncTopicPartition

from trainguard.schemas.kafka_config import BrokerSettings, Flavour
from trainguard.schemas.kafka_config import client_options as security_options

# The broker accepts messages up to its message.max.bytes (16 MB for the local
# broker); producers default to 1 MiB. A worker that republishes what it read
# (dead letters) must be able to send what the broker accepts.
MAX_REQUEST_BYTES = 16 << 20


class Outgoing(Protocol):
    """What `send_all` sends: a topic, a key and a value."""

    @property
    def topic(self) -> str: ...
    @property
    def key(self) -> bytes: ...
    @property
    def value(self) -> bytes: ...
    @property
    def headers(self) -> list[tuple[str, bytes]] | None: ...


def as_broker(broker: BrokerSettings | str) -> BrokerSettings:
    """`BrokerSettings` as given, or built from a "host:port" list (tests, tools)."""
    return BrokerSettings(bootstrap=broker) if isinstance(broker, str) else broker


def client_options(broker: BrokerSettings, flavour: Flavour = "kafka-python") -> dict[str, Any]:
    """Options every Kafka client of `flavour` shares: where the cluster is and how to reach it securely."""
    return {"bootstrap_servers": broker.servers, **security_options(broker, flavour)}


# ------------------------------------------------------------------ clients


def aio_consumer(broker: BrokerSettings, *topics: str, group_id: str | None = None,
                 read_committed: bool = True, **options: Any) -> AIOKafkaConsumer:
    """An asyncio consumer; reads only committed transactional output by default."""
    config: dict[str, Any] = {"enable_auto_commit": False, "auto_offset_reset": "earliest",
                              "isolation_level": "read_committed" if read_committed else "read_uncommitted"}
    config.update(options)
    return AIOKafkaConsumer(*topics, group_id=group_id, **client_options(broker, "aiokafka"), **config)


def aio_producer(broker: BrokerSettings, *, transactional_id: str | None = None, **options: Any) -> AIOKafkaProducer:
    """An asyncio producer: acks from all replicas, idempotent, sized to the broker's limit.

    With `transactional_id` it is a transactional producer: outputs, changelog
    snapshots and consumed offsets commit or abort together, and a restarted
    instance with the same id fences the old one.
    """
    config: dict[str, Any] = {"acks": "all", "linger_ms": 5, "max_request_size": MAX_REQUEST_BYTES,
                              "enable_idempotence": True}
    if transactional_id is not None:
        # A killed worker's open transaction blocks its group's offsets until aborted; a restart
        # fences it at once, this bounds the wait when no worker comes back.
        config.update(transactional_id=transactional_id, transaction_timeout_ms=15000)
    config.update(options)
    return AIOKafkaProducer(**client_options(broker, "aiokafka"), **config)


def consumer(broker: BrokerSettings, *topics: str, **options: Any) -> KafkaConsumer:
    """A blocking consumer (tools and tests): no auto commit, committed data only."""
    config: dict[str, Any] = {"enable_auto_commit": False, "isolation_level": "read_committed"}
    config.update(options)
    return KafkaConsumer(*topics, **client_options(broker), **config)


def producer(broker: BrokerSettings, **options: Any) -> KafkaProducer:
    """A blocking producer (tools and tests): acks from all replicas."""
    config: dict[str, Any] = {"acks": "all", "linger_ms": 5, "max_request_size": MAX_REQUEST_BYTES}
    config.update(options)
    return KafkaProducer(**client_options(broker), **config)


def admin(broker: BrokerSettings, client_id: str = "trainguard-admin", **options: Any) -> KafkaAdminClient:
    """An admin client (topic creation, group inspection, the reachability check)."""
    return KafkaAdminClient(client_id=client_id, **client_options(broker), **options)


# ------------------------------------------------------------------ reading


def partitions_for(client: KafkaConsumer, topic: str, timeout_s: float = 30.0) -> list[SyncTopicPartition]:
    """Every partition of `topic`, waiting for metadata (guessing {0} would miss data)."""
    deadline = time.monotonic() + timeout_s
    while True:
        client.topics()  # refreshes the cluster metadata
        found = client.partitions_for_topic(topic)
        if found:
            return [SyncTopicPartition(topic, p) for p in sorted(found)]
        if time.monotonic() >= deadline:
            raise LookupError(f"topic {topic} has no partitions (was it created?)")
        time.sleep(0.2)


def read_to_end(client: KafkaConsumer, parts: Sequence[SyncTopicPartition], *, from_beginning: bool = True,
                poll_ms: int = 200) -> Iterator[Any]:
    """Yield every message of `parts` up to the end offsets they have now.

    The ends are read once, before reading starts, so a busy topic still
    ends; messages produced later are left for the caller's live loop.
    """
    if not parts:
        return
    client.assign(list(parts))
    if from_beginning:
        client.seek_to_beginning(*parts)
    ends = client.end_offsets(list(parts))
    while any(client.position(tp) < ends[tp] for tp in parts):
        for messages in client.poll(timeout_ms=poll_ms).values():
            yield from messages


async def aio_partitions_for(client: AIOKafkaConsumer, topic: str) -> list[AioTopicPartition]:
    """Every partition of `topic` from fresh cluster metadata (the consumer's own view
    only covers topics it follows)."""
    cluster = await client._client.fetch_all_metadata()  # noqa: SLF001 - aiokafka exposes no other way
    return [AioTopicPartition(topic, p) for p in sorted(cluster.partitions_for_topic(topic) or ())]


async def aio_read_to_end(client: AIOKafkaConsumer, parts: Iterable[AioTopicPartition]) -> AsyncIterator[Any]:
    """`read_to_end` for an assigned asyncio consumer (changelog restore), from the beginning."""
    parts = list(parts)
    if not parts:
        return
    await client.seek_to_beginning(*parts)
    ends = await client.end_offsets(parts)
    pending = {tp for tp in parts if ends[tp] > 0}
    while pending:
        fetched = await client.getmany(*pending, timeout_ms=200)
        for messages in fetched.values():
            for message in messages:
                yield message
        pending = {tp for tp in pending if await client.position(tp) < ends[tp]}


# ------------------------------------------------------------------ writing


async def send_all(client: AIOKafkaProducer, messages: Iterable[Outgoing]) -> None:
    """Send every message (with its headers: signatures) and wait until the broker acknowledged all of them."""
    acks = [await client.send(m.topic, m.value, key=m.key, headers=m.headers) for m in messages]
    if acks:
        await asyncio.gather(*acks)

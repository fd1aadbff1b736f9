"""Create the pipeline's topics up front, with the configured layout."""

from __future__ import annotations

import time

from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from trainguard.schemas.kafka_config import BrokerSettings
from trainguard.schemas.topics import Topics
from trainguard.streams import kafka_io
from trainguard.streams.settings import KafkaConfig


class BrokerUnreachable(ConnectionError):
    """No broker answered (or it refused us) within the configured wait; the message names the address."""


def require_broker(settings: KafkaConfig) -> None:
    """Return once the broker answers; raise `BrokerUnreachable` after `broker.connect_timeout_s`.

    Commands call this first so an unreachable or misconfigured cluster is one
    clear line within a bounded wait, not a client timeout 30 s later.
    """
    broker = settings.broker
    deadline = time.monotonic() + broker.connect_timeout_s
    while True:
        left_ms = max(1000, int((deadline - time.monotonic()) * 1000))
        try:
            admin = kafka_io.admin(broker, "trainguard-check", request_timeout_ms=left_ms,
                                   bootstrap_timeout_ms=left_ms)
        except KafkaError as exc:
            if time.monotonic() >= deadline:
                raise BrokerUnreachable(f"broker {broker.servers} unreachable after {broker.connect_timeout_s:g}s "
                                        f"({type(exc).__name__}; check broker.bootstrap and its security "
                                        f"settings, or raise broker.connect_timeout_s)") from None
            time.sleep(0.5)
            continue
        admin.close()
        return


def ensure_topics(broker: BrokerSettings | str, names: list[str], *, partitions: int, replication: int,
                  configs: dict[str, dict[str, str]] | None = None,
                  partitions_of: dict[str, int] | None = None) -> list[str]:
    """Create the topics that do not exist yet; return the ones created.

    `configs` maps a topic name to its topic-level settings (e.g. the
    changelog's `cleanup.policy=compact`); `partitions_of` overrides `partitions`
    for some topics (act-state has one partition: its records are totally ordered).
    """
    admin = kafka_io.admin(kafka_io.as_broker(broker))
    try:
        existing = set(admin.list_topics())
        missing = [n for n in names if n not in existing]
        if missing:
            try:
                admin.create_topics(
                    [NewTopic(n, num_partitions=(partitions_of or {}).get(n, partitions),
                              replication_factor=replication, topic_configs=(configs or {}).get(n, {}))
                     for n in missing]
                )
            except TopicAlreadyExistsError:
                pass  # another process won the race; that is fine
        return missing
    finally:
        admin.close()


def ensure_configured_topics(settings: KafkaConfig, names: list[str] | None = None) -> list[str]:
    """`ensure_topics` with the configured servers, layout and (by default) every topic of the prefix."""
    topics = Topics(settings.topics.prefix)
    return ensure_topics(settings.broker, names or topics.all(), partitions=settings.topics.partitions,
                         replication=settings.topics.replication, configs=topics.configs(),
                         partitions_of=topics.partitions(settings.topics.partitions))

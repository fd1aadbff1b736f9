"""Create the pipeline's topics up front, with the configured layout."""

from __future__ import annotations

from typing import Any

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from schemas.kafka_config import client_options
from schemas.topics import Topics
from streams.settings import KafkaConfig


def ensure_topics(servers: str, names: list[str], *, partitions: int, replication: int,
                  client_options: dict[str, Any] | None = None) -> list[str]:
    """Create the topics that do not exist yet; return the ones created."""
    admin = KafkaAdminClient(bootstrap_servers=servers, client_id="trainguard-admin", **(client_options or {}))
    try:
        existing = set(admin.list_topics())
        missing = [n for n in names if n not in existing]
        if missing:
            try:
                admin.create_topics(
                    [NewTopic(n, num_partitions=partitions, replication_factor=replication) for n in missing]
                )
            except TopicAlreadyExistsError:
                pass  # another process won the race; that is fine
        return missing
    finally:
        admin.close()


def ensure_configured_topics(settings: KafkaConfig, names: list[str] | None = None) -> list[str]:
    """`ensure_topics` with the configured servers, layout and (by default) every topic of the prefix."""
    return ensure_topics(settings.broker.servers, names or Topics(settings.topics.prefix).all(),
                         partitions=settings.topics.partitions, replication=settings.topics.replication,
                         client_options=client_options(settings.broker, "kafka-python"))

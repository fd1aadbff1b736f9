"""Create the pipeline's topics up front, with the configured layout."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from schemas.topics import Topics
from streams import kafka_io

if TYPE_CHECKING:
    from trainguard.settings import BrokerSettings, Settings


def ensure_topics(broker: BrokerSettings | str, names: list[str], *, partitions: int, replication: int,
                  configs: dict[str, dict[str, str]] | None = None) -> list[str]:
    """Create the topics that do not exist yet; return the ones created.

    `configs` maps a topic name to its topic-level settings (e.g. the
    changelog's `cleanup.policy=compact`).
    """
    admin = kafka_io.admin(kafka_io.as_broker(broker))
    try:
        existing = set(admin.list_topics())
        missing = [n for n in names if n not in existing]
        if missing:
            try:
                admin.create_topics(
                    [NewTopic(n, num_partitions=partitions, replication_factor=replication,
                              topic_configs=(configs or {}).get(n, {})) for n in missing]
                )
            except TopicAlreadyExistsError:
                pass  # another process won the race; that is fine
        return missing
    finally:
        admin.close()


def ensure_configured_topics(settings: Settings, names: list[str] | None = None) -> list[str]:
    """`ensure_topics` with the configured servers, layout and (by default) every topic of the prefix."""
    topics = Topics(settings.topics.prefix)
    return ensure_topics(settings.broker, names or topics.all(), partitions=settings.topics.partitions,
                         replication=settings.topics.replication, configs=topics.configs())

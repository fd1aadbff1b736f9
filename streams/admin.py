"""Create the pipeline's topics up front, with the configured layout."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from schemas.topics import Topics

if TYPE_CHECKING:
    from trainguard.settings import Settings


def ensure_topics(servers: str, names: list[str], *, partitions: int, replication: int) -> list[str]:
    """Create the topics that do not exist yet; return the ones created."""
    admin = KafkaAdminClient(bootstrap_servers=servers, client_id="trainguard-admin")
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


def ensure_configured_topics(settings: Settings, names: list[str] | None = None) -> list[str]:
    """`ensure_topics` with the configured servers, layout and (by default) every topic of the prefix."""
    return ensure_topics(settings.broker.servers, names or Topics(settings.topics.prefix).all(),
                         partitions=settings.topics.partitions, replication=settings.topics.replication)

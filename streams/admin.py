"""Create the pipeline's topics up front, with the configured layout."""

from __future__ import annotations

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError


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

"""Topic names and message keys: where each record type travels.

Training events of a job (steps, heartbeats, phases, topology,
stacks) share one topic keyed by job, so one partition holds them in the
order the job produced them; the hang detector relies on a phase change
arriving before the silence it explains. Checkpoint announcements have a
topic of their own (keyed by job) so the action consumer can follow them
without reading every step. Hardware samples are keyed by node.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.schemas.records import Record

# logical topic -> record tags it carries
TOPIC_RECORDS: dict[str, tuple[str, ...]] = {
    "training": ("step", "heartbeat", "phase", "topology", "stack", "attempt_key"),
    "checkpoints": ("checkpoint",),
    "gpu": ("gpu_sample",),
    "rdma": ("rdma_sample",),
    "logs": ("log", "node_condition"),
    "custom": ("custom",),
    "anomalies": ("anomaly",),
    "incidents": ("incident",),
    "decisions": ("decision",),
    "actions": ("action_command",),
    "action-results": ("action_result",),
    "audit": ("audit",),
    "operator": ("operator_command",),
    "dead-letter": ("dead_letter",),
}
TOPIC_OF_TAG: dict[str, str] = {tag: topic for topic, tags in TOPIC_RECORDS.items() for tag in tags}
# The worker's own topics. `node-events` is the repartition topic: node records sent without
# a job, re-keyed by their node's job so they meet the job's training events on one partition.
# `node-jobs` (compacted, node -> job) and `worker-state` (compacted detector snapshots) hold
# no records. `act-state` (compacted, one partition: a total order) mirrors act's journal
# (actions.state_items), so a restarted act on any machine knows what the old one knew.
# A record keyed to the wrong job's partition is re-keyed through it too, whatever its type.
INTERNAL_RECORDS: dict[str, tuple[str, ...]] = {"node-events": ("gpu_sample", "rdma_sample", "log", "node_condition",
                                                                  "custom", "step", "heartbeat", "phase", "topology",
                                                                  "stack", "checkpoint", "attempt_key")}
STATE_TOPICS: tuple[str, ...] = ("node-events", "node-jobs", "worker-state", "act-state")
TOPIC_CONFIGS: dict[str, dict[str, str]] = {"worker-state": {"cleanup.policy": "compact"},
                                            "node-jobs": {"cleanup.policy": "compact"},
                                            "act-state": {"cleanup.policy": "compact"}}
TOPIC_PARTITIONS: dict[str, int] = {"act-state": 1}  # else `topics.partitions`
# Node records: keyed by their job when they carry one (co-partitioned with the job's training
# events); a DaemonSet agent's jobless ones by node, and the worker repartitions them.
NODE_TOPICS: tuple[str, ...] = ("gpu", "rdma", "logs", "custom")
INPUT_TOPICS: tuple[str, ...] = ("training", "checkpoints", "gpu", "rdma", "logs", "custom")


@dataclass(frozen=True)
class Topics:
    """Physical topic names under a configurable prefix.

    >>> Topics("tg.").name("training")
    'tg.training'
    """

    prefix: str = "tg."

    def name(self, logical: str) -> str:
        """The physical name of a logical topic."""
        if logical not in TOPIC_RECORDS and logical not in STATE_TOPICS:
            raise KeyError(f"unknown topic {logical!r}; known: {', '.join((*TOPIC_RECORDS, *STATE_TOPICS))}")
        return self.prefix + logical

    def for_record(self, record: Record) -> str:
        """The physical topic a record is published on."""
        return self.prefix + TOPIC_OF_TAG[tag_of(record)]

    def all(self) -> list[str]:
        """Every physical topic name."""
        return [self.prefix + t for t in (*TOPIC_RECORDS, *STATE_TOPICS)]

    def configs(self) -> dict[str, dict[str, str]]:
        """Topic-level settings by physical name (the changelog is compacted)."""
        return {self.prefix + t: c for t, c in TOPIC_CONFIGS.items()}

    def partitions(self, default: int) -> dict[str, int]:
        """Partition counts by physical name: `default` unless a topic needs its own (act-state: 1)."""
        return {name: TOPIC_PARTITIONS.get(self.logical(name), default) for name in self.all()}

    def logical(self, physical: str) -> str:
        """Inverse of `name`: strip the prefix."""
        return physical[len(self.prefix):] if physical.startswith(self.prefix) else physical


def tag_of(record: Record) -> str:
    """The `type` tag of a record instance."""
    return str(type(record).__struct_config__.tag)


def key_for(record: Record) -> bytes:
    """The Kafka key: the job whenever the record names one, else the node.

    All of a job's evidence (steps, heartbeats, its nodes' GPU, RDMA and log
    records) lands on one partition number of every input topic, so one
    worker sees all of it (co-partitioning). A record with no job is keyed
    by its node, in order per node; the worker re-keys it by the node's job.
    """
    job = getattr(record, "job", "")
    if job or TOPIC_OF_TAG[tag_of(record)] in ("training", "checkpoints"):
        return job.encode()
    return str(getattr(record, "node", "")).encode()

"""The worker's unit of state: one task per partition number, and the fleet-wide node->job table.

Every input topic has the same number of partitions and every record that
names a job is keyed by it, so partition *p* of training, checkpoints,
gpu, rdma, logs and node-events together hold all the evidence of the jobs
that hash to *p*. That set is a *task* (the Kafka Streams term): its own
`DetectionPipeline` and `EventClock`, snapshotted under its own key on the
changelog, restored by whichever worker is assigned *p*. The group uses
the range assignor, which gives one member the same partition numbers of
every topic, so a task is never split between workers.

`NodeJobTable` is the small global table a task needs to route a jobless
node record to its job's task: each task publishes the node->job pairs it
learns to the compacted `node-jobs` topic, and every worker reads all of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafka.partitioner.default import murmur2

from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas import node_jobs
from trainguard.schemas.signing import Signer
from trainguard.schemas.topics import Topics
from trainguard.streams import kafka_io
from trainguard.streams.worker.event_buffer import EventBuffer
from trainguard.streams.worker.processor import MessageProcessor, ProcessorStats, Routing
from trainguard.streams.worker.skew import ClockSkewEstimator
from trainguard.streams.worker.snapshot import Snapshot, assemble, owner_of
from trainguard.streams.worker.snapshot import load as load_snapshot
from trainguard.streams.worker.watermark import EventClock

if TYPE_CHECKING:
    from trainguard.schemas.kafka_config import BrokerSettings

log = logging.getLogger(__name__)


def partition_of(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for `key` (murmur2, as both clients do)."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


@dataclass
class Task:
    """One partition number's detectors and event clock."""

    number: int
    processor: MessageProcessor
    clock: EventClock[Any]
    dirty: bool = False

    def key(self, group: str) -> bytes:
        return task_key(group, self.number)


def task_key(group: str, number: int) -> bytes:
    """The changelog key of a task's snapshot."""
    return f"{group}/task-{number}".encode()


@dataclass
class TaskFactory:
    """Builds tasks, fresh or from their last committed snapshot."""

    topics: Topics
    partitions: int
    new_pipeline: Callable[[], DetectionPipeline]
    new_clock: Callable[[], EventClock[Any]]
    table: NodeJobTable
    stats: ProcessorStats = field(default_factory=ProcessorStats)
    signer: Signer | None = None  # signs incidents where Kafka ACLs cannot keep others from writing them
    new_skew: Callable[[], ClockSkewEstimator | None] = lambda: None  # each task's host clock estimates

    def build(self, number: int, snapshot: Snapshot | None = None) -> Task:
        routing = Routing(task=number, job_of=self.table.job_of,
                          task_of=lambda job: partition_of(job, self.partitions))
        pipeline = snapshot.pipeline if snapshot is not None else self.new_pipeline()
        clock = self.new_clock()
        for tp, part in (snapshot.parts if snapshot is not None else {}).items():
            clock.assign(tp, part)
        processor = MessageProcessor(pipeline, self.topics, stats=self.stats, routing=routing, signer=self.signer,
                                     skew=self._skew(snapshot))
        if snapshot is not None:
            processor.buffer = EventBuffer(snapshot.buffer)
        return Task(number, processor, clock)

    def _skew(self, snapshot: Snapshot | None) -> ClockSkewEstimator | None:
        """A fresh estimator, or the snapshot's (its verdicts were committed with it) under today's bound."""
        fresh = self.new_skew()
        restored = snapshot.skew if snapshot is not None else None
        if fresh is None or restored is None:
            return fresh
        restored.bound_s, restored.max_hosts = fresh.bound_s, fresh.max_hosts  # today's bounds, not the snapshot's
        return restored


async def read_snapshots(broker: BrokerSettings, topics: Topics, keys: Iterable[bytes]) -> dict[bytes, Snapshot]:
    """The newest committed snapshot under each of `keys` (compaction keeps this read short)."""
    wanted, blobs = set(keys), {}
    reader = kafka_io.aio_consumer(broker)
    await reader.start()
    try:
        parts = await kafka_io.aio_partitions_for(reader, topics.name("worker-state"))
        reader.assign(parts)
        async for message in kafka_io.aio_read_to_end(reader, parts):
            if message.key is not None and owner_of(message.key) in wanted:
                blobs[message.key] = message.value
    finally:
        await reader.stop()
    out = {}
    for key in wanted:
        blob = assemble(key, blobs)
        snap = load_snapshot(blob) if blob else None
        if snap is not None:
            out[key] = snap
    return out


class NodeJobTable:
    """node -> job for the whole fleet, kept current from the compacted `node-jobs` topic."""

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}

    def job_of(self, node: str) -> str:
        return node_jobs.job_of(self.jobs, node)

    async def follow(self, broker: BrokerSettings, topics: Topics, stopping: asyncio.Event) -> None:
        """Read every partition of `node-jobs` from the start, then keep following it."""
        reader = kafka_io.aio_consumer(broker)
        await reader.start()
        try:
            parts = await kafka_io.aio_partitions_for(reader, topics.name("node-jobs"))
            reader.assign(parts)
            await reader.seek_to_beginning(*parts)
            while not stopping.is_set():
                for messages in (await reader.getmany(timeout_ms=500)).values():
                    for m in messages:
                        if m.key:
                            self.jobs[m.key.decode()] = (m.value or b"").decode()
        finally:
            await reader.stop()

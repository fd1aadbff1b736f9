"""The worker's batch loop: whole fetches in, guarded event time, exactly-once out.

Faust hands every message through its conductor, a channel queue, stream
processors and an ack, several awaits and tasks per message; measured here
that capped a worker at a few thousand events/s while `MessageProcessor`
alone handles tens of thousands. So the worker's Faust app runs this loop
as a task: aiokafka (Faust's own driver) fetches up to `max_records`
messages at once and the processor handles them synchronously.

Exactly-once (`exactly_once`, the default): the outputs of the fetches of
one `commit_interval_s`, a snapshot of the detector state after them and
their input offsets are written in ONE Kafka transaction (so snapshots are
rate-limited to one per interval, and state and offsets always match). A SIGKILL before the commit aborts all of it (the restarted
worker fences the old transactional id, restores the last committed
snapshot and re-reads from the matching offsets); after the commit, all of
it stands. Downstream consumers read committed only. Without it, outputs are
acknowledged before offsets are committed (at-least-once, no snapshots).

Event time comes from `streams.watermark.EventClock`: the minimum over the
assigned partitions, idle partitions set aside, wall-clock time only while
every partition is caught up and the broker answers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor

from schemas.topics import INPUT_TOPICS, Topics
from streams import kafka_io, state
from streams.metrics import WorkerMetrics
from streams.processor import MessageProcessor, OutMessage
from streams.watermark import EventClock

if TYPE_CHECKING:
    from schemas.kafka_config import BrokerSettings

log = logging.getLogger(__name__)
Fetched = dict[TopicPartition, list[ConsumerRecord[Any, Any]]]


class BatchLoop:
    """Consume the input topics in batches, detect, publish, commit."""

    def __init__(
        self,
        *,
        broker: BrokerSettings,
        topics: Topics,
        processor: MessageProcessor,
        group_id: str,
        clock: EventClock[Any] | None = None,
        metrics: WorkerMetrics | None = None,
        max_records: int = 5000,
        poll_timeout_s: float = 0.05,
        lag_interval_s: float = 5.0,
        commit_interval_s: float = 1.0,
        exactly_once: bool = True,
        instance: str = "worker",
    ) -> None:
        self.broker = broker
        self.topics = topics
        self.processor = processor
        self.group_id = group_id
        self.clock: EventClock[Any] = clock or EventClock()
        self.metrics = metrics
        self.max_records = max_records
        self.poll_timeout_s = poll_timeout_s
        self.lag_interval_s = lag_interval_s
        self.commit_interval_s = commit_interval_s
        self.exactly_once = exactly_once
        self.instance = instance
        self.ready = False  # assigned and state restored (/readyz)
        self.snapshots = 0
        self.snapshot_bytes = 0
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()
        self._offsets: dict[TopicPartition, int] = {}  # next offset to commit, per partition
        self._dirty = False
        self._polls: dict[TopicPartition, tuple[int | None, float]] = {}

    def stop(self) -> None:
        """Ask the loop to finish its current batch and return."""
        self._stopping.set()

    @property
    def state_key(self) -> bytes:
        return f"{self.group_id}/{self.instance}".encode()

    async def run(self) -> None:
        """Run until `stop()`."""
        consumer = kafka_io.aio_consumer(self.broker, group_id=self.group_id, max_partition_fetch_bytes=8 << 20,
                                         fetch_max_bytes=64 << 20, partition_assignment_strategy=(RangePartitionAssignor,))
        txn_id = f"{self.group_id}/{self.instance}" if self.exactly_once else None
        producer = kafka_io.aio_producer(self.broker, transactional_id=txn_id)
        await producer.start()
        await consumer.start()
        try:
            if self.exactly_once:
                # Fence a killed predecessor now: its open transaction (outputs, snapshot, offsets) is
                # aborted, so our group's offsets and the changelog are stable before we read them.
                await producer.begin_transaction()
                await producer.commit_transaction()
                await self._restore()
            consumer.subscribe([self.topics.name(t) for t in INPUT_TOPICS], listener=_Listener(self, producer))
            await self._loop(consumer, producer)
        finally:
            try:
                async with self._lock:
                    await self._flush(consumer, producer, final=True)
            finally:
                await consumer.stop()
                await producer.stop()

    async def _restore(self) -> None:
        """Read the newest committed snapshot of this worker from the changelog."""
        reader = kafka_io.aio_consumer(self.broker)
        await reader.start()
        try:
            name = self.topics.name("worker-state")
            parts = await kafka_io.aio_partitions_for(reader, name)
            reader.assign(parts)
            blob = None
            async for message in kafka_io.aio_read_to_end(reader, parts):
                if message.key == self.state_key:
                    blob = message.value
        finally:
            await reader.stop()
        snap = state.load(blob) if blob else None
        if snap is not None:
            self.processor.pipeline = snap.pipeline
            for tp, part in snap.parts.items():
                self.clock.assign(tp, part)
            log.info("restored detector state (%d bytes, %d partitions)", len(blob or b""), len(snap.parts))

    async def _loop(self, consumer: AIOKafkaConsumer, producer: AIOKafkaProducer) -> None:
        next_lag = next_commit = next_check = time.monotonic()
        while not self._stopping.is_set():
            fetched = await consumer.getmany(timeout_ms=int(self.poll_timeout_s * 1000), max_records=self.max_records)
            now = time.monotonic()
            async with self._lock:
                if now >= next_check or not fetched:
                    await self._observe_broker(consumer)
                    next_check = now + 0.25
                outputs = self._process(fetched) if fetched else self._advance()
                await self._publish(producer, outputs)
                if now >= next_commit and (self._dirty or self._offsets):
                    await self._flush(consumer, producer)
                    next_commit = now + self.commit_interval_s
            if self.metrics is not None and now >= next_lag:
                next_lag = now + self.lag_interval_s
                self.metrics.refresh_lag(lambda t, p: consumer.highwater(TopicPartition(t, p)))

    async def _observe_broker(self, consumer: AIOKafkaConsumer) -> None:
        """Tell the clock which partitions are caught up and whether the broker answers."""
        now, fresh = time.monotonic(), True
        for tp in consumer.assignment():
            stamp = consumer.last_poll_timestamp(tp)
            seen, since = self._polls.get(tp, (None, now))
            if stamp != seen:
                self._polls[tp] = (stamp, now)
                since = now
            if stamp is None or now - since > self.clock.stale_after_s:
                fresh = False
                continue
            end = consumer.last_stable_offset(tp)
            end = consumer.highwater(tp) if end is None else end
            self.clock.observe_fetch(tp, caught_up=end is not None and await consumer.position(tp) >= end)
        self.clock.answered(fresh and bool(consumer.assignment()))

    def _advance(self) -> list[OutMessage]:
        """No message: move time as far as the event clock allows (idle partitions, safe silence)."""
        outputs = self.processor.advance_to(self.clock)
        watermark = self.processor.pipeline.watermark
        if self.metrics is not None and watermark > float("-inf"):
            self.metrics.watermark.set(watermark)
        return outputs

    def _process(self, fetched: Fetched) -> list[OutMessage]:
        started = time.perf_counter()
        outputs = self.processor.process_fetch(fetched, self.clock)
        for tp, records in fetched.items():
            if records:
                self._offsets[tp] = records[-1].offset + 1
                if self.metrics is not None:
                    self.metrics.observe_batch(records, time.perf_counter() - started, self.processor.pipeline.watermark)
        self._dirty = True
        return outputs

    async def _publish(self, producer: AIOKafkaProducer, outputs: list[OutMessage]) -> None:
        if not outputs:
            return
        if self.metrics is not None:
            self.metrics.count_outputs(outputs)
        if self.exactly_once:
            await self._begin(producer)
            for out in outputs:  # acknowledged by the transaction's commit
                await producer.send(out.topic, out.value, key=out.key, headers=out.headers)
        else:
            await kafka_io.send_all(producer, outputs)
        self._dirty = True

    async def _begin(self, producer: AIOKafkaProducer) -> None:
        if not producer._txn_manager.is_in_transaction():  # noqa: SLF001 - aiokafka has no public getter
            await producer.begin_transaction()

    async def _flush(self, consumer: AIOKafkaConsumer | None, producer: AIOKafkaProducer, *,
                     final: bool = False) -> None:
        """Commit what was processed: outputs, a snapshot when due, and input offsets, together."""
        offsets, self._offsets = self._offsets, {}
        if not self.exactly_once:
            if offsets and consumer is not None:
                await producer.flush()
                await _commit_quietly(consumer, offsets)
            return
        snapshot = self._dirty
        if not offsets and not snapshot and not producer._txn_manager.is_in_transaction():  # noqa: SLF001
            return
        await self._begin(producer)
        if snapshot:
            blob = state.dump(state.Snapshot(self.processor.pipeline, dict(self.clock.parts)))
            await producer.send(self.topics.name("worker-state"), blob, key=self.state_key)
            self.snapshots, self.snapshot_bytes, self._dirty = self.snapshots + 1, len(blob), False
        if offsets:
            await producer.send_offsets_to_transaction({tp: o for tp, o in offsets.items()}, self.group_id)
        await producer.commit_transaction()


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Commit before partitions move; follow the assignment in the event clock."""

    def __init__(self, loop: BatchLoop, producer: AIOKafkaProducer) -> None:
        self.loop, self.producer = loop, producer

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        async with self.loop._lock:  # noqa: SLF001 - the loop's own helper
            if self.loop.exactly_once and (self.loop._offsets or self.loop._dirty):  # noqa: SLF001
                await self.loop._flush(None, self.producer, final=True)  # noqa: SLF001
            for tp in revoked:
                self.loop.clock.revoke(tp)
            self.loop.ready = False

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        for tp in set(self.loop.clock.parts) - set(assigned):  # restored, but now someone else's
            self.loop.clock.revoke(tp)
        for tp in assigned:
            if tp not in self.loop.clock.parts:
                self.loop.clock.assign(tp)
        self.loop.ready = True


async def _commit_quietly(consumer: AIOKafkaConsumer, offsets: dict[TopicPartition, int]) -> None:
    try:
        await consumer.commit(offsets)
    except Exception as exc:  # shutting down or rebalancing: the next owner re-reads from the last commit
        log.warning("offset commit failed (%s); those messages will be redelivered", exc)

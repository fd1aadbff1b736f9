"""The worker's batch hot path: whole fetches in, whole batches out, one commit.

Faust hands every message through its conductor, a channel queue, stream
processors and an ack, several awaits and tasks per message; measured here
that capped a worker at a few thousand events/s while `MessageProcessor`
alone handles tens of thousands (see docs/metrics.md for the figures). So
the worker's Faust app runs this loop as a task instead of one agent per
input topic: aiokafka (Faust's own driver) fetches up to `max_records`
messages at once, the processor handles each partition's batch
synchronously, the outputs are sent together, and offsets are committed
only after the outputs are acknowledged (at-least-once: a crash redelivers,
never loses). One loop, one consumer: concurrency 1, order kept per
partition.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from schemas.topics import INPUT_TOPICS, Topics
from streams.idle import IdleClock
from streams.metrics import WorkerMetrics
from streams.processor import MessageProcessor, OutMessage, RawMessage

log = logging.getLogger(__name__)


class BatchLoop:
    """Consume the input topics in batches, detect, publish, commit."""

    def __init__(
        self,
        *,
        servers: str,
        topics: Topics,
        processor: MessageProcessor,
        group_id: str,
        metrics: WorkerMetrics | None = None,
        idle: IdleClock | None = None,
        max_records: int = 5000,
        poll_timeout_s: float = 0.05,
        lag_interval_s: float = 5.0,
        commit_interval_s: float = 1.0,
        client_options: dict[str, Any] | None = None,
    ) -> None:
        self.servers = servers
        self.topics = topics
        self.processor = processor
        self.group_id = group_id
        self.metrics = metrics
        self.idle = idle or IdleClock()
        self.max_records = max_records
        self.poll_timeout_s = poll_timeout_s
        self.lag_interval_s = lag_interval_s
        self.commit_interval_s = commit_interval_s
        self.client_options = client_options or {}  # TLS/SASL (schemas.kafka_config.client_options)
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Ask the loop to finish its current batch and return."""
        self._stopping.set()

    async def run(self) -> None:
        """Run until `stop()`; every committed offset has its outputs acknowledged."""
        consumer = AIOKafkaConsumer(
            *(self.topics.name(t) for t in INPUT_TOPICS),
            bootstrap_servers=self.servers,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=8 << 20,
            fetch_max_bytes=64 << 20,
            **self.client_options,
        )
        producer = AIOKafkaProducer(bootstrap_servers=self.servers, acks="all", linger_ms=5, **self.client_options)
        await consumer.start()
        await producer.start()
        try:
            await self._loop(consumer, producer)
        finally:
            await producer.stop()
            await consumer.stop()

    async def _loop(self, consumer: AIOKafkaConsumer, producer: AIOKafkaProducer) -> None:
        # Offsets are committed at most every `commit_interval_s` (a round trip
        # per batch would cap the loop), always after the outputs of everything
        # processed so far were acknowledged, and once more on the way out.
        next_lag = next_commit = time.monotonic()
        uncommitted = in_flight = False  # in_flight: fetched, outputs not yet acknowledged
        try:
            while not self._stopping.is_set():
                fetched = await consumer.getmany(timeout_ms=int(self.poll_timeout_s * 1000),
                                                 max_records=self.max_records)
                in_flight = bool(fetched)
                outputs = self._process(fetched)
                if not fetched:
                    ts = self.idle.idle_watermark()
                    if ts is not None:
                        outputs = self.processor.advance(ts)
                await self._publish(producer, outputs)
                uncommitted, in_flight = uncommitted or in_flight, False
                now = time.monotonic()
                if uncommitted and now >= next_commit:
                    await consumer.commit()
                    uncommitted, next_commit = False, now + self.commit_interval_s
                if self.metrics is not None and now >= next_lag:
                    next_lag = now + self.lag_interval_s
                    self.metrics.refresh_lag(lambda t, p: consumer.highwater(TopicPartition(t, p)))
        finally:
            if uncommitted and not in_flight:  # never commit past a batch that failed
                await _commit_quietly(consumer)

    def _process(self, fetched: dict[TopicPartition, list[ConsumerRecord[Any, Any]]]) -> list[OutMessage]:
        outputs: list[OutMessage] = []
        proc = self.processor
        for records in fetched.values():
            raws = to_raw(records)
            started = time.perf_counter()
            outputs.extend(proc.process_batch(raws))
            if self.metrics is not None:
                self.metrics.observe_batch(raws, time.perf_counter() - started, proc.pipeline.watermark)
        if fetched:
            self.idle.saw(proc.pipeline.watermark)
        return outputs

    async def _publish(self, producer: AIOKafkaProducer, outputs: list[OutMessage]) -> None:
        if not outputs:
            return
        if self.metrics is not None:
            self.metrics.count_outputs(outputs)
        acks = [await producer.send(out.topic, out.value, key=out.key, headers=out.headers) for out in outputs]
        await asyncio.gather(*acks)  # every output is on the broker before the offsets move


async def _commit_quietly(consumer: AIOKafkaConsumer) -> None:
    try:
        await consumer.commit()
    except Exception as exc:  # shutting down: the next owner re-reads from the last commit
        log.warning("final offset commit failed (%s); those messages will be redelivered", exc)


def to_raw(records: Sequence[ConsumerRecord[Any, Any]]) -> list[RawMessage]:
    """aiokafka records as the processor's `RawMessage` (timestamps in seconds)."""
    return [RawMessage(r.topic, r.value, r.key, r.partition, r.offset, (r.timestamp or 0) / 1000.0) for r in records]

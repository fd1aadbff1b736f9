"""The worker's own processing behind each Kafka client: what moving its edge to librdkafka would buy, measured.

The worker consumes with aiokafka; confluent-kafka (librdkafka) reads and
decodes the same backlog faster (`benchmarks.pipeline_floors`). Whether that
difference survives behind the worker's work is what decides a rewrite of
the worker's Kafka edge (docs/stream-core.md), so this measures it instead
of adding up floors: the same backlog is read by each client and every
fetch goes through the worker's hot path (`BatchLoop._process`: decoding,
the event clock, each host's clock estimate, the default detectors), built
as `trainguard worker` builds its tasks, one task per partition.

What is left out is the same for both: transactions, snapshots and commits
(the rewrite would change how they are called, not what they cost here),
and /metrics. librdkafka's messages reach the processor through one tuple
per message whose fields are read by C-level getters (`_Message`): the
processor reads attributes, so that is the least any edge built on
confluent-kafka pays without changing the processor's protocol. Each rate
is events per CPU-second of this process, librdkafka's threads included,
under the worker's collector policy; both clients verify each batch's CRC,
as the worker does.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from benchmarks.fleet_mix import Backlog
from benchmarks.pipeline_floors import (
    FETCH_BYTES,
    FLOOR_TIMEOUT_S,
    MAX_RECORDS,
    PARTITION_FETCH_BYTES,
    within_deadline,
)
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.settings import BrokerSettings, load_settings
from trainguard.streams.worker import heap
from trainguard.streams.worker.batch_loop import BatchLoop
from trainguard.streams.worker.skew import ClockSkewEstimator
from trainguard.streams.worker.tasks import NodeJobTable, TaskFactory
from trainguard.streams.worker.watermark import EventClock


@dataclass(frozen=True)
class Processed:
    """One client's pass over the backlog through the worker's hot path."""

    client: str
    events: int  # records the processor handled (every event of the backlog, once)
    cpu_s: float
    outputs: int  # messages the processor produced (anomalies, incidents, dead letters, node-job updates)

    @property
    def per_cpu_s(self) -> float:
        return self.events / self.cpu_s if self.cpu_s > 0 else 0.0


class _Message(tuple):  # type: ignore[type-arg]
    """A librdkafka message as the processor reads one: attributes, the timestamp in ms.

    One tuple per message, its fields read by C-level getters, so the adapter
    adds no Python call per field read.
    """

    __slots__ = ()
    topic = property(itemgetter(0))
    value = property(itemgetter(1))
    key = property(itemgetter(2))
    partition = property(itemgetter(3))
    offset = property(itemgetter(4))
    timestamp = property(itemgetter(5))


def worker_loop(backlog: Backlog) -> BatchLoop:
    """A batch loop with a task per partition, built as `trainguard worker` builds them, no broker."""
    settings = load_settings()
    w = settings.worker
    factory = TaskFactory(topics=backlog.topics, partitions=backlog.partitions,
                          new_pipeline=lambda: DetectionPipeline.from_settings(settings.detectors),
                          new_clock=lambda: EventClock(max_ahead_s=w.max_ahead_s, idle_after_s=w.idle_after_s,
                                                       confirm_within=w.confirm_within),
                          table=NodeJobTable(), new_skew=lambda: ClockSkewEstimator(bound_s=w.clock_skew_bound_s))
    loop = BatchLoop(broker=BrokerSettings(bootstrap="unused:9092"), topics=backlog.topics, factory=factory,
                     group_id=f"clients-{uuid.uuid4().hex[:6]}")
    for topic, partition in backlog.parts():
        loop.task(partition).clock.assign(TopicPartition(topic, partition))
    return loop


def _processed(client: str, loop: BatchLoop, cpu_s: float, outputs: int) -> Processed:
    return Processed(client, loop.factory.stats.processed, cpu_s, outputs)  # the tasks share one ProcessorStats


async def aiokafka_processing(servers: str, backlog: Backlog) -> Processed:
    """The backlog read with aiokafka, as the worker reads it, each fetch through the worker's hot path."""
    loop = worker_loop(backlog)
    consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False,
                                max_partition_fetch_bytes=PARTITION_FETCH_BYTES, fetch_max_bytes=FETCH_BYTES)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(t, p) for t, p in backlog.parts()])
        await consumer.seek_to_beginning()
        seen = outputs = 0
        started, deadline = time.process_time(), time.monotonic() + FLOOR_TIMEOUT_S
        while seen < backlog.events:
            within_deadline(deadline, seen, backlog)
            fetched = await consumer.getmany(timeout_ms=500, max_records=MAX_RECORDS)
            if fetched:
                outputs += len(loop._process(fetched))  # noqa: SLF001 - the worker's hot path itself
                seen += sum(map(len, fetched.values()))
        return _processed("aiokafka (the worker's client)", loop, time.process_time() - started, outputs)
    finally:
        await consumer.stop()


def confluent_processing(servers: str, backlog: Backlog) -> Processed | None:
    """The backlog read with confluent-kafka, each batch grouped per partition through the same hot path.

    None when confluent-kafka is not installed (`pip install 'trainguard[bench]'`).
    """
    try:
        from confluent_kafka import OFFSET_BEGINNING, Consumer
        from confluent_kafka import TopicPartition as CkPartition
    except ImportError:
        return None
    loop = worker_loop(backlog)
    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"clients-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "check.crcs": True,
                         "max.partition.fetch.bytes": PARTITION_FETCH_BYTES, "fetch.max.bytes": FETCH_BYTES})
    try:
        started = time.process_time()  # from the assignment: librdkafka's threads fetch from then on
        consumer.assign([CkPartition(t, p, OFFSET_BEGINNING) for t, p in backlog.parts()])
        seen = outputs = 0
        parts: dict[tuple[str, int], TopicPartition] = {}
        deadline = time.monotonic() + FLOOR_TIMEOUT_S
        while seen < backlog.events:
            within_deadline(deadline, seen, backlog)
            fetched = _grouped(consumer.consume(num_messages=MAX_RECORDS, timeout=0.5), parts)
            if fetched:
                outputs += len(loop._process(fetched))  # type: ignore[arg-type]  # noqa: SLF001
                seen += sum(map(len, fetched.values()))
        return _processed("confluent-kafka (librdkafka)", loop, time.process_time() - started, outputs)
    finally:
        consumer.close()


def _grouped(messages: list[Any], parts: dict[tuple[str, int], TopicPartition]) -> dict[TopicPartition, list[Any]]:
    """One consume() batch as the worker's fetch: per partition, in offset order, errors left out."""
    fetched: dict[TopicPartition, list[Any]] = {}
    for m in messages:
        if m.error() is not None:
            continue
        topic, partition = m.topic(), m.partition()
        tp = parts.get((topic, partition))
        if tp is None:
            tp = parts[(topic, partition)] = TopicPartition(topic, partition)
        batch = fetched.get(tp)
        if batch is None:
            batch = fetched[tp] = []
        batch.append(_Message((topic, m.value(), m.key(), partition, m.offset(), m.timestamp()[1])))
    return fetched


def compare_clients(servers: str, backlog: Backlog) -> list[Processed]:
    """Both clients over the backlog, aiokafka first; confluent-kafka left out when not installed.

    Each pass runs under the worker's collector policy (`streams.worker.heap`), as `trainguard worker` does.
    aiokafka reads first, so whatever a first pass pays counts against the worker's own client: librdkafka's
    gain printed is, if anything, too large.
    """
    old = heap.settle_after_startup()
    try:
        runs = [asyncio.run(aiokafka_processing(servers, backlog))]
        confluent = confluent_processing(servers, backlog)
    finally:
        heap.restore(old)
    return runs if confluent is None else [*runs, confluent]


def print_clients(runs: list[Processed], worker_rate: float | None = None) -> None:
    """Each client's rate and, with both, librdkafka's against aiokafka's.

    With `worker_rate` (the round's drain by the real worker, events per CPU-second), also the worker against its
    own hot path behind aiokafka: what the service around that path (transactions, snapshots, the consumer
    group, /metrics, Faust) costs, in the same round.
    """
    print("the worker's hot path (decode, event clock, detectors; no transactions, snapshots or /metrics) "
          "behind each client, events per CPU-second:")
    for run in runs:
        print(f"  {run.client:32s} {run.per_cpu_s:>9,.0f}   ({run.events:,} events, {run.outputs:,} outputs)")
    if worker_rate is not None and runs[0].per_cpu_s > 0:
        print(f"  the worker, exactly-once, is {worker_rate / runs[0].per_cpu_s:.2f}x its hot path behind aiokafka "
              f"(the service around it: transactions, snapshots, the group, /metrics)")
    if len(runs) == 1:
        print("  confluent-kafka (librdkafka)     (not installed: pip install 'trainguard[bench]')")
    else:
        aio, rd = runs[0], runs[1]
        print(f"  librdkafka / aiokafka: {rd.per_cpu_s / max(aio.per_cpu_s, 1e-9):.2f}x "
              f"({(aio.cpu_s / aio.events - rd.cpu_s / rd.events) * 1e6:+.2f} us per event saved)")


def print_client_rounds(rounds: list[list[Processed]]) -> None:
    """The median of the rounds' librdkafka / aiokafka ratios, with their range (each taken within its round)."""
    ratios = [rd.per_cpu_s / max(aio.per_cpu_s, 1e-9) for aio, rd in (r for r in rounds if len(r) == 2)]
    if ratios:
        print(f"  librdkafka / aiokafka behind the worker's hot path: median {statistics.median(ratios):.2f}x "
              f"(range {min(ratios):.2f} - {max(ratios):.2f}x, {len(ratios)} rounds)")

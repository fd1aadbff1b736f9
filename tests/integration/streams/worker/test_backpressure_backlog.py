"""A backlog drained under backpressure, on the real broker: bounded waiting, nothing lost, event-time order.

A one-task worker (the real `BatchLoop`, aiokafka against the broker, exactly-once)
reads a 3,000 s backlog of 15,000 records: 4 ranks' steps a second on the
training partition and one GPU sample a second on the gpu partition. Fetches
hand over 500 records at a time, so training runs ahead of gpu in event time
and its records wait for the watermark. With marks of 1,000/500 the waiting
records must stay at or under 1,500 (high mark plus a fetch); unbounded they
peak at 3,000 here (checked by setting `backpressure=None`). Every record
must still reach the detectors, in event-time order, and the committed offsets
must cover both partitions.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaConsumer

from trainguard.detectors.base import Detector
from trainguard.detectors.dispatch import on
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas import Codec
from trainguard.schemas.records import NodeGpuSample, TrainingStep
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams import kafka_io
from trainguard.streams.admin import ensure_topics
from trainguard.streams.worker.backpressure import Backpressure
from trainguard.streams.worker.batch_loop import BatchLoop
from trainguard.streams.worker.tasks import NodeJobTable, TaskFactory
from trainguard.streams.worker.watermark import EventClock

SECONDS, RANKS, HIGH = 3000, 4, 1000
TOTAL = SECONDS * (RANKS + 1)


class _Recorder(Detector):
    """Records the event time of every step and sample, in the order the pipeline hands them over."""

    def __init__(self, *, instance: str = "recorder") -> None:
        super().__init__(instance=instance)
        self.seen: list[float] = []

    @on(TrainingStep, NodeGpuSample)
    def _record(self, record: TrainingStep | NodeGpuSample) -> None:
        self.seen.append(record.ts)


class _Watched(BatchLoop):
    """The real loop, with the peak of waiting records noted each time it paces the consumer."""

    peak = 0

    def _pace(self, consumer: AIOKafkaConsumer) -> None:
        self.peak = max(self.peak, sum(len(t.processor.buffer) for t in self.tasks.values()))
        super()._pace(consumer)


def _publish(kafka: str, topics: Topics, start: float) -> None:
    producer = kafka_io.producer(kafka_io.as_broker(kafka), linger_ms=20, batch_size=1 << 20)
    codec = Codec()
    for s in range(SECONDS):
        records: list[Any] = [TrainingStep(ts=start + s, job="bp", rank=r, node=f"n{r}", step=s, loss=2.0)
                              for r in range(RANKS)]
        records.append(NodeGpuSample(ts=start + s, node="n0", job="bp"))
        for record in records:
            producer.send(topics.for_record(record), key=key_for(record), value=codec.encode(record))
    producer.flush()
    producer.close()


async def _drain(loop: BatchLoop, recorder: _Recorder, timeout_s: float) -> None:
    runner = asyncio.ensure_future(loop.run())
    deadline = time.monotonic() + timeout_s
    while len(recorder.seen) < TOTAL and time.monotonic() < deadline and not runner.done():
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.5)  # a commit interval, so that the last offsets are in
    loop.stop()
    await runner


def test_a_backlog_drains_with_bounded_waiting_records_in_event_time_order(kafka: str, topic_prefix: str) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=1, replication=1, configs=topics.configs())
    _publish(kafka, topics, start=time.time() - SECONDS - 60)
    recorder = _Recorder()
    factory = TaskFactory(topics=topics, partitions=1, new_pipeline=lambda: DetectionPipeline([recorder]),
                          new_clock=lambda: EventClock(idle_after_s=0.5), table=NodeJobTable())
    group = f"bp-{topic_prefix}"
    loop = _Watched(broker=kafka_io.as_broker(kafka), topics=topics, factory=factory, group_id=group,
                    max_records=500, backpressure=Backpressure.at(HIGH), instance="bp")
    asyncio.run(_drain(loop, recorder, timeout_s=120))
    print(f"backpressure: {loop.pauses} pauses, peak {loop.peak} waiting records (high mark {HIGH})")
    assert len(recorder.seen) == TOTAL, len(recorder.seen)
    assert recorder.seen == sorted(recorder.seen), "records reached the detectors out of event-time order"
    assert loop.pauses > 0, "the backlog never pressed: the test lost its point"
    assert loop.peak <= HIGH + 500, loop.peak
    consumer = kafka_io.consumer(kafka_io.as_broker(kafka), group_id=group)
    try:
        parts = [tp for name in ("training", "gpu") for tp in kafka_io.partitions_for(consumer, topics.name(name))]
        ends = consumer.end_offsets(parts)
        assert {tp.topic: consumer.committed(tp) for tp in parts} == {tp.topic: ends[tp] for tp in parts}
    finally:
        consumer.close()

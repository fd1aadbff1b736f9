"""act's consume loop commits no offset before the state it implies is durable (real broker, real ActLoop).

The core here is a recording stand-in whose `durable` (the act-state mirror's wait in production) blocks
until the test lets it go: while it blocks, the checkpoint has been observed and saved but its offset
must stay uncommitted; once released, the offset is committed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import TopicPartition

from trainguard.schemas.codec import Codec
from trainguard.schemas.records import CheckpointEvent, Record
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams.act.loop import ActLoop
from trainguard.streams.admin import ensure_topics
from trainguard.streams.kafka_io import as_broker


class HeldCore:
    """Observes records; `durable` waits for `release` (the mirror's transaction not yet committed)."""

    def __init__(self) -> None:
        self.seen: list[Record] = []
        self.saved = 0
        self.release = threading.Event()

    def observe(self, record: Record) -> None:
        self.seen.append(record)

    def trusts(self, *_: object, **__: object) -> bool:
        return True

    def save_state(self) -> None:
        self.saved += 1

    def durable(self) -> None:
        self.release.wait(timeout=60)


def committed(kafka: str, group: str, tp: TopicPartition) -> int | None:
    """The group's committed offset of `tp` (None: nothing committed), asked of the broker."""
    reader = KafkaConsumer(bootstrap_servers=kafka, group_id=group, enable_auto_commit=False)
    try:
        return reader.committed(tp)
    finally:
        reader.close()


def test_offsets_wait_for_the_state_they_imply(kafka: str, topic_prefix: str, tmp_path: Path) -> None:
    topics = Topics(topic_prefix)
    ensure_topics(kafka, topics.all(), partitions=1, replication=1)
    core = HeldCore()
    group = f"a-{topic_prefix}"
    loop = ActLoop(broker=as_broker(kafka), topics=topics, core=core, group_id=group,  # type: ignore[arg-type]
                   commit_interval_s=0.1)
    producer = KafkaProducer(bootstrap_servers=kafka, acks="all")
    record = CheckpointEvent(ts=time.time(), job="j", step=100, path="/ck/100")
    producer.send(topics.for_record(record), key=key_for(record), value=Codec().encode(record))
    producer.flush()
    producer.close()
    tp = TopicPartition(topics.name("checkpoints"), 0)

    async def scenario() -> None:
        task = asyncio.create_task(loop.run())
        try:
            await steps(task)
        finally:
            core.release.set()
            loop.stop()
            await task

    async def steps(task: asyncio.Task[None]) -> None:
        deadline = time.monotonic() + 60
        while not (core.seen and core.saved) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert core.seen == [record] and core.saved >= 1  # observed and saved...
        await asyncio.sleep(1.0)  # ...many commit intervals pass...
        assert await asyncio.to_thread(committed, kafka, group, tp) in (None, -1)  # ...yet nothing committed
        core.release.set()
        while await asyncio.to_thread(committed, kafka, group, tp) != 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert await asyncio.to_thread(committed, kafka, group, tp) == 1  # durable: now committed

    asyncio.run(scenario())

"""The console's Kafka edge: read every topic act reads and writes; publish operator commands.

Each console replica reads the topics from the beginning with no consumer
group (so replicas never split partitions between them and each holds the
whole picture), feeds every record to the pure `ConsoleState`, and fans the
resulting live events out to the page's server-sent-event streams. Operator
commands and the console's own audit entries go out with acks=all and are
awaited, so the API answers only once the broker holds them.

Both clients are built by `streams.kafka_io` from the configured
`BrokerSettings`, so the console reaches a TLS / SASL cluster like every
other client. Operator commands are signed with the console's own key
(`security.console_private_key`): act applies nothing the console did not sign.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from trainguard.schemas.codec import Codec, DecodeError
from trainguard.schemas.kafka_config import BrokerSettings
from trainguard.schemas.records import OperatorCommand, Record
from trainguard.schemas.signing import Signer
from trainguard.schemas.topics import Topics, key_for
from trainguard.streams import kafka_io
from trainguard.streams.console.state import ConsoleState, Event

log = logging.getLogger(__name__)
READ = ("incidents", "decisions", "actions", "action-results", "audit", "operator", "anomalies", "training",
        "checkpoints", "gpu")
QUEUE_SIZE = 1000


class Unsigned(RuntimeError):
    """The console holds no signing key, so it cannot send operator commands."""


class ConsoleFeed:
    """Consumes the topics into a `ConsoleState`; publishes records; fans out events."""

    def __init__(self, broker: BrokerSettings | str, topics: Topics, state: ConsoleState, codec: Codec | None = None,
                 signer: Signer | None = None, command_ttl_s: float = 120.0) -> None:
        self.broker = kafka_io.as_broker(broker)
        self.signer = signer
        self.command_ttl_s = command_ttl_s  # an operator command's expiry, after which act refuses it
        self.topics = topics
        self.state = state
        self.codec = codec or Codec()
        self.subscribers: set[asyncio.Queue[Event]] = set()
        self.caught_up = False
        self.records = 0
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Connect both clients and start consuming in the background."""
        self._consumer = kafka_io.aio_consumer(self.broker, *(self.topics.name(t) for t in READ), group_id=None,
                                               read_committed=False)
        self._producer = kafka_io.aio_producer(self.broker)
        await self._consumer.start()
        await self._producer.start()
        self._task = asyncio.create_task(self._run())
        self._task.add_done_callback(self._died)

    @property
    def alive(self) -> bool:
        """False once the consuming task has stopped (the console then shows stale data)."""
        return self._task is not None and not self._task.done()

    def _died(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("console feed stopped: %r", task.exception())

    async def stop(self) -> None:
        """Stop consuming and close both clients."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            except Exception:  # already logged by `_died`
                pass
        for client in (self._consumer, self._producer):
            if client is not None:
                await client.stop()

    async def publish(self, record: Record) -> None:
        """Send one record to its topic and wait until the broker has it (an operator command signed)."""
        assert self._producer is not None
        key = key_for(record) or None
        value = self.codec.encode(record)
        headers = None
        if isinstance(record, OperatorCommand):
            if self.signer is None:
                raise Unsigned("the console has no signing key (security.console_private_key)")
            headers = self.signer.headers(value)
        await self._producer.send_and_wait(self.topics.for_record(record), value, key=key, headers=headers)

    def subscribe(self) -> asyncio.Queue[Event]:
        """A queue of live events for one page (bounded: a stalled page gets a `resync`)."""
        queue: asyncio.Queue[Event] = asyncio.Queue(QUEUE_SIZE)
        self.subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Event]) -> None:
        """Forget a page that went away."""
        self.subscribers.discard(queue)

    async def _run(self) -> None:
        assert self._consumer is not None
        ends: dict[Any, int] | None = None
        while True:
            batches = await self._consumer.getmany(timeout_ms=500, max_records=5000)
            for messages in batches.values():
                for msg in messages:
                    self._take(msg.value)
            if not self.caught_up:
                ends = ends or await self._end_offsets()
                positions = {tp: await self._position(tp) for tp in ends}
                self.caught_up = all(positions[tp] >= end for tp, end in ends.items())
                if self.caught_up:
                    self._fan_out({"type": "resync", "data": {}})

    async def _end_offsets(self) -> dict[Any, int]:
        assert self._consumer is not None
        while not self._consumer.assignment():
            await asyncio.sleep(0.1)
        return dict(await self._consumer.end_offsets(list(self._consumer.assignment())))

    async def _position(self, tp: Any) -> int:
        assert self._consumer is not None
        return int(await self._consumer.position(tp))

    def _take(self, value: bytes | None) -> None:
        if value is None:
            return
        try:
            record = self.codec.decode(value)
        except DecodeError:
            return  # the worker dead-letters malformed input; the console only skips it
        self.records += 1
        for event in self.state.observe(record):
            if self.caught_up:  # history is shown by the first fetch, not replayed event by event
                self._fan_out(event)

    def _fan_out(self, event: Event) -> None:
        for queue in list(self.subscribers):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                while not queue.empty():
                    queue.get_nowait()
                queue.put_nowait({"type": "resync", "data": {}})

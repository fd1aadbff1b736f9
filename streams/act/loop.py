"""`trainguard act` as a Faust app, built by a factory from settings (no module-level app).

The app hosts one consume loop (`ActLoop`, a Faust task) over every topic
`act` follows, plus the timers (operator requests, stop conditions). The
loop is aiokafka through `streams.kafka_io`, like the worker's fast path,
rather than Faust agents: measured here, Faust's consumer did not resume
after a broker outage (its commit timer hung on the dead coordinator and no
record was fetched in the 7 minutes after the broker returned), while a
plain aiokafka consumer rejoins within seconds. It also lets the loop commit
offsets itself, exactly after the state they imply is journaled.

Each fetched batch is handled state first (checkpoints, topologies, steps,
agents' results), then incidents, so "which checkpoint precedes the onset?"
is answered from everything fetched so far; if the state partitions still
lag behind the incident, the loop fetches them up to their current end
first (bounded by `actions.state_wait_s`). Offsets are committed at most
every `actions.commit_interval_s`, and only once every record's effect is in
the journal and on the act-state topic (`ActCore.save_state`, then the
mirror's `durable` wait, `streams.act.state_mirror`). The wait runs beside the
loop, not in it: the next batch is fetched and decided meanwhile, so the
mirror's round trips never delay a decision.

`ActLoop.subscribe(topic, handler)` adds another topic (an operator topic,
say): its records go to `handler` in the same ordered, journal-then-commit loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from trainguard.actions.core import ActCore
from trainguard.schemas.codec import Codec, DecodeError
from trainguard.schemas.kafka_config import BrokerSettings, client_options
from trainguard.schemas.records import (
    ActionResult,
    AttemptKey,
    CheckpointEvent,
    Incident,
    JobTopology,
    OperatorCommand,
    Record,
)
from trainguard.schemas.topics import Topics
from trainguard.streams import kafka_io
from trainguard.streams.settings import ActConfig

log = logging.getLogger(__name__)
Handler = Callable[[Record], None]
Fetched = dict[TopicPartition, list[ConsumerRecord[Any, Any]]]


class ActLoop:
    """One consumer over the followed topics; journal, then commit."""

    def __init__(self, *, broker: BrokerSettings, topics: Topics, core: ActCore, group_id: str,
                 state_wait_s: float = 2.0, commit_interval_s: float = 0.5) -> None:
        self.broker = broker
        self.core = core
        self.group_id = group_id
        self.state_wait_s = state_wait_s
        self.commit_interval_s = commit_interval_s
        self.incidents = topics.name("incidents")
        self.state = {topics.name(t) for t in ("checkpoints", "training", "action-results")}
        self.handlers: dict[str, Handler] = {name: core.observe for name in self.state}
        self.codec = Codec()
        self._stopping = asyncio.Event()

    def subscribe(self, topic: str, handler: Handler) -> None:
        """Follow one more topic (before `run`); its records are state: handled before incidents."""
        self.handlers[topic] = handler
        self.state.add(topic)

    def stop(self) -> None:
        """Finish the current batch and return."""
        self._stopping.set()

    async def run(self) -> None:
        """Consume until `stop()`."""
        consumer = kafka_io.aio_consumer(self.broker, self.incidents, *self.handlers, group_id=self.group_id,
                                         retry_backoff_ms=100)
        await consumer.start()
        pending: asyncio.Task[None] | None = None
        handled, last = False, time.monotonic()
        try:
            while not self._stopping.is_set():
                fetched = await consumer.getmany(timeout_ms=50, max_records=5000)
                if fetched:
                    await self._handle(consumer, fetched)
                    handled = True
                due = time.monotonic() - last >= self.commit_interval_s
                if handled and due and (pending is None or pending.done()):
                    pending = await self._checkpoint(consumer)
                    handled, last = False, time.monotonic()
            if pending is not None:
                await pending
            if handled:
                await (await self._checkpoint(consumer))
        finally:
            await consumer.stop()

    async def _checkpoint(self, consumer: AIOKafkaConsumer) -> asyncio.Task[None]:
        """Save what the handled records imply, then (beside the loop) commit their offsets once durable."""
        offsets = {tp: await consumer.position(tp) for tp in consumer.assignment()}
        self.core.save_state()  # consistent with `offsets`: no record is handled in between
        return asyncio.create_task(self._commit(consumer, offsets))

    async def _commit(self, consumer: AIOKafkaConsumer, offsets: dict[TopicPartition, int]) -> None:
        await asyncio.to_thread(self.core.durable)  # journaled state on the act-state topic first
        try:
            await consumer.commit(offsets)
        except KafkaError as exc:  # a rebalance or an outage: the next commit covers these offsets
            log.warning("offset commit failed (%s); the next one covers it", type(exc).__name__)

    async def _handle(self, consumer: AIOKafkaConsumer, fetched: Fetched) -> None:
        incidents: list[ConsumerRecord[Any, Any]] = []
        for tp, records in fetched.items():
            if tp.topic == self.incidents:
                incidents.extend(records)
            else:
                self._state(tp.topic, records)
        if not incidents:
            return
        await self._catch_up(consumer)
        for message in incidents:
            record = self._decode(message.value)
            if isinstance(record, Incident) and self._trusted(record, message):
                self.core.decide(record)

    def _trusted(self, record: Record, message: ConsumerRecord[Any, Any]) -> bool:
        """Signatures: an agent's result must be signed by its node, an operator command by the console,
        an incident by the worker where `security.worker_public_keys` asks for it, an attempt key by its
        node, a checkpoint or topology by its job's current attempt (the exact bytes and headers as received)."""
        if not isinstance(record, (ActionResult, Incident, OperatorCommand, AttemptKey, CheckpointEvent,
                                   JobTopology)):
            return True
        return self.core.trusts(record, message.value, _headers(message), topic=message.topic, offset=message.offset)

    async def _catch_up(self, consumer: AIOKafkaConsumer) -> None:
        """Read the state partitions up to their current end before deciding (bounded wait)."""
        parts = [tp for tp in consumer.assignment() if tp.topic in self.state]
        # The broker's current ends, not the consumer's cached high-water marks: those date from
        # the fetch that buffered the records, which may predate the topology an incident needs.
        ends: dict[TopicPartition, int | None] = {tp: consumer.highwater(tp) for tp in parts}
        try:
            ends.update(await asyncio.wait_for(consumer.end_offsets(parts), self.state_wait_s) if parts else {})
        except (TimeoutError, KafkaError):
            log.warning("state topics' end offsets unavailable; deciding on what was fetched")
        behind = [tp for tp in parts if ends[tp] is not None and await consumer.position(tp) < (ends[tp] or 0)]
        deadline = time.monotonic() + self.state_wait_s
        while behind and time.monotonic() < deadline:
            fetched = await consumer.getmany(*behind, timeout_ms=50, max_records=5000)
            for tp, records in fetched.items():
                self._state(tp.topic, records)
            behind = [tp for tp in behind if await consumer.position(tp) < (ends[tp] or 0)]
        if behind:
            log.warning("deciding before the state topics caught up (%.1fs)", self.state_wait_s)

    def _state(self, topic: str, records: list[ConsumerRecord[Any, Any]]) -> None:
        handler = self.handlers[topic]
        for message in records:
            record = self._decode(message.value)
            if record is not None and self._trusted(record, message):
                handler(record)

    def _decode(self, value: bytes) -> Record | None:
        try:
            return self.codec.decode(value)
        except DecodeError:
            return None  # the worker dead-letters malformed input; here it is only skipped


def _headers(message: ConsumerRecord[Any, Any]) -> list[tuple[str, bytes]]:
    """A record's headers as (name, bytes) pairs."""
    headers: Sequence[tuple[str, bytes | None]] = message.headers or ()
    return [(str(k), bytes(v or b"")) for k, v in headers]


def create_act_app(settings: ActConfig, core: ActCore, *, max_incidents: int | None = None,
                   timeout_s: float | None = None) -> faust.App:
    """Build the act app around `core`; stops itself after `max_incidents` decisions or `timeout_s`."""
    cfg = settings.actions
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    app = faust.App(f"{cfg.group_id}.app", broker=f"kafka://{settings.broker.servers}", store="memory://",
                    datadir=str(cfg.state_dir / "faust"), topic_partitions=settings.topics.partitions,
                    topic_replication_factor=settings.topics.replication, web_enabled=False,
                    **client_options(settings.broker, "faust"))
    loop = ActLoop(broker=settings.broker, topics=Topics(settings.topics.prefix), core=core,
                   group_id=cfg.group_id, state_wait_s=cfg.state_wait_s, commit_interval_s=cfg.commit_interval_s)
    app.trainguard_core = core  # type: ignore[attr-defined]
    app.trainguard_loop = loop  # type: ignore[attr-defined]  # `subscribe` more topics before the app starts
    loop.subscribe(Topics(settings.topics.prefix).name("operator"), core.observe)  # the console's commands

    @app.task
    async def consume() -> None:
        core.resume()  # plans a killed act left unfinished
        await loop.run()

    @app.timer(1.0)
    async def operator_requests() -> None:
        core.resume()  # approvals, breaker resets, node returns left in the journal by `trainguard actions`
        core.show_rails()  # the console's view of the breaker and the pool

    started = time.monotonic()

    @app.timer(0.2)
    async def stop_when_done() -> None:
        done = max_incidents is not None and core.decided >= max_incidents and not core.busy
        late = timeout_s is not None and time.monotonic() - started > timeout_s
        if done or late:
            loop.stop()
            os.kill(os.getpid(), signal.SIGTERM)  # mode's worker shuts down cleanly on SIGTERM

    return app

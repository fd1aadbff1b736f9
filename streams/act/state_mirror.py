"""The Kafka edge of act's durable state: the journal mirrored on a compacted topic.

`act` journals every change locally (SQLite, fsync'd); this mirror writes
the same items (`actions.state_items`) to `<prefix>act-state`, a compacted,
single-partition topic, so any machine can rebuild what `act` knew.

* Order and durability: the journal hands each committed transaction's
  items over in commit order; one writer thread sends them in Kafka
  transactions (acks from all replicas, idempotent). `wait_durable()`
  returns once everything journaled so far is committed on the topic: the
  consume loop calls it before committing offsets, and a plan step calls
  it before sending a command, so no offset and no command ever precede
  the state they imply. Callers never hold a lock while the writer talks
  to the broker, and batches group naturally (one round trip for all the
  changes that queued up while the previous one was in flight).
* Single writer: the producer's transactional id is the same for every
  `act` of a deployment, so `init_transactions` at start fences a
  predecessor still running (Kafka aborts its open transaction and refuses
  its next one); records also carry the writer's epoch, and the restorer
  ignores an older epoch after a newer one (`state_items.fold`).
* Start: read the topic to its end (committed records only), reconcile
  with whatever local journal exists (newest version wins), write the
  result into the journal, then publish a claim and what the topic lacked.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, ProducerFenced

from trainguard.actions.journal import Journal
from trainguard.actions.state_items import Folded, Item, Reconciled, fold, reconcile, to_record
from trainguard.schemas.kafka_config import BrokerSettings
from trainguard.streams import kafka_io

log = logging.getLogger(__name__)
T = TypeVar("T")


class MirrorFenced(RuntimeError):
    """Another act took over the state topic: this one must stop acting at once."""


class StateMirror:
    """Mirror a journal onto the compacted state topic; restore it from there on start."""

    def __init__(self, *, broker: BrokerSettings, topic: str, journal: Journal, transactional_id: str,
                 writer: str = "act", on_fenced: Callable[[], None] = lambda: None) -> None:
        self.broker, self.topic, self.journal = broker, topic, journal
        self.transactional_id, self.writer, self.on_fenced = transactional_id, writer, on_fenced
        self._cond = threading.Condition()
        self._queue: list[Item] = []
        self._enqueued = 0  # items handed over so far
        self._durable = 0  # items committed on the topic so far
        self._fenced = False
        self._closing = False
        self._thread: threading.Thread | None = None
        self.batches = 0  # transactions committed (for the benchmark)
        self.restored: Reconciled | None = None
        # aiokafka's transactional producer, on a loop of its own: kafka-python's did not find its
        # transaction coordinator again after a 20 s broker outage (95 s to the first command).
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, name="act-state-io", daemon=True)
        self._producer: AIOKafkaProducer | None = None

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _new_producer(self) -> AIOKafkaProducer:
        # A transaction begun right after the previous commit gets CONCURRENT_TRANSACTIONS until the
        # broker wrote the markers; the default 100 ms back-off would then be added to every command.
        producer = kafka_io.aio_producer(self.broker, transactional_id=self.transactional_id, linger_ms=0,
                                         transaction_timeout_ms=60000, retry_backoff_ms=10)
        await producer.start()  # InitProducerId: from here on an older act with our id cannot commit
        return producer

    def start(self) -> Reconciled:
        """Fence any predecessor, rebuild the journal from the topic, then mirror every change."""
        self._loop_thread.start()
        self._producer = self._call(self._new_producer())
        remote = self.read()
        result = reconcile(self.journal.items(), remote, self.writer)
        self.journal.apply(result.to_local)
        self.journal.begin_epoch(result.epoch, result.seq)
        if remote.stale:
            log.warning("act-state: ignored %d records of a stale writer", remote.stale)
        self._thread = threading.Thread(target=self._run, name="act-state-mirror", daemon=True)
        self._thread.start()
        self._enqueue(result.to_publish)
        self.journal.listen(self._enqueue)
        self.wait_durable()  # our claim is on the topic before we act
        self.restored = result
        return result

    def read(self) -> Folded:
        """The topic's state: every committed record from the beginning to the current end, folded."""
        consumer = kafka_io.consumer(self.broker, reconnect_backoff_max_ms=500)
        try:
            parts = kafka_io.partitions_for(consumer, self.topic)
            return fold((m.key, m.value) for m in kafka_io.read_to_end(consumer, parts))
        finally:
            consumer.close()

    def wait_durable(self, timeout_s: float | None = None) -> bool:
        """Block until every item journaled before this call is committed on the topic (False on timeout)."""
        with self._cond:
            target = self._enqueued
            done = self._cond.wait_for(lambda: self._durable >= target or self._fenced, timeout_s)
            if self._fenced:
                raise MirrorFenced(f"another act took over {self.topic}")
            return bool(done)

    def close(self) -> None:
        """Write what is queued, then stop the writer and release the producer."""
        self.journal.listen(None)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._producer is not None:
            try:
                asyncio.run_coroutine_threadsafe(self._producer.stop(), self._loop).result(timeout=10)
            except Exception:  # noqa: BLE001 - exiting anyway; the broker aborts an open transaction
                log.warning("act-state: producer did not stop cleanly")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(timeout=5)

    # ------------------------------------------------------------ the writer thread

    def _enqueue(self, items: list[Item]) -> None:
        with self._cond:
            self._queue.extend(items)
            self._enqueued += len(items)
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue) or self._closing)
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
                upto = self._enqueued
            if not self._write(batch):
                return
            with self._cond:
                self._durable = upto
                self._cond.notify_all()

    def _write(self, batch: list[Item]) -> bool:
        """One transaction with the whole batch; retried until it commits. False once fenced."""
        backoff = 0.1
        while True:
            try:
                self._call(self._send(batch))
                self.batches += 1
                return True
            except ProducerFenced:
                log.error("act-state: fenced by a newer act; this act stops acting")
                with self._cond:
                    self._fenced = True
                    self._cond.notify_all()
                self.on_fenced()
                return False
            except KafkaError as exc:  # the broker is away: the batch waits, in order, and is sent again
                if self._closing:  # the local journal keeps it; the next start publishes what the topic lacks
                    log.warning("act-state: %d items not mirrored at exit (%s)", len(batch), type(exc).__name__)
                    return False
                log.warning("act-state: write failed (%s); retrying", type(exc).__name__)
                self._call(asyncio.sleep(backoff))
                backoff = min(2.0, backoff * 2)
                if backoff >= 2.0:  # the producer may be stuck in an aborted epoch (a long outage): a new one
                    self._call(self._replace_producer())

    async def _replace_producer(self) -> None:
        """A fresh producer under the same id. Only the leader gets here (a deposed act exits on losing
        the Lease, or stops on ProducerFenced), so this never fences a successor."""
        if self._producer is not None:
            try:
                await self._producer.stop()
            except KafkaError:
                pass
        self._producer = await self._new_producer()

    async def _send(self, batch: list[Item]) -> None:
        assert self._producer is not None
        async with self._producer.transaction():  # aborted on any error, committed on exit
            acks = [await self._producer.send(self.topic, value, key=key, partition=0)
                    for key, value in map(to_record, batch)]
            await asyncio.gather(*acks)

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
rate-limited to one per interval, and state and offsets always match). A
SIGKILL before the commit aborts all of it (the restarted worker fences the
old transactional id, restores the last committed snapshot and re-reads
from the matching offsets); after the commit, all of it stands. Downstream
consumers read committed only. Without it, outputs are acknowledged before
offsets are committed (at-least-once, no snapshots).

State is per task (streams.worker.tasks): partition number p of every input
topic, with its own pipeline, event clock and changelog snapshot. Event
time comes from each task's `streams.worker.watermark.EventClock`: the minimum
over the task's partitions, idle ones set aside, wall-clock time only while
every partition is caught up and the broker answers. The records a task
holds for event time are bounded by `backpressure`
(`streams.worker.backpressure`): the partitions that run ahead are paused.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import IllegalStateError

from trainguard.schemas.topics import INPUT_TOPICS, Topics
from trainguard.streams import kafka_io
from trainguard.streams.worker import snapshot
from trainguard.streams.worker.backpressure import KEEP, Backpressure, Plan
from trainguard.streams.worker.metrics import WorkerMetrics
from trainguard.streams.worker.processor import OutMessage
from trainguard.streams.worker.tasks import Task, TaskFactory, read_snapshots, task_key

if TYPE_CHECKING:
    from trainguard.schemas.kafka_config import BrokerSettings

log = logging.getLogger(__name__)
SNAPSHOT_BUDGET = 0.05  # share of the loop's time that snapshots may take
# A transaction is committed this long after it began at the latest, however costly snapshots
# make the commit interval: a third of its 15 s timeout (kafka_io.aio_producer), so a slow batch
# after the deadline still commits in time (issue 21: 50,000 new jobs in a minute outlived it).
TXN_BUDGET_S = 5.0
CENSUS_BUDGET = 0.01  # share of the loop's time that counting detector state for /metrics may take
Fetched = dict[TopicPartition, list[ConsumerRecord[Any, Any]]]


class ProducerFatal(RuntimeError):
    """The transactional producer is fenced (a successor has our transactional id) or failed for good.

    It can neither begin, commit nor abort again (aiokafka would raise an
    invalid state transition), so the worker stops and its restart resumes
    from the last commit. Raised by the loop as soon as it sees the state,
    even when the fence was met in the rebalance listener or nothing is due.
    """


class BatchLoop:
    """Consume the input topics in batches, detect per task, publish, commit."""

    def __init__(
        self,
        *,
        broker: BrokerSettings,
        topics: Topics,
        factory: TaskFactory,
        group_id: str,
        metrics: WorkerMetrics | None = None,
        max_records: int = 5000,
        poll_timeout_s: float = 0.05,
        lag_interval_s: float = 5.0,
        commit_interval_s: float = 1.0,
        exactly_once: bool = True,
        instance: str = "worker",
        backpressure: Backpressure | None = None,
    ) -> None:
        self.broker = broker
        self.topics = topics
        self.factory = factory
        self.group_id = group_id
        self.metrics = metrics
        self.max_records = max_records
        self.poll_timeout_s = poll_timeout_s
        self.lag_interval_s = lag_interval_s
        self.commit_interval_s = commit_interval_s
        self.exactly_once = exactly_once
        self.instance = instance
        self.backpressure = backpressure  # None: the event buffer is unbounded (tests, benchmarks)
        self.pauses = 0  # times a task's backpressure started
        self.tasks: dict[int, Task] = {}
        self.ready = False  # assigned and state restored (/readyz)
        self.snapshots = 0
        self.snapshot_bytes = 0
        self.snapshot_cost_s = 0.0  # CPU seconds of the last commit's snapshots
        self.snapshot_cpu_s = 0.0  # CPU seconds of every snapshot so far (the stop line; sizing reads it)
        self.largest_snapshot = 0  # bytes of the largest task snapshot written (before any split)
        self.longest_txn_s = 0.0  # wall seconds from a transaction's begin to its commit, worst seen
        self._txn_since: float | None = None  # when the open transaction began (monotonic)
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()
        self._offsets: dict[TopicPartition, int] = {}  # next offset to commit, per partition
        self._answer: tuple[int | None, float] = (None, 0.0)  # newest fetch-response stamp, when it changed
        self.stale_after_s = 3.0
        self._next_census = float("-inf")  # when detector state is next counted for /metrics

    def stop(self) -> None:
        """Ask the loop to finish its current batch and return."""
        self._stopping.set()

    def task(self, number: int) -> Task:
        """The task of a partition number (built fresh if it was not assigned: tests, tools)."""
        found = self.tasks.get(number)
        if found is None:
            found = self.tasks[number] = self.factory.build(number)
        return found

    async def run(self) -> None:
        """Run until `stop()`."""
        consumer = kafka_io.aio_consumer(self.broker, group_id=self.group_id, max_partition_fetch_bytes=8 << 20,
                                         fetch_max_bytes=64 << 20,
                                         partition_assignment_strategy=(RangePartitionAssignor,))
        txn_id = f"{self.group_id}/{self.instance}" if self.exactly_once else None
        producer = kafka_io.aio_producer(self.broker, transactional_id=txn_id)
        await producer.start()
        await consumer.start()
        table = asyncio.ensure_future(self.factory.table.follow(self.broker, self.topics, self._stopping))
        failed = False  # a cancellation (shutdown) is no failure: what was processed is committed
        try:
            if self.exactly_once:
                # Fence a killed predecessor now: its open transaction (outputs, snapshots, offsets) is
                # aborted, so our group's offsets and the changelog are stable before we read them.
                await producer.begin_transaction()
                await producer.commit_transaction()
            names = [self.topics.name(t) for t in (*INPUT_TOPICS, "node-events")]
            consumer.subscribe(names, listener=_Listener(self, producer))
            await self._loop(consumer, producer)
        except ProducerFatal:
            failed = True
            raise
        except Exception as exc:
            failed = True  # fenced, or a commit failed: the restart resumes from the last commit
            _check_alive(producer, self.exactly_once, cause=exc)
            raise
        finally:
            self._stopping.set()
            try:
                async with self._lock:
                    if failed:
                        await self._abandon(producer)
                    else:
                        await self._flush(consumer, producer)
            finally:
                await consumer.stop()
                await producer.stop()
                await asyncio.gather(table, return_exceptions=True)
                log.info("stopped: %d snapshots (%.3f s of CPU), the largest task snapshot %d bytes, "
                         "the longest transaction %.3f s", self.snapshots, self.snapshot_cpu_s, self.largest_snapshot,
                         self.longest_txn_s)

    async def _loop(self, consumer: AIOKafkaConsumer, producer: AIOKafkaProducer) -> None:
        next_lag = next_commit = next_check = time.monotonic()
        while not self._stopping.is_set():
            _check_alive(producer, self.exactly_once)
            fetched = await consumer.getmany(timeout_ms=int(self.poll_timeout_s * 1000), max_records=self.max_records)
            now = time.monotonic()
            async with self._lock:
                if now >= next_check or not fetched:
                    await self._observe_broker(consumer)
                    next_check = now + 0.25
                outputs = self._process(fetched) if fetched else self._advance()
                self._pace(consumer)
                await self._publish(producer, outputs)
                due = now >= next_commit or (self._txn_since is not None and
                                             time.monotonic() - self._txn_since >= TXN_BUDGET_S)
                if due and (self._offsets or any(t.dirty for t in self.tasks.values())):
                    await self._flush(consumer, producer)
                    # Snapshots cost CPU in proportion to the state: commit at most as often as
                    # keeps them within SNAPSHOT_BUDGET of the loop's time (rate-limited, consistent),
                    # and never later than the transaction's budget allows.
                    stretch = max(self.commit_interval_s, self.snapshot_cost_s / SNAPSHOT_BUDGET)
                    next_commit = now + min(stretch, TXN_BUDGET_S / 2)
            if self.metrics is not None and now >= next_lag:
                next_lag = now + self.lag_interval_s
                self.metrics.refresh_lag(lambda t, p: _highwater(consumer, TopicPartition(t, p)))
                self.count_state(now)

    async def _observe_broker(self, consumer: AIOKafkaConsumer) -> None:
        """Tell each task's clock which partitions are caught up and whether the broker answers.

        The broker answers while some fetch response arrived within the stale
        window (aiokafka stamps every partition of a response); an outage stops
        them all. Per partition, "caught up" is its position against the end
        offset of the last response.
        """
        now = time.monotonic()
        newest = None
        for tp in list(consumer.assignment()):
            task = self.tasks.get(tp.partition)
            try:
                stamp = consumer.last_poll_timestamp(tp)
                if stamp is None or task is None:
                    continue
                newest = stamp if newest is None else max(newest, stamp)
                end = consumer.last_stable_offset(tp)
                end = consumer.highwater(tp) if end is None else end
                caught_up = end is not None and await consumer.position(tp) >= end
            except (AssertionError, IllegalStateError):  # revoked by a rebalance meanwhile
                continue
            task.clock.observe_fetch(tp, caught_up=caught_up)
        seen, since = self._answer
        if newest is not None and newest != seen:
            self._answer = (newest, now)
            since = now
        fresh = newest is not None and now - since <= self.stale_after_s
        for task in self.tasks.values():
            task.clock.answered(fresh)


    def _pace(self, consumer: AIOKafkaConsumer) -> None:
        """Pause the partitions that run ahead of a task with too many records waiting; resume them.

        aiokafka drops what it prefetched for a paused partition and fetches
        again from its position on resume, so nothing is skipped, and the
        offsets committed are those of records already in the buffer.
        """
        rule = self.backpressure
        if rule is None:
            return
        waiting = paused = 0
        for task in self.tasks.values():
            clock = task.clock
            held, stopped = len(task.processor.buffer), clock.paused()
            plan = rule.plan(held, {tp: p.watermark for tp, p in clock.parts.items()}, clock.watermark(),
                             stopped) if held >= rule.low or stopped else KEEP
            if plan is not KEEP:
                self._apply(consumer, task, plan, held, bool(stopped))
            waiting += held
            paused += len(clock.paused()) if plan is not KEEP else len(stopped)
        if self.metrics is not None:
            self.metrics.waiting_records.set(waiting)
            self.metrics.paused_partitions.set(paused)

    def _apply(self, consumer: AIOKafkaConsumer, task: Task, plan: Plan, waiting: int, was_paused: bool) -> None:
        try:
            if plan.pause:
                consumer.pause(*plan.pause)
            if plan.resume:
                consumer.resume(*plan.resume)
        except IllegalStateError:  # revoked by a rebalance meanwhile: the new assignment starts unpaused
            return
        for tp in plan.pause:
            task.clock.pause(tp)
        for tp in plan.resume:
            task.clock.pause(tp, paused=False)
        now_paused = bool(task.clock.paused())
        if now_paused and not was_paused:
            self.pauses += 1
            log.info("task %d: %d records wait for event time; pausing %d partitions that run ahead of it",
                     task.number, waiting, len(plan.pause))
        elif was_paused and not now_paused:
            log.info("task %d: %d records wait; every partition resumed", task.number, waiting)
        else:
            log.debug("task %d: %d records wait; paused %s, resumed %s", task.number, waiting,
                      sorted(map(str, plan.pause)), sorted(map(str, plan.resume)))

    def _advance(self) -> list[OutMessage]:
        """No message: move each task's time as far as its event clock allows."""
        outputs: list[OutMessage] = []
        for task in self.tasks.values():
            found = task.processor.advance_to(task.clock)
            if found:
                outputs.extend(found)
                task.dirty = True
        if self.metrics is not None and self.tasks:
            watermark = max(t.processor.pipeline.watermark for t in self.tasks.values())
            if watermark > float("-inf"):
                self.metrics.watermark.set(watermark)
        return outputs

    def _process(self, fetched: Fetched) -> list[OutMessage]:
        started = time.perf_counter()
        by_task: dict[int, Fetched] = {}
        for tp, records in fetched.items():
            if records and tp.partition in self.tasks:  # a revoked partition's last fetch is not ours
                by_task.setdefault(tp.partition, {})[tp] = records
                self._offsets[tp] = records[-1].offset + 1
        outputs: list[OutMessage] = []
        for number, part in by_task.items():
            task = self.tasks[number]
            outputs.extend(task.processor.process_fetch(part, task.clock))
            task.dirty = True
            if self.metrics is not None:
                for records in part.values():
                    watermark = task.processor.pipeline.watermark
                    self.metrics.observe_batch(records, time.perf_counter() - started, watermark)
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

    async def _begin(self, producer: AIOKafkaProducer) -> None:
        _check_alive(producer, self.exactly_once)
        if not producer._txn_manager.is_in_transaction():  # noqa: SLF001 - aiokafka has no public getter
            await producer.begin_transaction()
            self._txn_since = time.monotonic()

    async def _abandon(self, producer: AIOKafkaProducer) -> None:
        """After a failure: abort what is open if the producer still can, never commit.

        A fenced producer can neither commit nor abort (aiokafka raises an
        invalid state transition); its open transaction is aborted by the
        broker or by the instance that fenced it, and the restart restores
        the last committed snapshot with its offsets.
        """
        self._offsets, self._txn_since = {}, None
        if not self.exactly_once or not producer._txn_manager.is_in_transaction():  # noqa: SLF001
            return
        try:
            await producer.abort_transaction()
        except Exception as exc:  # fenced or broken: nothing more to do here
            log.warning("could not abort the open transaction (%s); the broker's timeout will", exc)

    async def _flush(self, consumer: AIOKafkaConsumer | None, producer: AIOKafkaProducer) -> None:
        """Commit what was processed: outputs, snapshots of changed tasks, and input offsets, together."""
        offsets, self._offsets = self._offsets, {}
        if not self.exactly_once:
            if offsets and consumer is not None:
                await producer.flush()
                await _commit_quietly(consumer, offsets)
            return
        dirty = [t for t in self.tasks.values() if t.dirty]
        if not offsets and not dirty and not producer._txn_manager.is_in_transaction():  # noqa: SLF001
            return
        await self._begin(producer)
        cost = 0.0
        for task in dirty:
            started = time.process_time()
            blob, fast = snapshot.dump_counted(snapshot.Snapshot(
                task.processor.pipeline, dict(task.clock.parts), task.processor.buffer.entries(),
                skew=task.processor.skew))
            spent = time.process_time() - started
            cost += spent
            if self.metrics is not None:
                self.metrics.observe_snapshot(spent, len(blob), fast=fast)
            for key, value in snapshot.pieces(task.key(self.group_id), blob):  # split when big
                await producer.send(self.topics.name("worker-state"), value, key=key)
            self.snapshots, self.snapshot_bytes, task.dirty = self.snapshots + 1, len(blob), False
            self.largest_snapshot = max(self.largest_snapshot, len(blob))
        if dirty:
            self.snapshot_cost_s = cost
            self.snapshot_cpu_s += cost
        if offsets:
            await producer.send_offsets_to_transaction(offsets, self.group_id)
        await producer.commit_transaction()
        if self._txn_since is not None:
            self.longest_txn_s = max(self.longest_txn_s, time.monotonic() - self._txn_since)
            self._txn_since = None


    def count_state(self, now: float) -> None:
        """Count the tasks' detector state for /metrics when it is due, so that a scrape never walks it.

        Counting is O(state) (106 ms of CPU at 4,096 nodes): it runs at most every
        `lag_interval_s`, and less often where it would take over CENSUS_BUDGET of the loop.
        """
        census = self.metrics.census if self.metrics is not None else None
        if census is None or now < self._next_census:
            return
        started = time.process_time()
        for task in list(self.tasks.values()):
            census.count(task.number, task.processor.pipeline.detectors)
        census.retain(self.tasks)
        self._next_census = now + max(self.lag_interval_s, (time.process_time() - started) / CENSUS_BUDGET)


def _check_alive(producer: AIOKafkaProducer, exactly_once: bool, cause: BaseException | None = None) -> None:
    """Raise ProducerFatal when the transactional producer is fenced or failed for good.

    A fence can surface as any error of the await that meets it: aiokafka's
    sender may die on the fenced produce response and wrap it as "Unexpected
    error during batch delivery", marking the transaction fatal. With `cause`
    (the error the loop stopped on) the crash then names the fatal producer,
    which is what a supervisor and an operator need to read, chained to it.
    """
    if exactly_once and producer._txn_manager.is_fatal_error():  # noqa: SLF001 - aiokafka has no public getter
        raise ProducerFatal("the transactional producer is fenced or failed; stopping: the restart resumes "
                            "from the last commit") from cause


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Commit before partitions move; tasks follow the assignment, restored from the changelog."""

    def __init__(self, loop: BatchLoop, producer: AIOKafkaProducer) -> None:
        self.loop, self.producer = loop, producer

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        loop = self.loop
        loop.ready = False
        async with loop._lock:  # noqa: SLF001 - the loop's own helper
            try:
                await loop._flush(None, self.producer)  # noqa: SLF001
            except Exception as exc:  # abort: the next owner redoes this work from the last commit
                log.warning("commit before a rebalance failed (%s); aborting the open transaction", exc)
                await loop._abandon(self.producer)  # noqa: SLF001
            for number in {tp.partition for tp in revoked}:
                loop.tasks.pop(number, None)  # its state is on the changelog; the next owner restores it

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        # Under the loop's lock: the batch loop must not process into a task that is being
        # replaced by its restored state (that state would be lost with its offsets committed).
        async with self.loop._lock:  # noqa: SLF001 - the loop's own helper
            await self._assign(assigned)

    async def _assign(self, assigned: list[TopicPartition]) -> None:
        loop = self.loop
        numbers = {tp.partition for tp in assigned}
        new = sorted(numbers - set(loop.tasks))
        snaps = await read_snapshots(loop.broker, loop.topics, [task_key(loop.group_id, n) for n in new]) \
            if loop.exactly_once and new else {}
        for number in new:
            snap = snaps.get(task_key(loop.group_id, number))
            loop.tasks[number] = loop.factory.build(number, snap)
            log.info("task %d %s", number, "restored from the changelog" if snap else "started fresh")
        for number in set(loop.tasks) - numbers:
            loop.tasks.pop(number)
        for tp in assigned:
            clock = loop.tasks[tp.partition].clock
            if tp not in clock.parts:
                clock.assign(tp)
            clock.pause(tp, paused=False)  # aiokafka's new assignment fetches every partition
        for task in loop.tasks.values():
            for tp in set(task.clock.parts) - set(assigned):
                task.clock.revoke(tp)
        loop.ready = True


def _highwater(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int | None:
    """The partition's end offset; None when unknown or no longer ours (a rebalance moved it)."""
    try:
        return consumer.highwater(tp)
    except (AssertionError, IllegalStateError):
        return None


async def _commit_quietly(consumer: AIOKafkaConsumer, offsets: dict[TopicPartition, int]) -> None:
    try:
        await consumer.commit(offsets)
    except Exception as exc:  # shutting down or rebalancing: the next owner re-reads from the last commit
        log.warning("offset commit failed (%s); those messages will be redelivered", exc)

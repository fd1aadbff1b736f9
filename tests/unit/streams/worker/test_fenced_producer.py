"""A fenced transactional producer stops the batch loop; it never goes on as a zombie (issue 21, item 4).

The fence can first be met in the rebalance listener: a successor with the
same transactional id starts (fencing us) and then joins the group, so our
revoke commit is the first request to fail. The listener aborts what it can
and goes on, as it must for an ordinary failed commit; before this test the
loop then went on too, holding a task whose work it could never commit, and
its next commit failed with aiokafka's "Invalid state transition". Here the
producer is aiokafka's own, with its own transaction manager driven into the
state a fence leaves (no broker: the fencing itself is tested against the real
broker in tests/integration/streams/worker/test_fenced_worker.py).
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError, ProducerFenced
from aiokafka.structs import ConsumerRecord, TopicPartition

from trainguard.detectors.nan import NanDetector
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas.codec import encode
from trainguard.schemas.records import TrainingStep
from trainguard.schemas.topics import Topics
from trainguard.settings import BrokerSettings
from trainguard.streams.worker.batch_loop import BatchLoop, ProducerFatal, _check_alive, _Listener
from trainguard.streams.worker.tasks import NodeJobTable, TaskFactory
from trainguard.streams.worker.watermark import EventClock

TOPICS = Topics("u.")
TP = TopicPartition("u.training", 1)


def _loop() -> BatchLoop:
    factory = TaskFactory(topics=TOPICS, partitions=2, new_pipeline=lambda: DetectionPipeline([NanDetector()]),
                          new_clock=EventClock, table=NodeJobTable())
    loop = BatchLoop(broker=BrokerSettings(bootstrap="unused:9092"), topics=TOPICS, factory=factory, group_id="g",
                     exactly_once=True)
    value = encode(TrainingStep(ts=101.0, job="j2", rank=0, node="n0", step=1, loss=2.0))
    record = ConsumerRecord(topic=TP.topic, partition=1, offset=0, timestamp=200_000, timestamp_type=0, key=b"j2",
                            value=value, checksum=None, serialized_key_size=2, serialized_value_size=len(value),
                            headers=())
    loop.task(1)  # assigned
    loop._process({TP: [record]})  # an offset to commit and a dirty task: the revoke commit has work
    return loop


def _fenced(producer: AIOKafkaProducer) -> None:
    txn = producer._txn_manager
    txn.set_pid_and_epoch(7, 0)  # initialised: READY
    txn.begin_transaction()
    txn.fatal_error(ProducerFenced())  # what aiokafka's sender does when the coordinator says fenced
    txn._transaction_waiter.exception()  # retrieved: no "never retrieved" warning at teardown


class _NoConsumer:
    """A consumer the loop must not reach: a fenced loop stops before it fetches again."""

    async def getmany(self, **_: object) -> dict[TopicPartition, list[object]]:
        raise AssertionError("a fenced loop fetched again")


def test_a_fence_met_in_the_revoke_listener_stops_the_loop_before_it_fetches_again() -> None:
    async def scenario() -> None:
        loop = _loop()
        producer = AIOKafkaProducer(bootstrap_servers="unused:9092", transactional_id="g/w")
        _fenced(producer)
        assert loop._offsets and loop.tasks[1].dirty
        await _Listener(loop, producer).on_partitions_revoked([TP])  # aborts what it can, does not raise
        assert loop.tasks == {} and loop._offsets == {}  # nothing kept for a commit that cannot happen
        with pytest.raises(ProducerFatal):
            await loop._loop(_NoConsumer(), producer)  # type: ignore[arg-type]
        await producer.stop()

    asyncio.run(scenario())


def test_a_fenced_producer_is_never_asked_to_begin_a_transaction() -> None:
    async def scenario() -> None:
        loop = _loop()
        producer = AIOKafkaProducer(bootstrap_servers="unused:9092", transactional_id="g/w")
        _fenced(producer)
        with pytest.raises(ProducerFatal, match="fenced or failed"):  # not aiokafka's invalid state transition
            await loop._flush(None, producer)
        await loop._abandon(producer)  # nothing open to abort: no error either
        await producer.stop()

    asyncio.run(scenario())


def test_a_fence_that_surfaces_as_a_dead_sender_is_named_as_the_fatal_producer() -> None:
    """aiokafka's sender can die on the fenced produce response: the await that meets it raises
    KafkaError("Unexpected error during batch delivery"), the transaction is marked fatal, and the
    worker's crash must still name the fatal producer, chained to what was raised (CI met this)."""
    async def scenario() -> None:
        producer = AIOKafkaProducer(bootstrap_servers="unused:9092", transactional_id="g/w")
        _fenced(producer)
        raised = KafkaError("Unexpected error during batch delivery")
        with pytest.raises(ProducerFatal, match="fenced or failed") as stopped:
            _check_alive(producer, True, cause=raised)
        assert stopped.value.__cause__ is raised
        _check_alive(AIOKafkaProducer(bootstrap_servers="unused:9092"), False, cause=raised)  # at-least-once: as is
        await producer.stop()

    asyncio.run(scenario())

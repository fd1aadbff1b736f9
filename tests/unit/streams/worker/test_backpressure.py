"""Backpressure of the event-time buffer: the pure rule, the clock's paused partitions, the loop's pacing."""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest
from aiokafka.structs import TopicPartition

from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas.topics import Topics
from trainguard.settings import BrokerSettings
from trainguard.streams.worker.backpressure import KEEP, Backpressure
from trainguard.streams.worker.batch_loop import BatchLoop
from trainguard.streams.worker.metrics import WorkerMetrics
from trainguard.streams.worker.tasks import NodeJobTable, TaskFactory
from trainguard.streams.worker.watermark import EventClock

RULE = Backpressure.at(100)
TIMES = {"gpu": 10.0, "training": 50.0, "rdma": 40.0, "logs": 10.0}


def test_under_the_high_mark_nothing_is_paused() -> None:
    assert RULE.plan(99, TIMES, watermark=10.0, paused=set()) is KEEP


def test_at_the_high_mark_the_partitions_ahead_of_time_are_paused() -> None:
    plan = RULE.plan(100, TIMES, watermark=10.0, paused=set())
    assert plan.pause == {"training", "rdma"} and not plan.resume


def test_between_the_marks_a_paused_partition_stays_paused_until_time_reaches_it() -> None:
    paused = {"training", "rdma"}
    assert RULE.plan(60, TIMES, watermark=10.0, paused=paused) is KEEP
    plan = RULE.plan(60, TIMES, watermark=40.0, paused=paused)  # time reached rdma
    assert plan.resume == {"rdma"} and not plan.pause


def test_under_the_low_mark_every_paused_partition_resumes() -> None:
    plan = RULE.plan(49, TIMES, watermark=10.0, paused={"training", "rdma"})
    assert plan.resume == {"training", "rdma"} and not plan.pause


def test_the_partition_time_waits_for_is_never_paused() -> None:
    """Whatever the counts, a partition at or behind the watermark keeps fetching (no deadlock)."""
    rng = random.Random(7)
    for _ in range(2000):
        times = {f"p{i}": rng.choice([float("-inf"), *range(10)]) for i in range(rng.randint(1, 6))}
        watermark = min(times.values())
        paused = {tp for tp in times if rng.random() < 0.5}
        plan = RULE.plan(rng.randint(0, 300), times, watermark, paused)
        now_paused = (paused - plan.resume) | plan.pause
        assert not any(times[tp] <= watermark for tp in now_paused), (times, paused, plan)
        assert not plan.pause & plan.resume


def test_marks_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="low < high"):
        Backpressure(high=10, low=10)


def _clock() -> tuple[EventClock[str], list[float]]:
    now = [0.0]
    return EventClock(idle_after_s=5.0, clock=lambda: now[0]), now


def test_a_paused_partition_is_never_set_aside_as_idle() -> None:
    """Were it idle, silence would move time past records that still wait on the broker."""
    clock, now = _clock()
    for tp, ts in (("gpu", 100.0), ("training", 120.0)):
        clock.assign(tp)
        clock.touch(tp)
        clock.admit(tp, ts, 0, "r")
        clock.observe_fetch(tp, caught_up=True)
    clock.answered(True)
    clock.pause("training")
    now[0] = 60.0  # both look caught up and quiet; training only because it was paused
    clock.answered(True)
    assert clock.watermark() == 120.0  # gpu set aside; training holds time at its own, no wall-clock silence
    clock.pause("training", paused=False)
    assert clock.watermark() == 180.0  # resumed and still silent: idle, and silence counts again


def test_the_paused_flag_is_not_in_a_snapshot_and_a_new_assignment_starts_unpaused() -> None:
    clock, _ = _clock()
    clock.assign("training")
    clock.pause("training")
    assert clock.paused() == {"training"}
    restored = pickle.loads(pickle.dumps(clock.parts["training"]))
    assert restored.paused is False
    clock.assign("training", clock.parts["training"])
    assert clock.paused() == set()


class FakeConsumer:
    """The two consumer calls the pacing makes, recorded (aiokafka's own are exercised on the real
    broker in tests/integration/streams/worker/test_backpressure_backlog.py)."""

    def __init__(self) -> None:
        self.paused: set[Any] = set()

    def pause(self, *tps: Any) -> None:
        self.paused.update(tps)

    def resume(self, *tps: Any) -> None:
        self.paused.difference_update(tps)


def test_the_loop_pauses_and_resumes_the_consumer_and_exports_the_gauges() -> None:
    topics = Topics("u.")
    factory = TaskFactory(topics=topics, partitions=1, new_pipeline=lambda: DetectionPipeline([]),
                          new_clock=EventClock, table=NodeJobTable())
    loop = BatchLoop(broker=BrokerSettings(bootstrap="unused:9092"), topics=topics, factory=factory, group_id="g",
                     metrics=WorkerMetrics(stats=factory.stats, topics=topics), backpressure=Backpressure.at(10))
    task = loop.task(0)
    gpu, training = TopicPartition("u.gpu", 0), TopicPartition("u.training", 0)
    for tp in (gpu, training):
        task.clock.assign(tp)
    task.clock.admit(gpu, 5.0, 0, "g")
    task.clock.admit(training, 30.0, 0, "t")
    task.processor.buffer.add([(float(ts), object()) for ts in range(6, 18)])  # 12 records wait past time 5
    consumer = FakeConsumer()
    loop._pace(consumer)  # type: ignore[arg-type]
    assert consumer.paused == {training} and task.clock.paused() == {training} and loop.pauses == 1
    assert loop.metrics is not None
    assert loop.metrics.value("trainguard_worker_waiting_records") == 12
    assert loop.metrics.value("trainguard_worker_paused_partitions") == 1
    task.processor.buffer.release(14.0)  # time moved: 3 wait, under the low mark of 5
    loop._pace(consumer)  # type: ignore[arg-type]
    assert consumer.paused == set() and task.clock.paused() == set()
    assert loop.metrics.value("trainguard_worker_paused_partitions") == 0


def test_without_a_rule_the_loop_never_pauses() -> None:
    topics = Topics("u.")
    factory = TaskFactory(topics=topics, partitions=1, new_pipeline=lambda: DetectionPipeline([]),
                          new_clock=EventClock, table=NodeJobTable())
    loop = BatchLoop(broker=BrokerSettings(bootstrap="unused:9092"), topics=topics, factory=factory, group_id="g")
    loop.task(0).processor.buffer.add([(float(ts), object()) for ts in range(10**4)])
    consumer = FakeConsumer()
    loop._pace(consumer)  # type: ignore[arg-type]
    assert consumer.paused == set()

"""The batch hot path's pure part: fetched records in, outputs and metrics out (no broker)."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord, TopicPartition

from trainguard.detectors.nan import NanDetector
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas.codec import decode, encode
from trainguard.schemas.records import NodeGpuSample, TrainingStep
from trainguard.schemas.topics import Topics
from trainguard.settings import BrokerSettings
from trainguard.streams.worker.batch_loop import BatchLoop
from trainguard.streams.worker.metrics import StateCensus, WorkerMetrics
from trainguard.streams.worker.tasks import NodeJobTable, TaskFactory, partition_of
from trainguard.streams.worker.watermark import EventClock

TOPICS = Topics("u.")


def _record(offset: int, value: bytes, topic: str = "u.training") -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(topic=topic, partition=1, offset=offset, timestamp=200_000, timestamp_type=0, key=b"j2",
                          value=value, checksum=None, serialized_key_size=1, serialized_value_size=len(value),
                          headers=())


def _step(step: int, loss: float | str) -> bytes:
    return encode(TrainingStep(ts=100.0 + step, job="j2", rank=0, node="n0", step=step, loss=loss))  # type: ignore[arg-type]


def test_a_fetch_is_processed_in_order_with_outputs_and_metrics() -> None:
    factory = TaskFactory(topics=TOPICS, partitions=2, new_pipeline=lambda: DetectionPipeline([NanDetector()]),
                          new_clock=EventClock, table=NodeJobTable())
    metrics = WorkerMetrics(stats=factory.stats, topics=TOPICS)
    loop = BatchLoop(broker=BrokerSettings(bootstrap="unused:9092"), topics=TOPICS, factory=factory, group_id="g",
                     metrics=metrics)
    proc = loop.task(1).processor
    # the NaN detector reports once event time has moved past its settle time (the step at ts 105)
    fetched = {TopicPartition("u.training", 1): [_record(0, _step(1, 2.0)), _record(1, _step(2, "nan")),
                                                 _record(2, b"not json"), _record(3, _step(5, 2.0))]}
    outputs = loop._process(fetched)
    topics = [o.topic for o in outputs]
    assert topics == ["u.dead-letter", "u.anomalies", "u.incidents", "u.node-jobs"]  # n0 runs j2 (its job hashes to task 1): shared
    assert decode(outputs[1].value).step == 2
    assert proc.stats.processed == 4 and proc.stats.dead_lettered == 1
    assert metrics.value("trainguard_worker_batch_seconds_count") == 1
    metrics.refresh_lag(lambda t, p: 10)
    assert metrics.value("trainguard_worker_consumer_lag", topic="training", partition="1") == 6


def test_a_jobless_node_sample_is_forwarded_to_its_jobs_task() -> None:
    factory = TaskFactory(topics=TOPICS, partitions=4, new_pipeline=lambda: DetectionPipeline([NanDetector()]),
                          new_clock=EventClock, table=NodeJobTable())
    job = next(j for j in (f"job{i}" for i in range(50)) if partition_of(j, 4) != 0)
    factory.table.jobs["gpu-7"] = job
    task = factory.build(0)
    sample = encode(NodeGpuSample(ts=150.0, node="gpu-7"))
    here = encode(NodeGpuSample(ts=150.0, node="spare"))
    rec = ConsumerRecord(topic="u.gpu", partition=0, offset=0, timestamp=200_000, timestamp_type=0, key=b"gpu-7",
                         value=sample, checksum=None, serialized_key_size=1, serialized_value_size=1, headers=())
    other = ConsumerRecord(topic="u.gpu", partition=0, offset=1, timestamp=200_000, timestamp_type=0, key=b"spare",
                           value=here, checksum=None, serialized_key_size=1, serialized_value_size=1, headers=())
    out = task.processor.process_fetch({TopicPartition("u.gpu", 0): [rec, other]}, task.clock)
    assert [(o.topic, o.key, o.value) for o in out] == [("u.node-events", job.encode(), sample)]


def test_detector_state_is_counted_for_metrics_when_due_never_per_scrape_and_revoked_tasks_drop_out() -> None:
    factory = TaskFactory(topics=TOPICS, partitions=2, new_pipeline=lambda: DetectionPipeline([NanDetector()]),
                          new_clock=EventClock, table=NodeJobTable())
    metrics = WorkerMetrics(stats=factory.stats, topics=TOPICS, census=StateCensus())
    loop = BatchLoop(broker=BrokerSettings(bootstrap="unused:9092"), topics=TOPICS, factory=factory, group_id="g",
                     metrics=metrics, lag_interval_s=5.0)
    loop.task(0), loop.task(1)
    loop._process({TopicPartition("u.training", 1): [_record(0, _step(1, 2.0))]})
    state = "trainguard_worker_detector_state_entries"
    assert metrics.value(state, detector="nan") is None  # a scrape does not walk; nothing counted yet
    loop.count_state(100.0)
    counted = metrics.value(state, detector="nan")
    assert counted is not None and counted > 0
    loop._process({TopicPartition("u.training", 1): [_record(1, _step(2, 2.0))]})
    loop.count_state(104.0)  # not due: the gauge stays as counted
    assert metrics.value(state, detector="nan") == counted
    loop.count_state(105.0)
    grown = metrics.value(state, detector="nan")
    assert grown is not None and grown > counted
    loop.tasks.pop(1)  # revoked
    loop.count_state(110.0)
    assert metrics.value(state, detector="nan") == 0

"""A record whose job hashes to another task is sent on to that task, counted; never processed where it landed."""

from __future__ import annotations

from trainguard.detectors.hang import HangDetector
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas import Codec, DeadLetter, TrainingStep
from trainguard.schemas.topics import Topics
from trainguard.streams.worker.metrics import WorkerMetrics
from trainguard.streams.worker.processor import MessageProcessor, RawMessage, Routing
from trainguard.streams.worker.tasks import partition_of
from trainguard.streams.worker.watermark import EventClock

TOPICS = Topics("t.")


def _jobs_of(task: int, n: int) -> list[str]:
    return [j for j in (f"job-{i}" for i in range(100)) if partition_of(j, 2) == task][:n]


def _processor(task: int) -> tuple[MessageProcessor, HangDetector]:
    hang = HangDetector()
    routing = Routing(task=task, job_of=lambda node: "", task_of=lambda job: partition_of(job, 2))
    return MessageProcessor(DetectionPipeline([hang]), TOPICS, routing=routing), hang


def _message(topic: str, job: str, key: str, offset: int) -> RawMessage:
    step = TrainingStep(ts=1.7e9 + offset, job=job, rank=0, node="n0", step=offset, loss=1.0)
    return RawMessage(topic=TOPICS.name(topic), value=Codec().encode(step), key=key.encode(), partition=0,
                      offset=offset, timestamp=int(step.ts * 1000))


def test_a_misrouted_record_is_rekeyed_to_its_jobs_task_and_counted() -> None:
    (here,), (there,) = _jobs_of(0, 1), _jobs_of(1, 1)
    processor, hang = _processor(0)
    fetched = {("training", 0): [_message("training", here, here, 1), _message("training", there, here, 2)]}
    out = processor.process_fetch(fetched, EventClock())  # type: ignore[arg-type]
    forwarded = [m for m in out if m.topic == TOPICS.name("node-events")]
    assert [(m.key, Codec().decode(m.value).job) for m in forwarded] == [(there.encode(), there)]
    assert processor.stats.rerouted == 1 and processor.stats.dead_lettered == 0
    assert set(hang._jobs.keys()) == {here}  # the wrong task never learned the other job
    metrics = WorkerMetrics(stats=processor.stats, topics=TOPICS, state_sizes=None)
    assert metrics.value("trainguard_worker_rerouted_total") == 1.0


def test_the_rekeyed_record_is_processed_by_its_own_task() -> None:
    (there,) = _jobs_of(1, 1)
    processor, hang = _processor(1)
    out = processor.process_fetch({("node-events", 1): [_message("node-events", there, there, 3)]},
                                  EventClock())  # type: ignore[arg-type]
    assert [m.topic for m in out] == [TOPICS.name("node-jobs")]  # it learned where n0 runs, and sent nothing on
    assert there in hang._jobs and processor.stats.rerouted == 0


def test_a_record_misrouted_twice_is_dead_lettered_not_sent_round_again() -> None:
    (there,) = _jobs_of(1, 1)
    processor, _ = _processor(0)
    out = processor.process_fetch({("node-events", 0): [_message("node-events", there, there, 4)]},
                                  EventClock())  # type: ignore[arg-type]
    (letter,) = [Codec().decode(m.value) for m in out]
    assert isinstance(letter, DeadLetter) and letter.reason.startswith("misrouted")

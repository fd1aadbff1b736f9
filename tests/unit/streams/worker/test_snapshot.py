"""A worker's snapshot (streams.worker.snapshot) restores every detector exactly: the same anomalies and incidents follow.

The pipeline runs the default detectors (built-ins) plus the sample plug-in, on
the synthetic fleet with every fault kind; the snapshot is taken mid-stream with
records still buffered, NaN steps among them (they travel as msgpack floats).
"""

from __future__ import annotations

import math
import pickle
import pickletools
import zlib

import lz4.frame
import msgspec
import pytest

from trainguard.detectors.base import Detector
from trainguard.detectors.dispatch import on
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.detectors.registry import build
from trainguard.detectors.settings import DetectorSettings
from trainguard.detectors.synthetic import mixed_stream
from trainguard.schemas.records import PhaseChange, Record, TrainingStep
from trainguard.streams.worker.snapshot import Snapshot, dump, load
from trainguard.streams.worker.watermark import PartitionTime


def _pipeline() -> DetectionPipeline:
    pipeline = DetectionPipeline.from_settings(DetectorSettings())
    plugin = build("sample_long_step", "long", {})
    return DetectionPipeline([*pipeline.detectors, plugin], pipeline.correlator)


def _drive(pipeline: DetectionPipeline, records: list[Record]) -> list[bytes]:
    out: list[bytes] = []
    for record in records:
        anomalies, incidents = pipeline.process(record)
        out += [msgspec.json.encode(x) for x in (*anomalies, *incidents)]
    return out


@pytest.mark.parametrize("at", [0.25, 0.5, 0.75, 0.9])
def test_restoring_a_snapshot_mid_stream_gives_the_same_findings(at: float) -> None:
    stream = mixed_stream()
    cut = int(len(stream) * at)
    whole = _drive(_pipeline(), stream)
    assert len(whole) > 10
    first = _pipeline()
    head = _drive(first, stream[:cut])
    nan_step = TrainingStep(ts=stream[cut].ts, job="j", rank=1, node="n", step=9, loss=float("nan"), grad_norm=2.0)
    snap = load(dump(Snapshot(first, {0: PartitionTime()}, [(nan_step.ts, 0, nan_step)])))
    assert snap is not None
    assert head + _drive(snap.pipeline, stream[cut:]) == whole
    assert {type(d).__name__ for d in snap.pipeline.detectors} >= {"HangDetector", "NanDetector", "LongStepDetector"}
    (_, _, buffered), = snap.buffer
    assert math.isnan(buffered.loss) and buffered.grad_norm == 2.0


def test_a_snapshot_from_before_the_one_package_is_dropped_not_fatal() -> None:
    """Snapshots pickled before the rooms moved under `trainguard.` name class paths such as
    `streams.worker.snapshot.Snapshot`, which an installed trainguard cannot import: such a snapshot is
    read as none, so the worker starts fresh from its committed offsets instead of crash-looping."""
    blob = pickle.dumps(Snapshot(_pipeline(), {0: PartitionTime()}, []), protocol=0)
    assert b"trainguard.streams.worker.snapshot" in blob
    old = blob.replace(b"trainguard.streams.", b"tg_pre_one_package_streams.").replace(b"trainguard.detectors.",
                                                                                        b"tg_pre_one_package_detectors.")
    assert load(zlib.compress(old, 1)) is None
    assert load(zlib.compress(blob, 1)) is not None  # the same bytes under today's paths restore


def test_snapshots_are_lz4_and_a_zlib_one_from_before_restores_to_the_same_findings() -> None:
    """Workers upgraded mid-run read the zlib snapshot the old version committed (issue 23 moved to LZ4)."""
    stream = mixed_stream()
    cut = len(stream) // 2
    whole = _drive(_pipeline(), stream)
    first = _pipeline()
    head = _drive(first, stream[:cut])
    blob = dump(Snapshot(first, {0: PartitionTime()}, []))
    assert blob[:4] == b"\x04\x22\x4d\x18"  # an LZ4 frame
    old = zlib.compress(lz4.frame.decompress(blob), 1)  # the same pickle, as the version before wrote it
    for stored in (blob, old):
        snap = load(stored)
        assert snap is not None
        assert head + _drive(snap.pipeline, stream[cut:]) == whole
    assert load(b"\x04\x22\x4d\x18 torn") is None  # a torn frame starts fresh, as a torn zlib stream does


def test_a_worker_task_snapshot_is_a_tree_with_held_records_and_host_clocks() -> None:
    """The snapshot is pickled without pickle's memo (detectors.state_tree), so nothing mutable may be reachable
    twice: not through the detectors, the partitions' clocks with a record held as dated far ahead, the records
    waiting for the watermark, nor the hosts' clock estimates. A held record comes back and is still held."""
    from aiokafka.structs import ConsumerRecord, TopicPartition

    from trainguard.detectors.state_tree import shared_mutables
    from trainguard.schemas.codec import Codec
    from trainguard.schemas.topics import Topics, key_for
    from trainguard.streams.worker.skew import ClockSkewEstimator
    from trainguard.streams.worker.tasks import NodeJobTable, TaskFactory
    from trainguard.streams.worker.watermark import EventClock

    topics, codec = Topics("t."), Codec()
    factory = TaskFactory(topics=topics, partitions=1, new_pipeline=_pipeline, new_clock=lambda: EventClock(
        max_ahead_s=300.0), table=NodeJobTable(), new_skew=ClockSkewEstimator)
    task = factory.build(0)
    stream = mixed_stream()[:3000]
    far = msgspec.structs.replace(stream[-1], ts=stream[-1].ts + 86_400.0)  # a day ahead of the rest: held
    offsets: dict[str, int] = {}

    def fetch(records: list[Record]) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        fetched: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
        for record in records:
            tp = TopicPartition(topics.for_record(record), 0)
            offsets[tp.topic] = offset = offsets.get(tp.topic, -1) + 1
            value = codec.encode(record)
            fetched.setdefault(tp, []).append(ConsumerRecord(
                topic=tp.topic, partition=0, offset=offset, timestamp=int(record.ts * 1000), timestamp_type=0,
                key=key_for(record), value=value, checksum=None, serialized_key_size=0,
                serialized_value_size=len(value), headers=()))
        return fetched

    task.processor.process_fetch(fetch(stream), task.clock)
    task.processor.process_fetch(fetch([far]), task.clock)  # alone, last: nothing comes to confirm or reject it
    held = sum(len(part.held) for part in task.clock.parts.values())
    assert held == 1 and len(task.processor.skew or ()) >= 3
    whole = Snapshot(task.processor.pipeline, dict(task.clock.parts), task.processor.buffer.entries(),
                     skew=task.processor.skew)
    assert shared_mutables(whole) == []
    back = load(dump(whole))
    assert back is not None and sum(len(part.held) for part in back.parts.values()) == 1


class _SharedLosses(Detector):
    """A plug-in that shares one list between two maps and does not declare its state a tree.

    >>> _SharedLosses().state_size()
    0
    """

    def __init__(self) -> None:
        super().__init__(instance="shared")
        self.by_job: dict[str, list[float]] = {}
        self.by_node: dict[str, list[float]] = {}

    @on(TrainingStep)
    def _step(self, record: TrainingStep) -> None:
        losses = self.by_job.setdefault(record.job, [])
        self.by_node.setdefault(record.node, losses)
        losses.append(record.loss)


def _memo_ops(blob: bytes) -> int:
    return sum(op.name == "MEMOIZE" for op, _, _ in pickletools.genops(lz4.frame.decompress(blob)))


def test_the_memo_is_skipped_only_when_every_detector_declares_a_tree() -> None:
    """Built-ins only: no memo in the snapshot. With an undeclared plug-in sharing a list: the memo pickle, and
    the list is still one list after the restore (without the memo it would come back as two)."""
    step = TrainingStep(ts=1.0, job="j", rank=0, node="n0", step=1, loss=2.0)
    builtins = DetectionPipeline.from_settings(DetectorSettings())
    builtins.process(step)
    assert builtins.is_a_tree() and _memo_ops(dump(Snapshot(builtins, {}, []))) == 0
    sharing = DetectionPipeline([*DetectionPipeline.from_settings(DetectorSettings()).detectors, _SharedLosses()])
    sharing.process(step)
    assert not sharing.is_a_tree()
    blob = dump(Snapshot(sharing, {}, []))
    assert _memo_ops(blob) > 0
    back = load(blob)
    assert back is not None
    plugin = back.pipeline.detectors[-1]
    assert isinstance(plugin, _SharedLosses) and plugin.by_job["j"] is plugin.by_node["n0"]


def test_a_task_of_many_paused_jobs_is_still_snapshotted_without_the_memo() -> None:
    """Every job's pause phases and SDC verdicts once lived in frozensets, which CPython's fast mode cannot write
    more than about 50 of (python/cpython#146059): a task of many jobs fell back to the slower memo pickle, or
    before that fallback existed, failed to snapshot at all. Built-in state holds sets now."""
    pipeline = DetectionPipeline.from_settings(DetectorSettings())
    for i in range(200):
        job, node = f"job-{i:03d}", f"node-{i:03d}"
        pipeline.process(TrainingStep(ts=10.0 + i, job=job, rank=0, node=node, step=1, loss=1.0, checksum="aa"))
        pipeline.process(PhaseChange(ts=11.0 + i, job=job, rank=0, node=node, phase="checkpointing", step=1))
    assert _memo_ops(dump(Snapshot(pipeline, {}, []))) == 0

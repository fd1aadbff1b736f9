"""A worker's snapshot (streams.worker.snapshot) restores every detector exactly: the same anomalies and incidents follow.

The pipeline runs the default detectors (built-ins) plus the sample plug-in, on
the synthetic fleet with every fault kind; the snapshot is taken mid-stream with
records still buffered, NaN steps among them (they travel as msgpack floats).
"""

from __future__ import annotations

import math
import pickle
import zlib

import lz4.frame
import msgspec
import pytest

from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.detectors.registry import build
from trainguard.detectors.settings import DetectorSettings
from trainguard.detectors.synthetic import mixed_stream
from trainguard.schemas.records import Record, TrainingStep
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

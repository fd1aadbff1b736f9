"""`DetectionPipeline.process_all` finds exactly what `process`, record by record, finds.

The batch entry point binds the routing table, the node index and the
pipeline's settings once per call (the worker and the backtest feed it
records by the hundred). These tests feed the same simulated recordings
(tuning scenarios: a hang, hardware faults, a network fault; GPU samples
that name no job, so the node index stamps them) once through `process` and
once through `process_all` in chunks of random sizes, with the worker's time
cap moved between chunks, and compare every finding in order, the event
time reached and the node index learned.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import msgspec
import pytest

from trainguard.cli.commands.simulate import simulate_to
from trainguard.detectors.hardware import HardwareDetector
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.detectors.settings import DetectorSettings
from trainguard.schemas.records import GpuStats, JobTopology, NodeGpuSample, Record, XidEvent
from trainguard.streams.recording import read_recording

TUNING = Path(__file__).resolve().parents[3] / "scenarios" / "tuning"


def _records(name: str, tmp_path: Path) -> list[Record]:
    recording = tmp_path / f"{name}.jsonl"
    simulate_to(TUNING / f"{name}.yaml", recording)
    return [event.value for event in read_recording(recording)]


def _encoded(found: list[tuple[list[Any], list[Any]]]) -> list[bytes]:
    return [msgspec.json.encode(pair) for pair in found]


def _chunks(records: list[Record], rng: random.Random) -> list[list[Record]]:
    out, at = [], 0
    while at < len(records):
        size = rng.choice([1, 2, 7, 64, 500])
        out.append(records[at:at + size])
        at += size
    return out


@pytest.mark.parametrize("name", ["hang", "hw", "network"])
def test_process_all_finds_what_process_finds_one_by_one(name: str, tmp_path: Path) -> None:
    records = _records(name, tmp_path)
    one, many = (DetectionPipeline.from_settings(DetectorSettings()) for _ in range(2))
    one_found: list[tuple[list[Any], list[Any]]] = []
    many_found: list[tuple[list[Any], list[Any]]] = []
    rng = random.Random(name)
    for chunk in _chunks(records, rng):
        # The worker caps time at the guarded watermark, sometimes behind the records it releases.
        limit = chunk[-1].ts - rng.choice([0.0, 5.0]) if rng.random() < 0.5 else float("inf")
        one.time_limit = many.time_limit = limit
        for record in chunk:
            anomalies, incidents = one.process(record)
            if anomalies:
                one_found.append((anomalies, incidents))
        many_found.extend(many.process_all(chunk))
    assert one_found, "the scenario's faults must be found, or this compares nothing"
    assert any(incidents for _, incidents in one_found)
    assert _encoded(many_found) == _encoded(one_found)
    assert many.watermark == one.watermark
    assert many.nodes.jobs == one.nodes.jobs and many.nodes.changes == one.nodes.changes


def test_process_all_of_nothing_finds_nothing_and_moves_no_time() -> None:
    pipeline = DetectionPipeline.from_settings(DetectorSettings())
    assert pipeline.process_all([]) == []
    assert pipeline.watermark == float("-inf")


def test_a_jobless_sample_in_a_batch_is_an_incident_of_its_nodes_job() -> None:
    pipeline = DetectionPipeline([HardwareDetector()])
    topology = JobTopology(ts=1.0, job="llm-7", world_size=2, rank_nodes={0: "n0", 1: "n1"})
    xid = NodeGpuSample(ts=3.0, node="n1", gpus=[GpuStats(index=0)], xids=[XidEvent(gpu=0, code=79, ts=3.0)])
    found = pipeline.process_all([topology, NodeGpuSample(ts=2.0, node="n1", gpus=[GpuStats(index=0)]), xid])
    incidents = [incident for _, opened in found for incident in opened]
    assert [(i.kind, i.job, i.nodes) for i in incidents] == [("hw_fault", "llm-7", ["n1"])]

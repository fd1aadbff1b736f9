"""metric_anomaly: config-named record and field, per series, river models, warm-up, threshold, direction."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from pydantic import ValidationError

from trainguard.detectors.metric_anomaly import MetricAnomalyDetector
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.detectors.registry import validate_params
from trainguard.schemas.records import CustomMetric, GpuStats, NodeGpuSample, TrainingStep


def waits(n: int, *, spike_at: tuple[int, ...] = (), rank: int = 0, seed: int = 0) -> list[CustomMetric]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        value = 0.05 + 0.01 * rng.random() + (2.0 if i in spike_at else 0.0)
        out.append(CustomMetric(ts=float(i), name="dataloader", values={"wait_s": value}, job="j", node="n0",
                                rank=rank))
    return out


def feed(det: MetricAnomalyDetector, records: list) -> list:  # type: ignore[type-arg]
    return [a for r in records for a in det.observe(r)]


def test_a_custom_metric_is_watched_by_name_and_field_after_warmup() -> None:
    det = MetricAnomalyDetector(record="custom", name="dataloader", field="wait_s", per="rank", warmup=30, confirm=2)
    found = feed(det, waits(100, spike_at=(10, 60, 61)))  # 10 is inside the warm-up: learned, not scored
    assert [(a.kind, a.ranks, a.nodes, a.onset, a.ts) for a in found] == [("slowdown", [0], ["n0"], 60.0, 61.0)]
    assert found[0].evidence["field"] == "wait_s" and found[0].evidence["value"] > 2.0
    other = CustomMetric(ts=200.0, name="eval", values={"wait_s": 50.0}, job="j", node="n0", rank=0)
    assert det.observe(other) == []  # another name: not this series


def test_one_spike_is_not_confirmed_and_a_drop_is_not_up() -> None:
    det = MetricAnomalyDetector(record="custom", name="dataloader", field="wait_s", warmup=30, confirm=2)
    assert feed(det, waits(100, spike_at=(50,))) == []
    drop = [CustomMetric(ts=100.0 + i, name="dataloader", values={"wait_s": 0.0}, job="j", node="n0", rank=0)
            for i in range(3)]
    assert feed(det, drop) == []
    both = MetricAnomalyDetector(record="custom", name="dataloader", field="wait_s", warmup=30, confirm=2,
                                 direction="both")
    assert len(feed(both, waits(100) + [*drop])) == 1


def test_half_space_trees_flags_the_spike_and_survives_a_pickle_mid_stream() -> None:
    def make() -> MetricAnomalyDetector:
        return MetricAnomalyDetector(record="custom", name="dataloader", field="wait_s", per="job",
                                     model="half_space_trees", warmup=100, confirm=1, seed=7)

    stream = waits(300, spike_at=(250,))
    whole = feed(make(), stream)
    assert [a.evidence["value"] > 2.0 for a in whole] == [True] and whole[0].nodes == []  # per job: no node named
    first = make()
    head = feed(first, stream[:200])
    assert head + feed(pickle.loads(pickle.dumps(first)), stream[200:]) == whole


def test_per_gpu_series_of_a_gpu_sample_name_the_gpu() -> None:
    det = MetricAnomalyDetector(record="gpu_sample", field="gpus.temp_c", per="gpu", warmup=20, confirm=2,
                                kind="hw_fault")
    out = []
    for t in range(60):
        hot = 60.0 + 0.3 * (t % 4) + (30.0 if t >= 50 else 0.0)
        gpus = [GpuStats(index=i, temp_c=hot if i == 3 else 60.0 + 0.3 * (t % 4)) for i in range(8)]
        out += det.observe(NodeGpuSample(ts=float(t), node="n7", gpus=gpus))
    assert [(a.kind, a.gpus, a.nodes) for a in out] == [("hw_fault", ["n7:3"], ["n7"])]
    assert det.state_size() == 8


def test_non_finite_and_missing_values_are_skipped() -> None:
    det = MetricAnomalyDetector(record="step", field="grad_norm", per="rank", warmup=5, confirm=1)
    steps = [TrainingStep(ts=float(i), job="j", rank=0, node="n", step=i, loss=1.0,
                          grad_norm=None if i % 2 else (float("nan") if i == 8 else 1.0)) for i in range(20)]
    assert feed(det, steps) == [] and det.state_size() == 1


def test_config_is_checked_when_it_loads() -> None:
    with pytest.raises(ValidationError):
        validate_params("metric_anomaly", {"per": "cluster"})
    with pytest.raises(ValidationError):
        validate_params("metric_anomaly", {"record": "no_such_record"})
    with pytest.raises(ValueError, match="unknown model"):
        MetricAnomalyDetector(model="isolation_forest")
    with pytest.raises(ValueError, match="needs the CustomMetric"):
        MetricAnomalyDetector(record="custom", field="wait_s")
    assert validate_params("metric_anomaly", {"model": "river:LODA", "kind": "network"})["kind"] == "network"


def test_in_a_pipeline_a_jobless_custom_record_gets_its_nodes_job() -> None:
    det = MetricAnomalyDetector(record="custom", name="nic", field="drops", per="node", warmup=20, confirm=1,
                                kind="network")
    pipe = DetectionPipeline([det])
    pipe.process(TrainingStep(ts=0.0, job="llm", rank=0, node="n3", step=1, loss=1.0))
    found = []
    for t in range(40):
        drops = 1.0 + (t % 2) + (500.0 if t == 35 else 0.0)
        found += pipe.process(CustomMetric(ts=1.0 + t, name="nic", values={"drops": drops}, node="n3"))[0]
    assert [(a.kind, a.job, a.nodes) for a in found] == [("network", "llm", ["n3"])]

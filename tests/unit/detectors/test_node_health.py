"""Node-health model: train, save with features and version, refuse stale files, score online."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from trainguard.detectors.health_model import FEATURES, HealthModel, NodeFeatures, train
from trainguard.detectors.node_health import NodeHealthDetector
from trainguard.detectors.synthetic import Fleet
from trainguard.schemas.records import GpuStats, NodeGpuSample


def healthy_rows() -> list[list[float]]:
    f, feats = Fleet(seed=1), NodeFeatures()
    rows = []
    for _ in range(60):
        f.ts += 10
        for s in f.samples():
            if isinstance(s, NodeGpuSample):
                row = feats(s)
                if row is not None:
                    rows.append(row)
    return rows


def test_features_survive_resets_and_unobserved_samples() -> None:
    feats = NodeFeatures()
    g = lambda sbe: NodeGpuSample(ts=0, node="n", gpus=[GpuStats(index=0, ecc_sbe=sbe)])  # noqa: E731
    feats(g(10))
    assert feats(g(15))[FEATURES.index("sbe_rate")] == 5  # type: ignore[index]
    assert feats(g(0))[FEATURES.index("sbe_rate")] == 0  # type: ignore[index]
    assert feats(NodeGpuSample(ts=0, node="n", nvml_ok=False)) is None


def test_save_load_round_trip_and_refusals(tmp_path: Path) -> None:
    model = train(healthy_rows(), trees=20)
    path = tmp_path / "m.model"
    path.write_bytes(model.to_bytes())
    loaded = HealthModel.load(path)
    assert loaded.features == FEATURES and loaded.threshold == model.threshold
    blob = pickle.loads(path.read_bytes())
    blob["features"] = ["temp_max"]
    path.write_bytes(pickle.dumps(blob))
    with pytest.raises(ValueError, match="retrain"):
        HealthModel.load(path)
    (tmp_path / "junk").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="node-health model"):
        HealthModel.load(tmp_path / "junk")
    with pytest.raises(ValueError, match="at least 50"):
        train([[0.0] * len(FEATURES)] * 10)


def test_quiet_on_healthy_nodes_and_needs_corroboration(tmp_path: Path) -> None:
    path = tmp_path / "m.model"
    path.write_bytes(train(healthy_rows(), trees=20).to_bytes())
    d = NodeHealthDetector(model_path=str(path), score_every_s=0)
    f = Fleet(seed=5)
    out = []
    for _ in range(30):
        f.ts += 10
        out += [a for s in f.samples() for a in d.observe(s)]
    assert out == []
    hot_only = [a for i in range(5) for a in d.observe(
        NodeGpuSample(ts=f.ts + 10 * i, node="node-00", gpus=[GpuStats(index=0, temp_c=99.0)] * 4))]
    assert hot_only == []  # unusual, but nothing says hardware: no finding
    failing = [a for i in range(5) for a in d.observe(
        NodeGpuSample(ts=f.ts + 100 + 10 * i, node="node-00",
                      gpus=[GpuStats(index=0, temp_c=99.0, pcie_replays=400 * i)] * 4))]
    assert [(x.kind, x.nodes) for x in failing] == [("hw_fault", ["node-00"])]
    assert failing[0].evidence["source"] == "node_health_model"


def test_without_a_model_it_does_nothing() -> None:
    d = NodeHealthDetector()
    assert d.observe(NodeGpuSample(ts=1.0, node="n", gpus=[GpuStats(index=0, temp_c=120.0)])) == []

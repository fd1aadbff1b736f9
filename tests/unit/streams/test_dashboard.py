"""The Grafana dashboard is importable JSON and only queries metrics that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from trainguard.collectors.metrics import CollectorMetrics
from trainguard.streams.act.metrics import ActionMetrics
from trainguard.streams.worker.metrics import WorkerMetrics
from trainguard.streams.worker.processor import ProcessorStats

DASHBOARD = Path(__file__).parents[3] / "deploy" / "grafana" / "trainguard-dashboard.json"
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def _exported_names() -> set[str]:
    registries: list[CollectorRegistry] = [
        WorkerMetrics(stats=ProcessorStats(), state_sizes=dict).registry, ActionMetrics().registry,
        CollectorMetrics().registry]
    names: set[str] = set()
    for registry in registries:
        for family in registry.collect():
            names.add(family.name)
            names.update(family.name + s for s in SUFFIXES)
    return names


def test_dashboard_is_valid_grafana_json() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and dash["schemaVersion"] >= 30
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24
        if panel["type"] != "row":
            assert panel["targets"] and all(t["expr"] for t in panel["targets"])


def test_every_queried_metric_is_exported_by_some_component() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    used = {m for e in exprs for m in re.findall(r"\btrainguard_[a-z_]+", e)}
    assert used, "the dashboard queries nothing"
    missing = used - _exported_names()
    assert not missing, f"dashboard queries metrics nobody exports: {sorted(missing)}"

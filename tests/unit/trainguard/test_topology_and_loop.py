"""Placement from launcher environments, and the node loop's per-collector reporting."""

from __future__ import annotations

import pytest
from fakes import ListSink

from trainguard.collectors.metrics import CollectorMetrics
from trainguard.collectors.node import NodeLoop, Scheduled
from trainguard.schemas.records import NodeGpuSample, Record
from trainguard.topology import coordinates, placement_from_env


def test_torchrun_beats_slurm_and_kubernetes_names_the_node() -> None:
    env = {"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "SLURM_PROCID": "0", "NODE_NAME": "k8s-node",
           "SLURMD_NODENAME": "slurm-node", "POD_NAME": "trainer-3"}
    p = placement_from_env(env)
    assert (p.rank, p.world_size, p.local_rank, p.node, p.pod) == (5, 16, 1, "k8s-node", "trainer-3")
    assert placement_from_env({"SLURMD_NODENAME": "s1"}).node == "s1"


def test_coordinates_cover_every_rank_once() -> None:
    coords = {coordinates(r, world_size=16, tp=2, pp=2) for r in range(16)}
    assert len(coords) == 16
    with pytest.raises(ValueError, match="not divisible"):
        coordinates(0, world_size=6, tp=4)



class Broken:
    name = "broken"

    def collect(self, now: float) -> list[Record]:
        raise OSError("sysfs vanished")

    def close(self) -> None:
        pass


class Blind:
    name = "gpu"

    def collect(self, now: float) -> list[Record]:
        return [NodeGpuSample(ts=now, node="n", nvml_ok=False, error="no NVML")]

    def close(self) -> None:
        pass


def test_each_collector_reports_success_and_duration() -> None:
    metrics = CollectorMetrics()
    sink = ListSink()
    loop = NodeLoop(sink=sink, metrics=metrics, clock=lambda: 42.0)
    loop.run_once(Scheduled(Broken(), 1.0))
    loop.run_once(Scheduled(Blind(), 1.0))
    value = metrics.registry.get_sample_value
    assert value("trainguard_collector_success", {"collector": "broken"}) == 0.0
    assert value("trainguard_collector_success", {"collector": "gpu"}) == 0.0  # unobserved is not success
    assert value("trainguard_collector_duration_seconds", {"collector": "gpu"}) is not None
    assert len(sink.records) == 1 and sink.records[0].ts == 42.0  # the blind sample is still published

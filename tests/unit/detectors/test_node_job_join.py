"""The node->job join: jobless node samples (DaemonSet agents) become incidents of the node's job."""

from __future__ import annotations

from trainguard.detectors.hardware import HardwareDetector
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas.records import GpuStats, Heartbeat, JobTopology, NodeGpuSample, XidEvent


def _xid79(ts: float, node: str) -> NodeGpuSample:
    return NodeGpuSample(ts=ts, node=node, gpus=[GpuStats(index=0)], xids=[XidEvent(gpu=0, code=79, ts=ts)])


def _incidents(pipe: DetectionPipeline, *records: object) -> list:
    out = []
    for r in records:
        out.extend(pipe.process(r)[1])  # type: ignore[arg-type]
    return out


def test_jobless_sample_on_a_topology_node_is_an_incident_of_that_job() -> None:
    pipe = DetectionPipeline([HardwareDetector()])
    topo = JobTopology(ts=1.0, job="llm-7", world_size=2, rank_nodes={0: "n0", 1: "n1"})
    incidents = _incidents(pipe, topo, NodeGpuSample(ts=2.0, node="n1", gpus=[GpuStats(index=0)]), _xid79(3.0, "n1"))
    assert [(i.kind, i.job, i.nodes) for i in incidents] == [("hw_fault", "llm-7", ["n1"])]


def test_heartbeat_teaches_the_node_job_and_a_later_job_replaces_it() -> None:
    pipe = DetectionPipeline([HardwareDetector()])
    pipe.process(Heartbeat(ts=1.0, job="old", rank=0, node="n3"))
    pipe.process(Heartbeat(ts=2.0, job="new", rank=0, node="n3"))
    incidents = _incidents(pipe, NodeGpuSample(ts=3.0, node="n3", gpus=[GpuStats(index=0)]), _xid79(4.0, "n3"))
    assert [(i.job, i.nodes) for i in incidents] == [("new", ["n3"])]


def test_node_in_no_job_still_gets_an_incident_naming_the_node() -> None:
    pipe = DetectionPipeline([HardwareDetector()])
    pipe.process(JobTopology(ts=1.0, job="j", world_size=1, rank_nodes={0: "n0"}))
    incidents = _incidents(pipe, NodeGpuSample(ts=2.0, node="spare", gpus=[GpuStats(index=0)]), _xid79(3.0, "spare"))
    assert [(i.kind, i.job, i.nodes) for i in incidents] == [("hw_fault", "", ["spare"])]


def test_a_sample_that_names_its_job_keeps_it() -> None:
    pipe = DetectionPipeline([])
    pipe.process(JobTopology(ts=1.0, job="j", world_size=1, rank_nodes={0: "n0"}))
    sample = NodeGpuSample(ts=2.0, node="n0", job="other")
    assert pipe.nodes.stamp(sample) is sample

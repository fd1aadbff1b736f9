"""Correlation: one incident per fault, symptoms absorbed by their cause."""

from __future__ import annotations

from trainguard.detectors.correlate import IncidentCorrelator
from trainguard.schemas.records import Anomaly


def a(ts: float, kind: str, job: str = "j", nodes: tuple[str, ...] = (), rank: int = 0, **ev: object) -> Anomaly:
    return Anomaly(ts=ts, id=f"{kind}-{ts}-{rank}", kind=kind, detector=kind, onset=ts - 1, job=job,  # type: ignore
                   nodes=list(nodes), ranks=[rank], evidence=dict(ev))


def test_a_flood_becomes_one_incident_per_job_and_kind() -> None:
    c = IncidentCorrelator(window_s=60)
    incidents = [i for r in range(512) for i in c.add(a(100.0 + r * 0.01, "nan", rank=r))]
    incidents += [i for i in c.add(a(101.0, "nan", job="other"))]
    assert [(i.kind, i.job) for i in incidents] == [("nan", "j"), ("nan", "other")]
    assert c.add(a(200.0, "nan")) != []  # a new episode after the window


def test_jobless_hardware_findings_are_kept_apart_by_node() -> None:
    c = IncidentCorrelator()
    first = c.add(a(1.0, "hw_fault", job="", nodes=("n1",)))
    second = c.add(a(2.0, "hw_fault", job="", nodes=("n2",)))
    assert len(first) == len(second) == 1 and first[0].nodes == ["n1"] and second[0].nodes == ["n2"]


def test_hang_caused_by_a_fault_is_absorbed_not_a_second_incident() -> None:
    c = IncidentCorrelator()
    assert c.add(a(10.0, "hw_fault", job="", nodes=("n3",)))
    assert c.add(a(80.0, "hang", job="j", job_nodes=["n1", "n3"])) == []
    assert c.add(a(90.0, "slowdown", job="other", nodes=("n9",))) != []  # unrelated: its own incident
    opened = {i.kind: i for i in c.open_incidents()}
    assert len(opened["hw_fault"].anomaly_ids) == 2


def test_gpu_faults_on_two_machines_of_one_job_are_two_incidents() -> None:
    c = IncidentCorrelator()
    assert c.add(a(1.0, "hw_fault", nodes=("n1",)))
    assert c.add(a(2.0, "hw_fault", nodes=("n2",)))
    assert c.add(a(3.0, "hw_fault", nodes=("n1",))) == []
    assert c.add(a(4.0, "network", nodes=("n1",)))
    assert c.add(a(5.0, "network", nodes=("n2",))) == []  # one switch, many nodes: one incident

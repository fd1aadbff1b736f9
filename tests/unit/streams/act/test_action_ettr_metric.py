"""The action consumer exports each job's ETTR and its unproductive time by cause."""

from __future__ import annotations

from trainguard.streams.act.metrics import ActionMetrics


def test_ettr_gauges_per_job() -> None:
    metrics = ActionMetrics()
    metrics.ettr(job="llm", ettr=0.93, unproductive_s={"detection": 12.0, "failover": 300.0})
    assert metrics.value("trainguard_job_ettr", training_job="llm") == 0.93
    assert metrics.value("trainguard_job_unproductive_seconds", training_job="llm", category="failover") == 300.0

"""A bad hot update: the code version the agent stamped on the error names the culprit version."""

from __future__ import annotations

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.detectors.correlate import IncidentCorrelator
from trainguard.detectors.logs import UserErrorDetector
from trainguard.schemas import CheckpointEvent, LogEvent


def test_rollback_targets_the_version_before_the_one_that_failed() -> None:
    det = UserErrorDetector()
    ckpt = CheckpointEvent(ts=10.0, job="j", step=100, path="/c/100", code_version="v1")
    det.observe(ckpt)
    line = LogEvent(ts=50.0, node="n1", level="error", source="stderr", job="j", rank=3, category="traceback",
                    message="RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x63 and 64x256)",
                    code_version="v2")
    [anomaly] = det.observe(line)
    assert anomaly.kind == "user_error" and anomaly.evidence["code_version"] == "v2"

    [incident] = IncidentCorrelator().add(anomaly)
    registry = CheckpointRegistry()
    registry.observe(ckpt)
    decision = DecisionEngine(registry).decide(incident)
    assert decision.rule == "user_error.rollback_code"
    [step] = decision.plan
    assert step.action == "rollback_code" and step.params.code_version == "v1"
    assert step.params.step == 100

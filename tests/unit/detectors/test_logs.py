"""user_error: user code failures told apart from infrastructure failures."""

from __future__ import annotations

import pytest

from trainguard.detectors.logs import UserErrorDetector, classify
from trainguard.schemas.records import CheckpointEvent, LogEvent


def log(message: str, exit_code: int | None = None, ts: float = 1.0, job: str = "j") -> LogEvent:
    return LogEvent(ts=ts, node="n1", level="ERROR", source="python", message=message, job=job, rank=3,
                    exit_code=exit_code)


@pytest.mark.parametrize("message,exit_code,verdict", [
    ("ModuleNotFoundError: No module named 'apex'", None, "user"),
    ("ImportError: cannot import name 'Foo' from 'model'", None, "user"),
    ("  File \"cfg.py\", line 3\n    x = (1,,2)\nSyntaxError: invalid syntax", None, "user"),
    ("NameError: name 'lr' is not defined", None, "user"),
    ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)", None, "user"),
    ("RuntimeError: size mismatch for layer.weight", None, "user"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", None, "user"),
    ("usage: train.py [-h] --lr LR", 2, "user"),
    ("RuntimeError: NCCL communicator was aborted on rank 3", None, "infra"),
    ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88)", None, "infra"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", None, "infra"),
    ("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus", None, "infra"),
    ("ibv_poll_cq: completion with error (transport retry counter exceeded)", None, "infra"),
    ("ValueError raised inside NCCL watchdog", None, "infra"),  # infra wins over the exception name
    ("process exited", 1, "unknown"),
    ("step 100 done", None, "unknown"),
])
def test_classification_table(message: str, exit_code: int | None, verdict: str) -> None:
    assert classify(log(message, exit_code))[0] == verdict


def test_one_anomaly_per_job_per_cooldown_with_oom_context() -> None:
    d = UserErrorDetector(cooldown_s=60)
    d.observe(CheckpointEvent(ts=0.0, job="j", step=10, path="/c/10", code_version="v1"))
    d.observe(CheckpointEvent(ts=5.0, job="j", step=20, path="/c/20", code_version="v2"))
    first = d.observe(log("torch.OutOfMemoryError: CUDA out of memory", ts=10.0))
    assert [a.kind for a in first] == ["user_error"]
    assert first[0].evidence["oom"] and first[0].evidence["code_changed_at"] == 5.0
    assert first[0].ranks == [3] and first[0].nodes == ["n1"]
    assert d.observe(log("torch.OutOfMemoryError: CUDA out of memory", ts=20.0)) == []
    assert d.observe(log("NameError: x", ts=100.0)) != []
    assert d.observe(log("NCCL timeout", ts=200.0)) == []


def test_a_warning_that_names_an_exception_is_not_a_failure() -> None:
    d = UserErrorDetector()
    warning = LogEvent(ts=1.0, node="n1", level="WARNING", source="python", job="j",
                       message="UserWarning: this will raise a ValueError in a future release")
    assert d.observe(warning) == []

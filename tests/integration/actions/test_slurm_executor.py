"""Slurm executor through a fake `scontrol` on PATH.

The end-to-end path runs against a real Slurm cluster (tests/e2e/test_slurm_act.py).
These cases pin the executor's exact calls and error handling with a small fake `scontrol` that stands
in at the CLI boundary: it records every call and answers like the real one
(silent success for valid updates/requeues, `slurm_update error: Invalid
node name specified` and exit 1 for unknown nodes). The executor runs it as
a real subprocess, exactly as it would run the real `scontrol`.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from trainguard.actions.executors.slurm import SlurmExecutor
from trainguard.schemas.action_params import Removal
from trainguard.schemas.records import ActionCommand

FAKE = r'''#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_SCONTROL_LOG"], "a") as f:
    f.write(json.dumps(args) + "\n")
known = set(os.environ.get("FAKE_SCONTROL_NODES", "").split(","))
if args[:1] == ["update"]:
    nodes = [a.split("=", 1)[1] for a in args if a.startswith("NodeName=")][0].split(",")
    if not set(nodes) <= known:
        print("slurm_update error: Invalid node name specified", file=sys.stderr)
        sys.exit(1)
elif args[:1] == ["requeue"]:
    if not args[1].isdigit():
        print(f"scontrol: error: Invalid job id specified", file=sys.stderr)
        sys.exit(1)
else:
    print(f"invalid keyword: {args[0]}", file=sys.stderr)
    sys.exit(1)
'''


@pytest.fixture
def scontrol(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "scontrol"
    exe.write_text(FAKE)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "scontrol.log"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SCONTROL_LOG", str(log))
    monkeypatch.setenv("FAKE_SCONTROL_NODES", "gpu-01,gpu-02")
    return log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_evict_drains_with_reason_then_requeues(scontrol: Path) -> None:
    cmd = ActionCommand(ts=1.0, id="c1", action="evict_node", job="4242", nodes=["gpu-02"],
                        params=Removal(reason="hw_fault"), incident_id="inc-9")
    result = SlurmExecutor(clock=lambda: 2.0).execute(cmd, targets=["gpu-02"])
    assert result.status == "ok", result.message
    assert calls(scontrol) == [
        ["update", "NodeName=gpu-02", "State=DRAIN", "Reason=trainguard: hw_fault (inc-9)"],
        ["requeue", "4242"],
    ]


def test_resume_and_cordon_without_requeue(scontrol: Path) -> None:
    ex = SlurmExecutor(clock=lambda: 2.0)
    ex.execute(ActionCommand(ts=1.0, id="c1", action="cordon_node", job="llm", nodes=["gpu-01"]), targets=["gpu-01"])
    ex.execute(ActionCommand(ts=1.0, id="c2", action="uncordon_node", job="llm", nodes=["gpu-01"]), targets=["gpu-01"])
    assert [c[:3] for c in calls(scontrol)] == [["update", "NodeName=gpu-01", "State=DRAIN"],
                                               ["update", "NodeName=gpu-01", "State=RESUME"]]


def test_scontrol_error_is_reported_and_stops(scontrol: Path) -> None:
    cmd = ActionCommand(ts=1.0, id="c1", action="evict_node", job="4242", nodes=["nope"])
    result = SlurmExecutor(clock=lambda: 2.0).execute(cmd, targets=["nope"])
    assert result.status == "failed"
    assert "Invalid node name specified" in result.message
    assert len(calls(scontrol)) == 1  # no requeue after a failed drain


def test_missing_scontrol_is_a_clear_failure(tmp_path: Path) -> None:
    cmd = ActionCommand(ts=1.0, id="c1", action="cordon_node", nodes=["n"])
    result = SlurmExecutor(clock=lambda: 2.0, scontrol=str(tmp_path / "absent")).execute(cmd, targets=["n"])
    assert result.status == "failed" and "not found" in result.message


def test_a_lemon_is_drained_with_a_reason_that_names_the_quarantine(scontrol: Path) -> None:
    ex = SlurmExecutor(clock=lambda: 2.0)
    ex.mark_lemon("gpu-01", quarantined=True, reason="3 hw_fault incidents in 7 days (jobs 1, 2, 3)")
    ex.mark_lemon("gpu-01", quarantined=False, reason="released by alice")
    assert calls(scontrol) == [
        ["update", "NodeName=gpu-01", "State=DRAIN",
         "Reason=trainguard lemon: 3 hw_fault incidents in 7 days (jobs 1, 2, 3)"],
        ["update", "NodeName=gpu-01", "State=DRAIN",
         "Reason=trainguard: lemon released (released by alice), awaiting return"]]
    with pytest.raises(RuntimeError, match="Invalid node name"):
        ex.mark_lemon("gpu-99", quarantined=True, reason="x")
    with pytest.raises(ValueError, match="not a single node name"):
        ex.mark_lemon("gpu-[01-99]", quarantined=True, reason="x")

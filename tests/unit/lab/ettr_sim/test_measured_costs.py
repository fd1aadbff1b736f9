"""`ettr-sim --costs`: checkpoint and restart costs from a checkpoint benchmark report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.lab.ettr_sim import ParamError, SimParams
from trainguard.lab.ettr_sim.measured import with_measured_recovery

REPORT = {"restart_s": {"in_process": 2.0, "process_from_memory": 12.0, "process_from_last_checkpoint": 15.0},
          "overhead_ratio": {"memory": 0.01, "memory+peer": 0.02}}


def _report(tmp_path: Path, data: object = REPORT) -> Path:
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps(data))
    return path


def test_measured_costs_replace_the_assumptions(tmp_path: Path) -> None:
    params = with_measured_recovery(SimParams(), _report(tmp_path), restart_floor_s=30.0)
    c = params.trainguard
    assert c.checkpoint_interval_s == params.job.step_time_s  # every step
    assert (c.inprocess_restart_s, c.restart_s, c.checkpoint_overhead) == (32.0, 42.0, 0.02)
    assert params.job.checkpoint_interval_s == SimParams().job.checkpoint_interval_s  # the baseline keeps its own


def test_a_report_of_another_kind_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ParamError, match="bench_checkpoint"):
        with_measured_recovery(SimParams(), _report(tmp_path, {"per_kind": {}}))


def test_cli_uses_the_report_and_charges_the_overhead(tmp_path: Path) -> None:
    args = ["ettr-sim", "--nodes", "300", "--days", "30", "--seed", "3"]
    assert main([*args, "--json", str(tmp_path / "plain.json")]) == 0
    assert main([*args, "--costs", str(_report(tmp_path)), "--json", str(tmp_path / "fast.json")]) == 0
    plain, fast = (json.loads((tmp_path / n).read_text())["policies"]["trainguard"] for n in ("plain.json", "fast.json"))
    assert fast["unproductive_hours"]["recompute"] < plain["unproductive_hours"]["recompute"] / 50
    assert fast["checkpoint_overhead_hours"] > 0 == plain["checkpoint_overhead_hours"]
    assert main([*args, "--costs", str(tmp_path / "absent.json")]) == 2

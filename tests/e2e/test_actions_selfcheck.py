"""`trainguard selfcheck` as the agent runs it: real processes, torch, gloo on CPU.

Each "machine" is a group of real worker processes in one gloo world on
this host. Faults are injected with TRAINGUARD_SELFCHECK_FAULT: `hang`
makes one rank of a machine never join its collectives, `bitflip` makes a
machine's reference step (or replay gradient) differ by one ulp / one unit.
There is no DCGM here, so stage 1 must say "unavailable", never "passed".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from trainguard.actions.replay import locate, plan_regroupings
from trainguard.schemas.action_params import Replay, SelfCheck
from trainguard.schemas.codec import encode
from trainguard.schemas.records import ActionCommand

pytestmark = pytest.mark.e2e


def selfcheck(command: ActionCommand, fault: str = "") -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "TRAINGUARD_SELFCHECK_FAULT": fault}
    proc = subprocess.run([sys.executable, "-m", "trainguard.cli", "selfcheck", "--command-json",
                           encode(command).decode()], env=env, capture_output=True, text=True, timeout=400)
    return proc.returncode, json.loads(proc.stdout)


def check_cmd(machines: list[str], ppn: int, **params: Any) -> ActionCommand:
    return ActionCommand(ts=time.time(), id="sc", action="self_check", job="j", nodes=machines[:1],
                         params=SelfCheck(machines=machines, procs_per_machine=ppn, timeout_s=4.0, **params))


def stage(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in report["stages"] if s["name"] == name)


def test_hung_rank_is_named_by_the_all_to_all_within_its_machine() -> None:
    code, report = selfcheck(check_cmd(["m0", "m1"], ppn=2), fault="m1:hang")
    assert code == 1
    assert report["stage"] == "all_to_all" and report["culprits"] == ["m1"]
    assert stage(report, "dcgm")["status"] == "unavailable"
    assert stage(report, "bitwise")["status"] == "skipped"  # stopped at the first stage naming a machine


def test_bitflip_passes_collectives_and_is_isolated_by_bitwise_alignment() -> None:
    code, report = selfcheck(check_cmd(["m0", "m1", "m2"], ppn=1), fault="m2:bitflip")
    assert code == 1
    assert [s["status"] for s in report["stages"]] == ["unavailable", "passed", "passed", "failed"]
    assert report["stage"] == "bitwise" and report["culprits"] == ["m2"]


def test_dual_phase_replay_names_the_corrupt_machine() -> None:
    machines = ["m0", "m1", "m2"]  # rows [m0 m1] [m2], columns [m0 m2] [m1]
    plan = plan_regroupings(machines)
    failed = []
    for phase, groups in ((1, plan.phase1), (2, plan.phase2)):
        cmd = ActionCommand(ts=time.time(), id=f"r{phase}", action="replay_regroup", job="j", nodes=["m0"],
                            params=Replay(phase=phase, groups=groups, timeout_s=4.0))
        code, report = selfcheck(cmd, fault="m2:bitflip")
        assert code == 1 and report["phase"] == phase
        failed.append(report["failed_groups"])
    assert locate(plan, failed[0], failed[1]) == "m2"


def test_bad_command_json_exits_2_with_a_reason(capsys: pytest.CaptureFixture[str]) -> None:
    from trainguard.cli import main

    assert main(["selfcheck", "--command-json", '{"type": "x"}']) == 2
    assert "command-json" in json.loads(capsys.readouterr().out)["error"]
    stop = ActionCommand(ts=1.0, id="s", action="stop", job="j")
    assert main(["selfcheck", "--command-json", encode(stop).decode()]) == 2
    assert "not self_check" in json.loads(capsys.readouterr().out)["error"]

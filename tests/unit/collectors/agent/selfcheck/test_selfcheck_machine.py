"""One machine's share of a fanned-out check: its spec, its own view, a stage-less run.

The ranks themselves (torch, gloo) run in tests/e2e/test_selfcheck_fanout.py
through real agents; here only what needs no world.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from trainguard.collectors.agent.selfcheck.machine import MachineSpec, machine_passed, run_machine
from trainguard.schemas.action_params import ActionParams, MachineCheck


def params(**over: Any) -> MachineCheck:
    """A machine's check part as its command's decoder builds it (ValueError naming a bad field)."""
    base = {"kind": "machine_check", "check_id": "c1", "machines": ["a", "b", "c"], "node_rank": 1, "procs_per_machine": 2,
            "checks": ["dcgm", "all_to_all"], "rendezvous": {"host": "a.svc", "port": 29601},
            "deadline": time.time() + 60, "timeout_s": 4}
    try:
        return msgspec.convert({**base, **over}, ActionParams)  # type: ignore[return-value]
    except msgspec.ValidationError as exc:
        raise ValueError(str(exc)) from None


def test_spec_from_a_fanned_out_command() -> None:
    spec = MachineSpec.from_check(params())
    assert spec.machine == "b" and spec.local_ranks == [2, 3] and spec.host == "a.svc" and spec.port == 29601


@pytest.mark.parametrize("bad", [{"rendezvous": None}, {"node_rank": 3}, {"deadline": "soon"},
                                 {"procs_per_machine": 0}])
def test_a_bad_spec_names_the_problem(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):  # refused when the command is decoded
        params(**bad)


def test_own_view_passes_only_when_every_rank_passed_every_stage() -> None:
    ok = {"status": "ok", "pairs": {"a|b": "ok"}}
    report: dict[str, Any] = {"ranks": {2: 1, 3: 2}, "dcgm": {"status": "unavailable"},
                              "stages": {"all_gather": [ok, ok]}}
    assert machine_passed(report)
    report["stages"]["all_gather"] = [ok]  # a rank never reported
    assert not machine_passed(report)
    report["stages"]["all_gather"] = [ok, {"status": "ok", "pairs": {"b|c": "failed: timeout"}}]
    assert not machine_passed(report)
    report["stages"] = {"replay": [{"status": "ok", "ok": False}]}
    report["ranks"] = {1: 5}
    assert not machine_passed(report)


def test_dcgm_only_starts_no_rank_and_reports_unavailable_never_passed(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no dcgmi on this PATH, whatever the host has
    report = run_machine(MachineSpec.from_check(params(checks=["dcgm"])))
    assert report["dcgm"]["status"] == "unavailable" and report["stages"] == {}
    assert report["machine"] == "b" and report["pid"] == os.getpid() and "ranks" not in report

"""Executors found by entry point and chosen by the actions they handle.

Routing is checked on the real registered classes (built from settings, a
Slurm executor with a fake `scontrol` path it never runs) and through the
runner with in-memory recorders; a bad executor name goes through the real
CLI in a subprocess, which must answer with one line and exit code 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes import RecordingExecutor

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.executors import registry
from trainguard.actions.executors.kubernetes import KubernetesExecutor
from trainguard.actions.executors.local import LocalExecutor
from trainguard.actions.executors.slurm import SlurmExecutor
from trainguard.actions.journal import Journal
from trainguard.actions.runner import PlanRunner, Rails
from trainguard.actions.safety import CircuitBreaker, Cooldown
from trainguard.actions.settings import ActionSettings
from trainguard.actions.standby import StandbyPool
from trainguard.schemas.actions import AGENT_ACTIONS, AGENT_EXECUTABLE, CLUSTER_ACTIONS
from trainguard.schemas.records import ActionCommand, ActionResult, AuditEntry, Incident, JobTopology, Record


class NoBus:
    def send(self, command: ActionCommand) -> ActionCommand:
        raise AssertionError("routing tests send nothing")

    def collect(self, command_id: str, *, nodes: list[str], timeout_s: float) -> list[ActionResult]:
        raise AssertionError("routing tests send nothing")


def context(**settings: Any) -> registry.ExecutorContext:
    return registry.ExecutorContext(ActionSettings(**settings), lambda: 1.0, NoBus())


def test_builtins_register_by_entry_point_and_declare_what_they_handle() -> None:
    assert {"local", "kubernetes", "slurm"} <= set(registry.available())
    assert registry.load("kubernetes") is KubernetesExecutor and registry.load("slurm") is SlurmExecutor
    assert KubernetesExecutor.handles == SlurmExecutor.handles == CLUSTER_ACTIONS
    assert LocalExecutor.handles == AGENT_EXECUTABLE == AGENT_ACTIONS | {"evict_node", "cordon_node"}


def test_each_action_goes_to_the_first_enabled_executor_that_handles_it() -> None:
    routes = registry.build(["slurm", "local"], context())
    assert isinstance(routes.for_action("evict_node"), SlurmExecutor)
    assert isinstance(routes.for_action("uncordon_node"), SlurmExecutor)
    assert isinstance(routes.for_action("restart_from_checkpoint"), LocalExecutor)
    assert isinstance(routes.for_action("self_check"), LocalExecutor)
    assert routes.unhandled(["evict_node", "swap_standby", "escalate", "hot_update"]) == []

    alone = registry.build(["local"], context())  # no scheduler: evicting stops the node's process
    assert isinstance(alone.for_action("evict_node"), LocalExecutor)
    assert alone.unhandled(["evict_node", "uncordon_node", "retry"]) == ["uncordon_node"]

    cluster_only = registry.build(["slurm"], context())
    assert cluster_only.unhandled(["evict_node", "restart_from_checkpoint", "stop"]) == ["restart_from_checkpoint",
                                                                                        "stop"]


def test_an_executor_shadowed_by_an_earlier_one_is_refused() -> None:
    with pytest.raises(registry.UnknownExecutor, match="'kubernetes' would carry out nothing"):
        registry.Routes([registry.load("slurm"), registry.load("kubernetes")])
    with pytest.raises(registry.UnknownExecutor, match="unknown executor 'kubernets'"):
        registry.check_names(["kubernets"])
    with pytest.raises(registry.UnknownExecutor, match="twice"):
        registry.check_names(["local", "local"])


def test_settings_choose_the_executors_and_read_the_older_form() -> None:
    assert ActionSettings().enabled_executors() == ["local"]
    assert ActionSettings(executor="kubernetes").enabled_executors() == ["kubernetes", "local"]
    assert ActionSettings(executors=["slurm"]).enabled_executors() == ["slurm"]
    with pytest.raises(ValueError, match="not both"):
        ActionSettings(executor="slurm", executors=["slurm", "local"])
    with pytest.raises(ValueError, match="unknown executor 'pbs'"):
        ActionSettings(executors=["pbs"])


def run_hw_fault(tmp_path: Path, executors: list[RecordingExecutor]) -> tuple[str, PlanRunner, list[Record], str]:
    engine = DecisionEngine(CheckpointRegistry())
    engine.observe_topology(JobTopology(ts=0.0, job="j", world_size=8, rank_nodes={r: f"n{r}" for r in range(8)}))
    audit: list[Record] = []
    rails = Rails(CircuitBreaker(max_fraction=0.5, window_s=3600), Cooldown(cooldown_s=0), StandbyPool())
    runner = PlanRunner(journal=Journal(tmp_path / "j.sqlite"), rails=rails, executors=list(executors),
                        sink=audit.append, clock=lambda: 5.0, topologies=engine.topologies)
    inc = Incident(ts=9.0, id="hw", kind="hw_fault", job="j", onset=9.0, detected_at=9.0, nodes=["n3"])
    decision = runner.admit(engine.decide(inc))
    assert decision is not None
    return runner.run(decision).status, runner, audit, decision.id


def test_the_runner_routes_each_step_of_one_plan_to_its_executor(tmp_path: Path) -> None:
    cluster, agents = RecordingExecutor(CLUSTER_ACTIONS, name="k8s"), RecordingExecutor(AGENT_EXECUTABLE, name="agents")
    status, _, _, _ = run_hw_fault(tmp_path, [cluster, agents])
    assert status == "executed"
    assert cluster.actions == ["evict_node"] and agents.actions == ["restart_from_checkpoint"]


def test_a_step_no_enabled_executor_handles_fails_the_plan_before_it_starts(tmp_path: Path) -> None:
    cluster = RecordingExecutor(CLUSTER_ACTIONS, name="slurm")  # no agents: nobody could restart the job after the eviction
    status, runner, audit, did = run_hw_fault(tmp_path, [cluster])
    assert status == "failed"
    assert cluster.actions == []  # the node was not evicted only to leave the job down
    (result,) = [r for r in runner.journal.steps(did) if r.status == "failed"]
    assert result.action == "restart_from_checkpoint" and "no enabled executor handles" in result.message
    events = {e.event: e.detail for e in audit if isinstance(e, AuditEntry)}
    assert events["unhandled"]["actions"] == ["restart_from_checkpoint"]
    assert events["decision_failed"]["unhandled"] == ["restart_from_checkpoint"]


def cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRAINGUARD_")}
    base.update({"TRAINGUARD_ACTIONS__STATE_DIR": str(tmp_path / "act"), **(env or {})})
    return subprocess.run([sys.executable, "-m", "trainguard.cli", *args], capture_output=True, text=True,
                          env=base, cwd=tmp_path, timeout=120)


@pytest.mark.parametrize(("args", "env", "says"), [
    (["act", "--executors", "kubernetes,bogus"], {}, "unknown executor 'bogus'"),
    (["act", "--executor", "bogus"], {}, "unknown executor 'bogus'"),
    (["act", "--executors", "slurm,kubernetes"], {}, "'kubernetes' would carry out nothing"),
    (["act"], {"TRAINGUARD_ACTIONS__EXECUTORS": '["pbs"]'}, "unknown executor 'pbs'"),
], ids=["list", "older-form", "shadowed", "config"])
def test_a_bad_executor_name_exits_2_with_one_line(tmp_path: Path, args: list[str], env: dict[str, str],
                                                   says: str) -> None:
    proc = cli(tmp_path, *args, env=env)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert says in lines[0] and lines[0].startswith("trainguard"), lines[0]

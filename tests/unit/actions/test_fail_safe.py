"""Fail-safe targeting: no broadcast, no node patterns, a breaker that is never off.

The executors here are the real ones; what they talk to is replaced at the
boundary (a recording command bus; an `scontrol` that records its argv and
fails the test if it is ever called with a refused name).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.executors.kubernetes import KubernetesExecutor
from trainguard.actions.executors.local import LocalExecutor
from trainguard.actions.executors.slurm import SlurmExecutor
from trainguard.actions.journal import Journal
from trainguard.actions.runner import PlanRunner, Rails
from trainguard.actions.safety import CircuitBreaker, Cooldown
from trainguard.actions.standby import StandbyPool
from trainguard.schemas.records import ActionCommand, ActionResult, AuditEntry, Incident, Record

BAD_NAMES = [["gpu[001-999]"], ["gpu*"], ["n1,n2"], [""], [], ["n 1"], ["-rf"]]


class Bus:
    def __init__(self) -> None:
        self.sent: list[ActionCommand] = []

    def send(self, command: ActionCommand) -> ActionCommand:
        self.sent.append(command)
        return command

    def collect(self, command_id: str, *, nodes: list[str], timeout_s: float) -> list[ActionResult]:
        return [ActionResult(ts=1.0, command_id=command_id, action="stop", status="ok", node=n) for n in nodes]


def command(action: str, nodes: list[str]) -> ActionCommand:
    return ActionCommand(ts=1.0, id="c1", action=action, job="j", nodes=nodes)  # type: ignore[arg-type]


@pytest.mark.parametrize("nodes", BAD_NAMES, ids=[repr(n) for n in BAD_NAMES])
def test_every_executor_refuses_ranges_globs_lists_and_empty_names(nodes: list[str], tmp_path: Path) -> None:
    bus = Bus()
    local = LocalExecutor(bus=bus, timeout_s=1.0, clock=lambda: 1.0)
    assert local.execute(command("restart_from_checkpoint", nodes), targets=nodes).status == "rejected"
    assert bus.sent == []  # nothing reached any agent, least of all every agent of the job
    marker = tmp_path / "called"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f"#!{sys.executable}\nimport pathlib; pathlib.Path({str(marker)!r}).write_text('x')\n")
    scontrol.chmod(0o755)
    slurm = SlurmExecutor(clock=lambda: 1.0, scontrol=str(scontrol))
    assert slurm.execute(command("evict_node", nodes), targets=nodes).status == "rejected"
    assert not marker.exists()  # scontrol never saw the range
    k8s = KubernetesExecutor(api=None, clock=lambda: 1.0)  # any API call would raise on None
    assert k8s.execute(command("evict_node", nodes), targets=nodes).status == "rejected"


def test_kubernetes_names_follow_rfc1123() -> None:
    k8s = KubernetesExecutor(api=None, clock=lambda: 1.0)
    assert k8s.execute(command("cordon_node", ["GPU_01"]), targets=["GPU_01"]).status == "rejected"


def fake_scontrol(tmp_path: Path) -> Path:
    """An `scontrol` that appends its argv to a log and succeeds."""
    log = tmp_path / "scontrol.log"
    script = tmp_path / "scontrol-ok"
    script.write_text(f"#!{sys.executable}\nimport sys\nopen({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n")
    script.chmod(0o755)
    return script


def runner(tmp_path: Path, *, fleet_size: int = 0) -> tuple[DecisionEngine, PlanRunner, list[Record], Bus]:
    bus = Bus()
    local = LocalExecutor(bus=bus, timeout_s=1.0, clock=lambda: 1.0)
    slurm = SlurmExecutor(clock=lambda: 1.0, scontrol=str(fake_scontrol(tmp_path)))
    engine = DecisionEngine(CheckpointRegistry())
    rails = Rails(CircuitBreaker(max_fraction=0.25, window_s=3600, fleet_size=fleet_size), Cooldown(cooldown_s=600),
                  StandbyPool())
    audit: list[Record] = []
    run = PlanRunner(journal=Journal(tmp_path / "j.sqlite"), rails=rails, executors=[slurm, local],
                     sink=audit.append, clock=lambda: 1.0, topologies=engine.topologies)
    return engine, run, audit, bus


def test_restart_of_a_job_with_unknown_topology_goes_to_no_one_and_escalates(tmp_path: Path) -> None:
    engine, run, audit, bus = runner(tmp_path)
    nan = Incident(ts=5.0, id="nan", kind="nan", job="unknown-job", onset=4.0, detected_at=5.0, step=10)
    decision = run.admit(engine.decide(nan))
    assert decision is not None
    assert run.run(decision).status == "failed"
    assert bus.sent == []
    assert any(isinstance(a, AuditEntry) and a.event == "escalation" for a in audit)


def test_unknown_job_size_counts_as_the_smallest_plausible_job(tmp_path: Path) -> None:
    engine, run, _, bus = runner(tmp_path)
    statuses = []
    for i, node in enumerate(["a1", "a2"]):  # no topology for job "big": the breaker still counts
        inc = Incident(ts=10.0 + i, id=f"hw{i}", kind="hw_fault", job="big", onset=9.0, detected_at=10.0 + i,
                       nodes=[node])
        d = run.admit(engine.decide(inc))
        assert d is not None
        statuses.append(run.run(d).status)
    assert statuses[1] == "blocked" and run.rails.breaker.tripped
    assert "size unknown" in run.rails.breaker.trip_reason
    drained = (tmp_path / "scontrol.log").read_text().splitlines()
    assert [line.split()[1] for line in drained] == ["NodeName=a1"]


def test_node_incidents_without_a_job_cordon_and_count_against_the_fleet_limit(tmp_path: Path) -> None:
    """The issue's nine job-less incidents: now four are cordoned, then the breaker holds."""
    engine, run, _, bus = runner(tmp_path)
    statuses = []
    for i in range(9):
        inc = Incident(ts=100.0 + i, id=f"idle{i}", kind="hw_fault", job="", onset=99.0, detected_at=100.0 + i,
                       nodes=[f"idle{i}"])
        d = run.admit(engine.decide(inc))
        assert d is not None and d.rule == "hw_fault.cordon_idle_node"
        assert [s.action for s in d.plan] == ["cordon_node"]  # no job to restart
        statuses.append(run.run(d).status)
    assert statuses == ["executed"] * 4 + ["blocked"] * 5
    assert run.rails.breaker.tripped and "fleet" in run.rails.breaker.trip_reason
    drained = (tmp_path / "scontrol.log").read_text().splitlines()
    assert [line.split()[1] for line in drained] == [f"NodeName=idle{i}" for i in range(4)]


def test_breaker_fleet_limit_is_never_off() -> None:
    breaker = CircuitBreaker(max_fraction=0.25, window_s=60)  # no fleet size configured
    for i in range(4):
        assert breaker.reserve(job=f"job{i}", nodes=[f"n{i}"], job_size=100, now=float(i), tag=f"c{i}").allowed
    assert not breaker.reserve(job="job9", nodes=["n9"], job_size=100, now=5.0, tag="c9").allowed

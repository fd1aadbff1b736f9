"""What the rollout and verdict unit tests share: an engine and runner over three jobs, a recording executor.

Not a test module: tests import from here, never from one another.
"""

from __future__ import annotations

import threading
from pathlib import Path

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.journal import Journal
from trainguard.actions.rollout import RolloutPolicy
from trainguard.actions.runner import PlanRunner, Rails
from trainguard.actions.safety import CircuitBreaker, Cooldown
from trainguard.actions.standby import StandbyPool
from trainguard.schemas.actions import ACTIONS
from trainguard.schemas.records import ActionCommand, ActionResult, CheckpointEvent, Incident, JobTopology

NOW = 10_000.0


class Recording:
    """Answers every command ok and keeps it: what act sent is what is here."""

    name = "recording"
    handles = frozenset(ACTIONS)

    def __init__(self) -> None:
        self.sent: list[ActionCommand] = []
        self._lock = threading.Lock()

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        with self._lock:
            self.sent.append(command)
        return ActionResult(ts=NOW, command_id=command.id, action=command.action, status="ok", job=command.job)


def hw(job: str, node: str, n: int = 0) -> Incident:
    return Incident(ts=NOW, id=f"inc-{job}-{node}-{n}", kind="hw_fault", job=job, onset=NOW - 1, detected_at=NOW,
                    nodes=[node])


def build(path: Path, policy: RolloutPolicy, executor: Recording, *, approval: list[str] | None = None,
          fleet_max: int = 4) -> tuple[DecisionEngine, PlanRunner]:
    reg = CheckpointRegistry()
    eng = DecisionEngine(reg)
    for j in ("a", "b", "c"):
        reg.observe(CheckpointEvent(ts=1.0, job=j, step=100, path=f"/ck/{j}/100"))
        eng.observe_topology(JobTopology(ts=0.0, job=j, world_size=8, rank_nodes={r: f"{j}{r}" for r in range(8)}))
    rails = Rails(CircuitBreaker(max_fraction=0.25, window_s=3600, fleet_max_evictions=fleet_max),
                  Cooldown(cooldown_s=600), StandbyPool(spares=["s0", "s1", "s2"]), approval_kinds=approval or [],
                  rollout=policy)
    return eng, PlanRunner(journal=Journal(path / "journal.sqlite"), rails=rails, executors=[executor],
                           sink=lambda r: None, clock=lambda: NOW, topologies=eng.topologies)

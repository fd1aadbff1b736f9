"""What the rails' unit tests share: an engine and a runner over in-memory executors, incidents, audit lookups.

Not a test module: tests import from here, never from one another.
"""

from __future__ import annotations

from pathlib import Path

from fakes import Clock, Scripted

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.journal import Journal
from trainguard.actions.runner import PlanRunner, Rails
from trainguard.actions.safety import CircuitBreaker, Cooldown
from trainguard.actions.standby import StandbyPool
from trainguard.schemas.records import AuditEntry, CheckpointEvent, Incident, JobTopology, Record


def build(tmp_path: Path, executor: Scripted, *, jobs: int = 1, nodes: int = 8, spares: list[str] | None = None,
          fleet_max: int = 4, clock: Clock | None = None, fraction: float = 0.25) -> tuple[DecisionEngine, PlanRunner, list[Record]]:
    reg = CheckpointRegistry()
    eng = DecisionEngine(reg)
    for j in range(jobs):
        reg.observe(CheckpointEvent(ts=1.0, job=f"j{j}", step=100, path=f"/ck/{j}/100"))
        eng.observe_topology(JobTopology(ts=0.0, job=f"j{j}", world_size=nodes,
                                         rank_nodes={r: f"j{j}n{r}" for r in range(nodes)}))
    audit: list[Record] = []
    rails = Rails(CircuitBreaker(max_fraction=fraction, window_s=3600, fleet_max_evictions=fleet_max),
                  Cooldown(cooldown_s=600), StandbyPool(spares=list(spares or [])))
    runner = PlanRunner(journal=Journal(tmp_path / "j.sqlite"), rails=rails, executors=[executor],
                        sink=audit.append, clock=clock or Clock(), topologies=eng.topologies)
    return eng, runner, audit


def hw(job: str, node: str, ts: float = 100.0, tag: str = "") -> Incident:
    return Incident(ts=ts, id=f"inc-{node}{tag}", kind="hw_fault", job=job, onset=ts, detected_at=ts, nodes=[node])


def events(audit: list[Record], name: str) -> list[AuditEntry]:
    return [a for a in audit if isinstance(a, AuditEntry) and a.event == name]


def run_one(eng: DecisionEngine, runner: PlanRunner, incident: Incident) -> str:
    decision = runner.admit(eng.decide(incident))
    assert decision is not None
    return runner.run(decision).status

"""`act` killed at every point of an eviction plan ends the fleet where an unkilled run does.

Crash-point injection: the journal and the fleet are wrapped so that the k-th
durable write or command raises `Killed`, either just before or just after it
(after = the write is on disk / the node acted, but the process died before it
could go on). The dead process's memory is then dropped; a new one is built
from the same journal file (as `trainguard act` builds itself: knowledge
loaded, unfinished plans resumed, and an incident whose decision was not yet
journaled redelivered, since its offset was not committed either). The fleet
de-duplicates command ids as the real agents do (`collectors.agent.node_agent`), answering
a repeat with "already executed" and the first status.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.journal import Journal
from trainguard.actions.knowledge import JobKnowledge
from trainguard.actions.runner import PlanRunner, Rails
from trainguard.actions.safety import CircuitBreaker, Cooldown
from trainguard.actions.standby import StandbyPool
from trainguard.schemas.actions import ACTIONS
from trainguard.schemas.records import ActionCommand, ActionResult, CheckpointEvent, Incident, JobTopology

NODES = [f"n{i}" for i in range(8)]
INCIDENT = Incident(ts=100.0, id="inc-hw", kind="hw_fault", job="j", onset=99.0, detected_at=100.0, nodes=["n3"])


class Killed(BaseException):
    """The process died here (BaseException: nothing in the code under test may swallow it)."""


class Budget:
    """Counts dangerous moments; raises `Killed` at the chosen one."""

    def __init__(self, at: int | None, when: str) -> None:
        self.at, self.when, self.seen = at, when, 0

    def point(self, before: bool) -> None:
        if (self.when == "before") != before:
            return
        if self.at is not None and self.seen == self.at:
            raise Killed
        self.seen += 1


class Fleet:
    """Agents + scheduler: executes each command id once, like `collectors.agent.node_agent`."""

    name = "fleet"
    handles = frozenset(ACTIONS)

    def __init__(self) -> None:
        self.executed: dict[str, str] = {}
        self.stopped: set[str] = set()
        self.restarts: dict[str, list[Any]] = {}
        self.budget = Budget(None, "after")

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        self.budget.point(before=True)
        if command.id in self.executed:
            status = "skipped"
            details = {"already_executed": True, "previous_status": self.executed[command.id]}
        else:
            if command.action == "evict_node":
                self.stopped.update(command.nodes)
            elif command.action == "restart_from_checkpoint":
                for node in targets:
                    self.restarts.setdefault(node, []).append(command.params.step)
            status, details = "ok", {}
            self.executed[command.id] = "ok"
        self.budget.point(before=False)
        from trainguard.actions.executors.base import merge_results  # the real merge: it reads "already executed"

        result = ActionResult(ts=1.0, command_id=command.id, action=command.action, status=status,  # type: ignore[arg-type]
                              job=command.job, node=targets[0] if targets else "", details=details)
        return merge_results(command, [result], ts=1.0)


class CrashingJournal(Journal):
    """A journal whose durable writes are dangerous moments."""

    budget = Budget(None, "after")

    def _hit(self, name: str, *args: Any, **kw: Any) -> Any:
        self.budget.point(before=True)
        out = getattr(super(), name)(*args, **kw)
        self.budget.point(before=False)
        return out

    def record_decision(self, *a: Any, **kw: Any) -> bool:
        return bool(self._hit("record_decision", *a, **kw))

    def record_intent(self, *a: Any, **kw: Any) -> None:
        self._hit("record_intent", *a, **kw)

    def record_step(self, *a: Any, **kw: Any) -> None:
        self._hit("record_step", *a, **kw)

    def update_decision(self, *a: Any, **kw: Any) -> None:
        self._hit("update_decision", *a, **kw)


def one_life(path: Path, fleet: Fleet, budget: Budget, *, first: bool) -> PlanRunner:
    """Start `act` on the journal, handle the incident (or resume it), run to the end or die."""
    CrashingJournal.budget = budget
    fleet.budget = budget
    journal = CrashingJournal(path)
    checkpoints = CheckpointRegistry()
    engine = DecisionEngine(checkpoints)
    knowledge = JobKnowledge(journal, engine, checkpoints)
    knowledge.load()
    if first:  # what the topics told the first process (offsets committed after it was journaled)
        knowledge.observe_topology(JobTopology(ts=1.0, job="j", world_size=8, rank_nodes=dict(enumerate(NODES))))
        knowledge.observe_checkpoint(CheckpointEvent(ts=50.0, job="j", step=100, path="/ck/100"))
    rails = Rails(CircuitBreaker(max_fraction=0.25, window_s=3600), Cooldown(cooldown_s=600),
                  StandbyPool(spares=["s0"]))
    runner = PlanRunner(journal=journal, rails=rails, executors=[fleet],
                        sink=lambda r: None, clock=lambda: 5.0, topologies=engine.topologies)
    for pending in journal.unfinished():
        runner.run(pending)
    if journal.decision_for(INCIDENT.id) is None:  # not journaled: its offset was not committed, it comes again
        decision = runner.admit(engine.decide(INCIDENT), knowledge.engine_state())
        if decision is not None:
            runner.run(decision)
    return runner


def outcome(runner: PlanRunner, fleet: Fleet) -> dict[str, Any]:
    decision = runner.journal.decision_for(INCIDENT.id)
    assert decision is not None
    return {"status": decision.status, "steps": [r.status for r in runner.journal.steps(decision.id)],
            "stopped": sorted(fleet.stopped), "restarts": fleet.restarts, "evicted": dict(runner.evicted),
            "pool": runner.rails.pool.snapshot(), "cooldown": sorted(runner.rails.cooldown.snapshot()),
            "breaker": sorted(n for _, _, n, _ in runner.rails.breaker.snapshot()["evictions"]),
            "tripped": runner.rails.breaker.tripped, "attempts": dict(runner.attempts)}


def reference(tmp_path: Path) -> tuple[dict[str, Any], int]:
    fleet = Fleet()
    budget = Budget(None, "after")
    runner = one_life(tmp_path / "ref.sqlite", fleet, budget, first=True)
    return outcome(runner, fleet), budget.seen


def test_reference_run_evicts_swaps_and_restarts_from_the_checkpoint(tmp_path: Path) -> None:
    expected, points = reference(tmp_path)
    assert expected["status"] == "executed" and expected["steps"] == ["ok", "ok", "ok"]
    assert expected["stopped"] == ["n3"] and expected["evicted"] == {"j": {"n3"}}
    assert expected["restarts"] == {n: [100] for n in [*NODES[:3], *NODES[4:], "s0"]}
    assert points >= 8  # decision, 3 intents/commands, 3 step results, final status


@pytest.mark.parametrize("when", ["before", "after"])
def test_killed_at_every_point_ends_like_the_unkilled_run(tmp_path: Path, when: str) -> None:
    expected, points = reference(tmp_path)
    for k in range(points):
        path = tmp_path / f"{when}-{k}.sqlite"
        fleet = Fleet()
        first = True
        with pytest.raises(Killed):
            one_life(path, fleet, Budget(k, when), first=True)
        first = False
        runner = one_life(path, fleet, Budget(None, when), first=first)
        got = outcome(runner, fleet)
        assert got == expected, f"killed {when} point {k}"


def test_restarted_act_remembers_checkpoints_topology_and_earlier_nan(tmp_path: Path) -> None:
    """The issue's second finding: after a restart the next NaN restored from scratch."""
    path = tmp_path / "j.sqlite"
    journal = Journal(path)
    checkpoints = CheckpointRegistry()
    engine = DecisionEngine(checkpoints)
    knowledge = JobKnowledge(journal, engine, checkpoints)
    knowledge.observe_topology(JobTopology(ts=1.0, job="j", world_size=2, rank_nodes={0: "a", 1: "b"}))
    knowledge.observe_checkpoint(CheckpointEvent(ts=1.0, job="j", step=100, path="/ck/100"))
    nan = Incident(ts=9.0, id="nan-1", kind="nan", job="j", onset=8.0, detected_at=9.0, step=150)
    assert journal.record_decision(engine.decide(nan), knowledge.engine_state())
    journal.close()

    journal = Journal(path)
    checkpoints = CheckpointRegistry()
    engine = DecisionEngine(checkpoints)
    JobKnowledge(journal, engine, checkpoints).load()
    assert engine.topologies["j"].nodes == ["a", "b"]
    later = engine.decide(Incident(ts=20.0, id="nan-2", kind="nan", job="j", onset=19.0, detected_at=20.0, step=180))
    assert later.plan[0].params.step == 100 and later.plan[0].params.path == "/ck/100"
    again = engine.decide(Incident(ts=30.0, id="nan-3", kind="nan", job="j", onset=29.0, detected_at=30.0, step=150))
    assert again.rule == "nan.recurrence_as_sdc"  # the engine remembers the first NaN's step

"""A property of the breaker under concurrency (issue 20): no interleaving lets more nodes out than the cap.

Hypothesis draws the plans (which job, which node), the fleet cap and how each
eviction ends: done, timed out (no word from the node: it may still act),
refused before sending, or refused by the agent. Real threads run every plan
at once through one `PlanRunner`; the stand-in executor keeps the set of
nodes that may be out (sent and not certainly refused) and checks, the moment
each command arrives, that the set never exceeds the fleet cap nor a job's
share. A failure here is the measured bug: plans passing a check only one of
them may pass.
"""

from __future__ import annotations

import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.journal import Journal
from trainguard.actions.runner import PlanRunner, Rails
from trainguard.actions.safety import CircuitBreaker, Cooldown
from trainguard.actions.standby import StandbyPool
from trainguard.schemas.actions import AGENT_ACTIONS, CLUSTER_ACTIONS
from trainguard.schemas.records import ActionCommand, ActionResult, CheckpointEvent, Incident, JobTopology

JOBS, NODES, FRACTION = 6, 8, 0.25
JOB_SHARE = max(1, int(FRACTION * NODES))
OUTCOMES = ("ok", "timeout", "refused", "agent_refused")


class Fleet:
    """The executor: records who may be out and asserts the caps as each command arrives."""

    name = "fleet"
    handles = AGENT_ACTIONS | CLUSTER_ACTIONS

    def __init__(self, cap: int, outcomes: dict[str, str], seed: int) -> None:
        self.cap, self.outcomes = cap, outcomes
        self.out: dict[str, str] = {}  # node -> job: sent and not certainly refused
        self.violations: list[str] = []
        self._lock = threading.Lock()
        self._random = random.Random(seed)

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        if command.action != "evict_node":
            return self._reply(command, "ok")
        with self._lock:
            self.out.update(dict.fromkeys(command.nodes, command.job))
            self._check()
            pause = self._random.random() / 500
        time.sleep(pause)  # let the other plans' threads run while this one "waits for agents"
        outcome = self.outcomes.get(command.nodes[0], "ok")
        if outcome in ("refused", "agent_refused"):
            with self._lock:
                for node in command.nodes:
                    self.out.pop(node, None)
        if outcome == "refused":
            return self._reply(command, "rejected")
        if outcome == "agent_refused":
            return self._reply(command, "rejected", {"per_node": dict.fromkeys(command.nodes, "rejected")})
        if outcome == "timeout":
            return self._reply(command, "failed", {"per_node": {}})
        return self._reply(command, "ok", {"per_node": dict.fromkeys(command.nodes, "ok")})

    def _check(self) -> None:
        if len(self.out) > self.cap:
            self.violations.append(f"{len(self.out)} nodes out, fleet cap {self.cap}: {sorted(self.out)}")
        for job in set(self.out.values()):
            mine = [n for n, j in self.out.items() if j == job]
            if len(mine) > JOB_SHARE:
                self.violations.append(f"{len(mine)} nodes of {job} out, share {JOB_SHARE}")

    @staticmethod
    def _reply(command: ActionCommand, status: str, details: dict[str, Any] | None = None) -> ActionResult:
        return ActionResult(ts=0.0, command_id=command.id, action=command.action, status=status,  # type: ignore[arg-type]
                            job=command.job, details=details or {})


plans = st.lists(st.tuples(st.integers(0, JOBS - 1), st.integers(0, NODES - 1), st.sampled_from(OUTCOMES)),
                 min_size=2, max_size=24, unique_by=lambda p: (p[0], p[1]))


@settings(max_examples=40, deadline=None)
@given(plans=plans, cap=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_no_interleaving_lets_more_nodes_out_than_the_cap(plans: list[tuple[int, int, str]], cap: int,
                                                          seed: int) -> None:
    outcomes = {f"j{j}n{n}": outcome for j, n, outcome in plans}
    fleet = Fleet(cap, outcomes, seed)
    with tempfile.TemporaryDirectory() as tmp:
        runner, decisions = _runner(Path(tmp), fleet, cap, plans)
        start = threading.Barrier(len(decisions))

        def run(decision: Any) -> None:
            start.wait(10)
            runner.run(decision)

        threads = [threading.Thread(target=run, args=(d,)) for d in decisions]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        runner.journal.close()
    assert not fleet.violations, fleet.violations[0]
    counted = runner.rails.breaker.counted(runner.clock())
    assert set(fleet.out) <= counted  # every node that may be out is still counted by the breaker
    assert len(counted) <= cap


def _runner(tmp: Path, fleet: Fleet, cap: int, plans: list[tuple[int, int, str]]) -> tuple[PlanRunner, list[Any]]:
    reg = CheckpointRegistry()
    eng = DecisionEngine(reg)
    for j in range(JOBS):
        reg.observe(CheckpointEvent(ts=1.0, job=f"j{j}", step=10, path=f"/ck/{j}"))
        eng.observe_topology(JobTopology(ts=0.0, job=f"j{j}", world_size=NODES,
                                         rank_nodes={r: f"j{j}n{r}" for r in range(NODES)}))
    rails = Rails(CircuitBreaker(max_fraction=FRACTION, window_s=3600, fleet_max_evictions=cap),
                  Cooldown(cooldown_s=600), StandbyPool())
    runner = PlanRunner(journal=Journal(tmp / "j.sqlite"), rails=rails, executors=[fleet], sink=lambda r: None,
                        clock=lambda: 1000.0, topologies=eng.topologies)
    decisions = []
    for i, (j, n, _) in enumerate(plans):
        ts = 100.0 + i * 7919.0  # event times spread out and unordered: the window ignores them
        incident = Incident(ts=ts, id=f"i{i}", kind="hw_fault", job=f"j{j}", onset=ts, detected_at=ts,
                            nodes=[f"j{j}n{n}"])
        decision = runner.admit(eng.decide(incident))
        assert decision is not None
        decisions.append(decision)
    return runner, decisions

"""The operator's commands over a real journal: actions log/approve/reset-breaker/pool, ettr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.journal import Journal
from trainguard.actions.runner import PlanRunner, Rails
from trainguard.actions.safety import CircuitBreaker, Cooldown
from trainguard.actions.standby import StandbyPool
from trainguard.cli import main
from trainguard.schemas.actions import ACTIONS
from trainguard.schemas.records import ActionCommand, ActionResult, Incident, JobTopology, TrainingStep
from trainguard.streams.recording import write_recording


class Ok:
    name = "ok"
    handles = frozenset(ACTIONS)

    def execute(self, command: ActionCommand, *, targets: list[str]) -> ActionResult:
        return ActionResult(ts=1.0, command_id=command.id, action=command.action, status="ok", job=command.job)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRAINGUARD_ACTIONS__STATE_DIR", str(tmp_path))
    return tmp_path


def runner(state: Path, approval: list[str]) -> tuple[DecisionEngine, PlanRunner]:
    rails = Rails(CircuitBreaker(max_fraction=0.5, window_s=60), Cooldown(cooldown_s=0), StandbyPool(spares=["s1"]),
                  approval_kinds=approval)
    engine = DecisionEngine(CheckpointRegistry())
    # A restart needs the job's nodes: without a topology it would name no one and is refused.
    engine.observe_topology(JobTopology(ts=0.0, job="llm", world_size=4, rank_nodes={r: f"n{r}" for r in range(4)}))
    return engine, PlanRunner(
        journal=Journal(state / "journal.sqlite"), rails=rails, executors=[Ok()],
        sink=lambda r: None, clock=lambda: 1.0, topologies=engine.topologies)


def test_log_approve_pool_and_breaker_reset(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine, run = runner(state, approval=["hw_fault"])
    inc = Incident(ts=5.0, id="inc-1", kind="hw_fault", job="llm", onset=4.0, detected_at=5.0, nodes=["n1"])
    decision = run.admit(engine.decide(inc))
    assert decision is not None and decision.status == "awaiting_approval"

    assert main(["actions", "log", "--json"]) == 0
    logged = json.loads(capsys.readouterr().out.splitlines()[0])
    assert logged["rule"] == "hw_fault.evict_swap_restart" and logged["status"] == "awaiting_approval"
    assert logged["reason"] and logged["alternatives"]

    assert main(["actions", "approve", decision.id]) == 0
    assert main(["actions", "approve", "no-such-id"]) == 2
    (pending,) = run.journal.unfinished()
    assert run.run(pending).status == "executed"
    capsys.readouterr()
    assert main(["actions", "pool"]) == 0
    pool = json.loads(capsys.readouterr().out)
    assert pool == {"size": 0, "exhausted": True, "spares": [], "swaps": {"s1": "n1"}}

    run.rails.breaker.tripped = True
    assert main(["actions", "reset-breaker"]) == 0
    run.poll_operator()  # what the running `trainguard act` does at each poll
    assert not run.rails.breaker.tripped


def test_actions_without_journal_says_so(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["actions", "log"]) == 2
    assert "no journal" in capsys.readouterr().err


def test_ettr_from_a_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = [TrainingStep(ts=float(s), job="llm", rank=0, node="n", step=s, loss=1.0, step_time_s=1.0)
             for s in range(1, 6)]
    inc = Incident(ts=7.0, id="i", kind="nan", job="llm", onset=6.0, detected_at=7.0)
    again = [TrainingStep(ts=9.0 + s, job="llm", rank=0, node="n", step=s, loss=1.0, step_time_s=1.0)
             for s in (4, 5, 6)]
    path = tmp_path / "rec.jsonl"
    write_recording(path, [*steps, inc, *again])
    assert main(["ettr", "--job", "llm", "--recording", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["wall_s"] == 15.0 and report["detection_s"] == 1.0 and report["recompute_s"] == 2.0
    assert 0 < report["ettr"] < 1
    assert main(["ettr", "--job", "llm", "--recording", str(path)]) == 0
    assert "productive" in capsys.readouterr().out


def test_repaired_node_returns_only_with_a_passing_self_check(state: Path, tmp_path: Path) -> None:
    _, run = runner(state, approval=[])
    run.rails.pool.take(replacing="n1")
    failing = tmp_path / "fail.json"
    failing.write_text(json.dumps({"passed": False, "machines": ["n1"], "culprits": ["n1"]}))
    passing = tmp_path / "pass.json"
    passing.write_text(json.dumps({"passed": True, "machines": ["n1"], "culprits": []}))
    assert main(["actions", "return-node", "n1", "--report", str(failing)]) == 1
    assert main(["actions", "return-node", "n2", "--report", str(passing)]) == 1  # a report about another node
    run.poll_operator()
    assert run.rails.pool.size == 0
    assert main(["actions", "return-node", "n1", "--report", str(passing)]) == 0
    run.poll_operator()
    assert run.rails.pool.spares == ["n1"]

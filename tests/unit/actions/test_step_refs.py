"""Typed references between plan steps: `when` (run only if a step failed) and `targets_from`.

Plans are written by hand here so each reference is exercised on its own;
the executors are in-memory recorders (the runner's contract with them is
one `execute` call per step).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from fakes import FanOutAgents, RecordingExecutor

from trainguard.actions.journal import Journal
from trainguard.actions.runner import PlanRunner, Rails
from trainguard.actions.safety import CircuitBreaker, Cooldown
from trainguard.actions.standby import StandbyPool
from trainguard.schemas.action_params import NoParams, Removal, Replay, Restart, SelfCheck
from trainguard.schemas.actions import AGENT_EXECUTABLE, CLUSTER_ACTIONS
from trainguard.schemas.codec import Codec, DecodeError
from trainguard.schemas.plan import CulpritsOf, PlannedAction, ReplayCulprit, StepCondition
from trainguard.schemas.records import Decision, JobTopology, Record

TOPO = JobTopology(ts=0.0, job="j", world_size=8, rank_nodes={r: f"n{r}" for r in range(8)})
PHASE1 = [["n0", "n1"], ["n2", "n3"]]
PHASE2 = [["n0", "n2"], ["n1", "n3"]]


def runner(tmp_path: Path, agents: RecordingExecutor, cluster: RecordingExecutor) -> tuple[PlanRunner, list[Record]]:
    audit: list[Record] = []
    rails = Rails(CircuitBreaker(max_fraction=0.5, window_s=3600), Cooldown(cooldown_s=0), StandbyPool())
    run = PlanRunner(journal=Journal(tmp_path / "j.sqlite"), rails=rails, executors=[cluster, agents],
                     sink=audit.append, clock=lambda: 5.0, topologies={"j": _topology()})
    return run, audit


def _topology() -> Any:
    from trainguard.actions.topology import Topology

    return Topology.from_record(TOPO)


def decision(plan: list[PlannedAction], did: str = "d1") -> Decision:
    return Decision(ts=10.0, id=did, incident_id=f"inc-{did}", job="j", kind="network", rule="test", plan=plan,
                    reason="test")


def run_plan(tmp_path: Path, plan: list[PlannedAction], agents: RecordingExecutor) -> tuple[Decision, RecordingExecutor, PlanRunner]:
    cluster = RecordingExecutor(CLUSTER_ACTIONS)
    run, _ = runner(tmp_path, agents, cluster)
    admitted = run.admit(decision(plan))
    assert admitted is not None
    return run.run(admitted), cluster, run


def confirm_then_evict() -> list[PlannedAction]:
    return [PlannedAction(action="self_check", nodes=["n2"], params=SelfCheck(checks=["all_gather"])),
            PlannedAction(action="evict_node", nodes=["n2"], when=StepCondition(step=0))]


def test_a_conditional_step_is_skipped_when_its_predecessor_succeeded(tmp_path: Path) -> None:
    final, cluster, run = run_plan(tmp_path, confirm_then_evict(), RecordingExecutor(AGENT_EXECUTABLE))
    assert final.status == "executed" and cluster.commands == []
    skipped = run.journal.steps(final.id)[1]
    assert skipped.status == "skipped" and "step 0" in skipped.message


def test_a_conditional_step_runs_when_its_predecessor_failed(tmp_path: Path) -> None:
    agents = RecordingExecutor(AGENT_EXECUTABLE, {"self_check": {"status": "failed"}})
    final, cluster, _ = run_plan(tmp_path, confirm_then_evict(), agents)
    assert final.status == "executed"
    assert [(c.action, c.nodes) for c in cluster.commands] == [("evict_node", ["n2"])]
    assert b"when" not in msgspec.json.encode(cluster.commands[0].params)  # references never reach the executor


def replay_plan(fallback: tuple[str, ...] = ()) -> list[PlannedAction]:
    located = ReplayCulprit(phases=(1, 2), fallback_nodes=fallback)
    return [PlannedAction(action="stop", nodes=["n0", "n1", "n2", "n3"]),
            PlannedAction(action="replay_regroup", nodes=["n0"], params=Replay(phase=1, groups=PHASE1)),
            PlannedAction(action="replay_regroup", nodes=["n0"], params=Replay(phase=2, groups=PHASE2)),
            PlannedAction(action="evict_node", targets_from=located)]


def test_nodes_are_taken_from_the_two_replay_steps(tmp_path: Path) -> None:
    # n3 is in group 1 of phase 1 and group 1 of phase 2: the only machine in both failing groups.
    agents = FanOutAgents(bad="n3", handles=AGENT_EXECUTABLE)
    final, cluster, _ = run_plan(tmp_path, replay_plan(fallback=("n0",)), agents)
    assert sorted(c.nodes[0] for c in agents.commands if getattr(c.params, "phase", None) == 1) == ["n0", "n1", "n2", "n3"]
    assert final.status == "executed"
    assert [c.nodes for c in cluster.commands] == [["n3"]]  # the replay wins over the fallback


def test_fallback_nodes_are_used_when_the_replay_names_no_machine(tmp_path: Path) -> None:
    final, cluster, _ = run_plan(tmp_path, replay_plan(fallback=("n1",)), RecordingExecutor(AGENT_EXECUTABLE))
    assert final.status == "executed" and [c.nodes for c in cluster.commands] == [["n1"]]


def test_no_replay_culprit_and_no_fallback_evicts_no_one(tmp_path: Path) -> None:
    final, cluster, run = run_plan(tmp_path, replay_plan(), RecordingExecutor(AGENT_EXECUTABLE))
    assert cluster.commands == [] and run.journal.steps(final.id)[3].status == "skipped"


def test_targets_from_a_diagnosis_step(tmp_path: Path) -> None:
    agents = FanOutAgents(bad="n5", handles=AGENT_EXECUTABLE)
    plan = [PlannedAction(action="self_check", nodes=["n0", "n5", "n6"]),  # three: a bitwise majority
            PlannedAction(action="evict_node", targets_from=CulpritsOf(step=0))]
    final, cluster, _ = run_plan(tmp_path, plan, agents)
    assert final.status == "executed" and [c.nodes for c in cluster.commands] == [["n5"]]


def test_a_misspelt_or_mistyped_reference_is_an_error() -> None:
    with pytest.raises(TypeError):
        PlannedAction(action="evict_node", only_if_failed=0)  # type: ignore[call-arg]
    with pytest.raises(msgspec.ValidationError, match="stepp"):
        msgspec.convert({"action": "evict_node", "when": {"stepp": 0}}, PlannedAction)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"action": "evict_node", "targets_from": {"kind": "culprit", "step": 0}}, PlannedAction)


def test_a_reference_to_a_later_step_is_a_malformed_decision() -> None:
    codec = Codec()
    with pytest.raises(ValueError, match="not an earlier step"):
        decision([PlannedAction(action="evict_node", targets_from=CulpritsOf(step=1)),
                  PlannedAction(action="self_check")])
    body = codec.encode(decision(confirm_then_evict())).replace(b'"when":{"step":0', b'"when":{"step":1')
    with pytest.raises(DecodeError, match="not an earlier step"):
        codec.decode(body)
    with pytest.raises(ValueError, match="replay phase 0"):
        decision([PlannedAction(action="stop"), PlannedAction(action="evict_node",
                                                              targets_from=ReplayCulprit(phases=(0, 0)))])


def test_the_decision_record_shows_references_explicitly() -> None:
    wire = json.loads(Codec().encode(decision(replay_plan(fallback=("n1",)))))
    assert wire["plan"][3]["targets_from"] == {"kind": "replay", "phases": [1, 2], "fallback_nodes": ["n1"]}
    assert wire["plan"][3]["params"] == {"kind": "removal"} and "when" not in wire["plan"][0]  # defaults left out
    assert json.loads(Codec().encode(decision(confirm_then_evict())))["plan"][1]["when"] == {"step": 0,
                                                                                            "status": "failed"}


def old_form_body(params: dict[str, Any]) -> bytes:
    """A plan whose eviction carries a reference in `params`, as act wrote them before the typed fields."""
    plan = [{"action": "self_check", "nodes": ["n2"], "ranks": [],
             "params": {"kind": "self_check", "checks": ["all_gather"]}},
            {"action": "evict_node", "nodes": ["n2"], "ranks": [],
             "params": {"kind": "removal", "reason": "network", **params}}]
    return json.dumps({"type": "decision", "ts": 10.0, "schema_version": 1, "id": "old", "incident_id": "inc-old",
                       "job": "j", "kind": "network", "rule": "network.confirm_then_evict", "plan": plan,
                       "reason": "old"}).encode()


@pytest.mark.parametrize("params", [{"only_if_failed": 0}, {"nodes_from": 0}, {"from_replay": [0, 0]},
                                    {"fallback_nodes": ["n1"]}])
def test_a_reference_written_into_params_is_refused_not_sent_as_a_parameter(params: dict[str, Any]) -> None:
    """Passed on as a parameter, `only_if_failed` would make the eviction unconditional: it fails instead."""
    with pytest.raises(DecodeError, match="unknown field"):
        Codec().decode(old_form_body(params))
    assert Codec().decode(old_form_body({}), Decision).plan[1].params == Removal(reason="network")


@pytest.mark.parametrize(("action", "params", "problem"), [
    ("evict_node", {"kind": "restart", "step": 3}, "evict_node takes removal parameters, not restart"),
    ("restart_from_checkpoint", {"kind": "restart", "step": "ten"}, "Expected `int | null`, got `str`"),
    ("self_check", {"kind": "self_check", "checks": "all_gather"}, "Expected `array`, got `str`"),
    ("stop", {"kind": "machine_check", "check_id": "c", "machines": ["n1"], "node_rank": 0, "deadline": 1.0,
              "rendezvous": {"host": "n1", "port": 1}}, "stop takes none parameters, not machine_check"),
])
def test_parameters_that_do_not_fit_the_action_fail_to_decode(action: str, params: dict[str, Any],
                                                             problem: str) -> None:
    """A misspelt, mistyped or misplaced parameter never reaches an executor or agent as a default."""
    body = json.dumps({"type": "action_command", "ts": 1.0, "id": "c", "action": action, "params": params}).encode()
    with pytest.raises(DecodeError, match=re.escape(problem)):
        Codec().decode(body)


def test_a_step_written_without_parameters_gets_its_actions_defaults() -> None:
    assert PlannedAction(action="evict_node").params == Removal()
    assert PlannedAction(action="self_check", params=NoParams(reason="why")).params == SelfCheck(reason="why")
    with pytest.raises(ValueError, match="self_check takes self_check parameters, not restart"):
        PlannedAction(action="self_check", params=Restart())

"""The plan runner: rails, journal-based resume, references between steps.

Executors here are in-memory recorders: the runner's contract with them is
one `execute(command, targets)` call per step, which is what we assert.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
from fakes import FanOutAgents, RecordingExecutor

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.journal import Journal
from trainguard.actions.runner import PlanRunner, Rails
from trainguard.actions.safety import CircuitBreaker, Cooldown
from trainguard.actions.standby import StandbyPool
from trainguard.schemas.actions import CLUSTER_ACTIONS, RUNNER_ACTIONS
from trainguard.schemas.records import CheckpointEvent, Incident, JobTopology, Record

TOPO = JobTopology(ts=0.0, job="j", world_size=8, rank_nodes={r: f"n{r}" for r in range(8)})


def setup(tmp_path: Path, *, spares: list[str] | None = None, approval: list[str] | None = None,
          node: RecordingExecutor | None = None, cluster: RecordingExecutor | None = None) -> tuple[DecisionEngine, PlanRunner, list[Record]]:
    reg = CheckpointRegistry()
    reg.observe(CheckpointEvent(ts=1.0, job="j", step=100, path="/ck/100"))
    eng = DecisionEngine(reg)
    eng.observe_topology(TOPO)
    audit: list[Record] = []
    rails = Rails(CircuitBreaker(max_fraction=0.25, window_s=3600), Cooldown(cooldown_s=600),
                  StandbyPool(spares=list(spares or [])), approval_kinds=approval or [])
    cluster = cluster or RecordingExecutor()
    cluster.handles = CLUSTER_ACTIONS
    runner = PlanRunner(journal=Journal(tmp_path / "j.sqlite"), rails=rails, executors=[cluster, node or RecordingExecutor()],
                        sink=audit.append, clock=lambda: 5.0,
                        topologies=eng.topologies)
    return eng, runner, audit


def hw(node: str, ts: float = 100.0) -> Incident:
    return Incident(ts=ts, id=f"inc-{node}", kind="hw_fault", job="j", onset=ts, detected_at=ts, nodes=[node])


def test_hw_fault_evicts_swaps_and_restarts(tmp_path: Path) -> None:
    node, cluster = RecordingExecutor(), RecordingExecutor()
    eng, runner, audit = setup(tmp_path, spares=["s0"], node=node, cluster=cluster)
    decision = runner.admit(eng.decide(hw("n3")))
    assert decision is not None
    final = runner.run(decision)
    assert final.status == "executed"
    assert [c.action for c, _ in cluster.calls] == ["evict_node"]
    restart, targets = node.calls[0]
    assert restart.action == "restart_from_checkpoint" and restart.params.exclude_nodes == ["n3"]
    assert "s0" in targets and "n3" not in targets
    assert runner.rails.pool.exhausted
    events = [a.event for a in audit]  # type: ignore[attr-defined]
    assert events[0] == "decision" and "command" in events and events[-1] == "decision_executed"


def test_redelivered_incident_yields_one_action(tmp_path: Path) -> None:
    cluster = RecordingExecutor()
    eng, runner, _ = setup(tmp_path, cluster=cluster)
    first = runner.admit(eng.decide(hw("n3")))
    assert first is not None
    runner.run(first)
    assert runner.admit(eng.decide(hw("n3"))) is None
    assert len(cluster.calls) == 1


def test_burst_across_half_the_nodes_trips_breaker_and_holds(tmp_path: Path) -> None:
    cluster = RecordingExecutor()
    eng, runner, audit = setup(tmp_path, cluster=cluster)
    statuses = []
    for i in range(4):  # half of the 8 nodes within a minute
        d = runner.admit(eng.decide(hw(f"n{i}", ts=100.0 + i)))
        assert d is not None
        statuses.append(runner.run(d).status)
    assert statuses == ["executed", "executed", "blocked", "blocked"]
    assert len(cluster.calls) == 2  # 2/8 = 25% allowed, the third would exceed it
    assert runner.rails.breaker.tripped
    late = runner.admit(eng.decide(hw("n7", ts=100000.0)))  # far outside the window: still held
    assert late is not None and runner.run(late).status == "blocked"
    runner.reset_breaker()
    again = runner.admit(eng.decide(hw("n6", ts=100001.0)))
    assert again is not None and runner.run(again).status == "executed"
    assert any(a.event == "breaker_reset" for a in audit)  # type: ignore[attr-defined]


def test_tripped_breaker_survives_restart(tmp_path: Path) -> None:
    eng, runner, _ = setup(tmp_path)
    for i in range(3):
        d = runner.admit(eng.decide(hw(f"n{i}", ts=100.0 + i)))
        assert d is not None
        runner.run(d)
    _, fresh, _ = setup(tmp_path)
    assert fresh.rails.breaker.tripped


def test_cooldown_blocks_second_action_on_same_node(tmp_path: Path) -> None:
    eng, runner, _ = setup(tmp_path)
    d1 = runner.admit(eng.decide(hw("n1")))
    assert d1 is not None and runner.run(d1).status == "executed"
    other = Incident(ts=130.0, id="x", kind="hw_fault", job="j", onset=130.0, detected_at=130.0, nodes=["n1"])
    d2 = runner.admit(eng.decide(other))
    assert d2 is not None and runner.run(d2).status == "blocked"
    eng2, restarted, _ = setup(tmp_path)  # the cooldown survives a restart of the consumer
    third = Incident(ts=140.0, id="y", kind="hw_fault", job="j", onset=140.0, detected_at=140.0, nodes=["n1"])
    d3 = restarted.admit(eng2.decide(third))
    assert d3 is not None and restarted.run(d3).status == "blocked"


def test_killed_mid_plan_resumes_without_repeating_steps(tmp_path: Path) -> None:
    cluster = RecordingExecutor()
    eng, runner, _ = setup(tmp_path, cluster=cluster, node=RecordingExecutor(fail_on="restart_from_checkpoint"))
    decision = runner.admit(eng.decide(hw("n3")))
    assert decision is not None
    try:
        runner.run(decision)
    except RuntimeError:
        pass
    node = RecordingExecutor()
    _, resumed, _ = setup(tmp_path, cluster=cluster, node=node)
    (pending,) = resumed.journal.unfinished()
    assert resumed.run(pending).status == "executed"
    assert len(cluster.calls) == 1  # the eviction was not repeated
    assert [c.action for c, _ in node.calls] == ["restart_from_checkpoint"]


def test_approval_mode_holds_until_approved(tmp_path: Path) -> None:
    cluster = RecordingExecutor()
    eng, runner, _ = setup(tmp_path, approval=["hw_fault"], cluster=cluster)
    d = runner.admit(eng.decide(hw("n3")))
    assert d is not None and d.status == "awaiting_approval"
    assert runner.run(d).status == "awaiting_approval" and not cluster.calls
    approved = runner.approve(d.id)
    assert approved is not None and runner.run(approved).status == "executed"
    assert len(cluster.calls) == 1


def test_dry_run_executes_nothing(tmp_path: Path) -> None:
    cluster = RecordingExecutor()
    eng, runner, _ = setup(tmp_path, cluster=cluster)
    eng.dry_run = True
    d = runner.admit(eng.decide(hw("n3")))
    assert d is not None and runner.run(d).dry_run and not cluster.calls


def test_stop_time_diagnosis_fans_out_and_evicts_the_machine_the_self_check_names(tmp_path: Path) -> None:
    node, cluster = FanOutAgents(bad="n5"), RecordingExecutor()
    eng, runner, audit = setup(tmp_path, node=node, cluster=cluster)
    hang = Incident(ts=50.0, id="h", kind="hang", job="j", onset=40.0, detected_at=50.0)
    d = runner.admit(eng.decide(hang))
    assert d is not None and runner.run(d).status == "executed"
    assert cluster.calls[0][0].nodes == ["n5"]
    checks = [(c, t) for c, t in node.calls if c.action == "self_check"]
    # One command per machine, each to that machine's agent only, one shared check and rendezvous.
    assert sorted(t[0] for _, t in checks) == [f"n{i}" for i in range(8)]
    assert all(c.nodes == t for c, t in checks) and len({c.id for c, _ in checks}) == 8
    assert {c.params.node_rank for c, _ in checks} == set(range(8))
    assert len({(c.params.check_id, c.params.rendezvous.port) for c, _ in checks}) == 1
    step = runner.journal.steps(d.id)[1]
    assert step.action == "self_check" and step.details["culprits"] == ["n5"] and step.details["stage"] == "bitwise"


def test_sdc_replay_fans_out_and_evicts_the_intersection(tmp_path: Path) -> None:
    node, cluster = FanOutAgents(bad="n6"), RecordingExecutor()
    eng, runner, _ = setup(tmp_path, node=node, cluster=cluster)
    sdc = Incident(ts=50.0, id="s", kind="sdc", job="j", onset=40.0, detected_at=50.0, step=120)
    d = runner.admit(eng.decide(sdc))
    assert d is not None and runner.run(d).status == "executed"
    assert cluster.calls[0][0].nodes == ["n6"]
    replays = [c for c, _ in node.calls if c.action == "replay_regroup"]
    assert len(replays) == 16 and all(len(c.nodes) == 1 for c in replays)  # 8 machines x 2 phases


def test_network_self_check_pass_means_no_eviction(tmp_path: Path) -> None:
    cluster = RecordingExecutor()
    eng, runner, _ = setup(tmp_path, cluster=cluster)
    net = Incident(ts=50.0, id="net", kind="network", job="j", onset=40.0, detected_at=50.0, nodes=["n2"])
    d = runner.admit(eng.decide(net))
    assert d is not None and runner.run(d).status == "executed"
    assert not cluster.calls
    assert [r.status for r in runner.journal.steps(d.id)] == ["ok", "skipped", "skipped", "skipped"]


def test_sdc_falls_back_to_an_unambiguous_checksum_vote_when_replay_names_no_machine(tmp_path: Path) -> None:
    """A transient bit flip does not reproduce in replay; the replicas' majority vote still names the machine."""
    cluster = RecordingExecutor()
    eng, runner, _ = setup(tmp_path, spares=["s0"], cluster=cluster)  # replay passes everywhere (RecordingExecutor: ok)
    voted = Incident(ts=50.0, id="s1", kind="sdc", job="j", onset=40.0, detected_at=50.0, step=120, nodes=["n3"],
                     evidence={"ambiguous": False})
    d = runner.admit(eng.decide(voted))
    assert d is not None and runner.run(d).status == "executed"
    sent = cluster.calls[0][0]
    assert sent.nodes == ["n3"] and b"fallback_nodes" not in msgspec.json.encode(sent.params)

    cluster2 = RecordingExecutor()
    eng2, runner2, _ = setup(tmp_path / "b", cluster=cluster2)
    tie = Incident(ts=50.0, id="s2", kind="sdc", job="j", onset=40.0, detected_at=50.0, step=120, nodes=["n1", "n2"],
                   evidence={"ambiguous": True})
    d2 = runner2.admit(eng2.decide(tie))
    assert d2 is not None and runner2.run(d2).status == "executed"
    assert not cluster2.calls  # a tie names no one: nothing is evicted


def test_restarts_carry_one_generation_for_the_whole_job(tmp_path: Path) -> None:
    """A standby swapped in joins the job's restart generation, so every rank reports the same attempt."""
    node = RecordingExecutor()
    eng, runner, _ = setup(tmp_path, spares=["s0", "s1"], node=node)
    runner.reported_attempt = lambda job: 4  # the job's steps already say attempt 4
    for i, name in enumerate(["n2", "n5"]):
        d = runner.admit(eng.decide(hw(name, ts=100.0 + 1000 * i)))
        assert d is not None and runner.run(d).status == "executed"
    restarts = [c for c, _ in node.calls if c.action == "restart_from_checkpoint"]
    assert [c.params.attempt for c in restarts] == [5, 6]


def test_the_runner_carries_out_exactly_the_runner_scope_actions(tmp_path: Path) -> None:
    """Runner-scope actions are handled by a table in the runner, not by if-chains on names."""
    _, runner, _ = setup(tmp_path)
    assert set(runner._own_steps) == RUNNER_ACTIONS == {"swap_standby", "escalate", "none"}

"""Decision table: one row per incident kind, plus the rules' memory."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.schemas.records import CheckpointEvent, Incident, JobTopology

TOPO = JobTopology(ts=0.0, job="j", world_size=8, tp=2, dp=4,
                   rank_nodes={r: f"n{r // 2}" for r in range(8)})  # 4 nodes, tp=2 within a node


def engine(**kw: Any) -> DecisionEngine:
    reg = CheckpointRegistry()
    reg.observe(CheckpointEvent(ts=10.0, job="j", step=100, path="/ck/100", code_version="v1"))
    reg.observe(CheckpointEvent(ts=20.0, job="j", step=200, path="/ck/200", code_version="v2"))
    eng = DecisionEngine(reg, **kw)
    eng.observe_topology(TOPO)
    return eng


def incident(kind: str, *, nodes: list[str] | None = None, ranks: list[int] | None = None, step: int | None = 250,
             ts: float = 100.0, iid: str = "i1", **evidence: Any) -> Incident:
    return Incident(ts=ts, id=iid, kind=kind, job="j", onset=ts - 5, detected_at=ts, nodes=nodes or [],  # type: ignore[arg-type]
                    ranks=ranks or [], step=step, anomaly_ids=["a1"], evidence=evidence)


TABLE = [
    # kind, incident kwargs, expected rule, expected actions
    ("hw_fault", {"nodes": ["n2"]}, "hw_fault.evict_swap_restart",
     ["evict_node", "swap_standby", "restart_from_checkpoint"]),
    ("hw_fault", {}, "hw_fault.unlocalised", ["escalate"]),
    ("network", {"nodes": ["n1"]}, "network.confirm_then_evict",
     ["self_check", "evict_node", "swap_standby", "restart_from_checkpoint"]),
    ("network", {"nodes": ["n1"], "confirmed": True}, "network.confirmed_evict",
     ["evict_node", "swap_standby", "restart_from_checkpoint"]),
    ("hang", {"ranks": [5]}, "hang.evict_outlier",
     ["dump_stacks", "evict_node", "swap_standby", "restart_from_checkpoint"]),
    ("hang", {"ranks": [1, 3]}, "hang.over_evict_group",
     ["dump_stacks", "evict_node", "swap_standby", "restart_from_checkpoint"]),
    ("hang", {}, "hang.stop_time_diagnosis",
     ["dump_stacks", "self_check", "evict_node", "swap_standby", "restart_from_checkpoint"]),
    ("slowdown", {"nodes": ["n3"]}, "slowdown.evict_outlier", ["evict_node", "swap_standby", "restart_from_checkpoint"]),
    ("nan", {}, "nan.restore_checkpoint", ["restart_from_checkpoint"]),
    ("loss_spike", {}, "loss_spike.restore_checkpoint", ["restart_from_checkpoint"]),
    ("sdc", {}, "sdc.dual_phase_replay",  # stop first: no more steps on corrupt weights while replay runs
     ["stop", "replay_regroup", "replay_regroup", "evict_node", "swap_standby", "restart_from_checkpoint"]),
    ("user_error", {"code_version": "v2"}, "user_error.rollback_code", ["rollback_code"]),
    ("unknown", {}, "unknown.retry_once", ["retry"]),
    ("transient", {}, "transient.retry_once", ["retry"]),
]


@pytest.mark.parametrize(("kind", "kw", "rule", "actions"), TABLE, ids=[f"{r[0]}-{r[2]}" for r in TABLE])
def test_decision_table(kind: str, kw: dict[str, Any], rule: str, actions: list[str]) -> None:
    nodes = kw.pop("nodes", None)
    ranks = kw.pop("ranks", None)
    decision = engine().decide(incident(kind, nodes=nodes, ranks=ranks, **kw))
    assert decision.rule == rule
    assert [s.action for s in decision.plan] == actions
    assert decision.reason and decision.inputs["incident"] == "i1"
    if actions != ["escalate"]:
        assert decision.alternatives or kind == "sdc"


def test_hw_fault_restarts_from_latest_valid_checkpoint() -> None:
    plan = engine().decide(incident("hw_fault", nodes=["n2"])).plan
    assert plan[0].nodes == ["n2"]
    assert plan[2].params.step == 200 and plan[2].params.path == "/ck/200"


def test_over_eviction_picks_smallest_group_containing_suspects() -> None:
    eng = engine()
    # tp=2, dp=2, pp=2 on four nodes: ranks 1 (n0) and 3 (n1) share one dp group, which spans n0 and n1 only.
    eng.observe_topology(JobTopology(ts=0.0, job="j", world_size=8, tp=2, dp=2, pp=2,
                                     rank_nodes={r: f"n{r // 2}" for r in range(8)}))
    decision = eng.decide(incident("slowdown", ranks=[1, 3]))
    assert decision.rule == "slowdown.over_evict_group"
    assert decision.plan[0].nodes == ["n0", "n1"]
    assert decision.inputs["group"] == "dp"


def test_nan_restores_before_onset_and_recurrence_becomes_sdc() -> None:
    eng = engine()
    first = eng.decide(incident("nan", step=150))
    assert first.plan[0].params.step == 100  # checkpoint 200 is after the bad step
    again = eng.decide(incident("nan", step=150, iid="i2", ts=300.0))
    assert again.rule == "nan.recurrence_as_sdc"
    assert [s.action for s in again.plan][:3] == ["stop", "replay_regroup", "replay_regroup"]


def test_sdc_replay_groups_intersect_in_one_machine() -> None:
    plan = engine().decide(incident("sdc")).plan
    rows, cols = plan[1].params.groups, plan[2].params.groups
    for row in rows:
        for col in cols:
            assert len(set(row) & set(col)) <= 1
    assert sorted(m for r in rows for m in r) == ["n0", "n1", "n2", "n3"]


def test_user_error_rolls_back_to_last_good_version_without_evicting() -> None:
    decision = engine().decide(incident("user_error", code_version="v2"))
    assert decision.plan[0].params.code_version == "v1"
    assert all(s.action != "evict_node" for s in decision.plan)


def test_a_crash_pending_diagnosis_restarts_from_the_checkpoint_never_rolls_back_or_evicts() -> None:
    """Ranks died and nothing said why: a code version on the incident is no evidence against that code."""
    eng = engine()
    first = eng.decide(incident("user_error", nodes=["n1"], cause="unknown", pending_diagnosis=True, code_version="v2"))
    assert (first.rule, [s.action for s in first.plan]) == ("job_crash.retry_once", ["retry"])
    again = eng.decide(incident("user_error", nodes=["n1"], iid="i2", ts=200.0, cause="unknown"))
    assert (again.rule, [s.action for s in again.plan]) == ("job_crash.escalate_after_retry", ["escalate"])


def test_unknown_retries_once_then_escalates() -> None:
    eng = engine()
    assert eng.decide(incident("unknown")).rule == "unknown.retry_once"
    second = eng.decide(incident("unknown", iid="i2", ts=200.0))
    assert second.rule == "unknown.escalate_after_retry"
    assert [s.action for s in second.plan] == ["escalate"]
    later = eng.decide(incident("unknown", iid="i3", ts=200.0 + 4000.0))
    assert later.rule == "unknown.retry_once"


def test_network_second_sighting_counts_as_confirmation() -> None:
    eng = engine()
    eng.decide(incident("network", nodes=["n1"]))
    again = eng.decide(incident("network", nodes=["n1"], iid="i2", ts=150.0))
    assert again.rule == "network.confirmed_evict"


def test_decision_is_deterministic_per_incident() -> None:
    a = engine().decide(incident("hw_fault", nodes=["n2"]))
    b = engine().decide(incident("hw_fault", nodes=["n2"]))
    assert a.id == b.id


def test_dry_run_flag_is_recorded() -> None:
    assert engine(dry_run=True).decide(incident("hw_fault", nodes=["n2"])).dry_run


def test_topology_from_incident_evidence_when_none_announced() -> None:
    eng = DecisionEngine(CheckpointRegistry())
    topo = {"world_size": 4, "tp": 1, "dp": 2, "pp": 2, "rank_nodes": {0: "a", 1: "b", 2: "c", 3: "d"}}
    decision = eng.decide(incident("slowdown", ranks=[0, 2], topology=topo))
    assert decision.rule == "slowdown.over_evict_group"
    assert decision.plan[0].nodes == ["a", "c"] and decision.inputs["group"] == "pp"
    bad = eng.decide(incident("slowdown", ranks=[0, 2], iid="i2", topology={"world_size": "x"}))
    assert bad.inputs["topology_known"] is False


@pytest.mark.parametrize("node", ["c\x1b[2J", "c\u202e", "c\n"])
def test_a_carried_topology_with_a_hostile_node_name_is_no_topology(node: str) -> None:
    """A forged incident's topology naming a node with an escape or a bidi control must not pick what is
    evicted: it counts as malformed, as the codec would have refused the same name on the wire."""
    eng = DecisionEngine(CheckpointRegistry())
    topo = {"world_size": 4, "tp": 1, "dp": 2, "pp": 2, "rank_nodes": {0: "a", 1: "b", 2: node, 3: "d"}}
    decision = eng.decide(incident("slowdown", ranks=[0, 2], topology=topo))
    assert decision.inputs["topology_known"] is False
    assert all(node not in a.nodes for a in decision.plan)


def test_plans_refer_to_earlier_steps_through_typed_fields() -> None:
    from trainguard.schemas.plan import CulpritsOf, ReplayCulprit, StepCondition

    net = engine().decide(incident("network", nodes=["n1"])).plan
    assert [s.when for s in net] == [None, StepCondition(step=0), StepCondition(step=0), StepCondition(step=0)]
    hang = engine().decide(incident("hang")).plan  # no suspects: stop-time diagnosis at step 1
    assert [s.targets_from for s in hang] == [None, None, CulpritsOf(step=1), CulpritsOf(step=1), None]
    sdc = engine().decide(incident("sdc", nodes=["n2"], ambiguous=False)).plan
    located = ReplayCulprit(phases=(1, 2), fallback_nodes=("n2",))
    assert [s.targets_from for s in sdc][3:5] == [located, located]
    for plan in (net, hang, sdc):  # nothing of the references is left in what executors are sent
        assert all(not {"only_if_failed", "nodes_from", "from_replay", "fallback_nodes"}
                   & msgspec.to_builtins(s.params).keys() for s in plan)

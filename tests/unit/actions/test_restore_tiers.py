"""Restore-tier selection: the newest step whose every shard survives, never at/after the onset."""

from __future__ import annotations

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.engine import DecisionEngine
from trainguard.actions.restore import TierIndex
from trainguard.schemas.action_params import Restart
from trainguard.schemas.records import CheckpointEvent, Incident

NODES = {0: "a", 1: "b", 2: "c", 3: "d"}


def saved(step: int, rank: int, tier: str, *, ts: float | None = None, status: str = "saved") -> CheckpointEvent:
    holder = NODES[(rank + 1) % 4] if tier == "peer" else NODES[rank]
    return CheckpointEvent(ts=ts if ts is not None else float(step), job="j", step=step, path=f"{tier}://{rank}/{step}",
                           rank=rank, tier=tier, world_size=4, node=holder, status=status,  # type: ignore[arg-type]
                           checksum="c")


def full(idx: TierIndex | CheckpointRegistry, step: int, tiers: tuple[str, ...] = ("memory", "peer")) -> None:
    for rank in range(4):
        for tier in tiers:
            idx.observe(saved(step, rank, tier))


def test_a_step_counts_only_when_every_shard_has_a_copy() -> None:
    idx = TierIndex()
    full(idx, 10)
    for rank in range(3):  # step 11: rank 3's copy never arrived
        idx.observe(saved(11, rank, "memory"))
    plan = idx.plan("j")
    assert plan is not None and plan.step == 10
    assert {c.tier for c in plan.ranks.values()} == {"memory"}


def test_never_at_or_after_the_onset() -> None:
    idx = TierIndex()
    for step in (10, 11, 12):
        full(idx, step)
    plan = idx.plan("j", before=12)
    assert plan is not None and plan.step == 11
    assert idx.plan("j", before=10) is None


def test_an_evicted_machines_shard_comes_from_its_peer() -> None:
    idx = TierIndex()
    full(idx, 10)
    plan = idx.plan("j", lost_nodes={"b"})
    assert plan is not None
    assert plan.ranks[1].tier == "peer" and plan.ranks[1].node == "c"
    assert plan.ranks[0].tier == "memory"
    # losing both the machine and its peer's machine: only the durable copy is left
    assert idx.plan("j", lost_nodes={"b", "c"}) is None
    for rank in range(4):
        idx.observe(saved(8, rank, "durable"))
    plan = idx.plan("j", lost_nodes={"b", "c"})
    assert plan is not None and plan.step == 8 and plan.ranks[1].tier == "durable"


def test_an_invalidated_copy_is_skipped() -> None:
    idx = TierIndex()
    full(idx, 10, tiers=("memory",))
    idx.observe(saved(10, 2, "memory", status="invalid"))  # its checksum failed
    assert idx.plan("j") is None
    idx.observe(saved(10, 2, "disk"))
    plan = idx.plan("j")
    assert plan is not None and plan.ranks[2].tier == "disk"


def test_steps_of_an_abandoned_timeline_are_dropped() -> None:
    idx = TierIndex()
    for step in (10, 11, 12):
        full(idx, step)
    idx.observe(saved(11, 0, "memory", ts=100.0))  # the job went back to 10 and redid 11
    plan = idx.plan("j")
    assert plan is not None and plan.step == 11


def test_the_engine_plans_the_tier_of_every_rank() -> None:
    reg = CheckpointRegistry()
    reg.observe(CheckpointEvent(ts=1.0, job="j", step=5, path="/ckpt/5"))  # the job's own, older checkpoint
    for step in (40, 41, 42):
        full(reg, step)
    engine = DecisionEngine(reg)
    nan = engine.decide(Incident(ts=50.0, id="i1", kind="nan", job="j", onset=45.0, detected_at=50.0, step=42,
                                 nodes=[], ranks=[], evidence={}))
    params = nan.plan[-1].params
    assert isinstance(params, Restart) and params.step == 41 and params.before_step == 42
    assert {v.tier for v in params.restore_tiers.values()} == {"memory"}
    hw = engine.decide(Incident(ts=60.0, id="i2", kind="hw_fault", job="j", onset=58.0, detected_at=60.0,
                                step=None, nodes=["b"], ranks=[], evidence={}))
    restart = hw.plan[-1].params
    assert isinstance(restart, Restart) and restart.step == 42
    assert restart.restore_tiers["1"].tier == "peer" and restart.restore_tiers["0"].tier == "memory"


def test_a_code_rollback_finds_the_last_good_version_among_tiered_copies() -> None:
    reg = CheckpointRegistry()
    for step, code in ((40, "v1"), (41, "v1"), (42, "v2-bad")):
        for rank in range(4):
            reg.observe(CheckpointEvent(ts=float(step), job="j", step=step, path="m", rank=rank, tier="memory",
                                        world_size=4, node=NODES[rank], code_version=code))
    engine = DecisionEngine(reg)
    decision = engine.decide(Incident(ts=50.0, id="u1", kind="user_error", job="j", onset=45.0, detected_at=50.0,
                                      step=43, nodes=[], ranks=[], evidence={"code_version": "v2-bad"}))
    assert decision.rule == "user_error.rollback_code"
    assert decision.plan[0].params.code_version == "v1"


def test_only_lasting_copies_are_journaled() -> None:
    """Memory and peer copies arrive every step; journaling them would swamp the action consumer."""
    idx = TierIndex()
    full(idx, 10, tiers=("memory", "peer", "disk"))
    state = idx.snapshot("j")
    assert {row[2]["tier"] for row in state["copies"]} == {"disk"}
    again = TierIndex()
    again.restore("j", state)
    plan = again.plan("j")
    assert plan is not None and plan.step == 10 and {c.tier for c in plan.ranks.values()} == {"disk"}

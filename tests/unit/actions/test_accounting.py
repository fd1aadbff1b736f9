"""ETTR accounting, checkpoints, standby pool, topology, replay: pure pieces (their doctests run in tests/unit/test_doctests.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trainguard.actions.checkpoints import CheckpointRegistry
from trainguard.actions.ettr import EttrAccount
from trainguard.actions.replay import locate, plan_regroupings
from trainguard.schemas.records import ActionResult, CheckpointEvent, Incident, TrainingStep

StepFactory = Callable[..., TrainingStep]


def test_ettr_splits_detection_localisation_failover_and_recompute(step_factory: StepFactory) -> None:
    acc = EttrAccount()
    for s in range(1, 11):  # steps 1..10 end at t=1..10
        acc.observe(step_factory(s))
    acc.observe(Incident(ts=12.0, id="i", kind="hang", job="j", onset=10.0, detected_at=12.0))
    acc.observe(ActionResult(ts=15.0, command_id="c", action="self_check", status="failed", job="j"))
    for s in range(6, 13):  # restored from step 5 at t=20: steps 6..10 redone, then 11, 12
        acc.observe(step_factory(s, ts=14.0 + s))
    acc.observe(step_factory(6, ts=20.0, rank=1))  # other ranks do not double count
    report = acc.report("j")
    assert report.wall_s == pytest.approx(26.0)
    assert report.unproductive_s["detection"] == pytest.approx(2.0)
    assert report.unproductive_s["localisation"] == pytest.approx(3.0)
    assert report.unproductive_s["failover"] == pytest.approx(4.0)  # 15 -> 19, the start of the first new step
    assert report.unproductive_s["recompute"] == pytest.approx(5.0)  # steps 6..10 of the first attempt
    assert report.productive_s == pytest.approx(12.0)
    assert report.ettr == pytest.approx(12.0 / 26.0)
    assert report.as_dict()["incidents"] == 1


def test_ettr_of_a_clean_job_is_one(step_factory: StepFactory) -> None:
    acc = EttrAccount()
    for s in range(1, 5):
        acc.observe(step_factory(s))
    assert acc.report("j").ettr == pytest.approx(1.0)
    assert acc.report("unknown").ettr == 1.0


def test_checkpoint_registry_invalidation_and_code_versions() -> None:
    reg = CheckpointRegistry()
    reg.observe(CheckpointEvent(ts=1.0, job="j", step=10, path="/10", code_version="v1"))
    reg.observe(CheckpointEvent(ts=2.0, job="j", step=20, path="/20", code_version="v2"))
    reg.observe(CheckpointEvent(ts=3.0, job="j", step=30, path="/30", status="started"))
    assert reg.latest("j").step == 20  # type: ignore[union-attr]
    reg.observe(CheckpointEvent(ts=4.0, job="j", step=20, path="/20", status="invalid"))
    assert reg.latest("j").step == 10  # type: ignore[union-attr]
    assert reg.latest_before("j", ts=0.5) is None
    assert reg.latest_with_code("j", exclude="v1") is None
    assert reg.latest_with_code("j", exclude="v3").code_version == "v1"  # type: ignore[union-attr]


@pytest.mark.parametrize("n", [2, 3, 5, 8, 9, 16])
def test_replay_locates_every_single_faulty_machine(n: int) -> None:
    machines = [f"m{i}" for i in range(n)]
    plan = plan_regroupings(machines)
    for bad in machines:
        f1 = [i for i, g in enumerate(plan.phase1) if bad in g]
        f2 = [i for i, g in enumerate(plan.phase2) if bad in g]
        assert locate(plan, f1, f2) == bad


def test_replay_needs_two_machines() -> None:
    with pytest.raises(ValueError, match="two machines"):
        plan_regroupings(["only"])

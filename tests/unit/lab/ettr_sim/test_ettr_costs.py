"""Pricing one incident under each policy."""

from __future__ import annotations

import pytest

from trainguard.lab.ettr_sim.costs import baseline_loss, trainguard_loss
from trainguard.lab.ettr_sim.params import DETECTOR_KIND, BaselineCosts, JobParams, TrainguardCosts

JOB, TG, BASE = JobParams(), TrainguardCosts(), BaselineCosts()


@pytest.mark.parametrize("kind", sorted(DETECTOR_KIND))
def test_trainguard_beats_the_baseline_for_every_kind(kind: str) -> None:
    ours = trainguard_loss(kind, JOB, TG, since_ckpt_s=900.0, standby=True)
    theirs = baseline_loss(kind, JOB, BASE, since_ckpt_s=900.0)
    assert ours.total_s < theirs.total_s
    assert ours.recompute_s == theirs.recompute_s  # same checkpoints, same re-computation


def test_crash_uses_detection_latency_and_standby_swap() -> None:
    loss = trainguard_loss("cuda_error", JOB, TG, since_ckpt_s=100.0, standby=True)
    assert loss.detection_s == TG.detection_s["hw_fault"] + TG.pipeline_latency_s
    assert loss.localisation_s == 0.0
    assert loss.failover_s == TG.standby_swap_s + TG.restart_s
    assert loss.recompute_s == 100.0


def test_empty_standby_pool_means_a_requeue() -> None:
    loss = trainguard_loss("machine_fault", JOB, TG, since_ckpt_s=0.0, standby=False)
    assert loss.failover_s == TG.requeue_s + TG.remote_load_s


def test_mfu_decline_loses_only_the_dropped_fraction_while_unfixed() -> None:
    job = JobParams(mfu_drop=0.25)
    ours = trainguard_loss("mfu_decline", job, TG, since_ckpt_s=0.0, standby=True)
    assert ours.detection_s == pytest.approx(0.25 * (TG.detection_s["slowdown"] + TG.pipeline_latency_s))
    theirs = baseline_loss("mfu_decline", job, BASE, since_ckpt_s=0.0)
    assert theirs.detection_s == pytest.approx(0.25 * BASE.slowdown_notice_s)


def test_hang_baseline_waits_for_the_nccl_timeout() -> None:
    assert baseline_loss("hang", JOB, BASE, since_ckpt_s=0.0).detection_s == BASE.nccl_timeout_s


def test_manual_restart_is_a_hot_update_versus_a_requeue() -> None:
    assert trainguard_loss("manual_restart", JOB, TG, since_ckpt_s=500.0, standby=True).total_s == TG.hot_update_s
    assert baseline_loss("manual_restart", JOB, BASE, since_ckpt_s=500.0).total_s == BASE.requeue_s + BASE.remote_load_s


def test_a_stop_time_diagnosis_is_lost_in_full_even_for_a_slow_job() -> None:
    for kind in ("hang", "mfu_decline"):
        plain = trainguard_loss(kind, JOB, TG, since_ckpt_s=0.0, standby=True)
        diagnosed = trainguard_loss(kind, JOB, TG, since_ckpt_s=0.0, standby=True, diagnose=True)
        assert diagnosed.localisation_s - plain.localisation_s == TG.diagnosis_s

"""A stale or negative step during a hang neither hides nor delays it; a restart is an attempt or a topology.

Issue 21: one step record with a negative step disabled hang detection for
its job for good (the detector took it as a restart from step -1), and a
stale step (below the rank's last) delayed the hang and changed its onset
and id. The schema now refuses the negative one (tests/unit/schemas/test_bounds.py);
here the detector itself is fed both, as a record built in-process could be.
"""

from __future__ import annotations

import msgspec

from trainguard.detectors.checks import feed
from trainguard.detectors.hang import HangDetector
from trainguard.detectors.synthetic import Fleet
from trainguard.schemas.records import Anomaly, JobTopology, Record, TrainingStep


def _hang(extra: list[Record]) -> tuple[list[Anomaly], HangDetector]:
    """40 steps, then a 30 s silence, `extra` (records dated in the silence), then 90 s more."""
    f, d = Fleet(step_s=2.0), HangDetector()
    assert feed(d, f.steps(40)) == []
    head = f.idle(30)
    out = feed(d, head + [msgspec.structs.replace(r, ts=f.ts) for r in extra] + f.idle(90))
    return out, d


def _step(step: int, rank: int = 0) -> TrainingStep:
    return TrainingStep(ts=1.0, job="job-a", rank=rank, node=f"node-{rank // 4:02d}", step=step, loss=2.0)


def test_a_stale_step_during_a_hang_changes_neither_its_onset_nor_its_id_nor_its_time() -> None:
    (clean,), _ = _hang([])
    out, d = _hang([_step(35), _step(12, rank=5)])
    assert len(out) == 1
    assert (out[0].onset, out[0].id, out[0].ts) == (clean.onset, clean.id, clean.ts)
    assert d.stale_steps == 2


def test_a_negative_step_during_a_hang_does_not_disable_detection() -> None:
    (clean,), _ = _hang([])
    out, d = _hang([_step(-1)])
    assert [(a.kind, a.onset, a.id) for a in out] == [("hang", clean.onset, clean.id)]
    assert d.stale_steps == 1


def test_a_repeated_step_is_not_stale_and_moves_nothing() -> None:
    (clean,), _ = _hang([])
    out, d = _hang([_step(40)])  # the rank's last step again (a duplicate delivery)
    assert [(a.onset, a.id) for a in out] == [(clean.onset, clean.id)]
    assert d.stale_steps == 0


def test_a_restart_announced_by_a_topology_from_a_lower_step_is_progress() -> None:
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(40))
    topology = JobTopology(ts=f.ts + 1, job=f.job, world_size=f.world,
                           rank_nodes={r: f.node(r) for r in range(f.world)})
    f.step = 20  # resumed from a checkpoint at step 20, same attempt number (no supervisor counts them)
    assert feed(d, [topology] + f.idle(20) + f.steps(60)) == []
    assert d.stale_steps == 0 and d._jobs[f.job].max_step == 80


def test_a_job_that_hangs_after_its_topology_restart_still_fires() -> None:
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(40))
    feed(d, [JobTopology(ts=f.ts + 1, job=f.job, world_size=f.world, rank_nodes={0: f.node(0)})])
    f.step = 20
    feed(d, f.steps(30))
    out = feed(d, f.idle(120))
    assert [a.kind for a in out] == ["hang"] and out[0].step == 51


def test_an_attempt_change_is_still_a_restart() -> None:
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(40))
    f.attempt, f.step = 1, 10
    assert feed(d, f.idle(20) + f.steps(40)) == []
    assert d.stale_steps == 0


def _skewed_steps(f: Fleet, n: int, behind_s: float) -> list[Record]:
    """`n` steps of `f`; the ranks of node-01 date their step records `behind_s` early and send them first."""
    out: list[Record] = []
    for _ in range(n):
        step = f.steps(1)
        behind = [msgspec.structs.replace(r, ts=r.ts - behind_s) for r in step
                  if isinstance(r, TrainingStep) and r.node == "node-01"]
        out += behind + [r for r in step if not (isinstance(r, TrainingStep) and r.node == "node-01")]
    return out


def test_a_host_an_hour_behind_makes_no_healthy_job_look_hung_and_swallows_no_real_hang() -> None:
    f, d = Fleet(step_s=2.0), HangDetector()
    assert feed(d, f.steps(5)) == []
    assert feed(d, _skewed_steps(f, 150, 3600.0)) == []  # 300 s of healthy steps, far past the threshold
    stalled_at = f.ts
    out = feed(d, f.idle(120))
    assert [a.kind for a in out] == ["hang"]
    assert abs(out[0].onset - stalled_at) < 1.0  # dated by the hosts whose clocks are right
    assert out[0].evidence["threshold_s"] < 60  # the step time was learned, not the warm-up floor

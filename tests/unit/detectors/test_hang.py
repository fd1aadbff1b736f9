"""hang: a live job that stops stepping; pauses; localisation by stacks."""

from __future__ import annotations

from detector_fleet import Fleet

from detectors.hang import HangDetector
from schemas.records import Anomaly, CheckpointEvent, Record


def feed(d: HangDetector, records: list[Record]) -> list[Anomaly]:
    out: list[Anomaly] = []
    for r in records:
        out += d.observe(r)
        out += d.tick(r.ts)
    return out


def test_fires_within_budget_and_localises_with_stacks() -> None:
    f, d = Fleet(step_s=4.0), HangDetector()
    assert feed(d, f.steps(40)) == []
    stalled_at = f.ts
    records = f.idle(30) + f.stacks(odd_rank=6) + f.idle(60)
    out = feed(d, records)
    assert len(out) == 1
    hang = out[0]
    assert hang.kind == "hang" and hang.ranks == [6] and hang.nodes == ["node-01"]
    assert hang.evidence["localised_by"] == "stacks"
    assert abs(hang.onset - stalled_at) < 1.0
    assert hang.ts - stalled_at <= max(60.0, 6 * 4.0 / 0.8 * 1.0)


def test_threshold_follows_the_jobs_own_step_time() -> None:
    slow, fast = Fleet(step_s=30.0), Fleet(step_s=1.0)
    ds, df = HangDetector(), HangDetector()
    feed(ds, slow.steps(10))
    feed(df, fast.steps(10))
    assert ds.threshold(ds._jobs["job-a"]) > 100  # 4.5 x ~37 s steps
    assert df.threshold(df._jobs["job-a"]) == 40.0  # the floor


def test_checkpoint_pause_does_not_fire_but_a_stuck_checkpoint_does() -> None:
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(20))
    # a normal 100 s checkpoint, announced
    assert feed(d, [CheckpointEvent(ts=f.ts, job="job-a", step=f.step, path="/c", status="started")]) == []
    assert feed(d, f.idle(100, phase="checkpointing")) == []
    assert feed(d, [CheckpointEvent(ts=f.ts, job="job-a", step=f.step, path="/c", status="saved")]) == []
    assert feed(d, f.steps(20)) == []
    # the next checkpoint never ends: far longer than the one before
    feed(d, [CheckpointEvent(ts=f.ts, job="job-a", step=f.step, path="/c2", status="started")])
    out = feed(d, f.idle(400, phase="checkpointing"))
    assert [a.evidence["during"] for a in out] == ["checkpointing"]


def test_dead_job_is_not_a_hang_and_eval_phase_suppresses() -> None:
    f, d = Fleet(), HangDetector()
    feed(d, f.steps(20))
    assert d.tick(f.ts + 1000) == []  # nothing alive: crashed or finished, not hung
    f2, d2 = Fleet(), HangDetector()
    feed(d2, f2.steps(20))
    assert feed(d2, [f2.phase("eval")] + f2.idle(200, phase="eval")) == []
    assert feed(d2, [f2.phase("training")] + f2.steps(5)) == []


def test_restart_resets_progress() -> None:
    f, d = Fleet(), HangDetector()
    feed(d, f.steps(20))
    f.attempt, f.step = 1, 0
    assert feed(d, f.idle(30) + f.steps(10)) == []

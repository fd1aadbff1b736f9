"""hang inside checkpoints and evals: judged against this job's own pauses, a storage floor and a ten-minute cap."""

from __future__ import annotations

from trainguard.detectors.checks import feed
from trainguard.detectors.hang import HangDetector
from trainguard.detectors.synthetic import Fleet
from trainguard.schemas.records import Anomaly, CheckpointEvent, PhaseChange


def checkpoint(d: HangDetector, f: Fleet, seconds: float, *, then_eval_s: float = 0.0) -> list[Anomaly]:
    """One announced checkpoint of `seconds` (optionally followed at once by an eval), then steps again."""
    out = feed(d, [PhaseChange(ts=f.ts, job="job-a", phase="checkpointing", step=f.step),
                   CheckpointEvent(ts=f.ts + 0.01, job="job-a", step=f.step, path="/c", status="started")])
    out += feed(d, f.idle(seconds, phase="checkpointing"))
    out += feed(d, [CheckpointEvent(ts=f.ts, job="job-a", step=f.step, path="/c", status="saved")])
    if then_eval_s:
        out += feed(d, [PhaseChange(ts=f.ts, job="job-a", phase="eval", step=f.step)])
        out += feed(d, f.idle(then_eval_s, phase="eval"))
    return out + feed(d, f.steps(30))


def trained(step_s: float = 2.0, pauses: tuple[float, ...] = (40.0, 45.0, 42.0)) -> tuple[Fleet, HangDetector]:
    f, d = Fleet(step_s=step_s), HangDetector()
    assert feed(d, f.steps(30)) == []
    for seconds in pauses:
        assert checkpoint(d, f, seconds) == []
    return f, d


def test_a_checkpoint_five_times_slower_than_usual_on_a_loaded_filesystem_is_no_hang() -> None:
    f, d = trained()  # this job's checkpoints take ~45 s
    assert checkpoint(d, f, 450.0) == []  # ten times: the shared filesystem had a bad day; time alone convicts nothing


def test_a_hung_checkpoint_write_with_idle_gpus_and_no_other_evidence_is_found_within_ten_minutes() -> None:
    f, d = trained()
    start = f.ts
    out = feed(d, [PhaseChange(ts=f.ts, job="job-a", phase="checkpointing", step=f.step)])
    out += feed(d, f.idle(900.0, phase="checkpointing"))
    [hang] = out
    assert hang.evidence["during"] == "checkpointing" and hang.onset == start
    assert 540.0 <= hang.ts - start <= 600.0


def test_stacks_showing_a_stuck_minority_convict_a_checkpoint_within_the_jobs_own_pause_lengths() -> None:
    f, d = trained()
    start = f.ts
    out = feed(d, [PhaseChange(ts=f.ts, job="job-a", phase="checkpointing", step=f.step)])
    out += feed(d, f.idle(30.0, phase="checkpointing") + f.stacks(odd_rank=5))
    out += feed(d, f.idle(300.0, phase="checkpointing"))
    [hang] = out
    assert hang.ranks == [5] and hang.evidence["localised_by"] == "stacks"
    assert hang.ts - start <= 90.0  # 1.5 x the ~45 s this job's checkpoints take, or the 40 s floor


def test_a_checkpoint_followed_at_once_by_an_eval_is_judged_against_both_together() -> None:
    f, d = trained(pauses=(200.0, 210.0))
    assert checkpoint(d, f, 200.0) == []
    assert feed(d, [PhaseChange(ts=f.ts, job="job-a", phase="eval", step=f.step)]) == []
    assert feed(d, f.idle(150.0, phase="eval")) + feed(d, f.steps(30)) == []  # an eval of 150 s learned
    assert checkpoint(d, f, 210.0, then_eval_s=160.0) == []  # 370 s back to back: under ckpt + eval learned


def test_a_pause_of_a_kind_never_seen_is_capped_at_ten_minutes() -> None:
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(30))
    start = f.ts
    out = feed(d, [PhaseChange(ts=f.ts, job="job-a", phase="checkpointing", step=f.step)])
    out += feed(d, f.idle(800.0, phase="checkpointing"))
    [hang] = out
    assert 540.0 <= hang.ts - start <= 600.0


def test_a_job_whose_own_checkpoints_take_longer_than_the_cap_keeps_a_margin_over_them() -> None:
    f, d = trained(pauses=(500.0, 520.0))
    assert checkpoint(d, f, 700.0) == []  # 1.5 x its longest (780 s), not the 540 s of time alone
    start = f.ts
    out = feed(d, [PhaseChange(ts=f.ts, job="job-a", phase="checkpointing", step=f.step)])
    out += feed(d, f.idle(1500.0, phase="checkpointing"))
    assert [round(a.ts - start) // 100 for a in out] == [10]  # hung: found at 1.5 x its longest (700 s)


def test_copies_landing_during_a_slow_checkpoint_restart_the_clock_a_stuck_write_has_none() -> None:
    f, d = trained()
    out = feed(d, [PhaseChange(ts=f.ts, job="job-a", phase="checkpointing", step=f.step)])
    for _ in range(5):  # 5 x 200 s: each rank's shard lands 200 s after the last, 1,000 s in all
        out += feed(d, f.idle(200.0, phase="checkpointing"))
        out += feed(d, [CheckpointEvent(ts=f.ts, job="job-a", step=f.step, path="/c", status="saved", tier="disk",
                                        rank=0)])
    assert out == []
    out += feed(d, f.idle(600.0, phase="checkpointing"))  # then nothing lands any more
    assert [a.evidence["during"] for a in out] == ["checkpointing"]

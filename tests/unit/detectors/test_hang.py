"""hang: a live job that stops stepping; pauses; localisation by stacks."""

from __future__ import annotations

from trainguard.detectors.checks import feed
from trainguard.detectors.hang import HangDetector
from trainguard.detectors.synthetic import Fleet
from trainguard.schemas.records import (
    Anomaly,
    CheckpointEvent,
    GpuStats,
    Heartbeat,
    NodeGpuSample,
    PhaseChange,
    RdmaPort,
    RdmaSample,
    Record,
)


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
    assert df.threshold(df._jobs["job-a"]) == 40.0 + 2 * 2.0  # the floor plus twice the clock-skew bound


def test_checkpoint_pause_does_not_fire_but_a_stuck_checkpoint_does() -> None:
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(20))
    # a normal 100 s checkpoint, announced
    assert feed(d, [CheckpointEvent(ts=f.ts, job="job-a", step=f.step, path="/c", status="started")]) == []
    assert feed(d, f.idle(100, phase="checkpointing")) == []
    assert feed(d, [CheckpointEvent(ts=f.ts, job="job-a", step=f.step, path="/c", status="saved")]) == []
    assert feed(d, f.steps(20)) == []
    # the next checkpoint never ends: time alone convicts it after 540 s (a loaded filesystem may take 400 s)
    feed(d, [CheckpointEvent(ts=f.ts, job="job-a", step=f.step, path="/c2", status="started")])
    assert feed(d, f.idle(400, phase="checkpointing")) == []
    out = feed(d, f.idle(200, phase="checkpointing"))
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


def _pause(f: Fleet, phase: str, seconds: float, *, per_rank: bool = True) -> list[Record]:
    """Every rank announces `phase` at the current step, then the job idles `seconds` (heartbeats go on)."""
    announce: list[Record] = [PhaseChange(ts=f.ts + 0.01 * r, job=f.job, phase=phase, rank=r, node=f.node(r),
                                          step=f.step) for r in range(f.world if per_rank else 1)]
    return announce + f.idle(seconds, phase=phase)


def test_megatron_announcements_at_one_step_do_not_end_the_pause() -> None:
    """checkpointing, training, eval within milliseconds; then a 150 s pause: no hang, and it is learned whole."""
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(30))
    burst: list[Record] = []
    for i, phase in enumerate(("checkpointing", "training", "eval")):
        burst += [PhaseChange(ts=f.ts + 0.001 * i, job=f.job, phase=phase, rank=r, node=f.node(r), step=f.step)
                  for r in range(f.world)]
    assert feed(d, burst + f.idle(150, phase="eval") + f.steps(10)) == []
    learned = d._jobs["job-a"].pauses["checkpointing+eval"]
    assert len(learned) == 1 and learned.values[0] > 140  # the whole pause, not a millisecond
    # the next such pause, as long, must not fire either
    burst = [PhaseChange(ts=f.ts, job=f.job, phase=p, rank=0, node=f.node(0), step=f.step)
             for p in ("checkpointing", "training", "eval")]
    assert feed(d, burst + f.idle(160, phase="eval") + f.steps(5)) == []


def test_a_step_in_flight_when_the_pause_is_announced_does_not_end_it() -> None:
    """Ranks announce the pause at step N while some ranks' step-N records are still on their way."""
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(30))
    late = f.steps(1)  # step N: its records arrive after the announcement below
    announce = [PhaseChange(ts=f.ts - 0.05, job=f.job, phase="checkpointing", rank=r, node=f.node(r), step=f.step)
                for r in range(f.world)]
    out = feed(d, announce + late + f.idle(120, phase="checkpointing") + f.steps(5))
    assert out == []
    assert d._jobs["job-a"].pauses["checkpointing"].values[0] > 110


def test_one_early_rank_does_not_end_a_pause_the_job_as_a_whole_does() -> None:
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(30))
    feed(d, _pause(f, "checkpointing", 60))
    job = d._jobs["job-a"]
    early = [r for r in f.steps(1) if getattr(r, "rank", 99) == 0][:1]
    feed(d, early)
    assert job.paused_by is not None  # one rank stepping is not the job stepping
    feed(d, f.steps(2))
    assert job.paused_by is None


def test_skew_up_to_the_bound_never_fires() -> None:
    """Host clocks 2 s apart: the newest host runs 2 s ahead of the one reporting steps; no false hang."""
    f, d = Fleet(step_s=9.0, noise=0.0), HangDetector(skew_s=2.0)
    out = feed(d, f.steps(40))
    limit = d.threshold(d._jobs["job-a"]) - 2 * 2.0  # what an unskewed fleet would allow
    ahead = f.ts + limit + 3.9  # a host 2 s fast, the step host 2 s slow: 4 s of apparent extra stall
    out += d.observe(Heartbeat(ts=ahead - 5, job="job-a", rank=0, node="node-00")) + d.tick(ahead)
    assert out == []
    assert [a.kind for a in d.tick(ahead + 1.0)] == ["hang"]


def test_async_checkpoint_overlapping_steps_is_a_short_pause() -> None:
    """async_save: checkpointing announced, steps go on, "saved" arrives later; nothing fires, nothing stalls."""
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(30))
    out = feed(d, [CheckpointEvent(ts=f.ts, job="job-a", step=f.step, path="/c", status="started")] + f.steps(20)
               + [CheckpointEvent(ts=f.ts, job="job-a", step=f.step - 20, path="/c", status="saved")] + f.steps(5))
    assert out == [] and d._jobs["job-a"].paused_by is None


def test_a_hang_inside_a_checkpoint_spinning_gpus_is_caught_like_an_idle_one() -> None:
    """GPUs at 100 %, RDMA silent, no steps: a spinning hang even inside a pause, after the normal threshold."""
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(30))
    feed(d, _pause(f, "checkpointing", 100) + f.steps(10))  # teaches a 100 s checkpoint
    feed(d, _pause(f, "checkpointing", 5))
    hung_at = f.ts
    out: list[Anomaly] = []
    for _ in range(12):  # every node spins with no traffic
        f.ts += 10.0
        for n in range(f.nodes):
            node = f"node-{n:02d}"
            out += feed(d, [NodeGpuSample(ts=f.ts, node=node, gpus=[GpuStats(index=i, util_pct=100.0)
                                                                   for i in range(4)]),
                            RdmaSample(ts=f.ts, node=node, ports=[RdmaPort(device="mlx5_0", port=1)])])
    assert [a.kind for a in out] == ["hang"]
    assert out[0].ts - hung_at <= 60.0  # the pause allowance (~150 s) did not apply
    assert out[0].evidence["gpus_spinning"] is True


def test_a_job_that_stops_during_a_checkpoint_is_not_hung_though_idle_gpus_read_a_little_utilisation() -> None:
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(30))
    feed(d, _pause(f, "checkpointing", 30) + f.steps(5))  # teaches a 30 s checkpoint
    out = feed(d, _pause(f, "checkpointing", 20) + [f.phase("stopped")])
    for k in range(60):  # the job is gone; its nodes' idle GPUs read 0-3 % (NVML noise)
        f.ts += 10.0
        out += feed(d, [NodeGpuSample(ts=f.ts, node=f"node-{n:02d}", gpus=[GpuStats(index=0, util_pct=k % 4)])
                        for n in range(f.nodes)])
    assert out == []


def test_late_heartbeats_of_the_old_phase_do_not_revive_a_stopped_jobs_pause() -> None:
    """A crash in a checkpoint: 'stopped' is announced, then skewed heartbeats still say 'checkpointing'."""
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(30))
    feed(d, _pause(f, "checkpointing", 30) + f.steps(5))
    out = feed(d, _pause(f, "checkpointing", 20) + [f.phase("stopped")])
    out += feed(d, f.beats(phase="checkpointing"))  # sent before the crash, stamped by a clock running late
    f.ts += 300.0
    out += feed(d, [f.phase("init")] + f.samples())
    assert out == []


def test_a_late_heartbeat_of_the_pause_that_just_ended_does_not_start_another() -> None:
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(30))
    feed(d, _pause(f, "eval", 60))
    ended_at = f.step
    feed(d, f.steps(1))
    late = [Heartbeat(ts=f.ts, job="job-a", rank=3, node="node-00", step=ended_at, phase="eval")]
    feed(d, late)
    assert d._jobs["job-a"].paused_by is None


def test_a_pause_announced_one_step_after_another_is_a_new_pause() -> None:
    """eval ends, one step completes, a checkpoint begins: two pauses of their own kinds, not one long one."""
    f, d = Fleet(step_s=2.0), HangDetector()
    feed(d, f.steps(30))
    feed(d, _pause(f, "eval", 60))
    next_step = f.steps(1)
    announce = [PhaseChange(ts=f.ts - 0.01, job="job-a", phase="checkpointing", rank=0, node="node-00", step=f.step)]
    feed(d, announce + next_step)
    job = d._jobs["job-a"]
    assert set(job.pauses) == {"eval"} and job.pause_key == frozenset({"checkpointing"})

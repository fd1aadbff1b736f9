"""hang: the job is alive but no step completes for longer than it should.

"Longer than it should" is learned per job, online: the median interval
between successive step completions (`Rolling` window), times `mult`, never
below `floor_s` (and never below `warmup_floor_s` before `warmup_steps`
intervals are known, since first steps compile and warm caches). Alive
means heartbeats or GPU samples of the job's nodes keep arriving: a job
whose every signal stopped has crashed or ended, it is not hung.

Announced pauses do not count: a `PhaseChange` or heartbeat phase of
checkpointing/eval, or a `CheckpointEvent` "started", stops the clock until
training resumes (phase back to training, checkpoint saved, or a new step).
The rule fires from `tick(ts)` because a hung job sends no step records.

Localisation, best first: stack samples taken during the stall (the
outlier cluster, see `detectors.stacks`); ranks that did not finish the
step the others finished; ranks whose heartbeats stopped. RDMA traffic of
the job's nodes collapsing to ~0 is recorded as corroborating evidence.
"""

from __future__ import annotations

from typing import Any

from detectors.base import Detector
from detectors.common import Bounded, Rolling, finding, rank_map
from detectors.stacks import is_background_thread, is_observer_thread, outliers, signature
from schemas.records import (
    Anomaly, CheckpointEvent, Heartbeat, JobTopology, LogEvent, NodeGpuSample, PhaseChange, RdmaSample, Record,
    StackSample, TrainingStep,
)

PAUSE_PHASES = frozenset({"checkpointing", "eval", "init", "idle", "stopped"})
MEASURED_PAUSES = frozenset({"checkpointing", "eval"})


class _Job:
    __slots__ = ("max_step", "attempt", "progress_ts", "intervals", "paused_by", "alive_ts", "fired",
                 "rank_step", "rank_node", "rank_beat", "stacks", "pause_ts", "pause_phase", "pauses", "announced",
                 "exit_ts")

    def __init__(self, ts: float) -> None:
        self.max_step = -1
        self.attempt = 0
        self.progress_ts = ts
        self.intervals = Rolling(64)
        self.paused_by: int | None = None  # the rank that announced a pause
        self.alive_ts = ts
        self.fired = False
        self.rank_step: Bounded[int, int] = rank_map()
        self.rank_node: Bounded[int, str] = rank_map()
        self.rank_beat: Bounded[int, float] = rank_map()
        self.stacks: Bounded[int, tuple[float, tuple[str, ...]]] = rank_map()
        self.pause_ts = ts
        self.pause_phase = ""
        self.pauses = Rolling(16)  # durations of past checkpoint/eval pauses
        self.announced = False
        self.exit_ts: float | None = None  # a process of the job exited (the agent said so)

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, s) for s in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)


class HangDetector(Detector):
    """Fires when a live job stops completing steps; localises with stacks.

    >>> from schemas.records import TrainingStep, Heartbeat
    >>> d = HangDetector(floor_s=30, warmup_steps=2)
    >>> for s in range(5):
    ...     _ = d.observe(TrainingStep(ts=float(s), job="j", rank=0, node="n0", step=s, loss=1.0))
    >>> _ = d.observe(Heartbeat(ts=40.0, job="j", rank=0, node="n0"))
    >>> [(a.kind, a.onset) for a in d.tick(40.0)]
    [('hang', 4.0)]
    """

    consumes = frozenset({"step", "heartbeat", "phase", "checkpoint", "stack", "gpu_sample", "rdma_sample", "log",
                          "topology"})

    def __init__(
        self,
        *,
        instance: str = "hang",
        mult: float = 4.5,
        floor_s: float = 40.0,
        warmup_floor_s: float = 300.0,
        warmup_steps: int = 5,
        alive_s: float = 60.0,
        collapse_bps: float = 1e6,
        max_pause_s: float = 900.0,
        exit_grace_s: float = 120.0,
        max_jobs: int = 10_000,
        max_nodes: int = 100_000,
    ) -> None:
        super().__init__(instance=instance)
        self.mult = mult
        self.floor_s = floor_s
        self.warmup_floor_s = warmup_floor_s
        self.warmup_steps = warmup_steps
        self.alive_s = alive_s
        self.collapse_bps = collapse_bps
        self.max_pause_s = max_pause_s
        self.exit_grace_s = exit_grace_s
        self._jobs: Bounded[str, _Job] = Bounded(max_jobs)
        self._node_job: Bounded[str, str] = Bounded(max_nodes)
        self._rdma: Bounded[str, float] = Bounded(max_nodes)

    def _job(self, name: str, ts: float) -> _Job:
        job = self._jobs.get(name)
        if job is None:
            self._jobs[name] = job = _Job(ts)
        return job

    def observe(self, record: Record) -> list[Anomaly]:
        if isinstance(record, TrainingStep):
            self._step(record)
        elif isinstance(record, Heartbeat):
            job = self._job(record.job, record.ts)
            job.alive_ts = max(job.alive_ts, record.ts)
            job.rank_beat[record.rank] = record.ts
            if record.rank not in job.rank_node:
                job.rank_node[record.rank] = record.node
                self._node_job[record.node] = record.job
            self._phase(job, record.phase, record.rank, record.ts, announced=False)
        elif isinstance(record, NodeGpuSample):
            name = record.job or self._node_job.get(record.node)
            # Busy GPUs mean live processes (a hung collective spins at full utilisation); idle GPUs
            # after a crash must not keep a dead job "alive".
            if name and name in self._jobs and record.nvml_ok and any(g.util_pct > 0 for g in record.gpus):
                job = self._jobs[name]
                job.alive_ts = max(job.alive_ts, record.ts)
        elif isinstance(record, PhaseChange):
            self._phase(self._job(record.job, record.ts), record.phase, record.rank, record.ts)
        elif isinstance(record, CheckpointEvent):
            phase = "checkpointing" if record.status == "started" else "training"
            self._phase(self._job(record.job, record.ts), phase, record.rank, record.ts)
        elif isinstance(record, StackSample):
            if is_observer_thread(record.frames):
                return []  # the hook's and Kafka's own threads look alike on every rank
            job = self._job(record.job, record.ts)
            prev = job.stacks.get(record.rank)
            # One dump yields a sample per thread; the main thread speaks for the rank.
            if prev is None or record.ts > prev[0] + 0.5 or not is_background_thread(record.frames):
                job.stacks[record.rank] = (record.ts, signature(record.frames))
            job.rank_node.setdefault(record.rank, record.node)
        elif isinstance(record, LogEvent):
            # A process that exited is a crash or a restart, not a hang: its cause speaks through the
            # logs or the hardware. Only if the job still makes no progress `exit_grace_s` later is it stuck.
            exited = self._jobs.get(record.job)
            if exited is not None and record.exit_code is not None:
                exited.exit_ts = record.ts
        elif isinstance(record, RdmaSample):
            self._rdma[record.node] = sum(p.tx_bps + p.rx_bps for p in record.ports)
        elif isinstance(record, JobTopology):
            job = self._job(record.job, record.ts)
            for rank, node in record.rank_nodes.items():
                job.rank_node[rank] = node
                self._node_job[node] = record.job
        return []

    def _step(self, rec: TrainingStep) -> None:
        job = self._jobs.get(rec.job)
        if job is None:
            job = self._job(rec.job, rec.ts)
        if rec.rank not in job.rank_node:
            job.rank_node[rec.rank] = rec.node
            self._node_job[rec.node] = rec.job
        job.rank_step[rec.rank] = rec.step
        if rec.attempt != job.attempt:
            if rec.attempt < job.attempt:
                return  # a straggling record of an earlier attempt
            job.attempt, job.max_step = rec.attempt, rec.step
            job.progress_ts, job.fired, job.paused_by, job.exit_ts = rec.ts, False, None, None
            job.stacks.clear()
            return
        if rec.step > job.max_step:
            if job.max_step >= 0 and job.paused_by is None and rec.ts > job.progress_ts:
                job.intervals.add(rec.ts - job.progress_ts)
            job.max_step = rec.step
            if job.paused_by is not None and (job.pause_phase not in MEASURED_PAUSES or rec.ts > job.pause_ts + 1):
                self._resume(job, rec.ts)
            job.progress_ts = max(job.progress_ts, rec.ts)
            job.fired = False
        if rec.ts > job.alive_ts:
            job.alive_ts = rec.ts

    def _phase(self, job: _Job, phase: str, rank: int, ts: float, announced: bool = True) -> None:
        """Heartbeats only end a pause begun by their own rank; announcements end any."""
        if phase in PAUSE_PHASES:
            if job.paused_by is None or job.pause_phase != phase:
                job.pause_ts, job.pause_phase = ts, phase
                job.announced = announced
            job.paused_by = rank
        elif job.paused_by is not None and (job.paused_by == rank or announced):
            self._resume(job, ts)

    def _resume(self, job: _Job, ts: float) -> None:
        if job.pause_phase in MEASURED_PAUSES and job.announced and not job.fired:
            job.pauses.add(ts - job.pause_ts)  # heartbeat-started pauses lag; only announced ones are timed
        job.paused_by = None
        job.progress_ts = max(job.progress_ts, ts)  # the stall clock restarts after a pause

    def pause_limit(self, job: _Job, ts: float) -> float:
        """Seconds a checkpoint/eval pause may last before it counts as hung.

        Learned from the job's earlier pauses; shorter when the stacks taken
        during the pause split into a majority and outliers.
        """
        known = len(job.pauses) > 0
        if outliers({r: sig for r, (t, sig) in job.stacks.items() if t >= job.pause_ts}):
            return max(self.floor_s, 1.2 * job.pauses.median()) if known else 300.0
        return max(2 * self.floor_s, 3 * job.pauses.median()) if known else self.max_pause_s

    def threshold(self, job: _Job) -> float:
        """Seconds without progress after which this job counts as hung."""
        if len(job.intervals) < self.warmup_steps:
            return max(self.floor_s, self.warmup_floor_s)
        return max(self.floor_s, self.mult * job.intervals.median())

    def tick(self, ts: float) -> list[Anomaly]:
        out: list[Anomaly] = []
        for name, job in self._jobs.items():
            if job.fired or job.max_step < 0 or ts - job.alive_ts > self.alive_s:
                continue
            if job.exit_ts is not None and ts - job.exit_ts < self.exit_grace_s:
                continue
            if job.paused_by is not None:
                if job.pause_phase not in MEASURED_PAUSES or ts - job.pause_ts <= self.pause_limit(job, ts):
                    continue
                onset = job.pause_ts
            else:
                onset = job.progress_ts
                if ts - onset <= self.threshold(job):
                    continue
            job.fired = True
            out.append(self._report(name, job, ts, onset))
        return out

    def _report(self, name: str, job: _Job, ts: float, onset: float) -> Anomaly:
        ranks, how = self._localise(job, ts, onset)
        nodes = sorted({job.rank_node[r] for r in ranks if r in job.rank_node})
        job_nodes = sorted(set(job.rank_node.values()))
        rates = [self._rdma[n] for n in job_nodes if n in self._rdma]
        evidence = {
            "stalled_s": round(ts - onset, 3), "threshold_s": round(self.threshold(job), 3),
            "during": job.pause_phase if job.paused_by is not None else "training",
            "median_step_s": round(job.intervals.median(), 3), "last_step": job.max_step,
            "localised_by": how, "job_nodes": job_nodes,
            "rdma_collapsed": bool(rates) and max(rates) < self.collapse_bps,
        }
        return finding(self.instance, "hang", ts=ts, onset=onset, job=name, nodes=nodes, ranks=ranks,
                       step=job.max_step + 1, key=job.attempt, evidence=evidence)

    def _localise(self, job: _Job, ts: float, onset: float) -> tuple[list[int], str]:
        recent = {r: sig for r, (t, sig) in job.stacks.items() if t >= onset}
        odd = outliers(recent)
        if odd:
            return odd, "stacks"
        laggards = [r for r, s in job.rank_step.items() if s < job.max_step]
        if laggards and len(laggards) * 2 < len(job.rank_step):
            return sorted(laggards), "last_step"
        silent = [r for r, t in job.rank_beat.items() if ts - t > self.alive_s]
        if silent and len(silent) * 2 < len(job.rank_beat):
            return sorted(silent), "heartbeats"
        return [], "none"

    def state_size(self) -> int:
        per_job = sum(len(j.rank_step) + len(j.rank_node) + len(j.rank_beat) + len(j.stacks) + len(j.intervals)
                      for j in self._jobs.values())
        return len(self._jobs) + per_job + len(self._node_job) + len(self._rdma)

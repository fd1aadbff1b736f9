"""hang: the job is alive but no step completes for longer than it should.

"Longer than it should" is learned per job, online: the median interval
between successive step completions (`Rolling` window), times `mult`, never
below `floor_s` (and never below `warmup_floor_s` before `warmup_steps`
intervals are known, since first steps compile and warm caches). Alive
means heartbeats or GPU samples of the job's nodes keep arriving: a job
whose every signal stopped has crashed or ended, it is not hung.

Announced pauses do not count: a `PhaseChange` or heartbeat phase of
checkpointing/eval, or a `CheckpointEvent` "started", stops the clock. A
pause ends only when the job *as a whole* steps again: a majority of the
ranks that report steps have finished a step past the one the pause was
announced at. Announcements back to "training" end nothing, because real
loops send them unreliably: Megatron announces checkpointing, training and
eval within milliseconds when eval falls on a checkpoint step; an async
checkpoint announces training while the save still runs; a rank's last step
record may arrive after its own pause announcement. A pause is timed only
when steps confirm its end, and pause lengths are learned per kind of pause
(the set of phases announced in it), so short async saves do not shrink
the allowance of long synchronous ones.

Host clocks disagree by up to `skew_s`, so every limit carries 2 x skew_s
of slack. A hang that spins (every node of the job at full GPU utilisation
while RDMA traffic is ~0 and no step completes) is a hang even inside a
checkpoint pause, caught after the normal step threshold. The rule fires
from `tick(ts)` because a hung job sends no step records.

Localisation, best first: stack samples taken during the stall (the
outlier cluster, see `detectors.stacks`); ranks that did not finish the
step the others finished; ranks whose heartbeats stopped. RDMA traffic of
the job's nodes collapsing to ~0 is recorded as corroborating evidence.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from trainguard.detectors.base import Detector
from trainguard.detectors.common import Bounded, Rolling, SlotRows, Snapshottable, finding, rank_map, store_known
from trainguard.detectors.dispatch import on
from trainguard.detectors.stacks import is_background_thread, is_observer_thread, outliers, signature
from trainguard.schemas.records import (
    Anomaly,
    CheckpointEvent,
    Heartbeat,
    JobTopology,
    LogEvent,
    NodeGpuSample,
    PhaseChange,
    RdmaSample,
    StackSample,
    TrainingStep,
)

PAUSE_PHASES = frozenset({"checkpointing", "eval", "init", "idle", "stopped"})
MEASURED_PAUSES = frozenset({"checkpointing", "eval"})
ENDED = frozenset({"stopped", "idle"})
BUSY_UTIL_PCT = 10.0  # above an idle GPU's reading noise
SPIN_UTIL_PCT = 90.0


class _Job(Snapshottable):
    __slots__ = ("max_step", "attempt", "progress_ts", "intervals", "paused_by", "alive_ts", "fired",
                 "rank_step", "rank_node", "rank_beat", "stacks", "pause_ts", "pause_phase", "pauses", "announced",
                 "exit_ts", "pause_step", "pause_key", "resumed", "nodes", "spinning", "spin_ts", "saving",
                 "last_pause", "pause_progress")

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
        self.pauses: dict[str, Rolling] = {}  # pause kind -> durations of past confirmed pauses
        self.announced = False
        self.exit_ts: float | None = None  # a process of the job exited (the agent said so)
        self.pause_step = -1  # the step the pause was announced at
        self.pause_key: set[str] = set()  # every phase announced during the pause (never changed in place)
        self.resumed: set[int] = set()  # ranks past pause_step
        self.nodes: set[str] = set()
        self.spinning: set[str] = set()  # nodes whose GPUs spin while their RDMA is silent
        self.spin_ts: float | None = None  # since when every node of the job spins
        self.saving = False  # a checkpoint started and not yet saved
        self.last_pause: tuple[int, AbstractSet[str]] = (-1, set())  # the step and phases of the last pause
        self.pause_progress: float | None = None  # the newest checkpoint copy completed during the pause


class _Node(Snapshottable):
    """What hang knows of one node, in one row: its job, its RDMA rate, whether its GPUs all spin.

    One map of rows, not a map per fact: a GPU or RDMA sample reads all three,
    and at 12,500 nodes each map's lookup was its own cold cache lines (issue 23).
    """

    __slots__ = ("job", "rdma", "busy")

    def __init__(self) -> None:
        self.job = ""  # the job the node runs, as training records and topologies place it ("": not placed)
        self.rdma: float | None = None  # its ports' summed byte rate in the newest RDMA sample
        self.busy: bool | None = None  # every GPU at spinning utilisation in the newest GPU sample


class HangDetector(Detector):
    """Fires when a live job stops completing steps; localises with stacks.

    >>> from trainguard.schemas.records import TrainingStep, Heartbeat
    >>> d = HangDetector(floor_s=30, warmup_steps=2)
    >>> for s in range(5):
    ...     _ = d.observe(TrainingStep(ts=float(s), job="j", rank=0, node="n0", step=s, loss=1.0))
    >>> _ = d.observe(Heartbeat(ts=40.0, job="j", rank=0, node="n0"))
    >>> [(a.kind, a.onset) for a in d.tick(40.0)]
    [('hang', 4.0)]
    """

    state_is_a_tree = True  # checked by detectors.checks (check_state_is_a_tree)

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
        max_pause_s: float = 540.0,
        exit_grace_s: float = 120.0,
        skew_s: float = 2.0,
        pause_mult: float = 1.5,
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
        self.skew_s = skew_s
        self.pause_mult = pause_mult
        self._jobs: Bounded[str, _Job] = Bounded(max_jobs)
        self._nodes: Bounded[str, _Node] = Bounded(max_nodes, SlotRows(_Node))
        self.stale_steps = 0  # step records below their rank's last in the same attempt, ignored

    def __setstate__(self, state: dict[str, Any]) -> None:
        """As pickled; a snapshot from before the nodes' rows holds three maps, joined here into rows."""
        vars(self).update(state)
        if "_nodes" not in state:
            jobs, rates, busy = (vars(self).pop(name) for name in ("_node_job", "_rdma", "_busy"))
            self._nodes = Bounded(max(jobs.cap, rates.cap, busy.cap), SlotRows(_Node))
            for node in [*jobs, *rates, *busy]:
                if node not in self._nodes:
                    row = self._nodes[node] = _Node()
                    row.job, row.rdma, row.busy = jobs.get(node, ""), rates.get(node), busy.get(node)

    def _row(self, node: str) -> _Node:
        row = self._nodes.get(node)
        if row is None:
            self._nodes[node] = row = _Node()
        return row

    def _job(self, name: str, ts: float) -> _Job:
        job = self._jobs.get(name)
        if job is None:
            self._jobs[name] = job = _Job(ts)
        return job

    @on(Heartbeat)
    def _heartbeat(self, record: Heartbeat) -> None:
        job = self._jobs.get(record.job) or self._job(record.job, record.ts)
        if record.ts > job.alive_ts:
            job.alive_ts = record.ts
        beats = job.rank_beat
        if record.rank in beats:  # the hot path: a known rank beats again (a store in C)
            store_known(beats, record.rank, record.ts)
        else:
            beats[record.rank] = record.ts
        if record.rank not in job.rank_node:
            self._place(job, record.job, record.rank, record.node)
        if record.phase in PAUSE_PHASES:  # the hot path: a beat while training announces nothing
            self._phase(job, record.phase, record.rank, record.ts, record.step, announced=False)

    @on(NodeGpuSample)
    def _gpu_sample(self, record: NodeGpuSample) -> None:
        row = self._nodes.get(record.node)
        name = record.job or (row.job if row is not None else "")
        if name and name in self._jobs and record.nvml_ok and record.gpus:
            # Busy GPUs mean live processes (a hung collective spins at full utilisation); idle GPUs
            # after a crash must not keep a dead job "alive".
            job = self._jobs[name]
            alive, lowest = False, record.gpus[0].util_pct  # any GPU busy; the least busy (as min() finds it)
            for g in record.gpus:
                util = g.util_pct
                if util >= BUSY_UTIL_PCT:
                    alive = True
                if util < lowest:
                    lowest = util
            if alive:
                job.alive_ts = max(job.alive_ts, record.ts)
            if row is None:
                row = self._row(record.node)
            row.busy = lowest >= SPIN_UTIL_PCT
            self._spin(job, record.node, row, record.ts)

    @on(PhaseChange)
    def _phase_change(self, record: PhaseChange) -> None:
        self._phase(self._job(record.job, record.ts), record.phase, record.rank, record.ts, record.step)

    @on(CheckpointEvent)
    def _checkpoint(self, record: CheckpointEvent) -> None:
        job = self._job(record.job, record.ts)
        if record.tier and record.status == "saved" and job.paused_by is not None:
            job.pause_progress = record.ts  # a rank's copy landed: the write moves, slowly perhaps, but moves
            return
        job.saving = record.status == "started"
        if job.saving:  # "saved" ends nothing: an async save finishes while steps run
            self._phase(job, "checkpointing", record.rank, record.ts, record.step)

    @on(StackSample)
    def _stack(self, record: StackSample) -> None:
        if is_observer_thread(record.frames):
            return  # the hook's and Kafka's own threads look alike on every rank
        job = self._job(record.job, record.ts)
        prev = job.stacks.get(record.rank)
        # One dump yields a sample per thread; the main thread speaks for the rank.
        if prev is None or record.ts > prev[0] + 0.5 or not is_background_thread(record.frames):
            job.stacks[record.rank] = (record.ts, signature(record.frames))
        if record.rank not in job.rank_node:
            self._place(job, record.job, record.rank, record.node)

    @on(LogEvent)
    def _log(self, record: LogEvent) -> None:
        # A process that exited is a crash or a restart, not a hang: its cause speaks through the
        # logs or the hardware. Only if the job still makes no progress `exit_grace_s` later is it stuck.
        exited = self._jobs.get(record.job)
        if exited is not None and record.exit_code is not None:
            exited.exit_ts = record.ts

    @on(RdmaSample)
    def _rdma_sample(self, record: RdmaSample) -> None:
        row = self._nodes.get(record.node) or self._row(record.node)
        row.rdma = sum(p.tx_bps + p.rx_bps for p in record.ports)
        name = record.job or row.job
        if name and name in self._jobs:
            self._spin(self._jobs[name], record.node, row, record.ts)

    @on(JobTopology)
    def _topology(self, record: JobTopology) -> None:
        job = self._job(record.job, record.ts)
        for rank, node in record.rank_nodes.items():
            self._place(job, record.job, rank, node)
        if job.max_step >= 0:  # a job that stepped announces its layout again: it (re)starts, maybe lower
            job.max_step, job.progress_ts, job.fired, job.exit_ts = -1, max(job.progress_ts, record.ts), False, None
            job.rank_step.clear()
            job.stacks.clear()

    def _place(self, job: _Job, name: str, rank: int, node: str) -> None:
        job.rank_node[rank] = node
        job.nodes.add(node)
        row = self._row(node)
        if row.job != name:
            row.job = name

    def _spin(self, job: _Job, node: str, row: _Node, ts: float) -> None:
        """Track whether every node of the job spins: GPUs busy, RDMA silent."""
        rate = row.rdma
        if row.busy and rate is not None and rate < self.collapse_bps:
            job.spinning.add(node)
        else:
            job.spinning.discard(node)
        if job.nodes and len(job.spinning) >= len(job.nodes):
            if job.spin_ts is None:
                job.spin_ts = ts
        else:
            job.spin_ts = None

    @on(TrainingStep)
    def _step(self, rec: TrainingStep) -> None:
        job = self._jobs.get(rec.job)
        if job is None:
            job = self._job(rec.job, rec.ts)
        if rec.rank not in job.rank_node:
            self._place(job, rec.job, rec.rank, rec.node)
        prev = job.rank_step.get(rec.rank)
        if rec.attempt == job.attempt and prev is not None and rec.step < prev:
            # Lower than this rank's last step in the same attempt: a late or replayed record, not a
            # restart (a restart changes the attempt or announces a topology), so it moves nothing.
            self.stale_steps += 1
            return
        if rec.attempt != job.attempt:  # a restart (from a checkpoint's step) starts afresh
            if rec.attempt < job.attempt:
                return  # a straggling record of an earlier attempt
            job.attempt, job.max_step = rec.attempt, rec.step
            job.progress_ts, job.fired, job.paused_by, job.exit_ts = rec.ts, False, None, None
            job.stacks.clear()
            job.rank_step.clear()
            job.rank_step[rec.rank] = rec.step
            return
        steps = job.rank_step
        if rec.rank in steps:  # the hot path: a known rank steps again (a store in C)
            store_known(steps, rec.rank, rec.step)
        else:
            steps[rec.rank] = rec.step
        if rec.ts > job.alive_ts:
            job.alive_ts = rec.ts
        if job.paused_by is not None:
            if job.pause_phase not in MEASURED_PAUSES and rec.step > job.max_step:
                self._resume(job, rec.ts)  # init or restart: the first new step is the job running again
            elif rec.step > job.pause_step:
                job.resumed.add(rec.rank)
                if 2 * len(job.resumed) > len(job.rank_step):  # the job as a whole steps again
                    self._resume(job, rec.ts)
            job.max_step = max(job.max_step, rec.step)  # steps in flight when the pause was announced count
            return
        if rec.step > job.max_step and job.max_step >= 0 and rec.ts < job.progress_ts - 2 * self.skew_s:
            # Dated before progress already seen, beyond the skew bound: a host whose clock is behind.
            # Its rank's step counts; the job's progress waits for a record that can date it (another
            # rank's), or a healthy job would look hung. Progress by step and rank, not by arrival.
            return
        if rec.step > job.max_step:
            if job.max_step >= 0 and rec.ts > job.progress_ts:
                job.intervals.add(rec.ts - job.progress_ts)
            job.max_step = rec.step
            job.progress_ts = max(job.progress_ts, rec.ts)
            job.fired = False

    def _phase(self, job: _Job, phase: str, rank: int, ts: float, step: int, announced: bool = True) -> None:
        """A pause phase starts a pause (or joins the one under way); "training" ends nothing, steps do."""
        if phase not in PAUSE_PHASES:
            return
        if 0 < step < job.max_step and phase in MEASURED_PAUSES:
            return  # a stale announcement (late or skewed) from before the job's last step
        if job.paused_by is None and phase in job.last_pause[1] and 0 < step <= job.last_pause[0]:
            return  # a late report of the pause that just ended (heartbeats lag behind the steps)
        if job.paused_by is not None and announced and step > job.pause_step >= 0 and \
                job.pause_key & MEASURED_PAUSES and phase in MEASURED_PAUSES:
            self._resume(job, ts)  # announced at a later step: the job stepped since, that pause is over
        if job.paused_by is None:
            job.pause_ts, job.pause_phase, job.announced = ts, phase, announced
            job.pause_step, job.pause_key = max(job.max_step, step), {phase}
            job.resumed = set()
            job.pause_progress = None
        else:
            if phase in ENDED or (job.pause_phase in ENDED and phase == "init"):
                job.pause_phase = phase  # a job that says it stopped is not hung in the pause it was in
            elif job.pause_phase not in MEASURED_PAUSES and job.pause_phase not in ENDED:
                job.pause_phase = phase  # (a late heartbeat of the old phase does not revive the pause)
            job.pause_key = job.pause_key | {phase}
            job.pause_step = max(job.pause_step, step)
            job.announced = job.announced or announced
            job.pause_ts = min(job.pause_ts, ts)
        job.paused_by = rank

    def _resume(self, job: _Job, ts: float) -> None:
        """Steps confirmed the pause's end: time it (announced pauses only, heartbeats lag).

        A pause that fired as a hang but ended with the job stepping again in
        the same attempt was a pause after all, so it is learned too. A save
        still running when steps resume was asynchronous: its short blocking
        part is learned apart, so it never shrinks the synchronous allowance.
        """
        if job.pause_key & MEASURED_PAUSES and job.announced:
            key = _key(job.pause_key) + ("/async" if job.saving else "")
            if key not in job.pauses:
                job.pauses[key] = Rolling(32)  # slow checkpoints are rare: remember enough to have seen one
            job.pauses[key].add(ts - job.pause_ts)
        job.last_pause = (job.pause_step, set(job.pause_key))  # a copy: state is a tree (detectors.state_tree)
        job.paused_by = None
        job.resumed = set()
        job.progress_ts = max(job.progress_ts, ts)  # the stall clock restarts after a pause
        job.fired = False

    def pause_limit(self, job: _Job, ts: float) -> float:
        """Seconds a checkpoint/eval pause may last before it counts as hung.

        Learned from the job's earlier confirmed pauses of the same kind (for
        a kind not seen yet, say checkpoint then eval, the sum of its phases'
        longest pauses): `pause_mult` over the longest recent one, as pause
        lengths vary with what is saved or evaluated -- when there is
        evidence that the pause is stuck: stacks taken during it split into a
        majority and outliers. Time
        alone convicts no pause before `max_pause_s` (540 s: a checkpoint to
        a loaded shared filesystem takes minutes however fast it usually is;
        a hung write with no other evidence is still found within ten
        minutes), nor before `pause_mult` x the job's own longest pause of
        that kind (of its last 32) where those ran longer. Spinning GPUs with silent RDMA inside a
        pause are caught by `tick` after the normal step threshold. A
        checkpoint copy completing during the pause (a `CheckpointEvent`
        "saved" of a tier) restarts the clock: the write is slow, not stuck.
        """
        longest = _allowance(job.pauses, job.pause_key)
        slack = 2 * self.skew_s
        stuck = outliers({r: sig for r, (t, sig) in job.stacks.items() if t >= job.pause_ts})
        if stuck:  # evidence: a minority stuck somewhere else than the majority
            return (max(self.floor_s, self.pause_mult * longest) if longest else 300.0) + slack
        # Time alone: storage is slower some days (a shared filesystem under load makes a 60 s checkpoint
        # take five minutes), so nothing below `max_pause_s`; more only where this job's own pauses ran longer.
        return max(self.max_pause_s, self.pause_mult * longest) + slack

    def threshold(self, job: _Job) -> float:
        """Seconds without progress after which this job counts as hung (host skew included)."""
        if len(job.intervals) < self.warmup_steps:
            return max(self.floor_s, self.warmup_floor_s) + 2 * self.skew_s
        return max(self.floor_s, self.mult * job.intervals.median()) + 2 * self.skew_s

    def tick(self, ts: float) -> list[Anomaly]:
        out: list[Anomaly] = []
        for name, job in self._jobs.items():
            if job.fired or job.max_step < 0 or ts - job.alive_ts > self.alive_s:
                continue
            if job.exit_ts is not None and ts - job.exit_ts < self.exit_grace_s:
                continue
            if job.paused_by is not None:
                spin = job.spin_ts if "eval" not in job.pause_key else None  # eval may spin GPUs legitimately
                if spin is not None and ts - max(spin, job.pause_ts) > self.threshold(job):
                    onset = spin
                elif job.pause_phase not in MEASURED_PAUSES or \
                        ts - max(job.pause_ts, job.pause_progress or job.pause_ts) <= self.pause_limit(job, ts):
                    continue
                else:
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
        rows = [self._nodes.get(n) for n in job_nodes]
        rates = [row.rdma for row in rows if row is not None and row.rdma is not None]
        evidence = {
            "stalled_s": round(ts - onset, 3), "threshold_s": round(self.threshold(job), 3),
            "during": job.pause_phase if job.paused_by is not None else "training",
            "median_step_s": round(job.intervals.median(), 3), "last_step": job.max_step,
            "localised_by": how, "job_nodes": job_nodes, "gpus_spinning": job.spin_ts is not None,
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
        return len(self._jobs) + per_job + len(self._nodes)


def _allowance(pauses: dict[str, Rolling], phases: AbstractSet[str]) -> float:
    """The longest confirmed pause of this kind; 0.0 when nothing tells."""
    past = pauses.get(_key(phases))
    if past is not None and len(past):
        return max(past.values)
    total = 0.0
    for phase in phases & MEASURED_PAUSES:
        seen = [max(r.values) for k, r in pauses.items() if len(r) and "/" not in k and phase in k.split("+")]
        if not seen:
            return 0.0
        total += max(seen)
    return total


def _key(phases: AbstractSet[str]) -> str:
    """The kind of a pause: the checkpoint/eval phases announced in it ("checkpointing+eval")."""
    return "+".join(sorted(phases & MEASURED_PAUSES))

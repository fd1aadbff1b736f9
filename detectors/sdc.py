"""sdc: silent data corruption, caught where replicas must agree.

Data-parallel replicas holding the same (tp, pp) shard must report the same
parameter/gradient checksum at the same step. When they do not, the
replicas in the minority (majority vote) hold the corrupted copy; their
ranks and nodes are the suspects. With two replicas there is no majority
and both are named (`ambiguous` in the evidence). With more, a group with
no strict majority is ignored: corruption hits one replica, whereas
replicas that all disagree were grouped wrongly by their producer. A group is decided when
all its replicas have reported (the dp degree from `JobTopology`, else the
most replicas ever seen for the group) or, failing that, once the job is
`grace_steps` steps further on.

Second signal: a NaN that recurs at the same step after a restart (the
`attempt` field grew) points at corrupted state, not a transient.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from math import isfinite

from trainguard.detectors.base import Detector
from trainguard.detectors.common import Bounded, Snapshottable, finding, rank_map, store_known
from trainguard.detectors.dispatch import on
from trainguard.schemas.records import Anomaly, JobTopology, TrainingStep

Group = tuple[int, int, int]  # (step, tp, pp)


class _Votes(Snapshottable):
    """The checksums reported so far for one (step, tp, pp) group."""

    __slots__ = ("onset", "count", "by_sum", "expected")

    def __init__(self, onset: float, expected: int) -> None:
        self.onset = onset
        self.count = 0
        self.by_sum: dict[str, list[tuple[int, str]]] = {}
        self.expected = expected  # replicas to wait for (0: unknown, decide after grace steps)


class _Job(Snapshottable):
    __slots__ = ("attempt", "dp", "max_step", "pending", "expected", "fired", "clean", "nan_steps")

    def __init__(self, attempt: int) -> None:
        self.attempt = attempt
        self.dp = 0  # from topology; 0 = unknown
        self.max_step = -1
        self.pending: Bounded[Group, _Votes] = rank_map()
        self.expected: Bounded[tuple[int, int], int] = rank_map()
        self.fired: AbstractSet[int] = set()  # odd ranks already reported in this episode (never changed in place)
        self.clean = 0  # groups decided in agreement since the last report
        self.nan_steps: dict[int, tuple[int, int, str]] = {}  # attempt -> (step, rank, node)


class SdcDetector(Detector):
    """Flags DP replicas whose checksums disagree, and NaNs recurring after a restart.

    >>> from trainguard.schemas.records import TrainingStep
    >>> d = SdcDetector()
    >>> def rec(r, c): return TrainingStep(ts=5.0, job="j", rank=r, node=f"n{r}", step=7, loss=1.0, dp=r, checksum=c)
    >>> [d.observe(rec(r, "aa")) for r in range(3)]
    [[], [], []]
    >>> [(a.kind, a.ranks, a.nodes, a.step) for a in d.observe(rec(3, "bb"))]
    []
    >>> last = TrainingStep(ts=9.0, job="j", rank=0, node="n0", step=10, loss=1.0)
    >>> [(a.kind, a.ranks, a.nodes, a.step) for a in d.observe(last)]
    [('sdc', [3], ['n3'], 7)]
    """

    state_is_a_tree = True  # checked by detectors.checks (check_state_is_a_tree)

    def __init__(self, *, instance: str = "sdc", grace_steps: int = 2, rearm_steps: int = 50,
                 max_jobs: int = 10_000) -> None:
        super().__init__(instance=instance)
        self.grace_steps = grace_steps
        self.rearm_steps = rearm_steps
        self._jobs: Bounded[str, _Job] = Bounded(max_jobs)

    @on(JobTopology)
    def _topology(self, record: JobTopology) -> None:
        self._job(record.job, 0).dp = record.dp

    @on(TrainingStep)
    def _step(self, record: TrainingStep) -> list[Anomaly]:
        job = self._jobs.get(record.job) or self._job(record.job, record.attempt)
        loss, grad = record.loss, record.grad_norm
        healthy = isfinite(loss) and (grad is None or isfinite(grad))
        out = [] if healthy else self._nan_recurrence(job, record)
        if record.attempt != job.attempt:
            if record.attempt < job.attempt:
                return out
            job.attempt, job.max_step, job.fired = record.attempt, -1, set()
            job.pending.clear()
        if record.checksum is not None:
            found = self._checksum(job, record)
            if found:
                out += found
        if record.step > job.max_step:
            job.max_step = record.step
            if job.pending:
                out += self._expire(job, record)
        return out

    def _job(self, name: str, attempt: int) -> _Job:
        job = self._jobs.get(name)
        if job is None:
            self._jobs[name] = job = _Job(attempt)
        return job

    def _checksum(self, job: _Job, rec: TrainingStep) -> list[Anomaly]:
        key = (rec.step, rec.tp, rec.pp)
        if rec.step < job.max_step - self.grace_steps:
            return []  # too late: that group was already decided
        pending = job.pending
        entry = pending.get(key)
        if entry is None:
            entry = _Votes(rec.ts, job.dp or job.expected.get((rec.tp, rec.pp), 0))
            if len(pending) < pending.cap:
                store_known(pending, key, entry)  # a new group below the cap: nothing to evict, no Python call
            else:
                pending[key] = entry
        voters = entry.by_sum.get(rec.checksum)  # type: ignore[arg-type]
        if voters is None:
            entry.by_sum[rec.checksum] = voters = []  # type: ignore[index]
        voters.append((rec.rank, rec.node))
        entry.count += 1
        if not entry.expected:  # learned since the group opened?
            entry.expected = job.dp or job.expected.get((rec.tp, rec.pp), 0)
        if entry.expected and entry.count >= entry.expected:
            del job.pending[key]
            return self._decide(job, rec.job, key, entry, rec.ts)
        return []

    def _expire(self, job: _Job, rec: TrainingStep) -> list[Anomaly]:
        out: list[Anomaly] = []
        for key in [k for k in job.pending if k[0] < rec.step - self.grace_steps]:
            out += self._decide(job, rec.job, key, job.pending.pop(key), rec.ts)
        return out

    def _decide(self, job: _Job, name: str, key: Group, entry: _Votes, ts: float) -> list[Anomaly]:
        onset, votes, count = entry.onset, entry.by_sum, entry.count
        shard = (key[1], key[2])
        known = job.expected.get(shard)
        if known is None or count > known:  # most groups are complete: the store (a Python call) is skipped
            job.expected[shard] = count
        if len(votes) < 2:
            job.clean += 1
            # Re-armed once every shard agreed that long; with nothing fired there is nothing to re-arm.
            if job.fired and job.clean >= self.rearm_steps * max(1, len(job.expected)):
                job.fired = set()
            return []
        ranked = sorted(votes.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        ambiguous = len(ranked[0][1]) == len(ranked[1][1])
        if len(ranked[0][1]) * 2 <= count and not (count == 2 and ambiguous):
            return []  # no majority: replicas that never agreed are mis-grouped, not corrupted
        odd = [v for _, voters in (ranked if ambiguous else ranked[1:]) for v in voters]
        odd_ranks = frozenset(r for r, _ in odd)
        job.clean = 0
        if odd_ranks <= job.fired:
            return []  # the same corruption, still visible: already reported
        odd = [v for v in odd if v[0] not in job.fired]  # name only the newly corrupted replicas
        job.fired = job.fired | odd_ranks
        return [finding(self.instance, "sdc", ts=ts, onset=onset, job=name, nodes=list({n for _, n in odd}),
                        ranks=[r for r, _ in odd], group=f"tp:{key[1]},pp:{key[2]}", step=key[0], key=key,
                        evidence={"cause": "checksum_mismatch", "step": key[0], "ambiguous": ambiguous,
                                  "checksums": {c: sorted(r for r, _ in v) for c, v in votes.items()}})]

    def _nan_recurrence(self, job: _Job, rec: TrainingStep) -> list[Anomaly]:
        """A non-finite step: the same step went NaN in an earlier attempt too?"""
        if rec.attempt in job.nan_steps:
            return []
        job.nan_steps[rec.attempt] = (rec.step, rec.rank, rec.node)
        earlier = [a for a, (s, _, _) in job.nan_steps.items() if a < rec.attempt and s == rec.step]
        if not earlier:
            return []
        _, rank0, node0 = job.nan_steps[earlier[0]]
        ranks = sorted({rec.rank, rank0}) if rank0 == rec.rank else []
        return [finding(self.instance, "sdc", ts=rec.ts, onset=rec.ts, job=rec.job,
                        nodes=[rec.node] if ranks else [], ranks=ranks, step=rec.step, key=("nan", rec.attempt),
                        evidence={"cause": "nan_recurs_after_restart", "step": rec.step,
                                  "attempts": sorted(earlier + [rec.attempt]), "first_rank": rec.rank})]

    def state_size(self) -> int:
        return sum(1 + len(j.pending) + len(j.expected) + len(j.nan_steps) for j in self._jobs.values())

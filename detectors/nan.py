"""NaN/Inf in loss or grad norm: the first step where it appears, and who had it first.

A NaN born on one rank reaches every rank through the next all-reduce, and
ranks' records reach us in arrival order, not in the order they happened.
So the first NaN record we see is not necessarily the culprit. The detector
therefore *settles* for `settle_s` of event time (or until the job is two
steps further on) and then reports the earliest (step, ts) NaN it saw: its
rank, node and step. That keeps detection within about one step while
naming the right rank under reordering.

The settle window is `settle_s` (the hook batches its sends for up to a
second, so the origin's record can arrive that much after its peers')
plus twice the host clock-skew bound `skew_s`: the first NaN may carry a
clock running `skew_s` fast while event time is read off a host running
`skew_s` slow. Because skew of a second or more dwarfs the milliseconds
between ranks' records of one step, the origin is chosen by *what* the
ranks report before *when*: the earliest step first, then a non-finite
loss over a non-finite grad norm alone, and only then the timestamp.
"""

from __future__ import annotations

from math import isfinite

from trainguard.detectors.base import Detector, anomaly_id
from trainguard.detectors.common import Bounded, Snapshottable, rank_map
from trainguard.detectors.dispatch import on
from trainguard.schemas.records import Anomaly, TrainingStep


class _First(Snapshottable):
    """The earliest NaN seen of a job's unreported episode."""

    __slots__ = ("attempt", "step", "ts", "rank", "node", "fields", "seen", "heard")

    def __init__(self, rec: TrainingStep, fields: list[str]) -> None:
        self.attempt, self.step, self.ts, self.rank, self.node = rec.attempt, rec.step, rec.ts, rec.rank, rec.node
        self.fields = fields
        self.seen = rec.ts  # when the episode was first noticed
        self.heard: set[int] = set()  # ranks whose record of that step is in


class NanDetector(Detector):
    """Flags the first non-finite loss or grad norm of a job, naming the rank.

    Every rank of a data-parallel job usually reports the same NaN at the same
    step; they are one fault. The detector fires once per episode with the
    earliest rank that had it, and stays quiet until that rank reports a
    finite step again (or the job restarts: a new `attempt` opens a new
    episode, so a NaN recurring after a restart is reported again).

    >>> from trainguard.schemas.records import TrainingStep
    >>> d = NanDetector()
    >>> d.observe(TrainingStep(ts=1.0, job="j", rank=0, node="n0", step=1, loss=2.0))
    []
    >>> nan = float("nan")
    >>> d.observe(TrainingStep(ts=2.5, job="j", rank=3, node="n1", step=2, loss=nan))
    []
    >>> d.observe(TrainingStep(ts=2.0, job="j", rank=1, node="n0", step=2, loss=nan))  # earlier, arrived later
    []
    >>> d.tick(4.0)  # still settling: the origin may be late (batching) or on a slow clock (skew)
    []
    >>> [(a.kind, a.ranks, a.step) for a in d.tick(7.5)]
    [('nan', [1], 2)]

    At the same step, the rank with the NaN loss is the origin; peers only see
    its NaN gradients through the all-reduce. Once every rank of the job has
    reported that step, nothing earlier can arrive, so it is reported at once:

    >>> d = NanDetector()
    >>> d.observe(TrainingStep(ts=1.0, job="j", rank=0, node="n0", step=5, loss=2.0, grad_norm=nan))
    []
    >>> [(a.ranks, a.nodes) for a in
    ...  d.observe(TrainingStep(ts=1.1, job="j", rank=2, node="n1", step=5, loss=nan, grad_norm=nan))]
    [([2], ['n1'])]
    """

    state_is_a_tree = True  # checked by detectors.checks (check_state_is_a_tree)

    def __init__(self, *, instance: str = "nan", settle_s: float = 1.0, skew_s: float = 2.0,
                 max_jobs: int = 10_000) -> None:
        super().__init__(instance=instance)
        self.settle_s = settle_s
        self.skew_s = skew_s
        self._window = settle_s + 2 * skew_s
        self._open: Bounded[str, tuple[int, int, int]] = Bounded(max_jobs)  # job -> reported (attempt, step, rank)
        self._pending: Bounded[str, _First] = Bounded(max_jobs)
        self._world: Bounded[str, Bounded[int, None]] = Bounded(max_jobs)  # job -> ranks seen reporting steps
        self._recent: Bounded[str, dict[int, set[int]]] = Bounded(max_jobs)  # job -> {step: ranks}, last 2 steps
        self._attempts: Bounded[str, int] = Bounded(max_jobs)  # job -> newest attempt (restart generation) seen

    @on(TrainingStep)
    def _step(self, record: TrainingStep) -> list[Anomaly]:
        ranks = self._world.get(record.job)
        if ranks is None:
            self._world[record.job] = ranks = rank_map()
        if record.rank not in ranks:  # a known rank keeps its place: no store (the hot path)
            ranks[record.rank] = None
        if record.attempt > self._attempts.get(record.job, -1):
            self._attempts[record.job] = record.attempt
        self._note(record)
        if self._pending:  # any job's steps move event time on: report what has settled
            due = self._due(record)
            if due:
                return due + self._step(record)
        loss, grad = record.loss, record.grad_norm
        if isfinite(loss) and (grad is None or isfinite(grad)):  # the fast path: nothing to see
            return self._healthy(record) if self._open or self._pending else []
        bad = _nonfinite_fields(record)
        if record.attempt < self._attempts.get(record.job, record.attempt):
            return []  # a late record of a run already restarted: its NaN was handled (or is moot)
        episode = self._open.get(record.job)
        if episode is not None and episode[0] >= record.attempt:
            return []
        first = self._pending.get(record.job)
        if first is None or record.attempt > first.attempt:
            self._pending[record.job] = first = _First(record, bad)
            first.heard = set(self._recent.get(record.job, {}).get(record.step, ()))  # peers already in
        elif record.attempt == first.attempt and _order(record.step, bad, record.ts) < _order(first.step, first.fields,
                                                                                              first.ts):
            seen, heard = first.seen, first.heard
            self._pending[record.job] = first = _First(record, bad)
            first.seen = seen
            first.heard = heard if record.step == first.step else set(
                self._recent.get(record.job, {}).get(record.step, ()))
        return self._heard(first, record)

    def _note(self, record: TrainingStep) -> None:
        """Which ranks reported the job's last two steps: a NaN's peers may arrive before it."""
        steps = self._recent.get(record.job)
        if steps is None:
            self._recent[record.job] = steps = {}
        ranks = steps.get(record.step)
        if ranks is None:
            if steps and record.step < max(steps) - 1:
                return
            steps[record.step] = ranks = set()
            for old in [k for k in steps if k < record.step - 1]:
                del steps[old]
        ranks.add(record.rank)

    def _heard(self, first: _First, record: TrainingStep) -> list[Anomaly]:
        """Every rank's record of the NaN's step is in: nothing earlier can still arrive, report now."""
        if record.step == first.step and record.attempt == first.attempt:
            first.heard.add(record.rank)
            if len(first.heard) >= len(self._world.get(record.job, ())) >= 2:
                return self._report(record.job, record.ts)
        return []

    def _healthy(self, record: TrainingStep) -> list[Anomaly]:
        first = self._pending.get(record.job)
        if first is not None and record.step > first.step + 1:
            return self._report(record.job, record.ts)  # the job moved on: nothing earlier can still arrive
        if first is not None:
            found = self._heard(first, record)
            if found:
                return found
        episode = self._open.get(record.job)
        if episode is not None and (record.attempt != episode[0] or
                                    (record.step > episode[1] and record.rank == episode[2])):
            del self._open[record.job]
        return []

    def _due(self, record: TrainingStep) -> list[Anomaly]:
        first = self._pending.get(record.job)
        if first is not None and record.attempt > first.attempt:
            return self._report(record.job, record.ts)  # a restart: the old episode is complete
        return self.tick(record.ts)

    def tick(self, ts: float) -> list[Anomaly]:
        if not self._pending:
            return []
        due = [job for job, first in self._pending.items() if ts - first.seen >= self._window]
        return [a for job in sorted(due) for a in self._report(job, ts)]

    def _report(self, job: str, now: float) -> list[Anomaly]:
        first = self._pending.pop(job)
        self._open[job] = (first.attempt, first.step, first.rank)
        return [
            Anomaly(
                ts=max(now, first.ts),
                id=anomaly_id(self.instance, job, first.step, first.attempt),
                kind="nan",
                detector=self.instance,
                onset=first.ts,
                job=job,
                nodes=[first.node],
                ranks=[first.rank],
                step=first.step,
                evidence={"fields": first.fields, "step": first.step, "rank": first.rank, "attempt": first.attempt},
            )
        ]

    def state_size(self) -> int:
        return len(self._open) + len(self._pending) + sum(len(r) for r in self._world.values()) + sum(
            len(r) for steps in self._recent.values() for r in steps.values())


def _order(step: int, fields: list[str], ts: float) -> tuple[int, int, float]:
    """Which NaN came first. At the same step a non-finite *loss* beats a non-finite grad norm alone:
    data-parallel all-reduce spreads one rank's NaN gradients to every rank within the step, but
    only the rank whose forward pass produced it has a NaN loss."""
    return step, 0 if "loss" in fields else 1, ts


def _nonfinite_fields(step: TrainingStep) -> list[str]:
    return [name for name, value in (("loss", step.loss), ("grad_norm", step.grad_norm))
            if value is not None and not isfinite(value)]

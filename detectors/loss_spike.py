"""loss_spike: loss or grad norm jumps `ratio` times above its recent median.

The baseline is a rolling median of the job's lowest rank that reports a
positive loss (only the last pipeline stage may compute it; loss is usually
all-reduced, so one rank speaks for the job; the median shrugs off the
occasional odd batch). Every rank's value is compared with it, so a spike
seen first on any rank is caught at its first step. Values that are flagged,
or that arrive while an episode is open, never enter the baseline: the model
does not learn the spikes it reports (river's `protect_anomaly_detector`).
An episode closes when the lowest rank is back under the threshold.
Non-finite values belong to the NaN detector and are ignored here.
"""

from __future__ import annotations

from math import isfinite

from trainguard.detectors.base import Detector
from trainguard.detectors.common import Bounded, Rolling, Snapshottable, finding
from trainguard.detectors.dispatch import on
from trainguard.schemas.records import Anomaly, TrainingStep

FIELDS = ("loss", "grad_norm")
INF = float("inf")


class _Job(Snapshottable):
    __slots__ = ("leader", "attempt", "base", "open", "limits")

    def __init__(self, leader: int, attempt: int, size: int) -> None:
        self.leader = leader
        self.attempt = attempt
        self.base = {f: Rolling(size) for f in FIELDS}
        self.open = False
        self.limits = (INF, INF)  # (loss, grad_norm) values at or above which a value is a spike


class LossSpikeDetector(Detector):
    """Flags a loss or grad-norm jump of `ratio`x over a protected rolling median.

    >>> from trainguard.schemas.records import TrainingStep
    >>> d = LossSpikeDetector(min_baseline=5)
    >>> out = []
    >>> for s, loss in enumerate([2.0, 2.1, 1.9, 2.0, 2.0, 1.9, 12.0, 2.0]):
    ...     out += d.observe(TrainingStep(ts=float(s), job="j", rank=0, node="n0", step=s, loss=loss))
    >>> [(a.kind, a.step, a.evidence["field"]) for a in out]
    [('loss_spike', 6, 'loss')]
    """

    state_is_a_tree = True  # checked by detectors.checks (check_state_is_a_tree)

    def __init__(
        self,
        *,
        instance: str = "loss_spike",
        ratio: float = 5.0,
        window: int = 50,
        min_baseline: int = 10,
        max_jobs: int = 10_000,
    ) -> None:
        super().__init__(instance=instance)
        self.ratio = ratio
        self.window = window
        self.min_baseline = min_baseline
        self._jobs: Bounded[str, _Job] = Bounded(max_jobs)

    @on(TrainingStep)
    def _step(self, record: TrainingStep) -> list[Anomaly]:
        job = self._jobs.get(record.job)
        if job is None or record.attempt > job.attempt or (record.rank < job.leader and record.attempt == job.attempt):
            if not (isfinite(record.loss) and record.loss > 0):
                return []  # only a rank that reports a real loss can lead (pipeline stages may report 0)
            self._jobs[record.job] = job = _Job(record.rank, record.attempt, self.window)
        if record.attempt != job.attempt:
            return []
        loss, grad = record.loss, record.grad_norm
        lim_loss, lim_grad = job.limits
        leader = record.rank == job.leader
        spike: tuple[str, float, float] | None = None
        # compared first (cheap): NaN never compares >=, and isfinite rules out +inf
        if loss >= lim_loss and isfinite(loss):
            spike = ("loss", float(loss), lim_loss / self.ratio)
        elif grad is not None and grad >= lim_grad and isfinite(grad):
            spike = ("grad_norm", float(grad), lim_grad / self.ratio)
        elif leader and not job.open:
            self._learn(job, loss, grad)
        if spike is None:
            if leader:
                job.open = False
            return []
        if job.open:
            return []
        job.open = True
        name, value, med = spike
        return [finding(self.instance, "loss_spike", ts=record.ts, onset=record.ts, job=record.job,
                        nodes=[record.node], ranks=[record.rank], step=record.step, key=(record.attempt, record.step),
                        evidence={"field": name, "value": value, "baseline": med, "ratio": round(value / med, 3),
                                  "rank": record.rank, "step": record.step})]

    def _learn(self, job: _Job, loss: float, grad: float | None) -> None:
        """Add the leader's finite values to the baselines and refresh the limits."""
        limits = list(job.limits)
        for i, (name, value) in enumerate((("loss", loss), ("grad_norm", grad))):
            if value is not None and isfinite(value):
                base = job.base[name]
                base.add(float(value))
                med = base.median()
                limits[i] = self.ratio * med if len(base) >= self.min_baseline and med > 0 else INF
        job.limits = (limits[0], limits[1])

    def state_size(self) -> int:
        return sum(len(b) for j in self._jobs.values() for b in j.base.values()) + len(self._jobs)

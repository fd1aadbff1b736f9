"""NaN/Inf in loss or grad norm: the first step where it appears."""

from __future__ import annotations

import math

from detectors.base import Detector, anomaly_id
from detectors.common import finite
from schemas.records import Anomaly, Record, TrainingStep, as_float


class NanDetector(Detector):
    """Flags the first non-finite loss or grad norm of a job, naming the rank.

    Every rank of a data-parallel job usually reports the same NaN at the same
    step; they are one fault. The detector fires once per (job, step) with the
    earliest rank that reported it, and stays quiet for later steps of the
    same episode until that rank reports a finite step again (or the job restarts:
    a new `attempt` opens a new episode, so a NaN recurring after a restart
    is reported again).

    >>> from schemas.records import TrainingStep
    >>> d = NanDetector()
    >>> d.observe(TrainingStep(ts=1.0, job="j", rank=0, node="n0", step=1, loss=2.0))
    []
    >>> [a.kind for a in d.observe(TrainingStep(ts=2.0, job="j", rank=3, node="n1", step=2, loss="nan"))]
    ['nan']
    """

    consumes = frozenset({"step"})

    def __init__(self, *, instance: str = "nan") -> None:
        super().__init__(instance=instance)
        self._open: dict[str, tuple[int, int, int]] = {}  # job -> (attempt, step, rank) of the open episode

    def observe(self, record: Record) -> list[Anomaly]:
        if not isinstance(record, TrainingStep):
            return []
        loss, grad = record.loss, record.grad_norm
        if loss.__class__ is float and loss - loss == 0.0 and (grad is None or finite(grad)):  # type: ignore
            # the fast path: nothing to see
            return self._healthy(record)
        bad = _nonfinite_fields(record)
        if not bad:
            return self._healthy(record)
        episode = self._open.get(record.job)
        if episode is not None and episode[0] >= record.attempt:
            return []
        self._open[record.job] = (record.attempt, record.step, record.rank)
        return [
            Anomaly(
                ts=record.ts,
                id=anomaly_id(self.instance, record.job, record.step, record.attempt),
                kind="nan",
                detector=self.instance,
                onset=record.ts,
                job=record.job,
                nodes=[record.node],
                ranks=[record.rank],
                step=record.step,
                evidence={"fields": bad, "step": record.step, "rank": record.rank, "attempt": record.attempt},
            )
        ]

    def _healthy(self, record: TrainingStep) -> list[Anomaly]:
        """The episode closes when its rank is finite again past the bad step, or on a restart."""
        episode = self._open.get(record.job)
        if episode is not None and (record.attempt != episode[0] or
                                    (record.step > episode[1] and record.rank == episode[2])):
            del self._open[record.job]
        return []

    def state_size(self) -> int:
        return len(self._open)


def _nonfinite_fields(step: TrainingStep) -> list[str]:
    out = []
    for name in ("loss", "grad_norm"):
        value = as_float(getattr(step, name))
        if value is not None and not math.isfinite(value):
            out.append(name)
    return out

"""A user's own detector, shipped as its own package.

It declares an entry point in the `trainguard.detectors` group (see this
folder's pyproject.toml); once installed, trainguard finds it with no change
to trainguard itself: `trainguard detectors list` shows it, config can run it
(`{type: sample_long_step, params: {limit_s: 30}}`) and the conformance
suite checks it like any built-in.
"""

from __future__ import annotations

from trainguard.detectors.base import Detector, anomaly_id
from trainguard.detectors.dispatch import on
from trainguard.schemas.records import Anomaly, TrainingStep


class LongStepDetector(Detector):
    """Flags a rank whose step took longer than a fixed `limit_s` (once per job and rank).

    >>> d = LongStepDetector(limit_s=10)
    >>> [a.ranks for a in d.observe(TrainingStep(ts=5.0, job="j", rank=2, node="n", step=1, loss=1.0,
    ...                                           step_time_s=12.0))]
    [[2]]
    """

    state_is_a_tree = True  # its one set is reachable once: `check_detector` passes, so snapshots may skip the memo

    def __init__(self, *, instance: str = "sample_long_step", limit_s: float = 60.0) -> None:
        super().__init__(instance=instance)
        self.limit_s = limit_s
        self._seen: set[tuple[str, int]] = set()

    @on(TrainingStep)  # the one record type it reads: the pipeline sends it steps, and only steps
    def _step(self, record: TrainingStep) -> list[Anomaly]:
        if record.step_time_s <= self.limit_s:
            return []
        key = (record.job, record.rank)
        if key in self._seen or len(self._seen) >= 100_000:
            return []
        self._seen.add(key)
        return [Anomaly(ts=record.ts, id=anomaly_id(self.instance, record.job, record.rank, record.step),
                        kind="slowdown", detector=self.instance, onset=record.ts - record.step_time_s,
                        job=record.job, nodes=[record.node], ranks=[record.rank], step=record.step,
                        evidence={"step_time_s": record.step_time_s, "limit_s": self.limit_s})]

    def state_size(self) -> int:
        return len(self._seen)

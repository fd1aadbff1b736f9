"""metric_anomaly: any numeric field of any record, scored online by a river model; the no-code path.

A signal trainguard has no detector for (a data-loader wait, a custom
`CustomMetric` from the training loop, GPU memory temperature, a step's
tokens) needs only config:

    detectors:
      instances:
        - type: metric_anomaly
          name: dataloader_wait
          params: {record: custom, name: dataloader, field: wait_s, per: rank, kind: slowdown,
                   model: robust_z, threshold: 6, warmup: 50, direction: up}

`record` is a record type's tag (`custom` for `CustomMetric`, whose `name`
picks the user's series), `field` a numeric field (`gpus.<field>` reads
every GPU of a `gpu_sample`). One model per series: per `job`, `node`,
`rank` (job + rank) or `gpu` (node + GPU index). After `warmup` values a
value is scored (`detectors.metric_models`); `confirm` consecutive scores
above `threshold` in `direction` make one anomaly of `kind`, at most once
per series per `cooldown_s` of event time. Flagged values are not learned.

It is weaker than the built-in detectors by construction: it sees one
series at a time, so it cannot compare a rank with its peers (slowdown),
tell a hang from a checkpoint (hang) or know that one NaN is already fatal
(nan). Use it for signals no built-in reads, not to replace them.

Records of every input type are routed to it (the type is config, not
code); those of other types return at the first comparison.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from trainguard.detectors.base import Detector
from trainguard.detectors.common import Bounded, finding, rank_map
from trainguard.detectors.dispatch import OBSERVED, on
from trainguard.detectors.metric_models import DEFAULT_THRESHOLDS, HalfSpace, RiverModel, RobustZ, build_model
from trainguard.schemas.codec import record_tag
from trainguard.schemas.kinds import IncidentKind
from trainguard.schemas.records import Anomaly, CustomMetric, NodeGpuSample, Record

RecordTag = Literal["step", "heartbeat", "phase", "checkpoint", "topology", "stack", "gpu_sample", "rdma_sample",
                    "log", "node_condition", "custom"]
Kind = IncidentKind  # the kinds a configured instance may report (schemas.kinds)
_ALL = tuple(sorted(OBSERVED, key=record_tag))


class _Series:
    """One series' model, how many values it has learned, and its current run of flagged values."""

    __slots__ = ("model", "seen", "run", "onset", "fired")

    def __init__(self, model: RobustZ | RiverModel | HalfSpace) -> None:
        self.model = model
        self.seen = 0
        self.run = 0
        self.onset = 0.0
        self.fired = -math.inf

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)


class MetricAnomalyDetector(Detector):
    """Flags values of a configured field that a per-series river model finds anomalous.

    >>> from trainguard.schemas.records import TrainingStep
    >>> d = MetricAnomalyDetector(record="step", field="step_time_s", per="job", warmup=20, confirm=1)
    >>> out = []
    >>> for s in range(40):
    ...     t = 1.0 + 0.01 * (s % 3) if s != 35 else 9.0   # one step 9x slower
    ...     out += d.observe(TrainingStep(ts=float(s), job="j", rank=0, node="n0", step=s, loss=1.0, step_time_s=t))
    >>> [(a.kind, a.step, a.evidence["value"]) for a in out]
    [('slowdown', 35, 9.0)]
    """

    state_is_a_tree = True  # checked by detectors.checks (check_state_is_a_tree)

    def __init__(self, *, instance: str = "metric_anomaly", record: RecordTag = "step", field: str = "step_time_s",
                 name: str = "", per: Literal["job", "node", "rank", "gpu"] = "rank",
                 model: str = "robust_z", model_params: dict[str, Any] | None = None, threshold: float | None = None,
                 warmup: int = 50, confirm: int = 2, direction: Literal["up", "down", "both"] = "up",
                 kind: Kind = "slowdown", cooldown_s: float = 300.0, seed: int = 0, max_jobs: int = 10_000,
                 max_series: int = 100_000) -> None:
        super().__init__(instance=instance)
        if record == "custom" and not name:
            raise ValueError("metric_anomaly: record 'custom' needs the CustomMetric's `name`")
        if per == "gpu" and not field.startswith("gpus."):
            raise ValueError("metric_anomaly: per 'gpu' reads a gpu_sample's `gpus.<field>`")
        self.record, self.field, self.name, self.per = record, field, name, per
        self.model, self.model_params, self.seed = model, dict(model_params or {}), seed
        self.threshold = DEFAULT_THRESHOLDS.get(model, 0.9) if threshold is None else threshold
        self.warmup, self.confirm, self.direction = warmup, max(1, confirm), direction
        self.kind, self.cooldown_s = kind, cooldown_s
        build_model(model, self.model_params, seed)  # a bad model or parameter fails now, not at the first record
        self.max_jobs, self.max_series = max_jobs, max_series
        # job -> its series (per job, rank) or "" -> every node's (per node, gpu); ranks bounded by MAX_RANKS
        self._series: Bounded[str, Bounded[str, _Series]] = Bounded(max_jobs if per in ("job", "rank") else 1)
        self._type = next(t for t in _ALL if record_tag(t) == record)

    @classmethod
    def example(cls) -> MetricAnomalyDetector:
        """Per-rank step times, the conformance suite's instance."""
        return cls(record="step", field="step_time_s", per="rank", warmup=20)

    @on(*_ALL)
    def _record(self, record: Record) -> list[Anomaly] | None:
        if record.__class__ is not self._type:
            return None
        out: list[Anomaly] = []
        for key, value, where in self._values(record):
            found = self._score(key, value, where, record)
            if found is not None:
                out.append(found)
        return out

    def _values(self, record: Record) -> list[tuple[str, float, dict[str, Any]]]:
        """(series key, value, where) for every value of the field this record carries."""
        job, node = getattr(record, "job", ""), getattr(record, "node", "")
        rank = getattr(record, "rank", None)
        if isinstance(record, CustomMetric):
            if record.name != self.name:
                return []
            raw: list[tuple[Any, int | None]] = [(record.values.get(self.field), None)]
        elif isinstance(record, NodeGpuSample) and self.field.startswith("gpus."):
            attr = self.field[5:]
            raw = [(getattr(g, attr, None), g.index) for g in record.gpus if not g.lost]
        else:
            raw = [(getattr(record, self.field, None), None)]
        out = []
        for value, gpu in raw:
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                continue  # absent, not a number, or non-finite (the nan detector's business)
            key = {"job": job, "node": node, "rank": f"{job}\x00{rank}" if rank is not None else "",
                   "gpu": f"{node}:{gpu}"}[self.per]
            if key and (self.per != "gpu" or gpu is not None):
                out.append((key, float(value), {"job": job, "node": node, "rank": rank, "gpu": gpu}))
        return out

    def _score(self, key: str, value: float, where: dict[str, Any], record: Record) -> Anomaly | None:
        group = where["job"] if self.per in ("job", "rank") else ""
        table = self._series.get(group)
        if table is None:
            self._series[group] = table = rank_map() if self.per == "rank" else Bounded(self.max_series)
        series = table.get(key)
        if series is None:
            table[key] = series = _Series(build_model(self.model, self.model_params, self.seed))
        if series.seen < self.warmup:
            series.model.learn(value)
            series.seen += 1
            return None
        score, above = series.model.score(value)
        flagged = score > self.threshold and (self.direction == "both" or above == (self.direction == "up"))
        if not flagged:
            series.run = 0
            series.model.learn(value)
            series.seen += 1
            return None
        series.run += 1
        series.onset = record.ts if series.run == 1 else series.onset
        if series.run < self.confirm or record.ts - series.fired < self.cooldown_s:
            return None
        series.fired = record.ts
        return self._finding(key, value, score, where, record, series.onset)

    def _finding(self, key: str, value: float, score: float, where: dict[str, Any], record: Record,
                 onset: float) -> Anomaly:
        node, gpu, rank = where["node"], where["gpu"], where["rank"]
        localised = self.per != "job"
        return finding(self.instance, self.kind, ts=record.ts, onset=min(onset, record.ts), job=where["job"],
                       nodes=[node] if localised and node else [],
                       ranks=[rank] if localised and rank is not None else [],
                       gpus=[f"{node}:{gpu}"] if gpu is not None else [], step=getattr(record, "step", None),
                       score=round(score, 4), key=key,
                       evidence={"record": self.record, "field": self.field, "name": self.name, "value": value,
                                 "score": round(score, 4), "threshold": self.threshold, "model": self.model,
                                 "per": self.per, "source": "metric_anomaly"})

    def state_size(self) -> int:
        return sum(len(table) for table in self._series.values())

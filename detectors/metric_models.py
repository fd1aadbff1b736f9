"""The online models `metric_anomaly` can score a series with: river's, or a robust z-score over river quantiles.

Each model sees one series (one job's, node's, rank's or GPU's values of one
field) and answers two questions per value: how unusual is it (`score`,
higher is more anomalous, with the model's own scale) and in which direction
from the typical value (`above`). The detector learns only values it did not
flag, as river's `protect_anomaly_detector` does, so a fault that lasts does
not become the new normal while it is being reported.

* `robust_z` (default): |x - median| / (IQR / 1.349) over a rolling window
  (`river.stats.RollingQuantile`); a z-like scale, so a threshold of 6 means
  "six robust standard deviations", whatever the metric's unit.
* `half_space_trees`: `river.anomaly.HalfSpaceTrees`, its feature limits
  set from the first `fit_after` values padded by `pad` times their range
  (behind a min-max scaler a spike lands in the edge leaf, where the normal
  maximum's mass hides it); scores in [0, 1]. A level that later leaves
  the padded range keeps scoring high: the limits do not move.
* `standard_absolute_deviation`: `river.anomaly.StandardAbsoluteDeviation`
  (|x - mean| / std, running).
* `river:<Class>`: any other `river.anomaly` detector with `learn_one(x)` and
  `score_one(x)`, built with `model_params`.

All of them pickle (the worker snapshots the pipeline) and are deterministic
for a fixed `seed`.
"""

from __future__ import annotations

import math
from typing import Any

from trainguard.detectors.common import Snapshottable

FEATURE = "x"
DEFAULT_THRESHOLDS = {"robust_z": 6.0, "half_space_trees": 0.9, "standard_absolute_deviation": 6.0}
MIN_SCALE = 1e-9


class RobustZ(Snapshottable):
    """Median and IQR of the last `window` values (river's rolling quantiles); score = robust z."""

    def __init__(self, window: int = 200) -> None:
        from river import stats

        self.window = window
        self._median = stats.RollingQuantile(0.5, window)
        self._q1 = stats.RollingQuantile(0.25, window)
        self._q3 = stats.RollingQuantile(0.75, window)
        self._last: float | None = None

    def learn(self, x: float) -> None:
        for q in (self._median, self._q1, self._q3):
            q.update(x)
        self._last = x

    def score(self, x: float) -> tuple[float, bool]:
        median, q1, q3 = self._median.get(), self._q1.get(), self._q3.get()
        if median is None or q1 is None or q3 is None:
            return 0.0, False
        spread = (q3 - q1) / 1.349
        # A constant series has no spread: fall back to 1% of its level, so a step change still scores.
        scale = max(spread, abs(median) * 0.01, MIN_SCALE)
        return abs(x - median) / scale, x > median


class RiverModel(Snapshottable):
    """A river anomaly detector on the one feature `x`, plus a running mean for the direction.

    river's univariate scorers (`StandardAbsoluteDeviation`, `GaussianScorer`)
    take the value as the target `y` of `learn_one(x, y)`; the others a
    feature dict.
    """

    def __init__(self, detector: Any) -> None:
        import inspect

        from river import stats

        self.detector = detector
        self.on_target = "y" in inspect.signature(detector.learn_one).parameters
        self._mean = stats.Mean()

    def learn(self, x: float) -> None:
        if self.on_target:
            self.detector.learn_one(None, x)
        else:
            self.detector.learn_one({FEATURE: x})
        self._mean.update(x)

    def score(self, x: float) -> tuple[float, bool]:
        raw = self.detector.score_one(None, x) if self.on_target else self.detector.score_one({FEATURE: x})
        s = float(raw)
        return (s if math.isfinite(s) else 0.0), x > self._mean.get()


class HalfSpace(Snapshottable):
    """river's HalfSpaceTrees on one feature whose limits are the first values' range, padded."""

    def __init__(self, *, n_trees: int = 10, height: int = 6, window_size: int = 50, fit_after: int = 50,
                 pad: float = 2.0, seed: int = 0) -> None:
        self.params = {"n_trees": n_trees, "height": height, "window_size": window_size, "seed": seed}
        self.fit_after, self.pad = fit_after, pad
        self._buffer: list[float] = []
        self._model: RiverModel | None = None

    def learn(self, x: float) -> None:
        if self._model is not None:
            self._model.learn(x)
            return
        self._buffer.append(x)
        if len(self._buffer) >= self.fit_after:
            from river import anomaly

            lo, hi = min(self._buffer), max(self._buffer)
            span = max(hi - lo, abs(hi) * 0.01, MIN_SCALE)
            limits = {FEATURE: (lo - self.pad * span, hi + self.pad * span)}
            self._model = RiverModel(anomaly.HalfSpaceTrees(**self.params, limits=limits))  # type: ignore[arg-type]
            for value in self._buffer:
                self._model.learn(value)
            self._buffer = []

    def score(self, x: float) -> tuple[float, bool]:
        return self._model.score(x) if self._model is not None else (0.0, False)


def build_model(name: str, params: dict[str, Any], seed: int) -> RobustZ | RiverModel | HalfSpace:
    """A fresh model for one series; `ValueError` naming the problem for an unknown model or parameter."""
    from river import anomaly

    try:
        if name == "robust_z":
            return RobustZ(**params)
        if name == "half_space_trees":
            return HalfSpace(**{"seed": seed, **params})
        if name == "standard_absolute_deviation":
            return RiverModel(anomaly.StandardAbsoluteDeviation(**params))
        if name.startswith("river:"):
            cls = getattr(anomaly, name.split(":", 1)[1], None)
            if cls is None or not hasattr(cls, "score_one"):
                raise ValueError(f"river.anomaly has no detector {name.split(':', 1)[1]!r}")
            return RiverModel(cls(**params))
    except TypeError as exc:
        raise ValueError(f"model {name!r}: bad model_params: {exc}") from None
    raise ValueError(f"unknown model {name!r} (robust_z, half_space_trees, standard_absolute_deviation, "
                     "or river:<river.anomaly class>)")

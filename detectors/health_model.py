"""The node-health model: features of one node sample, and an IsolationForest.

A node is summarised by the same `FEATURES` whatever its GPU count:
extremes and spreads across its GPUs (a hot or slow GPU stands out from its
neighbours on the same board) and growth rates of cumulative error
counters. `NodeFeatures` keeps the previous counters per node, so the
rates survive counter resets (a decrease is a reset, counted as zero).

`train()` fits scikit-learn's IsolationForest on healthy-looking history
and records the score threshold below which a sample is abnormal (the
`quantile` of training scores). `HealthModel` carries the model with its
feature list and format version; `HealthModel.load()` refuses files of
another format or feature set with a clear error. Model files are pickles:
load only files you trained yourself.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainguard.schemas.records import NodeGpuSample

FORMAT = "trainguard-node-health"
VERSION = 1
FEATURES: tuple[str, ...] = (
    "temp_max", "temp_spread", "clock_ratio_min", "throttled_frac", "power_spread", "util_min",
    "sbe_rate", "pcie_rate", "nvlink_rate", "remap_corr_rate",
)
SLOW_BITS = 0x08 | 0x20 | 0x40 | 0x80
# The smallest robust scale per feature: a deviation is measured in units no
# finer than these (one stray ECC error is not "100 sigmas" off a quiet history).
SCALE_FLOORS: tuple[float, ...] = (2.0, 2.0, 0.05, 0.25, 20.0, 10.0, 3.0, 3.0, 3.0, 2.0)


class NodeFeatures:
    """Turns node samples into feature vectors; remembers counters per node."""

    def __init__(self) -> None:
        self._last: dict[str, dict[int, tuple[int, int, int, int]]] = {}

    def __call__(self, sample: NodeGpuSample) -> list[float] | None:
        """The feature vector of one sample (None when unobserved or empty)."""
        if not sample.nvml_ok or not sample.gpus:
            return None
        prev = self._last.get(sample.node, {})
        now: dict[int, tuple[int, int, int, int]] = {}
        rates = [0.0, 0.0, 0.0, 0.0]
        temps, powers, ratios, utils, throttled = [], [], [], [], 0
        for g in sample.gpus:
            temps.append(g.temp_c)
            powers.append(g.power_w)
            utils.append(g.util_pct)
            ratios.append(g.sm_clock_mhz / g.max_sm_clock_mhz if g.max_sm_clock_mhz > 0 else 1.0)
            throttled += 1 if g.throttle_reasons & SLOW_BITS else 0
            counters = (g.ecc_sbe, g.pcie_replays, g.nvlink_errors, g.remapped_correctable)
            now[g.index] = counters
            old = prev.get(g.index)
            if old is not None:
                for i in range(4):
                    rates[i] += max(0, counters[i] - old[i])
        self._last[sample.node] = now
        return [max(temps), max(temps) - float(np.median(temps)), min(ratios), throttled / len(sample.gpus),
                max(powers) - min(powers), min(utils), *rates]

    def forget(self, keep: int) -> None:
        """Drop the oldest nodes beyond `keep` (bounded memory)."""
        for node in list(self._last)[: max(0, len(self._last) - keep)]:
            del self._last[node]

    def __len__(self) -> int:
        return len(self._last)


@dataclass
class HealthModel:
    """A fitted model plus what is needed to use it safely."""

    model: Any
    threshold: float
    features: tuple[str, ...] = FEATURES
    version: int = VERSION
    center: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    trained_on: dict[str, Any] = field(default_factory=dict)

    def score(self, x: list[float]) -> float:
        """IsolationForest score: lower is more abnormal."""
        return float(self.model.score_samples(np.asarray([x], dtype=float))[0])

    def max_deviation(self, x: list[float]) -> float:
        """The largest robust z of any feature (guards features constant in training)."""
        return max(abs(v - c) / s for v, c, s in zip(x, self.center, self.scale))

    def abnormal(self, x: list[float], z_limit: float = 10.0) -> tuple[bool, float]:
        """(is abnormal, IsolationForest score).

        A forest cannot split on a feature that never varied in training
        (healthy ECC rates are all zero), so a robust-z guard covers those.
        """
        score = self.score(x)
        return score < self.threshold or self.max_deviation(x) > z_limit, score

    def deviations(self, x: list[float], top: int = 3) -> dict[str, float]:
        """The features furthest from their training median, in robust units."""
        z = {f: (v - c) / s for f, v, c, s in zip(self.features, x, self.center, self.scale)}
        return {f: round(z[f], 2) for f in sorted(z, key=lambda f: -abs(z[f]))[:top]}

    def to_bytes(self) -> bytes:
        """The model file's content (a pickle with format and version); the caller writes it."""
        blob = {"format": FORMAT, "version": self.version, "features": list(self.features), "model": self.model,
                "threshold": self.threshold, "center": self.center, "scale": self.scale,
                "trained_on": self.trained_on}
        return pickle.dumps(blob)

    @classmethod
    def load(cls, path: Path | str) -> HealthModel:
        """Read a model file (the one read a detector may do, at construction)."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ValueError(f"node-health model {path}: cannot read: {exc.strerror}") from None
        return cls.from_bytes(data, str(path))

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> HealthModel:
        """Parse a model file's content; refuse foreign or stale files."""
        path = source
        try:
            blob = pickle.loads(data)
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
            raise ValueError(f"node-health model {path}: cannot read: {exc}") from None
        if not isinstance(blob, dict) or blob.get("format") != FORMAT:
            raise ValueError(f"node-health model {path}: not a {FORMAT} file")
        if blob.get("version") != VERSION or tuple(blob.get("features", ())) != FEATURES:
            raise ValueError(f"node-health model {path}: version/features differ from this build; retrain it")
        return cls(model=blob["model"], threshold=blob["threshold"], features=FEATURES, version=VERSION,
                   center=blob["center"], scale=blob["scale"], trained_on=blob["trained_on"])


def train(rows: list[list[float]], *, quantile: float = 0.002, trees: int = 100, seed: int = 0) -> HealthModel:
    """Fit an IsolationForest on feature rows (mostly healthy history)."""
    from sklearn.ensemble import IsolationForest

    if len(rows) < 50:
        raise ValueError(f"need at least 50 node samples to train, got {len(rows)}")
    x = np.asarray(rows, dtype=float)
    model = IsolationForest(n_estimators=trees, random_state=seed).fit(x)
    scores = model.score_samples(x)
    center = np.median(x, axis=0)
    iqr = np.percentile(x, 75, axis=0) - np.percentile(x, 25, axis=0)
    scale = np.maximum(np.maximum(iqr, 0.05 * np.abs(center)), np.asarray(SCALE_FLOORS))
    return HealthModel(model=model, threshold=float(np.quantile(scores, quantile)), center=center.tolist(),
                       scale=scale.tolist(), trained_on={"samples": len(rows), "quantile": quantile, "trees": trees})

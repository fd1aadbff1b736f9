"""Node health scored online by a model trained offline (IsolationForest).

An unsupervised model flags what is *unusual*, not what is *broken*, so on
its own it would flood. It therefore only reports `hw_fault` when both:

* the node scores below the model's threshold in `confirm` consecutive
  scored samples, and
* the latest sample shows hardware corroboration: growing single-bit ECC,
  PCIe replay, NVLink or correctable-remap counters, well beyond (robust
  z > 3) what the training history saw. Throttling alone is
  left to the slowdown detector: a hot GPU is slow, not broken.

Each node fires at most once per `cooldown_s`. Nodes are scored at most once
per `score_every_s` of event time (scoring costs far more than parsing).
Without a model (no `model_path`) the detector does nothing; it is
therefore not in the default set. Train one with
`trainguard detectors train RECORDING --out MODEL`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trainguard.detectors.base import Detector
from trainguard.detectors.common import Bounded, finding
from trainguard.detectors.dispatch import on
from trainguard.detectors.health_model import FEATURES, HealthModel, NodeFeatures, train
from trainguard.schemas.records import Anomaly, NodeGpuSample

CORROBORATING = ("sbe_rate", "pcie_rate", "nvlink_rate", "remap_corr_rate")


class NodeHealthDetector(Detector):
    """Reports nodes the health model finds abnormal, when hardware corroborates.

    >>> d = NodeHealthDetector.example()
    >>> from trainguard.schemas.records import NodeGpuSample, GpuStats
    >>> out = []
    >>> for t in range(4):
    ...     gpus = [GpuStats(index=i, temp_c=95.0, throttle_reasons=0x40, ecc_sbe=500 * t, util_pct=90,
    ...                      sm_clock_mhz=900, max_sm_clock_mhz=1980) for i in range(8)]
    ...     out += d.observe(NodeGpuSample(ts=60.0 * t, node="bad", gpus=gpus))
    >>> [(a.kind, a.nodes) for a in out]
    [('hw_fault', ['bad'])]
    """

    state_is_a_tree = True  # checked by detectors.checks (check_state_is_a_tree)

    def __init__(
        self,
        *,
        instance: str = "node_health",
        model_path: str = "",
        model: HealthModel | None = None,
        confirm: int = 3,
        cooldown_s: float = 3600.0,
        score_every_s: float = 30.0,
        z_limit: float = 10.0,
        max_nodes: int = 100_000,
    ) -> None:
        super().__init__(instance=instance)
        self.model_path = model_path
        self.confirm = confirm
        self.cooldown_s = cooldown_s
        self.score_every_s = score_every_s
        self.z_limit = z_limit
        self.max_nodes = max_nodes
        self._model = model if model is not None else (HealthModel.load(model_path) if model_path else None)
        self._features = NodeFeatures()
        self._streak: Bounded[str, tuple[float, int, float]] = Bounded(max_nodes)  # node -> (scored at, run, onset)
        self._fired: Bounded[str, float] = Bounded(max_nodes)

    @classmethod
    def example(cls) -> NodeHealthDetector:
        """An instance with a small model trained on synthetic healthy nodes."""
        rng = np.random.default_rng(0)
        rows = [[60 + 5 * rng.random(), 2 * rng.random(), 0.95 + 0.04 * rng.random(), 0.0, 30 * rng.random(),
                 80 + 15 * rng.random(), 0.0, float(rng.integers(0, 2)), 0.0, 0.0] for _ in range(400)]
        return cls(model=train(rows, trees=30))

    @on(NodeGpuSample)
    def _sample(self, record: NodeGpuSample) -> list[Anomaly]:
        if self._model is None:
            return []
        x = self._features(record)
        if len(self._features) > self.max_nodes:
            self._features.forget(self.max_nodes)
        if x is None:
            return []
        last = self._streak.get(record.node)
        if last is not None and record.ts - last[0] < self.score_every_s:
            return []
        abnormal, score = self._model.abnormal(x, self.z_limit)
        if not abnormal:
            self._streak[record.node] = (record.ts, 0, record.ts)
            return []
        run = (last[1] if last else 0) + 1
        onset = last[2] if last and last[1] > 0 else record.ts
        self._streak[record.node] = (record.ts, run, onset)
        corroborated = self._corroboration(x)
        fired = self._fired.get(record.node)
        if run < self.confirm or not corroborated or (fired is not None and record.ts - fired < self.cooldown_s):
            return []
        self._fired[record.node] = record.ts
        evidence: dict[str, Any] = {"score": round(score, 4), "threshold": round(self._model.threshold, 4),
                                    "deviations": self._model.deviations(x), "corroboration": corroborated,
                                    "source": "node_health_model"}
        return [finding(self.instance, "hw_fault", ts=record.ts, onset=onset, job=record.job, nodes=[record.node],
                        score=score, key=record.node, evidence=evidence)]

    def _corroboration(self, x: list[float]) -> dict[str, float]:
        """Error-counter growth well beyond the training history (robust z > 3)."""
        assert self._model is not None
        m = self._model
        return {f: v for i, (f, v) in enumerate(zip(FEATURES, x))
                if f in CORROBORATING and v > 0 and (v - m.center[i]) / m.scale[i] > 3}

    def params(self) -> dict[str, Any]:
        return {"model_path": self.model_path, "confirm": self.confirm, "cooldown_s": self.cooldown_s,
                "score_every_s": self.score_every_s, "z_limit": self.z_limit}

    def state_size(self) -> int:
        return len(self._features) + len(self._streak) + len(self._fired)

"""metric_anomaly on labelled series it never saw: precision, recall, latency, and its cost per event.

The series are generated here (seeded), shaped by what custom signals look
like on a fleet: a level near 1 with multiplicative noise, Gaussian (2 %) or
heavy-tailed (log-normal, sigma 0.1), and, in the "periodic" family, a
legitimate 2x burst of 5 points every 100 (an eval or a checkpoint write
that the metric sees). Faults, labelled: a level shift (+30 % for 60
points), a burst (+100 % for 8 points), a drift (+60 % ramped over 400
points, then held 100). The detectors run with their defaults (threshold,
warm-up 50, confirm 2, direction up, cooldown 100 points); nothing here was
tuned on these series.

Scoring: the first detection inside [start, end + 20 points] is a hit (its
latency counted from the start, in points); every other detection is a
false alarm. Cost: `observe()` per `CustomMetric` against decoding the same
record from its JSON bytes (`Codec.decode`, the worker's own per-event
work), in the same run.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trainguard.detectors.metric_anomaly import MetricAnomalyDetector
from trainguard.schemas.codec import Codec
from trainguard.schemas.records import CustomMetric

N = 2000
GRACE = 20
MODELS = ("robust_z", "half_space_trees", "standard_absolute_deviation")


@dataclass
class Fault:
    start: int
    end: int
    kind: str


def generate(family: str, seed: int) -> tuple[list[float], list[Fault]]:
    """One labelled series: noise of `family` plus three faults at random places."""
    rng = np.random.default_rng(seed)
    noise = rng.lognormal(0.0, 0.1, N) if family == "heavy" else 1.0 + 0.02 * rng.standard_normal(N)
    values = [float(v) for v in noise]
    if family == "periodic":
        for start in range(90, N, 100):
            for i in range(start, min(start + 5, N)):
                values[i] *= 2.0
    # One fault per third, never within a cooldown of another (each is scored on its own).
    shift, burst, drift = (int(rng.integers(lo, hi)) for lo, hi in ((200, 450), (700, 950), (1150, 1400)))
    faults = [Fault(shift, shift + 60, "shift"), Fault(burst, burst + 8, "burst"), Fault(drift, drift + 500, "drift")]
    for f in faults:
        for i in range(f.start, f.end):
            factor = {"shift": 1.3, "burst": 2.0}.get(f.kind) or 1.0 + 0.6 * min(1.0, (i - f.start) / 400)
            values[i] *= factor
    return values, faults


def records(values: list[float]) -> list[CustomMetric]:
    return [CustomMetric(ts=float(i), name="signal", values={"v": v}, job="j", node="n0", rank=0)
            for i, v in enumerate(values)]


def detector(model: str) -> MetricAnomalyDetector:
    return MetricAnomalyDetector(record="custom", name="signal", field="v", per="rank", model=model,
                                 cooldown_s=100.0, seed=1)


def score(model: str, family: str, seeds: range) -> dict[str, float]:
    hits = faults_n = alarms = 0
    latencies: list[float] = []
    by_kind: dict[str, int] = {"shift": 0, "burst": 0, "drift": 0}
    for seed in seeds:
        values, faults = generate(family, seed)
        det = detector(model)
        detections = [int(a.ts) for r in records(values) for a in det.observe(r)]
        faults_n += len(faults)
        used: set[int] = set()
        for f in faults:
            inside = [d for d in detections if f.start <= d <= f.end + GRACE and d not in used]
            if inside:
                hits += 1
                by_kind[f.kind] += 1
                used.add(inside[0])
                latencies.append(inside[0] - f.start)
        alarms += len([d for d in detections if d not in used])
    found = hits + alarms
    return {"precision": hits / found if found else 1.0, "recall": hits / faults_n,
            "latency_p50": statistics.median(latencies) if latencies else float("nan"), "false_alarms": alarms,
            **{k: v / len(seeds) for k, v in by_kind.items()}}


def per_event_us(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) / n * 1e6


def cost(model: str) -> tuple[float, float]:
    """(observe us/event, decode us/event) on the same 20,000 records (after a 200-record warm-up)."""
    values, _ = generate("gauss", 99)
    recs = records(values * 10)
    codec = Codec()
    raw = [codec.encode(r) for r in recs]
    det = detector(model)
    for r in recs[:200]:
        det.observe(r)
    observe = per_event_us(lambda: [det.observe(r) for r in recs[200:]], len(recs) - 200)
    decode = per_event_us(lambda: [codec.decode(b, expect=CustomMetric) for b in raw[200:]], len(raw) - 200)
    return observe, decode


def main() -> None:
    print(f"load: {os.getloadavg()[0]:.1f} (1 min) on {os.cpu_count()} cores")
    seeds = range(100, 120)
    print(f"{'model':28} {'series':9} precision recall (shift burst drift) latency_p50 false_alarms"
          f"  ({len(seeds)} series x 3 faults)")
    for model in MODELS:
        for family in ("gauss", "heavy", "periodic"):
            s = score(model, family, seeds)
            print(f"{model:28} {family:9} {s['precision']:9.2f} {s['recall']:6.2f} ({s['shift']:5.2f} "
                  f"{s['burst']:5.2f} {s['drift']:5.2f}) {s['latency_p50']:11.1f} {s['false_alarms']:12.0f}")
    for model in MODELS:
        observe, decode = cost(model)
        print(f"cost {model:27} observe {observe:7.1f} us/event, decode {decode:5.2f} us/event, "
              f"ratio {observe / decode:6.1f}x")


if __name__ == "__main__":
    main()

"""Which change detector should decide "the job got slower": ours, or river's ADWIN / PageHinkley?

The design card named river's drift detectors for MFU drops. This benchmark
measures them against the slowdown detector's own robust change-point test
(plus its gradual-decline tracker) on the same input: each job's time per
token from its lowest rank, as the slowdown detector reads it, from the
messy-fleet scenarios. Every detector sees the series normalised by the
job's first 50 steps (PageHinkley's threshold is in the units of its input).

Scoring per job and slowdown label: a detection inside [start, end + 120 s]
is a hit (latency from the start); any other detection is a false alarm.
Only slowdown labels count as faults; other faults (hangs, restarts) are
part of the background a detector must not call a slowdown. river's
parameters were chosen on the tuning scenarios (a small grid, best F1);
`python -m benchmarks.bench_drift` prints the tuning and evaluation figures.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from river import drift

from trainguard.detectors.slowdown import SlowdownDetector
from trainguard.lab.telemetry_sim import load_scenario, run_scenario
from trainguard.schemas.records import TrainingStep

ROOT = Path(__file__).resolve().parent.parent
TUNING = ["scenarios/tuning/fleet-c.yaml", "scenarios/tuning/fleet-messy.yaml", "scenarios/tuning/noisy-12h.yaml"]
EVALUATION = ["scenarios/evaluation-fleet/fleet-a.yaml", "scenarios/evaluation-fleet/fleet-b.yaml",
              "scenarios/evaluation-fleet/noisy-24h.yaml"]
GRACE_S = 120.0
Series = list[tuple[float, int, float, int]]  # (ts, step, value, attempt)


def series(path: str) -> tuple[dict[str, Series], list[dict[str, Any]]]:
    """Per job, the leader rank's time per token; and the scenario's labels."""
    events, labels = run_scenario(load_scenario(ROOT / path))
    out: dict[str, Series] = defaultdict(list)
    for rec in events:
        if isinstance(rec, TrainingStep) and rec.rank == 0 and rec.step_time_s > 0:
            out[rec.job].append((rec.ts, rec.step, rec.step_time_s / max(rec.tokens, 1), rec.attempt))
    return dict(out), labels


def ours(points: Series) -> list[float]:
    d = SlowdownDetector()
    found = []
    for ts, step, value, attempt in points:
        rec = TrainingStep(ts=ts, job="j", rank=0, node="n", step=step, loss=1.0, step_time_s=value, attempt=attempt)
        found += [a.ts for a in d.observe(rec)]
    return found


def river_detector(make: Callable[[], Any]) -> Callable[[Series], list[float]]:
    """A river drift detector on the normalised series; a drift counts when the level went *up* 7 %."""
    def run(points: Series) -> list[float]:
        det, found = make(), []
        recent: list[float] = []
        base = statistics.median(v for _, _, v, _ in points[:50]) if points else 1.0
        attempt = 0
        for ts, _, value, att in points:
            if att != attempt:  # a restart: start afresh, like the slowdown detector
                det, recent, attempt = make(), [], att
            x = value / base
            recent.append(x)
            det.update(x)
            if det.drift_detected and len(recent) > 40:
                now, before = statistics.median(recent[-15:]), statistics.median(recent[-200:-15])
                if now > 1.07 * before:
                    found.append(ts)
                    det, recent = make(), recent[-15:]
        return found
    return run


def score(found: dict[str, list[float]], labels: list[dict[str, Any]]) -> tuple[int, int, int, list[float]]:
    """(faults, hits, false alarms, latencies)."""
    slow = [lab for lab in labels if lab["kind"] == "slowdown"]
    hits, lat, false = 0, [], 0
    matched: set[str] = set()
    for job, stamps in found.items():
        for ts in stamps:
            lab = next((lab for lab in slow if lab["job"] == job and lab["start"] - 2 <= ts <= lab["end"] + GRACE_S),
                       None)
            if lab is None:
                false += 1
            elif lab["id"] not in matched:
                matched.add(lab["id"])
                hits += 1
                lat.append(ts - lab["start"])
    return len(slow), hits, false, lat


def evaluate(paths: list[str], detectors: dict[str, Callable[[Series], list[float]]]) -> dict[str, list[float]]:
    totals: dict[str, list[Any]] = {name: [0, 0, 0, [], 0.0] for name in detectors}
    for path in paths:
        per_job, labels = series(path)
        for name, run in detectors.items():
            started = time.perf_counter()
            found = {job: run(points) for job, points in per_job.items()}
            totals[name][4] += time.perf_counter() - started
            faults, hits, false, lat = score(found, labels)
            totals[name][0] += faults
            totals[name][1] += hits
            totals[name][2] += false
            totals[name][3] += lat
    return totals  # type: ignore[return-value]


def show(title: str, totals: dict[str, list[Any]]) -> None:
    print(f"\n{title}\n| detector | slowdowns | found | false alarms | recall | precision | latency p50 s | cpu s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (faults, hits, false, lat, cpu) in totals.items():
        recall = hits / faults if faults else 0.0
        precision = hits / (hits + false) if hits + false else 0.0
        p50 = statistics.median(lat) if lat else float("nan")
        print(f"| {name} | {faults} | {hits} | {false} | {recall:.2f} | {precision:.2f} | {p50:.0f} | {cpu:.2f} |")


def _adwin(delta: float) -> Callable[[], Any]:
    return lambda: drift.ADWIN(delta=delta)


def _page_hinkley(threshold: float) -> Callable[[], Any]:
    return lambda: drift.PageHinkley(threshold=threshold, delta=0.01, mode="up")


def grid() -> Iterator[tuple[str, Callable[[Series], list[float]]]]:
    for delta in (0.2, 0.02, 0.002, 0.0002):
        yield f"ADWIN(delta={delta})", river_detector(_adwin(delta))
    for threshold in (1.0, 2.0, 5.0, 15.0):
        yield f"PageHinkley(up, threshold={threshold})", river_detector(_page_hinkley(threshold))


def main() -> int:
    tuned = evaluate(TUNING, {"robust change point (ours)": ours, **dict(grid())})
    show("Tuning scenarios (river's parameters chosen here)", tuned)
    f1 = {name: 2 * t[1] / (t[0] + t[1] + t[2]) if t[0] else 0.0 for name, t in tuned.items() if "ours" not in name}
    best_adwin = max((n for n in f1 if n.startswith("ADWIN")), key=lambda n: f1[n])
    best_ph = max((n for n in f1 if n.startswith("PageHinkley")), key=lambda n: f1[n])
    chosen = {"robust change point (ours)": ours, **{n: r for n, r in grid() if n in (best_adwin, best_ph)}}
    show("Evaluation scenarios (never tuned on)", evaluate(EVALUATION, chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The CPU of one /metrics scrape of the worker, against the size of the detector state.

The default detection pipeline is fed `--seconds` of a healthy fleet (the
`benchmarks.fleet_mix` mix: an 8-GPU sample per node per second, steps and
heartbeats of 8 ranks per node) at 64, 512 and 4,096 nodes; the worker's
registry then holds that state plus a lag gauge per input partition. One
scrape is `generate_latest` of the registry, the body the endpoint serves.
Two ways, in the same run on the same state:

* **before**: the worker's metrics as they were, rebuilt here
  (`legacy_registry`): prometheus-client's Counter, Gauge and Histogram
  objects plus a collector that calls every detector's `state_size()` and
  walks its bounded maps for evictions at each scrape (O(state)), rendered
  by `generate_latest`;
* **now**: `WorkerMetrics.render()`: the batch loop counts each task's
  state on a schedule of its own (`StateCensus`, at most every
  `lag_interval_s`, within 1% of its time), so a scrape sums a few cached
  numbers, and plain counters are formatted behind cached prefixes. The
  count's own cost (paid per count, not per scrape) is printed too.

Both expose the same series (checked: the same sample names and labels).

Figures are CPU time of this process (`time.process_time`), the median
of `--repeat` scrapes, per scrape and per 1,000 exposed series.

    python -m benchmarks scrape [--nodes 64,512,4096] [--seconds 10] [--repeat 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from benchmarks.fleet_mix import fleet_second
from trainguard.detectors.pipeline import DetectionPipeline
from trainguard.schemas.kinds import ANOMALY_KINDS
from trainguard.schemas.topics import INPUT_TOPICS, Topics
from trainguard.settings import load_settings
from trainguard.streams.worker.metrics import (
    BATCH_BUCKETS_S,
    SNAPSHOT_BUCKETS_S,
    StateCensus,
    WorkerMetrics,
    detector_evictions,
    detector_state_sizes,
)
from trainguard.streams.worker.processor import ProcessorStats, RawMessage


def fed_pipeline(nodes: int, seconds: int) -> tuple[DetectionPipeline, int]:
    """The default pipeline after `seconds` of a `nodes`-node fleet; (pipeline, events fed)."""
    pipeline = DetectionPipeline.from_settings(load_settings().detectors)
    fed = 0
    for second in range(seconds):
        for record in fleet_second(nodes, 1_000_000.0 + second, second):
            pipeline.process(record)
            fed += 1
    return pipeline, fed


def _with_positions(metrics: WorkerMetrics, topics: Topics, partitions: int) -> WorkerMetrics:
    """A lag gauge per input partition, as a worker reading all of them has."""
    for t in INPUT_TOPICS:
        for p in range(partitions):
            metrics.observe_batch([RawMessage(topics.name(t), b"", partition=p, offset=0)], 0.001, 0.0)
    metrics.refresh_lag(lambda _t, _p: 10)
    return metrics


class _LegacyState:
    """The former scrape-time collector: events, dead letters, and a walk of all detector state."""

    def __init__(self, stats: ProcessorStats, dets: Sequence[object]) -> None:
        self._stats, self._sizes, self._evictions = stats, detector_state_sizes(dets), detector_evictions(dets)

    def collect(self) -> list[Metric]:
        events = CounterMetricFamily("trainguard_worker_events", "Messages consumed and processed, by logical input "
                                     "topic", labels=["topic"])
        for topic, count in sorted(self._stats.by_topic.copy().items()):
            events.add_metric([topic], float(count))
        state = GaugeMetricFamily("trainguard_worker_detector_state_entries", "Keyed entries held by each detector",
                                  labels=["detector"])
        for name, size in sorted(self._sizes().items()):
            state.add_metric([name], float(size))
        evicted = CounterMetricFamily("trainguard_worker_detector_evictions",
                                      "Keys dropped by each detector's bounded maps (a bound bit)", labels=["detector"])
        for name, n in sorted(self._evictions().items()):
            evicted.add_metric([name], float(n))
        dead = CounterMetricFamily("trainguard_worker_dead_letters", "Messages that failed to decode and went to "
                                   "the dead-letter topic", value=float(self._stats.dead_lettered))
        rerouted = CounterMetricFamily("trainguard_worker_rerouted", "Records whose job hashes to another task",
                                       value=float(self._stats.rerouted))
        return [events, dead, rerouted, state, evicted]


def legacy_registry(stats: ProcessorStats, dets: Sequence[object], partitions: int) -> CollectorRegistry:
    """The worker's registry before the census: prometheus-client objects, state walked per scrape."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_LegacyState(stats, dets))  # type: ignore[arg-type]
    for name in ("trainguard_worker_anomalies", "trainguard_worker_incidents"):
        counter = Counter(name, "by kind", ["kind"], registry=registry)
        for kind in ANOMALY_KINDS:
            counter.labels(kind=kind)
    Histogram("trainguard_worker_batch_seconds", "batch wall time", buckets=BATCH_BUCKETS_S,
              registry=registry).observe(0.001)
    lag = Gauge("trainguard_worker_consumer_lag", "lag", ["topic", "partition"], registry=registry)
    for topic in INPUT_TOPICS:
        for p in range(partitions):
            lag.labels(topic=topic, partition=str(p)).set(10)
    Gauge("trainguard_worker_watermark_seconds", "watermark", registry=registry).set(0.0)
    Gauge("trainguard_worker_waiting_records", "waiting", registry=registry).set(0.0)
    Gauge("trainguard_worker_paused_partitions", "paused", registry=registry).set(0.0)
    Histogram("trainguard_worker_snapshot_cpu_seconds", "snapshot CPU", buckets=SNAPSHOT_BUCKETS_S,
              registry=registry).observe(0.004)
    Gauge("trainguard_worker_snapshot_bytes", "snapshot size", registry=registry).set(0.0)
    snapshots = Counter("trainguard_worker_snapshots", "by pickle", ["pickle"], registry=registry)
    for pickle in ("fast", "memo"):
        snapshots.labels(pickle=pickle)
    return registry


def _series_keys(body: bytes) -> set[bytes]:
    return {line.rsplit(b" ", 1)[0] for line in body.splitlines() if line and not line.startswith(b"#")}


def cpu_ms(action: Callable[[], object], repeat: int) -> float:
    """Median CPU milliseconds of `action` over `repeat` runs."""
    costs = []
    for _ in range(repeat):
        started = time.process_time()
        action()
        costs.append((time.process_time() - started) * 1000)
    return statistics.median(costs)


def measure(nodes: int, seconds: int, repeat: int, partitions: int) -> dict[str, float]:
    """Scrape CPU before (prometheus-client objects, state walked per scrape) and now, on one fed pipeline."""
    pipeline, fed = fed_pipeline(nodes, seconds)
    dets, topics = pipeline.detectors, Topics()
    stats = ProcessorStats(processed=fed, by_topic={t: fed for t in INPUT_TOPICS})
    before = legacy_registry(stats, dets, partitions)
    census = StateCensus()
    now = _with_positions(WorkerMetrics(stats=stats, topics=topics, census=census), topics, partitions)
    count_ms = cpu_ms(lambda: census.count(0, dets), max(3, repeat // 4))
    keys = _series_keys(now.render())
    assert keys == _series_keys(generate_latest(before)), "both ways must export the same series"
    return {"nodes": nodes, "events": fed, "series": len(keys), "count_ms": count_ms,
            "walk_ms": cpu_ms(lambda: generate_latest(before), repeat), "census_ms": cpu_ms(now.render, repeat)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_scrape", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="64,512,4096", help="comma-separated fleet sizes (default: %(default)s)")
    parser.add_argument("--seconds", type=int, default=10, help="seconds of fleet events fed (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=20, help="scrapes timed per way (default: %(default)s)")
    parser.add_argument("--partitions", type=int, default=load_settings().topics.partitions,
                        help="input partitions the worker reads (a lag series each; default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        sizes = [int(n) for n in args.nodes.split(",")]
    except ValueError:
        parser.error(f"--nodes: expected comma-separated integers, got {args.nodes!r}")
    print(f"one /metrics scrape, CPU ms (median of {args.repeat}), {args.partitions} partitions per input topic; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'nodes':>6} {'events fed':>10} {'series':>6} {'before':>14} {'now':>13} "
          f"{'per 1k series':>13} {'before/now':>10} {'one count':>15}")
    for nodes in sizes:
        r = measure(nodes, args.seconds, args.repeat, args.partitions)
        per_k = r["census_ms"] / r["series"] * 1000
        print(f"{nodes:>6} {r['events']:>10,} {r['series']:>6} {r['walk_ms']:>11.2f} ms {r['census_ms']:>10.3f} ms "
              f"{per_k:>10.3f} ms {r['walk_ms'] / max(r['census_ms'], 1e-6):>9.0f}x {r['count_ms']:>12.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

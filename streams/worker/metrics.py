"""Prometheus metrics of the detection worker, kept off the hot path.

The worker processes tens of thousands of events per second on one core,
so per-event metric updates would cost more than the detectors. Instead:

* counters the processor already keeps (`ProcessorStats`: events per topic,
  dead letters) are read at *scrape* time by a custom collector, so the hot
  path pays nothing;
* per-batch figures (batch latency, consumer positions) are updated once
  per batch;
* anomalies and incidents are rare, so their outgoing messages are decoded
  to count them by kind;
* detector state sizes and bounded-map evictions are counted per task by
  the batch loop on its own schedule (`StateCensus`, at most every
  `lag_interval_s` and within 1% of the loop's time) and only summed at
  scrape time. Walking every detector's state per scrape cost 4, 13 and 95
  ms of CPU at 64, 512 and 4,096 nodes, so a scrape's cost grew with the
  fleet; now it is the same whatever the state;
* series are plain numbers rendered straight to the text format
  (`WorkerMetrics.render`): prometheus-client's own objects cost about 10 µs
  per series per scrape, these under 1 µs (`python -m benchmarks scrape`).

Everything lives in a `CollectorRegistry` built by `WorkerMetrics`; nothing
touches prometheus-client's global default registry, so two workers (or two
tests) in one process never collide. The HTTP endpoint starts only when asked
(`serve`, used when `settings.metrics.port` > 0).

>>> from trainguard.streams.worker.processor import ProcessorStats
>>> stats = ProcessorStats(processed=3, by_topic={"gpu": 3})
>>> m = WorkerMetrics(stats=stats)
>>> m.value("trainguard_worker_events_total", topic="gpu")
3.0
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from trainguard.schemas.codec import Codec, DecodeError
from trainguard.schemas.kinds import ANOMALY_KINDS
from trainguard.schemas.topics import Topics
from trainguard.streams.worker.processor import OutMessage, ProcessorStats, RawMessage

BATCH_BUCKETS_S: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# One task's snapshot: about 5 ms at 512 nodes, 250 ms at 100,000 GPUs in one task (docs/sizing.md).
SNAPSHOT_BUCKETS_S: tuple[float, ...] = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

# highwater(topic, partition) -> the offset the next produced message will get, or None if unknown
HighwaterFn = Callable[[str, int], "int | None"]


@dataclass(frozen=True)
class MetricsServer:
    """A running exposition endpoint; `close()` stops it."""

    port: int
    _server: object

    def close(self) -> None:
        """Stop serving (idempotent)."""
        shutdown = getattr(self._server, "shutdown", None)
        if shutdown is not None:
            shutdown()
            self._server.server_close()  # type: ignore[attr-defined]


class StateCensus:
    """Detector state sizes and evictions per task, as last counted.

    Counting walks the detectors' state (O(keys): 106 ms of CPU at 4,096
    nodes), so the batch loop does it on a schedule of its own
    (`BatchLoop.count_state`) and a scrape only sums a few small dicts. The
    figures are as fresh as the last count (`lag_interval_s`, longer for
    very large state), which is what a gauge of memory needs.

    >>> class Det:
    ...     instance = "hang"
    ...     def state_size(self) -> int: return 3
    >>> census = StateCensus()
    >>> census.count(0, [Det()]); census.count(1, [Det()])
    >>> census.sizes()
    {'hang': 6}
    >>> census.retain([1]); census.sizes()
    {'hang': 3}
    """

    def __init__(self) -> None:
        self._sizes: dict[int, dict[str, int]] = {}
        self._evictions: dict[int, dict[str, int]] = {}

    def count(self, task: int, detectors: Iterable[object]) -> None:
        """Count one task's detectors now."""
        dets = list(detectors)
        self._sizes[task] = detector_state_sizes(dets)()
        self._evictions[task] = detector_evictions(dets)()

    def retain(self, tasks: Iterable[int]) -> None:
        """Forget tasks this worker no longer holds (moved by a rebalance)."""
        keep = set(tasks)
        for gone in [t for t in self._sizes if t not in keep]:
            del self._sizes[gone], self._evictions[gone]

    def sizes(self) -> dict[str, int]:
        """State entries per detector instance, summed over tasks."""
        return _summed(self._sizes.values())

    def evictions(self) -> dict[str, int]:
        """Evictions per detector instance, summed over tasks."""
        return _summed(self._evictions.values())


def _summed(per_task: Iterable[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for counts in per_task:
        for name, n in counts.items():
            total[name] = total.get(name, 0) + n
    return total


Labels = tuple[tuple[str, str], ...]  # sorted by name, as the exposition writes them
Sample = tuple[str, Labels, float]  # (sample name, labels, value)


@dataclass
class Family:
    """One metric family as plain data: what both the registry and `render` are built from."""

    name: str  # without `_total`, as prometheus-client names counters
    kind: str  # counter, gauge or histogram
    doc: str
    samples: list[Sample]
    created: list[tuple[Labels, float]] = field(default_factory=list)  # counters, histograms: when each began

    def metric(self) -> Metric:
        """The family as prometheus-client's `Metric` (for the registry: `value()`, tests, dashboards)."""
        out = Metric(self.name, self.doc, self.kind)
        for name, labels, value in self.samples:
            out.add_sample(name, dict(labels), value)
        for labels, ts in self.created:
            out.add_sample(self.name + "_created", dict(labels), ts)
        return out


class _Histogram:
    """One unlabelled histogram: a count per bucket (value <= bound), sum and count; no lock (one thread)."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.bounds = (*buckets, math.inf)
        self._le = [(("le", floatToGoString(bound)),) for bound in self.bounds]  # labels written once
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        self.sum += value
        self.counts[bisect.bisect_left(self.bounds, value)] += 1

    def samples(self, name: str) -> list[Sample]:
        out: list[Sample] = []
        total = 0
        bucket = name + "_bucket"
        for le, count in zip(self._le, self.counts, strict=True):
            total += count
            out.append((bucket, le, float(total)))
        out.append((name + "_count", (), float(total)))
        out.append((name + "_sum", (), self.sum))
        return out


class _Gauge:
    """One unlabelled gauge (the batch loop calls `set`)."""

    def __init__(self) -> None:
        self.value = 0.0

    def set(self, value: float) -> None:
        self.value = float(value)


class _KindCounter:
    """A counter per kind, every kind present from the start (dashboards show zeros)."""

    def __init__(self, kinds: Iterable[str]) -> None:
        self.counts: dict[str, int] = {}
        self.created: dict[str, float] = {}
        for kind in kinds:
            self._add(kind)

    def _add(self, kind: str) -> None:
        self.counts[kind] = 0
        self.created[kind] = time.time()

    def inc(self, kind: str) -> None:
        if kind not in self.counts:
            self._add(kind)
        self.counts[kind] += 1

    def family(self, name: str, doc: str) -> Family:
        samples: list[Sample] = [(name + "_total", (("kind", k),), float(n)) for k, n in self.counts.items()]
        return Family(name, "counter", doc, samples, [((("kind", k),), ts) for k, ts in self.created.items()])


class _Families(Collector):
    """The registry's view of `WorkerMetrics.families()`."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return [family.metric() for family in self._metrics.families()]


class WorkerMetrics:
    """The worker's metrics: plain counters, rendered straight to the text format.

    prometheus-client's own metric objects cost about 3 µs per series to
    collect and 8 µs to render (locks, sample tuples, name validation per
    scrape); here a series is a number in a dict and a scrape formats it
    behind a cached name-and-labels prefix (`render`). `registry` holds the
    same families for `value()`, tests and tools; `render()` writes exactly
    what `generate_latest(registry)` would (a unit test holds them equal).
    """

    def __init__(
        self,
        *,
        stats: ProcessorStats,
        topics: Topics | None = None,
        state_sizes: Callable[[], dict[str, int]] | None = None,
        evictions: Callable[[], dict[str, int]] | None = None,
        census: StateCensus | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        """`census` (the worker's way) exports the state as last counted; `state_sizes` and
        `evictions` are callables read per scrape instead (tests, tools with small state)."""
        self.census = census
        if census is not None:
            state_sizes, evictions = state_sizes or census.sizes, evictions or census.evictions
        self._stats, self._state_sizes, self._evictions = stats, state_sizes, evictions
        self.topics = topics or Topics()
        self._codec = Codec()
        self._positions: dict[tuple[str, int], int] = {}
        self.anomalies = _KindCounter(ANOMALY_KINDS)
        self.incidents = _KindCounter(ANOMALY_KINDS)
        self.batch_seconds = _Histogram(BATCH_BUCKETS_S)
        self.lag: dict[tuple[str, str], float] = {}  # (logical topic, partition) -> messages behind
        self.watermark = _Gauge()
        self.waiting_records = _Gauge()  # records the tasks hold for event time (streams.worker.backpressure)
        self.paused_partitions = _Gauge()  # partitions paused because they run ahead
        self.snapshot_seconds = _Histogram(SNAPSHOT_BUCKETS_S)  # CPU per task snapshot (pickle + compress)
        self.snapshot_bytes = _Gauge()  # the last task snapshot written
        self.snapshots = {"fast": 0, "memo": 0}  # by pickle: "memo" is the slower one (docs/stream-core.md)
        self._snapshots_created = time.time()
        self._prefixes: dict[tuple[str, Labels], str] = {}
        self._heads: dict[tuple[str, str], str] = {}
        self._created_blocks: dict[tuple[str, int], str] = {}
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.registry.register(_Families(self))

    def families(self) -> list[Family]:
        """Every exported family, in exposition order, read now (O(series), never O(detector state))."""
        stats = self._stats
        out = [Family("trainguard_worker_events", "counter", "Messages consumed and processed, by logical input topic",
                      [("trainguard_worker_events_total", (("topic", t),), float(n))
                       for t, n in sorted(stats.by_topic.copy().items())]),
               Family("trainguard_worker_dead_letters", "counter",
                      "Messages that failed to decode and went to the dead-letter topic",
                      [("trainguard_worker_dead_letters_total", (), float(stats.dead_lettered))]),
               Family("trainguard_worker_rerouted", "counter",
                      "Records whose job hashes to another task (keyed wrongly), sent on to it through node-events",
                      [("trainguard_worker_rerouted_total", (), float(stats.rerouted))])]
        if self._state_sizes is not None:
            out.append(Family("trainguard_worker_detector_state_entries", "gauge",
                              "Keyed entries held by each detector",
                              [("trainguard_worker_detector_state_entries", (("detector", d),), float(n))
                               for d, n in sorted(self._state_sizes().items())]))
        if self._evictions is not None:
            out.append(Family("trainguard_worker_detector_evictions", "counter",
                              "Keys dropped by each detector's bounded maps (a bound bit)",
                              [("trainguard_worker_detector_evictions_total", (("detector", d),), float(n))
                               for d, n in sorted(self._evictions().items())]))
        out.append(self.anomalies.family("trainguard_worker_anomalies", "Anomalies published, by kind"))
        out.append(self.incidents.family("trainguard_worker_incidents", "Incidents opened and published, by kind"))
        out.append(Family("trainguard_worker_batch_seconds", "histogram",
                          "Wall time to process one batch of messages (decode, detect, correlate)",
                          self.batch_seconds.samples("trainguard_worker_batch_seconds"),
                          [((), self.batch_seconds.created)]))
        out.append(Family("trainguard_worker_consumer_lag", "gauge",
                          "Messages behind the partition's end, per input topic and partition",
                          [("trainguard_worker_consumer_lag", (("partition", p), ("topic", t)), v)
                           for (t, p), v in self.lag.items()]))
        out.append(Family("trainguard_worker_watermark_seconds", "gauge", "Newest event time the detectors have seen",
                          [("trainguard_worker_watermark_seconds", (), self.watermark.value)]))
        out.append(Family("trainguard_worker_waiting_records", "gauge",
                          "Accepted records that wait for the event-time watermark, over the worker's tasks",
                          [("trainguard_worker_waiting_records", (), self.waiting_records.value)]))
        out.append(Family("trainguard_worker_paused_partitions", "gauge",
                          "Input partitions paused by backpressure because they run ahead in event time",
                          [("trainguard_worker_paused_partitions", (), self.paused_partitions.value)]))
        out.append(Family("trainguard_worker_snapshot_cpu_seconds", "histogram",
                          "CPU time to pickle and compress one task's snapshot at a commit",
                          self.snapshot_seconds.samples("trainguard_worker_snapshot_cpu_seconds"),
                          [((), self.snapshot_seconds.created)]))
        out.append(Family("trainguard_worker_snapshot_bytes", "gauge",
                          "Size of the last task snapshot written to the changelog (compressed)",
                          [("trainguard_worker_snapshot_bytes", (), self.snapshot_bytes.value)]))
        out.append(Family("trainguard_worker_snapshots", "counter",
                          "Task snapshots written, by pickle: fast (no memo) or memo (a plug-in not declared a "
                          "tree, or state fast mode could not write)",
                          [("trainguard_worker_snapshots_total", (("pickle", k),), float(n))
                           for k, n in self.snapshots.items()],
                          [((("pickle", k),), self._snapshots_created) for k in self.snapshots]))
        return out

    def render(self) -> bytes:
        """The text exposition (format 0.0.4) of `families()`: what the worker's /metrics serves."""
        lines: list[str] = []
        add, known, prefix, inf = lines.append, self._prefixes.get, self._prefix, math.inf
        for family in self.families():
            add(self._head(family.name + "_total" if family.kind == "counter" else family.name, family.kind,
                           family.doc))
            for name, labels, value in family.samples:  # the per-series cost: two lookups and a repr
                add(known((name, labels)) or prefix(name, labels))
                add(f"{value!r}\n" if -inf < value < 1e6 else _number(value))
            if family.created:
                add(self._created(family))
        return "".join(lines).encode()

    def _created(self, family: Family) -> str:
        """The `_created` block of a family; start times never change, so it is written once per series set."""
        key = (family.name, len(family.created))
        found = self._created_blocks.get(key)
        if found is None:
            name = family.name + "_created"
            found = self._created_blocks[key] = self._head(name, "gauge", family.doc) + "".join(
                self._prefix(name, labels) + _number(ts) for labels, ts in family.created)
        return found

    def _prefix(self, name: str, labels: Labels) -> str:
        """`name{labels} `, escaped once and cached (series are few and long-lived)."""
        key = (name, labels)
        found = self._prefixes.get(key)
        if found is None:
            inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            found = self._prefixes[key] = f"{name}{{{inner}}} " if labels else f"{name} "
        return found

    def _head(self, name: str, kind: str, doc: str) -> str:
        key = (name, kind)
        found = self._heads.get(key)
        if found is None:
            text = doc.replace("\\", "\\\\").replace("\n", "\\n")
            found = self._heads[key] = f"# HELP {name} {text}\n# TYPE {name} {kind}\n"
        return found

    def observe_batch(self, batch: Sequence[RawMessage], elapsed_s: float, watermark: float) -> None:
        """Record one processed batch of one partition, in offset order: its latency and how far the partition got.

        The partition's position is its last message's offset + 1, read once per batch: a store per message
        cost about 0.3 µs each (2 % of the worker) to arrive at the same value.
        """
        self.batch_seconds.observe(elapsed_s)
        if batch:
            last = batch[-1]
            self._positions[(last.topic, last.partition)] = last.offset + 1
        if watermark > float("-inf"):
            self.watermark.set(watermark)

    def observe_snapshot(self, cpu_s: float, size: int, *, fast: bool) -> None:
        """One task snapshot written at a commit: its CPU, its size, and which pickle wrote it."""
        self.snapshot_seconds.observe(cpu_s)
        self.snapshot_bytes.set(size)
        self.snapshots["fast" if fast else "memo"] += 1

    def count_outputs(self, messages: Iterable[OutMessage]) -> None:
        """Count published anomalies and incidents by kind (they are rare)."""
        anomalies, incidents = self.topics.name("anomalies"), self.topics.name("incidents")
        for out in messages:
            if out.topic != anomalies and out.topic != incidents:
                continue
            try:
                kind = str(self._codec.decode(out.value).kind)
            except DecodeError:  # our own encoder wrote it; count it anyway
                kind = "unknown"
            (self.anomalies if out.topic == anomalies else self.incidents).inc(kind)

    def refresh_lag(self, highwater: HighwaterFn) -> None:
        """Set the lag gauge of every partition this worker has read from."""
        for (topic, partition), position in list(self._positions.items()):
            end = highwater(topic, partition)
            if end is not None:
                self.lag[(self.topics.logical(topic), str(partition))] = float(max(0, end - position))

    def value(self, name: str, **labels: str) -> float | None:
        """One sample's current value (for tests and the benchmark)."""
        return self.registry.get_sample_value(name, labels)

    def serve(self, port: int, addr: str = "0.0.0.0") -> MetricsServer:
        """Start an HTTP endpoint on a daemon thread (port 0: any free port; tests and tools, via the registry)."""
        server, _thread = start_http_server(port, addr, registry=self.registry)
        return MetricsServer(port=int(server.server_port), _server=server)


def _number(value: float) -> str:
    """A sample value and its newline, as prometheus-client writes it (`floatToGoString`).

    Below 1e6 (and not NaN or -Inf) that is Python's repr; the function call
    is only paid for the rest.
    """
    if -math.inf < value < 1e6:
        return f"{value!r}\n"
    return floatToGoString(value) + "\n"


def _escape(value: str) -> str:
    """A label value as the text format writes it."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def detector_state_sizes(detectors: Iterable[object]) -> Callable[[], dict[str, int]]:
    """A callable reporting `state_size()` of each detector, by instance name."""
    dets = list(detectors)

    def sizes() -> dict[str, int]:
        return {str(getattr(d, "instance", type(d).__name__)): int(d.state_size()) for d in dets}  # type: ignore[attr-defined]

    return sizes


def detector_evictions(detectors: Iterable[object]) -> Callable[[], dict[str, int]]:
    """A callable reporting the evictions of each detector's bounded maps, by instance name."""
    from trainguard.schemas.bounded import bounded_evictions

    dets = list(detectors)

    def counts() -> dict[str, int]:
        return {str(getattr(d, "instance", type(d).__name__)): bounded_evictions(d) for d in dets}

    return counts

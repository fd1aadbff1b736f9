"""Prometheus metrics of the detection worker, kept off the hot path.

The worker processes tens of thousands of events per second on one core,
so per-event metric updates would cost more than the detectors. Instead:

* counters the processor already keeps (`ProcessorStats`: events per topic,
  dead letters) are read at *scrape* time by a custom collector, so the hot
  path pays nothing;
* per-batch figures (batch latency, consumer positions) are updated once
  per batch;
* anomalies and incidents are rare, so their outgoing messages are decoded
  to count them by kind.

Everything lives in a `CollectorRegistry` built by `WorkerMetrics`; nothing
touches prometheus-client's global default registry, so two workers (or two
tests) in one process never collide. The HTTP endpoint starts only when asked
(`serve`, used when `settings.metrics.port` > 0).

>>> from streams.worker.processor import ProcessorStats
>>> stats = ProcessorStats(processed=3, by_topic={"gpu": 3})
>>> m = WorkerMetrics(stats=stats)
>>> m.value("trainguard_worker_events_total", topic="gpu")
3.0
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from schemas.codec import Codec, DecodeError
from schemas.records import ANOMALY_KINDS
from schemas.topics import Topics
from streams.worker.processor import OutMessage, ProcessorStats, RawMessage

BATCH_BUCKETS_S: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

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


class _StatsCollector(Collector):
    """Exposes `ProcessorStats` (and detector state sizes) at scrape time."""

    def __init__(self, stats: ProcessorStats, state_sizes: Callable[[], dict[str, int]] | None,
                 evictions: Callable[[], dict[str, int]] | None = None) -> None:
        self._stats = stats
        self._state_sizes = state_sizes
        self._evictions = evictions

    def collect(self) -> Iterable[Metric]:
        events = CounterMetricFamily(
            "trainguard_worker_events", "Messages consumed and processed, by logical input topic", labels=["topic"]
        )
        for topic, count in sorted(self._stats.by_topic.copy().items()):
            events.add_metric([topic], float(count))
        yield events
        yield CounterMetricFamily(
            "trainguard_worker_dead_letters",
            "Messages that failed to decode and went to the dead-letter topic",
            value=float(self._stats.dead_lettered),
        )
        yield CounterMetricFamily(
            "trainguard_worker_rerouted",
            "Records whose job hashes to another task (keyed wrongly), sent on to it through node-events",
            value=float(self._stats.rerouted),
        )
        if self._state_sizes is not None:
            state = GaugeMetricFamily(
                "trainguard_worker_detector_state_entries", "Keyed entries held by each detector", labels=["detector"]
            )
            for name, size in sorted(self._state_sizes().items()):
                state.add_metric([name], float(size))
            yield state
        if self._evictions is not None:
            evicted = CounterMetricFamily(
                "trainguard_worker_detector_evictions", "Keys dropped by each detector's bounded maps (a bound bit)",
                labels=["detector"])
            for name, count in sorted(self._evictions().items()):
                evicted.add_metric([name], float(count))
            yield evicted


class WorkerMetrics:
    """The worker's metrics, in a registry of their own."""

    def __init__(
        self,
        *,
        stats: ProcessorStats,
        topics: Topics | None = None,
        state_sizes: Callable[[], dict[str, int]] | None = None,
        evictions: Callable[[], dict[str, int]] | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.topics = topics or Topics()
        self._codec = Codec()
        self._positions: dict[tuple[str, int], int] = {}
        self.registry.register(_StatsCollector(stats, state_sizes, evictions))
        self.anomalies = Counter(
            "trainguard_worker_anomalies", "Anomalies published, by kind", ["kind"], registry=self.registry
        )
        self.incidents = Counter(
            "trainguard_worker_incidents", "Incidents opened and published, by kind", ["kind"], registry=self.registry
        )
        for kind in ANOMALY_KINDS:  # every kind present from the start, so dashboards show zeros
            self.anomalies.labels(kind=kind)
            self.incidents.labels(kind=kind)
        self.batch_seconds = Histogram(
            "trainguard_worker_batch_seconds",
            "Wall time to process one batch of messages (decode, detect, correlate)",
            buckets=BATCH_BUCKETS_S,
            registry=self.registry,
        )
        self.lag = Gauge(
            "trainguard_worker_consumer_lag",
            "Messages behind the partition's end, per input topic and partition",
            ["topic", "partition"],
            registry=self.registry,
        )
        self.watermark = Gauge(
            "trainguard_worker_watermark_seconds", "Newest event time the detectors have seen", registry=self.registry
        )

    def observe_batch(self, batch: Sequence[RawMessage], elapsed_s: float, watermark: float) -> None:
        """Record one processed batch: its latency and how far each partition got."""
        self.batch_seconds.observe(elapsed_s)
        positions = self._positions
        for message in batch:  # a dict store per message; cheap next to decoding it
            positions[(message.topic, message.partition)] = message.offset + 1
        if watermark > float("-inf"):
            self.watermark.set(watermark)

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
            (self.anomalies if out.topic == anomalies else self.incidents).labels(kind=kind).inc()

    def refresh_lag(self, highwater: HighwaterFn) -> None:
        """Set the lag gauge of every partition this worker has read from."""
        for (topic, partition), position in list(self._positions.items()):
            end = highwater(topic, partition)
            if end is not None:
                self.lag.labels(topic=self.topics.logical(topic), partition=str(partition)).set(max(0, end - position))

    def value(self, name: str, **labels: str) -> float | None:
        """One sample's current value (for tests and the benchmark)."""
        return self.registry.get_sample_value(name, labels)

    def serve(self, port: int, addr: str = "0.0.0.0") -> MetricsServer:
        """Start the HTTP endpoint on a daemon thread (port 0: any free port)."""
        server, _thread = start_http_server(port, addr, registry=self.registry)
        return MetricsServer(port=int(server.server_port), _server=server)


def detector_state_sizes(detectors: Iterable[object]) -> Callable[[], dict[str, int]]:
    """A callable reporting `state_size()` of each detector, by instance name."""
    dets = list(detectors)

    def sizes() -> dict[str, int]:
        return {str(getattr(d, "instance", type(d).__name__)): int(d.state_size()) for d in dets}  # type: ignore[attr-defined]

    return sizes


def detector_evictions(detectors: Iterable[object]) -> Callable[[], dict[str, int]]:
    """A callable reporting the evictions of each detector's bounded maps, by instance name."""
    from detectors.common import bounded_evictions

    dets = list(detectors)

    def counts() -> dict[str, int]:
        return {str(getattr(d, "instance", type(d).__name__)): bounded_evictions(d) for d in dets}

    return counts

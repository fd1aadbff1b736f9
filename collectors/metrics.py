"""Prometheus metrics of the collectors themselves: did each one work, and how long did it take.

node_exporter's lesson: a collector that silently stops is worse than one
that fails loudly, so every run sets `trainguard_collector_success` and
`trainguard_collector_duration_seconds` for its collector. The metrics live
in a registry owned by the caller (no global singleton), which the command
layer exposes over HTTP when a port is configured.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class CollectorMetrics:
    """The gauges and counters `trainguard collect` and `trainguard run` export."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.success = Gauge("trainguard_collector_success", "1 if the collector's last run worked",
                             ["collector"], registry=self.registry)
        self.duration = Gauge("trainguard_collector_duration_seconds", "duration of the collector's last run",
                              ["collector"], registry=self.registry)
        self.records = Counter("trainguard_collector_records", "records produced", ["collector"],
                               registry=self.registry)
        self.spooled = Gauge("trainguard_publisher_spooled_records", "records waiting for the broker",
                             registry=self.registry)
        self.dropped = Gauge("trainguard_publisher_dropped_records", "records dropped because the spool was full",
                             ["value"], registry=self.registry)

    def observe(self, collector: str, *, ok: bool, duration_s: float, records: int) -> None:
        """Record one run of one collector."""
        self.success.labels(collector).set(1.0 if ok else 0.0)
        self.duration.labels(collector).set(duration_s)
        self.records.labels(collector).inc(records)

    def observe_publisher(self, stats: dict[str, int]) -> None:
        """Copy the publisher's counters (see `Publisher.stats`)."""
        self.spooled.set(stats.get("spooled", 0))
        self.dropped.labels("low").set(stats.get("dropped_low_value", 0))
        self.dropped.labels("other").set(stats.get("dropped_other", 0))

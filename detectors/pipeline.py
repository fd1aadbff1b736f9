"""Route records to detectors and anomalies to the correlator.

`DetectionPipeline` is the one object the worker, the backtest and the tests
drive: `process(record)` returns (anomalies, incidents). It keeps the
newest event time seen and ticks time-based detectors as event time moves,
at most once per `tick_every_s` of event time, so a hang fires even though
the hung job itself sends nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from detectors.base import Detector
from detectors.correlate import IncidentCorrelator
from detectors.registry import build
from detectors.settings import DetectorSettings
from schemas.records import Anomaly, Incident, Record
from schemas.topics import tag_of


class DetectionPipeline:
    """Detectors plus correlator, driven by event time only."""

    def __init__(
        self,
        detectors: Iterable[Detector],
        correlator: IncidentCorrelator | None = None,
        *,
        tick_every_s: float = 1.0,
    ) -> None:
        self.detectors = list(detectors)
        self.correlator = correlator or IncidentCorrelator()
        self.tick_every_s = tick_every_s
        self.watermark = float("-inf")
        self._last_tick = float("-inf")
        self._routes: dict[str, list[Detector]] = defaultdict(list)
        for det in self.detectors:
            for tag in det.consumes:
                self._routes[tag].append(det)
        self._by_type: dict[type, list[Callable[[Record], list[Anomaly]]]] = {}
        self._tickers = [d for d in self.detectors if type(d).tick is not Detector.tick]

    @classmethod
    def from_settings(cls, settings: DetectorSettings) -> DetectionPipeline:
        """Build the configured detector instances (entry-point lookup)."""
        dets = [build(s.type, s.instance, s.params) for s in settings.instances if s.enabled]
        return cls(dets, IncidentCorrelator(window_s=settings.correlator.window_s))

    def process(self, record: Record) -> tuple[list[Anomaly], list[Incident]]:
        """Feed one record; return new anomalies and newly opened incidents."""
        anomalies: list[Anomaly] = []
        ts = record.ts
        if ts > self.watermark:
            self.watermark = ts
        route = self._by_type.get(record.__class__)
        if route is None:
            route = self._by_type[record.__class__] = [d.observe for d in self._routes.get(tag_of(record), [])]
        for observe in route:
            found = observe(record)
            if found:
                anomalies.extend(found)
        if self.watermark - self._last_tick >= self.tick_every_s:
            anomalies.extend(self._tick(self.watermark))
        if not anomalies:
            return anomalies, []
        return anomalies, self._correlate(anomalies)

    def advance(self, ts: float) -> tuple[list[Anomaly], list[Incident]]:
        """Move event time forward with no record (e.g. at the end of a replay)."""
        self.watermark = max(self.watermark, ts)
        anomalies = self._tick(self.watermark)
        return anomalies, self._correlate(anomalies)

    def _tick(self, ts: float) -> list[Anomaly]:
        self._last_tick = ts
        out: list[Anomaly] = []
        for det in self._tickers:
            out.extend(det.tick(ts))
        return out

    def _correlate(self, anomalies: list[Anomaly]) -> list[Incident]:
        incidents: list[Incident] = []
        for anomaly in anomalies:
            incidents.extend(self.correlator.add(anomaly))
        return incidents

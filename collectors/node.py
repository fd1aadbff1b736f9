"""The node loop behind `trainguard collect`: run each enabled collector on its interval.

A collector is anything with `name`, `collect(now) -> list[Record]` and
`close()`. Each run is timed and reported (metric + log line); a collector
that raises is reported as failed and retried on its next tick, it never
takes the others down. "Unobserved" samples (e.g. `nvml_ok=False`) count
as a failed run too, since nothing was seen.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from trainguard.collectors.logs import LogParser
from trainguard.collectors.metrics import CollectorMetrics
from trainguard.collectors.sink import CountingSink
from trainguard.schemas.records import Record

log = logging.getLogger(__name__)


class Collector(Protocol):
    """What the node loop runs."""

    name: str

    def collect(self, now: float) -> list[Any]: ...

    def close(self) -> None: ...


@dataclass
class Scheduled:
    """A collector and how often it runs."""

    collector: Collector
    interval_s: float
    next_at: float = 0.0
    last_ok: bool | None = None


class LineSource:
    """Adapts a line reader (file follower, kernel log) plus a `LogParser` into a collector."""

    def __init__(self, *, name: str, reader: Any, parser: LogParser) -> None:
        self.name = name
        self._reader = reader
        self._parser = parser

    def collect(self, now: float) -> list[Record]:
        """Log events from the lines that appeared since the last call."""
        return [e for line in self._reader.read_lines() for e in self._parser.feed(line, now)]

    def close(self) -> None:
        """Release the reader if it holds anything."""
        close = getattr(self._reader, "close", None)
        if close is not None:
            close()


def _why(records: list[Record]) -> str:
    errors = {getattr(r, "error", "") for r in records} - {""}
    return f" ({'; '.join(sorted(errors))})" if errors else ""


class NodeLoop:
    """Runs collectors on their intervals until stopped; publishes everything they produce."""

    def __init__(self, *, sink: CountingSink, metrics: CollectorMetrics,
                 clock: Callable[[], float] = time.time) -> None:
        self.sink = sink
        self.metrics = metrics
        self._clock = clock
        self._scheduled: list[Scheduled] = []
        self.stop_event = threading.Event()

    def add(self, collector: Collector, *, interval_s: float) -> None:
        """Enable a collector at the given interval."""
        self._scheduled.append(Scheduled(collector, interval_s))

    def run_once(self, s: Scheduled) -> list[Record]:
        """Run one collector once: publish its records, report success and duration."""
        started = time.perf_counter()
        try:
            records = s.collector.collect(self._clock())
            ok = all(getattr(r, "nvml_ok", True) for r in records)
        except Exception as exc:  # one broken collector must not stop the others
            log.error("collector %s failed: %s: %s", s.collector.name, type(exc).__name__, exc)
            records, ok = [], False
        duration_s = time.perf_counter() - started
        for record in records:
            self.sink.publish(record)
        self.metrics.observe(s.collector.name, ok=ok, duration_s=duration_s, records=len(records))
        # Every run at INFO; a change of health also at WARNING, so it shows without -v and without spam.
        changed = s.last_ok is not ok and not (s.last_ok is None and ok)
        log.log(logging.WARNING if changed else logging.INFO, "collector %s ok=%s duration=%.4fs records=%d%s",
                s.collector.name, ok, duration_s, len(records), _why(records) if not ok else "")
        s.last_ok = ok
        return records

    def run(self, *, max_seconds: float | None = None) -> None:
        """Loop until `stop_event` is set (or `max_seconds` passed)."""
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        while not self.stop_event.is_set() and (deadline is None or time.monotonic() < deadline):
            now = time.monotonic()
            for s in self._scheduled:
                if now >= s.next_at:
                    self.run_once(s)
                    s.next_at = now + s.interval_s
            self.metrics.observe_publisher(self.sink.stats())
            next_at = min((s.next_at for s in self._scheduled), default=now + 1.0)
            wait = max(0.0, next_at - time.monotonic())
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            self.stop_event.wait(wait)

    def close(self) -> None:
        """Close every collector."""
        for s in self._scheduled:
            s.collector.close()

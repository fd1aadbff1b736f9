"""The sink the collector tests publish into (one for all: the agent, the node loop, the training hook)."""

from __future__ import annotations

import threading

from schemas.records import Record


class ListSink:
    """Collects published records (thread-safe: the heartbeat thread publishes too)."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self._lock = threading.Lock()

    def publish(self, record: Record) -> None:
        with self._lock:
            self.records.append(record)

    def close(self, timeout_s: float = 10.0) -> bool:
        return True

    def stats(self) -> dict[str, int]:
        return {"spooled": 0}

    def of(self, kind: type) -> list:  # type: ignore[type-arg]
        with self._lock:
            return [r for r in self.records if isinstance(r, kind)]

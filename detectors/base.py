"""The detector protocol, in the spirit of river: tiny and explicit.

* `observe(record)` takes one record (in event-time order) and returns the
  anomalies it reveals, usually none.
* `tick(ts)` advances event time without a record. A hang produces no
  events, so time-based rules fire from here; the worker calls it with the
  newest event time it has seen.
* State lives on the instance in plain, picklable containers keyed by job,
  node or GPU, so the worker can snapshot a detector with `pickle` and a
  backtest can replay it from scratch.
* Parameters are keyword-only constructor arguments; one class serves many
  configured instances (`instance` names each).
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from schemas.records import Anomaly, Record


def anomaly_id(*parts: object) -> str:
    """A deterministic id: the same finding on a replay gets the same id."""
    raw = "|".join(str(p) for p in parts).encode()
    return hashlib.blake2b(raw, digest_size=10).hexdigest()


class Detector(ABC):
    """Base class of every detector, built-in or plug-in.

    Subclasses set `consumes` (record type tags they want) and implement
    `observe`; time-based detectors also override `tick`.
    """

    consumes: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, *, instance: str = "") -> None:
        self.instance = instance or type(self).__name__

    @abstractmethod
    def observe(self, record: Record) -> list[Anomaly]:
        """Digest one record; return the anomalies it reveals."""

    @classmethod
    def example(cls) -> Detector:
        """A ready instance for the conformance suite and docs (default: no arguments).

        Detectors that need something to run (a model file, say) override this.
        """
        return cls()

    def tick(self, ts: float) -> list[Anomaly]:
        """Advance event time to `ts` with no new record (default: nothing)."""
        return []

    def state_size(self) -> int:
        """How many keyed entries the detector holds (for memory checks)."""
        return 0

    def params(self) -> dict[str, Any]:
        """The constructor parameters, for reports and `detectors list`."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and k != "instance"}

"""The detector protocol, in the spirit of river: tiny and explicit.

* Handlers per record type: a method decorated `@on(TrainingStep)` digests
  one training step (in event-time order) and returns the anomalies it
  reveals, usually none. The declarations are all a pipeline needs to route
  records (see `detectors.dispatch`); `observe(record)` runs the handlers of
  one record for code that drives a single detector.
* `tick(ts)` advances event time without a record. A hang produces no
  events, so time-based rules fire from here; the worker calls it with the
  newest event time it has seen.
* State lives on the instance in plain, picklable containers keyed by job,
  node or GPU, so the worker can snapshot a detector with `pickle` and a
  backtest can replay it from scratch. It should be a tree (no mutable
  object reachable twice): a detector that says so (`state_is_a_tree`) is
  snapshotted without pickle's memo (`detectors.state_tree`;
  `detectors.checks` verifies the claim).
* Parameters are keyword-only constructor arguments; one class serves many
  configured instances (`instance` names each).
"""

from __future__ import annotations

from abc import ABC
from typing import Any, ClassVar

from trainguard.detectors.dispatch import HandlerError, handlers
from trainguard.schemas.ids import anomaly_id as anomaly_id  # re-exported: plug-in detectors import it from here
from trainguard.schemas.records import Anomaly, Record


class Detector(ABC):  # noqa: B024 - a base to subclass; what it must add are @on handlers, not overrides
    """Base class of every detector, built-in or plug-in.

    Subclasses declare a handler per record type they read (`@on(...)`,
    `detectors.dispatch`); time-based detectors also override `tick`.
    """

    # The state is a tree (no mutable object reachable twice), so a worker may pickle it without pickle's memo
    # (detectors.state_tree): a third less CPU per snapshot. Every built-in declares it; a plug-in declares it once
    # `check_detector` passes. Until then a pipeline holding the plug-in is pickled with the memo, which keeps
    # whatever it shares shared.
    state_is_a_tree: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for legacy in ("observe", "consumes"):  # the pipeline reads neither: records would be dropped silently
            if legacy in vars(cls):
                raise HandlerError(f"{cls.__name__} defines `{legacy}`; declare a handler per record type with "
                                   "@on(RecordType) instead (detectors.dispatch)")

    def __init__(self, *, instance: str = "") -> None:
        self.instance = instance or type(self).__name__

    def observe(self, record: Record) -> list[Anomaly]:
        """Run this detector's handlers of `record`'s type (none: nothing); the anomalies they reveal.

        The pipeline calls the handlers directly from its own table; this is
        for tests, benchmarks and tools that feed one detector.
        """
        out: list[Anomaly] = []
        for name in handlers(type(self)).get(record.__class__, ()):
            found = getattr(self, name)(record)
            if found:
                out.extend(found)
        return out

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

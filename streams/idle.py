"""Keep event time moving when the streams go quiet.

Detectors only know event time. If every producer falls silent (a whole job
hangs and its node agents die with it), no record advances the watermark
and a hang would never fire. `IdleClock` bridges that one gap: after
`idle_after_s` of wall-clock silence it extrapolates event time from the
last record's time by the wall-clock time elapsed since. The clock is
injected, so tests drive it by hand.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class IdleClock:
    """Extrapolates the watermark across silent periods."""

    def __init__(self, *, idle_after_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_after_s = idle_after_s
        self._clock = clock
        self._wall_at_event: float | None = None
        self._event_ts = 0.0

    def saw(self, event_ts: float) -> None:
        """Note that a record with event time `event_ts` just arrived."""
        if event_ts >= self._event_ts:
            self._event_ts = event_ts
        self._wall_at_event = self._clock()

    def idle_watermark(self) -> float | None:
        """The extrapolated event time, or None while records keep arriving."""
        if self._wall_at_event is None:
            return None
        silent = self._clock() - self._wall_at_event
        if silent < self.idle_after_s:
            return None
        return self._event_ts + silent

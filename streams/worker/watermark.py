"""Event time per partition, guarded: what time it is for the worker's detectors.

The worker's answers must not depend on how fast events arrive. Three rules
make that so (the same rules Kafka Streams and Flink apply):

* **Per-partition watermark, minimum across partitions.** Each assigned
  partition's watermark is the newest event time accepted from it. The
  worker's time is the *minimum* over its partitions: a partition whose
  backlog is still being read holds time back, so a job's silence on a
  lagging partition is never mistaken for a hang. A partition that is
  caught up and has sent nothing for `idle_after_s` is set aside (else one
  quiet topic would stop time for all).
* **Guarded.** A record dated more than `max_ahead_s` ahead of the newest
  time of the clock's partitions is held, not accepted: a job that resumes after a
  long pause confirms it with its next records (they are just as new), a
  forged or mis-clocked record is contradicted by `confirm_within` records
  that stay in the present, and is then rejected (dead-lettered) without
  having moved time. A record dated beyond `max_ahead_s` ahead of its
  broker timestamp is rejected at once.
* **No time from the wall clock unless it is safe.** When every partition
  is caught up *and* the broker answered every partition's fetches without
  a gap, silence is real: time advances by the wall time elapsed since the
  last record, counted only from when the broker last became reachable. A
  broker outage or a lag never advances time, so neither can raise a hang.

Everything here is pure: the wall clock is injected, the Kafka edge feeds
`caught_up`/`reachable` facts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

P = TypeVar("P")  # what a held record carries (the raw message)
NEG_INF = float("-inf")


@dataclass
class _Held(Generic[P]):
    ts: float
    payload: P
    contradicted: int = 0
    source: Hashable = None  # the host that sent it (None: unknown, any other record may confirm it)
    echoes: int = 0  # later records of the same host near its time
    others: int = 0  # records of other hosts accepted in the present since it was held


@dataclass
class PartitionTime(Generic[P]):
    """One partition's watermark and the records held as dated too far ahead.

    Only the event-time facts (`watermark`, `held`) travel in a snapshot.
    The fetch facts are this process's own: `last_record_wall` is a reading
    of its monotonic clock (meaningless in another process or on another
    host) and `caught_up` describes its consumer's position. A restored
    partition starts as not known, so it is neither caught up nor idle
    until its new owner has fetched it (issue 21: a restored "caught up"
    made a backlog look idle and let time run past it, raising a false hang).
    """

    watermark: float = NEG_INF
    held: list[_Held[P]] = field(default_factory=list)
    last_record_wall: float = NEG_INF
    caught_up: bool = False  # position >= end offset at the last fetch
    known: bool = False  # caught_up was ever learned from the broker (by this process)
    paused: bool = False  # fetching stopped by backpressure (streams.worker.backpressure): never idle

    def __getstate__(self) -> dict[str, Any]:
        return {"watermark": self.watermark, "held": self.held}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Snapshots written before carried the fetch facts too: they are dropped here.
        self.watermark, self.held = state.get("watermark", NEG_INF), state.get("held", [])
        self.last_record_wall, self.caught_up, self.known, self.paused = NEG_INF, False, False, False


@dataclass(frozen=True)
class Verdict(Generic[P]):
    """What to do with one record: which payloads to process now, which to reject."""

    accept: list[tuple[float, P]]
    reject: list[tuple[P, str]]


class EventClock(Generic[P]):
    """Watermarks of the assigned partitions and the worker's event time."""

    def __init__(self, *, max_ahead_s: float = 30.0, idle_after_s: float = 5.0, confirm_within: int = 20,
                 stale_after_s: float = 3.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_ahead_s = max_ahead_s
        self.idle_after_s = idle_after_s
        self.confirm_within = confirm_within
        self.stale_after_s = stale_after_s
        self._clock = clock
        self.parts: dict[Hashable, PartitionTime[P]] = {}
        self._reachable_since: float | None = None
        self._last_answer = NEG_INF
        self._newest = NEG_INF  # newest accepted time over all partitions
        self._holding = 0  # records held over all partitions

    # ---------------------------------------------------------- assignment

    def assign(self, tp: Hashable, state: PartitionTime[P] | None = None) -> None:
        """Start following a partition (with its restored state, if any): not known until fetched."""
        part = self.parts[tp] = state or PartitionTime()
        part.last_record_wall, part.caught_up, part.known, part.paused = NEG_INF, False, False, False
        self._newest = max(self._newest, part.watermark)
        self._holding += len(part.held)

    def revoke(self, tp: Hashable) -> PartitionTime[P] | None:
        """Stop following a partition; its state is returned (for a snapshot)."""
        part = self.parts.pop(tp, None)
        if part is not None:
            self._holding -= len(part.held)
        return part

    # ---------------------------------------------------------- records

    def touch(self, tp: Hashable) -> PartitionTime[P]:
        """Records of `tp` just arrived (once per fetched batch: the wall clock is not read per record)."""
        part = self.parts.get(tp)
        if part is None:
            part = self.parts[tp] = PartitionTime()
        part.last_record_wall = self._clock()
        return part

    def admit(self, tp: Hashable, ts: float, broker_ts: float, payload: P,
              source: Hashable = None) -> Verdict[P] | None:
        """Judge one record of partition `tp` (after `touch(tp)`): None means accepted as it is.

        "Far ahead" is measured against the newest time of *all* the clock's
        partitions, so a sparse partition (a log line every few minutes) is
        judged by its dense neighbours, not by its own last record.
        """
        bound = self.max_ahead_s
        if ts <= self._newest + bound and (broker_ts <= 0 or ts <= broker_ts + bound) and not self._holding:
            part = self.parts[tp]  # the hot path: in time, nothing held
            if ts > part.watermark:
                part.watermark = ts
                if ts > self._newest:
                    self._newest = ts
            return None
        return self._judge(self.touch(tp) if tp not in self.parts else self.parts[tp], ts, broker_ts, payload,
                           source)

    def _judge(self, part: PartitionTime[P], ts: float, broker_ts: float, payload: P,
               source: Hashable = None) -> Verdict[P]:
        if broker_ts > 0 and ts > broker_ts + self.max_ahead_s:
            return Verdict([], [(payload, f"future-dated: event time {ts:.3f} is {ts - broker_ts:.0f}s ahead of "
                                          f"its broker timestamp (bound {self.max_ahead_s:.0f}s)")])
        if self._newest != NEG_INF and ts > self._newest + self.max_ahead_s:
            return self._hold(part, ts, payload, source)
        accept = [(ts, payload)]
        self._moved(part, ts)
        reject: list[tuple[P, str]] = []
        if self._holding:
            self._settle(ts, part, accept, reject, source)
        return Verdict(accept, reject)

    def _moved(self, part: PartitionTime[P], ts: float) -> None:
        if ts > part.watermark:
            part.watermark = ts
            if ts > self._newest:
                self._newest = ts

    def _hold(self, part: PartitionTime[P], ts: float, payload: P, source: Hashable = None) -> Verdict[P]:
        """A record far ahead: confirmed by an independent one as new, or held.

        Independent means another host (issue 21: a host a day ahead sent
        several kinds of records, two confirmed each other and the task's
        time jumped a day). A host's own later records confirm it only while
        no other host speaks in the present meanwhile (a lone host resuming
        after a long pause, `confirm_within` records of its own).
        """
        near = [(p, h) for p in self.parts.values() for h in p.held
                if abs(h.ts - ts) <= self.max_ahead_s and h.payload != payload]
        peers = [(p, h) for p, h in near if source is None or h.source is None or h.source != source]
        if not peers:
            for _, h in near:
                h.echoes += 1
            peers = [(p, h) for p, h in near if h.echoes >= self.confirm_within and not h.others]
        if not peers:
            part.held.append(_Held(ts, payload, source=source))
            self._holding += 1
            return Verdict([], [])
        # Two distinct records agree on the new time: the stream really moved on (a job resumed).
        accept = [(ts, payload)]
        self._moved(part, ts)
        for owner, h in peers:
            owner.held.remove(h)
            self._holding -= 1
            accept.append((h.ts, h.payload))
            self._moved(owner, h.ts)
        reject: list[tuple[P, str]] = []
        if self._holding:
            self._settle(self._newest, part, accept, reject, source)
        return Verdict(sorted(accept, key=lambda a: a[0]), reject)

    def _settle(self, ts: float, source: PartitionTime[P], accept: list[tuple[float, P]],
                reject: list[tuple[P, str]], host: Hashable = None) -> None:
        """A record accepted at `ts` confirms held records near it (any partition); on its own
        partition it contradicts those still far ahead (a partition read behind the others, a
        backlog, contradicts nothing). A record of another host in the present (near the newest
        time, on any partition) contradicts them too: their host's clock is the odd one."""
        present = ts >= self._newest - self.max_ahead_s
        for part in self.parts.values():
            if not part.held:
                continue
            keep: list[_Held[P]] = []
            for h in part.held:
                if h.ts <= ts + self.max_ahead_s:
                    accept.append((h.ts, h.payload))
                    self._moved(part, h.ts)
                    continue
                other = present and (host is None or h.source is None or host != h.source)
                if other:
                    h.others += 1  # another host speaks in the present: the held one's own echoes prove nothing
                if part is not source and not (other and h.source is not None):
                    keep.append(h)
                    continue
                h.contradicted += 1
                if h.contradicted >= self.confirm_within:
                    reject.append((h.payload, f"future-dated: event time {h.ts:.3f} is {h.ts - ts:.0f}s ahead of "
                                              f"the stream's recent events (bound {self.max_ahead_s:.0f}s)"))
                else:
                    keep.append(h)
            self._holding -= len(part.held) - len(keep)
            part.held = keep

    # ---------------------------------------------------------- broker facts

    def pause(self, tp: Hashable, paused: bool = True) -> None:
        """Fetching of `tp` was paused (or resumed) by backpressure.

        A paused partition is never set aside as idle: it stopped because it
        ran ahead, not because its producers fell silent, and its position
        says nothing about what waits on the broker. Were it idle, time could
        run on past its unread records and they would arrive late.
        """
        part = self.parts.get(tp)
        if part is not None:
            part.paused = paused

    def paused(self) -> set[Hashable]:
        """The partitions paused now."""
        return {tp for tp, part in self.parts.items() if part.paused}

    def observe_fetch(self, tp: Hashable, *, caught_up: bool) -> None:
        """The broker answered a fetch of `tp`: is our position at its end?"""
        part = self.parts.get(tp)
        if part is not None:
            part.caught_up, part.known = caught_up, True

    def answered(self, fresh: bool) -> None:
        """Whether every assigned partition got a fetch answer within `stale_after_s`."""
        now = self._clock()
        if not fresh:
            self._reachable_since = None
            return
        if self._reachable_since is None:
            self._reachable_since = now
        self._last_answer = now

    # ---------------------------------------------------------- time

    def _idle(self, part: PartitionTime[P], now: float) -> bool:
        # A held record does not keep its partition active: a forged record on a quiet
        # partition must not stop time (that would disable hang detection).
        return (part.known and part.caught_up and not part.paused
                and now - part.last_record_wall >= self.idle_after_s)

    def watermark(self) -> float:
        """The worker's event time: min over active partitions; -inf while unknown."""
        now = self._clock()
        active = [p for p in self.parts.values() if not self._idle(p, now)]
        if active:
            return min(p.watermark for p in active)
        return self._idle_time(now)

    def _idle_time(self, now: float) -> float:
        """Everything caught up and quiet: the newest time, plus safe wall-clock silence."""
        newest = max((p.watermark for p in self.parts.values()), default=NEG_INF)
        if newest == NEG_INF or self._reachable_since is None or now - self._last_answer > self.stale_after_s:
            return newest
        last_record = max(p.last_record_wall for p in self.parts.values())
        silent = now - max(last_record, self._reachable_since)
        return newest + silent if silent >= self.idle_after_s else newest

    def state(self) -> dict[Hashable, Any]:
        """Per-partition watermarks (for metrics and logs)."""
        return {tp: p.watermark for tp, p in self.parts.items()}

"""Backpressure for the event-time buffer: pause the partitions that run ahead, resume them below half.

A record newer than its task's watermark waits in the task's event buffer
until every partition has passed its time. During a backlog drain one
partition (training, say) runs ahead of another (gpu) in event time, and
without a bound up to half the backlog waits: in memory, in every
snapshot, under the garbage collector. Kafka Streams bounds the same
buffer (`buffered.records.per.partition`) by pausing the partitions that
have too much buffered; here the rule is per task:

* at `high` waiting records, pause every partition of the task whose own
  time is ahead of the task's watermark (it cannot help time move);
* below `low`, resume them all;
* in between, resume a paused partition as soon as the watermark reaches
  it, so that a partition time waits for is never paused (no deadlock).

The rule is pure: the batch loop feeds it counts and times and applies the
plan to its consumer (`streams.worker.batch_loop.BatchLoop._pace`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Set
from dataclasses import dataclass

NOTHING: frozenset[Hashable] = frozenset()


@dataclass(frozen=True)
class Plan:
    """Partitions to pause and to resume now (both empty: leave the consumer as it is)."""

    pause: frozenset[Hashable] = NOTHING
    resume: frozenset[Hashable] = NOTHING


KEEP = Plan()


@dataclass(frozen=True)
class Backpressure:
    """High and low marks of waiting records per task.

    >>> rule = Backpressure.at(1000)
    >>> times = {"gpu-0": 10.0, "training-0": 90.0}
    >>> sorted(rule.plan(1000, times, watermark=10.0, paused=set()).pause)
    ['training-0']
    >>> rule.plan(700, times, watermark=10.0, paused={"training-0"}) == KEEP
    True
    >>> sorted(rule.plan(499, times, watermark=10.0, paused={"training-0"}).resume)
    ['training-0']
    """

    high: int
    low: int

    def __post_init__(self) -> None:
        if not 0 <= self.low < self.high:
            raise ValueError(f"backpressure marks must satisfy 0 <= low < high, got low={self.low} high={self.high}")

    @classmethod
    def at(cls, high: int) -> Backpressure:
        """Pause at `high` waiting records, resume under half of it."""
        return cls(high, high // 2)

    def plan(self, waiting: int, times: Mapping[Hashable, float], watermark: float,
             paused: Set[Hashable]) -> Plan:
        """What to pause and resume, given the task's waiting records, its partitions' own times
        (`times`), the task's watermark and the partitions paused now."""
        if waiting < self.low:
            return Plan(resume=frozenset(paused)) if paused else KEEP
        if waiting < self.high and not paused:
            return KEEP
        ahead = {tp for tp, t in times.items() if t > watermark}
        resume = frozenset(tp for tp in paused if tp not in ahead)
        pause = frozenset(ahead.difference(paused)) if waiting >= self.high else NOTHING
        return Plan(pause, resume) if pause or resume else KEEP

"""Safety rails between a plan and the fleet: breaker, cooldown, approval.

A flapping switch makes every node behind it look broken at once. Evicting
them all would turn one fault into an outage, so evictions pass a circuit
breaker: if the nodes evicted within a sliding window of event time would
exceed a fraction of the job (or the fleet), the breaker trips and *holds*
until an operator resets it. A per-node cooldown stops one node from being
acted on again and again. All time comes from the caller (record `ts`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Verdict:
    """Whether an action may proceed, and if not, why."""

    allowed: bool
    reason: str = ""


class CircuitBreaker:
    """Trips when evictions in `window_s` exceed `max_fraction` of a job or fleet.

    >>> b = CircuitBreaker(max_fraction=0.25, window_s=60)
    >>> b.check(job="j", nodes=["n0"], job_size=8, ts=0.0).allowed
    True
    >>> b.record(job="j", nodes=["n0"], ts=0.0)
    >>> b.check(job="j", nodes=["n1", "n2"], job_size=8, ts=1.0).allowed
    False
    >>> b.tripped, b.check(job="j", nodes=["n3"], job_size=8, ts=500.0).allowed
    (True, False)
    """

    def __init__(self, *, max_fraction: float, window_s: float, fleet_size: int = 0, min_job_size: int = 4,
                 fleet_max_evictions: int = 4) -> None:
        self.max_fraction = max_fraction
        self.window_s = window_s
        self.fleet_size = fleet_size
        # Never off: a job whose size is unknown counts as the smallest plausible job, and
        # without a known fleet size an absolute fleet-wide cap applies. Idle nodes (job "")
        # count only against the fleet limit.
        self.min_job_size = max(1, min_job_size)
        self.fleet_max_evictions = max(1, fleet_max_evictions)
        self.tripped = False
        self.trip_reason = ""
        self._evictions: deque[tuple[float, str, str]] = deque()

    def check(self, *, job: str, nodes: list[str], job_size: int, ts: float) -> Verdict:
        """May `nodes` of `job` be evicted at `ts`? Trips the breaker if not."""
        if self.tripped:
            return Verdict(False, f"circuit breaker tripped: {self.trip_reason} (reset it to resume)")
        self._expire(ts)
        fresh = set(nodes)
        job_nodes = {n for _, j, n in self._evictions if j == job} | fresh
        size = job_size if job_size > 0 else self.min_job_size
        if job and len(job_nodes) > self.max_fraction * size and len(job_nodes) > 1:
            known = "" if job_size > 0 else " (size unknown: assumed the smallest plausible job)"
            return self._trip(f"{len(job_nodes)}/{size} nodes of job {job}{known} within {self.window_s:g}s")
        fleet_nodes = {n for _, _, n in self._evictions} | fresh
        fleet_cap = self.max_fraction * self.fleet_size if self.fleet_size > 0 else self.fleet_max_evictions
        if len(fleet_nodes) > fleet_cap:
            return self._trip(f"{len(fleet_nodes)} fleet nodes (limit {fleet_cap:g}) within {self.window_s:g}s")
        return Verdict(True)

    def record(self, *, job: str, nodes: list[str], ts: float) -> None:
        """Remember evictions that went ahead."""
        self._evictions.extend((ts, job, n) for n in nodes)

    def reset(self) -> None:
        """Operator reset: close the breaker and forget the window."""
        self.tripped = False
        self.trip_reason = ""
        self._evictions.clear()

    def snapshot(self) -> dict[str, Any]:
        """Plain state for the journal, so a trip survives a restart."""
        return {"tripped": self.tripped, "reason": self.trip_reason, "evictions": list(self._evictions)}

    def restore(self, state: dict[str, Any]) -> None:
        """Inverse of `snapshot`."""
        self.tripped = bool(state.get("tripped", False))
        self.trip_reason = str(state.get("reason", ""))
        self._evictions = deque((float(t), str(j), str(n)) for t, j, n in state.get("evictions", []))

    def _trip(self, why: str) -> Verdict:
        self.tripped = True
        self.trip_reason = why
        return Verdict(False, f"circuit breaker tripped: {why}")

    def _expire(self, ts: float) -> None:
        while self._evictions and self._evictions[0][0] < ts - self.window_s:
            self._evictions.popleft()


class Cooldown:
    """At most one action per node per `cooldown_s` of event time.

    >>> c = Cooldown(cooldown_s=60)
    >>> c.check(["n0"], ts=0.0).allowed
    True
    >>> c.record(["n0"], ts=0.0)
    >>> c.check(["n0"], ts=30.0).allowed, c.check(["n0"], ts=61.0).allowed
    (False, True)
    """

    def __init__(self, *, cooldown_s: float) -> None:
        self.cooldown_s = cooldown_s
        self._last: dict[str, float] = {}

    def check(self, nodes: list[str], *, ts: float) -> Verdict:
        """Refuse if any node was acted on less than `cooldown_s` ago."""
        hot = [n for n in nodes if n in self._last and ts - self._last[n] < self.cooldown_s]
        if hot:
            return Verdict(False, f"node(s) {', '.join(sorted(hot))} in cooldown ({self.cooldown_s:g}s)")
        return Verdict(True)

    def record(self, nodes: list[str], *, ts: float) -> None:
        """Start the cooldown of `nodes` at `ts`."""
        for node in nodes:
            self._last[node] = max(ts, self._last.get(node, ts))

    def snapshot(self) -> dict[str, float]:
        """Plain state for the journal."""
        return dict(self._last)

    def restore(self, state: dict[str, float]) -> None:
        """Inverse of `snapshot`."""
        self._last = {str(k): float(v) for k, v in state.items()}


def needs_approval(kind: str, approval_kinds: list[str]) -> bool:
    """Approval mode: chosen kinds wait for an operator before executing."""
    return kind in approval_kinds or "*" in approval_kinds

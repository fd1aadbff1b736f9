"""Safety rails between a plan and the fleet: breaker, cooldown, approval.

A flapping switch makes every node behind it look broken at once. Evicting
them all would turn one fault into an outage, so evictions pass a circuit
breaker: if the nodes evicted within a sliding window of act's time would
exceed a fraction of the job (or the fleet), the breaker trips and *holds*
until an operator resets it. A per-node cooldown stops one node from being
acted on again and again. All time is act's own clock, passed in by the
caller (the runner's injected clock), never a record's timestamp: an incident
dated in the future must not expire the window, nor spread-out dates keep
evictions from ever meeting in it.
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

    A node is counted when its command is *about to be sent* (`reserve`: the
    check and the count are one step, so two plans can never both pass a check
    only one may pass), not once it succeeded: a stop that times out may still
    run when the network heals, so it stays counted for the window. Only a node
    that certainly did not act is given back (`release`). Time is act's own
    clock (`now`), never a record's timestamp: a record cannot open or close a window.

    >>> b = CircuitBreaker(max_fraction=0.25, window_s=60)
    >>> b.reserve(job="j", nodes=["n0"], job_size=8, now=0.0, tag="d1-0").allowed
    True
    >>> b.reserve(job="j", nodes=["n1", "n2"], job_size=8, now=1.0, tag="d2-0").allowed
    False
    >>> b.tripped, b.reserve(job="j", nodes=["n3"], job_size=8, now=500.0, tag="d3-0").allowed
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
        # (act time, job, node, tag): tag names the step whose command counted the node.
        self._evictions: deque[tuple[float, str, str, str]] = deque()

    @property
    def fleet_cap(self) -> float:
        """Most distinct nodes the fleet may lose within one window."""
        return self.max_fraction * self.fleet_size if self.fleet_size > 0 else self.fleet_max_evictions

    def check(self, *, job: str, nodes: list[str], job_size: int, now: float) -> Verdict:
        """May `nodes` of `job` be evicted at act time `now`? Trips the breaker if not (counts nothing)."""
        if self.tripped:
            return Verdict(False, f"circuit breaker tripped: {self.trip_reason} (reset it to resume)")
        self._expire(now)
        fresh = set(nodes)
        job_nodes = {n for _, j, n, _ in self._evictions if j == job} | fresh
        size = job_size if job_size > 0 else self.min_job_size
        if job and len(job_nodes) > self.max_fraction * size and len(job_nodes) > 1:
            known = "" if job_size > 0 else " (size unknown: assumed the smallest plausible job)"
            return self._trip(f"{len(job_nodes)}/{size} nodes of job {job}{known} within {self.window_s:g}s")
        fleet_nodes = {n for _, _, n, _ in self._evictions} | fresh
        if len(fleet_nodes) > self.fleet_cap:
            return self._trip(f"{len(fleet_nodes)} fleet nodes (limit {self.fleet_cap:g}) within {self.window_s:g}s")
        return Verdict(True)

    def reserve(self, *, job: str, nodes: list[str], job_size: int, now: float, tag: str) -> Verdict:
        """Check and, if allowed, count `nodes` at once under `tag` (the caller holds the rails' lock)."""
        verdict = self.check(job=job, nodes=nodes, job_size=job_size, now=now)
        if verdict.allowed:
            self._evictions.extend((now, job, n, tag) for n in nodes)
        return verdict

    def release(self, tag: str, nodes: list[str] | None = None) -> list[str]:
        """Give back what `tag` reserved (only `nodes`, if given): those nodes certainly did not act."""
        gone = [e for e in self._evictions if e[3] == tag and (nodes is None or e[2] in nodes)]
        if gone:
            self._evictions = deque(e for e in self._evictions if e not in gone)
        return [e[2] for e in gone]

    def counted(self, now: float) -> set[str]:
        """The distinct nodes counted in the window ending at act time `now`."""
        self._expire(now)
        return {n for _, _, n, _ in self._evictions}

    def reset(self) -> None:
        """Operator reset: close the breaker and forget the window."""
        self.tripped = False
        self.trip_reason = ""
        self._evictions.clear()

    def snapshot(self) -> dict[str, Any]:
        """Plain state for the journal, so a trip and every reservation survive a restart."""
        return {"tripped": self.tripped, "reason": self.trip_reason, "evictions": [list(e) for e in self._evictions]}

    def restore(self, state: dict[str, Any]) -> None:
        """Inverse of `snapshot` (entries journaled before tags existed get an empty tag)."""
        self.tripped = bool(state.get("tripped", False))
        self.trip_reason = str(state.get("reason", ""))
        self._evictions = deque((float(e[0]), str(e[1]), str(e[2]), str(e[3]) if len(e) > 3 else "")
                                for e in state.get("evictions", []))

    def _trip(self, why: str) -> Verdict:
        self.tripped = True
        self.trip_reason = why
        return Verdict(False, f"circuit breaker tripped: {why}")

    def _expire(self, now: float) -> None:
        while self._evictions and self._evictions[0][0] < now - self.window_s:
            self._evictions.popleft()


class Cooldown:
    """At most one action per node per `cooldown_s` of act's time.

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

    def release(self, nodes: list[str], *, ts: float) -> None:
        """Undo the cooldown `record(nodes, ts=ts)` started: those nodes certainly did not act."""
        for node in nodes:
            if self._last.get(node) == ts:
                del self._last[node]

    def snapshot(self) -> dict[str, float]:
        """Plain state for the journal."""
        return dict(self._last)

    def restore(self, state: dict[str, float]) -> None:
        """Inverse of `snapshot`."""
        self._last = {str(k): float(v) for k, v in state.items()}


def needs_approval(kind: str, approval_kinds: list[str]) -> bool:
    """Approval mode: chosen kinds wait for an operator before executing."""
    return kind in approval_kinds or "*" in approval_kinds

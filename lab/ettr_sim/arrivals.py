"""Incident arrivals for a big job, resampled from a real fault trace.

The InfiniteHBD trace covers 400 servers for 348 days; our job has, say,
1,200 nodes for 90 days. Rather than fit a Poisson rate (which would lose
the trace's burstiness and its repeat offenders), each simulated node
borrows the history of one trace server, chosen at random among all 400
(169 of which never failed), over a random window of the job's length.
The expected count therefore scales with nodes x days exactly as the real
per-node-day rate does, and clusters of faults on bad nodes survive.

Each arrival then gets a kind drawn from the incident mix (the trace tells
*when* nodes fail; ByteRobust's statistics tell *what* a training job sees).
"""

from __future__ import annotations

import bisect
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lab.ettr_sim.params import DAY_S, SimParams


@dataclass(frozen=True)
class Arrival:
    """One incident hitting the job."""

    at_s: float
    node: int
    kind: str
    trace_class: str  # the trace fault it was resampled from, for the record


@dataclass(frozen=True)
class TraceHistory:
    """Fault start days per trace server, plus the trace's span."""

    starts: dict[str, list[tuple[float, str]]]
    span_days: float
    servers: int

    @classmethod
    def from_events(cls, events: Sequence[dict[str, Any]], *, servers: int) -> TraceHistory:
        """Build from `fault_start` events (`lab.telemetry_sim.trace.load_trace`)."""
        starts: dict[str, list[tuple[float, str]]] = defaultdict(list)
        for e in events:
            starts[e["node_id"]].append((float(e["event_time"]), str(e["fault_type"].get("Class", ""))))
        for history in starts.values():
            history.sort()
        span = max((float(e["event_time"]) for e in events), default=0.0)
        if len(starts) > servers:
            raise ValueError(f"trace_servers: the trace names {len(starts)} servers, more than {servers}")
        return cls(starts=dict(starts), span_days=span, servers=servers)

    @property
    def faults_per_node_day(self) -> float:
        """The trace's mean fault rate."""
        total = sum(len(h) for h in self.starts.values())
        return total / (self.servers * self.span_days) if self.span_days > 0 else 0.0


def draw_arrivals(history: TraceHistory, params: SimParams, rng: random.Random) -> list[Arrival]:
    """Arrivals for the whole job, oldest first; deterministic given `rng`'s seed.

    `rate_scale` != 1 thins (or repeats) each borrowed history with that
    probability (or multiplicity), keeping the arrival times.
    """
    job = params.job
    if history.span_days <= 0:
        raise ValueError("the fault trace spans no time")
    window_days = min(job.days, history.span_days)
    servers = sorted(history.starts) + [""] * (history.servers - len(history.starts))  # "" = never failed
    kinds, weights = zip(*sorted(params.mix.items()), strict=True)
    out: list[Arrival] = []
    for node in range(job.nodes):
        server = rng.choice(servers)
        begin = rng.uniform(0.0, history.span_days - window_days)
        for day, trace_class in _window(history.starts.get(server, []), begin, begin + window_days):
            for _ in range(_copies(params.rate_scale, rng)):
                at_s = (day - begin) * DAY_S * (job.days / window_days)
                out.append(Arrival(at_s, node, rng.choices(kinds, weights)[0], trace_class))
    out.sort(key=lambda a: (a.at_s, a.node))
    return out


def _window(history: list[tuple[float, str]], begin: float, end: float) -> list[tuple[float, str]]:
    lo = bisect.bisect_left(history, (begin, ""))
    hi = bisect.bisect_left(history, (end, ""))
    return history[lo:hi]


def _copies(rate_scale: float, rng: random.Random) -> int:
    whole = int(rate_scale)
    return whole + (1 if rng.random() < rate_scale - whole else 0)

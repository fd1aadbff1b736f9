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
Kinds the job itself causes (code pushes, user errors, NaNs) do not grow with
the node count past the job size the mix was observed at (`job_borne_keep`).
"""

from __future__ import annotations

import bisect
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.lab.ettr_sim.params import DAY_S, SimParams


@dataclass(frozen=True)
class Arrival:
    """One incident hitting the job."""

    at_s: float
    node: int
    kind: str
    trace_class: str  # the trace fault it was resampled from, for the record
    ambiguous: bool = False  # its localisation names several suspects, no single machine


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
    keep_job_borne = job_borne_keep(params)
    out: list[Arrival] = []
    for node in range(job.nodes):
        server = rng.choice(servers)
        begin = rng.uniform(0.0, history.span_days - window_days)
        for day, trace_class in _window(history.starts.get(server, []), begin, begin + window_days):
            for _ in range(_copies(params.rate_scale, rng)):
                at_s = (day - begin) * DAY_S * (job.days / window_days)
                kind = rng.choices(kinds, weights)[0]
                if keep_job_borne < 1.0 and kind in params.job_borne and rng.random() >= keep_job_borne:
                    continue
                out.append(Arrival(at_s, node, kind, trace_class))
    out.sort(key=lambda a: (a.at_s, a.node))
    return out


def job_borne_keep(params: SimParams) -> float:
    """The share of job-borne arrivals kept: they follow the job, not its node count.

    A code push or a NaN does not happen ten times as often because the job
    has ten times the nodes, so past `reference_nodes` they are thinned back
    to the reference job's rate (below it they scale down with the job, as
    the mix was observed on a job of that size).

    >>> job_borne_keep(SimParams(reference_nodes=120))  # a 1,200-node job, ten times the reference
    0.1
    >>> job_borne_keep(SimParams(reference_nodes=2400)), job_borne_keep(SimParams(reference_nodes=0))
    (1.0, 1.0)
    """
    ref, nodes = params.reference_nodes, params.job.nodes
    return ref / nodes if 0 < ref < nodes else 1.0


def _window(history: list[tuple[float, str]], begin: float, end: float) -> list[tuple[float, str]]:
    lo = bisect.bisect_left(history, (begin, ""))
    hi = bisect.bisect_left(history, (end, ""))
    return history[lo:hi]


def _copies(rate_scale: float, rng: random.Random) -> int:
    whole = int(rate_scale)
    return whole + (1 if rng.random() < rate_scale - whole else 0)

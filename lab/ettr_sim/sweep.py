"""The standby pool against over-eviction: one simulation per (job size, pool, group size), over seeds.

A bigger over-eviction group localises faster (no stop-time diagnosis) but
takes healthy nodes out with every ambiguous incident, and each of them
needs a standby until it has passed its self-check. A pool too small for the
group turns evictions into whole-job requeues; a pool too big is idle GPUs.
ByteRobust names this trade-off as future work; `sweep` maps it out, with
ETTR, requeues for lack of a standby and nodes over-evicted per day, and
the goodput per provisioned GPU (ETTR x job nodes / (job + pool nodes)),
which charges the pool for the GPUs it keeps idle.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from trainguard.lab.ettr_sim.arrivals import TraceHistory
from trainguard.lab.ettr_sim.engine import Incidents, draw_incidents, simulate
from trainguard.lab.ettr_sim.params import ParamError, SimParams


@dataclass(frozen=True)
class SweepPoint:
    """One (job size, pool, group) cell: means over the seeds, with the ETTR's range."""

    nodes: int
    gpus: int
    pool: int
    group: int
    seeds: int
    ettr: float
    ettr_min: float
    ettr_max: float
    requeues: float
    over_evicted_per_day: float
    diagnoses: float
    incidents: float

    @property
    def pool_pct(self) -> float:
        """The pool as a percentage of the job's nodes."""
        return 100.0 * self.pool / self.nodes

    @property
    def goodput(self) -> float:
        """ETTR charged for the pool's idle GPUs: productive job time per provisioned GPU."""
        return self.ettr * self.nodes / (self.nodes + self.pool)


def pool_sizes(nodes: int, percents: Sequence[float]) -> list[int]:
    """Pool sizes for `nodes` at each percentage, rounded, without repeats.

    >>> pool_sizes(1200, [0, 0.25, 1, 2])
    [0, 3, 12, 24]
    """
    return sorted({round(nodes * p / 100.0) for p in percents})


def sweep(history: TraceHistory, base: SimParams, *, nodes: Sequence[int], pool_percents: Sequence[float],
          groups: Sequence[int], seeds: Sequence[int]) -> list[SweepPoint]:
    """Every combination, each the mean of one simulation per seed (the seeds pair the cells)."""
    if not (nodes and pool_percents and groups and seeds):
        raise ParamError("sweep: nodes, pool sizes, group sizes and seeds must each name at least one value")
    if min(pool_percents) < 0:
        raise ParamError(f"sweep: pool percentages must be >= 0 (got {min(pool_percents)})")
    points = []
    for n in nodes:
        sized = replace(base, job=replace(base.job, nodes=n)).validate()
        drawn = [draw_incidents(history, sized, seed=s) for s in seeds]  # the pool and group change no dice
        for pool in pool_sizes(n, pool_percents):
            for group in groups:
                costs = replace(sized.trainguard, standby_pool=pool, over_evict_nodes=group)
                points.append(_point(history, replace(sized, trainguard=costs).validate(), seeds, drawn))
    return points


def _point(history: TraceHistory, params: SimParams, seeds: Sequence[int], drawn: Sequence[Incidents]) -> SweepPoint:
    runs = [simulate(history, params, seed=s, incidents=d) for s, d in zip(seeds, drawn, strict=True)]
    ettrs = [r.trainguard.ettr for r in runs]
    return SweepPoint(
        nodes=params.job.nodes, gpus=params.job.gpus, pool=params.trainguard.standby_pool,
        group=params.trainguard.over_evict_nodes, seeds=len(runs), ettr=statistics.fmean(ettrs),
        ettr_min=min(ettrs), ettr_max=max(ettrs),
        requeues=statistics.fmean(r.trainguard.requeues for r in runs),
        over_evicted_per_day=statistics.fmean(r.trainguard.over_evicted_per_day for r in runs),
        diagnoses=statistics.fmean(r.trainguard.diagnoses for r in runs),
        incidents=statistics.fmean(len(r.arrivals) for r in runs))


def best(points: Sequence[SweepPoint], nodes: int) -> SweepPoint:
    """The cell of `nodes` with the highest goodput per provisioned GPU."""
    return max((p for p in points if p.nodes == nodes), key=lambda p: p.goodput)

"""Play a job's incidents through both recovery policies and account for ETTR.

ETTR (effective training time ratio) = productive time / wall-clock time.
Both policies see the *same* incidents and the *same* progress-since-
checkpoint draws (a paired comparison), so the difference between them is
the policy, not the dice. Incidents are handled one at a time: one that
arrives while the job is still recovering surfaces when it comes back (a
broken node is still broken at restart). Losses that would run past the end
of the run are clipped to it.

trainguard's evictions draw on a pool of warm standbys (`Spares`): a standby
that replaced a faulty node is itself replaced after `standby_replenish_s`;
one that replaced an over-evicted healthy node comes back sooner, when that
node has passed its self-check (`healthy_return_s`). An eviction that needs
more standbys than are free requeues the whole job.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from trainguard.lab.ettr_sim.arrivals import Arrival, TraceHistory, draw_arrivals
from trainguard.lab.ettr_sim.costs import Eviction, Loss, baseline_loss, plan_eviction, trainguard_loss
from trainguard.lab.ettr_sim.params import DAY_S, SimParams

# (arrival, progress since checkpoint, enough standbys free?, stop-time diagnosis?) -> loss
LossFn = Callable[[Arrival, float, bool, bool], Loss]


@dataclass
class PolicyResult:
    """One policy's outcome over the run."""

    name: str
    duration_s: float
    loss: Loss = field(default_factory=Loss)
    by_kind: dict[str, Loss] = field(default_factory=dict)
    incidents: int = 0
    requeues: int = 0  # evictions that found too few free standbys (trainguard only)
    evicted_nodes: int = 0  # nodes trainguard took out of the job, culprits and healthy ones
    over_evicted_nodes: int = 0  # of those, healthy nodes evicted with a suspect group
    diagnoses: int = 0  # stop-time self-checks run instead of over-evicting
    overhead_s: float = 0.0  # productive time lost to checkpointing itself (every-step checkpoints)

    @property
    def ettr(self) -> float:
        return 1.0 - (self.loss.total_s + self.overhead_s) / self.duration_s

    @property
    def over_evicted_per_day(self) -> float:
        return self.over_evicted_nodes / (self.duration_s / DAY_S)


@dataclass(frozen=True)
class SimResult:
    """The whole comparison, plus what went in."""

    params: SimParams
    seed: int
    arrivals: list[Arrival]
    trainguard: PolicyResult
    baseline: PolicyResult
    trace_rate: float  # faults per node-day in the trace


class Spares:
    """The warm standby pool: how many are ready, and when each one in use is ready again."""

    def __init__(self, size: int, *, replenish_s: float, healthy_return_s: float) -> None:
        self._ready = size
        self._back_at: list[float] = []  # a heap
        self.replenish_s = replenish_s
        self.healthy_return_s = healthy_return_s

    def free(self, now: float) -> int:
        """Standbys ready at `now`."""
        while self._back_at and self._back_at[0] <= now:
            heapq.heappop(self._back_at)
            self._ready += 1
        return self._ready

    def take(self, eviction: Eviction, now: float) -> None:
        """Swap standbys in for the evicted nodes (the caller checked there are enough)."""
        self._ready -= eviction.nodes
        for _ in range(eviction.culprits):
            heapq.heappush(self._back_at, now + self.replenish_s)
        for _ in range(eviction.healthy):
            heapq.heappush(self._back_at, now + self.healthy_return_s)


@dataclass(frozen=True)
class Incidents:
    """A run's dice: the arrivals (with their ambiguity) and where each falls in its checkpoint interval."""

    arrivals: list[Arrival]
    phase: list[float]  # in [0, 1): progress since the last checkpoint, as a fraction of the interval
    trace_rate: float


def draw_incidents(history: TraceHistory, params: SimParams, *, seed: int = 0) -> Incidents:
    """Everything random about a run; it depends on the job, the mix and the ambiguity, not on the pool."""
    params.validate()
    rng = random.Random(seed)
    arrivals = draw_arrivals(history, params, rng)
    phase = [rng.random() for _ in arrivals]
    shares = params.trainguard.ambiguous_share
    arrivals = [replace(a, ambiguous=rng.random() < shares.get(a.kind, 0.0)) for a in arrivals]
    return Incidents(arrivals, phase, history.faults_per_node_day)


def simulate(history: TraceHistory, params: SimParams, *, seed: int = 0,
             incidents: Incidents | None = None) -> SimResult:
    """Draw the incidents from the trace (or take `incidents` drawn for the same job) and run both policies."""
    params.validate()
    drawn = incidents or draw_incidents(history, params, seed=seed)
    arrivals = drawn.arrivals
    since_ckpt = [f * params.job.checkpoint_interval_s for f in drawn.phase]
    ours_interval = params.trainguard.checkpoint_interval_s or params.job.checkpoint_interval_s
    ours_since = [f * ours_interval for f in drawn.phase]
    job = params.job

    def ours(a: Arrival, since: float, standby: bool, diagnose: bool) -> Loss:
        return trainguard_loss(a.kind, job, params.trainguard, since_ckpt_s=since, standby=standby,
                               diagnose=diagnose)

    def theirs(a: Arrival, since: float, standby: bool, diagnose: bool) -> Loss:
        return baseline_loss(a.kind, job, params.baseline, since_ckpt_s=since)

    tg = run_policy("trainguard", arrivals, ours_since, ours, params, pool=params.trainguard.standby_pool)
    r = params.trainguard.checkpoint_overhead  # steps run 1+r times longer while the job trains
    tg.overhead_s = max(0.0, tg.duration_s - tg.loss.total_s) * r / (1.0 + r)
    base = run_policy("baseline", arrivals, since_ckpt, theirs, params, pool=None)
    return SimResult(params, seed, arrivals, tg, base, drawn.trace_rate)


def run_policy(name: str, arrivals: Sequence[Arrival], since_ckpt: Sequence[float], loss_of: LossFn,
               params: SimParams, *, pool: int | None) -> PolicyResult:
    """Account one policy's losses over the incidents, in time order.

    `pool` is the number of warm standbys; None: the policy keeps none and
    evicts nothing by itself (the baseline: people cordon, the scheduler requeues).
    """
    duration = params.job.duration_s
    c = params.trainguard
    result = PolicyResult(name=name, duration_s=duration)
    spares = None if pool is None else Spares(pool, replenish_s=c.standby_replenish_s,
                                              healthy_return_s=c.healthy_return_s)
    busy_until = 0.0
    for arrival, since in zip(arrivals, since_ckpt, strict=True):
        start = max(arrival.at_s, busy_until)
        if start >= duration:
            break
        if spares is None:
            loss = loss_of(arrival, since, False, False)
        else:
            free = spares.free(start)
            eviction = plan_eviction(arrival.kind, c, ambiguous=arrival.ambiguous, free=free)
            covered = free >= eviction.nodes
            loss = loss_of(arrival, since, covered, eviction.diagnose)
            _count(result, eviction, covered)
            if eviction.nodes and covered:
                spares.take(eviction, start)
        if start + loss.total_s > duration:
            loss = loss.scaled((duration - start) / loss.total_s)
        busy_until = start + loss.total_s
        result.loss = result.loss + loss
        result.by_kind[arrival.kind] = result.by_kind.get(arrival.kind, Loss()) + loss
        result.incidents += 1
    return result


def _count(result: PolicyResult, eviction: Eviction, covered: bool) -> None:
    result.evicted_nodes += eviction.nodes
    result.over_evicted_nodes += eviction.healthy
    result.diagnoses += int(eviction.diagnose)
    if eviction.nodes and not covered:
        result.requeues += 1

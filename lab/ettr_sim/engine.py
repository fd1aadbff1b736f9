"""Play a job's incidents through both recovery policies and account for ETTR.

ETTR (effective training time ratio) = productive time / wall-clock time.
Both policies see the *same* incidents and the *same* progress-since-
checkpoint draws (a paired comparison), so the difference between them is
the policy, not the dice. Incidents are handled one at a time: one that
arrives while the job is still recovering surfaces when it comes back (a
broken node is still broken at restart). Losses that would run past the end
of the run are clipped to it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lab.ettr_sim.arrivals import Arrival, TraceHistory, draw_arrivals
from lab.ettr_sim.costs import EVICTING, Loss, baseline_loss, trainguard_loss
from lab.ettr_sim.params import SimParams

# (arrival, progress since checkpoint, standby free?) -> loss
LossFn = Callable[[Arrival, float, bool], Loss]


@dataclass
class PolicyResult:
    """One policy's outcome over the run."""

    name: str
    duration_s: float
    loss: Loss = field(default_factory=Loss)
    by_kind: dict[str, Loss] = field(default_factory=dict)
    incidents: int = 0
    requeues: int = 0  # trainguard only: evictions that found the standby pool empty
    overhead_s: float = 0.0  # productive time lost to checkpointing itself (every-step checkpoints)

    @property
    def ettr(self) -> float:
        return 1.0 - (self.loss.total_s + self.overhead_s) / self.duration_s


@dataclass(frozen=True)
class SimResult:
    """The whole comparison, plus what went in."""

    params: SimParams
    seed: int
    arrivals: list[Arrival]
    trainguard: PolicyResult
    baseline: PolicyResult
    trace_rate: float  # faults per node-day in the trace


def simulate(history: TraceHistory, params: SimParams, *, seed: int = 0) -> SimResult:
    """Draw the incidents from the trace and run both policies over them."""
    params.validate()
    rng = random.Random(seed)
    arrivals = draw_arrivals(history, params, rng)
    phase = [rng.random() for _ in arrivals]  # where in its checkpoint interval each incident falls
    since_ckpt = [f * params.job.checkpoint_interval_s for f in phase]
    ours_interval = params.trainguard.checkpoint_interval_s or params.job.checkpoint_interval_s
    ours_since = [f * ours_interval for f in phase]
    job = params.job

    def ours(a: Arrival, since: float, standby: bool) -> Loss:
        return trainguard_loss(a.kind, job, params.trainguard, since_ckpt_s=since, standby=standby)

    def theirs(a: Arrival, since: float, standby: bool) -> Loss:
        return baseline_loss(a.kind, job, params.baseline, since_ckpt_s=since)

    tg = run_policy("trainguard", arrivals, ours_since, ours, params,
                    pool=params.trainguard.standby_pool, replenish_s=params.trainguard.standby_replenish_s)
    r = params.trainguard.checkpoint_overhead  # steps run 1+r times longer while the job trains
    tg.overhead_s = max(0.0, tg.duration_s - tg.loss.total_s) * r / (1.0 + r)
    base = run_policy("baseline", arrivals, since_ckpt, theirs, params, pool=0, replenish_s=0.0)
    return SimResult(params, seed, arrivals, tg, base, history.faults_per_node_day)


def run_policy(name: str, arrivals: Sequence[Arrival], since_ckpt: Sequence[float], loss_of: LossFn,
               params: SimParams, *, pool: int, replenish_s: float) -> PolicyResult:
    """Account one policy's losses over the incidents, in time order."""
    duration = params.job.duration_s
    result = PolicyResult(name=name, duration_s=duration)
    standby_ready = [0.0] * pool  # when each standby slot is usable again
    busy_until = 0.0
    for arrival, since in zip(arrivals, since_ckpt, strict=True):
        start = max(arrival.at_s, busy_until)
        if start >= duration:
            break
        evicts = arrival.kind in EVICTING
        slot = _free_slot(standby_ready, start) if evicts else None
        loss = loss_of(arrival, since, slot is not None)
        if evicts and pool and slot is None:
            result.requeues += 1
        if slot is not None:
            standby_ready[slot] = start + replenish_s
        if start + loss.total_s > duration:
            loss = loss.scaled((duration - start) / loss.total_s)
        busy_until = start + loss.total_s
        result.loss = result.loss + loss
        result.by_kind[arrival.kind] = result.by_kind.get(arrival.kind, Loss()) + loss
        result.incidents += 1
    return result


def _free_slot(ready: list[float], now: float) -> int | None:
    for i, at in enumerate(ready):
        if at <= now:
            return i
    return None

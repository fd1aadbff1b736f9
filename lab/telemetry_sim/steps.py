"""The training-step model: per-rank step records with believable numbers.

A synchronous data-parallel step lasts as long as its slowest rank's
compute plus the exposed communication, so one throttled node slows
everyone's `step_time_s` while only its own ranks' `compute_time_s` grows:
that contrast is what localises a straggler. Loss decays as a power law
with noise; checksums agree across DP replicas of a (tp, pp) shard unless
SDC corrupts one.
"""

from __future__ import annotations

import hashlib
import math
import random

from trainguard.lab.telemetry_sim.plan import Fault, Layout
from trainguard.lab.telemetry_sim.scenario import Scenario
from trainguard.schemas.records import TrainingStep

DAY_S = 86_400.0


def checksum(job: str, attempt: int, step: int, tp: int, pp: int, salt: str = "") -> str:
    """The digest every DP replica of a (tp, pp) shard agrees on, unless corrupted.

    >>> checksum("j", 0, 5, 1, 0) == checksum("j", 0, 5, 1, 0) != checksum("j", 0, 5, 1, 0, "sdc")
    True
    """
    raw = f"{job}|{attempt}|{step}|{tp}|{pp}|{salt}".encode()
    return hashlib.blake2b(raw, digest_size=8).hexdigest()


class StepModel:
    """Draws step durations and builds the per-rank `TrainingStep` records."""

    def __init__(self, scenario: Scenario, lay: Layout, node_names: list[str], plan: list[Fault],
                 rng: random.Random) -> None:
        self.job, self.lay, self.node_names, self.rng = scenario.job, lay, node_names, rng
        self.faults = [f for f in plan if f.kind in ("slowdown", "nan", "loss_spike", "sdc")
                       or (f.kind == "network" and f.variant in ("degraded", "fail_slow"))]
        stalls = scenario.background.dataloader_stalls_per_h
        self._stall_p = stalls * self.job.step_time_s / 3600.0
        self.step = 0
        self.last_checkpoint = 0
        self._compute: list[float] = []
        self._step_time = 0.0
        self._spiked: dict[str, int] = {}  # loss-spike fault id -> spiked steps so far
        self._nan_step: dict[str, int] = {}  # NaN fault id -> the step it first showed at
        self._coords = [lay.coords(r) for r in range(lay.world)]
        self._nodes = [node_names[lay.node_of(r)] for r in range(lay.world)]
        self._tokens = max(1, self.job.tokens_per_step // lay.world)

    def duration(self, t: float) -> float:
        """Draw the next step, starting at `t`; return its duration."""
        job, rng = self.job, self.rng
        drift = 1.0 + job.drift * math.sin(2 * math.pi * (t % DAY_S) / DAY_S)
        common = rng.lognormvariate(0.0, job.step_noise) * drift
        base = job.step_time_s * (1.0 - job.comm_fraction) * common
        # Slow the straggler's compute so that the *job's* throughput drops by `magnitude`:
        # step / (1 - m) = compute * factor + comm  =>  factor = (1 / (1 - m) - c) / (1 - c).
        c = job.comm_fraction
        slow = {f.node: (1.0 / (1.0 - f.magnitude) - c) / (1.0 - c)
                for f in self.faults if f.kind == "slowdown" and f.variant != "gradual" and f.active(t)}
        for f in self.faults:  # a whole-job decline, linear over the fault's window
            if f.variant == "gradual" and f.active(t):
                base /= 1.0 - f.magnitude * (t - f.start) / (f.end - f.start)
        gpn = self.lay.gpus_per_node
        self._compute = [base * rng.lognormvariate(0.0, 0.01) * slow.get(r // gpn, 1.0)
                         for r in range(self.lay.world)]
        comm = job.step_time_s * job.comm_fraction * rng.lognormvariate(0.0, 0.05)
        for f in self.faults:  # one slow rail of several: rings through it wait for it
            if f.kind == "network" and f.active(t):
                comm /= 0.75 + 0.25 * f.magnitude
        self._step_time = max(self._compute) + comm
        if self._stall_p and rng.random() < self._stall_p:
            self._step_time += rng.uniform(5.0, 15.0)  # the data loader fell behind for one step
        return self._step_time

    def records(self, t_end: float, attempt: int, code_version: str) -> list[TrainingStep]:
        """The step just drawn, finished at `t_end`, as one record per rank."""
        self.step += 1
        job, rng, step = self.job, self.rng, self.step
        active = [f for f in self.faults if f.start <= t_end < f.end]
        nan = next((f for f in active if f.kind == "nan"), None)
        spike = next((f for f in active if f.kind == "loss_spike" and self._spiked.get(f.id, 0) < f.extra["steps"]),
                     None)
        if spike is not None:
            self._spiked[spike.id] = self._spiked.get(spike.id, 0) + 1
        sdc = next((f for f in active if f.kind == "sdc"), None)
        loss = (1.75 + 7.5 * (1.0 + step / 400.0) ** -0.5) * (1.0 + rng.gauss(0.0, 0.01))
        grad = (0.25 + 2.0 * (1.0 + step / 150.0) ** -0.7) * rng.lognormvariate(0.0, 0.08)
        if step < job.warmup_steps:  # LR warm-up: the loss barely moves, noisily, and gradients are large
            loss = 10.5 - 1.0 * step / job.warmup_steps + rng.gauss(0.0, 0.15)
            grad *= rng.lognormvariate(0.8, 0.4)
        if spike is not None and spike.variant == "grad":  # an exploding gradient the loss barely shows
            loss *= 1.0 + 0.05 * spike.magnitude / 10.0
            grad *= spike.magnitude * rng.uniform(2.0, 4.0)
        elif spike is not None:
            loss *= spike.magnitude
            grad *= spike.magnitude * rng.uniform(1.5, 3.0)
        mfu = job.mfu * job.step_time_s / self._step_time
        sums = {(tp, pp): checksum(job.name, attempt, step, tp, pp)
                for tp in range(self.lay.tp) for pp in range(self.lay.pp)}
        out = []
        for r in range(self.lay.world):
            tp, pp, dp = self._coords[r]
            first = nan is not None and r == nan.rank
            ts = t_end + (0.0 if first else rng.uniform(0.001, 0.08))
            r_loss: float = loss * (1.0 + rng.gauss(0.0, 0.002))
            r_grad: float = grad
            if nan is not None:
                r_loss, r_grad = self._nan(nan, r, r_loss, r_grad, step)
            check = sums[(tp, pp)]
            if sdc is not None and r == sdc.rank and (sdc.variant != "intermittent" or step % 3 == 0):
                check = checksum(job.name, attempt, step, tp, pp, "sdc")
            out.append(TrainingStep(
                ts=ts, job=job.name, rank=r, node=self._nodes[r], step=step, loss=r_loss,
                grad_norm=r_grad, tokens=self._tokens, step_time_s=round(self._step_time, 4),
                compute_time_s=round(self._compute[r], 4), mfu=round(mfu, 4), dp=dp, tp=tp, pp=pp,
                checksum=check, code_version=code_version, attempt=attempt,
            ))
        return out

    def _nan(self, nan: Fault, rank: int, loss: float, grad: float, step: int) -> tuple[float, float]:
        """How a NaN spreads. At its first step only the origin's own values are bad: a NaN loss (its
        gradients, all-reduced, make every peer's grad norm NaN), or an overflowing local grad norm
        (the hook measures it before the all-reduce). From the next step the weights are NaN everywhere."""
        first = self._nan_step.setdefault(nan.id, step)
        if step > first:
            return math.nan, math.nan
        if nan.variant == "loss":
            return (math.nan, math.nan) if rank == nan.rank else (loss, math.nan)
        if nan.variant == "inf_loss":  # an fp16 overflow in the forward pass
            return (math.inf, math.nan) if rank == nan.rank else (loss, math.nan)
        return (loss, math.inf) if rank == nan.rank else (loss, grad)

    def checkpointed(self) -> None:
        """A checkpoint of the current step was saved."""
        self.last_checkpoint = self.step

    def resume_from_checkpoint(self) -> None:
        """After a restart the job redoes the steps since its last checkpoint."""
        self.step = self.last_checkpoint

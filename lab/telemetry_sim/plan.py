"""The fault plan: every fault of a scenario resolved to a time, a place and a shape.

The simulator never decides anything about faults while it runs; it asks
the plan "what is active at time t". Resolving everything up front makes
the labels file exactly what was injected, and keeps faults from
overlapping (overlaps would make the ground truth ambiguous).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from trainguard.lab.telemetry_sim.scenario import DRAWN, FaultSpec, JobSpec, Scenario

# Default fault lengths in seconds (how long until the job is recovered).
DEFAULT_DURATION_S: dict[str, float] = {
    "hw_fault": 300.0,
    "network": 300.0,
    "hang": 300.0,
    "slowdown": 600.0,
    "nan": 120.0,
    "sdc": 300.0,
    "user_error": 180.0,
}
# Codes NVIDIA's XID catalog resolves with a GPU reset, node reboot or a service call (drawn when a
# fault names no code), and further catalog codes a scenario may name (74 NVLink, 46, 120 GSP, 140 ECC).
EVICTING_XIDS: tuple[int, ...] = (48, 79, 94, 95, 63, 64, 92, 119)
MORE_CATALOG_XIDS: tuple[int, ...] = (74, 46, 120, 140)
# Codes whose catalog action is "restart the application": never a reason to evict.
BENIGN_XIDS: tuple[int, ...] = (13, 31, 43)
# Faults after which the job is torn down and restarted from its last checkpoint.
RESTARTING = {("hw_fault", "xid"), ("hw_fault", "dbe"), ("hw_fault", "lost"), ("hw_fault", "remap_failed"),
              ("hw_fault", "nvml_timeout"), ("network", "port_down"),
              ("hang", "dataloader"), ("hang", "collective"), ("hang", "cuda_sync"), ("nan", "loss"),
              ("nan", "grad"), ("nan", "inf_loss"), ("sdc", "checksum"), ("sdc", "intermittent"),
              ("sdc", "last_stage"), ("user_error", "import_error"),
              ("user_error", "shape_mismatch"), ("user_error", "syntax_error"), ("user_error", "oom"),
              ("user_error", "app_xid"), ("user_error", "silent_startup"), ("user_error", "sigkill")}
SETTLE_S = 120.0  # quiet time required after one fault ends before the next may start
HANG_IN_PAUSE_S = 600.0  # issue 22's target for a hang inside a checkpoint or eval pause
# A fail-slow shorter than this recovers on its own: the detectors' default `persist_s` (issue 22). Its label says
# `transient: true`: the right outcome is a counted transient anomaly, and any incident on it is an over-eviction.
TRANSIENT_S = 120.0
RECUR_N, RECUR_WINDOW_S = 3, 3600.0  # ... and the detectors' recurrence rule: the 3rd blip of a node in an hour
FAIL_SLOW = {("network", "error_burst"), ("network", "degraded"), ("network", "fail_slow"), ("slowdown", "thermal"),
             ("slowdown", "power"), ("slowdown", "silent")}


@dataclass(frozen=True)
class Layout:
    """Where each rank runs and its (tp, pp, dp) coordinates, Megatron order.

    >>> lay = Layout.of(JobSpec(nodes=2, gpus_per_node=4, tp=2, pp=2))
    >>> lay.world, lay.dp, lay.coords(5), lay.node_of(5)
    (8, 2, (1, 1, 0), 1)
    """

    nodes: int
    gpus_per_node: int
    tp: int
    pp: int
    dp: int

    @classmethod
    def of(cls, job: JobSpec) -> Layout:
        world = job.nodes * job.gpus_per_node
        return cls(job.nodes, job.gpus_per_node, job.tp, job.pp, world // (job.tp * job.pp))

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(tp, pp, dp) of a rank: tp varies fastest, then dp, then pp."""
        return rank % self.tp, rank // (self.tp * self.dp), (rank // self.tp) % self.dp

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def ranks_on(self, node: int) -> list[int]:
        return list(range(node * self.gpus_per_node, (node + 1) * self.gpus_per_node))


@dataclass
class Fault:
    """One resolved fault. `node`/`rank`/`gpu` are indices; -1 means job-wide."""

    id: str
    kind: str
    variant: str
    start: float
    end: float
    node: int = -1
    rank: int = -1
    gpu: int = -1
    code: int = 0
    magnitude: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def restarts(self) -> bool:
        return (self.kind, self.variant) in RESTARTING

    def active(self, ts: float) -> bool:
        return self.start <= ts < self.end


def resolve(spec: FaultSpec, index: int, scenario: Scenario, rng: random.Random) -> Fault:
    """Fill in a fault's unset place and shape from the seeded generator."""
    job, lay = scenario.job, Layout.of(scenario.job)
    variant = spec.variant or rng.choice(DRAWN[spec.kind])
    start = scenario.start_ts + spec.at_s
    spike_steps = 0
    if spec.kind == "loss_spike":
        # A spike lasts a few *steps*; the window leaves room for a pause in between.
        spike_steps = max(1, round((spec.duration_s or 0) / job.step_time_s)) if spec.duration_s else rng.randint(1, 3)
        if variant == "single":
            spike_steps = 1
        default = (spike_steps + 1) * job.step_time_s * 1.5 + max(job.checkpoint_pause_s, job.eval_pause_s)
    else:
        default = DEFAULT_DURATION_S[spec.kind]
    if spec.kind == "network" and variant == "error_burst":
        default = 90.0
    if spec.kind == "network" and variant == "fail_slow":
        default = 60.0
    if spec.kind == "slowdown" and variant == "gradual":
        default = 3600.0  # a decline over an hour, as thermal or fabric degradation looks
    duration = default if spec.kind == "loss_spike" else spec.duration_s or default
    if spec.kind == "user_error":  # the redeploy, its init and the failure must fit inside the fault
        duration = max(duration, job.restart_delay_s + 20.0)
    if spec.kind == "network" and variant == "error_burst":
        duration = max(duration, 3 * scenario.rates.rdma_sample_s)  # must span several samples
    rank = spec.rank if spec.rank is not None else rng.randrange(lay.world)
    node = spec.node if spec.node is not None else lay.node_of(rank)
    if spec.rank is None and spec.node is not None:
        rank = rng.choice(lay.ranks_on(node))
    if spec.kind == "sdc" and variant == "last_stage" and spec.rank is None and lay.pp > 1:
        rank = rng.choice([r for r in range(lay.world) if lay.coords(r)[1] == lay.pp - 1])
        node = lay.node_of(rank)
    gpu = spec.gpu if spec.gpu is not None else rank % lay.gpus_per_node
    if spec.kind == "hw_fault":
        rank = node * lay.gpus_per_node + gpu  # the rank driving the faulty GPU
    drawn_codes = BENIGN_XIDS if (spec.kind, variant) == ("user_error", "app_xid") else EVICTING_XIDS
    code = spec.code if spec.code is not None else rng.choice(drawn_codes)
    if spec.kind == "slowdown" and variant == "gradual":
        magnitude = spec.magnitude or rng.uniform(0.15, 0.25)
    elif spec.kind == "slowdown":
        magnitude = spec.magnitude or rng.uniform(0.12, 0.4)
    elif spec.kind == "network" and variant == "degraded":
        magnitude = spec.magnitude or rng.uniform(0.1, 0.4)  # the port's share of its siblings' bandwidth
    elif spec.kind == "network" and variant == "fail_slow":
        magnitude = spec.magnitude or 1 / 3  # a third of its siblings' bandwidth, with a burst of symbol errors
    elif spec.kind == "loss_spike":
        magnitude = spec.magnitude or rng.uniform(6.0, 30.0)
    else:
        magnitude = spec.magnitude or 0.0
    if (spec.kind, variant) == ("user_error", "sigkill") and spec.node is not None:
        rank, gpu = -1, -1  # the processes of the node the scenario names die; no node named: every node's
    elif spec.kind in ("loss_spike", "user_error") or (spec.kind == "slowdown" and variant == "gradual"):
        node, rank, gpu = -1, -1, -1  # job-wide: nothing to localise
    fault_id = f"{scenario.name}-{index:03d}-{spec.kind}"
    return Fault(fault_id, spec.kind, variant, start, start + duration, node, rank, gpu, code, magnitude,
                 extra={"steps": spike_steps} if spike_steps else {})


def build_plan(scenario: Scenario, extra: list[FaultSpec] | None = None, seed_offset: int = 0) -> list[Fault]:
    """Resolve the scenario's faults (plus `extra`, e.g. from the trace).

    Explicit faults that overlap raise `ValueError` naming them; extra
    (trace-drawn) faults that would overlap are dropped, as a fleet under
    recovery would not see a second fault distinguishable from the first.
    """
    rng = random.Random(scenario.seed * 7919 + 17 + seed_offset)
    specs = [(s, True) for s in scenario.faults] + [(s, False) for s in (extra or [])]
    specs.sort(key=lambda p: p[0].at_s)
    plan: list[Fault] = []
    end_limit = scenario.start_ts + (scenario.job.end_s or scenario.duration_s)
    for spec, explicit in specs:
        if spec.kind == "sdc" and Layout.of(scenario.job).dp < 2:
            continue  # without DP replicas there is nothing to diverge from (explicit ones are refused earlier)
        fault = resolve(spec, len(plan), scenario, rng)
        clash = plan and fault.start < plan[-1].end + SETTLE_S + scenario.job.restart_delay_s
        if clash or fault.end > end_limit:
            if explicit:
                why = "overlaps the previous fault" if clash else "ends after the scenario"
                raise ValueError(f"faults: {spec.kind} at_s={spec.at_s} {why}")
            continue
        plan.append(fault)
    return plan


def latency_budget(kind: str, scenario: Scenario, start: float, fault: Fault | None = None) -> float | None:
    """The detection-latency target for a fault (issue 3, item 9), if it has one.

    One sample or step for hw_fault, nan and sdc (plus a second of slack for
    delivery), max(60 s, 6 median steps) for a hang, two minutes for a
    slowdown. A step-based fault that starts inside a checkpoint or eval
    pause cannot show before the pause ends, so the pause is added.
    """
    job, rates = scenario.job, scenario.rates
    budgets = {"hw_fault": rates.gpu_sample_s + 1.0, "nan": job.step_time_s * 1.5 + 1.0,
               "sdc": job.step_time_s * 1.5 + 1.0, "hang": max(60.0, 6 * job.step_time_s),
               "slowdown": TRANSIENT_S + 60.0}  # persistence first (issue 22): a persistent fail-slow within 3 min
    budget = budgets.get(kind)
    if fault is not None and fault.variant == "gradual" and fault.magnitude:
        # A linear decline reaches 10 % after this share of its ramp; then 15 minutes to notice.
        return (fault.end - fault.start) * min(1.0, 0.1 / fault.magnitude) + 900.0
    if budget is None or kind == "hw_fault":
        return budget
    if fault is not None and fault.variant == "intermittent":
        budget += 2 * job.step_time_s  # the corruption first shows on one step in three
    offset = start - scenario.start_ts
    for every, pause in ((job.checkpoint_every_s, job.checkpoint_pause_s), (job.eval_every_s, job.eval_pause_s)):
        if not every:
            continue
        since = offset % every
        if job.checkpoint_every_s and job.eval_every_s:  # a checkpoint and an eval on one grid point: one long pause
            point = offset - since
            if point % job.checkpoint_every_s < 1e-6 and point % job.eval_every_s < 1e-6:
                pause = job.checkpoint_pause_s + job.eval_pause_s
        if since < pause + job.step_time_s * 1.5:
            if kind == "hang":  # inside a checkpoint or eval: judged against the pauses, found within 10 min
                return max(budget, HANG_IN_PAUSE_S)
            budget += pause + job.step_time_s * 1.5
            break
    return budget


def labels(plan: list[Fault], scenario: Scenario, node_names: list[str]) -> list[dict[str, Any]]:
    """The ground truth, in the labels file format (plus a few documented extras)."""
    job, lay = scenario.job.name, Layout.of(scenario.job)
    out = []
    blips: dict[tuple[str, int], list[float]] = {}  # (kind, node): each detector counts its own
    for f in plan:
        transient = _transient(f)
        if transient:  # the node's earlier blips within the hour: the N-th recurs, and is a fault to report
            seen = [t for t in blips.get((f.kind, f.node), []) if f.start - t <= RECUR_WINDOW_S]
            blips[(f.kind, f.node)] = [*seen, f.start]
            transient = len(seen) < RECUR_N - 1
        nodes = [] if f.node < 0 else [node_names[f.node]]
        if f.kind == "slowdown":
            ranks = lay.ranks_on(f.node) if f.node >= 0 else []
        elif f.kind in ("network", "hw_fault"):
            ranks = []  # a NIC or GPU is evicted with its node; `gpu` names the device
        else:
            ranks = [] if f.rank < 0 else [f.rank]
        out.append({"id": f.id, "kind": f.kind, "start": f.start, "end": f.end, "job": job,
                    "nodes": nodes, "ranks": ranks, "variant": f.variant,
                    **({"gpu": f.gpu} if f.kind == "hw_fault" else {}),
                    **({"magnitude": round(f.magnitude, 4)} if f.magnitude else {}),
                    **({"transient": True} if transient else {}),
                    "latency_budget_s": latency_budget(f.kind, scenario, f.start, f)})
    return out


def _transient(f: Fault) -> bool:
    """A fail-slow that recovers before the detectors' persistence bound: to be noted, never evicted on."""
    return (f.kind, f.variant) in FAIL_SLOW and f.end - f.start < TRANSIENT_S

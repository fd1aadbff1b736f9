"""Every number the ETTR simulation uses, as documented, overridable parameters.

Three groups: the job (size, length, checkpoint cadence), the incident mix
(what fraction of incidents is of which kind), and the two recovery
policies' costs: trainguard's (automatic detection, localisation, warm
standby, in-place restart) and a baseline's (fail-stop, NCCL timeout, manual
diagnosis, requeue from a remote checkpoint). docs/ettr-simulation.md gives
the source or reasoning of each default. All durations are seconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

DAY_S = 86_400.0

# Incident kinds of the simulation -> the detector kind whose latency applies.
# manual_restart is planned by people, so no detector is involved.
DETECTOR_KIND: dict[str, str | None] = {
    "cuda_error": "hw_fault",
    "manual_restart": None,
    "hang": "hang",
    "mfu_decline": "slowdown",
    "network": "network",
    "machine_fault": "hw_fault",
    "nan": "nan",
    "user_error": "user_error",
    "sdc": "sdc",
}

# ByteRobust (SOSP 2025) reports CUDA errors ~36%, manual restarts ~17% and
# hangs ~10% of incidents; the remaining 37% is split by our own assumption
# (documented as such in docs/ettr-simulation.md).
DEFAULT_MIX: dict[str, float] = {
    "cuda_error": 0.36,
    "manual_restart": 0.17,
    "hang": 0.10,
    "mfu_decline": 0.08,
    "network": 0.10,
    "machine_fault": 0.09,
    "nan": 0.05,
    "user_error": 0.03,
    "sdc": 0.02,
}


class ParamError(ValueError):
    """A simulation parameter is invalid; the message names it."""


@dataclass(frozen=True, kw_only=True)
class JobParams:
    """The simulated job and how it checkpoints."""

    nodes: int = 1200
    gpus_per_node: int = 8
    days: float = 90.0
    step_time_s: float = 10.0
    checkpoint_interval_s: float = 1800.0
    mfu_drop: float = 0.3  # throughput lost while an MFU decline goes unfixed

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def duration_s(self) -> float:
        return self.days * DAY_S


@dataclass(frozen=True, kw_only=True)
class TrainguardCosts:
    """trainguard's recovery path: detect online, localise, swap, restart in place."""

    detection_s: dict[str, float] = field(default_factory=lambda: {
        "hw_fault": 1.0,  # one 1 Hz GPU sample (detector target)
        "network": 10.0,  # a link error confirmed twice
        "hang": 60.0,  # max(60 s, 6 x median step) with 10 s steps
        "slowdown": 120.0,  # a >= 10% slowdown within 2 minutes
        "nan": 10.0,  # one step
        "sdc": 10.0,  # the first mismatched step
        "user_error": 1.0,  # the traceback's log line
    })
    pipeline_latency_s: float = 1.0  # event -> incident through Kafka (benchmark p99 target)
    localisation_s: dict[str, float] = field(default_factory=lambda: {
        "hang": 30.0,  # stack aggregation across ranks
        "slowdown": 50.0,  # 5 rounds of 10 s peer comparison
        "nan": 300.0,  # stop-time self-check of the suspect nodes
        "sdc": 600.0,  # replay on regrouped replicas
    })
    standby_swap_s: float = 120.0  # evict + attach a warm standby node
    restart_s: float = 300.0  # in-place restart: rendezvous, NCCL init, load a local checkpoint
    hot_update_s: float = 180.0  # in-place code rollback / update, no rescheduling
    requeue_s: float = 1800.0  # fall back to a full requeue when the standby pool is empty
    remote_load_s: float = 600.0
    # Fast recovery (trainguard.checkpoint); None/0 = not in use, the defaults above apply.
    checkpoint_interval_s: float | None = None  # every-step in-memory checkpoints: one step
    inprocess_restart_s: float | None = None  # NaN rollback inside the live processes
    checkpoint_overhead: float = 0.0  # step-time slowdown from checkpointing every step (0.01 = 1%)
    standby_pool: int = 12  # warm standby nodes (1% of 1,200)
    standby_replenish_s: float = 4 * 3600.0  # a standby that replaced a faulty node is replaced after this long
    # Over-eviction (actions/engine.py): when localisation names several suspects and no single machine,
    # trainguard evicts the smallest parallel group holding them all instead of diagnosing further.
    ambiguous_share: dict[str, float] = field(default_factory=lambda: {
        "hang": 0.5,  # stacks point at a pipeline stage or a pair of ranks, not one machine
        "mfu_decline": 0.5,  # a straggler's peers in the same collective look as slow as it does
        "network": 0.2,  # a link error names both of its ends
    })
    over_evict_nodes: int = 8  # nodes in that group (a pipeline-parallel group of 8 stages); 1 = never over-evict
    diagnosis_s: float = 600.0  # instead: a stop-time self-check of the job's machines names the one culprit
    healthy_return_s: float = 3600.0  # an over-evicted healthy node passes its self-check and rejoins the pool
    pool_aware: bool = False  # a group larger than the free pool: diagnose (and evict one) rather than requeue

    def validate(self) -> None:
        """Raise `ParamError` naming the first bad eviction value."""
        if self.standby_pool < 0:
            raise ParamError(f"standby_pool: must be >= 0 (got {self.standby_pool})")
        if self.over_evict_nodes < 1:
            raise ParamError(f"over_evict_nodes: must be >= 1 (got {self.over_evict_nodes})")
        bad = {k: v for k, v in self.ambiguous_share.items() if k not in DETECTOR_KIND or not 0 <= v <= 1}
        if bad:
            raise ParamError(f"ambiguous_share: kinds must be known and shares in [0, 1] (got {bad})")
        if min(self.diagnosis_s, self.healthy_return_s, self.standby_replenish_s) < 0:
            raise ParamError("diagnosis_s, healthy_return_s and standby_replenish_s must be >= 0")


@dataclass(frozen=True, kw_only=True)
class BaselineCosts:
    """The usual path without trainguard: fail-stop, timeouts, people, requeue."""

    crash_detect_s: float = 60.0  # the job exits; the scheduler notices
    nccl_timeout_s: float = 600.0  # a hang surfaces only when the NCCL watchdog fires
    log_triage_s: float = 1800.0  # an engineer reads logs, finds and cordons the node
    hang_diagnosis_s: float = 2 * 3600.0
    slowdown_notice_s: float = 3 * 3600.0  # someone notices the MFU dashboard
    slowdown_diagnosis_s: float = 4 * 3600.0  # bisecting nodes by hand
    nan_notice_s: float = 3600.0
    nan_diagnosis_s: float = 2 * 3600.0
    sdc_notice_s: float = 24 * 3600.0  # loss divergence is noticed long after the corruption
    sdc_diagnosis_s: float = 8 * 3600.0
    requeue_s: float = 1800.0  # reschedule 1,200 pods, pull images, rendezvous, NCCL init
    remote_load_s: float = 600.0  # load the checkpoint from remote storage


@dataclass(frozen=True, kw_only=True)
class SimParams:
    """Everything one run needs."""

    job: JobParams = field(default_factory=JobParams)
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    trainguard: TrainguardCosts = field(default_factory=TrainguardCosts)
    baseline: BaselineCosts = field(default_factory=BaselineCosts)
    trace_servers: int = 400  # servers in the InfiniteHBD trace, faulty or not
    rate_scale: float = 1.0  # multiply the trace's fault rate
    # Kinds that come from the job (its code, its people, its numerics), not from its nodes: their rate is
    # the mix's at `reference_nodes` and does not grow with a larger job. 0 = scale them like hardware.
    job_borne: frozenset[str] = frozenset({"manual_restart", "user_error", "nan"})
    reference_nodes: int = 1200  # the job size the mix was observed at (ByteRobust's 9,600-GPU job)

    def validate(self) -> SimParams:
        """Raise `ParamError` naming the first bad value; return self."""
        if self.job.nodes < 1 or self.job.days <= 0 or self.job.checkpoint_interval_s <= 0:
            raise ParamError("job: nodes, days and checkpoint_interval_s must be positive")
        if not 0 <= self.job.mfu_drop < 1:
            raise ParamError(f"job.mfu_drop: must be in [0, 1) (got {self.job.mfu_drop})")
        unknown = set(self.mix) - set(DETECTOR_KIND)
        if unknown:
            raise ParamError(f"mix: unknown kinds {sorted(unknown)} (known: {', '.join(DETECTOR_KIND)})")
        if any(v < 0 for v in self.mix.values()) or abs(sum(self.mix.values()) - 1.0) > 1e-6:
            raise ParamError(f"mix: fractions must be >= 0 and sum to 1 (sum {sum(self.mix.values()):.4f})")
        if self.rate_scale <= 0 or self.trace_servers < 1:
            raise ParamError("rate_scale and trace_servers must be positive")
        if self.reference_nodes < 0 or not self.job_borne <= set(DETECTOR_KIND):
            raise ParamError("reference_nodes must be >= 0 and job_borne must name known kinds")
        self.trainguard.validate()
        return self


def with_measured_latencies(costs: TrainguardCosts, report: Path | str) -> TrainguardCosts:
    """Replace detection latencies by a backtest report's `per_kind.<kind>.latency_median_s`.

    Kinds the report lacks (or reports as null) keep their defaults.
    """
    path = Path(report)
    if not path.is_file():
        raise ParamError(f"--latencies: backtest report {path} not found")
    try:
        per_kind: dict[str, Any] = json.loads(path.read_text())["per_kind"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ParamError(f"--latencies: {path} is not a backtest report.json (needs per_kind): {exc}") from None
    measured = dict(costs.detection_s)
    for kind, stats in per_kind.items():
        value = stats.get("latency_median_s") if isinstance(stats, dict) else None
        if kind in measured and isinstance(value, int | float):
            measured[kind] = float(value)
    return replace(costs, detection_s=measured)


def as_dict(params: SimParams) -> dict[str, Any]:
    """The parameters as plain data, for the JSON report."""
    def plain(obj: Any) -> Any:
        if hasattr(obj, "__dataclass_fields__"):
            return {f.name: plain(getattr(obj, f.name)) for f in fields(obj)}
        if isinstance(obj, frozenset):
            return sorted(obj)
        return obj

    out: dict[str, Any] = plain(params)
    return out

"""What one incident costs the job, under trainguard and under the baseline.

Unproductive time is split the way ByteRobust and our ETTR accountant split
it: *detection* (fault onset to detection), *localisation* (finding the
culprit), *failover* (getting the job running again) and *re-computation*
(progress since the last checkpoint, redone). While an MFU decline goes
unfixed the job still trains, at `1 - mfu_drop` of its speed, so only that
fraction of the detection and localisation time is lost. NaN and SDC keep
the job "running" on garbage, so all of their detection time is lost.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.lab.ettr_sim.params import DETECTOR_KIND, BaselineCosts, JobParams, TrainguardCosts

PHASES: tuple[str, ...] = ("detection", "localisation", "failover", "recompute")
# kinds whose fix evicts a node (and so wants a warm standby)
EVICTING: frozenset[str] = frozenset({"cuda_error", "machine_fault", "network", "hang", "mfu_decline", "sdc"})


@dataclass(frozen=True)
class Loss:
    """Unproductive seconds by phase.

    >>> (Loss(1, 2, 3, 4) + Loss(1, 0, 0, 0)).total_s
    11.0
    """

    detection_s: float = 0.0
    localisation_s: float = 0.0
    failover_s: float = 0.0
    recompute_s: float = 0.0

    @property
    def total_s(self) -> float:
        return float(self.detection_s + self.localisation_s + self.failover_s + self.recompute_s)

    def __add__(self, other: Loss) -> Loss:
        return Loss(self.detection_s + other.detection_s, self.localisation_s + other.localisation_s,
                    self.failover_s + other.failover_s, self.recompute_s + other.recompute_s)

    def scaled(self, factor: float) -> Loss:
        """Every phase times `factor` (clipping a loss at the end of the run)."""
        return Loss(self.detection_s * factor, self.localisation_s * factor,
                    self.failover_s * factor, self.recompute_s * factor)

    def as_dict(self) -> dict[str, float]:
        return {p: getattr(self, f"{p}_s") for p in PHASES}


@dataclass(frozen=True)
class Eviction:
    """Which nodes one incident takes out of the job under trainguard's policy.

    `healthy` is the over-eviction: nodes of the suspects' parallel group that
    were not at fault. `diagnose` says a stop-time self-check ran to name the
    one culprit instead (slower, but it evicts one node).
    """

    culprits: int = 0
    healthy: int = 0
    diagnose: bool = False

    @property
    def nodes(self) -> int:
        """Standbys this eviction needs."""
        return self.culprits + self.healthy


def plan_eviction(kind: str, c: TrainguardCosts, *, ambiguous: bool, free: int) -> Eviction:
    """What actions/engine.py does with an incident whose localisation is (or is not) ambiguous.

    A named culprit is evicted alone. Several suspects: over-evict the group of
    `over_evict_nodes` (1 = never: diagnose instead); with `pool_aware` a
    group larger than the `free` standbys is diagnosed rather than requeued.

    >>> c = TrainguardCosts(over_evict_nodes=8)
    >>> plan_eviction("hang", c, ambiguous=True, free=12)
    Eviction(culprits=1, healthy=7, diagnose=False)
    >>> plan_eviction("nan", c, ambiguous=True, free=12).nodes, plan_eviction("hang", c, ambiguous=False, free=0).nodes
    (0, 1)
    """
    if kind not in EVICTING:
        return Eviction()
    if not ambiguous:
        return Eviction(culprits=1)
    group = c.over_evict_nodes
    if group <= 1 or (c.pool_aware and 0 < free < group):
        return Eviction(culprits=1, diagnose=True)
    return Eviction(culprits=1, healthy=group - 1)


def trainguard_loss(kind: str, job: JobParams, c: TrainguardCosts, *, since_ckpt_s: float,
                    standby: bool, diagnose: bool = False) -> Loss:
    """The cost of one incident with trainguard.

    `standby` says whether enough warm standby nodes are free; without them
    an eviction falls back to a full requeue from the remote checkpoint.
    `diagnose` adds the stop-time self-check that names one machine.

    >>> trainguard_loss("hang", JobParams(), TrainguardCosts(), since_ckpt_s=600.0, standby=True).as_dict()
    {'detection': 61.0, 'localisation': 30.0, 'failover': 420.0, 'recompute': 600.0}
    """
    if kind == "manual_restart":  # checkpoint on demand, then an in-place hot update
        return Loss(failover_s=c.hot_update_s)
    detector = DETECTOR_KIND[kind] or ""
    detect = c.detection_s.get(detector, 0.0) + c.pipeline_latency_s
    localise = c.localisation_s.get(detector, 0.0)
    if kind == "mfu_decline":
        detect, localise = detect * job.mfu_drop, localise * job.mfu_drop
    if diagnose:  # the job stops for the self-check, whatever the kind
        localise += c.diagnosis_s
    if kind == "user_error":
        failover = c.hot_update_s  # roll the code back in place
    elif kind == "nan":  # roll back to the step before, same nodes (in-process when measured)
        failover = c.restart_s if c.inprocess_restart_s is None else c.inprocess_restart_s
    elif standby:
        failover = c.standby_swap_s + c.restart_s
    else:
        failover = c.requeue_s + c.remote_load_s
    return Loss(detect, localise, failover, since_ckpt_s)


def baseline_loss(kind: str, job: JobParams, b: BaselineCosts, *, since_ckpt_s: float) -> Loss:
    """The cost of one incident without trainguard (fail-stop, timeouts, people, requeue).

    >>> baseline_loss("hang", JobParams(), BaselineCosts(), since_ckpt_s=600.0).as_dict()
    {'detection': 600.0, 'localisation': 7200.0, 'failover': 2400.0, 'recompute': 600.0}
    """
    requeue = b.requeue_s + b.remote_load_s
    if kind == "manual_restart":
        return Loss(failover_s=requeue)
    detect, localise = {
        "cuda_error": (b.crash_detect_s, b.log_triage_s),
        "machine_fault": (b.crash_detect_s, b.log_triage_s),
        "user_error": (b.crash_detect_s, b.log_triage_s),
        "network": (b.nccl_timeout_s, b.log_triage_s),
        "hang": (b.nccl_timeout_s, b.hang_diagnosis_s),
        "mfu_decline": (b.slowdown_notice_s * job.mfu_drop, b.slowdown_diagnosis_s * job.mfu_drop),
        "nan": (b.nan_notice_s, b.nan_diagnosis_s),
        "sdc": (b.sdc_notice_s, b.sdc_diagnosis_s),
    }[kind]
    return Loss(detect, localise, requeue, since_ckpt_s)

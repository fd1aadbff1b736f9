"""Scenario files: the YAML that tells the simulator what fleet to run and what to break.

A scenario is validated with pydantic, so a typo or a bad value is reported
as one line naming the key (`faults.2.kind: ...`) instead of a simulation
that silently does something else. Times inside a scenario are offsets in
seconds from the scenario's `start_ts`; the recording carries absolute event
times. See docs/simulate-backtest.md for the full format.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainguard.schemas.kinds import IncidentKind

FaultKind = IncidentKind  # a Literal, so a bad kind is one line naming the key (schemas.kinds has the table)

# The variants each kind can take; the first is the default.
VARIANTS: dict[str, tuple[str, ...]] = {
    "hw_fault": ("xid", "dbe", "lost", "nvlink", "remap_failed", "nvml_timeout"),
    "network": ("port_down", "error_burst", "degraded", "fail_slow"),
    "hang": ("dataloader", "collective", "cuda_sync"),
    "slowdown": ("thermal", "power", "silent", "gradual"),
    "nan": ("loss", "grad", "inf_loss"),
    "loss_spike": ("spike", "single", "grad"),
    "sdc": ("checksum", "intermittent", "last_stage"),
    "user_error": ("import_error", "shape_mismatch", "syntax_error", "oom", "app_xid", "silent_startup", "sigkill"),
}


# The shapes a fault with no `variant` is drawn from: the original ones, so that adding a shape does not
# change what older scenarios (and their figures) contain. Newer shapes are used when named.
DRAWN: dict[str, tuple[str, ...]] = {
    "hw_fault": ("xid", "dbe", "lost", "nvlink", "remap_failed"),
    "network": ("port_down", "error_burst"),
    "hang": ("dataloader", "collective", "cuda_sync"),
    "slowdown": ("thermal", "power", "silent"),
    "nan": ("loss", "grad"),
    "loss_spike": ("spike",),
    "sdc": ("checksum",),
    "user_error": ("import_error", "shape_mismatch", "syntax_error", "oom"),
}


CheckpointStyle = Literal["sync", "async", "megatron"]


def _sync_only() -> list[CheckpointStyle]:
    return ["sync"]


class ScenarioError(ValueError):
    """A scenario file is invalid; the message is one line naming the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobSpec(_Strict):
    """The training job and the fleet it runs on."""

    name: str = "llm-pretrain"
    nodes: int = Field(4, ge=1, le=4096)
    gpus_per_node: int = Field(8, ge=1, le=16)
    tp: int = Field(8, ge=1)
    pp: int = Field(1, ge=1)
    node_prefix: str = "gpu-node-"
    step_time_s: float = Field(6.0, gt=0)
    comm_fraction: float = Field(0.15, ge=0, lt=1, description="share of a step spent in exposed communication")
    step_noise: float = Field(0.03, ge=0, le=0.5, description="lognormal sigma of the step time")
    drift: float = Field(0.02, ge=0, le=0.2, description="amplitude of the slow diurnal step-time drift")
    mfu: float = Field(0.42, gt=0, le=1)
    tokens_per_step: int = Field(4_194_304, ge=1)
    checkpoint_every_s: float = Field(1800.0, ge=0, description="0 disables checkpoints")
    checkpoint_pause_s: float = Field(45.0, ge=0)
    checkpoint_jitter: float = Field(0.0, ge=0, le=1, description="lognormal sigma of each sync checkpoint's length")
    slow_checkpoint_p: float = Field(0.0, ge=0, le=1, description="share of checkpoints written to a loaded "
                                     "shared filesystem, `slow_checkpoint_factor` times longer")
    slow_checkpoint_factor: float = Field(4.0, ge=1, le=20)
    eval_every_s: float = Field(0.0, ge=0, description="0 disables eval phases")
    eval_pause_s: float = Field(60.0, ge=0)
    restart_delay_s: float = Field(30.0, ge=0, description="init/checkpoint-load time after a restart")
    code_version: str = "v1"
    rdma_ports: int = Field(4, ge=1, le=16)
    first_node: int | None = Field(None, ge=0, description="fleet index of the job's first node; default: after "
                                   "the previous job's nodes")
    start_s: float = Field(0.0, ge=0, description="when the job starts (job churn)")
    end_s: float | None = Field(None, gt=0, description="when the job ends and frees its nodes; default: never")
    warmup_steps: int = Field(0, ge=0, description="LR warm-up: the loss plateaus and is noisier for these steps")
    checkpoint_styles: list[CheckpointStyle] = Field(
        default_factory=_sync_only, min_length=1,
        description="drawn per checkpoint: sync pauses; async (torch.distributed.checkpoint.async_save) stages "
                    "briefly then overlaps steps; megatron announces checkpointing, training, eval at once")

    @model_validator(mode="after")
    def _layout_fits(self) -> JobSpec:
        world = self.nodes * self.gpus_per_node
        if world % (self.tp * self.pp):
            raise ValueError(f"tp*pp ({self.tp}*{self.pp}) must divide nodes*gpus_per_node ({world})")
        return self


class RateSpec(_Strict):
    """How often each periodic telemetry stream reports (seconds)."""

    heartbeat_s: float = Field(10.0, gt=0)
    gpu_sample_s: float = Field(10.0, gt=0)
    rdma_sample_s: float = Field(10.0, gt=0)
    stack_sample_s: float = Field(0.0, ge=0, description="periodic stacks when healthy; 0: only when hung")


class BackgroundSpec(_Strict):
    """Benign noise that a good detector must ignore."""

    benign_xids_per_node_h: float = Field(0.05, ge=0, description="application XIDs 13/31/43")
    rdma_errors_per_port_h: float = Field(0.5, ge=0, description="isolated single symbol errors")
    log_lines_per_node_h: float = Field(2.0, ge=0)
    dataloader_stalls_per_h: float = Field(0.0, ge=0, description="steps delayed 5-15 s by a slow data loader")
    restarts_per_day: float = Field(0.0, ge=0, description="fault-free restarts (preemption, planned updates)")


class FleetSpec(_Strict):
    """What makes a real fleet messy, beyond the jobs themselves."""

    clock_skew_s: float = Field(0.0, ge=0, le=30, description="each host's clock is off by up to this (uniform)")
    delivery_jitter_s: float = Field(0.0, ge=0, le=30, description="records reach the stream up to this late, "
                                     "so hosts interleave out of event-time order")
    idle_nodes: int = Field(0, ge=0, le=4096, description="nodes in no job: hardware telemetry only")
    jobless_hardware: bool = Field(False, description="GPU/RDMA samples carry no job (a DaemonSet collector)")
    torchrun_prefix: bool = Field(False, description="rank output lines carry torchrun's [rankN]: prefix")
    per_rank_phases: bool = Field(False, description="every rank announces its own phases, not one per job")
    phase_spread_s: float = Field(0.0, ge=0, le=30, description="pipeline stages reach a pause up to this apart")


class FaultSpec(_Strict):
    """One fault to inject. Unset places and shapes are drawn from the seed."""

    kind: FaultKind
    at_s: float = Field(ge=0)
    duration_s: float | None = Field(None, gt=0)
    variant: str | None = None
    node: int | None = Field(None, ge=0)
    gpu: int | None = Field(None, ge=0)
    rank: int | None = Field(None, ge=0)
    code: int | None = Field(None, ge=0, description="XID code for hw_fault/xid")
    magnitude: float | None = Field(None, gt=0, description="slowdown: throughput loss 0..1; loss_spike: factor; "
                                    "network/degraded: the port's bandwidth share")
    job: int = Field(0, ge=0, description="which job (0: `job`, 1..: `jobs`); node/rank are within that job")

    @model_validator(mode="after")
    def _variant_known(self) -> FaultSpec:
        if self.variant is not None and self.variant not in VARIANTS[self.kind]:
            raise ValueError(f"variant {self.variant!r} is not one of {', '.join(VARIANTS[self.kind])}")
        if self.kind == "slowdown" and self.magnitude is not None and self.magnitude >= 1:
            raise ValueError("slowdown magnitude is a throughput loss fraction and must be < 1")
        return self


class TraceSpec(_Strict):
    """Draw fault arrivals from the InfiniteHBD trace (see `lab.telemetry_sim.trace`)."""

    path: Path
    time_scale: float = Field(60.0, gt=0, description="simulated seconds per trace day")
    start_day: float = Field(0.0, ge=0)
    kinds_map: dict[str, str] | None = Field(None, description="trace Desc or Class -> kind[/variant] or 'ignore'")
    max_faults: int = Field(50, ge=0)


class Scenario(_Strict):
    """A whole scenario file."""

    name: str
    description: str = ""
    seed: int = 0
    start_ts: float = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    duration_s: float = Field(gt=0)
    job: JobSpec = Field(default_factory=JobSpec)
    jobs: list[JobSpec] = Field(default_factory=list, description="further concurrent or later jobs")
    fleet: FleetSpec = Field(default_factory=FleetSpec)
    rates: RateSpec = Field(default_factory=RateSpec)
    background: BackgroundSpec = Field(default_factory=BackgroundSpec)
    faults: list[FaultSpec] = Field(default_factory=list)
    faults_from_trace: TraceSpec | None = None

    @property
    def all_jobs(self) -> list[JobSpec]:
        """`job` then `jobs`, each with its fleet position filled in."""
        out, nxt = [], 0
        for spec in [self.job, *self.jobs]:
            first = spec.first_node if spec.first_node is not None else nxt
            out.append(spec.model_copy(update={"first_node": first}))
            nxt = max(nxt, first + spec.nodes)
        return out

    @property
    def fleet_nodes(self) -> int:
        """Nodes in the fleet: every job's plus the idle ones."""
        return max(j.first_node + j.nodes for j in self.all_jobs) + self.fleet.idle_nodes  # type: ignore[operator]

    @model_validator(mode="after")
    def _places_exist(self) -> Scenario:
        jobs = self.all_jobs
        if len({j.name for j in jobs}) < len(jobs):
            raise ValueError("jobs: every job needs its own name")
        for a, ja in enumerate(jobs):
            for jb in jobs[a + 1:]:
                if _overlap(ja, jb, self.duration_s):
                    raise ValueError(f"jobs: {ja.name} and {jb.name} share nodes at the same time")
        for i, fault in enumerate(self.faults):
            if fault.job >= len(jobs):
                raise ValueError(f"faults.{i}.job: {fault.job} but there are {len(jobs)} jobs")
            job = jobs[fault.job]
            if fault.at_s >= self.duration_s:
                raise ValueError(f"faults.{i}.at_s: {fault.at_s} is not before duration_s {self.duration_s}")
            if not job.start_s <= fault.at_s < (job.end_s or self.duration_s):
                raise ValueError(f"faults.{i}.at_s: {fault.at_s} is outside job {job.name}'s lifetime")
            if fault.node is not None and fault.node >= job.nodes:
                raise ValueError(f"faults.{i}.node: {fault.node} but the job has {job.nodes} nodes")
            if fault.gpu is not None and fault.gpu >= job.gpus_per_node:
                raise ValueError(f"faults.{i}.gpu: {fault.gpu} but nodes have {job.gpus_per_node} GPUs")
            if fault.rank is not None and fault.rank >= job.nodes * job.gpus_per_node:
                raise ValueError(f"faults.{i}.rank: {fault.rank} is outside the world size")
            if fault.kind == "sdc" and job.nodes * job.gpus_per_node < 2 * job.tp * job.pp:
                raise ValueError(f"faults.{i}.kind: sdc needs data parallelism (dp >= 2) to compare replicas")
        return self

    def for_job(self, index: int) -> Scenario:
        """This scenario narrowed to one job and its faults (the engine simulates one job at a time)."""
        job = self.all_jobs[index]
        faults = [f for f in self.faults if f.job == index]
        return self.model_copy(update={"job": job, "jobs": [], "faults": faults, "seed": self.seed + 7 * index,
                                       "faults_from_trace": self.faults_from_trace if index == 0 else None})


def _overlap(a: JobSpec, b: JobSpec, duration: float) -> bool:
    nodes = a.first_node < b.first_node + b.nodes and b.first_node < a.first_node + a.nodes  # type: ignore[operator]
    times = a.start_s < (b.end_s or duration) and b.start_s < (a.end_s or duration)
    return nodes and times


def parse_scenario(data: object, source: str = "scenario") -> Scenario:
    """Validate already-parsed YAML; raise `ScenarioError` with one line."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(root)"
        value = err.get("input")
        shown = "" if isinstance(value, (dict, list)) else f" (got {value!r})"
        msg = str(err["msg"]).removeprefix("Value error, ")
        if not err["loc"]:  # scenario-wide checks name their key in the message
            raise ScenarioError(f"{source}: {msg}") from None
        raise ScenarioError(f"{source}: {key}: {msg}{shown}") from None


def load_scenario(path: Path | str) -> Scenario:
    """Read and validate a scenario YAML file.

    Relative paths inside the file (the trace path) are resolved against the
    current directory, as CI runs from the repository root.
    """
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(f"scenario file {path}: not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError(f"scenario file {path}: invalid YAML: {exc}".replace("\n", " ")) from None
    return parse_scenario(data, str(path))

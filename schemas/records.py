"""The record types: one msgspec Struct per kind of event.

Every record is a tagged struct: its JSON object carries `"type": "<tag>"`,
so one decoder reads any record and a recording line needs no side table.
Records are frozen: detectors and actions can share them without copying
and can never mutate their input.

Floats that may legitimately be non-finite (loss, grad norm) are `Metric`s.
In Python a metric is a float, NaN and Inf included. On the wire it is a JSON
number, or one of the strings "nan", "inf", "-inf": JSON has no NaN literal
and msgspec would write NaN as null, which would lose exactly the fact the
NaN detector needs. The record turns the strings into floats as it is
decoded (every decoder: JSON, msgpack snapshots, `convert`), and the codec
spells non-finite floats as strings again when it encodes (`metric()`), so
producers that send the strings and recordings made before keep working.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from trainguard.schemas.action_params import ActionParams, NoParams
from trainguard.schemas.actions import ActionName, params_problem, with_defaults
from trainguard.schemas.bounds import (
    MAX_GPUS,
    MAX_RANKS,
    MAX_STEP,
    EventTime,
    GpuIndex,
    JobName,
    Name,
    Rank,
    Ranks,
    Step,
)
from trainguard.schemas.kinds import ANOMALY_KINDS as ANOMALY_KINDS  # re-exported: the table is schemas.kinds
from trainguard.schemas.kinds import AnomalyKind
from trainguard.schemas.plan import PlannedAction, check_plan

SCHEMA_VERSION = 1

NonFinite = Literal["nan", "inf", "-inf"]
if TYPE_CHECKING:
    Metric = float  # once decoded a metric is a float, NaN and Inf included
else:
    Metric = float | NonFinite  # what msgspec accepts: the wire spells non-finite values as strings

Phase = Literal["init", "training", "checkpointing", "eval", "idle", "stopped"]


def metric(value: float | None) -> float | NonFinite | None:
    """A metric as the wire spells it: finite floats as they are, NaN and Inf as strings.

    >>> metric(1.5), metric(float("nan")), metric(float("-inf")), metric(None)
    (1.5, 'nan', '-inf', None)
    """
    if value is None or math.isfinite(value):
        return value
    if math.isnan(value):
        return "nan"
    return "inf" if value > 0 else "-inf"


class Record(
    msgspec.Struct,
    kw_only=True,
    frozen=True,
    forbid_unknown_fields=True,
    tag_field="type",
    gc=False,
):
    """Base of every record: a schema version and an event time in seconds."""

    ts: float
    schema_version: int = SCHEMA_VERSION


class Observed(Record, frozen=True):
    """Base of what hosts report (samples, steps, beats, logs): its event time is bounded.

    Findings and audit records keep the plain `Record` time: the worker and
    act write them, and a dead letter carries the broker's time of whatever
    it quarantines, however absurd.
    """

    ts: EventTime


# --------------------------------------------------------------------- hardware


class XidEvent(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, gc=False):
    """One XID error reported by the driver for one GPU."""

    gpu: GpuIndex
    code: int
    ts: EventTime
    message: str = ""


class GpuStats(
    msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, gc=False, omit_defaults=True
):
    """One GPU's readings within a node sample. Counters are cumulative.

    Fields at their default (zero counters, healthy flags) are left out of
    the JSON: they are most of an 8-GPU sample, and dropping them halves its
    size and makes decoding ~1.5x faster. Decoders fill them back in.
    """

    index: GpuIndex
    uuid: Name = ""
    util_pct: float = 0.0
    sm_clock_mhz: float = 0.0
    max_sm_clock_mhz: float = 0.0
    mem_used_mb: float = 0.0
    power_w: float = 0.0
    temp_c: float = 0.0
    throttle_reasons: int = 0
    ecc_sbe: int = 0
    ecc_dbe: int = 0
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_failed: bool = False
    remap_pending: bool = False
    nvlink_errors: int = 0
    pcie_replays: int = 0
    recovery_action: int = 0
    lost: bool = False


class NodeGpuSample(Observed, tag="gpu_sample", frozen=True):
    """All GPUs of one node at one instant, plus XIDs seen since the last sample.

    `nvml_ok` is False when the source is missing, failing or timed out: the
    node is then *unobserved*, never healthy, and `error` says why. `source`
    names who read the GPUs: "" is trainguard's own NVML collector,
    "dcgm-exporter" a scrape of NVIDIA's exporter (a hung exporter is not a
    hung GPU, so detectors read its timeouts differently).
    """

    node: Name
    gpus: Annotated[list[GpuStats], msgspec.Meta(max_length=MAX_GPUS)] = []
    xids: list[XidEvent] = []
    nvml_ok: bool = True
    error: str = ""
    job: Name = ""
    source: str = ""


class RdmaPort(
    msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True, gc=False, omit_defaults=True
):
    """One InfiniBand/RoCE port: byte rates and cumulative error counters."""

    device: Name
    port: int
    state: str = "ACTIVE"
    tx_bytes: int = 0
    rx_bytes: int = 0
    tx_bps: float = 0.0
    rx_bps: float = 0.0
    link_downed: int = 0
    symbol_errors: int = 0
    rcv_errors: int = 0
    xmit_discards: int = 0
    link_error_recovery: int = 0


class RdmaSample(Observed, tag="rdma_sample", frozen=True):
    """All RDMA ports of one node at one instant."""

    node: Name
    ports: list[RdmaPort] = []
    job: Name = ""


class NodeCondition(Observed, tag="node_condition", frozen=True):
    """A sticky node condition set by node-problem-detector (or another problem daemon).

    A condition is a state with a transition time (`since`), unlike an event:
    `status` "True" means the problem is present. NPD's transient Events
    travel as `LogEvent`s instead (source "node-problem-detector").
    """

    node: Name
    condition: str
    status: Literal["True", "False", "Unknown"] = "True"
    reason: str = ""
    message: str = ""
    since: float = 0.0
    source: str = "node-problem-detector"
    job: Name = ""


# --------------------------------------------------------------------- training


class TrainingStep(Observed, tag="step", frozen=True):
    """One finished optimizer step on one rank.

    `checksum` is a digest of parameters or gradients that must be identical
    across data-parallel replicas of the same (tp, pp) shard; it is how SDC is
    caught. `compute_time_s` excludes waiting in collectives, which is what
    tells a straggler from its victims.
    """

    job: JobName
    rank: Rank
    node: Name
    step: Step
    loss: Metric
    grad_norm: Metric | None = None
    tokens: int = 0
    step_time_s: float = 0.0
    compute_time_s: float | None = None
    mfu: float | None = None
    dp: Ranks = 0
    tp: Ranks = 0
    pp: Ranks = 0
    checksum: str | None = None
    code_version: str = ""
    attempt: Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)] = 0

    def __post_init__(self) -> None:
        """Decoded, a metric is a float: "nan", "inf" and "-inf" from the wire become floats here."""
        if self.loss.__class__ is str:
            msgspec.structs.force_setattr(self, "loss", float(self.loss))
        if self.grad_norm.__class__ is str:
            msgspec.structs.force_setattr(self, "grad_norm", float(self.grad_norm))  # type: ignore[arg-type]


class Heartbeat(Observed, tag="heartbeat", frozen=True):
    """A liveness beat from a training process, sent from a background thread."""

    job: JobName
    rank: Rank
    node: Name
    pid: int = 0
    step: Step = 0
    phase: Phase = "training"


class PhaseChange(Observed, tag="phase", frozen=True):
    """The job announces it enters a phase (checkpointing, eval ...)."""

    job: JobName
    phase: Phase
    rank: Rank = 0
    node: Name = ""
    step: Step = 0


class CheckpointEvent(Observed, tag="checkpoint", frozen=True):
    """A checkpoint announcement; `status` moves started -> saved (or failed).

    A job's own checkpoint leaves `tier` empty. trainguard's checkpoint manager
    announces every copy it completes, one per rank and tier ("memory" = the
    rank's own CPU memory, "peer" = a backup in another machine's memory,
    "disk" = local disk, "durable" = the shared store), with its `checksum`,
    and `restored` when a rank has loaded a step from a tier.
    """

    job: JobName
    step: Step
    path: str
    status: Literal["started", "saved", "failed", "invalid", "restored"] = "saved"
    rank: Rank = 0
    code_version: str = ""
    tier: Literal["", "memory", "peer", "disk", "durable"] = ""
    checksum: str = ""
    world_size: Ranks = 0  # ranks whose shards make the step complete (0: unknown)
    node: Name = ""  # the machine holding this copy


class LogEvent(Observed, tag="log", frozen=True):
    """One interesting log line (CUDA, NCCL, XID, traceback, exit code)."""

    node: Name
    level: str
    source: str
    message: str
    job: Name = ""
    rank: Rank | None = None
    category: str = ""
    exit_code: int | None = None
    code_version: str = ""  # of the process that printed it, when a supervisor knows


class StackSample(Observed, tag="stack", frozen=True):
    """The Python stack of one training process; frames outermost first."""

    job: JobName
    rank: Rank
    node: Name
    frames: list[str]
    pid: int = 0
    reason: str = ""


class CustomMetric(Observed, tag="custom", frozen=True):
    """A user's own numeric signal: named values of one job, node or rank.

    The no-code path for signals trainguard has no record for (data-loader
    wait, tokens dropped, an eval score): publish them as `CustomMetric(name=...)`
    and configure a `metric_anomaly` detector on `custom:<name>` and a value.
    """

    name: str
    values: dict[str, Metric] = {}
    job: Name = ""
    node: Name = ""
    rank: Rank | None = None
    labels: dict[str, str] = {}

    def __post_init__(self) -> None:
        """Decoded, every value is a float ("nan"/"inf" strings from the wire included)."""
        if any(v.__class__ is str for v in self.values.values()):
            msgspec.structs.force_setattr(self, "values", {k: float(v) for k, v in self.values.items()})


class AttemptKey(Observed, tag="attempt_key", frozen=True):
    """A node agent's announcement of the key one attempt of its job signs with.

    The agent mints an Ed25519 pair each time it starts the training process and
    hands the private half to it as a file; this record carries the public half,
    signed with the agent's *node* key (so only that node's agent can announce
    it). act then accepts the job's checkpoint and topology records only when one
    of the current attempt's announced keys signed them (`actions.attempt_keys`).
    `key_id` is `<job>/<attempt>/<node>/<random>`: a fresh id per start.
    """

    job: JobName
    attempt: Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)]
    node: Name
    key_id: Annotated[str, msgspec.Meta(max_length=512)]
    public_key: Annotated[str, msgspec.Meta(max_length=64)]  # base64 of the raw 32-byte Ed25519 key


class JobTopology(Observed, tag="topology", frozen=True):
    """The job's parallel layout and where each rank runs."""

    job: JobName
    world_size: Ranks
    tp: Ranks = 1
    pp: Ranks = 1
    dp: Ranks = 1
    rank_nodes: Annotated[dict[Rank, Name], msgspec.Meta(max_length=MAX_RANKS)] = {}


# ----------------------------------------------------------------- findings


class Anomaly(Record, tag="anomaly", frozen=True):
    """One detector's finding, localised as precisely as the detector can.

    `ts` is the event time at which it was detected; `onset` is the event time
    at which the detector believes the fault began.
    """

    id: str
    kind: AnomalyKind
    detector: str
    onset: float
    job: str = ""
    nodes: list[str] = []
    ranks: list[int] = []
    gpus: list[str] = []
    group: str = ""
    step: int | None = None
    score: float = 1.0
    evidence: dict[str, Any] = {}


class Incident(Record, tag="incident", frozen=True):
    """Anomalies about one fault, merged: one per job and kind and episode."""

    id: str
    kind: AnomalyKind
    job: str
    onset: float
    detected_at: float
    nodes: list[str] = []
    ranks: list[int] = []
    gpus: list[str] = []
    group: str = ""
    step: int | None = None
    anomaly_ids: list[str] = []
    evidence: dict[str, Any] = {}


# ------------------------------------------------------------------ actions


# The action names and what each means: schemas/actions.py; plan steps and their references: schemas/plan.py.


class Decision(Record, tag="decision", frozen=True):
    """What the decision engine chose for an incident, and why."""

    id: str
    incident_id: str
    job: str
    kind: AnomalyKind
    rule: str
    plan: list[PlannedAction]
    reason: str
    inputs: dict[str, Any] = {}
    alternatives: list[str] = []
    dry_run: bool = False
    status: Literal["planned", "awaiting_approval", "blocked", "executed", "failed", "observed"] = "planned"
    # The rollout mode it was taken in (actions.rollout; "" before modes existed) and, for an
    # observed one, why the rails would have refused its evictions ("" if they would have passed).
    rollout: str = ""
    would_block: str = ""

    def __post_init__(self) -> None:
        check_plan(self.plan)  # a step referring to a later (or missing) step is a malformed decision


class ActionCommand(Record, tag="action_command", frozen=True):
    """A signed instruction to an executor or an on-node agent.

    `ts` is the issue time and `expires` the time after which no agent may
    carry it out. The Ed25519 signature is detached: it travels in the Kafka
    message's headers and covers these bytes exactly (see `schemas.signing`);
    an unsigned, forged, expired or replayed command is refused and audited.
    """

    id: str
    action: ActionName
    job: str = ""
    nodes: list[str] = []
    ranks: list[int] = []
    params: ActionParams = NoParams()
    decision_id: str = ""
    incident_id: str = ""
    expires: float = 0.0

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "params", with_defaults(self.action, self.params))
        if problem := params_problem(self.action, self.params):
            raise ValueError(problem)  # a command an agent would misread is not a command


class ActionResult(Record, tag="action_result", frozen=True):
    """The outcome of one command, published by whoever carried it out."""

    command_id: str
    action: ActionName
    status: Literal["ok", "failed", "rejected", "skipped"]
    message: str = ""
    job: str = ""
    node: str = ""
    details: dict[str, Any] = {}


class AuditEntry(Record, tag="audit", frozen=True):
    """An entry of the append-only audit trail of every decision and action."""

    event: str
    subject_id: str
    detail: dict[str, Any] = {}
    actor: str = ""


OperatorVerb = Literal["approve", "reject", "reset_breaker", "return_node", "set_rollout",
                       "release_node", "verdict"]


class OperatorCommand(Record, tag="operator_command", frozen=True):
    """A human's instruction to the action consumer, sent by the console.

    `operator` is the identity the console authenticated (token name, basic-auth
    user or the OIDC ingress's header); `subject_id` is the decision (approve,
    reject), node (return_node, release_node) or incident (verdict) it concerns. The console signs the exact bytes
    with its own key (`security.console_private_key`, headers as for commands)
    and sets `expires`; act acts only on a command signed by a key of
    `security.console_public_keys`, unexpired and not seen before. `report` is
    shown to people only: act returns a node on a self-check it holds itself,
    never on a report in the request. The action consumer applies it
    (`actions.operator`) and audits it under the operator's name.
    """

    id: str
    verb: OperatorVerb
    operator: str
    subject_id: str = ""
    reason: str = ""
    report: dict[str, Any] = {}
    expires: float = 0.0
    mode: str = ""  # set_rollout: the new mode of subject_id ("default", "kind:<kind>" or "rule:<rule>")
    verdict: str = ""  # verdict: "true", "false" or "unsure" for the incident subject_id names; reason is the note


class DeadLetter(Record, tag="dead_letter", frozen=True):
    """A message that could not be used, with the reason.

    The original is kept whole up to a size that always fits a Kafka
    message; a bigger one is cut (`truncated`), and `original_size`,
    `sha256` and (`source_topic`, `partition`, `offset`) say what and where
    the original is.
    """

    source_topic: str
    reason: str
    original_b64: str
    partition: int = -1
    offset: int = -1
    key_b64: str = ""
    original_size: int = -1
    truncated: bool = False
    sha256: str = ""

"""Versioned event records shared by every part of trainguard.

Everything that flows over Kafka is one of the records in `schemas.records`,
encoded as JSON by `schemas.codec`. Records carry their own event time `ts`
(seconds since the epoch) and a `schema_version`, so that consumers never
depend on Kafka's timestamps and a producer of a newer format is refused
with a clear reason instead of being misread.
"""

from trainguard.schemas.codec import Codec, DecodeError, decode, encode
from trainguard.schemas.records import (
    ANOMALY_KINDS,
    SCHEMA_VERSION,
    ActionCommand,
    ActionResult,
    Anomaly,
    AuditEntry,
    CheckpointEvent,
    CustomMetric,
    DeadLetter,
    Decision,
    GpuStats,
    Heartbeat,
    Incident,
    JobTopology,
    LogEvent,
    NodeCondition,
    NodeGpuSample,
    PhaseChange,
    PlannedAction,
    RdmaPort,
    RdmaSample,
    Record,
    StackSample,
    TrainingStep,
    XidEvent,
    metric,
)

__all__ = [
    "ANOMALY_KINDS",
    "SCHEMA_VERSION",
    "ActionCommand",
    "ActionResult",
    "Anomaly",
    "AuditEntry",
    "CheckpointEvent",
    "Codec",
    "CustomMetric",
    "DeadLetter",
    "Decision",
    "DecodeError",
    "GpuStats",
    "Heartbeat",
    "Incident",
    "JobTopology",
    "LogEvent",
    "NodeCondition",
    "NodeGpuSample",
    "PhaseChange",
    "PlannedAction",
    "RdmaPort",
    "RdmaSample",
    "Record",
    "StackSample",
    "TrainingStep",
    "XidEvent",
    "decode",
    "encode",
    "metric",
]

"""The `worker:` and `metrics:` sections, and the part of the settings tree the worker reads.

`WorkerConfig` names what `create_worker_app` needs, each section typed by the
package that owns it, so `streams` depends on no composed tree above it
(`trainguard.settings.Settings` satisfies it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from trainguard.actions.settings import ActionSettings
from trainguard.detectors.settings import DetectorSettings
from trainguard.schemas.kafka_config import BrokerSettings, TopicSettings
from trainguard.schemas.keys import SecuritySettings


class WorkerSettings(BaseModel):
    """The stream worker (streams.worker.factory): batch loop, event time, durable state."""

    model_config = ConfigDict(extra="forbid")

    app_id: str = "trainguard-worker"
    web_port: int = Field(6066, ge=1, le=65535)
    batch_within_s: float = Field(0.05, gt=0, description="longest wait for a fetch when input is quiet")
    fetch_max_records: int = Field(5000, ge=1, description="most messages one fetch hands over")
    max_waiting_records: int = Field(20_000, ge=2, description="records a task may hold for event time before "
                                                              "the partitions that run ahead are paused (resumed "
                                                              "under half of it)")
    state_dir: Path = Path(".trainguard/worker")
    max_ahead_s: float = Field(30.0, gt=0, description="a record dated further ahead of its partition or broker "
                                                       "timestamp is held, then dead-lettered; it never moves time")
    idle_after_s: float = Field(5.0, gt=0, description="a caught-up partition silent this long (wall clock) is set "
                                                       "aside from the watermark")
    confirm_within: int = Field(20, ge=1, description="later in-time records of a partition after which a held "
                                                     "future-dated record is dead-lettered")
    clock_skew_bound_s: float = Field(120.0, gt=0, description="a host whose clock is off by more than this against "
                                                               "the message timestamps and the other hosts gets "
                                                               "a clock_skew finding (flagged, never corrected)")
    exactly_once: bool = Field(True, description="outputs, detector snapshots and input offsets in one Kafka "
                                                 "transaction; off: at-least-once, no snapshots")
    commit_interval_s: float = Field(1.0, gt=0, description="how often outputs, a detector-state snapshot and input "
                                                            "offsets are committed (one transaction)")
    instance: str = Field("", description="stable name of this worker (transactional id, state key); "
                                          "empty: the host name")


class MetricsSettings(BaseModel):
    """Prometheus exposition."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    port: int = Field(0, ge=0, le=65535, description="0 disables the HTTP endpoint")
    lag_interval_s: float = Field(5.0, gt=0, description="how often the worker refreshes its consumer-lag gauge")


class KafkaConfig(Protocol):
    """The sections every Kafka edge of `streams` reads."""

    @property
    def broker(self) -> BrokerSettings: ...

    @property
    def topics(self) -> TopicSettings: ...


class WorkerConfig(KafkaConfig, Protocol):
    """The sections the worker reads."""

    @property
    def worker(self) -> WorkerSettings: ...

    @property
    def detectors(self) -> DetectorSettings: ...

    @property
    def metrics(self) -> MetricsSettings: ...

    @property
    def security(self) -> SecuritySettings: ...


class ActConfig(KafkaConfig, Protocol):
    """The sections `trainguard act`'s app reads."""

    @property
    def actions(self) -> ActionSettings: ...

    @property
    def security(self) -> SecuritySettings: ...

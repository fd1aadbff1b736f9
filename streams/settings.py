"""The `worker:` and `metrics:` sections, and the part of the settings tree the worker reads.

`WorkerConfig` names what `create_app` needs, each section typed by the
package that owns it, so `streams` depends on no composed tree above it
(`trainguard.settings.Settings` satisfies it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from detectors.settings import DetectorSettings
from schemas.kafka_config import BrokerSettings, TopicSettings
from schemas.keys import SecuritySettings


class WorkerSettings(BaseModel):
    """The Faust worker."""

    model_config = ConfigDict(extra="forbid")

    app_id: str = "trainguard-worker"
    web_port: int = Field(6066, ge=1, le=65535)
    batch_size: int = Field(500, ge=1)
    batch_within_s: float = Field(0.05, gt=0)
    fast_path: bool = Field(True, description="consume in whole fetches (streams.fastpath) instead of one Faust agent per topic")
    fetch_max_records: int = Field(5000, ge=1, description="most messages one fetch of the fast path hands over")
    state_dir: Path = Path(".trainguard/worker")


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

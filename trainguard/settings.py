"""All configuration in one typed tree: YAML file, then TRAINGUARD_* env vars.

Each package owns the model of its own section (detectors.settings,
actions.settings, collectors.settings); this module only composes them and
adds the edges' settings (broker, topics, worker). Environment variables
override the file, with `__` between levels, e.g.
`TRAINGUARD_BROKER__PORT=19092`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, YamlConfigSettingsSource

from actions.settings import ActionSettings
from collectors.settings import CollectorSettings
from detectors.settings import DetectorSettings
from schemas.keys import SecuritySettings


class BrokerSettings(BaseModel):
    """The Kafka cluster to talk to, and the local broker `trainguard broker` runs."""

    bootstrap: str = Field("", description="host:port list; empty means the local broker")
    host: str = "127.0.0.1"
    port: int = Field(9092, ge=1, le=65535)
    controller_port: int = Field(9093, ge=1, le=65535)
    data_dir: Path = Path(".trainguard/kafka")
    heap_mb: int = Field(512, ge=128)
    start_timeout_s: float = Field(90.0, gt=0)

    @property
    def servers(self) -> str:
        """The bootstrap servers clients use."""
        return self.bootstrap or f"{self.host}:{self.port}"


class TopicSettings(BaseModel):
    """Topic naming and layout."""

    prefix: str = "tg."
    partitions: int = Field(4, ge=1)
    replication: int = Field(1, ge=1)


class WorkerSettings(BaseModel):
    """The Faust worker."""

    app_id: str = "trainguard-worker"
    web_port: int = Field(6066, ge=1, le=65535)
    batch_size: int = Field(500, ge=1)
    batch_within_s: float = Field(0.05, gt=0)
    fast_path: bool = Field(True, description="consume in whole fetches (streams.fastpath) instead of one Faust agent per topic")
    fetch_max_records: int = Field(5000, ge=1, description="most messages one fetch of the fast path hands over")
    state_dir: Path = Path(".trainguard/worker")


class MetricsSettings(BaseModel):
    """Prometheus exposition."""

    enabled: bool = True
    port: int = Field(0, ge=0, le=65535, description="0 disables the HTTP endpoint")
    lag_interval_s: float = Field(5.0, gt=0, description="how often the worker refreshes its consumer-lag gauge")


class Settings(BaseSettings):
    """The whole configuration tree."""

    model_config = SettingsConfigDict(
        env_prefix="TRAINGUARD_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    broker: BrokerSettings = Field(default_factory=BrokerSettings)
    topics: TopicSettings = Field(default_factory=TopicSettings)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    detectors: DetectorSettings = Field(default_factory=DetectorSettings)
    actions: ActionSettings = Field(default_factory=ActionSettings)
    collectors: CollectorSettings = Field(default_factory=CollectorSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Precedence: explicit arguments, then TRAINGUARD_* variables, then the file.
        return (init_settings, env_settings, YamlConfigSettingsSource(settings_cls))


class ConfigError(ValueError):
    """A configuration value is invalid; the message is one line naming it."""


def load_settings(path: Path | str | None = None, **overrides: Any) -> Settings:
    """Load settings from `path` (YAML) and the environment.

    Raises `ConfigError` with one line, `key: problem`, on the first bad value.
    """
    yaml_path = Path(path) if path else None
    if yaml_path is not None and not yaml_path.is_file():
        raise ConfigError(f"config file {yaml_path}: not found")
    # A subclass per load carries the file path, so no global state is needed.
    config = SettingsConfigDict(**{**Settings.model_config, "yaml_file": yaml_path})
    loader = type("FileSettings", (Settings,), {"model_config": config})
    try:
        return loader(**overrides)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc)) from None
    except Exception as exc:  # YAML syntax errors and the like
        raise ConfigError(f"config file {yaml_path}: {exc}".replace("\n", " ")) from None


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    key = ".".join(str(p) for p in err["loc"]) or "(root)"
    value = err.get("input")
    shown = "" if isinstance(value, dict) else f" (got {value!r})"
    more = f" [+{exc.error_count() - 1} more]" if exc.error_count() > 1 else ""
    return f"config error: {key}: {err['msg']}{shown}{more}"
